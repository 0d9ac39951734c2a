"""Typed records of the files kept in the cache, not published: the variant binaries
`bench` compares, the stored PGO/BOLT profiles' sidecars, the step cache's entries, the
compiled dispatcher's entry. The
release's own records (build.json) are model/documents/records.py; the reading and writing that
both use, model/documents/record_io.py."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import ClassVar, Literal

from pydantic import Field

from orchestrator.model.documents.compose_record import DispatcherInfo
from orchestrator.model.documents.records import FileDigest, FileName, JsonDict, Record

Migrations = Mapping[int, Callable[[JsonDict], JsonDict]]


def _variants_v0_to_v1(document: JsonDict) -> JsonDict:
    """v0 (before records had a schema) held the same keys without naming its schema."""
    return {**document, "schema": "orchestrator/variants", "schema_version": 1}


class VariantsRecord(Record):
    """<cache>/variants/<sha256>/variants.json: every variant binary `bench` compares."""

    SCHEMA = "orchestrator/variants"
    VERSION = 1
    MIGRATIONS: ClassVar[Migrations] = {0: _variants_v0_to_v1}

    schema_: Literal["orchestrator/variants"] = Field("orchestrator/variants", alias="schema")
    schema_version: Literal[1] = 1
    image: str
    variants: dict[str, FileDigest]


def _profile_v0_to_v1(document: JsonDict) -> JsonDict:
    """v0 kept the tool's details at top level beside sha256 and size."""
    core = {"sha256", "size"}
    return {
        "schema": "orchestrator/profile",
        "schema_version": 1,
        **{k: v for k, v in document.items() if k in core},
        "details": {k: v for k, v in document.items() if k not in core},
    }


class ProfileSidecar(Record):
    """The .json beside a cached .profdata/.fdata: its hash, size and what made it."""

    SCHEMA = "orchestrator/profile"
    VERSION = 1
    MIGRATIONS: ClassVar[Migrations] = {0: _profile_v0_to_v1}

    schema_: Literal["orchestrator/profile"] = Field("orchestrator/profile", alias="schema")
    schema_version: Literal[1] = 1
    sha256: str
    size: int
    details: JsonDict
    # HMAC by a key kept outside the cache (host/cache_seal.py); None before seals existed
    seal: str | None = None

    def sealed_fields(self) -> JsonDict:
        return {"sha256": self.sha256, "size": self.size, "details": self.details}


class StepEntryRecord(Record):
    """<cache>/steps/<key>/step.json: the outputs of one cached step and what made them."""

    SCHEMA = "orchestrator/step"
    VERSION = 1

    schema_: Literal["orchestrator/step"] = Field("orchestrator/step", alias="schema")
    schema_version: Literal[1] = 1
    step: str
    key: str
    files: dict[FileName, FileDigest]
    made_by: str
    built_at: str
    # Inputs known only when the step runs (e.g. the vendored crates' digest): an entry
    # whose inputs differ from the running step's is not used.
    inputs: dict[str, str]
    # HMAC by a key kept outside the cache (host/cache_seal.py)
    seal: str | None = None

    def sealed_fields(self) -> JsonDict:
        return self.model_dump(mode="json", by_alias=True, exclude={"seal"})


class DispatcherCacheEntry(Record):
    """<cache>/dispatcher/<key>/dispatcher.json: the compiled dispatcher beside it and the
    seal that says this machine wrote both (host/cache_seal.py)."""

    SCHEMA = "orchestrator/dispatcher-cache"
    VERSION = 1

    schema_: Literal["orchestrator/dispatcher-cache"] = Field(
        "orchestrator/dispatcher-cache", alias="schema"
    )
    schema_version: Literal[1] = 1
    info: DispatcherInfo
    seal: str


class ImageArchiveRecord(Record):
    """<folder>/<input hash>.json beside <input hash>.tar (`build --target --image-cache`):
    a toolchain image as `docker save` wrote it, kept in a CI cache, and the seal that says
    a runner holding the cache key wrote it (host/cache_seal.py)."""

    SCHEMA = "orchestrator/image-archive"
    VERSION = 1

    schema_: Literal["orchestrator/image-archive"] = Field(
        "orchestrator/image-archive", alias="schema"
    )
    schema_version: Literal[1] = 1
    reference: str
    input_hash: str = Field(description="the image's key: the hash of everything it is made of")
    image_id: str = Field(
        description="sha256 of the image's config, which names every layer's digest: the "
        "engine checks each layer against it as it loads them"
    )
    size: int = Field(description="the archive's bytes")
    seal: str

    def sealed_fields(self) -> JsonDict:
        return self.model_dump(mode="json", by_alias=True, exclude={"seal"})

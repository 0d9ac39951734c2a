"""manifest.json of a training bundle (`build --train-elsewhere`): what train.sh runs and
the sha256 of every file it may run or read, so both train.sh and `build --profiles` can
refuse a bundle someone altered."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

BUNDLE_SCHEMA = "orchestrator/training-bundle-1"
# Paths inside the bundle end up in a shell script and in sha256sum's check list: only
# plain names, no quotes, spaces, newlines or climbing.
_PATH = re.compile(r"(bin|src|inputs)(/[A-Za-z0-9_+@%-][A-Za-z0-9_.+@%-]*)+")
_SHA256 = re.compile(r"[0-9a-f]{64}")


class BundleFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str  # relative to the bundle: bin/<name>, src/<crate file>, inputs/<name>/<file>
    sha256: str
    size: int = Field(ge=0)

    @field_validator("path")
    @classmethod
    def _plain_path(cls, value: str) -> str:
        if not _PATH.fullmatch(value) or "/../" in f"{value}/" or "/./" in f"{value}/":
            raise ValueError(f"not a plain bundle path: {value!r}")
        return value

    @field_validator("sha256")
    @classmethod
    def _hex(cls, value: str) -> str:
        if not _SHA256.fullmatch(value):
            raise ValueError("not a lowercase sha256")
        return value


class BundleWorkload(BaseModel):
    """One training run: `binary` is a bin/ file of the bundle; args as configured, where
    /build/src and /build/inputs stand for the bundle's src/ and inputs/ folders."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    index: int = Field(ge=0)  # its place in [train] workloads, the raw/w<index>/ folder
    binary: str
    args: tuple[str, ...]


class BundleGpuCheck(BaseModel):
    """One validation run checked on the training machine's GPU: `binary` run with
    `cpu_args` (the CPU reference) and with `gpu_args` (the flavor's `gpu_args` appended),
    both outputs brought back in profiles.tar as gpu/c<index>.* and gpu/g<index>.*."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    index: int = Field(ge=0)  # its place in the flavor's validation runs
    binary: str
    cpu_args: tuple[str, ...]
    gpu_args: tuple[str, ...]


class TrainingManifest(BaseModel):
    schema_: Literal["orchestrator/training-bundle-1"] = Field(
        "orchestrator/training-bundle-1", alias="schema"
    )
    package: str
    version: str
    flavor: str
    profile_key: str  # the plan's PgoPlan.profile_key: which build the profiles are for
    arch: Literal["x86_64", "aarch64"]  # as `uname -m` says it
    binaries: tuple[BundleFile, ...]
    data: tuple[BundleFile, ...]
    workloads: tuple[BundleWorkload, ...]
    workdir: str = "src"  # where the runs start, relative to the bundle
    stdin: str = ""  # a bundle path fed to every run's stdin ("" none)
    environment: dict[str, str] = Field(default_factory=dict)
    train_sh_sha256: str
    # GPU flavors with `gpu` not "off": the vendor train.sh looks for (nvidia-smi -L lists
    # a GPU; /dev/kfd for amd) and the validation runs it checks on it. "" and (): none.
    gpu_vendor: Literal["", "nvidia", "amd"] = ""
    gpu_checks: tuple[BundleGpuCheck, ...] = ()

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    def files(self) -> tuple[BundleFile, ...]:
        return self.binaries + self.data

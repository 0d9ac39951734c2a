"""release.lock: every input of a release, pinned, in a versioned, typed JSON record.

The lock has one entry per target. Each entry separates what the plan decided before
anything ran (`inputs`: recomputed and compared by `orchestrator lock --check`), what
the build resolved (Debian package closure with sha256s, toolchain versions as the tools
reported them, profiles), and what came out (`output`). Every blob it names by sha256
lives in the vault, so `orchestrator reproduce` needs the lockfile and the vault only.

A lockfile is untrusted input (it travels with a vault archive): every path in it must
stay inside the folder it is joined onto, every digest that names a file must be a
sha256, and the git commit must be a commit id. `read_lock` refuses anything else with
LockfileError naming the file and the key path, before anything is written.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, Field, StringConstraints
from pydantic import ValidationError as PydanticValidationError

from orchestrator import __version__
from orchestrator.config.nesting import loads_json
from orchestrator.errors import OrchestratorError
from orchestrator.model.documents.git_facts import GitFacts
from orchestrator.model.documents.records import (
    EngineRecord,
    FileName,
    JsonDict,
    Record,
    RunShape,
    record_text,
)

LOCK_FILE = "release.lock"
SCHEMA = "orchestrator/lock"
SCHEMA_VERSION = 1


class LockfileError(OrchestratorError):
    exit_code = 53
    summary = "not a lockfile, or a lockfile schema this version cannot read"
    # Most who read a lockfile did not write it (reproduce, vault export): say where an
    # intact one comes from before how its publisher makes another.
    default_hint = (
        "Use the release.lock published with the release, or the one in its vault archive "
        "(`orchestrator vault import ARCHIVE --lockfile release.lock`); whoever made the "
        "release writes a new one with `orchestrator lock`."
    )


class LockDriftError(OrchestratorError):
    exit_code = 54
    summary = "`lock --check`: the lockfile no longer matches the config or sources"
    default_hint = (
        "The configuration or sources changed since the lockfile was written. Release "
        "again to pin the new inputs, or restore the old ones."
    )


# -- field types ----------------------------------------------------------------------
def _inside(value: str, *, folder: bool) -> str:
    """`value` as a relative path that cannot leave the folder it is joined onto."""
    if not value:
        raise ValueError("must not be empty")
    if "\x00" in value:
        raise ValueError("must not contain a NUL byte")
    path = PurePosixPath(value)
    if path.is_absolute():
        raise ValueError(f"{value!r} is absolute; it must be relative to its folder")
    if ".." in path.parts:
        raise ValueError(f"{value!r} leaves its folder ('..')")
    if not folder and not path.parts:
        raise ValueError(f"{value!r} names no file")
    return value


def _file_path(value: str) -> str:
    return _inside(value, folder=False)


def _folder_path(value: str) -> str:
    return _inside(value, folder=True)


# a file below its folder: no absolute path, no `..`, not empty, no NUL
RelativeFile = Annotated[str, AfterValidator(_file_path)]
# the same for a folder, which may be the folder itself (".")
RelativeFolder = Annotated[str, AfterValidator(_folder_path)]
Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
GitCommit = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{40}(?:[0-9a-f]{24})?$")]


# -- the record -----------------------------------------------------------------------
class LockRelease(Record):
    name: str
    version: str


class LockConfig(Record):
    """The config file, verbatim: reproduce writes `text` to `file` in a fresh folder."""

    file: RelativeFile
    sha256: Sha256
    text: str


class LockCrate(Record):
    name: str
    version: str
    checksum: str


class LockInputArchive(Record):
    """One [train] input as packed (host/inputs.py); the archive is in the vault."""

    name: FileName  # where it is mounted: /build/inputs/<name>
    sha256: Sha256
    size: int


class LockSource(Record):
    git_commit: GitCommit | None
    dirty: bool | None
    repository_path: RelativeFile | None  # the config file's path in its git repository
    crate: RelativeFolder  # the crate's folder, relative to the config file's
    source_date_epoch: int
    source_archive_sha256: Sha256
    cargo_lock_sha256: Sha256
    vendor_sha256: Sha256
    crates: list[LockCrate]
    exclude: list[str] = Field(default_factory=list)  # [package] exclude, as configured
    inputs: list[LockInputArchive] = Field(default_factory=list)  # [train] inputs
    # What build scripts' `git` answered (reproduce serves the same); None: no repository
    git: GitFacts | None = None


class RootfsRecipe(Record):
    command: list[str]
    version: str | None


class LockBase(Record):
    suite: str
    mirror: str
    variant: str
    components: list[str]
    source_date_epoch: int
    mmdebstrap: RootfsRecipe
    rootfs_sha256: Sha256


class AptInputs(Record):
    components: list[str]
    architectures: list[str]
    suites: list[str] = Field(default_factory=list)  # the sysroot's suite, besides the base's


class BoltInputs(Record):
    mode: str
    flags: list[str]


class SharedPins(Record):
    """What every target of a release shares in its lock: the base rootfs (and how it was
    made), the vendored crates and the training inputs, by sha256 in the vault. A target
    folder built on its own (`build --target`) carries them, for `release assemble`."""

    rootfs_sha256: Sha256
    mmdebstrap: RootfsRecipe
    vendor_sha256: Sha256
    inputs: list[LockInputArchive] = Field(default_factory=list)


class LockInputs(Record):
    """What the plan fixes before anything runs (plan/serialize.py's `plan_inputs`)."""

    artifact: RelativeFolder
    flavor: str
    rust_target: str
    target_cpu: str
    toolchain: str
    base_image_input_hash: str
    image_input_hash: str
    apt: AptInputs
    packages: dict[str, str]
    unpack: dict[str, str]
    source_archive_sha256: Sha256
    cargo_lock_sha256: Sha256
    git: GitFacts | None = None  # what build scripts' `git` answered (None: no repository)
    rustflags: list[str]
    cargo: list[str]
    environment: dict[str, str]
    encoded_rustflags: dict[str, list[str]]
    cargo_test: list[str]
    gpu_targets: list[str]
    workloads: list[RunShape]
    validate_: list[str] = Field(alias="validate")  # `validate` is a BaseModel method
    validate_runs: list[RunShape] = Field(default_factory=list)
    pgo_profile_key: str | None
    bolt: BoltInputs | None
    # What workloads see ([train] env/stdin; None: neither set) and why tests were off
    run: JsonDict | None = None
    test_skipped: str = ""
    glibc_floor: str | None = None  # the glibc the binary was linked for (None: before floors)


class LockedPackage(Record):
    name: str
    version: str
    arch: str
    file: RelativeFile
    sha256: Sha256
    size: int


class LockedProfile(Record):
    sha256: Sha256
    size: int
    cache_file: RelativeFile  # below <cache>/profiles
    details: JsonDict  # what the build knew about it (function counts, BOLT mode)


class LockedBolt(Record):
    mode: str | None
    applied: bool | None


class LockedGate(Record):
    shipped: str  # the variant the speed gate shipped (release, pgo, pgo-bolt, ...)
    policy: str
    # The binaries BOLT rewrote that the gate put back unBOLTed in the BOLT variant
    unbolted: list[str] = Field(default_factory=list)


class LockResolved(Record):
    """What the build resolved: the .debs, the tools' own version reports, profiles."""

    packages: list[LockedPackage]
    package_set_sha256: Sha256
    toolchain_reported: JsonDict
    gpu_compiler: str | None
    profiles: dict[str, LockedProfile]
    bolt: LockedBolt | None
    gate: LockedGate | None = None  # None: no gate ran (or a lock from before gates)


class LockOutput(Record):
    file: RelativeFile
    sha256: Sha256
    size: int


class LockedTarget(Record):
    """One target's entry, from its plan and the build.json of its published artifact."""

    level: str
    inputs: LockInputs
    resolved: LockResolved
    output: LockOutput
    # package.binaries after the main one
    other_outputs: list[LockOutput] = Field(default_factory=list)
    # <artifact>.tar.xz beside the artifact folder (null: published before archives existed)
    archive: LockOutput | None = None
    # <artifact>.zip beside it, where archive.formats asked for one
    archive_zip: LockOutput | None = None
    built_on: EngineRecord | None = None  # the Docker Engine that built it (informative)


class LockLimits(Record):
    """What the build and profiling containers were allowed (limits.pids, limits.memory;
    0: no limit). A reproduction runs under the same, wherever it runs."""

    pids: int = Field(ge=0)
    memory: int = Field(ge=0)  # bytes


class LockDocument(Record):
    """release.lock."""

    SCHEMA = SCHEMA
    VERSION = SCHEMA_VERSION

    schema_: Literal["orchestrator/lock"] = Field("orchestrator/lock", alias="schema")
    schema_version: Literal[1] = 1
    written_by: str
    release: LockRelease
    config: LockConfig
    source: LockSource
    base: LockBase
    targets: list[LockedTarget]
    limits: LockLimits | None = None  # None: a lock from before container limits


M = TypeVar("M", bound=Record)


def _validated(model: type[M], document: object, where: str) -> M:
    """The document as `model`, or LockfileError naming `where` and the bad key's path."""
    try:
        return model.model_validate(document)
    except PydanticValidationError as error:
        first = error.errors()[0]
        path = ".".join(str(part) for part in first["loc"]) or "(top level)"
        more = f" (and {error.error_count() - 1} more)" if error.error_count() > 1 else ""
        raise LockfileError(f"{where}: {path}: {first['msg']}{more}") from None


def lock_document(
    *,
    name: str,
    version: str,
    config: Mapping[str, Any],
    source: Mapping[str, Any],
    base: Mapping[str, Any],
    targets: Sequence[LockedTarget],
    limits: LockLimits | None = None,
) -> LockDocument:
    document = {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "written_by": f"orchestrator {__version__}",
        "release": {"name": name, "version": version},
        "config": dict(config),
        "source": dict(source),
        "base": dict(base),
        "targets": sorted(targets, key=lambda t: t.inputs.artifact),
        "limits": limits.dump() if limits is not None else None,
    }
    return _validated(LockDocument, document, "the new lockfile")


def dumps(document: LockDocument) -> str:
    """Stable text: sorted keys, two-space indent, a final newline (diffs stay readable)."""
    return record_text(document)


def write_lock(path: Path, document: LockDocument) -> Path:
    """Write the lockfile, unless it already holds exactly this text: a release that pins
    what it pinned before leaves the file (and its mtime) as it was."""
    text = dumps(document)
    try:
        if path.is_file() and not path.is_symlink() and path.read_text() == text:
            return path
    except (OSError, UnicodeDecodeError):
        pass  # unreadable: written afresh
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text)
    partial.replace(path)
    return path


def parse_lock(document: object, where: str) -> LockDocument:
    """A decoded lockfile as a LockDocument; LockfileError names `where` and the key."""
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        raise LockfileError(f"{where} is not an orchestrator lockfile (schema {SCHEMA!r})")
    version = document.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version > SCHEMA_VERSION:
        raise LockfileError(
            f"{where} has lockfile schema version {version!r}; this orchestrator reads up "
            f"to {SCHEMA_VERSION}",
            hint="Use the orchestrator version that wrote it (see written_by), or a newer one.",
        )
    return _validated(LockDocument, document, where)


def read_lock(path: Path) -> LockDocument:
    if path.is_dir():
        path = path / LOCK_FILE
    try:
        document = loads_json(path.read_text())  # nesting bounded: a ValueError
    except FileNotFoundError:
        raise LockfileError(
            f"no lockfile at {path}",
            hint=f"Pass a release folder that holds {LOCK_FILE}, or the lockfile itself; "
            "`orchestrator vault import ARCHIVE --lockfile release.lock` takes one out of a "
            "release's vault archive.",
        ) from None
    except (OSError, ValueError) as exc:
        raise LockfileError(f"{path} is not a readable lockfile: {exc}") from exc
    return parse_lock(document, str(path))


def blobs(document: LockDocument) -> dict[str, str]:
    """Every vault blob the lock names: sha256 -> what it is (for messages and export)."""
    found = {
        document.base.rootfs_sha256: f"rootfs {document.base.suite}",
        document.source.vendor_sha256: "vendored crates",
    }
    for item in document.source.inputs:
        found[item.sha256] = f"input {item.name}"
    for target in document.targets:
        for package in target.resolved.packages:
            found[package.sha256] = package.file
        for name, profile in target.resolved.profiles.items():
            found[profile.sha256] = f"{target.inputs.artifact}/{name}"
    return found


def drift(
    locked: LockDocument | Sequence[LockedTarget], current: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """Human-readable differences between the locked inputs and the current plans.

    `locked` is a lock or some of its targets; `current` maps artifact names to
    `plan_inputs` of what the config builds now.
    """
    entries = locked.targets if isinstance(locked, LockDocument) else locked
    before = {t.inputs.artifact: t.inputs.dump() for t in entries}
    changes = [
        f"target {name} is new (not in the lock)" for name in sorted(set(current) - set(before))
    ]
    changes += [
        f"target {name} is locked but no longer configured"
        for name in sorted(set(before) - set(current))
    ]
    for name in sorted(set(before) & set(current)):
        changes += [f"{name}: {line}" for line in _differences(before[name], current[name])]
    return changes


def _differences(before: object, after: object, path: str = "") -> list[str]:
    """`key changed: old -> new` lines, descending into tables so the key is exact."""
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        lines: list[str] = []
        for key in sorted(set(before) | set(after), key=str):
            where = f"{path}.{key}" if path else str(key)
            lines += _differences(before.get(key), after.get(key), where)
        return lines
    if before == after:
        return []
    return [f"{path} changed: {_short(before)} -> {_short(after)}"]


def _short(value: object) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."

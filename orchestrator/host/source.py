"""The crate's sources and vendored crates: snapshots, and checks against Cargo.lock."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from orchestrator.config.nesting import loads_toml
from orchestrator.config.resolve.options import Options
from orchestrator.errors import SourceError
from orchestrator.host.packing import pack_tree
from orchestrator.host.staging import staging_root
from orchestrator.host.system import changed_paths, repository_path, source_identity
from orchestrator.model.hashing import sha256_bytes, sha256_file
from orchestrator.model.layout import BUILDER_UID
from orchestrator.plan.build_plan import SourceSnapshot

CRATES_IO = "registry+https://github.com/rust-lang/crates.io-index"
# Build outputs and VCS metadata are not sources.
_SKIPPED_TOP = {"target", ".git"}


def excluded_by(
    patterns: Sequence[str], folders: Sequence[PurePosixPath] = ()
) -> Callable[[PurePosixPath], bool]:
    """What `[package] exclude` leaves out, besides build outputs and VCS metadata: a
    pattern with a "/" matches the whole relative path, one without matches a name at any
    depth (as in .gitignore); a folder that matches takes everything below it along.
    `folders` (relative to the crate) are left out whole."""

    def skip(rel: PurePosixPath) -> bool:
        if rel.parts[0] in _SKIPPED_TOP or rel.name == ".git":
            return True
        if any(rel == folder or folder in rel.parents for folder in folders):
            return True
        text = rel.as_posix()
        return any(
            fnmatch.fnmatchcase(text, pattern.strip("/"))
            if "/" in pattern.strip("/")
            else fnmatch.fnmatchcase(rel.name, pattern.strip("/"))
            for pattern in patterns
        )

    return skip


@dataclass(frozen=True)
class CrateView:
    """What the crate's snapshot and identity read of the settings: the crate, the config
    that names it, orchestrator's own folders that may lie inside it, and how its sources
    are packed. Built once from Options where a caller has them."""

    crate_dir: Path
    config_path: Path
    artifacts_dir: Path
    cache_dir: Path
    source_date_epoch: int
    source_exclude: tuple[str, ...]

    @classmethod
    def from_options(cls, options: Options) -> CrateView:
        return cls(
            crate_dir=options.crate_dir,
            config_path=options.config_path,
            artifacts_dir=options.artifacts_dir,
            cache_dir=options.cache_dir,
            source_date_epoch=options.source_date_epoch,
            source_exclude=options.source_exclude,
        )


def own_folders(crate: CrateView) -> list[PurePosixPath]:
    """orchestrator's own folders inside the crate, relative to it: a config at the crate's
    root puts artifacts/ (and its staging folder, written while the build runs) there.
    They are not the crate's sources."""
    own = (crate.artifacts_dir, staging_root(crate.artifacts_dir), crate.cache_dir)
    return [
        PurePosixPath(folder.relative_to(crate.crate_dir).as_posix())
        for folder in own
        if folder.is_relative_to(crate.crate_dir) and folder != crate.crate_dir
    ]


def crate_snapshot(crate: CrateView) -> SourceSnapshot:
    """The crate's sources as a build sees them, without orchestrator's own folders."""
    return snapshot(
        crate.crate_dir,
        crate.source_date_epoch,
        crate.source_exclude,
        folders=own_folders(crate),
    )


def crate_identity(crate: CrateView) -> dict[str, object]:
    """The crate's git commit and whether it has local changes; the last release's own
    artifacts in the crate (not ignored by git) do not make it dirty, nor does the config
    file: the lock carries its text, and `reproduce` puts it back among the sources."""
    config = repository_path(crate.config_path)
    recorded = [config] if config else []
    return source_identity(crate.crate_dir, own_folders(crate), recorded=recorded)


def uncommitted_changes(crate: CrateView) -> list[str]:
    """The files that make the crate dirty (crate_identity), from the repository's root."""
    config = repository_path(crate.config_path)
    changed = changed_paths(crate.crate_dir, own_folders(crate)) or []
    return sorted(path for path in changed if path != config)


def snapshot(
    crate_dir: Path,
    source_date_epoch: int,
    exclude: Sequence[str] = (),
    *,
    folders: Sequence[PurePosixPath] = (),
) -> SourceSnapshot:
    lock = crate_dir / "Cargo.lock"
    if not lock.is_file():
        raise SourceError(
            f"{crate_dir} has no Cargo.lock: a release must pin its dependencies",
            hint=f"Run `cargo generate-lockfile` in {crate_dir} and commit Cargo.lock.",
        )
    archive = pack_tree(
        crate_dir,
        prefix="src",
        mtime=source_date_epoch,
        uid=BUILDER_UID,
        skip=excluded_by(exclude, folders),
        keep_inner_symlinks=True,
    )
    return SourceSnapshot(
        archive=archive,
        archive_sha256=sha256_bytes(archive),
        cargo_lock_sha256=sha256_file(lock),
    )


@dataclass(frozen=True)
class LockedCrate:
    name: str
    version: str
    checksum: str


def registry_crates(cargo_lock: str) -> list[LockedCrate]:
    """crates.io packages in a Cargo.lock with their .crate checksums."""
    try:
        data = loads_toml(cargo_lock)
    except ValueError as exc:  # TOMLDecodeError, or NestingError: hostile nesting
        raise SourceError(f"Cargo.lock is not valid TOML: {exc}") from exc
    crates: list[LockedCrate] = []
    for package in data.get("package", []):
        if package.get("source") == CRATES_IO:
            checksum = package.get("checksum")
            if not isinstance(checksum, str):
                raise SourceError(
                    f"Cargo.lock: {package.get('name')} {package.get('version')} has no checksum"
                )
            crates.append(LockedCrate(str(package["name"]), str(package["version"]), checksum))
    return crates


def other_sources(cargo_lock: str) -> list[str]:
    """`name version (source)` of every dependency neither from crates.io nor a path: git
    dependencies (and other registries).

    A git source has no archive checksum; Cargo.lock pins its commit (after `#` in the
    source), which cargo checks out. Such dependencies are fetched afresh for every online
    build, so no cached copy of them is ever trusted.
    """
    try:
        data = loads_toml(cargo_lock)
    except ValueError as exc:  # TOMLDecodeError, or NestingError: hostile nesting
        raise SourceError(f"Cargo.lock is not valid TOML: {exc}") from exc
    return [
        f"{package.get('name')} {package.get('version')} ({package['source']})"
        for package in data.get("package", [])
        if package.get("source") not in (None, CRATES_IO)
    ]

"""The crate's sources and vendored crates: snapshots, and checks against Cargo.lock."""

from __future__ import annotations

import json
import tarfile
import tomllib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from orchestrator.errors import CacheCorruptError, SourceError
from orchestrator.host.archive import check_member, pack_tree
from orchestrator.model.hashing import sha256_bytes, sha256_file
from orchestrator.model.layout import BUILDER_UID
from orchestrator.plan.build_plan import SourceSnapshot

CRATES_IO = "registry+https://github.com/rust-lang/crates.io-index"
# Build outputs and VCS metadata are not sources.
_SKIPPED_TOP = {"target", ".git"}


def _skip(rel: PurePosixPath) -> bool:
    return rel.parts[0] in _SKIPPED_TOP or rel.name == ".git"


def snapshot(crate_dir: Path, source_date_epoch: int) -> SourceSnapshot:
    lock = crate_dir / "Cargo.lock"
    if not lock.is_file():
        raise SourceError(
            f"{crate_dir} has no Cargo.lock: a release must pin its dependencies",
            hint=f"Run `cargo generate-lockfile` in {crate_dir} and commit Cargo.lock.",
        )
    archive = pack_tree(
        crate_dir, prefix="src", mtime=source_date_epoch, uid=BUILDER_UID, skip=_skip
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
        data = tomllib.loads(cargo_lock)
    except tomllib.TOMLDecodeError as exc:
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


def verify_vendor_archive(archive: Path, cargo_lock: str) -> int:
    """Check a vendored-crates tar against Cargo.lock; return how many crates it holds."""
    expected = {f"vendor/{c.name}-{c.version}": c for c in registry_crates(cargo_lock)}
    seen: dict[str, str] = {}
    try:
        with tarfile.open(archive) as tar:
            for member in tar:
                path = check_member(member)
                if path.name == ".cargo-checksum.json" and len(path.parts) == 3:
                    handle = tar.extractfile(member)
                    if handle is None:
                        continue
                    package = json.load(handle).get("package")
                    seen[str(path.parent)] = str(package)
    except (tarfile.TarError, ValueError) as exc:
        raise CacheCorruptError(f"vendored crates {archive} are unreadable: {exc}") from exc
    for directory, crate in expected.items():
        got = seen.get(directory)
        if got != crate.checksum:
            raise SourceError(
                f"vendored {crate.name} {crate.version}: checksum {got} does not match "
                f"Cargo.lock's {crate.checksum}",
                hint="Something altered the downloaded crate; remove the cached crates "
                "(`orchestrator clean --cache`) and fetch again.",
            )
    return len(expected)

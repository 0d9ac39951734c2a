"""The crate as a release planned it, kept while its targets build.

Every target of a release is built from the snapshot its plan took at the start (a tar in
memory, release/run.py's plans): an edit, a `git pull` or a branch switch in the checkout
while the release runs changes nothing that is built. release.lock must then pin that
snapshot too, not what the checkout holds when the lock is written: `record_release` is
given this record, and `changed_files` names what changed meanwhile, for the summary.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from dataclasses import dataclass
from pathlib import Path

from orchestrator.host.source import CrateView, crate_identity, crate_snapshot
from orchestrator.model.hashing import sha256_file
from orchestrator.plan.build_plan import BuildPlan


@dataclass(frozen=True)
class SourcesAtStart:
    """What release.lock records of the sources, read when the release was planned."""

    archive: bytes  # the planned snapshot every target is built from
    archive_sha256: str
    identity: dict[str, object]  # git commit and dirty flag (host/source.py crate_identity)
    cargo_lock: str
    config_text: str
    config_sha256: str


def sources_at_start(crate: CrateView, plan: BuildPlan) -> SourcesAtStart:
    """The record for a release whose targets were planned as `plan` (any of them: they
    share the crate's snapshot)."""
    return SourcesAtStart(
        archive=plan.source.archive,
        archive_sha256=plan.source.archive_sha256,
        identity=crate_identity(crate),
        cargo_lock=(crate.crate_dir / "Cargo.lock").read_text(),
        config_text=crate.config_path.read_text(),
        config_sha256=sha256_file(crate.config_path),
    )


def changed_since_start(crate: CrateView, start: SourcesAtStart) -> list[str]:
    """The crate's files (relative to it) that differ now from the planned snapshot; the
    config file too, when it changed. Empty: nothing changed."""
    changed: list[str] = []
    now = crate_snapshot(crate)
    if now.archive_sha256 != start.archive_sha256:
        changed = changed_files(start.archive, now.archive)
    config = crate.config_path
    if config.is_file() and sha256_file(config) != start.config_sha256:
        name = _relative(config, crate.crate_dir)
        if name not in changed:
            changed.append(name)
    return changed


def _relative(path: Path, folder: Path) -> str:
    """The config's name as the summary gives it: inside the crate, like its files."""
    return path.relative_to(folder).as_posix() if path.is_relative_to(folder) else path.name


def changed_files(before: bytes, after: bytes) -> list[str]:
    """Paths added, removed or changed (content, mode or link target) between two source
    snapshots, sorted; without the snapshots' top folder (`src/`)."""
    first, second = _members(before), _members(after)
    return sorted(
        name for name in first.keys() | second.keys() if first.get(name) != second.get(name)
    )


def _members(archive: bytes) -> dict[str, tuple[str, int, str]]:
    """Each file of a snapshot by its path: (kind, mode, content digest or link target)."""
    found: dict[str, tuple[str, int, str]] = {}
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:") as tar:
        for member in tar.getmembers():
            name = member.name.split("/", 1)[1] if "/" in member.name else ""
            if not name or member.isdir():
                continue
            if member.isfile():
                data = tar.extractfile(member)
                digest = hashlib.sha256(data.read() if data else b"").hexdigest()
                found[name] = ("file", member.mode, digest)
            else:
                found[name] = ("link", member.mode, member.linkname)
    return found

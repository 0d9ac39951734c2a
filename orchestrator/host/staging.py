"""Staging and atomic publication into artifacts/.

A build writes into a private staging folder next to artifacts/ and, once everything is
in place, renames it into artifacts/<release>/<artifact>/ in one step. A failed or
interrupted build removes its staging folder, so artifacts/ never shows a partial result.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from orchestrator.errors import PublishError
from orchestrator.host.scratch import remove_abandoned
from orchestrator.model.documents.checksums import checksums_bytes
from orchestrator.model.documents.run_logs import is_build_log
from orchestrator.model.hashing import sha256_file

CHECKSUMS = "SHA256SUMS"


def staging_root(artifacts_dir: Path) -> Path:
    # A sibling of artifacts/: same filesystem (rename is atomic), never inside it.
    return artifacts_dir.parent / f".{artifacts_dir.name}.staging"


@contextmanager
def staging_area(artifacts_dir: Path, session: str) -> Iterator[Path]:
    root = staging_root(artifacts_dir)
    remove_abandoned(root)  # staging folders of processes that died (crash, kill -9)
    area = root / f"{os.getpid()}-{session}"
    area.mkdir(parents=True)
    try:
        yield area
    finally:
        shutil.rmtree(area, ignore_errors=True)
        with suppress(OSError):  # another build is staging too
            root.rmdir()


def remove_abandoned_staging(artifacts_dir: Path) -> list[Path]:
    """Remove the staging folders of runs whose process is gone (kill -9, a crash), then
    the staging root itself once nothing is left in it; what was removed."""
    root = staging_root(artifacts_dir)
    removed = remove_abandoned(root)
    with suppress(OSError):  # not empty: a running build is staging (or not ours to judge)
        root.rmdir()
        removed.append(root)
    return removed


def write_checksums(directory: Path) -> Path:
    """SHA256SUMS over every file below `directory` but its logs (model/documents/run_logs.py: how
    the build went, which two honest builds of it do not share), in `sha256sum -c` format
    (a name with a backslash, newline or carriage return escaped as sha256sum escapes it)."""
    entries = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        relative = path.relative_to(directory).as_posix()
        if relative == CHECKSUMS or is_build_log(relative):
            continue
        entries.append((sha256_file(path), relative))
    target = directory / CHECKSUMS
    target.write_bytes(checksums_bytes(entries))
    return target


def fsync_tree(path: Path) -> None:
    """Flush every file and folder below `path` to disk: a rename must never make visible
    what a power cut could still lose."""
    for entry in sorted(path.rglob("*")):
        if entry.is_file() and not entry.is_symlink():
            with entry.open("rb") as handle:
                os.fsync(handle.fileno())
    for folder in [path, *(p for p in path.rglob("*") if p.is_dir())]:
        _fsync_dir(folder)


def _fsync_dir(folder: Path) -> None:
    handle = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def commit(
    release_dir: Path, *, index: Path, backup: Path, artifact: tuple[Path, str] | None = None
) -> None:
    """Make a staged artifact folder and a staged release index visible, by renames only.

    Everything was written and fsynced beforehand, so nothing here needs new data blocks;
    if a rename still fails, the ones done are undone, and the release is as it was.
    """
    undo: list[tuple[Path, Path]] = []  # (now at, back to), in the order they were done

    def move(source: Path, target: Path) -> None:
        source.replace(target)
        undo.append((target, source))

    backup.mkdir(parents=True, exist_ok=True)
    try:
        release_dir.mkdir(parents=True, exist_ok=True)
        if artifact is not None:
            staged, name = artifact
            if (release_dir / name).exists():
                move(release_dir / name, backup / name)
            move(staged, release_dir / name)
        for staged_file in sorted(index.iterdir()):
            target = release_dir / staged_file.name
            if target.exists():
                move(target, backup / staged_file.name)
            move(staged_file, target)
        _fsync_dir(release_dir)
    except OSError:
        for now_at, back_to in reversed(undo):
            with suppress(OSError):
                now_at.replace(back_to)
        raise


def publish(staged: Path, destination: Path) -> Path:
    """Move a finished artifact folder into place, replacing an older one atomically."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    previous = (
        staged.parent / f"previous-{hashlib.sha256(str(destination).encode()).hexdigest()[:8]}"
    )
    try:
        if destination.exists():
            destination.replace(previous)
        staged.replace(destination)
    except OSError as exc:
        if previous.exists() and not destination.exists():
            previous.replace(destination)
        raise PublishError(f"could not move the artifact into {destination}: {exc}") from exc
    shutil.rmtree(previous, ignore_errors=True)
    return destination

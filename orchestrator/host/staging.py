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
from orchestrator.host.system import process_alive
from orchestrator.model.hashing import sha256_file

CHECKSUMS = "SHA256SUMS"


def staging_root(artifacts_dir: Path) -> Path:
    # A sibling of artifacts/: same filesystem (rename is atomic), never inside it.
    return artifacts_dir.parent / f".{artifacts_dir.name}.staging"


@contextmanager
def staging_area(artifacts_dir: Path, session: str) -> Iterator[Path]:
    root = staging_root(artifacts_dir)
    _remove_abandoned(root)
    area = root / f"{os.getpid()}-{session}"
    area.mkdir(parents=True)
    try:
        yield area
    finally:
        shutil.rmtree(area, ignore_errors=True)
        with suppress(OSError):  # another build is staging too
            root.rmdir()


def _remove_abandoned(root: Path) -> None:
    """Staging folders of processes that died (crash, kill -9) are garbage."""
    if not root.is_dir():
        return
    for entry in root.iterdir():
        pid = entry.name.split("-", 1)[0]
        if pid.isdigit() and not process_alive(int(pid)):
            shutil.rmtree(entry, ignore_errors=True)


def write_checksums(directory: Path) -> Path:
    """SHA256SUMS over every file below `directory`, in `sha256sum -c` format."""
    lines = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        relative = path.relative_to(directory).as_posix()
        if relative == CHECKSUMS:
            continue
        lines.append(f"{sha256_file(path)}  {relative}\n")
    target = directory / CHECKSUMS
    target.write_text("".join(lines))
    return target


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

"""Scratch folders: every temporary folder of a run lives under <cache>/tmp/.

Each is named `<pid>-<purpose>-<random>`, so whoever finds one knows whether its owner is
still alive. A folder whose process is gone (kill -9, a crash, a power cut) is garbage: the
next scratch folder made, and `orchestrator clean`, remove it. Nothing goes to /tmp, where
a killed run would leave gigabytes nobody connects with orchestrator.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from orchestrator.host.system import process_alive

SCRATCH_FOLDER = "tmp"


def scratch_root(cache_dir: Path) -> Path:
    return cache_dir / SCRATCH_FOLDER


def owner_alive(entry: Path) -> bool:
    """Whether the process named at the start of `entry`'s name (`<pid>-...`) still runs.

    An entry without a pid in its name is not ours to judge: it counts as alive.
    """
    pid = entry.name.split("-", 1)[0]
    return not pid.isdigit() or process_alive(int(pid))


def remove_abandoned(root: Path) -> list[Path]:
    """Remove the entries of `root` whose owning process is gone; what was removed."""
    if not root.is_dir():
        return []
    removed = []
    for entry in sorted(root.iterdir()):
        if not owner_alive(entry):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
            removed.append(entry)
    return removed


@contextmanager
def scratch_dir(cache_dir: Path, purpose: str) -> Iterator[Path]:
    """A private folder under <cache>/tmp/, removed on exit (and by the next run if killed)."""
    root = scratch_root(cache_dir)
    root.mkdir(parents=True, exist_ok=True)
    remove_abandoned(root)
    path = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-{purpose}-", dir=root))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)

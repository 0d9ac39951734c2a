"""Folders the tool makes and may later empty: the host cache and `reproduce`'s workdir.

A folder the tool creates gets a marker file with a line saying what it is. The tool
empties or removes such a folder only when the marker is there (for the cache: or when it
holds the cache's own subfolders, as caches made before markers do). An existing,
non-empty folder without it is refused with ForeignFolderError: `--workdir .` or
`cache_dir = "."` must never wipe a project.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from orchestrator.errors import ForeignFolderError

CACHE_MARKER = ".orchestrator-cache"
WORKDIR_MARKER = ".orchestrator-workdir"
CACHE_SUBFOLDERS = frozenset(
    {
        "rootfs",
        "packages",
        "crates",
        "profiles",
        "runs",
        "variants",
        "keys",
        "vault",
        "contexts",
        "steps",
        "tmp",
    }
)
_CACHE_NOTE = "orchestrator's host cache: `orchestrator clean --cache` may empty this folder.\n"
_WORKDIR_NOTE = "made by `orchestrator reproduce`: the next reproduce removes this folder.\n"


def _is_empty(path: Path) -> bool:
    return not any(path.iterdir())


def is_cache_dir(path: Path) -> bool:
    """Whether `path` is a cache the tool made (marker, or one of its own subfolders)."""
    return (path / CACHE_MARKER).is_file() or any(
        (path / name).is_dir() for name in CACHE_SUBFOLDERS
    )


def ensure_cache_dir(path: Path) -> Path:
    """Create the cache folder if needed and mark it; never claims a foreign folder.

    A folder that exists with other files and none of the cache's subfolders stays
    unmarked, so `clean --cache` keeps refusing it.
    """
    if not path.exists():
        path.mkdir(parents=True)
    if not (path / CACHE_MARKER).is_file() and (_is_empty(path) or is_cache_dir(path)):
        (path / CACHE_MARKER).write_text(_CACHE_NOTE)
    return path


def check_cache_dir(path: Path) -> None:
    """Refuse to empty `path` unless the tool made it."""
    if path.is_dir() and not _is_empty(path) and not is_cache_dir(path):
        raise ForeignFolderError(
            f"{path} does not look like orchestrator's cache (no {CACHE_MARKER} and none of "
            f"{', '.join(sorted(CACHE_SUBFOLDERS))}): refusing to empty it",
            hint="Check build.cache_dir / --cache-dir. If this really is the cache, empty "
            f"it yourself, or create {path / CACHE_MARKER} and run `clean --cache` again.",
        )


def _refuse_symlink(path: Path) -> None:
    if path.is_symlink():
        raise ForeignFolderError(
            f"the work folder {path} is a symlink (to {path.readlink()}): a work folder is "
            "never reached through a symlink, so nothing is written or removed where it points",
            hint="Pass the real folder as --workdir, or remove the symlink.",
        )


def prepare_workdir(path: Path) -> Path:
    """A fresh, marked workdir at `path`: a previous one of ours is removed first.

    Refuses (ForeignFolderError) a symlink (the marker written where it points would make
    that folder removable later), an existing non-empty folder without the marker, and
    anything that is not a folder, leaving it untouched. `path`'s parent is the caller's
    to resolve; `path` itself is taken as it is.
    """
    _refuse_symlink(path)
    if path.exists():
        if not path.is_dir():
            raise ForeignFolderError(
                f"--workdir {path} exists and is not a folder: refusing to replace it",
                hint="Pass another --workdir, or remove it yourself.",
            )
        if (path / WORKDIR_MARKER).is_file():
            shutil.rmtree(path)
        elif not _is_empty(path):
            raise ForeignFolderError(
                f"--workdir {path} is not empty and was not made by `orchestrator reproduce` "
                f"(no {WORKDIR_MARKER}): refusing to remove it",
                hint="Pass a new or empty folder as --workdir, or remove this one yourself.",
            )
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir()
    except FileExistsError:  # the empty folder kept above, or a symlink made meanwhile
        _refuse_symlink(path)
        if not path.is_dir():
            raise
    _refuse_symlink(path)
    (path / WORKDIR_MARKER).write_text(_WORKDIR_NOTE)
    return path


def write_cache_json(path: Path, value: object) -> None:
    """A small cache entry, written whole or not at all: a temporary name of this process,
    then a rename, so concurrent runs and a crash never leave a half-written entry."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        partial.write_text(json.dumps(value, indent=1, sort_keys=True) + "\n")
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)

"""Small facts about the host that several modules need."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path, PurePosixPath


def process_alive(pid: int) -> bool:
    """Whether a process with this id exists (it may belong to another user)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def git(directory: Path, *args: str) -> str | None:
    """`git -C directory args...` stdout, stripped; None when git or the repository is absent."""
    try:
        return subprocess.run(
            ["git", "-C", str(directory), *args],
            capture_output=True,
            text=True,
            check=True,
            timeout=20,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def git_commit_time(directory: Path) -> int | None:
    """HEAD's commit time in the repository holding `directory`, if there is one."""
    out = git(directory, "log", "-1", "--format=%ct")
    return int(out) if out and out.isdigit() else None


def source_identity(
    crate_dir: Path,
    exclude: Sequence[PurePosixPath] = (),
    *,
    recorded: Sequence[str] = (),
) -> dict[str, object]:
    """The git commit the sources come from, and whether the tree had local changes
    outside `exclude` (folders relative to `crate_dir`) other than `recorded` (paths from
    the repository's root whose content a lock carries itself: the config file)."""
    commit = git(crate_dir, "rev-parse", "HEAD")
    changed = changed_paths(crate_dir, exclude)
    if changed is None:
        return {"git_commit": commit, "dirty": None}
    return {"git_commit": commit, "dirty": any(path not in recorded for path in changed)}


def changed_paths(crate_dir: Path, exclude: Sequence[PurePosixPath] = ()) -> list[str] | None:
    """Files below `crate_dir` that differ from the commit (changed, added, deleted,
    untracked), as paths from the repository's root; None without git or a repository."""
    left_out = [f":(exclude){folder.as_posix()}" for folder in exclude]
    argv = ["git", "-C", str(crate_dir), "status", "--porcelain", "-z"]
    argv += ["--untracked-files=all", "--", ".", *left_out]
    try:
        out = subprocess.run(argv, capture_output=True, check=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    entries = out.decode(errors="replace").split("\0")
    paths: list[str] = []
    index = 0
    while index < len(entries):
        entry = entries[index]
        index += 1
        if len(entry) < 4:  # the empty string after the last NUL
            continue
        paths.append(entry[3:])
        if entry[0] in "RC":  # a rename or copy: its source path follows
            index += 1
    return paths


def repository_path(path: Path) -> str | None:
    """`path` relative to the root of the git repository holding it; None outside one."""
    top = git(path.parent, "rev-parse", "--show-toplevel")
    if not top:
        return None
    try:
        return path.resolve().relative_to(Path(top).resolve()).as_posix()
    except ValueError:
        return None

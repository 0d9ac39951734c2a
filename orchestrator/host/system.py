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


def source_identity(crate_dir: Path, exclude: Sequence[PurePosixPath] = ()) -> dict[str, object]:
    """The git commit the sources come from, and whether the tree had local changes
    outside `exclude` (folders relative to `crate_dir`)."""
    commit = git(crate_dir, "rev-parse", "HEAD")
    left_out = [f":(exclude){folder.as_posix()}" for folder in exclude]
    status = git(crate_dir, "status", "--porcelain", "--", ".", *left_out)
    return {"git_commit": commit, "dirty": bool(status) if status is not None else None}

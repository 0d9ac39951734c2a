"""Reading the facts the build-time `git` shim answers from, out of the crate's repository,
and packing the shim for the build container (model/documents/git_facts.py says why a shim).

Read once, at plan time, on the host: the plan, build.json and release.lock carry them,
and `reproduce` takes them from the lock instead of calling this.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path, PurePosixPath

from orchestrator.host.source import CrateView, crate_identity
from orchestrator.host.system import git
from orchestrator.model.documents.git_facts import PLACEHOLDERS, DescribeTag, GitFacts
from orchestrator.plan.git_shim import SHIM_PATH, render_shim


def _nearest_tag(crate_dir: Path, *kinds: str) -> DescribeTag | None:
    """`git describe --long [--tags]` split into the tag and the distance; None without
    one. (The abbreviated commit after them is the shim's to print.)"""
    out = git(crate_dir, "describe", "--long", *kinds, "HEAD")
    if not out:
        return None
    name, distance, _hash = out.rsplit("-", 2)
    return DescribeTag(name=name, distance=int(distance))


def _placeholders(crate_dir: Path) -> dict[str, str] | None:
    """Every recorded placeholder as git prints it, in one call, NUL-separated (a subject
    may hold anything but NUL)."""
    spec = "%x00".join(f"%{key}" for key in PLACEHOLDERS)
    try:
        out = subprocess.run(
            ["git", "-C", str(crate_dir), "log", "-1", f"--format=tformat:{spec}", "HEAD"],
            capture_output=True,
            check=True,
            timeout=20,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    values = out.decode(errors="replace").removesuffix("\n").split("\0")
    if len(values) != len(PLACEHOLDERS):
        return None
    return dict(zip(PLACEHOLDERS, values, strict=True))


def read_git_facts(crate_dir: Path, *, dirty: bool) -> GitFacts | None:
    """The facts of HEAD in the repository holding `crate_dir`; None outside a repository
    (or without git, or with no commit yet): the build then has no `git`, as before.
    `dirty`: whether the sources carry changes besides the config (host/source.py)."""
    commit = git(crate_dir, "rev-parse", "--verify", "HEAD")
    short = git(crate_dir, "rev-parse", "--short", "HEAD")
    count = git(crate_dir, "rev-list", "--count", "HEAD")
    placeholders = _placeholders(crate_dir)
    if not commit or not short or not count or not count.isdigit() or placeholders is None:
        return None
    branch = git(crate_dir, "rev-parse", "--abbrev-ref", "HEAD")
    return GitFacts(
        commit=commit,
        abbrev=len(short),
        commit_time=int(placeholders["ct"]),
        branch=branch if branch and branch != "HEAD" else None,
        commit_count=int(count),
        tag=_nearest_tag(crate_dir, "--tags"),
        annotated_tag=_nearest_tag(crate_dir),
        dirty=dirty,
        placeholders=placeholders,
    )


def shim_archive(facts: GitFacts, *, mtime: int, uid: int) -> bytes:
    """A tar to put_archive at "/": the executable shim alone, with a fixed time and owner
    (the same facts give the same bytes). The Engine makes the folders that are missing;
    folders in the tar would reset the owners and modes of those that exist (the image's
    /opt/orchestrator)."""
    path = PurePosixPath(SHIM_PATH)
    data = render_shim(facts).encode()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(path.relative_to("/").as_posix())
        info.size, info.mode, info.mtime = len(data), 0o555, mtime
        info.uid = info.gid = uid
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


# Crates that embed version information from git at build time: through the git CLI
# (vergen-gitcl, built, git-version, build-data, git-testament) or by reading .git (vergen's
# git2/gix backends, shadow-rs), which the shim cannot serve but whose builds still depend on
# the commit.
GIT_EMBEDDING_CRATES = frozenset(
    {"vergen", "vergen-gitcl", "vergen-git2", "vergen-gix", "built", "git-version",
     "git-testament", "build-data", "shadow-rs", "git2", "gix"}
)  # fmt: skip
_SKIPPED_DIRS = frozenset({".git", "target", "vendor", "node_modules"})


def asks_git(crate_dir: Path) -> str | None:
    """Why the crate's build may read git (a build script naming it, or a crate of
    GIT_EMBEDDING_CRATES in Cargo.lock); None when nothing does. Only then do the facts
    enter the plan: they are in every cargo step's key, and a crate that never asks would
    otherwise rebuild for every new commit, a docs-only one included."""
    lock = crate_dir / "Cargo.lock"
    try:
        lock_text = lock.read_text(errors="replace") if lock.is_file() else ""
    except OSError:
        lock_text = ""
    for line in lock_text.splitlines():
        name = line.removeprefix("name = ").strip('"') if line.startswith("name = ") else ""
        if name in GIT_EMBEDDING_CRATES:
            return f"Cargo.lock has {name}"
    folders = [crate_dir]
    while folders:
        folder = folders.pop()
        try:
            entries = sorted(folder.iterdir())
        except OSError:
            continue
        for entry in entries:
            if entry.is_symlink():
                continue
            if entry.is_dir() and entry.name not in _SKIPPED_DIRS:
                folders.append(entry)
            elif entry.name == "build.rs" and entry.is_file():
                try:
                    text = entry.read_text(errors="replace")
                except OSError:
                    continue
                if "git" in text:
                    return f"{entry.relative_to(crate_dir).as_posix()} names git"
    return None


def crate_git_facts(crate: CrateView) -> GitFacts | None:
    """The facts of the crate's checkout, dirty as `crate_identity` says (the config file
    and orchestrator's own folders do not count); None where no build script asks git
    (see asks_git) or outside a repository."""
    if asks_git(crate.crate_dir) is None:
        return None
    return read_git_facts(crate.crate_dir, dirty=crate_identity(crate).get("dirty") is True)

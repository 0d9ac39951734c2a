"""Where a reproduction's sources come from: the locked config and the crate, laid out in
a fresh folder, from `--source` or from `git archive` of the locked commit in the
repository that holds it. release/lock/reproduce.py builds from what this lays out.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path

from orchestrator.errors import SourceError
from orchestrator.host.system import git
from orchestrator.model.documents.lockfile import LockDocument


def _write_locked_config(workdir: Path, document: LockDocument) -> None:
    """The lock's config text at its place among the laid-out sources, never through a
    symlink those sources brought along: a linked folder on the way is refused, a linked
    file is replaced by the real one."""
    config = workdir / document.config.file
    folder = workdir
    for part in Path(document.config.file).parent.parts:
        folder = folder / part
        if folder.is_symlink():
            raise SourceError(
                f"{folder} in the crate's sources is a symlink: the locked config is not "
                "written through it",
                hint="Pass --source with a tree whose config folder is a real folder.",
            )
    folder.mkdir(parents=True, exist_ok=True)
    if config.is_symlink():
        config.unlink()
    config.write_text(document.config.text)


def config_folders(release_dir: Path) -> list[Path]:
    """Where the release's config may live, to find the crate from (its `crate` path is
    relative to the config's folder): the current folder, and the folders above the
    release's (artifacts/<name>-<version> usually lies next to the config)."""
    places = [Path.cwd(), release_dir.parent.parent, release_dir.parent]
    return list(dict.fromkeys(place.resolve() for place in places))


def find_repository(document: LockDocument, places: Sequence[Path]) -> tuple[str, str] | None:
    """The git repository holding the locked commit, and the crate's path in it: the
    repository of the current folder where the lock knows the config's path in its
    repository, else the repository of the crate found at `crate` from one of `places`
    (the config may live outside the crate's repository). None when none holds it."""
    source = document.source
    commit = source.git_commit
    if not commit:
        return None
    candidates: list[tuple[str | None, str]] = []
    if source.repository_path is not None:
        crate_in_repo = (Path(source.repository_path).parent / source.crate).as_posix()
        for place in places:
            candidates.append((git(place, "rev-parse", "--show-toplevel"), crate_in_repo))
    for place in places:
        crate = place / source.crate
        if not crate.is_dir():
            continue
        prefix = git(crate, "rev-parse", "--show-prefix")
        if prefix is not None:
            root = git(crate, "rev-parse", "--show-toplevel")
            candidates.append((root, prefix.rstrip("/") or "."))
    for root, crate_in_repo in candidates:
        if root and git(Path(root), "cat-file", "-e", f"{commit}^{{commit}}") is not None:
            return root, crate_in_repo
    return None


def lay_out_sources(
    document: LockDocument,
    workdir: Path,
    source_dir: Path | None,
    places: Sequence[Path] | None = None,
) -> Path:
    """The config and the crate in a fresh folder; returns the config's path there.

    The crate comes from `source_dir` when given, else from `git archive` of the locked
    commit in the repository `find_repository` finds from `places` (default: the current
    folder).
    """
    source = document.source  # its paths stay inside `workdir`: the lock's model checks
    config = workdir / document.config.file
    workdir.mkdir(parents=True, exist_ok=True)
    crate = workdir / source.crate
    if source_dir is not None:
        # The crate may be the config's own folder (crate = "."): lay it out first, then
        # write the locked config over whatever copy of it came along.
        shutil.copytree(
            source_dir,
            crate,
            symlinks=True,
            ignore=shutil.ignore_patterns("target", ".git"),
            dirs_exist_ok=True,
        )
        _write_locked_config(workdir, document)
        return config
    commit = source.git_commit
    if not commit:
        raise SourceError(
            "the lockfile names no git commit: the release was not built from a git checkout",
            hint="Pass --source <crate dir> with exactly the sources the release was built from.",
        )
    if source.dirty:
        raise SourceError(
            f"the release was built from a dirty tree (changes on top of {commit[:12]}): "
            "its sources are not in git",
            hint="Pass --source <crate dir> with exactly those sources.",
        )
    looked = list(places) if places is not None else [Path.cwd()]
    found = find_repository(document, looked)
    if found is None:
        raise SourceError(
            f"the locked commit {commit[:12]} is in no git repository found from "
            + ", ".join(str(place) for place in looked)
            + f" (their repository, or that of the crate at `{source.crate}` below them)",
            hint=f"Pass --source <crate dir> with the crate's sources at {commit[:12]}, or run "
            "reproduce inside a checkout of the crate's repository that has that commit "
            "(git fetch).",
        )
    root, crate_in_repo = found
    archive = subprocess.run(
        ["git", "-C", root, "archive", "--format=tar", commit, "--", crate_in_repo],
        capture_output=True,
        check=False,
    )
    if archive.returncode != 0:
        raise SourceError(
            f"git archive {commit[:12]} failed: {archive.stderr.decode().strip()}",
            hint="Fetch the commit (git fetch) or pass --source <crate dir>.",
        )
    with tempfile.TemporaryDirectory() as tmp:
        tar_path = Path(tmp) / "src.tar"
        tar_path.write_bytes(archive.stdout)
        with tarfile.open(tar_path) as tar:
            tar.extractall(Path(tmp) / "tree", filter="data")
        # Symlinks stay symlinks (the "data" filter let only those inside the tree through).
        shutil.copytree(
            Path(tmp) / "tree" / crate_in_repo, crate, symlinks=True, dirs_exist_ok=True
        )
    _write_locked_config(workdir, document)
    return config

"""Deterministic tars going into containers and releases: sorted names, fixed times,
owners and modes, so the same tree gives the same bytes; links refused or kept inside.
(Reading untrusted tars is host/archive.py.)"""

from __future__ import annotations

import io
import os
import stat
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath

from orchestrator.errors import SourceError, UnsafeArchiveError


def normalise_member(info: tarfile.TarInfo, *, mtime: int, uid: int) -> tarfile.TarInfo:
    """Fixed time and owner, no names, 755 or 644: only the bytes and the path count."""
    info.mtime = mtime
    info.uid = info.gid = uid
    info.uname = info.gname = ""
    executable = info.isdir() or bool(info.mode & stat.S_IXUSR)
    info.mode = 0o755 if executable else 0o644
    return info


def pack_tree(
    root: Path,
    *,
    prefix: str,
    mtime: int,
    uid: int,
    skip: Callable[[PurePosixPath], bool] = lambda _: False,
    keep_inner_symlinks: bool = False,
) -> bytes:
    """A deterministic tar of `root` under `prefix/`: sorted names, fixed times and owners.

    Symlinks are refused rather than followed; with `keep_inner_symlinks`, one whose target
    stays inside `root` is stored as a symlink (as `git archive` does) and one that points
    outside is refused by name.
    """
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        top = tarfile.TarInfo(prefix)
        top.type = tarfile.DIRTYPE
        tar.addfile(normalise_member(top, mtime=mtime, uid=uid))
        for path in _walk_sorted(root, skip):
            rel = PurePosixPath(path.relative_to(root).as_posix())
            info = tar.gettarinfo(str(path), arcname=f"{prefix}/{rel}")
            if info.issym() and keep_inner_symlinks:
                _check_inner_link(rel, info.linkname, root)
            elif info.issym() or info.islnk() or not (info.isfile() or info.isdir()):
                raise UnsafeArchiveError(f"refusing to pack {path}: not a plain file or folder")
            normalise_member(info, mtime=mtime, uid=uid)
            if info.isfile():
                with path.open("rb") as handle:
                    tar.addfile(info, handle)
            else:
                tar.addfile(info)
    return buffer.getvalue()


def _check_inner_link(rel: PurePosixPath, target: str, root: Path) -> None:
    """A symlink may name only a path inside the tree, spelt relatively: an absolute or
    climbing target would mean different files on the build machine than here."""
    resolved: list[str] = list(rel.parent.parts)
    for part in PurePosixPath(target).parts:
        if part == "..":
            if not resolved:
                resolved = ["..", "outside"]
                break
            resolved.pop()
        elif part != ".":
            resolved.append(part)
    if target.startswith("/") or (resolved and resolved[0] == ".."):
        raise SourceError(
            f"refusing to pack {root / rel.as_posix()}: it is a symlink to {target!r}, "
            f"outside {root}",
            hint="Make it point inside the crate, or leave it out with [package] exclude "
            f'= ["{rel.as_posix()}"].',
        )


def single_file_tar(path: str, data: bytes, *, uid: int = 1000) -> bytes:
    """A tar holding one read-only file, for `put_archive` at the file's parent folder."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo(PurePosixPath(path).name)
        info.size = len(data)
        info.mode = 0o444
        info.uid = info.gid = uid
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _walk_sorted(
    top: Path, skip: Callable[[PurePosixPath], bool], directory: Path | None = None
) -> Iterator[Path]:
    for entry in sorted(os.scandir(directory or top), key=lambda e: e.name):
        path = Path(entry.path)
        if skip(PurePosixPath(path.relative_to(top).as_posix())):
            continue
        yield path
        if entry.is_dir(follow_symlinks=False):
            yield from _walk_sorted(top, skip, path)

"""Tar streams in and out of containers: deterministic packing, paranoid unpacking.

Anything a container hands back is untrusted: an entry that is absolute, climbs with
`..`, or is a link or a device could write outside the output folder, so it is refused
before a single byte is written.
"""

from __future__ import annotations

import io
import os
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path, PurePosixPath
from typing import IO

from orchestrator.errors import UnsafeArchiveError
from orchestrator.model.hashing import CHUNK


def check_member(member: tarfile.TarInfo) -> PurePosixPath:
    """Return the member's relative path, or raise if it is not a plain file or folder."""
    name = member.name
    path = PurePosixPath(name)
    if name.startswith("/") or path.is_absolute():
        raise UnsafeArchiveError(f"refusing absolute archive entry {name!r}")
    if ".." in path.parts:
        raise UnsafeArchiveError(f"refusing archive entry that climbs out: {name!r}")
    if member.issym() or member.islnk():
        raise UnsafeArchiveError(f"refusing link in archive: {name!r} -> {member.linkname!r}")
    if not (member.isfile() or member.isdir()):
        raise UnsafeArchiveError(f"refusing special file in archive: {name!r}")
    return path


def safe_extract(source: IO[bytes] | io.RawIOBase, dest: Path) -> list[Path]:
    """Extract a tar stream into `dest`; every entry is checked before anything is written.

    Returns the regular files written, relative to `dest`.
    """
    # Checking every entry before writing any needs two passes, so spool the stream first.
    with tempfile.SpooledTemporaryFile(max_size=64 << 20) as spooled:
        shutil.copyfileobj(source, spooled, CHUNK)
        spooled.seek(0)
        return _extract_checked(spooled, dest.resolve())


def _extract_checked(fileobj: IO[bytes], dest: Path) -> list[Path]:
    with tarfile.open(fileobj=fileobj, mode="r:*") as tar:
        members = tar.getmembers()
        relative = [check_member(m) for m in members]
        written: list[Path] = []
        for member, rel in zip(members, relative, strict=True):
            target = (dest / rel).resolve()
            if target != dest and dest not in target.parents:
                raise UnsafeArchiveError(f"archive entry {member.name!r} resolves outside {dest}")
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            source = tar.extractfile(member)
            if source is None:
                raise UnsafeArchiveError(f"cannot read archive entry {member.name!r}")
            with target.open("wb") as out:
                while block := source.read(CHUNK):
                    out.write(block)
            # Keep the executable bit, drop setuid/setgid/sticky and group/other writes.
            target.chmod(0o755 if member.mode & stat.S_IXUSR else 0o644)
            written.append(Path(*rel.parts))
    return written


class ChunkReader(io.RawIOBase):
    """A read-only file over an iterator of byte chunks (the Engine's archive stream)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks: Iterator[bytes] = iter(chunks)
        self._buffer = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        while not self._buffer:
            try:
                self._buffer = next(self._chunks)
            except StopIteration:
                return 0
        size = min(len(buffer), len(self._buffer))
        buffer[:size] = self._buffer[:size]
        self._buffer = self._buffer[size:]
        return size


def _normalise(info: tarfile.TarInfo, *, mtime: int, uid: int) -> tarfile.TarInfo:
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
) -> bytes:
    """A deterministic tar of `root` under `prefix/`: sorted names, fixed times and owners.

    Symlinks are refused rather than followed or stored: a release input should be files.
    """
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        top = tarfile.TarInfo(prefix)
        top.type = tarfile.DIRTYPE
        tar.addfile(_normalise(top, mtime=mtime, uid=uid))
        for path in _walk_sorted(root, skip):
            rel = PurePosixPath(path.relative_to(root).as_posix())
            info = tar.gettarinfo(str(path), arcname=f"{prefix}/{rel}")
            if info.issym() or info.islnk() or not (info.isfile() or info.isdir()):
                raise UnsafeArchiveError(f"refusing to pack {path}: not a plain file or folder")
            _normalise(info, mtime=mtime, uid=uid)
            if info.isfile():
                with path.open("rb") as handle:
                    tar.addfile(info, handle)
            else:
                tar.addfile(info)
    return buffer.getvalue()


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

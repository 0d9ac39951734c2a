"""Tar streams in and out of containers: deterministic packing, paranoid unpacking.

Anything a container hands back is untrusted: an entry that is absolute, climbs with
`..`, or is a link or a device could write outside the output folder, so it is refused
before a single byte is written.
"""

from __future__ import annotations

import gzip
import io
import lzma
import os
import stat
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, NoReturn

from orchestrator.errors import SourceError, UnsafeArchiveError
from orchestrator.model.hashing import CHUNK


@dataclass(frozen=True)
class ArchiveLimits:
    """What one archive may hold. Past any limit it is refused, before its bytes are written.

    The declared size of every entry is known from its header before its data, so a bomb is
    caught at the header that crosses a limit. `max_expansion` bounds declared bytes per byte
    of the archive as stored (a compressed tar, when its size is known).
    """

    max_entries: int
    max_total_bytes: int
    max_name_bytes: int = 4096  # PATH_MAX: longer names cannot be created anyway
    max_component_bytes: int = 255  # NAME_MAX
    max_expansion: int = 50


# What a build step hands back: binaries, profiles, logs (a ROCm fat binary is ~1 GB).
CONTAINER_OUTPUT_LIMITS = ArchiveLimits(max_entries=10_000, max_total_bytes=16 << 30)
# A vault export: every .deb, the rootfs and the crates of a release (CUDA's are ~10 GB).
VAULT_ARCHIVE_LIMITS = ArchiveLimits(max_entries=100_000, max_total_bytes=256 << 30)


def check_member(member: tarfile.TarInfo) -> PurePosixPath:
    """Return the member's relative path, or raise if it is not a plain file or folder."""
    name = member.name
    path = PurePosixPath(name)
    if name.startswith("/") or path.is_absolute():
        raise UnsafeArchiveError(f"refusing absolute archive entry {name!r}")
    if "\x00" in name:  # no file system can hold it; the OS would raise mid-extraction
        raise UnsafeArchiveError(f"refusing archive entry with a NUL byte in its name: {name!r}")
    if not path.parts:
        raise UnsafeArchiveError(f"refusing archive entry {name!r}: it names no file")
    if ".." in path.parts:
        raise UnsafeArchiveError(f"refusing archive entry that climbs out: {name!r}")
    if member.issym() or member.islnk():
        raise UnsafeArchiveError(f"refusing link in archive: {name!r} -> {member.linkname!r}")
    if member.issparse():  # holes read back as zeros: a few bytes could write gigabytes
        raise UnsafeArchiveError(f"refusing sparse file in archive: {name!r}")
    if not (member.isfile() or member.isdir()):
        raise UnsafeArchiveError(f"refusing special file in archive: {name!r}")
    return path


class MemberCheck:
    """Admits an archive's entries one by one: each safe on its own, together within limits,
    and no two of them fighting over one path (a file where a folder is, a file twice)."""

    def __init__(self, limits: ArchiveLimits, *, label: str, stored_bytes: int | None) -> None:
        self.limits = limits
        self.label = label
        self.stored_bytes = stored_bytes
        self.entries = 0
        self.declared_bytes = 0
        self._files: set[PurePosixPath] = set()
        self._folders: set[PurePosixPath] = set()

    def admit(self, member: tarfile.TarInfo) -> PurePosixPath:
        limits = self.limits
        self.entries += 1
        if self.entries > limits.max_entries:
            self._refuse(f"more than {limits.max_entries} entries")
        shown = member.name if len(member.name) <= 120 else member.name[:120] + "..."
        encoded = member.name.encode("utf-8", "surrogateescape")
        if len(encoded) > limits.max_name_bytes:
            self._refuse(f"entry {shown!r} has a {len(encoded)}-byte name")
        if any(
            len(p.encode("utf-8", "surrogateescape")) > limits.max_component_bytes
            for p in member.name.split("/")
        ):
            self._refuse(f"entry {shown!r} has a name part over {limits.max_component_bytes} bytes")
        path = check_member(member)
        self.declared_bytes += member.size
        if self.declared_bytes > limits.max_total_bytes:
            self._refuse(
                f"entries declare more than {_size(limits.max_total_bytes)} (at {shown!r})"
            )
        if self.stored_bytes is not None and self.declared_bytes > max(
            limits.max_expansion * self.stored_bytes, 64 << 20
        ):
            self._refuse(
                f"{_size(self.stored_bytes)} would expand to more than "
                f"{_size(self.declared_bytes)} (at {shown!r}): a compression bomb"
            )
        self._claim(path, folder=member.isdir(), shown=shown)
        return path

    def _claim(self, path: PurePosixPath, *, folder: bool, shown: str) -> None:
        for parent in path.parents:
            if parent in self._files:
                self._refuse(f"entry {shown!r} is inside {parent.as_posix()!r}, a file")
            self._folders.add(parent)
        if folder:
            if path in self._files:
                self._refuse(f"entry {shown!r} is a folder and a file")
            self._folders.add(path)
        elif path in self._folders:
            self._refuse(f"entry {shown!r} is a file and a folder")
        elif path in self._files:
            self._refuse(f"entry {shown!r} appears twice")
        else:
            self._files.add(path)

    def _refuse(self, why: str) -> NoReturn:
        raise UnsafeArchiveError(
            f"refusing {self.label}: {why}",
            hint='Nothing was written from it. See README "How it stays safe" for the limits.',
        )


def _size(count: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if count >= 1 << shift:
            return f"{count / (1 << shift):.1f} {unit}"
    return f"{count} bytes"


@contextmanager
def reading_archive(label: str) -> Iterator[None]:
    """Turn whatever a malformed or truncated archive raises into an UnsafeArchiveError."""
    try:
        yield
    except (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError, gzip.BadGzipFile) as exc:
        raise UnsafeArchiveError(
            f"{label} is not a readable tar archive: {exc or type(exc).__name__}",
            hint="The file is damaged, truncated or of another kind; nothing was written from it.",
        ) from exc


def safe_extract(
    source: IO[bytes] | io.RawIOBase,
    dest: Path,
    *,
    limits: ArchiveLimits = CONTAINER_OUTPUT_LIMITS,
    label: str = "an archive from a container",
) -> list[Path]:
    """Extract a tar stream into `dest`; every entry is checked before anything is written.

    Returns the regular files written, relative to `dest`.
    """
    # Checking every entry before writing any needs two passes, so spool the stream first
    # (an unnamed file: nothing is left behind if we are killed). A tar holds its data
    # uncompressed, so the stream is never much larger than its declared total.
    ceiling = limits.max_total_bytes + limits.max_entries * 3 * 512 + (1 << 20)
    with tempfile.SpooledTemporaryFile(max_size=64 << 20) as spooled:
        copied = 0
        while block := source.read(CHUNK):
            copied += len(block)
            if copied > ceiling:
                raise UnsafeArchiveError(
                    f"refusing {label}: the stream is larger than {_size(ceiling)}"
                )
            spooled.write(block)
        spooled.seek(0)
        with reading_archive(label):
            return _extract_checked(
                spooled, dest.resolve(), MemberCheck(limits, label=label, stored_bytes=None)
            )


def _extract_checked(fileobj: IO[bytes], dest: Path, check: MemberCheck) -> list[Path]:
    with tarfile.open(fileobj=fileobj, mode="r:*") as tar:
        admitted = [(member, check.admit(member)) for member in tar]
        written: list[Path] = []
        for member, rel in admitted:
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
                copy_exactly(source, out, member)
            # Keep the executable bit, drop setuid/setgid/sticky and group/other writes.
            target.chmod(0o755 if member.mode & stat.S_IXUSR else 0o644)
            written.append(Path(*rel.parts))
    return written


def copy_exactly(
    source: IO[bytes],
    out: IO[bytes],
    member: tarfile.TarInfo,
    *,
    on_block: Callable[[bytes], object] = lambda _: None,
) -> int:
    """Copy an entry's data, never more than its header declared (that is what was checked)."""
    copied = 0
    while block := source.read(CHUNK):
        copied += len(block)
        if copied > member.size:
            raise UnsafeArchiveError(
                f"archive entry {member.name!r} holds more than the {member.size} bytes "
                "its header declares"
            )
        on_block(block)
        out.write(block)
    return copied


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

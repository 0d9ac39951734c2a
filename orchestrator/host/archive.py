"""Tar streams coming back from containers, crates and vault archives: paranoid unpacking
(deterministic packing is host/packing.py).

Anything a container hands back is untrusted: an entry that is absolute, climbs with
`..`, or is a link or a device could write outside the output folder, so it is refused
before a single byte is written.

Every tar is read through `reading_tar`, whose TarInfo subclass sees each raw 512-byte header
as `tarfile` parses it and refuses an oversized PAX header or GNU long name, a sparse entry or
one entry too many before `tarfile` reads (and holds in memory) what that header declares.
Being tarfile's own header hook, it sees exactly the headers tarfile reads, through any
compression and on a stream that cannot seek.
"""

from __future__ import annotations

import gzip
import io
import lzma
import stat
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, ClassVar, Literal, NoReturn, Self, cast

from orchestrator.errors import UnsafeArchiveError
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
    # A PAX header or GNU long name is read whole into memory: each is capped, and so is
    # their sum (PAX records are kept per entry). Real ones hold a path or two.
    max_header_bytes: int = 64 << 10
    max_header_total_bytes: int = 16 << 20


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
        if member.size < 0:  # it would hide other entries' bytes from the total
            self._refuse(f"entry {shown!r} declares a negative size")
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
        _refuse(self.label, why)


def _refuse(label: str, why: str) -> NoReturn:
    raise UnsafeArchiveError(
        f"refusing {label}: {why}",
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
            f"{label} is not a tar archive, or a damaged one: {exc or type(exc).__name__}",
            hint="The file is damaged, truncated or of another kind; nothing was written from it.",
        ) from exc


# Extended headers that may precede one entry: a global one, a PAX one, a long name and a
# long link name is all a writer needs. tarfile reads a chain of them by recursion.
MAX_HEADERS_PER_ENTRY = 8
MAX_GLOBAL_RECORDS = 8  # `git archive` writes one, the commit
_EXTENDED = {
    tarfile.XHDTYPE: "PAX extended header",
    tarfile.SOLARIS_XHDTYPE: "PAX extended header",
    tarfile.XGLTYPE: "PAX global header",
    tarfile.GNUTYPE_LONGNAME: "GNU long name",
    tarfile.GNUTYPE_LONGLINK: "GNU long link name",
}


class _HeaderGuard:
    """The running count of one archive's headers, checked as each raw header is parsed."""

    def __init__(self, limits: ArchiveLimits, label: str) -> None:
        self.limits = limits
        self.label = label
        self.entries = 0
        self.declared_bytes = 0
        self.extended_bytes = 0
        self.extended_run = 0

    def check(self, info: tarfile.TarInfo) -> None:
        limits = self.limits
        if info.size < 0:  # base-256 allows it; tarfile would read(-n): to the end
            _refuse(self.label, f"its header at byte {info.offset} declares a negative size")
        kind = _EXTENDED.get(info.type)
        if kind is not None:
            if info.size > limits.max_header_bytes:
                _refuse(
                    self.label,
                    f"its {kind} at byte {info.offset} declares {_size(info.size)}, over the "
                    f"{_size(limits.max_header_bytes)} limit for one header",
                )
            self.extended_bytes += info.size
            if self.extended_bytes > limits.max_header_total_bytes:
                _refuse(
                    self.label,
                    f"its extended headers declare more than "
                    f"{_size(limits.max_header_total_bytes)} in all (at the {kind} at byte "
                    f"{info.offset})",
                )
            self.extended_run += 1
            if self.extended_run > MAX_HEADERS_PER_ENTRY:
                _refuse(
                    self.label,
                    f"more than {MAX_HEADERS_PER_ENTRY} extended headers in a row "
                    f"(at byte {info.offset})",
                )
            return
        self.extended_run = 0
        if info.type == tarfile.GNUTYPE_SPARSE:  # its map could run on for gigabytes
            _refuse(self.label, f"entry {info.name!r} is a sparse file")
        self.entries += 1
        if self.entries > limits.max_entries:
            _refuse(self.label, f"more than {limits.max_entries} entries")
        self.declare(info, info.size)

    def declare(self, info: tarfile.TarInfo, size: int) -> None:
        """Count an entry's declared bytes: a stream that cannot seek skips data by reading
        it, so a header declaring 2**70 bytes would keep tarfile reading for ever."""
        if info.size < 0:  # a PAX "size" may say anything
            _refuse(self.label, f"entry {info.name!r} declares a negative size")
        self.declared_bytes += size
        if self.declared_bytes > self.limits.max_total_bytes:
            _refuse(
                self.label,
                f"entries declare more than {_size(self.limits.max_total_bytes)} "
                f"(at {info.name[:120]!r})",
            )


# tarfile's header errors (not in its stubs): a zero block (the end marker), and a block
# that is not a header (bad checksum or number) or a partial one.
_END_OF_ARCHIVE: type[Exception] = tarfile.EOFHeaderError  # type: ignore[attr-defined]
_BAD_HEADER: tuple[type[Exception], ...] = (
    tarfile.InvalidHeaderError,  # type: ignore[attr-defined]
    tarfile.TruncatedHeaderError,  # type: ignore[attr-defined]
)


class _GuardedTarInfo(tarfile.TarInfo):
    """tarfile's documented hook (a TarInfo subclass overriding `_proc_member`): the header
    is checked after its 512-byte block was parsed and before anything it declares is read."""

    guard: ClassVar[_HeaderGuard]

    @classmethod
    def fromtarfile(cls, tar: tarfile.TarFile) -> Self:
        start = tar.fileobj.tell() if tar.fileobj is not None else 0
        try:
            return super().fromtarfile(tar)
        except _END_OF_ARCHIVE:
            if start == 0:
                # A zero block first: no entries at all. A gzip of zeros, or an empty tar;
                # nothing this tool reads is legitimately empty, so neither is a success.
                raise UnsafeArchiveError(
                    f"{cls.guard.label} is not a tar archive: it holds no entries",
                    hint="The file is empty, zeros or of another kind; nothing was read from it.",
                ) from None
            raise  # the end-of-archive marker
        except _BAD_HEADER as exc:
            if start == 0:
                raise  # not a tar (in this compression): tarfile.open tries the next one
            # tarfile would end the archive here, quietly dropping everything after it.
            _refuse(cls.guard.label, f"a damaged header at byte {start} ({exc})")

    def _proc_member(self, tar: tarfile.TarFile) -> tarfile.TarInfo:
        self.guard.check(self)
        member: tarfile.TarInfo = super()._proc_member(tar)  # type: ignore[misc]
        # Every later entry gets its own copy of the global records: a few, or the copies
        # of one 64 KiB header of tiny records would take gigabytes over 100,000 entries.
        if self.type == tarfile.XGLTYPE and len(tar.pax_headers) > MAX_GLOBAL_RECORDS:
            _refuse(
                self.guard.label,
                f"its PAX global headers hold {len(tar.pax_headers)} records, over the "
                f"limit of {MAX_GLOBAL_RECORDS}",
            )
        return member

    def _apply_pax_info(self, pax_headers: dict[str, str], encoding: str, errors: str) -> None:
        before = self.size
        try:
            super()._apply_pax_info(pax_headers, encoding, errors)  # type: ignore[misc]
        except ValueError as exc:  # a GNU.sparse size that is no number
            _refuse(self.guard.label, f"a malformed PAX record for {self.name!r} ({exc})")
        self.guard.declare(self, self.size - before)  # a PAX "size" replaces the header's

    # GNU sparse maps inside PAX headers: refused like any sparse entry, before version 1.0's
    # map (of any length) is read from the data.
    def _proc_gnusparse_00(self, next: tarfile.TarInfo, *_: object) -> NoReturn:
        _refuse(self.guard.label, f"entry {next.name!r} is a sparse file")

    _proc_gnusparse_01 = _proc_gnusparse_00
    _proc_gnusparse_10 = _proc_gnusparse_00


@contextmanager
def reading_tar(
    source: Path | IO[bytes] | io.RawIOBase,
    *,
    label: str,
    limits: ArchiveLimits,
    mode: Literal["r:*", "r:gz", "r|*"] = "r:*",
) -> Iterator[tarfile.TarFile]:
    """Open a tar (a path or a file object; any compression tarfile knows, and "r|*" for a
    stream that cannot seek) whose every header is checked before what it declares is read.

    Whatever goes wrong reading it, here or in the caller's block, is an UnsafeArchiveError.
    """
    # A class per archive: tarfile makes the TarInfo objects, so the running count rides on it.
    guarded = type("GuardedTarInfo", (_GuardedTarInfo,), {"guard": _HeaderGuard(limits, label)})
    name, fileobj = (source, None) if isinstance(source, Path) else (None, source)
    with (
        reading_archive(label),
        tarfile.open(name, mode, cast("IO[bytes] | None", fileobj), tarinfo=guarded) as tar,
    ):
        yield tar


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
        with reading_tar(spooled, label=label, limits=limits) as tar:
            return _extract_checked(
                tar, dest.resolve(), MemberCheck(limits, label=label, stored_bytes=None)
            )


def _extract_checked(tar: tarfile.TarFile, dest: Path, check: MemberCheck) -> list[Path]:
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

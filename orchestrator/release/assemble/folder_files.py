"""Reading a target folder that another machine wrote, as `release assemble` must: every
file opened without following a link and without blocking (`O_NOFOLLOW | O_NONBLOCK`),
only regular files with one link, each read up to a bound, names from a safe set.

A runner can hand over anything where a file should be: a FIFO (a plain open would wait
forever), a link to /dev/zero or to a file of the signer's machine, a hard link to one, a
sparse file of terabytes, a name with a newline or an escape sequence. Each is refused
here with a TargetFolderError that names the file, escaped.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from orchestrator.config.resolve.archive_include import MAX_MEMBER_DEPTH
from orchestrator.model.printable import printable
from orchestrator.release.assemble.assemble_errors import TargetFolderError

# More files or folders than a build leaves (logs and profiles included).
MAX_FILES = 10_000
# Folders inside one another: generated/ and an [[archive.generate]] path's own folders.
MAX_DEPTH = MAX_MEMBER_DEPTH
# One part of a path: letters, digits and ._+- (no leading dot or dash), as cargo's binary
# names, our logs and profiles, and [[archive.generate]] paths have them.
SAFE_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]{0,127}")
_CHUNK = 1 << 20


def shown(name: str) -> str:
    """A name from the folder as messages print it: control characters escaped."""
    return printable(name, 300)


def check_name(relative: str) -> None:
    """Refuse a relative path with a part outside the safe set."""
    for part in relative.split("/"):
        if not SAFE_PART.fullmatch(part):
            raise TargetFolderError(
                f"{shown(relative)}: not a safe file name (letters, digits and ._+- only, "
                "no leading dot or dash)"
            )


def open_checked(path: Path, limit: int, name: str) -> BinaryIO:
    """`path` opened for reading: a regular file with one link and at most `limit` bytes.
    Never follows a link in its last part and never blocks (a FIFO opens at once)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        descriptor = os.open(path, flags)
    except OSError as error:
        what = "a symbolic link" if path.is_symlink() else f"not readable ({error.strerror})"
        raise TargetFolderError(f"{shown(name)}: {what}") from None
    handle = os.fdopen(descriptor, "rb")
    try:
        _check_status(os.fstat(descriptor), limit, name)
    except BaseException:
        handle.close()
        raise
    return handle


def _check_status(status: os.stat_result, limit: int, name: str) -> None:
    if not stat.S_ISREG(status.st_mode):
        raise TargetFolderError(f"{shown(name)}: not a regular file (a FIFO, device or socket)")
    if status.st_nlink != 1:
        raise TargetFolderError(
            f"{shown(name)}: a hard link ({status.st_nlink} names for one file): it could "
            "be a file of the machine that received the folder"
        )
    if status.st_size > limit:
        raise TargetFolderError(
            f"{shown(name)}: {status.st_size} bytes, more than such a file may have ({limit})"
        )


def _stream(handle: BinaryIO, limit: int, name: str, sink: Callable[[bytes], object]) -> int:
    """Feed the file to `sink` chunk by chunk; its size. A file that grows past `limit`
    while read is refused."""
    size = 0
    while chunk := handle.read(_CHUNK):
        size += len(chunk)
        if size > limit:
            raise TargetFolderError(f"{shown(name)}: grew past {limit} bytes while read")
        sink(chunk)
    return size


def read_checked(path: Path, limit: int, name: str) -> bytes:
    with open_checked(path, limit, name) as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise TargetFolderError(f"{shown(name)}: grew past {limit} bytes while read")
    return data


def digest_checked(path: Path, limit: int, name: str) -> tuple[str, int]:
    """(sha256, size) of a file read as `open_checked` allows."""
    digest = hashlib.sha256()
    with open_checked(path, limit, name) as handle:
        size = _stream(handle, limit, name, digest.update)
    return digest.hexdigest(), size


def copy_checked(source: Path, dest: Path, *, limit: int, sha256: str, name: str) -> None:
    """Copy `source` to the new file `dest` (with its permission bits, no setuid), hashing
    what is copied: bytes other than those checked are refused, and `dest` removed."""
    digest = hashlib.sha256()
    with open_checked(source, limit, name) as handle:
        mode = os.fstat(handle.fileno()).st_mode & 0o777
        with dest.open("xb") as out:

            def write(chunk: bytes) -> None:
                digest.update(chunk)
                out.write(chunk)

            _stream(handle, limit, name, write)
    if digest.hexdigest() != sha256:
        dest.unlink()
        raise TargetFolderError(f"{shown(name)} changed after it was checked")
    dest.chmod(mode)


def list_files(folder: Path) -> list[str]:
    """Every file below `folder`, by relative path, sorted: only folders and regular
    files, reached through no link, with safe names, at most MAX_FILES and MAX_DEPTH."""
    found: list[str] = []
    pending: list[tuple[Path, str, int]] = [(folder, "", 0)]
    while pending:
        directory, prefix, depth = pending.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError as error:
            raise TargetFolderError(
                f"{shown(prefix or str(folder))}: not readable ({error.strerror})"
            ) from None
        for entry in entries:
            relative = prefix + entry.name
            check_name(relative)
            if entry.is_symlink():
                raise TargetFolderError(f"{shown(relative)}: a symbolic link, not a file")
            if entry.is_dir(follow_symlinks=False):
                if depth + 1 > MAX_DEPTH:
                    raise TargetFolderError(f"{shown(relative)}: folders nested too deep")
                pending.append((Path(entry.path), relative + "/", depth + 1))
            elif entry.is_file(follow_symlinks=False):
                found.append(relative)
            else:
                raise TargetFolderError(
                    f"{shown(relative)}: not a regular file or folder (a FIFO, device or socket)"
                )
            if len(found) + len(pending) > MAX_FILES:
                raise TargetFolderError(f"{folder} holds more than {MAX_FILES} files")
    return sorted(found)

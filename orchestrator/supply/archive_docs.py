"""The crate's documents that every archive carries, the `-auto` one included: its top-level
README*, LICENSE*/LICENCE*, COPYING*, UNLICENSE* and CHANGELOG* files from the locked source
snapshot, and the files its licence texts name (ripgrep's COPYING names "the Unlicense",
its UNLICENSE file; an Apache crate's LICENSE may name NOTICE or LICENSES/APACHE-2.0.txt).

The snapshot is a tar of our own making, but what it holds is the crate's: a name read in a
licence text, and a link's target, are untrusted. A name is looked up only as a relative
path inside the crate (no `..`, no absolute path, no backslash, not too deep); a link is
followed only while it stays inside the crate, a few hops at most; what is packed is a
plain text file of bounded size, never a folder, device or hard link.
"""

from __future__ import annotations

import io
import re
import tarfile
from pathlib import PurePosixPath

from orchestrator.config.resolve.archive_include import MAX_MEMBER_DEPTH

DOC_PREFIXES = ("readme", "license", "licence", "copying", "unlicense", "changelog")
LICENCE_PREFIXES = ("license", "licence", "copying", "unlicense")
# Below the archive's top folder: the archive reader takes MAX_MEMBER_DEPTH parts in all.
MAX_NAMED_DEPTH = MAX_MEMBER_DEPTH - 1
MAX_NAMED_BYTES = 1 << 20  # a licence or notice a licence names is text, far smaller
MAX_SCANNED_BYTES = 1 << 18  # how much of a licence text is read for names
MAX_LINK_HOPS = 8
# A word of a licence text that could be a file's name or path: "UNLICENSE", "LICENSE-MIT",
# "LICENSES/MIT.txt" (a URL's `:` ends it, so "https" and "//..." never name a crate file).
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./+-]*")


def crate_docs(source_archive: bytes, prefix: str = "src") -> list[tuple[str, bytes]]:
    """(path, bytes) of the crate's documents, sorted: the top-level README*/LICENSE*/
    LICENCE*/COPYING*/UNLICENSE*/CHANGELOG* files of the source snapshot (a tar of our own
    making, under `prefix/`), then every file a licence text among them names."""
    with tarfile.open(fileobj=io.BytesIO(source_archive), mode="r:") as tar:
        snapshot = _Snapshot(tar, prefix)
        found: dict[str, bytes] = {}
        for name in snapshot.top_level():
            data = snapshot.read(name) if name.lower().startswith(DOC_PREFIXES) else None
            if data is not None:
                found[name] = data
        licences = [data for name, data in found.items() if _is_licence(name)]
        for text in licences:
            for path in named_paths(text, snapshot.top_level()):
                data = None if path in found else snapshot.read(path, named=True)
                if data is not None:
                    found[path] = data
    return sorted(found.items())


def named_paths(text: bytes, top_level: list[str]) -> list[str]:
    """The crate paths a licence text may name, in the order it names them: a word with a
    `/` as it is spelt, one without as the top-level file of that name (case aside where
    the file's name is upper case: "the Unlicense" names UNLICENSE, "notice" NOTICE). The
    caller reads each one safely; a word that names nothing is no harm."""
    upper = {name.lower(): name for name in top_level if name == name.upper()}
    paths: list[str] = []
    for found in _NAME.findall(text[:MAX_SCANNED_BYTES].decode("utf-8", errors="replace")):
        word = found.rstrip(".")
        path = word if "/" in word or word in top_level else upper.get(word.lower(), "")
        if path and path not in paths:
            paths.append(path)
    return paths


def safe_parts(path: str) -> tuple[str, ...] | None:
    """`path` as parts of a relative path inside the crate; None for one that could reach
    outside it or is too deep to pack."""
    if not path or "\\" in path or "\0" in path:
        return None
    pure = PurePosixPath(path)
    parts = tuple(part for part in pure.parts if part != ".")
    if pure.is_absolute() or ".." in parts or not 1 <= len(parts) <= MAX_NAMED_DEPTH:
        return None
    return parts


def link_target(parts: tuple[str, ...], linkname: str) -> tuple[str, ...] | None:
    """Where the link at `parts` points, as parts inside the crate; None for an absolute
    target or one that climbs out (the snapshot refuses those when it is made, but a
    snapshot may come from a lock of another machine)."""
    if linkname.startswith("/") or "\\" in linkname or "\0" in linkname:
        return None
    resolved = list(parts[:-1])
    for part in PurePosixPath(linkname).parts:
        if part == "..":
            if not resolved:
                return None
            resolved.pop()
        elif part != ".":
            resolved.append(part)
    return tuple(resolved) if 1 <= len(resolved) <= MAX_NAMED_DEPTH else None


def _is_licence(name: str) -> bool:
    return "/" not in name and name.lower().startswith(LICENCE_PREFIXES)


class _Snapshot:
    """The snapshot's entries by their path below `prefix/`, read through links safely."""

    def __init__(self, tar: tarfile.TarFile, prefix: str) -> None:
        self._tar = tar
        self._entries: dict[tuple[str, ...], tarfile.TarInfo] = {}
        for member in tar:
            parts = PurePosixPath(member.name).parts
            if len(parts) >= 2 and parts[0] == prefix:
                self._entries.setdefault(parts[1:], member)

    def top_level(self) -> list[str]:
        return sorted(parts[0] for parts in self._entries if len(parts) == 1)

    def read(self, path: str, *, named: bool = False) -> bytes | None:
        """The bytes of the plain file at `path`, links inside the crate followed; None
        where there is none (or, for a file a licence `named`, it is large or not text)."""
        parts = safe_parts(path)
        for _hop in range(MAX_LINK_HOPS + 1):
            member = self._entries.get(parts) if parts is not None else None
            if member is None or parts is None:
                return None
            if member.isfile():
                return self._file(member, named=named)
            if not member.issym():  # a folder, hard link, device, fifo
                return None
            parts = link_target(parts, member.linkname)
        return None  # a chain of links too long, or a loop

    def _file(self, member: tarfile.TarInfo, *, named: bool) -> bytes | None:
        if named and member.size > MAX_NAMED_BYTES:
            return None
        handle = self._tar.extractfile(member)
        data = handle.read() if handle is not None else b""
        return None if named and b"\0" in data else data

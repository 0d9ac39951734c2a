"""SHA256SUMS lines, written and read the way GNU coreutils' `sha256sum` does.

A name holding a backslash, a newline or a carriage return is written on a line that
starts with a backslash, with those three characters escaped (`\\\\`, `\\n`, `\\r`):
coreutils 9 writes it so and `sha256sum -c` reads it back. Every other name, tabs and
other control characters included, is written as it is. So any file name can be listed,
and no name can end its line early and leave its file outside the signature.

Names are text decoded with `surrogateescape` (Python's file-system names), so a name that
is not UTF-8 is written back as its own bytes.
"""

from __future__ import annotations

from collections.abc import Iterable

_ESCAPED = {"\\": "\\\\", "\n": "\\n", "\r": "\\r"}
_UNESCAPED = {"\\": "\\", "n": "\n", "r": "\r"}
DIGEST_LENGTH = 64


class ChecksumsFormatError(ValueError):
    """A line that is not `<sha256>  <name>` in sha256sum's format; the message names it."""


def checksum_line(digest: str, name: str) -> str:
    """One line (with its newline) for `name`, escaped where sha256sum would escape it."""
    if any(c in name for c in _ESCAPED):
        return "\\" + digest + "  " + "".join(_ESCAPED.get(c, c) for c in name) + "\n"
    return f"{digest}  {name}\n"


def checksums_bytes(entries: Iterable[tuple[str, str]]) -> bytes:
    """The file's bytes for (digest, name) pairs, in the order given."""
    text = "".join(checksum_line(digest, name) for digest, name in entries)
    return text.encode("utf-8", "surrogateescape")


def _unescape(text: str, number: int) -> str:
    out: list[str] = []
    characters = iter(text)
    for c in characters:
        if c != "\\":
            out.append(c)
            continue
        following = next(characters, "")
        if following not in _UNESCAPED:
            raise ChecksumsFormatError(f"line {number}: unknown escape \\{following}")
        out.append(_UNESCAPED[following])
    return "".join(out)


def parse_checksums(data: bytes) -> list[tuple[str, str]]:
    """(name, digest) of every line, in order. Lines end at "\\n" only: a name may hold
    any other character, a carriage return or a form feed too."""
    text = data.decode("utf-8", "surrogateescape")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    found: list[tuple[str, str]] = []
    for number, line in enumerate(lines, start=1):
        escaped = line.startswith("\\")
        body = line[1:] if escaped else line
        digest, separator, name = body.partition("  ")
        if (
            not separator
            or len(digest) != DIGEST_LENGTH
            or any(c not in "0123456789abcdef" for c in digest)
            or not name
        ):
            raise ChecksumsFormatError(f"line {number} is not `<sha256>  <file>`")
        found.append((_unescape(name, number) if escaped else name, digest))
    return found

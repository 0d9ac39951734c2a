"""`[archive]` settings checked against the crate: the formats asked for, and the files
`archive.include` names, read from the locked source snapshot. Checked at plan time (a
pattern that matches nothing stops `build --dry-run` too) and read again when the archive
is packed, from the same snapshot bytes."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Sequence
from fnmatch import fnmatchcase
from pathlib import PurePosixPath

from orchestrator.config.declarations.kinds import Run
from orchestrator.errors import ConfigError

# Below an archive's top folder; its reader refuses anything deeper (a hostile archive).
MAX_MEMBER_DEPTH = 8
FORMATS = ("tar.xz", "zip")


def check_archive_formats(formats: Sequence[str]) -> None:
    """archive.formats names known formats, the .tar.xz among them (install.sh needs it)."""
    unknown = [name for name in formats if name not in FORMATS]
    if unknown or "tar.xz" not in formats:
        raise ConfigError(
            f"archive.formats: {list(formats)!r}: "
            + (f"unknown {unknown!r}" if unknown else '"tar.xz" is missing'),
            hint='Use ["tar.xz"] or ["tar.xz", "zip"]: the .tar.xz is always written, since '
            "install.sh unpacks it.",
        )


def check_include_pattern(pattern: str, where: str = "archive.include") -> PurePosixPath:
    """An archive.include glob (or a generated file's path) as a relative path inside the
    crate; ConfigError for a path that could reach outside it (untrusted input: the config
    may come from a lock, a record from another machine)."""
    path = PurePosixPath(pattern)
    if (
        not pattern.strip()
        or "\\" in pattern
        or path.is_absolute()
        or ".." in path.parts
        or len(path.parts) > MAX_MEMBER_DEPTH
    ):
        raise ConfigError(
            f"{where}: {pattern!r} is not a relative path inside the archive",
            hint='Name files by their path from the crate\'s root, e.g. "doc/tool.1" or '
            '"completions/*.bash": no leading "/", no "..", no backslashes.',
        )
    return path


def included_files(
    source_archive: bytes, patterns: Sequence[str], prefix: str = "src"
) -> list[tuple[str, bytes]]:
    """(path, bytes) of the snapshot's files that `archive.include` names, sorted. A glob
    matches one path segment per segment (`*` never crosses "/"). A pattern matching no
    file, or matching a link, is a ConfigError: never a silently smaller archive."""
    checked = [(pattern, check_include_pattern(pattern).parts) for pattern in patterns]
    found: dict[str, bytes] = {}
    matched: set[str] = set()
    with tarfile.open(fileobj=io.BytesIO(source_archive), mode="r:") as tar:
        for member in tar:
            path = PurePosixPath(member.name)
            if len(path.parts) < 2 or path.parts[0] != prefix:
                continue
            inside = path.parts[1:]
            hits = [p for p, parts in checked if _glob_matches(parts, inside)]
            if not hits or member.isdir():
                continue
            relative = "/".join(inside)
            if not member.isfile():
                raise ConfigError(
                    f"archive.include: {hits[0]!r} matches {relative}, which is a link",
                    hint="Archives hold plain files only: name the file the link points to.",
                )
            handle = tar.extractfile(member)
            if handle is not None:
                found[relative] = handle.read()
                matched.update(hits)
    for pattern, _parts in checked:
        if pattern not in matched:
            raise ConfigError(
                f"archive.include: {pattern!r} matches no file of the crate's source",
                hint="Check the path from the crate's root (files left out by package.exclude "
                "or not committed are not in the source snapshot), or remove the pattern.",
            )
    return sorted(found.items())


def _glob_matches(pattern: tuple[str, ...], path: tuple[str, ...]) -> bool:
    return len(pattern) == len(path) and all(map(fnmatchcase, path, pattern))


def check_generate_entries(
    entries: Sequence[Run], binaries: Sequence[str], included: Sequence[str] = ()
) -> None:
    """[[archive.generate]]: safe relative paths, each once and not also included from the
    crate, run by a binary the artifact ships."""
    seen = set(included) | set(binaries)
    for entry in entries:
        where = f"archive.generate {entry.path!r}"
        check_include_pattern(entry.path, "archive.generate")
        if any(char in entry.path for char in "*?["):
            raise ConfigError(
                f"{where}: a generated file's path is a file name, not a pattern",
                hint='Write the path it gets in the archive, e.g. "completions/tool.bash".',
            )
        if entry.binary and entry.binary not in binaries:
            raise ConfigError(
                f"{where}: binary = {entry.binary!r} is not one the artifact ships",
                hint="Name one of package.binaries: " + ", ".join(binaries) + ".",
            )
        if entry.path in seen:
            raise ConfigError(
                f"{where}: the archive already has a file at that path",
                hint="Give each generated file its own path, apart from the binaries and "
                "archive.include's files.",
            )
        seen.add(entry.path)

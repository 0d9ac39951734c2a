"""Two builders agree: the files two independent builds of one target shipped, compared
byte for byte before either is signed.

Reproducible builds make a second, independent build a witness: a runner (or a cache, or
an engine) that slipped its own bytes into a target cannot make another machine's build
slip in the same bytes. The comparison is of what ships, never of what merely describes
the build (logs, timings, the engine's name). When they differ, the first differing file
is named with how it differs: the sizes, and for the first differing byte its offset and,
in an ELF file, the section that holds it, so the cause (a timestamp in .rodata, a build
path in .debug_str, a random seed a build script wrote) is one look away.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from orchestrator.errors import OrchestratorError

CHUNK = 1 << 16


class BuildersDisagreeError(OrchestratorError):
    exit_code = 77
    summary = (
        "two builds of one target (`release --rebuild-on`, `release assemble --agree`) did "
        "not give the same bytes: nothing was signed"
    )
    default_hint = (
        "The message names the first file that differs and where. A difference in one "
        "build's bytes is either a non-reproducible input (a build script reading the time, "
        "randomness, the host) or a builder that changed what it built; rebuild on a third "
        "machine to tell which."
    )


@dataclass(frozen=True)
class Difference:
    """The first place two builds of a file part ways."""

    file: str  # relative to the target folder
    sizes: tuple[int | None, int | None]  # None where one side lacks the file
    offset: int | None = None  # first differing byte
    section: str | None = None  # the ELF section holding `offset`, if any

    def describe(self) -> str:
        first, second = self.sizes
        if first is None or second is None:
            return f"{self.file}: only one build has it"
        where = f"sizes {first} and {second} bytes"
        if first == second:
            where = f"both {first} bytes"
        if self.offset is not None:
            where += f"; first differing byte at offset {self.offset} (0x{self.offset:x})"
            if self.section is not None:
                where += f", in ELF section {self.section}"
        return f"{self.file}: {where}"


def first_difference(first: Path, second: Path, names: Iterable[str]) -> Difference | None:
    """The first of `names` (paths relative to both folders, compared in sorted order)
    whose bytes differ between `first` and `second`; None when all are identical."""
    for name in sorted(set(names)):
        found = compare_file(first / name, second / name, name)
        if found is not None:
            return found
    return None


def _size(path: Path) -> int | None:
    return path.stat().st_size if path.is_file() and not path.is_symlink() else None


def compare_file(first: Path, second: Path, name: str) -> Difference | None:
    sizes = (_size(first), _size(second))
    if sizes[0] is None or sizes[1] is None:
        return Difference(name, sizes)
    offset = _first_differing_offset(first, second)
    if offset is None:
        return None
    return Difference(name, sizes, offset, _section_at(first, offset))


def _first_differing_offset(first: Path, second: Path) -> int | None:
    """The first byte offset where the two files differ (the shorter one's end when one is a
    prefix of the other), or None when they are identical."""
    position = 0
    with first.open("rb") as one, second.open("rb") as two:
        while True:
            a, b = one.read(CHUNK), two.read(CHUNK)
            if a != b:
                common = min(len(a), len(b))
                index = next((i for i in range(common) if a[i] != b[i]), common)
                return position + index
            if not a:
                return None
            position += len(a)


def _section_at(path: Path, offset: int) -> str | None:
    """The name of the ELF section whose file bytes hold `offset`; the ELF header or the
    program/section header table by those names; None for a file that is no ELF."""
    try:
        with path.open("rb") as handle:
            elf = ELFFile(handle)
            if offset < elf["e_ehsize"]:
                return "(ELF header)"
            for section in elf.iter_sections():
                start, size = section["sh_offset"], section["sh_size"]
                if section["sh_type"] != "SHT_NOBITS" and start <= offset < start + size:
                    return section.name or "(unnamed)"
            tables = (
                ("(program headers)", elf["e_phoff"], elf["e_phnum"] * elf["e_phentsize"]),
                ("(section headers)", elf["e_shoff"], elf["e_shnum"] * elf["e_shentsize"]),
            )
            for label, start, size in tables:
                if start <= offset < start + size:
                    return label
    except (ELFError, ValueError, OSError, KeyError):
        return None
    return "(between sections)"

"""What a dynamically linked ELF binary asks of the loader, read with pyelftools.

The loader refuses to start a binary when a version it names in `.gnu.version_r` (say
`GLIBC_2.39` of libc.so.6) is missing from the system's library, even when the only symbol
bound to that version is a weak reference. So the glibc a binary needs is the highest
`GLIBC_x.y` among those version requirements, and the symbols bound to versions above a
floor are what to show a user who asked for that floor. `hide_versions_above` goes the
other way: it rewrites a glibc library as the linker would have seen it in an older glibc.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from elftools.common.exceptions import ELFError, ELFParseError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerDefSection, GNUVerNeedSection, GNUVerSymSection
from elftools.elf.sections import SymbolTableSection
from elftools.elf.segments import InterpSegment

GLIBC_PREFIX = "GLIBC_"


class ElfReadError(ValueError):
    """Not an ELF file, or one whose dynamic tables cannot be read."""


# What pyelftools (and the struct reads here) raise on a malformed file: a binary in a
# release someone else published is read by `verify`, so none of these may escape.
_MALFORMED = (
    ELFError,
    ELFParseError,
    LookupError,
    ValueError,
    ArithmeticError,
    TypeError,
    AttributeError,
    struct.error,
    OSError,
)


@contextmanager
def _reading(what: str) -> Iterator[None]:
    try:
        yield
    except ElfReadError:
        raise
    except _MALFORMED as exc:
        raise ElfReadError(f"{what}: {exc}") from exc


# For the other readers of ELF files (model/binaries/cpu_levels.py): the same errors, named.
reading_elf = _reading


def version_tuple(text: str) -> tuple[int, ...]:
    """`2.28` -> (2, 28); `2.2.5` -> (2, 2, 5)."""
    return tuple(int(part) for part in text.split("."))


def glibc_version(name: str) -> str | None:
    """`GLIBC_2.34` -> `2.34`; other version names (`GLIBC_PRIVATE`, `GCC_3.0`) -> None."""
    if not name.startswith(GLIBC_PREFIX):
        return None
    number = name[len(GLIBC_PREFIX) :]
    parts = number.split(".")
    return number if len(parts) >= 2 and all(p.isdigit() for p in parts) else None


@dataclass(frozen=True)
class VersionedSymbol:
    """An undefined dynamic symbol bound to a version of a library."""

    name: str
    library: str
    version: str  # the version's name, e.g. GLIBC_2.34
    weak: bool


# A version requirement the loader may find missing (it then warns on stderr and goes on);
# binutils does not set it, but a binary that has it does not need that version.
VER_FLG_WEAK = 0x2


@dataclass(frozen=True)
class Requirement:
    library: str
    version: str  # e.g. GLIBC_2.39
    optional: bool  # VER_FLG_WEAK: a missing version is not fatal


@dataclass(frozen=True)
class LoaderNeeds:
    interpreter: str  # PT_INTERP: the dynamic loader's path ("" for a static binary)
    needed: tuple[str, ...]  # DT_NEEDED, in order
    requirements: tuple[Requirement, ...]  # from .gnu.version_r
    symbols: tuple[VersionedSymbol, ...]  # undefined symbols with a version

    @property
    def glibc_versions(self) -> list[str]:
        """The glibc versions the loader insists on (optional ones left out)."""
        found = {v for r in self.requirements if not r.optional and (v := glibc_version(r.version))}
        return sorted(found, key=version_tuple)

    @property
    def glibc_max(self) -> str | None:
        versions = self.glibc_versions
        return versions[-1] if versions else None

    def glibc_above(self, floor: str) -> list[str]:
        """The required glibc versions newer than `floor`, oldest first."""
        return [v for v in self.glibc_versions if version_tuple(v) > version_tuple(floor)]

    def symbols_above(self, floor: str) -> list[VersionedSymbol]:
        """The symbols that make the binary need a glibc newer than `floor`."""
        required = {f"{GLIBC_PREFIX}{v}" for v in self.glibc_above(floor)}
        chosen = [s for s in self.symbols if s.version in required]
        return sorted(chosen, key=lambda s: (version_tuple(s.version[len(GLIBC_PREFIX) :]), s.name))


def _interpreter(elf: ELFFile) -> str:
    for segment in elf.iter_segments():
        if isinstance(segment, InterpSegment):
            return str(segment.get_interp_name())
    return ""


def _needed(elf: ELFFile) -> tuple[str, ...]:
    dynamic = elf.get_section_by_name(".dynamic")
    if not isinstance(dynamic, DynamicSection):
        return ()
    return tuple(
        str(getattr(tag, "needed", ""))
        for tag in dynamic.iter_tags()
        if tag.entry.d_tag == "DT_NEEDED"
    )


def _requirements(elf: ELFFile) -> tuple[dict[int, tuple[str, str]], list[Requirement]]:
    """({version index: (library, version name)}, every requirement)."""
    by_index: dict[int, tuple[str, str]] = {}
    every: list[Requirement] = []
    section = elf.get_section_by_name(".gnu.version_r")
    if not isinstance(section, GNUVerNeedSection):
        return by_index, every
    for verneed, auxiliaries in section.iter_versions():
        library = str(verneed.name)
        for aux in auxiliaries:
            by_index[int(aux["vna_other"])] = (library, str(aux.name))
            optional = bool(int(aux["vna_flags"]) & VER_FLG_WEAK)
            every.append(Requirement(library, str(aux.name), optional))
    return by_index, every


def _versioned_symbols(
    elf: ELFFile, by_index: dict[int, tuple[str, str]]
) -> Iterator[VersionedSymbol]:
    dynsym = elf.get_section_by_name(".dynsym")
    versym = elf.get_section_by_name(".gnu.version")
    if not isinstance(dynsym, SymbolTableSection) or not isinstance(versym, GNUVerSymSection):
        return
    for index, symbol in enumerate(dynsym.iter_symbols()):
        if symbol["st_shndx"] != "SHN_UNDEF" or not symbol.name:
            continue
        ndx = versym.get_symbol(index)["ndx"]  # a name for 0 and 1: local, global
        # The top bit marks a hidden version; the index is the rest.
        bound = by_index.get(ndx & 0x7FFF) if isinstance(ndx, int) else None
        if bound is not None:
            yield VersionedSymbol(
                name=str(symbol.name),
                library=bound[0],
                version=bound[1],
                weak=symbol["st_info"]["bind"] == "STB_WEAK",
            )


def read_loader_needs(stream: BinaryIO) -> LoaderNeeds:
    with _reading("not a readable ELF binary"):
        elf = ELFFile(stream)
        by_index, every = _requirements(elf)
        return LoaderNeeds(
            interpreter=_interpreter(elf),
            needed=_needed(elf),
            requirements=tuple(every),
            symbols=tuple(_versioned_symbols(elf, by_index)),
        )


def loader_needs(path: Path) -> LoaderNeeds:
    with path.open("rb") as stream:
        return read_loader_needs(stream)


def comment_strings(path: Path) -> list[str]:
    """The strings of a binary's .comment section: who compiled and linked its code
    ("rustc version ...", "GCC: ...", "Debian clang version ...", "Linker: ...")."""
    with path.open("rb") as stream, _reading(f"{path.name}: not a readable ELF binary"):
        section = ELFFile(stream).get_section_by_name(".comment")
        data = section.data() if section is not None else b""
    return [part.decode("utf-8", "replace") for part in data.split(b"\0") if part]


def hide_versions_above(data: bytes, floor: str) -> tuple[bytes, list[str]]:
    """A shared library as a linker would see it in glibc `floor`: every GLIBC_x.y symbol
    version newer than the floor hidden, and each symbol's newest version at or below the
    floor made its default. Return the new bytes and the definitions hidden.

    Linking against this view binds `exp` to its GLIBC_2.2.5 version rather than 2.29, and
    leaves a weak reference to a function that arrived later (Rust's std refers to `gettid`
    and `posix_spawn_file_actions_addchdir_np` weakly) without a version, so the loader does
    not require one; a strong reference to such a function fails to link. Only the
    `.gnu.version` entries change: the library is for the linker, never loaded.
    """
    with _reading("not a readable shared library"):
        return _hide_versions_above(data, floor)


def _hide_versions_above(data: bytes, floor: str) -> tuple[bytes, list[str]]:
    elf = ELFFile(io.BytesIO(data))
    if not elf.little_endian:
        raise ElfReadError("a big-endian ELF: symbol versions not rewritten")
    verdef = elf.get_section_by_name(".gnu.version_d")
    versym = elf.get_section_by_name(".gnu.version")
    dynsym = elf.get_section_by_name(".dynsym")
    if not (
        isinstance(verdef, GNUVerDefSection)
        and isinstance(versym, GNUVerSymSection)
        and isinstance(dynsym, SymbolTableSection)
    ):
        raise ElfReadError("no symbol versions to rewrite (not a glibc library?)")
    names: dict[int, str] = {}
    for definition, auxiliaries in verdef.iter_versions():
        names[int(definition["vd_ndx"])] = str(next(iter(auxiliaries)).name)
    limit, base = version_tuple(floor), int(versym["sh_offset"])
    # (entry index, symbol, version number) of every glibc-versioned definition
    defined: list[tuple[int, str, tuple[int, ...]]] = []
    moved: set[str] = set()  # symbols whose default version is newer than the floor
    for index, symbol in enumerate(dynsym.iter_symbols()):
        if symbol["st_shndx"] == "SHN_UNDEF":
            continue
        (raw,) = struct.unpack_from("<H", data, base + 2 * index)
        text = glibc_version(names.get(raw & 0x7FFF, ""))
        if text is None:
            continue
        defined.append((index, str(symbol.name), version_tuple(text)))
        if not raw & 0x8000 and version_tuple(text) > limit:
            moved.add(str(symbol.name))
    # In glibc `floor`, such a symbol's default was its newest version up to the floor
    # (none: it did not exist yet). Compat-only symbols stay as hidden as they were.
    newest: dict[str, tuple[int, ...]] = {}
    for _, name, found in defined:
        if name in moved and found <= limit:
            newest[name] = max(found, newest.get(name, ()))
    patched, hidden = bytearray(data), []
    for index, name, found in defined:
        offset = base + 2 * index
        (raw,) = struct.unpack_from("<H", patched, offset)
        if found > limit:
            struct.pack_into("<H", patched, offset, raw | 0x8000)
            hidden.append(f"{name}@{GLIBC_PREFIX}{'.'.join(map(str, found))}")
        elif newest.get(name) == found:
            struct.pack_into("<H", patched, offset, raw & 0x7FFF)
    return bytes(patched), hidden

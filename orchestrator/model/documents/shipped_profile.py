"""build.json's `profile`: the Cargo profile the shipped binaries were built with
([build] profile) and what it left in the main binary: debug info, a symbol table.

A crate may keep `debug = 1` in `release` for its developers and publish from another
profile (`dist`, `release-lto`); a shipped binary with debug info is many times larger
than it needs to be, so build.json says so and the build warns.
"""

from __future__ import annotations

from pathlib import Path

from elftools.elf.elffile import ELFFile
from pydantic import Field

from orchestrator.model.binaries.elf import reading_elf
from orchestrator.model.documents.record_io import Record

DEBUG_PREFIXES = (".debug_", ".zdebug_")


class ShippedProfile(Record):
    name: str = Field(description="the Cargo profile ([build] profile)")
    debug_sections: list[str] = Field(
        description="the main binary's DWARF sections (.debug_*), none when the profile "
        "has debug = false or strips it"
    )
    debug_bytes: int = Field(description="their size in bytes")
    symbols: bool = Field(description="the main binary keeps its symbol table (.symtab)")


def section_sizes(path: Path) -> dict[str, int]:
    """Every section of an ELF binary by name, with its size in the file."""
    with path.open("rb") as stream, reading_elf(f"{path.name}: not a readable ELF binary"):
        return {section.name: section["sh_size"] for section in ELFFile(stream).iter_sections()}


def shipped_profile(profile: str, binary: Path) -> ShippedProfile | None:
    """What `binary` carries; None for a file that is no ELF binary at all (nothing in it
    to report; a damaged ELF binary is an ElfReadError)."""
    with binary.open("rb") as stream:
        if stream.read(4) != b"\x7fELF":
            return None
    sizes = section_sizes(binary)
    debug = sorted(name for name in sizes if name.startswith(DEBUG_PREFIXES))
    return ShippedProfile(
        name=profile,
        debug_sections=debug,
        debug_bytes=sum(sizes[name] for name in debug),
        symbols=".symtab" in sizes,
    )


def debug_warning(shipped: ShippedProfile, size: int) -> str | None:
    """What to tell a user whose shipped binary carries debug info, or None."""
    if not shipped.debug_sections:
        return None
    return (
        f"the shipped binary carries {shipped.debug_bytes / 1e6:.1f} MB of debug info "
        f"({len(shipped.debug_sections)} .debug_* sections, of {size / 1e6:.1f} MB) from "
        f"profile {shipped.name!r}: set [build] profile to a profile with debug = false "
        "(or strip = true), such as the crate's own distribution profile"
    )

"""The static relocations a shipped binary need not carry, and build.json's record of them.

BOLT rewrites a binary's layout from the relocations the linker leaves in it with
`--emit-relocs`: `.rela.text`, `.rela.rodata`, `.rela.eh_frame` and so on, one section per
relocated section. Nothing else reads them: the loader reads only the dynamic ones
(`.rela.dyn`, `.rela.plt`), which lie in a loaded segment (SHF_ALLOC). So the sections of
type REL/RELA that no segment loads are dead weight in a binary BOLT did not rewrite (the
gate shipped the PGO build, or BOLT fell back); llvm-bolt itself writes none. Pure: reads
the section headers only.
"""

from __future__ import annotations

from typing import Any, BinaryIO

from elftools.common.exceptions import ELFError
from elftools.elf.constants import SH_FLAGS
from elftools.elf.elffile import ELFFile
from pydantic import BaseModel, ConfigDict

from orchestrator.model.binaries.elf import ElfReadError

_RELOCATION_TYPES = frozenset({"SHT_REL", "SHT_RELA"})


def static_relocation_sections(stream: BinaryIO) -> list[str]:
    """The names of the relocation sections no segment loads, in file order."""
    try:
        return [
            section.name
            for section in ELFFile(stream).iter_sections()
            if section["sh_type"] in _RELOCATION_TYPES
            and not section["sh_flags"] & SH_FLAGS.SHF_ALLOC
        ]
    except (ELFError, LookupError, ValueError, OSError) as exc:
        raise ElfReadError(f"section headers: {exc}") from exc


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StrippedBinary(_Entry):
    """One shipped binary: its static relocation sections, removed, and its sizes."""

    sections: list[str]  # removed; [] when it had none (a BOLT output, the release build)
    size_before: int
    size_after: int


class StaticRelocations(_Entry):
    """build.json `static_relocations`: what the strip-relocations step removed."""

    tool: str  # the llvm-objcopy that removed them
    binaries: dict[str, StrippedBinary]  # every shipped binary, the main one first
    bytes_saved: int  # over all of them
    # The stripped binaries' outputs compared with the baseline's, as `validation` records
    # the shipped ones'; None when nothing was stripped
    validation: dict[str, Any] | None = None

    @classmethod
    def of(cls, tool: str, binaries: dict[str, StrippedBinary]) -> StaticRelocations:
        saved = sum(b.size_before - b.size_after for b in binaries.values())
        return cls(tool=tool, binaries=binaries, bytes_saved=saved)

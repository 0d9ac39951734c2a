"""Which x86-64 psABI level a binary's machine code needs, read from its instructions.

Every instruction of the executable sections is decoded (iced-x86, linear sweep) and asks
for the CPUID features it needs; those of the levels above the x86-64 baseline are
counted per level. A binary built for x86-64-v2 holds no AVX2, BMI2 or LZCNT instruction,
unless it picks such code itself at run time after asking the CPU (memchr and
aho-corasick do, zstd's C code does): that takes the CPUID instruction (or glibc's
`__x86_get_cpu_features`). So:

- with no CPUID instruction and no such import, one instruction above the level is proof
  that the binary was compiled for a higher one;
- with one, code above the level is only expected in the few functions picked at run
  time: the binary is refused when more than `DISPATCHED_SHARE` of its functions (from the
  `.eh_frame_hdr` table) hold such instructions. A binary compiled for a higher level uses
  them everywhere (VEX-encoded vector code, SHLX, ANDN): 6-10% of the functions of the
  example crates at x86-64-v3, against 0.2% for memchr's dispatched AVX2 code at v2.

TZCNT is not counted: LLVM writes `rep bsf` (TZCNT's encoding) at every level where a zero
input cannot happen, and older CPUs run it as BSF.
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass, field
from typing import BinaryIO

import iced_x86
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from orchestrator.model.binaries.elf import ElfReadError, reading_elf

# rustc's name of each psABI level -> the CPUID features it adds (iced-x86's names).
LEVEL_FEATURES: dict[str, frozenset[str]] = {
    "x86-64": frozenset(),
    "x86-64-v2": frozenset({"CMPXCHG16B", "POPCNT", "SSE3", "SSSE3", "SSE4_1", "SSE4_2"}),
    "x86-64-v3": frozenset({"AVX", "AVX2", "BMI1", "BMI2", "F16C", "FMA", "LZCNT", "MOVBE"}),
    "x86-64-v4": frozenset({"AVX512F", "AVX512BW", "AVX512CD", "AVX512DQ", "AVX512VL"}),
}
LEVELS = tuple(LEVEL_FEATURES)
# Above this share of its functions holding code of a higher level, a binary that asks
# the CPU at run time was compiled for that level (see the module's docstring).
DISPATCHED_SHARE = 0.05
# Without a function table: the same judgement over instructions.
DISPATCHED_INSTRUCTION_SHARE = 0.01
# glibc's run-time view of the CPU (<sys/platform/x86.h>): dispatch without CPUID here.
CPU_QUERY_IMPORTS = frozenset({"__x86_get_cpu_features", "__x86_get_cpuid_feature_leaf"})

_SHF_EXECINSTR = 0x4
_PF_X = 0x1
_FEATURE_LEVEL: dict[int, int] = {}
for _index, _level in enumerate(LEVELS):
    for _name in LEVEL_FEATURES[_level]:
        _FEATURE_LEVEL[int(getattr(iced_x86.CpuidFeature, _name))] = _index
_TZCNT = int(iced_x86.Mnemonic.TZCNT)
_CPUID = int(iced_x86.Mnemonic.CPUID)
_MNEMONICS = {v: k.lower() for k, v in vars(iced_x86.Mnemonic).items() if isinstance(v, int)}


@dataclass
class LevelUse:
    """The instructions of one level above the baseline that a binary holds."""

    instructions: int = 0
    first: tuple[int, str] | None = None  # (address, mnemonic) of the first one
    functions: set[int] = field(default_factory=set)  # indexes into function_starts


@dataclass
class LevelScan:
    instructions: int
    by_level: dict[str, LevelUse]  # only the levels above x86-64 that it uses
    cpu_query: str | None  # how it could ask the CPU first ("CPUID at 0x..."), or None
    function_starts: list[int] | None  # from .eh_frame_hdr (None: no table to read)

    def functions_using(self, level: str) -> int:
        """How many functions hold an instruction of `level` or above."""
        found: set[int] = set()
        for name, use in self.by_level.items():
            if LEVELS.index(name) >= LEVELS.index(level):
                found |= use.functions
        return len(found)


def _code_ranges(elf: ELFFile) -> list[tuple[int, bytes]]:
    """(address, bytes) of the executable sections; of the executable segments where the
    file has no section headers."""
    ranges = [
        (int(s["sh_addr"]), s.data())
        for s in elf.iter_sections()
        if s["sh_type"] == "SHT_PROGBITS" and int(s["sh_flags"]) & _SHF_EXECINSTR
    ]
    if ranges or elf.num_sections():
        return ranges
    return [
        (int(p["p_vaddr"]), p.data())
        for p in elf.iter_segments()
        if p["p_type"] == "PT_LOAD" and int(p["p_flags"]) & _PF_X
    ]


def _function_starts(elf: ELFFile) -> list[int] | None:
    """The start of every function the unwinding table knows, sorted (None: no table in
    the one layout every linker writes: datarel sdata4 pairs)."""
    section = elf.get_section_by_name(".eh_frame_hdr")
    if section is None:
        return None
    data, base = section.data(), int(section["sh_addr"])
    if len(data) < 4 or data[0] != 1 or data[3] != 0x3B:
        return None
    sizes = {0x02: 2, 0x03: 4, 0x04: 8, 0x0A: 2, 0x0B: 4, 0x0C: 8}
    pointer_size = sizes.get(data[1] & 0x0F)
    if pointer_size is None or data[2] != 0x03:  # fde_count: udata4
        return None
    offset = 4 + pointer_size
    (count,) = struct.unpack_from("<I", data, offset)
    offset += 4
    if count > (len(data) - offset) // 8:
        raise ElfReadError(".eh_frame_hdr: its table is longer than the section")
    table = struct.unpack_from(f"<{2 * count}i", data, offset)
    return sorted(base + table[2 * i] for i in range(count))


def _level_of(instruction: iced_x86.Instruction) -> int:
    """The index in LEVELS of what an instruction needs; -1 for CPUID itself."""
    if instruction.mnemonic == _CPUID:
        return -1
    if instruction.mnemonic == _TZCNT:
        return 0
    features = instruction.cpuid_features()
    return max((_FEATURE_LEVEL.get(f, 0) for f in features), default=0)


def _imports_cpu_query(elf: ELFFile) -> str | None:
    dynsym = elf.get_section_by_name(".dynsym")
    if not isinstance(dynsym, SymbolTableSection):
        return None
    for symbol in dynsym.iter_symbols():
        if symbol.name in CPU_QUERY_IMPORTS and symbol["st_shndx"] == "SHN_UNDEF":
            return f"imports {symbol.name}"
    return None


def scan_levels(stream: BinaryIO, what: str) -> LevelScan:
    """Every instruction of an x86-64 ELF binary, by the psABI level it needs."""
    with reading_elf(f"{what}: not a readable ELF binary"):
        elf = ELFFile(stream)
        if elf.get_machine_arch() != "x64":
            raise ElfReadError(f"{what}: not an x86-64 binary")
        starts = _function_starts(elf)
        uses = [LevelUse() for _ in LEVELS]
        total = 0
        cpuid: int | None = None
        levels: dict[int, int] = {}  # instruction code -> level index (-1: CPUID)
        instruction = iced_x86.Instruction()
        for address, code in _code_ranges(elf):
            decoder = iced_x86.Decoder(64, code, ip=address)
            while decoder.can_decode:
                decoder.decode_out(instruction)
                total += 1
                level = levels.get(instruction.code)
                if level is None:
                    level = levels[instruction.code] = _level_of(instruction)
                if level == 0:
                    continue
                if level < 0:
                    cpuid = instruction.ip if cpuid is None else cpuid
                    continue
                use = uses[level]
                use.instructions += 1
                if starts is not None:
                    use.functions.add(bisect.bisect_right(starts, instruction.ip))
                if use.first is None:
                    use.first = (instruction.ip, _MNEMONICS.get(instruction.mnemonic, "?"))
        query = f"CPUID at {cpuid:#x}" if cpuid is not None else _imports_cpu_query(elf)
        return LevelScan(
            instructions=total,
            by_level={LEVELS[i]: use for i, use in enumerate(uses) if use.instructions},
            cpu_query=query,
            function_starts=starts,
        )


def level_problem(scan: LevelScan, target_cpu: str) -> str | None:
    """Why the scanned binary was not compiled for `target_cpu` (a psABI level), or None.
    A CPU name that is no psABI level (`native`, `znver4`) has no table: None."""
    if target_cpu not in LEVEL_FEATURES:
        return None
    above = [level for level in LEVELS[LEVELS.index(target_cpu) + 1 :] if level in scan.by_level]
    if not above:
        return None
    counted = ", ".join(_described(level, scan.by_level[level]) for level in above)
    if scan.cpu_query is None:
        return (
            f"it holds instructions of a higher level than {target_cpu} ({counted}) and no "
            "CPUID instruction to check the CPU before it runs them: it was built for "
            f"{above[-1]}"
        )
    if scan.function_starts:
        using = scan.functions_using(above[0])
        share, limit = using / len(scan.function_starts), DISPATCHED_SHARE
        measured = f"{using} of its {len(scan.function_starts)} functions ({share:.0%})"
    else:
        using = sum(scan.by_level[level].instructions for level in above)
        share, limit = using / max(scan.instructions, 1), DISPATCHED_INSTRUCTION_SHARE
        measured = f"{using} of its {scan.instructions} instructions ({share:.1%})"
    if share <= limit:
        return None
    return (
        f"{measured} hold instructions of a higher level than {target_cpu} ({counted}); "
        f"code picked at run time after {scan.cpu_query} is never that much (at most "
        f"{limit:.0%}): it was built for {above[-1]}"
    )


def _described(level: str, use: LevelUse) -> str:
    first = f", the first {use.first[1]} at {use.first[0]:#x}" if use.first else ""
    return f"{use.instructions} of {level}{first}"

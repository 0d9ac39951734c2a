"""What `release assemble` checks on every binary it receives, from its bytes alone: the
checks that need no build, run again on the machine that signs.

- ELF identity: 64-bit, little-endian, the machine of the target's architecture, an
  executable (ET_EXEC) or position-independent executable (ET_DYN);
- the CPU level of its instructions (model/binaries/cpu_levels.py), for x86-64 psABI levels;
- the glibc floor: no symbol version above `release.glibc_floor` (model/binaries/elf.py, as the
  portability step reads it);
- the toolchain marker: rustc writes "rustc version X.Y.Z (...)" into `.comment`; X.Y.Z
  must be the version the plan's toolchain pins.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from elftools.elf.elffile import ELFFile

from orchestrator.model.binaries.cpu_levels import level_problem, scan_levels
from orchestrator.model.binaries.elf import ElfReadError, read_loader_needs, reading_elf
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.release.assemble.assemble_errors import UnplannedBinaryError
from orchestrator.release.assemble.folder_files import open_checked, shown

# A shipped binary (a CUDA one with its device code included) stays well below this.
MAX_BINARY_BYTES = 2 << 30
MACHINES = {"x86_64": "EM_X86_64", "aarch64": "EM_AARCH64"}
EXECUTABLE_TYPES = ("ET_EXEC", "ET_DYN")
RUSTC_MARK = "rustc version "
_SHOWN_SYMBOLS = 8


@dataclass(frozen=True)
class BinaryFacts:
    """What the checks read from a binary, for the release summary."""

    glibc_max: str | None


def planned_rustc(plan: BuildPlan) -> str | None:
    """The rustc release the plan's toolchain pins ("1.85.1" of "1.85.1+dfsg1-1+deb13u1"),
    from its `rustc` (or `rustc-web`, ...) package; None where it pins none."""
    for package, version in sorted(plan.toolchain.packages.items()):
        if package == "rustc" or package.startswith("rustc-"):
            upstream = version.split(":")[-1]
            return upstream.split("+")[0].split("-")[0].split("~")[0]
    return None


def _comment(elf: ELFFile) -> list[str]:
    section = elf.get_section_by_name(".comment")
    data = section.data() if section is not None else b""
    return [part.decode("utf-8", "replace") for part in data.split(b"\0") if part]


def check_binary(path: Path, name: str, plan: BuildPlan) -> BinaryFacts:
    """Refuse (UnplannedBinaryError) a binary that is not what `plan` builds."""
    where = f"{plan.artifact_dir}/{shown(name)}"
    with open_checked(path, MAX_BINARY_BYTES, name) as handle:
        try:
            with reading_elf(f"{where}: not a readable ELF binary"):
                elf = ELFFile(handle)
                _check_identity(where, elf, plan)
                comment = _comment(elf)
            needs = read_loader_needs(handle)
            handle.seek(0)
            scan = scan_levels(handle, where) if plan.arch == "x86_64" else None
        except ElfReadError as error:
            raise UnplannedBinaryError(shown(str(error))) from None
    if scan is not None:
        problem = level_problem(scan, plan.target_cpu)
        if problem:
            raise UnplannedBinaryError(f"{where} is not an {plan.target_cpu} binary: {problem}")
    above = needs.symbols_above(plan.glibc_floor)
    versions = needs.glibc_above(plan.glibc_floor)
    if versions:
        named = [f"{s.name}@{s.version}" for s in above[:_SHOWN_SYMBOLS]]
        raise UnplannedBinaryError(
            f"{where} needs glibc {versions[-1]}, above the plan's floor {plan.glibc_floor}"
            + (f" ({', '.join(named)})" if named else "")
            + ": the plan links against that floor's glibc"
        )
    _check_toolchain(where, comment, plan)
    return BinaryFacts(glibc_max=needs.glibc_max)


def _check_identity(where: str, elf: ELFFile, plan: BuildPlan) -> None:
    machine, header = MACHINES.get(plan.arch), elf.header
    identity = (elf.elfclass, elf.little_endian, header["e_machine"])
    if identity != (64, True, machine):
        raise UnplannedBinaryError(
            f"{where} is a {identity[0]}-bit {'little' if identity[1] else 'big'}-endian "
            f"{identity[2]} binary; the plan builds a 64-bit little-endian {machine} one"
        )
    if header["e_type"] not in EXECUTABLE_TYPES:
        raise UnplannedBinaryError(f"{where} is of ELF type {header['e_type']}, not an executable")


def _check_toolchain(where: str, comment: list[str], plan: BuildPlan) -> None:
    expected = planned_rustc(plan)
    if expected is None:
        return
    found = sorted(
        {
            line[len(RUSTC_MARK) :].split(" ", 1)[0]
            for line in comment
            if line.startswith(RUSTC_MARK)
        }
    )
    if found != [expected]:
        said = ", ".join(shown(version) for version in found) or "no rustc at all"
        raise UnplannedBinaryError(
            f"{where} was compiled by {said} (its .comment section), not by rustc "
            f"{expected} of the plan's toolchain {plan.toolchain.name}"
        )

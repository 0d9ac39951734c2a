"""What an artifact needs from the machine it runs on: glibc, shared libraries, CPU features.

The glibc part comes from the ELF itself (model/binaries/elf.py): the highest `GLIBC_x.y`
version the loader will insist on, and the symbols that push it above `release.glibc_floor`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from orchestrator.model.binaries.elf import LoaderNeeds

_FEATURE_RE = re.compile(r'^target_feature="([^"]+)"$', re.M)


@dataclass(frozen=True)
class Portability:
    target: str
    target_cpu: str
    glibc_floor: str
    glibc_max: str | None  # highest GLIBC_x.y symbol version the binary needs
    above_floor: tuple[str, ...]  # "symbol@GLIBC_x.y" (weak ones marked) above the floor
    interpreter: str
    needed: tuple[str, ...]  # DT_NEEDED
    cpu_features: tuple[str, ...]

    def as_dict(self) -> dict[str, object]:
        return {
            "target": self.target,
            "target_cpu": self.target_cpu,
            "glibc_floor": self.glibc_floor,
            "glibc_max": self.glibc_max,
            "above_floor": list(self.above_floor),
            "interpreter": self.interpreter,
            "needed": list(self.needed),
            "cpu_features": list(self.cpu_features),
        }


def from_loader_needs(
    needs: LoaderNeeds, *, target: str, target_cpu: str, glibc_floor: str, rustc_cfg: str
) -> Portability:
    """From the binary's loader needs and `rustc --print cfg` of its code generation."""
    symbols = needs.symbols_above(glibc_floor)
    above = [f"{s.name}@{s.version}" + (" (weak)" if s.weak else "") for s in symbols]
    # A version required with no symbol bound to it still counts for the loader.
    named = {s.version for s in symbols}
    above += [
        f"(no symbol)@GLIBC_{v}"
        for v in needs.glibc_above(glibc_floor)
        if f"GLIBC_{v}" not in named
    ]
    return Portability(
        target=target,
        target_cpu=target_cpu,
        glibc_floor=glibc_floor,
        glibc_max=needs.glibc_max,
        above_floor=tuple(above),
        interpreter=needs.interpreter,
        needed=needs.needed,
        cpu_features=tuple(sorted(_FEATURE_RE.findall(rustc_cfg))),
    )

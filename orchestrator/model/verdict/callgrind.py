"""Counting instead of timing: callgrind's event counts and the estimated-cycles figure.

Wall time on a shared 2-core machine moves by +-15% between runs; callgrind counts the
instructions, simulated cache misses and branch mispredictions of one run, and the same
binary given the same input and environment gives the same counts whatever else the
machine does. That makes a 1% difference visible, and comparable between machines,
because the simulated caches have a fixed geometry (`CACHE_GEOMETRY`), not the host's.

Estimated cycles = Ir + 10 x L1 misses + 100 x LL misses + 10 x branch mispredictions.
The weights are the usual rough latencies of a modern x86 core (an L1 miss that hits
L2/L3 costs ~10 cycles, a miss to memory ~100, a mispredicted branch a ~10-20 cycle
pipeline flush) over a base of one instruction per cycle. It is a model, not a
measurement: it ranks binaries of the same program, which is all the gate asks of it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from orchestrator.errors import StepFailedError

# Fixed simulated caches (size, associativity, line size), those of one core of a 4th
# generation Xeon Scalable (Sapphire Rapids, e.g. Platinum 8480+: AWS m7i, GCP C3), a
# current server CPU: L1i 32 KiB 8-way, L1d 48 KiB 12-way, and as the last level the
# core's share of the shared L3 (105 MiB / 56 cores = 1.875 MiB, 15-way), what one core
# of a busy server holds. Callgrind models two levels, so the private 2 MiB L2 is folded
# into the "L1 miss" cost. Without fixed sizes valgrind copies the host CPU's caches and
# counts would differ between machines. Changing them changes every count: the gate's
# step keys hold CALLGRIND_ARGS, so counts made with other sizes are never reused.
CACHE_GEOMETRY = ("--I1=32768,8,64", "--D1=49152,12,64", "--LL=1966080,15,64")
CALLGRIND_ARGS = (
    "--tool=callgrind",
    "--cache-sim=yes",
    "--branch-sim=yes",
    *CACHE_GEOMETRY,
    "--trace-children=yes",  # workloads that spawn processes are counted whole
    "--dump-instr=no",
    "--compress-strings=no",
)
L1_MISS_CYCLES = 10
LL_MISS_CYCLES = 100
MISPREDICT_CYCLES = 10
FORMULA = (
    f"Ir + {L1_MISS_CYCLES} x L1 misses + {LL_MISS_CYCLES} x LL misses + "
    f"{MISPREDICT_CYCLES} x branch mispredictions"
)
_L1 = ("I1mr", "D1mr", "D1mw")
_LL = ("ILmr", "DLmr", "DLmw")
_BRANCHES = ("Bc", "Bi")
_MISPREDICTS = ("Bcm", "Bim")


@dataclass(frozen=True)
class Counts:
    """callgrind's totals for one run (summed over its processes)."""

    instructions: int = 0  # Ir
    l1_misses: int = 0  # I1mr + D1mr + D1mw
    ll_misses: int = 0  # ILmr + DLmr + DLmw
    branches: int = 0  # Bc + Bi
    mispredicts: int = 0  # Bcm + Bim

    @property
    def estimated_cycles(self) -> int:
        return (
            self.instructions
            + L1_MISS_CYCLES * self.l1_misses
            + LL_MISS_CYCLES * self.ll_misses
            + MISPREDICT_CYCLES * self.mispredicts
        )

    def __add__(self, other: Counts) -> Counts:
        return Counts(
            self.instructions + other.instructions,
            self.l1_misses + other.l1_misses,
            self.ll_misses + other.ll_misses,
            self.branches + other.branches,
            self.mispredicts + other.mispredicts,
        )

    def as_dict(self) -> dict[str, int]:
        return {
            "instructions": self.instructions,
            "l1_misses": self.l1_misses,
            "ll_misses": self.ll_misses,
            "branches": self.branches,
            "mispredicts": self.mispredicts,
            "estimated_cycles": self.estimated_cycles,
        }


def parse_totals(lines: Iterable[str]) -> Counts:
    """The sum of every `events:` / `summary:` pair in callgrind output files (one pair per
    process: a workload that spawns children leaves one file each)."""
    total, events, seen = Counts(), list[str](), 0
    for line in lines:
        if line.startswith("events:"):
            events = line.split()[1:]
        elif line.startswith("summary:"):
            values = line.split()[1:]
            if not events or len(values) > len(events):
                raise StepFailedError(f"unreadable callgrind output: {line!r} after {events}")
            try:
                counted = dict(zip(events, map(int, values), strict=False))
            except ValueError:
                raise StepFailedError(f"unreadable callgrind output: {line!r}") from None
            missing = {"Ir", *_L1, *_LL, *_BRANCHES, *_MISPREDICTS} - set(events)
            if missing:
                raise StepFailedError(
                    f"callgrind did not count {', '.join(sorted(missing))}: was it run with "
                    "--cache-sim=yes --branch-sim=yes?"
                )
            total += Counts(
                counted.get("Ir", 0),
                sum(counted.get(e, 0) for e in _L1),
                sum(counted.get(e, 0) for e in _LL),
                sum(counted.get(e, 0) for e in _BRANCHES),
                sum(counted.get(e, 0) for e in _MISPREDICTS),
            )
            seen += 1
    if not seen:
        raise StepFailedError("callgrind wrote no summary: the run was not counted")
    return total


def geometric_mean(values: Sequence[float]) -> float:
    """Each workload weighs the same, whatever its length."""
    if not values or any(v <= 0 for v in values):
        raise ValueError(f"geometric mean needs positive values, got {list(values)}")
    return math.exp(math.fsum(math.log(v) for v in values) / len(values))


def cycles_ratio(variant: Sequence[Counts], reference: Sequence[Counts]) -> float:
    """Geometric mean over workloads of variant / reference estimated cycles (< 1: fewer)."""
    if len(variant) != len(reference):
        raise ValueError("both variants must have run the same workloads")
    return geometric_mean(
        [v.estimated_cycles / r.estimated_cycles for v, r in zip(variant, reference, strict=True)]
    )

"""Which levels an `-auto` folder ships, from the speed gate's counts of each level.

A higher x86-64 level is only worth its download where it runs faster: a level whose
shipped binary counts no fewer estimated cycles than the highest level kept below it
(the geometric mean over the gate workloads both counted, each workload weighing the
same, as the gate itself compares variants) is left out of libexec/. The dispatcher runs
the highest level present at or below the CPU's, so that level's CPUs then run the lower
one. The lowest level is always kept: it is the floor every CPU of the folder runs.

Where either side has no counts (gate off, nothing measured, no workload in common), the
level is kept, as before this rule existed, and the decision says why. Pure: it reads
only each level's signed build.json, so a release on one machine and `release assemble`
of levels built on several decide alike, and `verify` decides again to check it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from orchestrator.model.documents.compose_record import LevelDecision
from orchestrator.model.documents.records import GateInfo
from orchestrator.model.verdict.callgrind import geometric_mean
from orchestrator.model.verdict.gate import basis_points, cycles_change, stored_ratio

EVEN = 10_000  # basis points of a ratio of 1: as many estimated cycles


@dataclass(frozen=True)
class LevelCounts:
    """One level's folder and its shipped binary's estimated cycles per gate workload
    (workload -> cycles), or why there are none."""

    level: str
    target: str
    cycles: Mapping[str, int]
    missing: str = ""


def shipped_cycles(level: str, target: str, gate: GateInfo | None) -> LevelCounts:
    """What the level's gate counted of the variant that shipped, from build.json's gate."""
    if gate is None:
        return LevelCounts(level, target, {}, "no speed gate ran for it")
    if gate.skipped:
        return LevelCounts(level, target, {}, f"its gate measured nothing ({gate.skipped})")
    shipped = gate.shipped
    if shipped is None or not gate.per_workload:
        return LevelCounts(level, target, {}, "its gate recorded no counts")
    cycles: dict[str, int] = {}
    for row in gate.per_workload:
        value = row.cycles.get(shipped, 0)
        if value <= 0:
            why = f"its gate recorded no count of {shipped} on {row.workload!r}"
            return LevelCounts(level, target, {}, why)
        cycles[row.workload] = value
    return LevelCounts(level, target, cycles)


def _kept(counts: LevelCounts, reason: str, **numbers: object) -> LevelDecision:
    return LevelDecision.model_validate(
        {"target": counts.target, "kept": True, "reason": reason, **numbers}
    )


def map_levels(levels: Sequence[LevelCounts]) -> dict[str, LevelDecision]:
    """Each level's decision (lowest first, as `levels` must come): kept, or left out
    because it counts no fewer estimated cycles than the highest level kept below it."""
    decisions: dict[str, LevelDecision] = {}
    below: LevelCounts | None = None  # the highest level kept so far
    for counts in levels:
        if below is None:
            decisions[counts.level] = _kept(counts, "kept: the lowest level, which every CPU runs")
            below = counts
            continue
        shared = [w for w in below.cycles if w in counts.cycles]
        missing = counts.missing or below.missing
        if missing or not shared:
            whose = counts.level if counts.missing else below.level
            why = f"{whose}: {missing}" if missing else "no gate workload counted by both"
            reason = f"kept: no counts to compare with {below.level} ({why})"
            decisions[counts.level] = _kept(counts, reason, against=below.level)
            below = counts
            continue
        ratio = geometric_mean([counts.cycles[w] / below.cycles[w] for w in shared])
        mine = sum(counts.cycles[w] for w in shared)
        theirs = sum(below.cycles[w] for w in shared)
        points = basis_points(ratio)
        change = (
            f"as many estimated cycles as {below.level}"
            if points == EVEN
            else f"{cycles_change(ratio)} than {below.level}"
        )
        measured = (
            f"{change} (geometric mean over {len(shared)} gate workloads; "
            f"{mine:,} vs {theirs:,} summed)"
        )
        numbers = {
            "against": below.level,
            "workloads": len(shared),
            "cycles": mine,
            "against_cycles": theirs,
            "ratio": stored_ratio(ratio),
        }
        if points < EVEN:
            decisions[counts.level] = _kept(counts, f"kept: {measured}", **numbers)
            below = counts
            continue
        reason = f"left out: {measured}; its CPUs run {below.level}"
        decisions[counts.level] = LevelDecision.model_validate(
            {"target": counts.target, "kept": False, "reason": reason, **numbers}
        )
    return decisions

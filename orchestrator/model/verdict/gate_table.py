"""The speed gate per workload: each variant's estimated cycles on every workload, against
plain `cargo build --release` and the release profile.

The gate decides on a geometric mean over the workloads, and a mean can hide a variant
that saves 20% on one workload and costs 4% on another: the per-workload table shows it,
and a variant that wins some workloads and loses others is named wherever the gate's
result is told (step line, closing lines, release warnings).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from orchestrator.model.documents.records import GateInfo, GateWorkload
from orchestrator.model.verdict.callgrind import Counts
from orchestrator.model.verdict.gate import (
    BASELINE,
    percent_change,
    saved_change,
    shown_tenths,
    stored_ratio,
)

RELEASE = "release"
HEADER = ("workload", "variant", "est. cycles", "vs cargo build", "vs release")


def workload_rows(
    counts: Mapping[str, Sequence[Counts]], labels: Sequence[str]
) -> list[GateWorkload]:
    """One row per workload (in `labels` order): every variant's estimated cycles and its
    ratios to the baseline and to the release profile."""
    rows = []
    for index, label in enumerate(labels):
        cycles = {name: runs[index].estimated_cycles for name, runs in counts.items()}
        rows.append(
            GateWorkload(
                workload=label,
                cycles=cycles,
                vs_baseline=_ratios(cycles, BASELINE),
                vs_release=_ratios(cycles, RELEASE),
            )
        )
    return rows


def _ratios(cycles: Mapping[str, int], reference: str) -> dict[str, float]:
    base = cycles.get(reference)
    if not base:  # not counted (or zero: no ratio means anything)
        return {}
    return {name: stored_ratio(value / base) for name, value in cycles.items()}


@dataclass(frozen=True)
class Split:
    """A variant that saves estimated cycles against cargo build on some workloads and
    costs more on others."""

    variant: str
    wins: int
    total: int
    losses: tuple[str, ...]  # "workload 3 (`args`): +4.1%"

    def text(self) -> str:
        return f"{self.variant} wins {self.wins} of {self.total} workloads"

    def line(self) -> str:
        return (
            f"{self.text()} against cargo build --release; more estimated cycles on "
            + "; ".join(self.losses)
        )


def splits(rows: Sequence[GateWorkload]) -> list[Split]:
    """Every variant (not the baseline) that wins at least one workload and loses at
    least one, by estimated cycles against the baseline; ties (a change that shows as
    0.0%) count as neither."""
    if not rows:
        return []
    found = []
    for variant in rows[0].cycles:
        if variant == BASELINE or any(BASELINE not in row.cycles for row in rows):
            continue
        wins, losses = 0, []
        for number, row in enumerate(rows, 1):
            ratio = row.cycles[variant] / row.cycles[BASELINE] if row.cycles[BASELINE] else 1.0
            wins += shown_tenths(ratio) < 0
            if shown_tenths(ratio) > 0:
                losses.append(f"workload {number} (`{row.workload}`): {percent_change(ratio)}")
        if wins and losses:
            found.append(Split(variant, wins, len(rows), tuple(losses)))
    return found


def gate_splits(gate: GateInfo | None) -> list[str]:
    """The warning of a build's gate record: the shipped variant's, where it wins some
    workloads and loses others (what users get is slower than plain cargo there). A
    variant that does not ship changes nothing users run: its split stays in the step log
    and build.json's table. None when the gate did not count."""
    if gate is None:
        return []
    return [split.line() for split in splits(gate.per_workload) if split.variant == gate.shipped]


def table_lines(rows: Sequence[GateWorkload]) -> list[str]:
    """The per-workload table as aligned text lines (the step log), each workload's
    arguments after it; changes are against cargo build and the release profile."""
    if not rows:
        return []
    cells = [HEADER]
    for number, row in enumerate(rows, 1):
        for position, (variant, cycles) in enumerate(row.cycles.items()):
            vs_base, vs_release = row.vs_baseline.get(variant), row.vs_release.get(variant)
            cells.append(
                (
                    str(number) if position == 0 else "",
                    variant,
                    f"{cycles:,}",
                    "-" if variant == BASELINE or vs_base is None else percent_change(vs_base),
                    "-"
                    if variant in (BASELINE, RELEASE) or vs_release is None
                    else percent_change(vs_release),
                )
            )
    widths = [max(len(line[column]) for line in cells) for column in range(len(HEADER))]
    lines = [
        "  ".join(
            # Names left, numbers right: the digits of a column line up.
            cell.ljust(width) if column < 2 else cell.rjust(width)
            for column, (cell, width) in enumerate(zip(line, widths, strict=True))
        ).rstrip()
        for line in cells
    ]
    lines += [f"workload {number}: {row.workload}" for number, row in enumerate(rows, 1)]
    return lines


def release_column(cycles_saved_vs_baseline: float | None) -> str:
    """The release table's "est. cycles vs cargo build" cell: '-11.3%' ('-': not counted)."""
    if cycles_saved_vs_baseline is None:
        return "-"
    return saved_change(cycles_saved_vs_baseline)

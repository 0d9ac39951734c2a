"""The table `orchestrator release` prints at the end: one row per target, what it built,
what ships, and what that saves."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Column, Table
from rich.text import Text

from orchestrator.model.verdict.gate import saved_change
from orchestrator.model.verdict.gate_table import release_column

if TYPE_CHECKING:
    from collections.abc import Sequence

    from orchestrator.release.targets.target import TargetResult

CYCLES_COLUMN = "est. cycles vs cargo build"


def shipped_text(result: TargetResult) -> str:
    """'pgo (-8.3% vs release)': the gate's pick and what it saves by callgrind's estimated
    cycles against the release profile ('-': unmeasured)."""
    if result.shipped_variant is None:
        return "-"
    text = result.shipped_variant
    if result.cycles_saved_vs_release is not None and result.shipped_variant != "release":
        text += f" ({saved_change(result.cycles_saved_vs_release)} vs release)"
    return text


FOLD_MIN = 12  # a folded column (target, notes) reads well down to this width


def _fits(cells: Sequence[Sequence[str]], folded: set[int], width: int) -> bool:
    """Whether a table of `cells` (the header first) shows every word whole in `width`
    columns. Rich narrows the widest columns first, all to one level, and a column cut
    below its longest word ends in "…"; folded columns break words instead."""
    columns = list(zip(*cells, strict=True))
    natural = [
        max(len(line) for cell in column for line in cell.splitlines()) for column in columns
    ]
    longest = [
        FOLD_MIN
        if index in folded
        else max((len(w) for cell in column for w in cell.split()), default=1)
        for index, column in enumerate(columns)
    ]
    level = max(longest)
    borders = 3 * len(columns) + 1  # "│ " before each cell, " │" after the last
    return sum(min(size, level) for size in natural) + borders <= width


def _status(result: TargetResult) -> Text:
    return Text(result.status, style="red" if result.status == "failed" else "green")


def release_table(results: Sequence[TargetResult], title: str, width: int) -> Table:
    """Every target's row, a column per fact where `width` holds them all whole; else
    the target, its status, the estimated cycles and one folded column of the rest
    (an 80-column terminal: ten columns there would cut every figure short)."""
    several = len({result.engine for result in results if result.engine}) > 1
    header = [
        "target",
        *(["engine"] if several else []),
        "status",
        "time",
        "size",
        "ships",
        CYCLES_COLUMN,
        "wall time",
        "glibc",
        "runs on",
        "notes",
    ]
    rows = [_facts(result, several=several) for result in results]
    if _fits([header, *rows], {0, len(header) - 1}, width):
        table = Table(*(_column(name) for name in header), title=title)
        status = header.index("status")
        for result, row in zip(results, rows, strict=True):
            table.add_row(*row[:status], _status(result), *row[status + 1 :])
        return table
    table = Table(
        Column("target", overflow="fold"),
        "status",
        Column(CYCLES_COLUMN, justify="right", max_width=len("est. cycles")),
        Column("details", overflow="fold"),
        title=title,
    )
    shown_first = ("ships", "wall time")  # what the row is about, then the rest
    order = [*shown_first, *(n for n in header if n not in shown_first)]
    for result, row in zip(results, rows, strict=True):
        facts = dict(zip(header, row, strict=True))
        details = [
            f"{name} {facts[name]}"
            for name in order
            if name not in ("target", "status", CYCLES_COLUMN, "notes") and facts[name] != "-"
        ]
        table.add_row(
            result.artifact,
            _status(result),
            facts[CYCLES_COLUMN],
            "; ".join([*details, facts["notes"]]).strip("; "),
        )
    return table


def _column(name: str) -> Column | str:
    if name in ("target", "notes"):  # never cut: a target's name ends in what tells it apart
        return Column(name, overflow="fold")
    if name == CYCLES_COLUMN:
        # What ships against plain cargo build --release by the speed gate's estimated
        # cycles, one yardstick for every target ("-": the gate did not count).
        return Column(name, justify="right")
    return name


def _facts(result: TargetResult, *, several: bool) -> list[str]:
    """One target's cells, in the wide table's column order."""
    return [
        result.artifact,
        *([result.engine or "-"] if several else []),
        result.status,
        f"{result.seconds:.0f}s",
        f"{result.size / 1e6:.2f} MB" if result.size else "-",
        shipped_text(result),
        release_column(result.cycles_saved_vs_baseline),
        f"{result.speedup:.3f}x" if result.speedup else result.speedup_note or "-",
        result.glibc or "-",
        result.oldest_distribution or "-",
        "; ".join(
            note
            for note in [
                result.error,
                *result.warnings,
                f"BOLT {result.bolt}" if result.bolt else "",
                # cudarc loads CUDA when it runs: the user's driver must serve this release
                f"needs a CUDA {result.cuda_runtime} driver" if result.cuda_runtime else "",
                # GPU flavors: whether training and validation ran the GPU path on a GPU
                f"gpu path {result.gpu_path}" if result.gpu_path else "",
            ]
            if note
        ),
    ]

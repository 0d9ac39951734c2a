"""One rounding of the speed gate's ratios everywhere (issue 42.6): a ratio goes through its
basis points (as records keep it) before it is shown at 0.1%, so the step log's table, the
split warning, the gate's reasons and the release table say the same figure whether they
start from the counts or from a record; a change that shows as 0.0% is a tie; and only the
shipped variant's split is a warning."""

from __future__ import annotations

import pytest

from orchestrator.model.documents.records import GateInfo
from orchestrator.model.verdict.callgrind import Counts
from orchestrator.model.verdict.gate import (
    BASELINE,
    basis_points,
    cycles_change,
    decide,
    gain,
    percent_change,
    saved_change,
)
from orchestrator.model.verdict.gate_table import (
    gate_splits,
    release_column,
    splits,
    table_lines,
    workload_rows,
)


@pytest.mark.parametrize(
    ("ratio", "change", "words"),
    [
        (0.887, "-11.3%", "11.3% fewer estimated cycles"),
        (1.0415, "+4.2%", "4.2% more estimated cycles"),
        # 10015 basis points, as a record keeps it: +0.2% from the counts and the record
        (1.00149, "+0.2%", "0.2% more estimated cycles"),
        (1.0015, "+0.2%", "0.2% more estimated cycles"),
        (0.9985, "-0.2%", "0.2% fewer estimated cycles"),  # halves away from zero
        (1.0004, "+0.0%", "0.0% fewer estimated cycles"),
        (0.9996, "+0.0%", "0.0% fewer estimated cycles"),  # never "-0.0%"
        (1.0, "+0.0%", "0.0% fewer estimated cycles"),
    ],
)
def test_a_ratio_shows_one_way(ratio: float, change: str, words: str) -> None:
    assert percent_change(ratio) == change
    assert cycles_change(ratio) == words


def test_the_same_ratio_shows_the_same_from_the_counts_and_from_a_record() -> None:
    """baseline 100,000 vs release 100,149: +0.149%, stored as 1.0015. Rounding the raw
    ratio to 0.1% gave +0.1% in the split, the stored one +0.2% in the table."""
    counts = {
        BASELINE: [Counts(100_000), Counts(100_000)],
        "release": [Counts(100_149), Counts(90_000)],
    }
    rows = workload_rows(counts, ["a", "b"])
    assert rows[0].vs_baseline["release"] == 1.0015
    [split] = splits(rows)
    assert split.losses == ("workload 1 (`a`): +0.2%",)
    lines = table_lines(rows)
    release_row = lines[lines.index(next(line for line in lines if "100,149" in line))]
    assert release_row.split() == ["release", "100,149", "+0.2%", "-"]
    # The release table's cell, from the gain build.json keeps, says it too.
    only = {BASELINE: counts[BASELINE][:1], "release": counts["release"][:1]}
    saved = gain(only, "release", BASELINE)
    assert saved == -0.0015
    assert release_column(saved) == saved_change(saved) == "+0.2%"


def test_a_change_that_shows_as_nothing_is_a_tie_not_a_loss() -> None:
    """'more estimated cycles on workload 1: +0.0%' said nothing: no split."""
    counts = {
        BASELINE: [Counts(1_000_000), Counts(1_000_000)],
        "release": [Counts(1_000_400), Counts(900_000)],
    }
    assert splits(workload_rows(counts, ["a", "b"])) == []


def _gate(shipped: str) -> GateInfo:
    counts = {
        BASELINE: [Counts(1000), Counts(1000), Counts(1000), Counts(1000)],
        "release": [Counts(1100), Counts(900), Counts(900), Counts(1000)],  # a split
        "pgo": [Counts(800), Counts(800), Counts(800), Counts(800)],  # wins everywhere
    }
    return GateInfo(
        policy="best",
        min_gain=0.01,
        metric="m",
        workloads=4,
        shipped=shipped,
        per_workload=workload_rows(counts, ["w1", "w2", "w3", "w4"]),
    )


def test_only_the_shipped_variant_s_split_is_a_warning() -> None:
    """release wins 2 of 4 workloads and loses one, but pgo ships: nothing users run is
    slower, so no warning (the step log's table still shows it)."""
    assert [split.variant for split in splits(_gate("pgo").per_workload)] == ["release"]
    assert gate_splits(_gate("pgo")) == []
    [line] = gate_splits(_gate("release"))
    assert line == (
        "release wins 2 of 4 workloads against cargo build --release; more estimated "
        "cycles on workload 1 (`w1`): +10.0%"
    )


def test_the_gate_s_reasons_and_gains_use_the_same_rounding() -> None:
    counts = {
        BASELINE: [Counts(100_000)],
        "release": [Counts(100_000)],
        "pgo": [Counts(99_850)],
    }
    decision = decide(counts, ["release", "pgo"], policy="best", min_gain=0.001)
    assert decision.reasons == ("pgo: 0.2% fewer estimated cycles than release: ships pgo",)
    saved = gain(counts, "pgo", BASELINE)
    assert saved == 0.0015 and basis_points(1.0 - saved) == 9985
    assert release_column(saved) == "-0.2%"

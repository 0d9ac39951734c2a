"""The -auto folder's level map (model/verdict/level_map.py): a level that the gate counted no
faster than the highest level kept below it is left out; missing counts keep a level."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from orchestrator.model.documents.records import GateInfo, GateWorkload
from orchestrator.model.verdict.level_map import LevelCounts, map_levels, shipped_cycles

WORKLOADS = ("run a", "run b")


def gate(cycles: Mapping[str, int], shipped: str = "pgo") -> GateInfo:
    """A gate record whose shipped variant counted `cycles` (workload -> estimated cycles);
    plain cargo build counts more on every workload."""
    return GateInfo(
        policy="best",
        min_gain=0.01,
        metric="estimated cycles",
        workloads=len(cycles),
        shipped=shipped,
        per_workload=[
            GateWorkload(
                workload=name,
                cycles={"baseline": value * 2, shipped: value},
                vs_baseline={},
                vs_release={},
            )
            for name, value in cycles.items()
        ],
    )


def level(name: str, cycles: Mapping[str, int] | None) -> LevelCounts:
    record = gate(cycles) if cycles is not None else None
    return shipped_cycles(name, f"demo-{name}", record)


def test_the_shipped_variant_s_counts_are_read_per_workload() -> None:
    counts = shipped_cycles("x86-64-v3", "demo-v3", gate({"run a": 100, "run b": 300}))
    assert counts.cycles == {"run a": 100, "run b": 300} and counts.missing == ""
    released = shipped_cycles("x86-64-v3", "demo-v3", gate({"run a": 100}, shipped="release"))
    assert released.cycles == {"run a": 100}


@pytest.mark.parametrize(
    ("record", "why"),
    [
        (None, "no speed gate ran"),
        (GateInfo(policy="off", min_gain=0.0, metric="", skipped="no valgrind"), "no valgrind"),
        (GateInfo(policy="best", min_gain=0.0, metric=""), "no counts"),
        (gate({"run a": 0}), "no count of pgo on 'run a'"),
    ],
)
def test_a_level_without_counts_says_why(record: GateInfo | None, why: str) -> None:
    counts = shipped_cycles("x86-64-v3", "demo-v3", record)
    assert counts.cycles == {} and why in counts.missing


def test_a_level_counting_fewer_cycles_is_kept() -> None:
    decisions = map_levels(
        [
            level("x86-64-v2", {"run a": 1000, "run b": 2000}),
            level("x86-64-v3", {"run a": 900, "run b": 1900}),
        ]
    )
    assert [d.kept for d in decisions.values()] == [True, True]
    v3 = decisions["x86-64-v3"]
    assert v3.against == "x86-64-v2" and v3.workloads == 2
    assert (v3.cycles, v3.against_cycles) == (2800, 3000)
    assert v3.ratio == pytest.approx(0.9247, abs=1e-4)  # sqrt(0.9 x 0.95)
    assert v3.reason.startswith("kept: 7.5% fewer estimated cycles than x86-64-v2")
    assert "2,800 vs 3,000 summed" in v3.reason
    assert decisions["x86-64-v2"].reason.startswith("kept: the lowest level")


@pytest.mark.parametrize(
    ("v3", "shown"),
    [
        ({"run a": 1000, "run b": 2000}, "as many estimated cycles as x86-64-v2"),
        # more on one workload, fewer on the other: the mean is above even
        ({"run a": 1009, "run b": 1996}, "0.4% more estimated cycles than x86-64-v2"),
    ],
)
def test_a_level_counting_as_many_or_more_is_left_out(v3: dict[str, int], shown: str) -> None:
    decisions = map_levels(
        [level("x86-64-v2", {"run a": 1000, "run b": 2000}), level("x86-64-v3", v3)]
    )
    left = decisions["x86-64-v3"]
    assert not left.kept and left.target == "demo-x86-64-v3"
    assert left.reason.startswith(f"left out: {shown}")
    assert left.reason.endswith("its CPUs run x86-64-v2")
    assert decisions["x86-64-v2"].kept


def test_the_decision_is_on_the_geometric_mean_not_the_sum() -> None:
    """One long workload must not outvote the others: 10% fewer on a short one and 1% more
    on a long one is kept, though the sum grows."""
    decisions = map_levels(
        [
            level("x86-64-v2", {"run a": 100, "run b": 100_000}),
            level("x86-64-v3", {"run a": 90, "run b": 101_000}),
        ]
    )
    v3 = decisions["x86-64-v3"]
    assert v3.kept and v3.cycles is not None and v3.against_cycles is not None
    assert v3.cycles > v3.against_cycles


def test_missing_counts_on_either_side_keep_the_level_and_say_why() -> None:
    off = map_levels([level("x86-64-v2", None), level("x86-64-v3", {"run a": 2000})])
    assert off["x86-64-v3"].kept
    assert off["x86-64-v3"].reason == (
        "kept: no counts to compare with x86-64-v2 (x86-64-v2: no speed gate ran for it)"
    )
    assert off["x86-64-v3"].ratio is None and off["x86-64-v3"].workloads == 0
    unshared = map_levels([level("x86-64-v2", {"run a": 10}), level("x86-64-v3", {"run c": 20})])
    assert unshared["x86-64-v3"].kept
    assert "no gate workload counted by both" in unshared["x86-64-v3"].reason


def test_three_levels_the_middle_one_left_out_and_v4_judged_against_v2() -> None:
    decisions = map_levels(
        [
            level("x86-64-v2", {"run a": 1000, "run b": 1000}),
            level("x86-64-v3", {"run a": 1004, "run b": 1003}),  # no faster: left out
            level("x86-64-v4", {"run a": 1002, "run b": 990}),  # faster than v2, not than v3
        ]
    )
    assert {name: d.kept for name, d in decisions.items()} == {
        "x86-64-v2": True,
        "x86-64-v3": False,
        "x86-64-v4": True,
    }
    assert decisions["x86-64-v4"].against == "x86-64-v2"
    assert decisions["x86-64-v3"].reason.endswith("its CPUs run x86-64-v2")
    # v4 no faster than v3, but v3 was left out: v4 answers to v2 alone
    slower = map_levels(
        [
            level("x86-64-v2", {"run a": 1000}),
            level("x86-64-v3", {"run a": 900}),
            level("x86-64-v4", {"run a": 950}),
        ]
    )
    assert slower["x86-64-v4"].against == "x86-64-v3" and not slower["x86-64-v4"].kept

"""The speed gate: callgrind's counts read back, the estimated-cycles formula, the decision
between variants under each policy, its settings and plan, and the step on a fake Engine
(which variant ships, validated first, and what build.json records)."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

import pytest

from orchestrator.config.declarations.kinds import Run
from orchestrator.config.resolve.options import resolve
from orchestrator.errors import ConfigError, SpeedGateError, StepFailedError, ValidationError
from orchestrator.execute.steps.pipeline import BIN_DIR
from orchestrator.execute.verdict import gate as gate_step
from orchestrator.model.documents.lockfile import LockDriftError
from orchestrator.model.verdict.callgrind import Counts, cycles_ratio, geometric_mean, parse_totals
from orchestrator.model.verdict.gate import decide, gain

from .conftest import plan_for, write_config
from .execute_rig import Rig, make_options, make_rig
from .fakes import FakeEngine

EVENTS = "events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw Bc Bcm Bi Bim"


def _summary(ir: int, l1: int = 0, ll: int = 0, mispredicts: int = 0) -> str:
    # Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw Bc Bcm Bi Bim
    return f"summary: {ir} 0 0 {l1} 0 0 {ll} 0 0 100 {mispredicts} 7 0"


def test_estimated_cycles_weigh_misses_and_mispredictions() -> None:
    counts = parse_totals([EVENTS, _summary(1000, l1=3, ll=2, mispredicts=5)])
    assert counts == Counts(1000, 3, 2, 107, 5)
    assert counts.estimated_cycles == 1000 + 10 * 3 + 100 * 2 + 10 * 5


def test_every_process_of_a_run_is_counted() -> None:
    """A workload that spawns a child leaves two output files: both are summed."""
    lines = [EVENTS, _summary(1000, l1=1), "totals: 1 2 3", EVENTS, _summary(500, ll=1)]
    assert parse_totals(lines) == Counts(1500, 1, 1, 214, 0)  # Bc + Bi of each


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ([], "wrote no summary"),
        (["summary: 12 3"], "unreadable"),
        (["events: Ir", "summary: 12"], "did not count"),
        ([EVENTS, "summary: 12 x"], "unreadable"),
    ],
)
def test_output_that_is_not_a_full_count_is_an_error(lines: list[str], message: str) -> None:
    with pytest.raises(StepFailedError, match=message):
        parse_totals(lines)


def test_ratios_are_geometric_means_over_workloads() -> None:
    """Each workload weighs the same: halving a short one counts as much as a long one."""
    fast = [Counts(50), Counts(1_000_000)]
    slow = [Counts(100), Counts(1_000_000)]
    assert cycles_ratio(fast, slow) == pytest.approx(geometric_mean([0.5, 1.0]))
    with pytest.raises(ValueError, match="positive"):
        geometric_mean([0.0, 1.0])


def _counts(**cycles: Sequence[int]) -> dict[str, list[Counts]]:
    return {name: [Counts(c) for c in runs] for name, runs in cycles.items()}


def test_best_ships_bolt_only_when_it_beats_pgo_by_the_margin() -> None:
    counts = _counts(baseline=[1000], release=[900], pgo=[800], **{"pgo-bolt": [796]})
    decision = decide(counts, ["release", "pgo", "pgo-bolt"], policy="best", min_gain=0.01)
    assert decision.shipped == "pgo"
    assert decision.reasons[0] == "pgo: 11.1% fewer estimated cycles than release: ships pgo"
    assert (
        "pgo-bolt: 0.5% fewer estimated cycles than pgo, short of gate.min_gain 1.0%"
        in (decision.reasons[1])
    )
    assert not decision.failure
    # With no margin, any saving counts.
    assert decide(counts, ["release", "pgo", "pgo-bolt"], policy="best", min_gain=0.0).shipped == (
        "pgo-bolt"
    )


def test_best_compares_each_variant_with_the_best_so_far() -> None:
    """PGO alone did not pay, PGO+BOLT did: it is compared with release, which it beats."""
    counts = _counts(baseline=[1000], release=[900], pgo=[905], **{"pgo-bolt": [700]})
    decision = decide(counts, ["release", "pgo", "pgo-bolt"], policy="best", min_gain=0.01)
    assert decision.shipped == "pgo-bolt"
    assert "more estimated cycles than release" in decision.reasons[0]
    assert "than release: ships pgo-bolt" in decision.reasons[1]


def test_require_all_ships_everything_and_fails_only_when_slower_than_plain_cargo() -> None:
    fine = _counts(baseline=[1000], release=[990], pgo=[1005], **{"pgo-bolt": [1009]})
    decision = decide(fine, ["release", "pgo", "pgo-bolt"], policy="require-all", min_gain=0.01)
    assert decision.shipped == "pgo-bolt" and not decision.failure
    worse = _counts(baseline=[1000], release=[990], pgo=[1005], **{"pgo-bolt": [1030]})
    decision = decide(worse, ["release", "pgo", "pgo-bolt"], policy="require-all", min_gain=0.01)
    assert "pgo-bolt is slower than plain cargo build --release (3.0% more" in decision.failure
    assert "pgo" not in decision.failure.replace("pgo-bolt", "")


def test_gain_is_the_share_saved_or_none_when_unmeasured() -> None:
    counts = _counts(baseline=[1000, 10], release=[800, 8])
    assert gain(counts, "release", "baseline") == pytest.approx(0.2)
    assert gain(counts, "pgo", "baseline") is None


def test_gate_settings_are_checked_before_any_work(project: Path) -> None:
    base = '[package]\ncrate = "crate"\n[train]\nworkloads = [["--help"]]\n'
    write_config(project, base + "[gate]\nmin_gain = 1.5\n")
    with pytest.raises(ConfigError, match=r"gate\.min_gain is a share"):
        resolve(project / "orchestrator.toml", env={})
    write_config(project, base + '[gate]\nworkloads = [{binary = "other", args = []}]\n')
    with pytest.raises(ConfigError, match=r"gate\.workloads"):
        resolve(project / "orchestrator.toml", env={})
    write_config(project, base + '[gate]\npolicy = "sometimes"\n')
    with pytest.raises(ConfigError, match="best, require-all, off"):
        resolve(project / "orchestrator.toml", env={})


def test_the_plan_gates_when_there_is_a_choice_and_says_why_not_otherwise(project: Path) -> None:
    options = make_options(project)
    plan = plan_for(options, "cpu")
    assert plan.gate is not None and plan.gate.workloads == (Run(("--help",)),)
    assert "speed-gate" in [s.name for s in plan.steps]
    counted = make_options(project, gate_workloads=(Run(("--version",)),))
    gate = plan_for(counted, "cpu").gate
    assert gate is not None and gate.workloads == (Run(("--version",)),)
    for changes, reason in (
        ({"gate_policy": "off"}, "gate.policy is off"),
        ({"pgo": False, "bolt": False}, "nothing to choose"),
    ):
        plan = plan_for(make_options(project, **changes), "cpu")
        assert plan.gate is None and reason in plan.gate_skipped
        assert "speed-gate" not in [s.name for s in plan.steps]
    emulated = plan_for(options, "aarch64")
    assert emulated.gate is None and "cannot count" in emulated.gate_skipped


def _gate_rig(
    project: Path, stack: ExitStack, tmp_path: Path, cycles: dict[str, int], **changes: object
) -> Rig:
    """A rig whose callgrind runs answer with `cycles` instructions per variant folder."""

    def respond(argv: Sequence[str]) -> tuple[int, list[str]]:
        joined = " ".join(argv)
        for variant, count in cycles.items():
            if f"--callgrind-out-file=/build/out/gate/{variant}-0/" in joined:
                return 0, [EVENTS, _summary(count)]
        return 0, []

    engine = FakeEngine(responder=respond, missing=lambda path: b"same output\n")
    rig = make_rig(make_options(project, **changes), stack, tmp_path, engine=engine)
    state = rig.pipeline.state
    state.unbolted = f"{BIN_DIR}/optimized/demo"
    state.shipped = state.bolted = f"{BIN_DIR}/bolt/demo"
    return rig


def test_the_gate_ships_pgo_when_bolt_does_not_pay_and_validates_it_first(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    cycles = {"baseline": 1000, "release": 900, "pgo": 800, "pgo-bolt": 799}
    rig = _gate_rig(project, stack, tmp_path, cycles, validate_command=("--check",))
    gate_step.speed_gate(rig.pipeline, rig.log)
    state = rig.pipeline.state
    assert state.shipped == f"{BIN_DIR}/optimized/demo"
    assert state.bolted == f"{BIN_DIR}/bolt/demo"  # still kept for bench
    assert state.gate is not None and state.gate.shipped == "pgo"
    assert state.gate.gain_vs_baseline == pytest.approx(0.2)
    assert state.gate.gain_vs_release == pytest.approx(1 - 800 / 900, abs=1e-4)
    assert state.gate.variants["pgo-bolt"]["estimated_cycles"] == 799
    assert "short of gate.min_gain" in state.gate.reasons[-1]
    argvs = [" ".join(argv) for argv in rig.box.argvs]
    counted = [a for a in argvs if "valgrind" in a or "--tool=callgrind" in a]
    assert len(counted) == 4  # one workload for each of baseline, release, pgo, pgo-bolt
    assert all("--I1=32768,8,64" in a and "--cache-sim=yes" in a for a in counted)
    # The picked binary ran the validation command before it replaced the shipped one.
    assert any(f"{BIN_DIR}/optimized/demo --check" in a for a in argvs)


def test_the_gate_keeps_the_shipped_variant_when_it_earns_its_place(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    cycles = {"baseline": 1000, "release": 900, "pgo": 800, "pgo-bolt": 700}
    rig = _gate_rig(project, stack, tmp_path, cycles)
    gate_step.speed_gate(rig.pipeline, rig.log)
    assert rig.pipeline.state.shipped == f"{BIN_DIR}/bolt/demo"
    assert "ships pgo-bolt" in rig.text


def test_a_picked_variant_that_fails_validation_stops_the_build(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    cycles = {"baseline": 1000, "release": 900, "pgo": 800, "pgo-bolt": 799}
    rig = _gate_rig(project, stack, tmp_path, cycles, validate_command=("--check",))
    rig.engine.missing = lambda path: b"baseline\n" if "baseline" in path else b"other\n"
    with pytest.raises(ValidationError, match="the pgo binary printed something else"):
        gate_step.speed_gate(rig.pipeline, rig.log)
    assert rig.pipeline.state.shipped == f"{BIN_DIR}/bolt/demo"


def test_require_all_fails_the_build_when_an_optimization_is_slower(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    cycles = {"baseline": 1000, "release": 900, "pgo": 950, "pgo-bolt": 1100}
    rig = _gate_rig(project, stack, tmp_path, cycles, gate_policy="require-all")
    with pytest.raises(SpeedGateError, match="pgo-bolt is slower than plain cargo"):
        gate_step.speed_gate(rig.pipeline, rig.log)


def test_the_release_summary_shows_what_shipped_and_what_it_saves(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    from types import SimpleNamespace  # noqa: PLC0415
    from typing import Any, cast  # noqa: PLC0415

    from orchestrator.cli.release_table import shipped_text  # noqa: PLC0415
    from orchestrator.model.documents.records import BoltInfo, GateInfo  # noqa: PLC0415
    from orchestrator.model.documents.release_summary import bolt_summary  # noqa: PLC0415
    from orchestrator.release.targets.target import Target, TargetResult  # noqa: PLC0415

    gate = GateInfo(
        policy="best",
        min_gain=0.01,
        metric="m",
        shipped="pgo",
        gain_vs_baseline=0.113,
        gain_vs_release=0.083,
    )
    bolt = BoltInfo(
        policy="fallback",
        flags=[],
        mode="instrument",
        applied=True,
        coverage={"profiled_functions": 42, "total_functions": 619},
    )
    manifest = cast(
        Any,
        SimpleNamespace(portability=None, gate=gate, bolt=bolt, cuda_runtime=None, gpu_path=None),
    )
    result = TargetResult(Target("cpu", "x86-64-v2", make_options(project)), "demo")
    result.take_build_facts(manifest)
    assert shipped_text(result) == "pgo (-8.3% vs release)"
    assert result.summary().shipped_variant == "pgo"
    assert result.summary().cycles_saved_vs_baseline == pytest.approx(0.113)
    assert bolt_summary(manifest) == (
        "instrument, 42/619 functions profiled, not shipped (speed gate)"
    )
    unmeasured = TargetResult(Target("aarch64", "generic", make_options(project)), "demo")
    unmeasured.take_build_facts(
        cast(
            Any,
            SimpleNamespace(
                portability=None, gate=None, bolt=None, cuda_runtime=None, gpu_path=None
            ),
        )
    )
    assert shipped_text(unmeasured) == "-" and unmeasured.bolt is None


def test_without_pgo_a_failed_bolt_leaves_the_relocated_build_as_a_candidate(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    """--no-pgo and BOLT fell back: what ships is the release profile built with
    relocations, which the gate weighs against the plain release profile."""
    cycles = {"baseline": 1000, "release": 900, "optimized": 899}
    rig = _gate_rig(project, stack, tmp_path, cycles, pgo=False)
    state = rig.pipeline.state
    state.shipped = state.unbolted = f"{BIN_DIR}/optimized/demo"
    state.bolted = ""
    assert list(gate_step.candidates(rig.pipeline)) == ["release", "optimized"]
    gate_step.speed_gate(rig.pipeline, rig.log)
    assert state.gate is not None and state.gate.shipped == "release"
    assert state.shipped == f"{BIN_DIR}/release/demo"


def test_a_gate_pinned_by_the_lock_ships_that_variant_without_counting(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    # The counts would pick pgo-bolt; the lock says the release shipped pgo.
    cycles = {"baseline": 1000, "release": 900, "pgo": 800, "pgo-bolt": 700}
    rig = _gate_rig(project, stack, tmp_path, cycles, gate_pinned="pgo")
    assert rig.pipeline.plan.gate is not None and rig.pipeline.plan.gate.pinned == "pgo"
    gate_step.speed_gate(rig.pipeline, rig.log)
    state = rig.pipeline.state
    assert state.shipped == f"{BIN_DIR}/optimized/demo"
    assert state.gate is not None and state.gate.shipped == "pgo"
    assert state.gate.variants == {} and "pinned by the lock" in (state.gate.skipped or "")
    assert not [argv for argv in rig.box.argvs if "--tool=callgrind" in " ".join(argv)]


def test_a_pinned_variant_this_build_cannot_make_is_lock_drift(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig = _gate_rig(project, stack, tmp_path, {}, gate_pinned="bolt")
    with pytest.raises(LockDriftError, match="shipped bolt, but this build made only release"):
        gate_step.speed_gate(rig.pipeline, rig.log)

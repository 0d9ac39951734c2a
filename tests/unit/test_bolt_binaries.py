"""BOLT for every binary of an artifact (issue 33): the per-binary verdict of the speed
gate, the profile and rewrite of the other binaries on a fake Engine, a failure of one of
them, and what build.json and the lock record per binary."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from orchestrator.config.declarations.kinds import Run
from orchestrator.errors import StepFailedError
from orchestrator.execute.optimize import bolt_others
from orchestrator.execute.optimize.bolt_record import bolt_binaries_record
from orchestrator.execute.steps.pipeline import BIN_DIR
from orchestrator.execute.verdict import gate as gate_step
from orchestrator.model.documents.records import BoltInfo, GateInfo
from orchestrator.model.verdict.bolt_binaries import (
    binaries_in,
    binary_of_profile,
    counts_without,
    judge_binaries,
    other_profile_name,
)
from orchestrator.model.verdict.callgrind import Counts
from orchestrator.plan.step_keys import bolt_profile_inputs
from orchestrator.release.lock.pin import _locked_gate
from orchestrator.release.lock.reproduce import locked_unbolted

from .execute_rig import Rig, make_options, make_rig
from .fakes import FakeEngine

BOLT_INFO = (
    "BOLT-INFO: 950 out of 1000 functions in the binary (95.0%) have non-empty execution profile"
)
EVENTS = "events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw Bc Bcm Bi Bim"
WORKLOADS = (Run(("--help",)), Run(("fox",), binary="grep"))  # `idle` is run by none


def _counts(*cycles: int) -> list[Counts]:
    return [Counts(c) for c in cycles]


# -- the verdict, pure ----------------------------------------------------------------------
def test_each_binary_is_judged_on_the_workloads_that_run_it_alone() -> None:
    owners = ["demo", "grep", "demo", "grep"]
    with_bolt = _counts(700, 995, 700, 995)  # demo saves 30%, grep 0.5%
    without = _counts(1000, 1000, 1000, 1000)
    verdicts = judge_binaries(
        ["grep", "demo", "idle"],
        owners,
        with_bolt,
        without,
        unbolted_variant="pgo",
        min_gain=0.01,
    )
    assert verdicts["demo"].keep and verdicts["demo"].gain == pytest.approx(0.3)
    assert (
        verdicts["demo"].reason == "2 gate workloads of it: 30.0% fewer estimated cycles than pgo"
    )
    assert not verdicts["grep"].keep and verdicts["grep"].gain == pytest.approx(0.005)
    assert verdicts["grep"].reason.endswith("short of gate.min_gain 1.0%")
    # Nothing counts `idle`: it validated, so its BOLT output stays, unmeasured.
    assert verdicts["idle"].keep and verdicts["idle"].gain is None
    assert "no gate workload runs it" in verdicts["idle"].reason
    with pytest.raises(ValueError, match="one owner and one count"):
        judge_binaries(["demo"], owners, with_bolt[:3], without, unbolted_variant="pgo", min_gain=0)


def test_a_reverted_binary_counts_and_ships_as_it_did_unbolted() -> None:
    owners = ["demo", "grep"]
    assert counts_without(_counts(700, 995), _counts(1000, 1000), owners, {"grep"}) == _counts(
        700, 1000
    )
    bolted = {"demo": "/b/demo", "grep": "/b/grep", "idle": "/o/idle"}
    unbolted = {"grep": "/o/grep", "idle": "/o/idle"}
    assert binaries_in(bolted, unbolted, {"grep"}) == {
        "demo": "/b/demo",
        "grep": "/o/grep",
        "idle": "/o/idle",
    }


def test_other_profiles_are_named_for_their_binary_and_found_again() -> None:
    assert other_profile_name("grep", shipped=True) == "bolt-grep.fdata"
    assert other_profile_name("word-grep", shipped=False) == "bolt-word-grep.unshipped.fdata"
    assert binary_of_profile("bolt-word-grep.unshipped.fdata") == "word-grep"
    assert binary_of_profile("bolt-grep.fdata") == "grep"
    # The main binary's and PGO's are none of them.
    for name in ("bolt.fdata", "bolt.unshipped.fdata", "pgo.profdata"):
        assert binary_of_profile(name) == ""


# -- the BOLT steps on a fake Engine --------------------------------------------------------
def _sha_of(path: str) -> str:
    return path.rsplit("/", 1)[-1][:2].encode().hex() * 32  # one per binary name


def _rig(project: Path, stack: ExitStack, tmp_path: Path, **changes: object) -> Rig:
    """Three binaries: the main one and `grep` run by a workload each, `idle` by none;
    llvm-bolt fails on the binaries named in `failing`."""
    failing = cast(Sequence[str], changes.pop("failing", ()))

    def respond(argv: Sequence[str]) -> tuple[int, list[str]]:
        joined = " ".join(argv)
        if argv[0] == "sha256sum":
            return 0, [f"{_sha_of(path)}  {path}" for path in argv[1:]]
        if "-o /build/out/bin/bolt/" in joined:
            code = 1 if argv[-1].rsplit("/", 1)[-1] in failing else 0
            return code, ["BOLT-ERROR: no profile"] if code else [BOLT_INFO]
        if list(argv[:2]) == ["stat", "-c"]:
            return 0, ["1000", "1100"]
        return 0, []

    options = make_options(
        project,
        pgo=False,
        bolt_mode="instrument",
        binaries=("demo", "grep", "idle"),
        workloads=WORKLOADS,
        **changes,
    )
    engine = FakeEngine(responder=respond, missing=lambda path: b"fdata of " + path.encode())
    rig = make_rig(options, stack, tmp_path, engine=engine)
    state = rig.pipeline.state
    state.shipped = f"{BIN_DIR}/optimized/demo"
    state.others = {name: f"{BIN_DIR}/optimized/{name}" for name in ("grep", "idle")}
    return rig


def test_every_binary_a_workload_runs_is_profiled_with_its_own_workloads(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig = _rig(project, stack, tmp_path)
    bolt_others.profile(rig.pipeline, rig.log)
    state, plan = rig.pipeline.state, rig.pipeline.plan
    # Each instrumented binary ran only the workloads that name it, in the profiling box.
    assert rig.engine.containers[-1].argvs == [
        ("/build/out/bolt/instrumented", "--help"),
        ("/build/out/bolt/binaries/grep/instrumented", "fox"),
    ]
    assert list(state.bolt_other_profiles) == ["grep"]
    stored = state.bolt_other_profiles["grep"]
    assert stored.path.name == f"{_sha_of('grep')}-instrument.fdata"
    # Keyed by what it was collected from: grep's workloads, not the main binary's.
    assert stored.details["inputs"] == bolt_profile_inputs(plan, "instrument", "grep")
    assert stored.details["inputs"] != bolt_profile_inputs(plan, "instrument")
    assert state.bolt_binaries["idle"] == {
        "workloads": 0,
        "reason": "no training workload runs it: ships as the optimized build made it",
    }
    assert state.bolt_binaries["grep"]["workloads"] == 1
    assert state.unbolted_others == {
        "grep": f"{BIN_DIR}/optimized/grep",
        "idle": f"{BIN_DIR}/optimized/idle",
    }
    assert rig.log.detail.endswith("; 1 other binary profiled")


def test_every_profiled_binary_is_rewritten_validated_and_shipped(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig = _rig(project, stack, tmp_path)
    bolt_others.profile(rig.pipeline, rig.log)
    bolt_others.optimize(rig.pipeline, rig.log)
    state = rig.pipeline.state
    assert state.shipped == f"{BIN_DIR}/bolt/demo"
    assert state.others == {"grep": f"{BIN_DIR}/bolt/grep", "idle": f"{BIN_DIR}/optimized/idle"}
    assert state.bolted_others == {"grep": f"{BIN_DIR}/bolt/grep"}
    [grep_bolt] = [a for a in rig.box.argvs if a[-1] == f"{BIN_DIR}/bolt/grep" and "-o" in a]
    assert grep_bolt[1:3] == (
        f"{BIN_DIR}/optimized/grep",
        "-data=/build/out/bolt/binaries/grep/profile.fdata",
    )
    record = bolt_binaries_record(rig.pipeline)
    assert list(record) == ["demo", "grep", "idle"]
    assert record["grep"].applied and record["grep"].shipped
    assert record["grep"].coverage == {
        "profiled_functions": 950,
        "total_functions": 1000,
        "percent": 95.0,
    }
    assert record["demo"].applied and record["demo"].shipped
    assert not record["idle"].applied and not record["idle"].shipped
    assert "no training workload runs it" in record["idle"].reason
    assert rig.log.detail.endswith("; 1 other binary BOLTed")


def test_a_failed_other_binary_ships_unbolted_and_the_rest_stays_bolted(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig = _rig(project, stack, tmp_path, failing=("grep",))
    bolt_others.profile(rig.pipeline, rig.log)
    bolt_others.optimize(rig.pipeline, rig.log)
    state = rig.pipeline.state
    assert state.shipped == f"{BIN_DIR}/bolt/demo"
    assert state.others["grep"] == f"{BIN_DIR}/optimized/grep" and not state.bolted_others
    assert "BOLT FAILED for grep, shipping it without BOLT" in rig.console
    record = bolt_binaries_record(rig.pipeline)["grep"]
    assert not record.applied and not record.shipped
    assert record.reason.startswith("BOLT failed: step bolt-optimize: `llvm-bolt")


def test_under_require_a_failed_other_binary_fails_the_build(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig = _rig(project, stack, tmp_path, failing=("grep",), bolt_policy="require")
    bolt_others.profile(rig.pipeline, rig.log)
    with pytest.raises(StepFailedError, match="bolt-optimize"):
        bolt_others.optimize(rig.pipeline, rig.log)


def test_when_the_main_binary_fails_every_binary_ships_unbolted(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig = _rig(project, stack, tmp_path, failing=("demo",))
    bolt_others.profile(rig.pipeline, rig.log)
    with pytest.raises(StepFailedError) as caught:
        bolt_others.optimize(rig.pipeline, rig.log)
    bolt_others.fall_back(rig.pipeline, caught.value)
    state = rig.pipeline.state
    assert state.shipped == f"{BIN_DIR}/optimized/demo"
    assert state.others == state.unbolted_others and not state.bolt_other_profiles
    record = bolt_binaries_record(rig.pipeline)
    assert record["demo"].reason.startswith("BOLT failed")
    assert record["grep"].reason.startswith("not BOLTed: the main binary's BOLT failed")
    assert "no training workload runs it" in record["idle"].reason


# -- the speed gate, per binary -------------------------------------------------------------
def _gate_rig(
    project: Path,
    stack: ExitStack,
    tmp_path: Path,
    cycles: Mapping[str, Sequence[int]],
    **kw: object,
) -> Rig:
    """The BOLT variant made (demo and grep BOLTed); callgrind answers `cycles[variant][i]`
    for workload i."""

    def respond(argv: Sequence[str]) -> tuple[int, list[str]]:
        joined = " ".join(argv)
        for variant, counts in cycles.items():
            for index, count in enumerate(counts):
                if f"--callgrind-out-file=/build/out/gate/{variant}-{index}/" in joined:
                    return 0, [EVENTS, f"summary: {count} 0 0 0 0 0 0 0 0 100 0 7 0"]
        return 0, []

    options = make_options(project, binaries=("demo", "grep"), workloads=WORKLOADS, **kw)
    engine = FakeEngine(responder=respond, missing=lambda path: b"same output\n")
    rig = make_rig(options, stack, tmp_path, engine=engine)
    state = rig.pipeline.state
    state.unbolted = f"{BIN_DIR}/optimized/demo"
    state.shipped = state.bolted = f"{BIN_DIR}/bolt/demo"
    state.unbolted_others = {"grep": f"{BIN_DIR}/optimized/grep"}
    state.others = state.bolted_others = {"grep": f"{BIN_DIR}/bolt/grep"}
    state.bolt_binaries = {"demo": {"applied": True}, "grep": {"applied": True, "reason": "BOLTed"}}
    return rig


def test_the_gate_ships_unbolted_a_binary_whose_own_workloads_gain_too_little(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    cycles = {
        "baseline": [1000, 1000],
        "release": [900, 900],
        "pgo": [800, 500],
        "pgo-bolt": [600, 499],  # demo's workload 25% fewer, grep's 0.2%
    }
    rig = _gate_rig(project, stack, tmp_path, cycles)
    gate_step.speed_gate(rig.pipeline, rig.log)
    state = rig.pipeline.state
    assert state.gate is not None and state.gate.shipped == "pgo-bolt"
    assert state.shipped == f"{BIN_DIR}/bolt/demo"
    assert state.others == {"grep": f"{BIN_DIR}/optimized/grep"}  # validated, then shipped
    # grep's workload counts as unBOLTed in the variant's totals.
    assert state.gate.variants["pgo-bolt"]["per_workload"] == [600, 500]
    grep = state.bolt_binaries["grep"]
    assert grep["kept"] is False and grep["gain"] == pytest.approx(0.002)
    assert str(grep["reason"]).endswith("short of gate.min_gain 1.0%: ships unBOLTed")
    assert state.bolt_binaries["demo"]["gain"] == pytest.approx(0.25)
    record = bolt_binaries_record(rig.pipeline)
    assert record["demo"].shipped and not record["grep"].shipped and record["grep"].applied
    assert "gate: BOLT of grep: 1 gate workload of it: 0.2% fewer" in rig.text


def test_a_binary_whose_bolt_pays_ships_bolted(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    cycles = {
        "baseline": [1000, 1000],
        "release": [900, 900],
        "pgo": [800, 500],
        "pgo-bolt": [600, 400],
    }
    rig = _gate_rig(project, stack, tmp_path, cycles)
    gate_step.speed_gate(rig.pipeline, rig.log)
    state = rig.pipeline.state
    assert state.others == {"grep": f"{BIN_DIR}/bolt/grep"}
    assert state.bolt_binaries["grep"]["kept"] is True
    assert bolt_binaries_record(rig.pipeline)["grep"].shipped


def test_require_all_ships_every_bolt_output_and_records_its_gain(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    cycles = {
        "baseline": [1000, 1000],
        "release": [900, 900],
        "pgo": [800, 500],
        "pgo-bolt": [600, 499],
    }
    rig = _gate_rig(project, stack, tmp_path, cycles, gate_policy="require-all")
    gate_step.speed_gate(rig.pipeline, rig.log)
    state = rig.pipeline.state
    assert state.others == {"grep": f"{BIN_DIR}/bolt/grep"}
    grep = state.bolt_binaries["grep"]
    assert grep["kept"] is True and grep["gain"] == pytest.approx(0.002)
    assert str(grep["reason"]).endswith("kept, as gate.policy require-all ships all")


def test_a_reproduction_reverts_the_binaries_its_lock_names_without_counting(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig = _gate_rig(
        project, stack, tmp_path, {}, gate_pinned="pgo-bolt", gate_pinned_unbolted=("grep",)
    )
    gate_step.speed_gate(rig.pipeline, rig.log)
    state = rig.pipeline.state
    assert state.shipped == f"{BIN_DIR}/bolt/demo"
    assert state.others == {"grep": f"{BIN_DIR}/optimized/grep"}
    assert state.bolt_binaries["grep"]["kept"] is False
    assert not [argv for argv in rig.box.argvs if "--tool=callgrind" in " ".join(argv)]


# -- build.json and the lock ----------------------------------------------------------------
def test_the_lock_pins_the_binaries_the_gate_shipped_unbolted() -> None:
    bolt = BoltInfo.model_validate(
        {
            "policy": "fallback",
            "flags": [],
            "applied": True,
            "binaries": {
                "demo": {"applied": True, "reason": "BOLTed"},
                "grep": {"applied": True, "kept": False, "reason": "did not pay"},
                "fmt": {"applied": True, "kept": True, "reason": "paid"},
                "idle": {"reason": "no training workload runs it"},
            },
        }
    )
    gate = GateInfo(policy="best", min_gain=0.01, metric="m", shipped="pgo-bolt")
    manifest = cast(Any, SimpleNamespace(gate=gate, bolt=bolt))
    locked = _locked_gate(manifest)
    assert locked is not None and locked.unbolted == ["grep"]
    # A build.json from before per-binary BOLT reads as no binaries.
    older = BoltInfo.model_validate({"policy": "fallback", "flags": []})
    assert older.binaries == {}
    assert _locked_gate(cast(Any, SimpleNamespace(gate=gate, bolt=older))).unbolted == []  # type: ignore[union-attr]


def test_a_reproduction_ships_unbolted_what_the_lock_holds_no_profile_of() -> None:
    def entry(profiles: list[str], unbolted: list[str]) -> Any:
        gate = SimpleNamespace(unbolted=unbolted)
        resolved = SimpleNamespace(profiles=dict.fromkeys(profiles), gate=gate)
        return cast(Any, SimpleNamespace(resolved=resolved))

    others = ["grep", "fmt", "idle"]
    locked = entry(["pgo.profdata", "bolt.fdata", "bolt-grep.fdata", "bolt-fmt.fdata"], ["fmt"])
    # fmt: the gate put it back; idle: no profile (no workload, a failure, an older lock)
    assert locked_unbolted(locked, others) == ("fmt", "idle")
    older = entry(["pgo.profdata", "bolt.fdata"], [])  # a lock from before: only the main one
    assert locked_unbolted(older, others) == ("grep", "fmt", "idle")

"""[c_code] mode judged by the speed gate against the mode off (issue 42 point 2): where the
gate runs, the plan also builds the binaries with the mode off (rustc's fat LTO, gcc's C,
trained beside the mode's build into one merged PGO profile) and the gate ships that build
only where it counts fewer cycles."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.config.resolve.options import Options, resolve
from orchestrator.execute.optimize.c_code import c_code_record, c_code_shipped
from orchestrator.model.documents.records import GateInfo
from orchestrator.model.verdict.callgrind import Counts
from orchestrator.model.verdict.gate import decide
from orchestrator.plan.c_code import C_OFF, C_OFF_GENERATE
from orchestrator.plan.cargo_flags import RELOCATIONS
from orchestrator.plan.step_keys import c_off_key, optimized_key, pgo_key
from orchestrator.plan.steps import StepName

from .conftest import plan_for
from .execute_rig import make_options, make_rig

CFLAGS = "CFLAGS_x86_64_unknown_linux_gnu"
CXXFLAGS = "CXXFLAGS_x86_64_unknown_linux_gnu"
SYSROOT_CFLAGS = "--sysroot=/opt/orchestrator/unpack"


@pytest.fixture
def options(project: Path) -> Options:
    resolved = resolve(project / "orchestrator.toml", env={"SOURCE_DATE_EPOCH": "1700000000"})
    return replace(resolved, c_code="lto-pgo")


def test_the_mode_off_build_keeps_rustcs_fat_lto_gccs_c_and_the_same_profile(
    options: Options,
) -> None:
    plan = plan_for(options)
    assert plan.c_off == "pgo-c-off" and plan.pgo is not None
    off, optimized = plan.variants[C_OFF], plan.variants["optimized"]
    assert plan.final is optimized  # what ships unless the gate says otherwise
    env = dict(off.build.environment)
    # Every C name the container has from the shipped variant is overridden with gcc's
    assert (env["CC"], env["CXX"], env["AR"]) == ("gcc", "c++", "ar")
    assert env[CFLAGS].startswith(SYSROOT_CFLAGS) and "-flto" not in env[CFLAGS]
    assert env[CXXFLAGS] == ""
    assert 'profile.release.lto="fat"' in off.build.argv
    assert 'profile.release.lto="off"' in optimized.build.argv
    flags = off.rustflags
    assert "-Clinker-plugin-lto" not in flags and not any("clang" in f for f in flags)
    assert f"-Cprofile-use={plan.pgo.merged}" in flags
    assert RELOCATIONS not in flags  # BOLT never rewrites it
    # Otherwise the optimized build's flags: target-cpu, the floor's link arguments
    linking = set(plan.c_code.rustflags) if plan.c_code else set()
    shared = {f for f in optimized.rustflags if f not in linking and f != RELOCATIONS}
    assert shared <= set(flags) and any(f.startswith("-Ctarget-cpu=") for f in shared)
    names = [str(step.name) for step in plan.steps]
    assert names.index("build-c-off") == names.index("build-optimized") + 1
    # Its own key, which follows the profile it reads
    assert c_off_key(plan, "a" * 64) != c_off_key(plan, "b" * 64)
    assert c_off_key(plan, "a" * 64) != optimized_key(plan, "a" * 64)


def test_the_mode_off_build_is_instrumented_and_trained_into_the_same_profile(
    options: Options,
) -> None:
    """Without rustc's fat LTO, rustc keeps most functions internal and a profile names them
    after their module: the mode's profile would miss nearly every function of the
    mode-off build (233 of 234 on examples/minilang), so that one is trained as well."""
    plan = plan_for(options)
    assert plan.pgo is not None
    names = list(plan.variants)
    assert names.index(C_OFF_GENERATE) == names.index("pgo-generate") + 1
    generate = plan.variants[C_OFF_GENERATE]
    assert f"-Cprofile-generate={plan.pgo.raw_dir}" in generate.rustflags
    assert "-Clinker-plugin-lto" not in generate.rustflags
    assert dict(generate.build.environment)["CC"] == "gcc"
    assert 'profile.release.lto="fat"' in generate.build.argv
    # Both keys of the merged profile read it; a plan without it keeps its keys
    unjudged = plan_for(replace(options, gate_policy="off"))
    assert C_OFF_GENERATE not in unjudged.variants
    assert pgo_key(plan) != pgo_key(unjudged)
    assert plan.pgo.profile_key != unjudged.pgo.profile_key  # type: ignore[union-attr]
    titles = {step.name: step.title for step in plan.steps}
    assert "[c_code] mode off" in titles[StepName.PGO_INSTRUMENT]


def test_the_mode_off_build_is_planned_only_where_the_gate_judges_it(options: Options) -> None:
    assert plan_for(replace(options, c_code="off")).c_off == ""
    assert plan_for(replace(options, gate_policy="off")).c_off == ""
    assert plan_for(options, "aarch64").c_off == ""  # the mode does not apply there
    # A reproduction builds it only where its lock says the release shipped it
    pinned = plan_for(replace(options, gate_pinned="pgo"))
    assert pinned.c_off == "" and C_OFF_GENERATE not in pinned.variants
    assert plan_for(replace(options, gate_pinned="pgo-c-off")).c_off == "pgo-c-off"
    bolt_only = plan_for(replace(options, pgo=False))
    assert bolt_only.c_off == "release-c-off"
    assert not any("profile" in f for f in bolt_only.variants[C_OFF].rustflags)
    assert C_OFF_GENERATE not in bolt_only.variants
    # lto builds it too: the mode costs rustc's fat LTO with or without PGO
    assert plan_for(replace(options, c_code="lto")).c_off == "pgo-c-off"


def _counts(**cycles: Sequence[int]) -> dict[str, list[Counts]]:
    return {name.replace("_", "-"): [Counts(c) for c in runs] for name, runs in cycles.items()}


CHAIN = ["release", "pgo", "pgo-bolt"]


def test_the_gate_ships_the_mode_off_only_where_it_beats_the_choice_by_the_margin() -> None:
    counts = _counts(baseline=[1000], release=[950], pgo=[900], pgo_bolt=[899], pgo_c_off=[880])
    decision = decide(counts, CHAIN, policy="best", min_gain=0.01, alternative="pgo-c-off")
    assert decision.shipped == "pgo-c-off"
    assert decision.reasons[-1] == (
        "pgo-c-off: 2.2% fewer estimated cycles than pgo: ships pgo-c-off"
    )
    close = {**counts, "pgo-c-off": [Counts(895)]}
    decision = decide(close, CHAIN, policy="best", min_gain=0.01, alternative="pgo-c-off")
    assert decision.shipped == "pgo"
    assert "short of gate.min_gain 1.0%: keeps pgo" in decision.reasons[-1]
    # Without an alternative, the decision is as before
    assert decide(counts, CHAIN, policy="best", min_gain=0.01).reasons == decision.reasons[:-1]


def test_under_require_all_the_mode_off_never_fails_the_release() -> None:
    counts = _counts(baseline=[1000], release=[990], pgo=[1005], pgo_bolt=[1030], pgo_c_off=[1015])
    decision = decide(counts, CHAIN, policy="require-all", min_gain=0.01, alternative="pgo-c-off")
    # Faster than pgo-bolt by 1.5%, but 1.5% slower than plain cargo: keeps pgo-bolt
    assert decision.shipped == "pgo-bolt"
    assert "than cargo build --release: keeps pgo-bolt" in decision.reasons[-1]
    assert "pgo-c-off" not in decision.failure
    fine = {**counts, "pgo-c-off": [Counts(900)]}
    decision = decide(fine, CHAIN, policy="require-all", min_gain=0.01, alternative="pgo-c-off")
    assert decision.shipped == "pgo-c-off"


def test_build_json_says_whether_the_shipped_binary_has_the_mode(
    project: Path, tmp_path: Path, stack: ExitStack
) -> None:
    rig = make_rig(make_options(project, c_code="lto-pgo"), stack, tmp_path)
    pipeline = rig.pipeline
    assert pipeline.plan.c_off == "pgo-c-off"
    binary = tmp_path / "tool"
    binary.write_bytes(b"not an ELF file")
    pipeline.state.c_off_missing = 3
    pipeline.state.gate = GateInfo(policy="best", min_gain=0.01, metric="m", shipped="pgo")
    record = c_code_record(pipeline, binary)
    assert record is not None and record.shipped is True and c_code_shipped(pipeline)
    assert (record.off_candidate, record.off_functions_without_profile) == ("pgo-c-off", 3)
    pipeline.state.gate = pipeline.state.gate.model_copy(update={"shipped": "pgo-c-off"})
    record = c_code_record(pipeline, binary)
    assert record is not None and record.shipped is False and not c_code_shipped(pipeline)

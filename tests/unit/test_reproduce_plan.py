"""What `reproduce` runs of a two-level release and how long it expects that to take
(release/lock/reproduce_plan.py): the baseline and the images shared as `release` shares them,
the profiles and crates from the lock, the estimate from the release's recorded times."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.config.resolve.options import FlavorSettings
from orchestrator.model.documents.lockfile import LockedTarget
from orchestrator.model.documents.records import ReusedStep, write_record
from orchestrator.model.documents.run_logs import BUILD_RUN, BuildRun
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.plan.steps import StepName
from orchestrator.release.lock.reproduce_plan import plan_reproduction, recorded_times

from .conftest import plan_for
from .execute_rig import make_options
from .test_lockfile import lock_for

LEVELS = ("x86-64-v2", "x86-64-v3")
CARGO_RUNS = {
    StepName.BUILD_BASELINE,
    StepName.BUILD_RELEASE,
    StepName.BUILD_OPTIMIZED,
    StepName.TEST,
}


def _two_levels(project: Path) -> list[tuple[LockedTarget, BuildPlan]]:
    options = replace(make_options(project), flavor_settings={"cpu": FlavorSettings(levels=LEVELS)})
    pairs = []
    for level in LEVELS:
        plan = plan_for(replace(options, target_cpu=level))
        pairs.append((lock_for(plan).targets[0], plan))
    return pairs


def _record(
    release: Path,
    artifact: str,
    seconds: Mapping[str, float],
    cached: Mapping[str, str] | None = None,
) -> None:
    """logs/run.json as a release leaves it: each step's status and seconds; `cached`: a
    step taken from the step cache -> the artifact whose build ran it."""
    steps: list[dict[str, object]] = [
        {"name": name, "status": "ok", "seconds": value} for name, value in seconds.items()
    ]
    steps += [{"name": name, "status": "cached", "seconds": 0.1} for name in cached or {}]
    reused = {
        name: ReusedStep(key="k" * 64, made_by=by, built_at="2026-11-27T10:00:00+00:00", files={})
        for name, by in (cached or {}).items()
    }
    run = BuildRun(
        artifact=artifact,
        flavor="cpu",
        started_at="2026-11-27T10:00:00+00:00",
        finished_at="2026-11-27T11:00:00+00:00",
        steps=steps,
        reused_steps=reused or None,
    )
    (release / artifact / "logs").mkdir(parents=True)
    write_record(release / artifact / BUILD_RUN, run)


def test_two_levels_build_the_baseline_and_the_images_once(project: Path, tmp_path: Path) -> None:
    pairs = _two_levels(project)
    plan = plan_reproduction(pairs, tmp_path / "fresh-cache", tmp_path / "release")
    v2, v3 = (p.artifact_dir for _, p in pairs)
    every = [(s.artifact, s.step) for s in plan.steps]
    assert len(every) == 2 * len(pairs[0][1].steps)
    running = {(s.artifact, s.step) for s in plan.running()}
    # cargo runs: before, each level ran its three builds and `cargo test`; now the
    # baseline and the tests (the levels share one test command) run once
    cargo = sorted(step for artifact, step in running if step in CARGO_RUNS)
    assert len(cargo) == 6
    assert cargo.count(StepName.BUILD_BASELINE) == cargo.count(StepName.TEST) == 1
    assert {(v2, StepName.BUILD_BASELINE), (v2, StepName.TEST)} <= running
    shared = {(s.artifact, s.step): s.reason for s in plan.steps if not s.runs}
    assert shared[v3, StepName.BUILD_BASELINE] == f"same inputs as {v2}"
    assert shared[v3, StepName.TEST] == f"same inputs as {v2}"
    assert shared[v3, StepName.BASE_IMAGE] == f"the image {v2} builds"
    assert shared[v3, StepName.TOOLCHAIN_IMAGE] == f"the image {v2} builds"
    # the locked PGO profile is used, never trained again; crates come from the vault
    for artifact in (v2, v3):
        for step in (StepName.PGO_INSTRUMENT, StepName.PGO_TRAIN, StepName.PGO_MERGE):
            assert shared[artifact, step] == "the PGO profile comes from the lock"
        assert (artifact, StepName.FETCH_CRATES) in shared
        assert (artifact, StepName.DISTROS) in shared  # offline: the release checked them
        # what reads target-cpu runs for each level
        for step in (StepName.BUILD_RELEASE, StepName.BUILD_OPTIMIZED):
            assert (artifact, step) in running
    assert len(running) == len(every) - len(shared)


def test_the_locked_bolt_profile_and_gate_pick_leave_nothing_to_profile_or_count(
    project: Path, tmp_path: Path
) -> None:
    """The release shipped pgo, so its main BOLT profile is kept as unshipped; the gate's
    pick is pinned (reproduce's plan): neither BOLT profiling nor counting runs again."""
    options = replace(make_options(project), gate_pinned="pgo")
    plan = plan_for(options)
    entry = lock_for(plan).targets[0]
    profiles = dict(entry.resolved.profiles)
    profiles["bolt.unshipped.fdata"] = profiles["pgo.profdata"]
    entry = entry.model_copy(
        update={"resolved": entry.resolved.model_copy(update={"profiles": profiles})}
    )
    reasons = {
        s.step: s.reason for s in plan_reproduction([(entry, plan)], tmp_path, tmp_path).steps
    }
    assert reasons[StepName.BOLT_PROFILE] == "the BOLT profile comes from the lock"
    assert reasons[StepName.SPEED_GATE].startswith("the gate's pick comes from the lock")
    # unpinned, with no BOLT profile locked: both run
    counted = plan_for(make_options(project))
    runs = plan_reproduction([(lock_for(counted).targets[0], counted)], tmp_path, tmp_path)
    assert {s.step for s in runs.running()} >= {StepName.SPEED_GATE, StepName.BOLT_PROFILE}


def test_the_estimate_adds_the_release_s_recorded_times_of_what_runs(
    project: Path, tmp_path: Path
) -> None:
    pairs = _two_levels(project)
    v2, v3 = (p.artifact_dir for _, p in pairs)
    release = tmp_path / "release"
    _record(
        release,
        v2,
        {"build-baseline": 600, "build-release": 300, "test": 900, "pgo-train": 1000},
        cached={"build-optimized": v3},  # the release took it from v3's build
    )
    _record(release, v3, {"build-release": 320, "build-optimized": 400, "test": 950})
    plan = plan_reproduction(pairs, tmp_path / "cache", release)
    # v2: baseline 600 + release 300 + optimized 400 (v3's record) + test 900; the PGO
    # training is not run again (the lock has the profile)
    assert plan.expected_seconds(v2) == pytest.approx(2200)
    assert plan.expected_seconds(v3) == pytest.approx(320 + 400)  # its tests are v2's
    assert plan.expected_seconds() == pytest.approx(2200 + 720)
    lines = plan.lines()
    assert lines[0].startswith("reproduce plan: 2 target(s), ")
    assert f"  {v3}: build-baseline not run: same inputs as {v2}" in lines
    assert lines[-1].startswith("  expected: about 48m40s, the sum of the release's own")
    assert f"{v2}: validate" in lines[-1]  # runs, and nothing recorded its time


def test_without_recorded_times_it_says_so_and_guesses_nothing(
    project: Path, tmp_path: Path
) -> None:
    pairs = _two_levels(project)
    plan = plan_reproduction(pairs, tmp_path / "cache", tmp_path / "no-release-folder")
    assert plan.expected_seconds() is None
    assert plan.expected_seconds(pairs[0][1].artifact_dir) is None
    assert plan.lines()[-1].startswith("  no estimate: the release records no step times")


def test_only_steps_that_ran_count_and_an_unreadable_record_counts_nothing(
    tmp_path: Path,
) -> None:
    _record(tmp_path, "demo-cpu", {"build-release": 12.5}, cached={"test": "demo-cpu-v3"})
    times = recorded_times(tmp_path, "demo-cpu")
    assert times.seconds == {"build-release": 12.5}  # the cached step's 0.1 s says nothing
    assert times.made_by == {"test": "demo-cpu-v3"}
    (tmp_path / "demo-cpu" / BUILD_RUN).write_text("not json")
    assert recorded_times(tmp_path, "demo-cpu") == recorded_times(tmp_path, "absent")
    assert recorded_times(tmp_path, "absent").seconds == {}

"""The plan is what runs: every step name has an executor, every plan step runs in the
plan's order, and BOLT gives way (or fails the build) as bolt.policy says."""

from __future__ import annotations

import itertools
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pytest
from rich.console import Console

from orchestrator.config.resolve.options import Options, resolve
from orchestrator.errors import BoltError, ProfileError, StepFailedError
from orchestrator.execute.build import EXECUTORS, StepExecutor, run_steps
from orchestrator.execute.steps.pipeline import Pipeline
from orchestrator.flavors import FLAVORS
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.plan.steps import StepName
from orchestrator.progress.reporter import Reporter, StepLog

from .conftest import plan_for


@pytest.fixture
def options(project: Path) -> Options:
    return resolve(project / "orchestrator.toml", env={"SOURCE_DATE_EPOCH": "1700000000"})


def test_every_step_name_has_an_executor_and_every_executor_a_name() -> None:
    assert set(EXECUTORS) == set(StepName)


def test_every_plan_lists_only_executable_steps_and_together_they_use_them_all(
    options: Options,
) -> None:
    seen: set[StepName] = set()
    modes = ("off", "lto-pgo")  # lto-pgo: the gate judges a build with [c_code] mode off
    for flavor, pgo, bolt, c_code in itertools.product(
        FLAVORS, (True, False), (True, False), modes
    ):
        plan = plan_for(replace(options, pgo=pgo, bolt=bolt, c_code=c_code), flavor)
        names = [step.name for step in plan.steps]
        assert len(names) == len(set(names)), f"{flavor}: a step is listed twice"
        assert all(isinstance(name, StepName) and name in EXECUTORS for name in names)
        seen.update(names)
    assert seen == set(StepName), f"never planned: {set(StepName) - seen}"


def _pipeline(plan: BuildPlan, options: Options, tmp_path: Path, stack: ExitStack) -> Pipeline:
    reporter = Reporter(Console(file=open(tmp_path / "out.txt", "w")), tmp_path / "logs")  # noqa: SIM115, PTH123
    return Pipeline(
        options=options,
        plan=plan,
        engine=cast(Any, None),  # the recording executors below never reach an engine
        reporter=reporter,
        signer=cast(Any, None),
        stack=stack,
        scratch=tmp_path,
        staging=tmp_path,
        started="2026-01-01T00:00:00+00:00",
    )


def _recording(
    ran: list[str], failing: dict[StepName, Exception] | None = None
) -> dict[StepName, StepExecutor]:
    def executor(name: StepName) -> StepExecutor:
        def run(pipeline: Pipeline, log: StepLog) -> None:
            ran.append(name)
            if failing and name in failing:
                raise failing[name]

        return run

    return {name: executor(name) for name in StepName}


def test_steps_run_in_the_plans_order_and_are_reported(options: Options, tmp_path: Path) -> None:
    plan = plan_for(options)
    ran: list[str] = []
    with ExitStack() as stack:
        pipeline = _pipeline(plan, options, tmp_path, stack)
        run_steps(pipeline, _recording(ran))
    assert ran == [step.name for step in plan.steps]
    assert [r.name for r in pipeline.reporter.results] == ran
    assert {r.status for r in pipeline.reporter.results} == {"ok"}


def test_a_failing_bolt_step_falls_back_and_skips_the_rest_of_bolt(
    options: Options, tmp_path: Path
) -> None:
    plan = plan_for(replace(options, bolt_policy="fallback"))
    ran: list[str] = []
    failing: dict[StepName, Exception] = {StepName.BOLT_PROFILE: ProfileError("0 samples")}
    with ExitStack() as stack:
        pipeline = _pipeline(plan, options, tmp_path, stack)
        pipeline.state.shipped = pipeline.state.unbolted = "/build/out/bin/optimized"
        run_steps(pipeline, _recording(ran, failing))
    assert StepName.BOLT_OPTIMIZE not in ran
    assert ran[-1] == StepName.PUBLISH
    assert pipeline.state.bolt_report is not None
    assert pipeline.state.bolt_report["applied"] is False
    assert pipeline.state.bolt_report["fallback_reason"] == "0 samples"
    assert pipeline.state.shipped == "/build/out/bin/optimized"


def test_a_failing_bolt_step_fails_the_build_under_policy_require(
    options: Options, tmp_path: Path
) -> None:
    plan = plan_for(replace(options, bolt_policy="require"))
    ran: list[str] = []
    failing: dict[StepName, Exception] = {StepName.BOLT_OPTIMIZE: ProfileError("bad profile")}
    with ExitStack() as stack, pytest.raises(BoltError, match="bad profile"):
        run_steps(_pipeline(plan, options, tmp_path, stack), _recording(ran, failing))
    assert ran[-1] == StepName.BOLT_OPTIMIZE


def test_any_other_failing_step_stops_the_build(options: Options, tmp_path: Path) -> None:
    plan = plan_for(options)
    ran: list[str] = []
    failing: dict[StepName, Exception] = {StepName.TEST: StepFailedError("cargo test failed")}
    with ExitStack() as stack, pytest.raises(StepFailedError):
        run_steps(_pipeline(plan, options, tmp_path, stack), _recording(ran, failing))
    assert ran[-1] == StepName.TEST
    assert StepName.PUBLISH not in ran

"""engines.jobs: how many targets an engine builds at a time (auto from its cores and
memory), cargo's share of the cores, and that neither changes a key."""

from __future__ import annotations

import io
import json
import re
import threading
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

import orchestrator.release.run as release_run
from orchestrator.cli import app
from orchestrator.cli.release_common import closing_lines
from orchestrator.config.resolve.options import FlavorSettings, Options, resolve
from orchestrator.errors import ConfigError
from orchestrator.model.documents.records import read_record
from orchestrator.model.documents.release_summary import TargetRuns
from orchestrator.model.documents.run_logs import TARGET_RUNS
from orchestrator.plan.serialize import action_key
from orchestrator.plan.step_keys import baseline_key, cargo_test_key
from orchestrator.release.run import run_release, run_report
from orchestrator.release.targets.engine_jobs import (
    cargo_jobs_on,
    jobs_of,
    jobs_per_engine,
    jobs_text,
)
from orchestrator.release.targets.release_view import ReleaseView
from orchestrator.release.targets.schedule import Job, Needs, Schedule
from orchestrator.release.targets.target import TargetResult, targets
from orchestrator.runtime.api import EngineFacts, engine_facts
from orchestrator.supply.attest import ReleaseIndex, Signer
from orchestrator.supply.minisign import SecretKey

from .conftest import plan_for, write_config
from .execute_rig import make_options, make_rig
from .fakes import FakeEngine
from .test_cli_commands import configure, use_engine

GIB = 1024**3
runner = CliRunner()


def _info(cores: int, gib: float) -> dict[str, Any]:
    return {"NCPU": cores, "MemTotal": int(gib * GIB)}


@pytest.mark.parametrize(
    ("cores", "gib", "targets", "jobs", "cargo"),
    [
        (2, 23, 5, 1, 2),  # this machine: one target at a time, cargo on both cores
        (4, 8, 5, 1, 4),
        (8, 16, 5, 2, 4),
        (16, 64, 5, 4, 4),
        (16, 8, 5, 1, 16),  # memory is the limit
        (64, 256, 3, 3, 21),  # the targets are the limit
        (16, 64, 1, 1, 16),
        (16, 64, 0, 1, 16),  # nothing to build (all cached): still a sane answer
    ],
)
def test_auto_gives_one_job_per_four_cores_and_six_gib(
    cores: int, gib: float, targets: int, jobs: int, cargo: int
) -> None:
    chosen = jobs_of("box", _info(cores, gib), "auto", targets)
    assert (chosen.jobs, chosen.cargo_jobs) == (jobs, cargo)
    assert chosen.cores == cores
    assert chosen.memory_gib == pytest.approx(gib, abs=0.1)
    assert chosen.reason.startswith("auto: one per 4 cores and per 6 GiB")


def test_an_engine_that_reports_no_size_builds_one_target_with_cargos_default() -> None:
    chosen = jobs_of("odd", {"NCPU": None}, "auto", 4)
    assert (chosen.jobs, chosen.cargo_jobs, chosen.cores) == (1, None, 0)
    assert chosen.describe().startswith("size unknown: 1 target at a time (")


def test_a_set_count_wins_over_the_rule_but_not_over_the_targets() -> None:
    two = jobs_of("small", _info(2, 4), 2, 5)
    assert (two.jobs, two.cargo_jobs, two.reason) == (2, 1, "engines.jobs = 2")
    capped = jobs_of("big", _info(16, 64), 4, 2)
    assert (capped.jobs, capped.cargo_jobs) == (2, 8)


def test_the_summary_line_says_size_jobs_and_why() -> None:
    chosen = jobs_of("current", _info(2, 23.4), "auto", 3)
    assert chosen.describe() == (
        "2 cores, 23 GiB: 1 target at a time, cargo -j2 (auto: one per 4 cores and per 6 GiB)"
    )
    wide = jobs_of("wide", _info(16, 64), "auto", 2)
    assert wide.describe().startswith("16 cores, 64 GiB: 2 targets at a time, cargo -j8")
    assert wide.reason.endswith("; 2 targets")
    assert jobs_text([chosen, wide]).startswith("jobs: current: 2 cores")
    assert "; wide: 16 cores" in jobs_text([chosen, wide])


def test_each_engine_is_judged_by_its_own_info() -> None:
    local, remote = FakeEngine(info=_info(2, 23)), FakeEngine(info=_info(32, 128))
    remote.name = "build-box"
    chosen = jobs_per_engine("auto", [local, remote], 6)
    assert [(c.engine, c.jobs) for c in chosen] == [("fake", 1), ("build-box", 6)]
    assert cargo_jobs_on(chosen, "build-box") == 5
    assert cargo_jobs_on(chosen, "fake") == 2
    assert cargo_jobs_on(chosen, "gone") is None


def test_the_schedule_takes_each_engines_own_count() -> None:
    def facts(name: str) -> EngineFacts:
        return EngineFacts(name, "x86_64", {}, frozenset())

    queue = [Job(i, f"t{i}", Needs(), ("image", "base")) for i in range(4)]
    schedule = Schedule([facts("big"), facts("small")], queue, {"big": 2, "small": 1})
    taken = [schedule.take("big"), schedule.take("big"), schedule.take("small")]
    assert [job.artifact for job in taken if job] == ["t0", "t1", "t2"]
    # both are full: neither takes the fourth until one of theirs is done
    assert schedule._pick("big") is None and schedule._pick("small") is None
    with pytest.raises(ConfigError, match="at least 1, got 0 for small"):
        Schedule([facts("big"), facts("small")], [], {"big": 2, "small": 0})


# -- the setting ------------------------------------------------------------------------
def test_engines_jobs_is_auto_by_default_and_takes_a_count(project: Path) -> None:
    config = project / "orchestrator.toml"
    assert resolve(config, env={}).engine_jobs == "auto"
    assert resolve(config, env={"ORCHESTRATOR_ENGINES_JOBS": "3"}).engine_jobs == 3
    assert resolve(config, env={"ORCHESTRATOR_ENGINES_JOBS": "auto"}).engine_jobs == "auto"
    write_config(project, '[package]\ncrate = "crate"\n[engines]\njobs = 2\n')
    assert resolve(config, env={}).engine_jobs == 2


def test_engines_jobs_refuses_other_words(project: Path) -> None:
    with pytest.raises(ConfigError, match=r'non-negative integer or "auto"'):
        resolve(project / "orchestrator.toml", env={"ORCHESTRATOR_ENGINES_JOBS": "many"})
    write_config(project, '[package]\ncrate = "crate"\n[engines]\njobs = "max"\n')
    with pytest.raises(
        ConfigError, match=r'engines\.jobs: expected a non-negative integer or "auto"'
    ):
        resolve(project / "orchestrator.toml", env={})


# -- keys and bytes ---------------------------------------------------------------------
def test_jobs_change_no_key(project: Path) -> None:
    """The action key, the step keys and the plan (and so the lock) are the same for any
    engines.jobs: it only sets how many builds run at once and cargo's share of cores."""
    base = resolve(project / "orchestrator.toml", env={})
    keys = set()
    for jobs in (1, 2, "auto"):
        options = replace(base, engine_jobs=jobs)
        plan = plan_for(options)
        keys.add((action_key(plan, options), baseline_key(plan), cargo_test_key(plan, None)))
        assert "CARGO_BUILD_JOBS" not in plan.build.environment
        assert all("CARGO_BUILD_JOBS" not in v.build.environment for v in plan.variants.values())
    assert len(keys) == 1


def test_cargo_jobs_reach_the_build_container_only(project: Path, tmp_path: Path) -> None:
    options = make_options(project, cache_dir=tmp_path / "cache")
    with ExitStack() as stack:
        rig = make_rig(options, stack, tmp_path)
        rig.pipeline.cargo_jobs = 3
        assert rig.box.spec.environment["CARGO_BUILD_JOBS"] == "3"
        # the recorded environment (build.json, keys) is the plan's, without it
        assert "CARGO_BUILD_JOBS" not in rig.pipeline.plan.build.environment
    with ExitStack() as stack:
        (tmp_path / "plain").mkdir()
        plain = make_rig(options, stack, tmp_path / "plain")
        assert "CARGO_BUILD_JOBS" not in plain.box.spec.environment


# -- a release ------------------------------------------------------------------------
class _SizedEngine(FakeEngine):
    """A fake engine the farm can use: it answers, and builds share it."""

    def twin(self) -> _SizedEngine:
        return self

    def facts(self) -> EngineFacts:
        return engine_facts(self)

    def alive(self) -> bool:
        return True

    def remove_session_containers(self) -> int:
        return 0


def _release(
    options: Options, engine: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[tuple[str, int | None, str]], list[str]]:
    """Run a release whose builds only record what they were given: (artifact,
    cargo_jobs, thread) per build, and what the release announced."""
    built: list[tuple[str, int | None, str]] = []

    def build_target(result: TargetResult, *_a: Any, cargo_jobs: int | None, **_k: Any) -> None:
        built.append((result.artifact, cargo_jobs, threading.current_thread().name))
        result.status = "ok"

    monkeypatch.setattr(release_run, "prepare_plan", plan_for)
    monkeypatch.setattr(release_run, "build_target", build_target)
    monkeypatch.setattr(release_run, "measure_speedup", lambda *_a, **_k: None)
    monkeypatch.setattr(release_run, "update_release_index", lambda *_a, **_k: ReleaseIndex([], []))
    said: list[str] = []
    run_release(
        ReleaseView.from_options(options),
        release_run.plan_targets(targets(options, ["cpu"])),
        engine,  # type: ignore[arg-type]
        Console(file=io.StringIO()),
        signer=Signer(SecretKey.generate(), throwaway=True, source="test"),
        retrain=False,
        bench_runs=0,
        announce=said.append,
    )
    return built, said


@pytest.fixture
def two_levels(project: Path, tmp_path: Path) -> Options:
    return replace(
        resolve(project / "orchestrator.toml", env={}),
        cache_dir=tmp_path / "cache",
        artifacts_dir=tmp_path / "artifacts",
        flavor_settings={"cpu": FlavorSettings(levels=("x86-64-v2", "x86-64-v3"))},
    )


def test_a_small_engine_builds_one_after_another_with_all_its_cores(
    two_levels: Options, monkeypatch: pytest.MonkeyPatch
) -> None:
    built, said = _release(two_levels, _SizedEngine(info=_info(2, 23)), monkeypatch)
    assert [cargo for _, cargo, _ in built] == [2, 2]
    assert {thread for _, _, thread in built} == {threading.main_thread().name}
    assert not any("at a time" in line for line in said)  # no farm
    summary = read_record(two_levels.artifacts_dir / "demo-1.2.3" / TARGET_RUNS, TargetRuns)
    [engine] = summary.jobs_per_engine
    assert (engine.engine, engine.jobs, engine.cargo_jobs, engine.cores) == ("fake", 1, 2, 2)


def test_a_big_engine_builds_side_by_side_sharing_its_cores(
    two_levels: Options, monkeypatch: pytest.MonkeyPatch
) -> None:
    built, said = _release(two_levels, _SizedEngine(info=_info(16, 64)), monkeypatch)
    assert [cargo for _, cargo, _ in built] == [8, 8]
    assert all(thread.startswith("engine-fake-") for _, _, thread in built)
    assert any("at most 2 at a time on each" in line for line in said)
    summary = read_record(two_levels.artifacts_dir / "demo-1.2.3" / TARGET_RUNS, TargetRuns)
    assert [(e.jobs, e.cargo_jobs) for e in summary.jobs_per_engine] == [(2, 8)]


# -- what the user reads ------------------------------------------------------------------
def test_dry_run_says_the_jobs_it_would_choose(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = FakeEngine(info=_info(2, 23))
    engine.name = "current"  # as Engine.connect() names the engine DOCKER_HOST names
    use_engine(monkeypatch, engine)
    config = configure(project, '[flavors.cpu]\nlevels = ["x86-64-v2", "x86-64-v3"]\n')
    argv = ["release", "--dry-run", "--flavors", "cpu", "-c", str(config)]
    text = runner.invoke(app, argv)
    assert text.exit_code == 0, text.output
    assert "jobs: current: 2 cores, 23 GiB: 1 target at a time, cargo -j2 (auto:" in text.stdout
    # Two x86-64 levels: the -auto folder it would compose, and none with dispatch off.
    assert re.search(
        r"composes: \S+-linux-x86_64-cpu-auto \(bin/\S+ runs the best of "
        r"x86-64-v2, x86-64-v3 for the CPU it starts on; a level the gate counts no faster "
        r"than the one below it is left out\)",
        text.stdout,
    )
    off = configure(
        project, '[flavors.cpu]\nlevels = ["x86-64-v2", "x86-64-v3"]\ndispatch = false\n'
    )
    alone = runner.invoke(app, ["release", "--dry-run", "--flavors", "cpu", "-c", str(off)])
    assert alone.exit_code == 0 and "composes:" not in alone.stdout, alone.output
    document = json.loads(runner.invoke(app, [*argv, "--json"]).stdout)
    assert document["jobs_per_engine"] == [
        {
            "engine": "current",
            "cores": 2,
            "memory_gib": 23.0,
            "jobs": 1,
            "cargo_jobs": 2,
            "reason": "auto: one per 4 cores and per 6 GiB",
            "prefetch": False,  # its info names no host: not known to be this one
            "prefetch_reason": "off: the engine runs on an unnamed host, not this host",
        }
    ]


def test_the_closing_lines_name_the_jobs(two_levels: Options) -> None:
    signer = Signer(SecretKey.generate(), throwaway=True, source="test")
    jobs = [jobs_of("current", _info(16, 64), "auto", 2)]
    report = run_report(
        ReleaseView.from_options(two_levels), [], signer, seconds=1.0, lockfile=None, jobs=jobs
    )
    out = Console(file=io.StringIO(), width=80)
    closing_lines(report, out)
    shown = out.file.getvalue()  # type: ignore[attr-defined]
    lines = shown.splitlines()
    assert lines[-2].startswith(
        "jobs: current: 16 cores, 64 GiB: 2 targets at a time, cargo -j8 (auto:"
    )
    assert lines[-1].startswith("nothing was published to ")  # the path stays the last line

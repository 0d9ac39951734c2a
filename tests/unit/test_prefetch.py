"""engines.prefetch: while one target compiles, the next target's images are made in the
background (release/targets/prefetch.py), where an engine builds one target at a time on this
host with room; a failure there is a warning on the target that needed the images, and a
stop leaves no prefetch running."""

from __future__ import annotations

import io
import socket
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import orchestrator.release.run as release_run
from orchestrator.config.resolve.options import FlavorSettings, Options, resolve
from orchestrator.errors import ImageBuildError
from orchestrator.model.documents.records import read_record
from orchestrator.model.documents.release_summary import TargetRuns
from orchestrator.model.documents.run_logs import TARGET_RUNS
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.progress.reporter import StepLog
from orchestrator.release.run import run_release
from orchestrator.release.targets import prefetch
from orchestrator.release.targets.engine_jobs import jobs_of, jobs_per_engine, prefetch_of
from orchestrator.release.targets.release_view import ReleaseView
from orchestrator.release.targets.target import TargetResult, targets
from orchestrator.supply.attest import ReleaseIndex, Signer
from orchestrator.supply.minisign import SecretKey

from .conftest import plan_for
from .fakes import FakeEngine

GIB = 1024**3
HERE = socket.gethostname()
WAIT_S = 10.0  # how long a fake waits for the other thread before the test fails


def _info(cores: int = 2, gib: float = 23, host: str | None = HERE) -> dict[str, Any]:
    return {"NCPU": cores, "MemTotal": int(gib * GIB), "Name": host}


# -- the rule -----------------------------------------------------------------------------
def test_this_machine_makes_the_next_images_while_one_target_compiles() -> None:
    chosen = jobs_of("current", _info(2, 23), "auto", 3)
    assert (chosen.jobs, chosen.prefetch) == (1, True)
    assert chosen.prefetch_reason.startswith("on: this host")
    assert chosen.describe().endswith("; the next target's images made while one compiles")


@pytest.mark.parametrize(
    ("info", "jobs", "targets", "why"),
    [
        (_info(16, 64), 2, 3, "off: targets build side by side"),
        (_info(2, 23), 1, 1, "off: one target to build"),
        (_info(2, 23, host="build-box"), 1, 3, "off: the engine runs on build-box, not this"),
        (_info(2, 23, host=None), 1, 3, "off: the engine runs on an unnamed host"),
        (_info(1, 23), 1, 3, "off: no room beside a build (2 cores, 8 GiB)"),
        (_info(4, 7.5), 1, 3, "off: no room beside a build"),
    ],
)
def test_prefetch_is_off_where_it_would_not_help(
    info: dict[str, Any], jobs: int, targets: int, why: str
) -> None:
    ahead, reason = prefetch_of(info, jobs, targets)
    assert not ahead
    assert reason.startswith(why)


def test_the_setting_and_several_engines_turn_it_off() -> None:
    engine = FakeEngine(info=_info())
    [alone] = jobs_per_engine("auto", [engine], 3)
    assert alone.prefetch
    [off] = jobs_per_engine("auto", [engine], 3, prefetch=False)
    assert (off.prefetch, off.prefetch_reason) == (False, "off: engines.prefetch = false")
    other = FakeEngine(info=_info())
    other.name = "other"
    both = jobs_per_engine("auto", [engine, other], 3)
    assert [j.prefetch_reason for j in both] == ["off: several engines build side by side"] * 2


def test_engines_prefetch_is_on_by_default_and_can_be_turned_off(project: Path) -> None:
    config = project / "orchestrator.toml"
    assert resolve(config, env={}).engine_prefetch is True
    assert resolve(config, env={"ORCHESTRATOR_ENGINES_PREFETCH": "false"}).engine_prefetch is False


# -- a release ------------------------------------------------------------------------------
class _HostEngine(FakeEngine):
    """A fake engine on this host, 2 cores and 23 GiB: it builds one target at a time and
    makes the next target's images ahead."""

    def __init__(self) -> None:
        super().__init__(info=_info())

    def twin(self) -> _HostEngine:
        return self


class _Recorder:
    """What happened, in order, across the release's thread and the prefetch's."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.prefetch_started = threading.Event()
        self._lock = threading.Lock()

    def note(self, event: str) -> None:
        with self._lock:
            self.events.append(event)


@pytest.fixture
def three_targets(project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Options:
    monkeypatch.setattr(prefetch, "POLL_S", 0.01)
    return replace(
        resolve(project / "orchestrator.toml", env={}),
        cache_dir=tmp_path / "cache",
        artifacts_dir=tmp_path / "artifacts",
        flavor_settings={"cpu": FlavorSettings(levels=("x86-64-v2", "x86-64-v3"))},
    )


def _release(
    options: Options,
    engine: FakeEngine,
    monkeypatch: pytest.MonkeyPatch,
    recorder: _Recorder,
    *,
    on_build: Any = None,
) -> tuple[list[TargetResult], list[str]]:
    """A release of cpu at two levels and aarch64, whose builds make their own target's
    images (when missing) and record when they start and end."""

    def build_target(result: TargetResult, plan: BuildPlan, *_a: Any, **_k: Any) -> None:
        recorder.note(f"build {plan.flavor} starts")
        if engine.image(plan.image.reference) is None:
            engine.add_image(plan.image.reference)  # its own image steps
        if on_build is not None:
            on_build(plan)
        recorder.note(f"build {plan.flavor} ends")
        result.status = "ok"

    monkeypatch.setattr(release_run, "prepare_plan", plan_for)
    monkeypatch.setattr(release_run, "build_target", build_target)
    monkeypatch.setattr(release_run, "measure_speedup", lambda *_a, **_k: None)
    monkeypatch.setattr(release_run, "update_release_index", lambda *_a, **_k: ReleaseIndex([], []))
    said: list[str] = []
    results = run_release(
        ReleaseView.from_options(options),
        release_run.plan_targets(targets(options, ["cpu", "aarch64"])),
        engine,  # type: ignore[arg-type]
        Console(file=io.StringIO()),
        signer=Signer(SecretKey.generate(), throwaway=True, source="test"),
        retrain=False,
        bench_runs=0,
        announce=said.append,
    )
    return results, said


def _wait_for_prefetch(recorder: _Recorder) -> Any:
    def during_build(plan: BuildPlan) -> None:
        if plan.flavor == "cpu" and plan.target_cpu == "x86-64-v2":
            assert recorder.prefetch_started.wait(WAIT_S), "no prefetch while cpu compiled"

    return during_build


def test_the_next_targets_images_are_made_while_the_first_compiles(
    three_targets: Options, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, recorder = _HostEngine(), _Recorder()
    made: list[tuple[str, str]] = []

    def ensure_images(on: FakeEngine, plan: BuildPlan, log: StepLog, **_k: object) -> None:
        recorder.note(f"images of {plan.flavor} start")
        made.append((plan.flavor, threading.current_thread().name))
        log.line("apt: installing")
        on.add_image(plan.image.reference)
        recorder.prefetch_started.set()

    monkeypatch.setattr(prefetch, "ensure_images", ensure_images)
    results, said = _release(
        three_targets, engine, monkeypatch, recorder, on_build=_wait_for_prefetch(recorder)
    )
    # aarch64's images (the only ones the cpu build does not make) began before the first
    # cpu build ended, in a thread of their own; the second cpu level shares the first's.
    events = recorder.events
    assert events.index("images of aarch64 start") < events.index("build cpu ends")
    assert events.index("build cpu starts") < events.index("images of aarch64 start")
    assert made == [("aarch64", "prefetch-demo-1.2.3-linux-aarch64-cpu")]
    assert [r.status for r in results] == ["ok", "ok", "ok"]
    assert all(not r.warnings for r in results)
    assert any("making demo-1.2.3-linux-aarch64-cpu's images ahead" in line for line in said)
    log = three_targets.cache_dir / "runs" / engine.session / "prefetch"
    assert "apt: installing" in (log / "demo-1.2.3-linux-aarch64-cpu.log").read_text()
    summary = read_record(three_targets.artifacts_dir / "demo-1.2.3" / TARGET_RUNS, TargetRuns)
    [jobs] = summary.jobs_per_engine
    assert (jobs.jobs, jobs.prefetch) == (1, True)


def test_a_failed_prefetch_is_a_warning_on_its_own_target_only(
    three_targets: Options, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, recorder = _HostEngine(), _Recorder()

    def ensure_images(_e: FakeEngine, plan: BuildPlan, log: StepLog, **_k: object) -> None:
        log.line("E: Unable to locate package qemu-user")
        recorder.prefetch_started.set()
        raise ImageBuildError(f"building {plan.image.reference} failed: apt said no")

    monkeypatch.setattr(prefetch, "ensure_images", ensure_images)
    results, said = _release(
        three_targets, engine, monkeypatch, recorder, on_build=_wait_for_prefetch(recorder)
    )
    cpu, cpu_v3, arm = results
    assert (cpu.status, cpu.warnings, cpu_v3.warnings) == ("ok", [], [])
    [warning] = arm.warnings
    assert warning.startswith("making its images ahead failed (ImageBuildError): building ")
    assert "apt said no; its own image steps ran instead (log: " in warning
    assert arm.status == "ok"  # its own steps made the images, and it was built
    assert "build aarch64 starts" in recorder.events
    assert any(line.endswith(warning) and arm.artifact in line for line in said)


def test_nothing_is_made_ahead_when_the_engine_holds_the_images(
    three_targets: Options, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, recorder = _HostEngine(), _Recorder()
    for flavor in ("cpu", "aarch64"):
        engine.add_image(plan_for(three_targets, flavor).image.reference)
    calls: list[str] = []
    monkeypatch.setattr(prefetch, "ensure_images", lambda *a, **_k: calls.append(a[1].flavor))
    results, said = _release(three_targets, engine, monkeypatch, recorder)
    assert calls == []
    assert not any("ahead" in line for line in said)
    assert [r.status for r in results] == ["ok", "ok", "ok"]


def test_a_stop_ends_the_prefetch_before_the_release_returns(
    three_targets: Options, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, recorder = _HostEngine(), _Recorder()
    cleaned = threading.Event()

    def ensure_images(_e: FakeEngine, _p: BuildPlan, log: StepLog, **_k: object) -> None:
        recorder.prefetch_started.set()
        try:
            deadline = time.monotonic() + WAIT_S
            while time.monotonic() < deadline:  # apt's output, line after line
                log.line("Unpacking llvm-22 ...")
                time.sleep(0.01)
        finally:
            cleaned.set()  # where the image lock and the scratch folder go

    def interrupted(plan: BuildPlan) -> None:
        assert recorder.prefetch_started.wait(WAIT_S)
        raise KeyboardInterrupt

    monkeypatch.setattr(prefetch, "ensure_images", ensure_images)
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        _release(three_targets, engine, monkeypatch, recorder, on_build=interrupted)
    assert cleaned.is_set()
    assert time.monotonic() - started < WAIT_S / 2  # stopped at its next line, not at its end
    assert not [t for t in threading.enumerate() if t.name.startswith("prefetch-")]

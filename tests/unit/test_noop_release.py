"""A release that finds every target current writes nothing (issue 42, point 7): not the
-auto archive, not release.json, not the index, not logs/targets.json; each file keeps its
bytes and its mtime, and the run says the release is current. Two levels published by the
real publish step through the fake Engine; the dispatcher from a seeded cache."""

from __future__ import annotations

import hashlib
import io
import os
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import orchestrator.release.run as release_run
import orchestrator.release.targets.target as release_target
from orchestrator.config.resolve.options import FlavorSettings, Options
from orchestrator.errors import ConfigError
from orchestrator.model.documents.record_io import read_record
from orchestrator.model.documents.release_summary import ReleaseSummary, TargetRuns
from orchestrator.model.documents.run_logs import TARGET_RUNS
from orchestrator.release.run import RELEASE_JSON, run_release
from orchestrator.release.targets.release_view import ReleaseView
from orchestrator.release.targets.target import TargetResult, targets
from orchestrator.supply.attest import Signer
from orchestrator.supply.minisign import SecretKey, write_key_pair
from orchestrator.supply.verify import verify_release

from .conftest import plan_for
from .execute_rig import make_options
from .fakes import FakeEngine
from .publish_rig import extract_and_publish, ready_to_publish
from .test_compose import _seed_dispatcher

LEVELS = ("x86-64-v2", "x86-64-v3")
AUTO = "demo-1.2.3-linux-x86_64-cpu-auto"


@pytest.fixture
def signer(tmp_path: Path) -> Signer:
    key = SecretKey.generate()
    write_key_pair(key, tmp_path / "keys" / "signing.key", None)
    return Signer(key, throwaway=False, source="test key")


@pytest.fixture
def options(project: Path, tmp_path: Path, signer: Signer) -> Options:
    """Two levels published once, each by the publish step; the dispatcher in the cache."""
    options = make_options(project)
    options = replace(options, flavor_settings={"cpu": FlavorSettings(levels=LEVELS)})
    for level in LEVELS:
        with ExitStack() as stack:
            (tmp_path / level).mkdir()
            rig = ready_to_publish(
                replace(options, target_cpu=level), stack, tmp_path / level, signer
            )
            extract_and_publish(rig)
    _seed_dispatcher(options, plan_for(options).image.reference)
    return options


def _release(options: Options, signer: Signer, said: list[str]) -> list[TargetResult]:
    chosen = targets(options, ["cpu"])
    return run_release(
        ReleaseView.from_options(options),
        [(target, plan_for(target.options)) for target in chosen],
        FakeEngine(),  # type: ignore[arg-type]
        Console(file=io.StringIO()),
        signer,
        retrain=False,
        bench_runs=0,
        announce=said.append,
    )


def _files(folder: Path) -> dict[str, tuple[int, str]]:
    """Every file below `folder`: its mtime (ns) and sha256."""
    return {
        path.relative_to(folder).as_posix(): (
            path.stat().st_mtime_ns,
            hashlib.sha256(path.read_bytes()).hexdigest(),
        )
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def test_a_release_with_every_target_current_writes_nothing(
    options: Options, signer: Signer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def run_build(*_args: Any, **_kwargs: Any) -> Any:
        raise ConfigError("nothing may be built")

    monkeypatch.setattr(release_target, "run_build", run_build)
    monkeypatch.setattr(release_run, "prepare_plan", plan_for)
    release = options.artifacts_dir / "demo-1.2.3"
    said: list[str] = []
    # The first release over the published levels composes -auto and writes release.json
    results = _release(options, signer, said)
    assert [result.status for result in results] == ["cached", "cached"]
    assert (release / AUTO / "compose.json").is_file()
    assert not any("is current" in line for line in said), said
    summary = read_record(release / RELEASE_JSON, ReleaseSummary)
    assert [entry.artifact for entry in summary.artifacts] == [
        "demo-1.2.3-linux-x86_64-cpu",
        "demo-1.2.3-linux-x86_64-cpu-v3",
    ]
    checks, _ = verify_release(release, tmp_path / "keys" / "signing.pub")
    assert all(check.ok for check in checks), [c for c in checks if not c.ok]
    # ... and, every file now current, the next one writes nothing at all
    for path in release.rglob("*"):
        if path.is_file():
            os.utime(path, ns=(1, 1))  # an mtime no write leaves
    before = _files(release)
    said.clear()
    results = _release(options, signer, said)
    assert [result.status for result in results] == ["cached", "cached"]
    assert _files(release) == before
    assert "demo-1.2.3 is current: every target cached, nothing written" in said
    assert not (release / TARGET_RUNS).exists()  # nothing was built: no run to record


def test_a_run_that_builds_keeps_the_cached_targets_build_record(
    options: Options, signer: Signer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """logs/targets.json after a run that built one target and found the other current:
    the current one keeps the entry of the run that built it (its time is not lost)."""
    monkeypatch.setattr(release_run, "prepare_plan", plan_for)
    said: list[str] = []
    monkeypatch.setattr(release_target, "run_build", _failing)
    _release(options, signer, said)  # both cached: nothing recorded yet
    release = options.artifacts_dir / "demo-1.2.3"
    v3 = "demo-1.2.3-linux-x86_64-cpu-v3"
    first = _release_with_one_rebuilt(options, signer, said, rebuilt=v3)
    runs = read_record(release / TARGET_RUNS, TargetRuns)
    entries = {entry.artifact: entry for entry in runs.targets}
    assert entries[v3].status == "failed" and entries[v3].seconds >= 0
    assert entries["demo-1.2.3-linux-x86_64-cpu"].status == "cached"  # no earlier record
    assert first[0].status == "cached"
    # An earlier record of the cached one's build is kept as it was, not replaced
    made = entries["demo-1.2.3-linux-x86_64-cpu"].model_copy(
        update={"status": "ok", "seconds": 412.5, "engine": "build-box"}
    )
    others = [entry for entry in runs.targets if entry.artifact != made.artifact]
    kept = runs.model_copy(update={"targets": [made, *others]})
    (release / TARGET_RUNS).write_text(kept.model_dump_json(by_alias=True))
    _release_with_one_rebuilt(options, signer, said, rebuilt=v3)
    again = {e.artifact: e for e in read_record(release / TARGET_RUNS, TargetRuns).targets}
    assert again[made.artifact] == made
    assert again[v3].status == "failed"


def _failing(*_args: Any, **_kwargs: Any) -> Any:
    raise ConfigError("stand-in build failure")


def _release_with_one_rebuilt(
    options: Options, signer: Signer, said: list[str], *, rebuilt: str
) -> list[TargetResult]:
    """A release whose plan of `rebuilt` changed (another validate tolerance): that one is
    built (and fails, here), the other is cached."""
    chosen = targets(options, ["cpu"])
    planned = []
    for target in chosen:
        plan = plan_for(target.options)
        if plan.artifact_dir == rebuilt:
            changed = replace(target, options=replace(target.options, validate_tolerance=0.5))
            planned.append((changed, plan_for(changed.options)))
        else:
            planned.append((target, plan))
    return run_release(
        ReleaseView.from_options(options),
        planned,
        FakeEngine(),  # type: ignore[arg-type]
        Console(file=io.StringIO()),
        signer,
        retrain=False,
        bench_runs=0,
        announce=said.append,
    )

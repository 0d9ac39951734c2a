"""`release`: a failing bench is a warning, and a failed target keeps its error's class."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from rich.console import Console

import orchestrator.release.run as release_run
import orchestrator.release.targets.target as release_target
from orchestrator.config.resolve.options import FlavorSettings, Options, resolve
from orchestrator.errors import OrchestratorError, StepFailedError
from orchestrator.execute.build import BuildOutcome
from orchestrator.execute.verdict.bench import VariantStats
from orchestrator.host.vault import VaultError
from orchestrator.release.run import run_release
from orchestrator.release.targets.release_view import ReleaseView
from orchestrator.release.targets.target import targets
from orchestrator.supply.attest import ReleaseIndex, Signer
from orchestrator.supply.minisign import SecretKey
from tests.unit.conftest import plan_for
from tests.unit.fakes import FakeEngine


@pytest.fixture
def options(project: Path, tmp_path: Path) -> Options:
    resolved = resolve(project / "orchestrator.toml", env={})
    return replace(
        resolved,
        cache_dir=tmp_path / "cache",
        artifacts_dir=tmp_path / "artifacts",
        bench_command=("run",),
        flavor_settings={"cpu": FlavorSettings(levels=("x86-64-v2", "x86-64-v3"))},
    )


def _fake_build(tmp_path: Path, fail: dict[str, OrchestratorError] | None = None) -> Any:
    def run_build(options: Options, plan: Any, *_a: Any, **_k: Any) -> BuildOutcome:
        error = (fail or {}).get(options.target_cpu)
        if error is not None:
            raise error
        folder = tmp_path / "out" / options.target_cpu
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "demo").write_bytes(options.target_cpu.encode())
        return BuildOutcome(
            folder,
            folder / "demo",
            cast(
                Any,
                SimpleNamespace(
                    portability=None,
                    tests=None,
                    gate=None,
                    bolt=None,
                    cuda_runtime=None,
                    gpu_path=None,
                ),
            ),
        )

    return run_build


def _patch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **fail: OrchestratorError) -> None:
    monkeypatch.setattr(release_run, "prepare_plan", plan_for)
    monkeypatch.setattr(release_run, "update_release_index", lambda *_a, **_k: ReleaseIndex([], []))
    monkeypatch.setattr(release_target, "run_build", _fake_build(tmp_path, fail))


def _run(options: Options) -> list[release_target.TargetResult]:
    return run_release(
        ReleaseView.from_options(options),
        release_run.plan_targets(targets(options, ["cpu"])),
        FakeEngine(),  # type: ignore[arg-type]
        Console(file=io.StringIO()),
        signer=Signer(SecretKey.generate(), throwaway=True, source="test"),
        retrain=False,
        bench_runs=1,
        announce=lambda _line: None,
    )


def test_failing_bench_is_a_warning_and_the_release_goes_on(
    options: Options, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _patch(monkeypatch, tmp_path)
    calls: list[str] = []

    def locate(opts: Options, _flavor: str) -> str:
        calls.append(opts.target_cpu)
        if opts.target_cpu == "x86-64-v2":
            raise OrchestratorError("the variant binaries are not in the cache")
        return opts.target_cpu

    measured = VariantStats("pgo", (0.4,), 1, 1, 0.4, 0.4, 0.4, 0.0, 1.25, (1.2, 1.3))
    monkeypatch.setattr(release_target, "locate", locate)
    monkeypatch.setattr(release_target, "measure", lambda *_a, **_k: [measured])
    results = _run(options)
    assert [r.status for r in results] == ["ok", "ok"]
    assert calls == ["x86-64-v2", "x86-64-v3"]
    first, second = results
    assert first.speedup is None
    assert any("bench failed" in w and "variant binaries" in w for w in first.warnings)
    assert second.speedup == 1.25
    assert not any("bench" in w for w in second.warnings)


def test_failed_targets_keep_error_class_and_exit_code(
    options: Options, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _patch(
        monkeypatch,
        tmp_path,
        **{
            "x86-64-v2": VaultError("no blob\nsecond line"),
            "x86-64-v3": StepFailedError("cargo build failed"),
        },
    )
    results = _run(replace(options, bench_command=()))
    assert [r.status for r in results] == ["failed", "failed"]
    assert isinstance(results[0].exception, VaultError)
    assert results[0].error == "no blob"
    # how each build went: the release's unsigned logs/targets.json
    runs = next((tmp_path / "artifacts").glob("*/logs/targets.json"))
    entries = {e["level"]: e for e in json.loads(runs.read_text())["targets"]}
    assert entries["x86-64-v2"]["error_class"] == "VaultError"
    assert entries["x86-64-v2"]["exit_code"] == 51
    assert entries["x86-64-v3"]["error_class"] == "StepFailedError"
    assert entries["x86-64-v3"]["exit_code"] == 40

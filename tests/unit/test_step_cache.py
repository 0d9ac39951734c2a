"""The step cache: the baseline build keyed by what it reads, shared by targets whose
baseline is the same, verified before use, never read by reproduce."""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import orchestrator.release.lock.reproduce as repro
from orchestrator.config.declarations.kinds import Run
from orchestrator.config.resolve.options import FlavorSettings, Options
from orchestrator.errors import StepFailedError
from orchestrator.execute import build as build_module
from orchestrator.execute.optimize import bolt, pgo, variants
from orchestrator.execute.steps.pipeline import BIN_DIR, Pipeline
from orchestrator.execute.steps.profiles import ProfileRecord, store_profile
from orchestrator.execute.verdict import cargo_test, gate
from orchestrator.host.source import snapshot
from orchestrator.host.step_cache import ENTRY_FILE, StepCache
from orchestrator.host.vault import Vault, VaultError
from orchestrator.model.documents.cache_records import StepEntryRecord
from orchestrator.model.documents.records import FileDigest, read_record, write_record
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.plan.cargo_commands import split_test_args
from orchestrator.plan.step_keys import (
    baseline_key,
    bolt_optimize_key,
    bolt_profile_inputs,
    cargo_test_build_key,
    cargo_test_key,
    config_member,
    count_key,
    optimized_key,
    pgo_key,
    reads_profile,
    release_key,
)
from orchestrator.plan.steps import StepName
from orchestrator.progress.reporter import Reporter
from orchestrator.release.dry_run import dry_run
from orchestrator.release.lock.reproduce import Reproduced, ReproduceRun
from orchestrator.release.targets.release_view import ReleaseView
from orchestrator.release.targets.target import Target, targets
from tests.unit.test_lockfile import lock_for

from .conftest import plan_for
from .execute_rig import Rig, answers, make_options, make_rig
from .fakes import FakeEngine, as_engine
from .test_console_warnings import SPOILERS
from .test_execute_pgo_bolt import BOLT_INFO


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
    (options.crate_dir / "src" / "main.rs").write_text("fn main() { println!(); }\n")
    assert baseline_key(_plan(options)) != key


def test_the_config_file_in_the_crate_is_no_build_input(project: Path) -> None:
    """Moved into the crate, the config travels with the sources; a setting no build
    reads (bench.runs) changes the snapshot, not the keys of the steps."""
    config = project / "crate" / "orchestrator.toml"
    text = (project / "orchestrator.toml").read_text().replace('crate = "crate"', 'crate = "."')
    config.write_text(text)
    options = make_options(project, config_path=config)
    member = config_member(options.config_path, options.crate_dir)
    assert member == "src/orchestrator.toml"
    assert config_member(project / "orchestrator.toml", options.crate_dir) == ""
    plan = _plan(options)
    keys = (baseline_key(plan, member), release_key(plan, member), pgo_key(plan, member))
    config.write_text(text + "[bench]\nruns = 3\n")
    again = _plan(options)
    assert again.source.archive_sha256 != plan.source.archive_sha256
    assert (baseline_key(again, member), release_key(again, member), pgo_key(again, member)) == (
        keys
    )
    assert baseline_key(again) != baseline_key(plan)  # the config named: it counts
    (options.crate_dir / "src" / "main.rs").write_text("fn main() { println!(); }\n")
    assert pgo_key(_plan(options), member) != keys[2]
    assert release_key(_plan(options), member) != keys[1]


# -- reuse ------------------------------------------------------------------------------
def test_a_reused_step_keeps_the_log_of_the_run_that_made_it(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    """The step log of a reused build still shows the command and what it printed, from
    the run that made the entry (a failing test's "1 filtered out" must stay findable)."""
    options = make_options(project)
    plan = _plan(options)
    reporter = Reporter(Console(file=io.StringIO(), width=200), tmp_path / "logs")
    logs = []
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
        rig = make_rig(
            options, stack, tmp_path / name, plan=plan, engine=FakeEngine(missing=_binary)
        )
        rig.pipeline.step_cache = StepCache(options.cache_dir / "steps")
        vendor = tmp_path / "vendor.tar"
        vendor.write_bytes(b"vendored")
        rig.pipeline.state.vendor = vendor
        with reporter.step(StepName.BUILD_BASELINE, "baseline") as log:
            variants.build_baseline(rig.pipeline, log)
        logs.append(sorted((tmp_path / "logs").glob("*.log"))[-1].read_text())
    first, second = logs
    [command] = [line for line in first.splitlines() if line.startswith("+ ") and "cargo" in line]
    assert "--- the build-baseline log of the run that made these outputs" in second
    assert command in second.splitlines()
    assert second.index("cached: ") < second.index(command)
    entry = read_record(
        options.cache_dir / "steps" / baseline_key(plan) / ENTRY_FILE, StepEntryRecord
    )
    assert sorted(entry.files) == ["demo", "step.log"]


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
    assert "not sealed with this machine's cache key" in " ".join(second.console.split())


@pytest.mark.parametrize("spoil", SPOILERS, ids=lambda spoil: spoil.__name__.strip("_"))
def test_an_unusable_step_record_is_said_once_and_the_step_runs_again(
    project: Path, stack: ExitStack, tmp_path: Path, spoil: Callable[[Path], str]
) -> None:
    options = make_options(project)
    v2 = _plan(options)
    _run_baseline(options, v2, stack, tmp_path, "first")
    entry = options.cache_dir / "steps" / baseline_key(v2) / ENTRY_FILE
    why = spoil(entry)
    second = _run_baseline(options, v2, stack, tmp_path, "second")
    assert _cargo_runs(second) == 1 and not second.log.cached
    console = " ".join(second.console.split())
    assert console.count("warning:") == 1
    assert f"{entry} cannot be used (" in console and why in console
    # Stored afresh in its place: the next target reuses it without a word.
    third = _run_baseline(options, v2, stack, tmp_path, "third")
    assert _cargo_runs(third) == 0 and "warning" not in third.console


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
                signer=None,
                step_cache=use,
                unsigned_out=tmp_path / "unsigned",
            )
    used, refreshed, off = seen
    assert used is not None and used.read and used.root == options.cache_dir / "steps"
    assert refreshed is not None and not refreshed.read
    assert off is None


def test_reproduce_reads_only_the_step_cache_it_fills(
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
    # "use": on the reproduction's own step cache, emptied as it starts (reproduce()),
    # so a target reuses only what an earlier target of the same reproduction ran
    assert [call.get("step_cache") for call in calls] == ["use"]


def test_the_dry_run_says_which_baselines_are_reused(project: Path) -> None:
    config = (project / "orchestrator.toml").read_text()
    (project / "orchestrator.toml").write_text(
        config + '[flavors.cpu]\nlevels = ["x86-64-v2", "x86-64-v3"]\n'
    )
    options = make_options(project)
    first, second = dry_run(ReleaseView.from_options(options), targets(options, ["cpu"]), [])
    assert not first.cached.baseline
    assert second.cached.baseline
    assert second.cached.baseline_reason == f"same inputs as {first.plan.artifact_dir}"
    assert second.cached.labelled()["baseline build"]
    entry = options.cache_dir / "steps" / baseline_key(first.plan) / ENTRY_FILE
    entry.parent.mkdir(parents=True)
    entry.write_text("{}")
    first, _ = dry_run(ReleaseView.from_options(options), targets(options, ["cpu"]), [])
    assert first.cached.baseline_reason == "in the step cache"


# -- every other cached step: its key ---------------------------------------------------
def _featured(options: Options, *features: str) -> Options:
    return replace(options, flavor_settings={"cpu": FlavorSettings(features=features)})


def test_the_release_build_key_follows_its_flags_and_features_only(project: Path) -> None:
    options = make_options(project)
    key = release_key(_plan(options))
    assert release_key(_plan(options, "x86-64-v3")) != key  # target-cpu is in its flags
    assert release_key(_plan(_featured(options, "simd"))) != key
    assert release_key(_plan(replace(options, version="9.9.9"))) != key  # remap prefix
    # What the build does not read: bench settings, the gate's policy, the PGO workloads.
    assert release_key(_plan(replace(options, bench_runs=options.bench_runs + 3))) == key
    assert release_key(_plan(replace(options, gate_policy="require-all"))) == key
    assert release_key(_plan(replace(options, workloads=(Run(("--version",)),)))) == key
    assert release_key(_plan(options)) != baseline_key(_plan(options))


def test_the_optimized_build_key_reads_the_profile_by_content(project: Path) -> None:
    options = make_options(project)
    plan = _plan(options)
    key = optimized_key(plan, "a" * 64)
    assert optimized_key(plan, "b" * 64) != key
    assert optimized_key(_plan(options, "x86-64-v3"), "a" * 64) != key
    # BOLT off: no relocation flags in the command, another key.
    assert optimized_key(_plan(replace(options, bolt=False)), "a" * 64) != key
    assert optimized_key(_plan(replace(options, bench_runs=1)), "a" * 64) == key
    # Without PGO the profile argument is not read.
    no_pgo = _plan(replace(options, pgo=False))
    assert optimized_key(no_pgo, "a" * 64) == optimized_key(no_pgo, None)


def test_the_test_key_is_its_command_not_the_level_unless_the_command_has_it(
    project: Path,
) -> None:
    options = make_options(project)
    plan = _plan(options)
    assert reads_profile(plan, plan.test)  # the shipped flags: -Cprofile-use
    key = cargo_test_key(plan, "a" * 64)
    assert cargo_test_key(plan, "b" * 64) != key
    with_args = _plan(replace(options, test_args=("--", "--skip", "slow")))
    assert cargo_test_key(with_args, "a" * 64) != key
    assert cargo_test_key(_plan(_featured(options, "simd")), "a" * 64) != key
    assert cargo_test_key(_plan(replace(options, gate_policy="require-all")), "a" * 64) == key
    v3 = _plan(options, "x86-64-v3")
    # The key is the command: levels whose test commands are equal share it.
    same_command = replace(v3, test=plan.test, test_build=plan.test_build, variants=plan.variants)
    assert cargo_test_key(same_command, "a" * 64) == key
    if v3.test != plan.test:
        assert cargo_test_key(v3, "a" * 64) != key
    no_pgo = _plan(replace(options, pgo=False))
    assert not reads_profile(no_pgo, no_pgo.test)
    assert cargo_test_key(no_pgo, "a" * 64) == cargo_test_key(no_pgo, None)


def test_a_skip_list_keys_the_test_run_and_not_its_compile(project: Path) -> None:
    """Args after "--" reach only the test binaries: a changed skip list runs the tests
    again without compiling them again; cargo's own args change what is compiled."""
    options = make_options(project)
    plan = _plan(options)
    build, run = cargo_test_build_key(plan, "a" * 64), cargo_test_key(plan, "a" * 64)
    skipping = _plan(replace(options, test_args=("--", "--skip", "answer_is_42")))
    assert skipping.test.argv[-3:] == ("--", "--skip", "answer_is_42")
    assert skipping.test_build.argv[-1] == "--no-run" and "--skip" not in skipping.test_build.argv
    assert cargo_test_build_key(skipping, "a" * 64) == build
    assert cargo_test_key(skipping, "a" * 64) != run
    # `cargo test --workspace -- --skip x`: --workspace compiles more; both keys change.
    both = _plan(replace(options, test_args=("--workspace", "--", "--skip", "x")))
    assert both.test_build.argv[-2:] == ("--workspace", "--no-run")
    assert cargo_test_build_key(both, "a" * 64) != build
    assert cargo_test_key(both, "a" * 64) != run
    # What the compile reads keys the run too: the PGO profile, the features.
    assert cargo_test_build_key(plan, "b" * 64) != build
    assert cargo_test_key(plan, "b" * 64) != run
    featured = _plan(_featured(options, "simd"))
    assert cargo_test_build_key(featured, "a" * 64) != build
    assert cargo_test_key(featured, "a" * 64) != run
    # The compile is the run's command up to its args, with --no-run.
    assert plan.test_build.argv == (*plan.test.argv, "--no-run")
    assert plan.test_build.environment == plan.test.environment


def test_split_test_args_at_the_first_double_dash() -> None:
    assert split_test_args(()) == ((), ())
    assert split_test_args(("--workspace",)) == (("--workspace",), ())
    assert split_test_args(("--", "--skip", "a")) == ((), ("--", "--skip", "a"))
    assert split_test_args(("-p", "x", "--", "--skip", "--", "b")) == (
        ("-p", "x"),
        ("--", "--skip", "--", "b"),
    )


def test_the_bolt_and_count_keys_are_the_content_they_read(project: Path) -> None:
    plan = _plan(make_options(project))
    argv = ["llvm-bolt", "/in", "-data=/p", "-o", "/out"]
    bolt_key = bolt_optimize_key(plan, binary_sha256="1" * 64, profile_sha256="2" * 64, argv=argv)
    assert bolt_optimize_key(plan, binary_sha256="3" * 64, profile_sha256="2" * 64, argv=argv) != (
        bolt_key
    )
    assert bolt_optimize_key(plan, binary_sha256="1" * 64, profile_sha256="3" * 64, argv=argv) != (
        bolt_key
    )
    flagged = [*argv[:-2], "-reorder-blocks=ext-tsp", *argv[-2:]]
    assert bolt_optimize_key(
        plan, binary_sha256="1" * 64, profile_sha256="2" * 64, argv=flagged
    ) != (bolt_key)
    env = dict(plan.build.environment)
    count = count_key(plan, binaries={"demo": "1" * 64}, workload=Run(("--help",)), container=env)
    assert count_key(
        plan, binaries={"demo": "2" * 64}, workload=Run(("--help",)), container=env
    ) != (count)
    assert count_key(plan, binaries={"demo": "1" * 64}, workload=Run(("-v",)), container=env) != (
        count
    )
    # The same binary under another variant's name (or another level's plan) counts the same.
    v3 = _plan(make_options(project), "x86-64-v3")
    assert count_key(v3, binaries={"demo": "1" * 64}, workload=Run(("--help",)), container=env) == (
        count
    )


# -- every other cached step: reuse and tamper -------------------------------------------
def _step_rig(
    options: Options, plan: BuildPlan, stack: ExitStack, tmp_path: Path, name: str, **kw: Any
) -> Rig:
    folder = tmp_path / name
    folder.mkdir()
    engine = FakeEngine(missing=kw.pop("missing", _binary), **kw)
    rig = make_rig(options, stack, folder, plan=plan, engine=engine)
    rig.pipeline.step_cache = StepCache(options.cache_dir / "steps")
    vendor = tmp_path / "vendor.tar"
    if not vendor.exists():
        vendor.write_bytes(b"vendored")
    rig.pipeline.state.vendor = vendor
    return rig


def _runs(rig: Rig, word: str) -> int:
    return sum(1 for argv in rig.box.argvs if word in argv)


def test_the_release_build_is_reused_and_shipped_from_the_cache(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    options = make_options(project)
    plan = _plan(options)
    first = _step_rig(options, plan, stack, tmp_path, "first")
    variants.build_release(first.pipeline, first.log)
    assert _runs(first, "build") == 1
    second = _step_rig(options, plan, stack, tmp_path, "second")
    variants.build_release(second.pipeline, second.log)
    assert _runs(second, "build") == 0
    assert second.log.cached and second.log.detail.startswith("built ")
    assert second.pipeline.state.shipped == f"{BIN_DIR}/release/demo"
    assert _put_binaries(second) == {"release/demo": _binary(f"{BIN_DIR}/release/demo")}
    reused = second.pipeline.state.reused[StepName.BUILD_RELEASE]
    assert reused.key == release_key(plan)
    # Another level's release build reads another target-cpu: it runs.
    v3 = _step_rig(options, _plan(options, "x86-64-v3"), stack, tmp_path, "v3")
    variants.build_release(v3.pipeline, v3.log)
    assert _runs(v3, "build") == 1


def test_a_tampered_release_binary_is_rebuilt_with_a_console_warning(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    options = make_options(project)
    plan = _plan(options)
    first = _step_rig(options, plan, stack, tmp_path, "first")
    variants.build_release(first.pipeline, first.log)
    (options.cache_dir / "steps" / release_key(plan) / "demo").write_bytes(b"evil")
    second = _step_rig(options, plan, stack, tmp_path, "second")
    variants.build_release(second.pipeline, second.log)
    assert _runs(second, "build") == 1 and not second.log.cached
    assert "ignoring the cached build-release outputs" in second.console
    assert "does not match its recorded sha256" in second.console
    assert StepName.BUILD_RELEASE not in second.pipeline.state.reused
    third = _step_rig(options, plan, stack, tmp_path, "third")
    variants.build_release(third.pipeline, third.log)
    assert _runs(third, "build") == 0  # stored afresh by the second


def test_the_optimized_build_is_reused_per_profile_with_its_coverage(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    options = make_options(project)
    plan = _plan(options)
    warning = "warning: demo: no profile data available for function _ZN4demo1f Hash = 1"

    def run(name: str, profile: str) -> Rig:
        rig = _step_rig(
            options, plan, stack, tmp_path, name, responder=answers(("cargo", 0, [warning]))
        )
        rig.pipeline.state.pgo = ProfileRecord(tmp_path / "p", profile, 1, True, {"functions": 50})
        variants.build_optimized(rig.pipeline, rig.log)
        return rig

    first = run("first", "a" * 64)
    assert _runs(first, "build") == 1
    second = run("second", "a" * 64)
    assert _runs(second, "build") == 0
    assert second.pipeline.state.shipped == f"{BIN_DIR}/optimized/demo"
    coverage = second.pipeline.state.coverage
    assert coverage is not None and coverage.missing_functions == 1  # from the cached log
    assert second.log.detail.endswith("1 functions without profile (2.0%)")
    assert StepName.BUILD_OPTIMIZED in second.pipeline.state.reused
    other = run("other-profile", "b" * 64)
    assert _runs(other, "build") == 1


def test_passing_tests_are_recorded_and_not_run_again(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    options = make_options(project)
    plan = _plan(options)
    profile = ProfileRecord(tmp_path / "p", "a" * 64, 1, True, {})
    first = _step_rig(options, plan, stack, tmp_path, "first")
    first.pipeline.state.pgo = profile
    cargo_test.test(first.pipeline, first.log)
    assert _runs(first, "test") == 1
    entry = read_record(
        options.cache_dir / "steps" / cargo_test_key(plan, "a" * 64) / ENTRY_FILE,
        StepEntryRecord,
    )
    assert list(entry.files) == [cargo_test.TEST_LOG]
    second = _step_rig(options, plan, stack, tmp_path, "second")
    second.pipeline.state.pgo = profile
    cargo_test.test(second.pipeline, second.log)
    assert _runs(second, "test") == 0 and second.log.cached
    # A failing run stores nothing.
    failing = _step_rig(
        options,
        _plan(options, "x86-64-v3"),
        stack,
        tmp_path,
        "failing",
        responder=answers(("test", 101, ["test result: FAILED"])),
    )
    failing.pipeline.state.pgo = profile
    with pytest.raises(StepFailedError):
        cargo_test.test(failing.pipeline, failing.log)
    assert not (
        options.cache_dir / "steps" / cargo_test_key(failing.pipeline.plan, "a" * 64)
    ).exists()


def test_a_cached_bolt_rewrite_is_put_back_and_still_validated(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    options = make_options(project, validate_command=("--version",))
    plan = _plan(options)
    unbolted = f"{BIN_DIR}/optimized/demo"
    listing = answers(
        ("sha256sum", 0, [f"{'1' * 64}  {unbolted}"]),
        ("-o /build/out/bin/bolt/demo", 0, [BOLT_INFO]),
        ("stat -c %s", 0, ["1000", "1100"]),
    )

    def output(path: str) -> bytes:  # both binaries print the same; the binaries differ
        return b"same output" if path.startswith("/build/out/validate") else _binary(path)

    def run(name: str) -> Rig:
        rig = _step_rig(options, plan, stack, tmp_path, name, responder=listing, missing=output)
        state = rig.pipeline.state
        state.unbolted, state.bolt_report = unbolted, {"policy": "fallback"}
        state.bolt_profile = ProfileRecord(tmp_path / "f", "2" * 64, 1, True, {})
        bolt.optimize(rig.pipeline, rig.log)
        return rig

    first = run("first")
    assert _runs(first, "-o") == 1
    second = run("second")
    assert _runs(second, "-o") == 0  # llvm-bolt did not run
    bolted = f"{BIN_DIR}/bolt/demo"
    assert second.pipeline.state.shipped == bolted
    assert _put_binaries(second) == {"bolt/demo": _binary(bolted)}
    # What follows the rewrite still runs on the restored binary: growth and validation.
    assert any(argv[:2] == ("stat", "-c") for argv in second.box.argvs)
    assert any(bolted in argv and "--version" in argv for argv in second.box.argvs)
    assert StepName.BOLT_OPTIMIZE in second.pipeline.state.reused and second.log.cached


def test_callgrind_counts_are_reused_per_binary_and_workload(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    options = make_options(project)
    plan = _plan(options)
    events = "events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw Bc Bcm Bi Bim"
    cycles = {"baseline": 1000, "release": 900, "pgo": 800, "pgo-bolt": 700}
    folders = {"baseline": "baseline", "release": "release", "pgo": "optimized", "pgo-bolt": "bolt"}

    def respond(argv: Sequence[str]) -> tuple[int, list[str]]:
        if argv[0] == "sha256sum":  # each variant's binaries: their own digest
            return 0, [f"{hashlib.sha256(p.encode()).hexdigest()}  {p}" for p in argv[1:]]
        joined = " ".join(argv)
        for variant, count in cycles.items():
            if f"--callgrind-out-file=/build/out/gate/{variant}-0/" in joined:
                return 0, [events, f"summary: {count} 0 0 0 0 0 0 0 0 100 0 7 0"]
        return 0, []

    def run(name: str) -> Rig:
        rig = _step_rig(options, plan, stack, tmp_path, name, responder=respond)
        state = rig.pipeline.state
        state.unbolted = f"{BIN_DIR}/optimized/demo"
        state.shipped = state.bolted = f"{BIN_DIR}/bolt/demo"
        gate.speed_gate(rig.pipeline, rig.log)
        return rig

    first = run("first")
    assert _runs(first, "--tool=callgrind") == 4
    second = run("second")
    assert _runs(second, "--tool=callgrind") == 0
    gate_info = second.pipeline.state.gate
    assert gate_info is not None and gate_info.shipped == "pgo-bolt"
    assert gate_info.variants["release"]["estimated_cycles"] == 900 + 10 * 0  # read back
    assert second.log.cached and StepName.SPEED_GATE in second.pipeline.state.reused
    assert {folders[v] for v in cycles} == {"baseline", "release", "optimized", "bolt"}
    # A tampered count is counted again, with a warning on the console.
    key = next(
        k.name for k in (options.cache_dir / "steps").iterdir() if (k / gate.COUNTS_FILE).is_file()
    )
    (options.cache_dir / "steps" / key / gate.COUNTS_FILE).write_text("summary: 1\n")
    third = run("third")
    assert _runs(third, "--tool=callgrind") == 1
    assert "ignoring the cached speed-gate outputs" in third.console
    assert not third.log.cached


def test_the_dry_run_says_for_each_cached_step_whether_it_runs(project: Path) -> None:
    config = (project / "orchestrator.toml").read_text()
    (project / "orchestrator.toml").write_text(
        config + '[flavors.cpu]\nlevels = ["x86-64-v2", "x86-64-v3"]\n'
    )
    options = make_options(project)
    first, second = dry_run(ReleaseView.from_options(options), targets(options, ["cpu"]), [])
    notes = {n.step: n for n in first.cached.steps}
    assert notes["build-baseline"].reused is False
    assert notes["build-release"].reused is False
    assert notes["pgo-train"].reason == "no stored PGO profile"
    assert notes["bolt-optimize"].reused is None and "as it runs" in notes["bolt-optimize"].reason
    again = {n.step: n for n in second.cached.steps}
    assert again["build-baseline"].reason == f"same inputs as {first.plan.artifact_dir}"
    assert again["build-release"].reused is False  # another target-cpu
    shown = second.cached.labelled()
    assert shown["baseline build"]
    assert not any(label.startswith("build-release") for label in shown)
    # A stored entry for the first level's release build: reused, and said so.
    entry = options.cache_dir / "steps" / release_key(first.plan) / ENTRY_FILE
    entry.parent.mkdir(parents=True)
    entry.write_text("{}")
    first, _ = dry_run(ReleaseView.from_options(options), targets(options, ["cpu"]), [])
    notes = {n.step: n for n in first.cached.steps}
    assert notes["build-release"].reused and notes["build-release"].reason == "in the step cache"
    assert first.cached.labelled()["build-release (in the step cache)"]
    assert first.entry().cached.steps == first.cached.steps  # in the --json report


def test_the_dry_run_counts_an_unusable_profile_record_as_absent_and_names_it(
    project: Path, tmp_path: Path
) -> None:
    options = make_options(project)

    def pgo_note() -> str:
        (planned,) = dry_run(ReleaseView.from_options(options), targets(options, ["cpu"])[:1], [])
        note = {n.step: n for n in planned.cached.steps}["pgo-train"]
        return f"{note.reused}: {note.reason}"

    (planned,) = dry_run(ReleaseView.from_options(options), targets(options, ["cpu"])[:1], [])
    assert planned.plan.pgo is not None
    stored = options.cache_dir / "profiles" / "pgo" / f"{planned.plan.pgo.profile_key}.profdata"
    fresh = tmp_path / "fresh"
    fresh.write_bytes(b"profile")
    store_profile(fresh, stored, {})
    assert pgo_note().startswith("True: stored PGO profile")
    stored.with_suffix(".json").write_text("not json")
    assert pgo_note() == (
        f"False: no stored PGO profile; {stored.with_suffix('.json')} cannot be used (not JSON)"
    )


def test_a_profile_in_the_step_cache_skips_the_pgo_steps_when_only_the_config_changed(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    """The profile store is keyed by the whole snapshot (the config in the crate too);
    the step cache's entry is not: a config-only change still skips all three steps."""
    options = make_options(project, bolt=False)
    show = ["Total functions: 40", "Maximum function count: 9", "Total count: 1234"]
    raw = ["/build/out/pgo/raw/demo_11.profraw", ""]

    def run(name: str, plan: BuildPlan) -> tuple[Rig, list[str]]:
        rig = _step_rig(
            options,
            plan,
            stack,
            tmp_path,
            name,
            responder=answers(("find", 0, raw), ("show", 0, show)),
            missing=lambda path: b"merged profile",
        )
        reporter = rig.pipeline.reporter
        for step, executor in (
            (StepName.PGO_INSTRUMENT, pgo.instrument),
            (StepName.PGO_TRAIN, pgo.train),
            (StepName.PGO_MERGE, pgo.merge),
        ):
            with reporter.step(step, step) as log:
                executor(rig.pipeline, log)
        return rig, [r.status for r in reporter.results]

    first, statuses = run("first", _plan(options))
    assert statuses == ["ok", "ok", "ok"] and _runs(first, "build") == 1
    # Another profile key (as a config edit in the crate gives), the same step key.
    plan = _plan(options)
    assert plan.pgo is not None
    other = replace(plan, pgo=replace(plan.pgo, profile_key="f" * 64))
    second, statuses = run("second", other)
    assert statuses == ["cached", "cached", "cached"]
    assert _runs(second, "build") == 0 and not any("find" in a for a in second.box.argvs)
    state = second.pipeline.state
    assert (
        state.pgo is not None and state.pgo.sha256 == hashlib.sha256(b"merged profile").hexdigest()
    )
    assert state.pgo.details["functions"] == 40
    # Put where the lock's profile store names it, and where the optimized build reads it.
    stored = options.cache_dir / "profiles" / "pgo" / f"{'f' * 64}.profdata"
    assert stored.read_bytes() == b"merged profile"
    assert set(state.reused) == {"pgo-instrument", "pgo-train", "pgo-merge"}


def test_a_stored_bolt_profile_from_other_workloads_is_not_used(project: Path) -> None:
    """BOLT profiles are stored per binary sha256 and mode; their record names what they
    were collected from, and a profile of other workloads is collected again."""
    options = make_options(project, pgo=False)
    plan = _plan(options)
    key = bolt_profile_inputs(plan, "instrument")
    assert bolt_profile_inputs(plan, "sample") != key
    other = _plan(replace(options, workloads=(Run(("--version",)),)))
    assert bolt_profile_inputs(other, "instrument") != key
    # What profiling does not read: the flags llvm-bolt rewrites with, the gate, bench.
    assert bolt_profile_inputs(_plan(replace(options, bolt_flags=("-icf=1",))), "instrument") == key
    assert bolt_profile_inputs(_plan(replace(options, gate_policy="off")), "instrument") == key


def test_the_bolt_profile_step_profiles_again_for_other_workloads(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    options = make_options(project, pgo=False, bolt_mode="instrument")
    source = tmp_path / "fresh.fdata"
    sha = "5e" * 32
    cache = options.cache_dir / "profiles" / "bolt" / f"{sha}-instrument.fdata"
    listing = answers(("sha256sum", 0, [f"{sha}  {BIN_DIR}/optimized/demo"]))

    def profile(plan: BuildPlan, name: str) -> Rig:
        rig = _step_rig(options, plan, stack, tmp_path, name, responder=listing)
        rig.pipeline.state.shipped = f"{BIN_DIR}/optimized/demo"
        bolt.profile(rig.pipeline, rig.log)
        return rig

    plan = _plan(options)
    source.write_bytes(b"1 main 0 1 main 4 0 9\n")
    store_profile(
        source, cache, {"mode": "instrument", "inputs": bolt_profile_inputs(plan, "instrument")}
    )
    same = profile(plan, "same")
    assert same.log.cached and _runs(same, "-instrument") == 0
    other = _plan(replace(options, workloads=(Run(("--version",)),)))
    again = profile(other, "other")
    assert not again.log.cached and _runs(again, "-instrument") == 1
    assert "collected from other workloads" in again.text

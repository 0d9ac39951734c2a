"""The cargo builds through the fake Engine: the baseline's source check, the release and
optimized builds (with PGO coverage), `cargo test`, and the variants kept for bench."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.errors import ProfileError, SourceError, StepFailedError
from orchestrator.execute.optimize import variants
from orchestrator.execute.steps.pipeline import BIN_DIR
from orchestrator.execute.steps.profiles import ProfileRecord
from orchestrator.execute.verdict import cargo_test
from orchestrator.host.source import snapshot
from orchestrator.model.documents.cache_records import VariantsRecord
from orchestrator.model.documents.records import read_record
from orchestrator.model.hashing import sha256_file
from orchestrator.model.layout import PATHS

from .conftest import plan_for
from .execute_rig import answers, make_options, make_rig
from .fakes import FakeEngine


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


# -- the cargo builds --------------------------------------------------------------------
def test_the_baseline_refuses_sources_changed_since_planning(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig = make_rig(make_options(project), stack, tmp_path)  # planned from a stand-in source
    rig.pipeline.state.vendor = None
    with pytest.raises(StepFailedError, match="after fetch-crates"):
        variants.build_baseline(rig.pipeline, rig.log)
    rig.pipeline.state.vendor = tmp_path / "vendor.tar"
    with pytest.raises(SourceError, match="sources changed"):
        variants.build_baseline(rig.pipeline, rig.log)
    assert rig.engine.containers[0].puts == []


def test_the_baseline_copies_source_and_crates_in_and_builds(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    options = make_options(project)
    plan = replace(
        plan_for(options),
        source=snapshot(options.crate_dir, options.source_date_epoch, options.source_exclude),
    )
    rig = make_rig(options, stack, tmp_path, plan=plan)
    vendor = tmp_path / "vendor.tar"
    vendor.write_bytes(b"vendored")
    rig.pipeline.state.vendor = vendor
    variants.build_baseline(rig.pipeline, rig.log)
    assert rig.box.puts == [(PATHS.root, b"vendored")]
    # The sources go in once, through a container of their own that alone mounts them
    # writable; the build container (and every later one) sees them read-only.
    box, loader = rig.engine.containers
    source_volume = f"orchestrator-src-{rig.engine.session}"
    assert loader.spec.purpose == "sources" and loader.removed
    assert loader.spec.volumes == {source_volume: PATHS.src}
    assert loader.puts == [(PATHS.root, plan.source.archive)] and loader.execs == []
    assert box.spec.read_only_volumes == {source_volume: PATHS.src}
    assert source_volume not in box.spec.volumes
    baseline = plan.variants["baseline"]
    assert rig.box.argvs == [
        baseline.build.argv,
        ("mkdir", "-p", f"{BIN_DIR}/baseline"),
        ("cp", baseline.binary, f"{BIN_DIR}/baseline/"),
    ]
    assert rig.box.execs[0].environment == dict(baseline.build.environment)


# What cargo prints when a build script writes into the read-only /build/src.
EROFS_OUTPUT = [
    "   Compiling writes-source v0.1.0 (/build/src)",
    "error: failed to run custom build command for `writes-source v0.1.0 (/build/src)`",
    "--- stderr",
    "thread 'main' panicked at build.rs:14:9:",
    "writing src/generated.rs: Os { code: 30, kind: ReadOnlyFilesystem, "
    'message: "Read-only file system" }',
]


@pytest.mark.parametrize(
    ("step", "who"),
    [
        ("build-release", "the build script of `writes-source v0.1.0 (/build/src)`"),
        ("test", "a build script or test"),  # no build script named: a test wrote
    ],
)
def test_a_write_into_the_read_only_sources_is_a_source_error_that_says_so(
    project: Path, stack: ExitStack, tmp_path: Path, step: str, who: str
) -> None:
    lines = EROFS_OUTPUT if step == "build-release" else EROFS_OUTPUT[-1:]
    engine = FakeEngine(responder=answers(("cargo", 101, lines)))
    rig = make_rig(make_options(project), stack, tmp_path, engine=engine)
    run = variants.build_release if step == "build-release" else cargo_test.test
    with pytest.raises(SourceError) as raised:
        run(rig.pipeline, rig.log)
    message = str(raised.value)
    assert message.startswith(f"step {step}: {who} tried to write into the crate's sources")
    assert "read-only in the build container" in message
    assert "ReadOnlyFilesystem" in message  # cargo's own line, as evidence
    assert raised.value.hint is not None and "OUT_DIR" in raised.value.hint
    assert raised.value.exit_code == 11


def test_another_cargo_failure_stays_a_step_failure(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    engine = FakeEngine(responder=answers(("cargo", 101, ["error[E0425]: cannot find value"])))
    rig = make_rig(make_options(project), stack, tmp_path, engine=engine)
    with pytest.raises(StepFailedError, match="exited with 101") as raised:
        variants.build_release(rig.pipeline, rig.log)
    assert raised.value.step == "build-release"
    assert "--skip" not in raised.value.hint  # only the test step's hint names it


def test_a_failed_test_hints_at_the_flavors_test_args_that_skip_it(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    failed = [
        "test model::tests::sampler_is_greedy ... FAILED",
        "",
        "failures:",
        "    model::tests::sampler_is_greedy",
        "",
        "test result: FAILED. 3 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out",
    ]
    options = make_options(project, test_args=("--workspace",))
    rig = make_rig(
        options, stack, tmp_path, engine=FakeEngine(responder=answers(("cargo", 101, failed)))
    )
    flavor = rig.pipeline.plan.flavor
    with pytest.raises(StepFailedError, match="step test: `cargo test` exited with 101") as raised:
        cargo_test.test(rig.pipeline, rig.log)
    error = raised.value
    assert (error.step, error.failed_tests) == ("test", ("model::tests::sampler_is_greedy",))
    assert f"set [flavors.{flavor}.test] args in orchestrator.toml" in error.hint
    table = tomllib.loads(error.hint.split("\n", 1)[1])
    assert table["flavors"][flavor]["test"]["args"] == [
        "--workspace",  # the args it ran with, kept
        "--",
        "--skip",
        "model::tests::sampler_is_greedy",
    ]


def test_a_test_build_that_fails_to_compile_still_names_the_setting(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    engine = FakeEngine(responder=answers(("cargo", 101, ["error[E0425]: cannot find value"])))
    rig = make_rig(make_options(project), stack, tmp_path, engine=engine)
    with pytest.raises(StepFailedError) as raised:
        cargo_test.test(rig.pipeline, rig.log)
    assert raised.value.failed_tests == ()
    flavor = rig.pipeline.plan.flavor
    assert f'[flavors.{flavor}.test] args = ["--", "--skip", "<test name>"]' in raised.value.hint


def test_release_and_test_steps(project: Path, stack: ExitStack, tmp_path: Path) -> None:
    rig = make_rig(make_options(project), stack, tmp_path)
    variants.build_release(rig.pipeline, rig.log)
    cargo_test.test(rig.pipeline, rig.log)
    plan = rig.pipeline.plan
    assert rig.box.argvs == [
        plan.variants["release"].build.argv,
        ("mkdir", "-p", f"{BIN_DIR}/release"),
        ("cp", plan.variants["release"].binary, f"{BIN_DIR}/release/"),
        plan.test.argv,
    ]
    shipped = f"{BIN_DIR}/release/demo"
    assert rig.pipeline.state.shipped == rig.pipeline.state.unbolted == shipped
    assert rig.pipeline.state.others == {}


def _missing(n: int) -> list[str]:
    return [
        f"warning: demo: no profile data available for function _ZN4demo{i}f Hash = {i}"
        for i in range(n)
    ]


@pytest.mark.parametrize(("profiled", "missing", "fails"), [(100, 3, False), (10, 6, True)])
def test_the_optimized_build_measures_profile_coverage(
    project: Path, stack: ExitStack, tmp_path: Path, profiled: int, missing: int, fails: bool
) -> None:
    rig = make_rig(make_options(project), stack, tmp_path)
    rig.engine.responder = answers(("cargo", 0, [*_missing(missing), *_missing(missing)]))
    record = ProfileRecord(tmp_path / "p", "00" * 32, 1, True, {"functions": profiled})
    rig.pipeline.state.pgo = record
    if fails:
        with pytest.raises(ProfileError, match="covers too little"):
            variants.build_optimized(rig.pipeline, rig.log)
    else:
        variants.build_optimized(rig.pipeline, rig.log)
        assert rig.log.detail == "3 functions without profile (3.0%)"
    coverage = rig.pipeline.state.coverage
    assert coverage is not None
    assert (coverage.profiled_functions, coverage.missing_functions) == (profiled, missing)
    assert rig.pipeline.state.shipped == f"{BIN_DIR}/optimized/demo"


def test_the_optimized_build_without_pgo_measures_nothing(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig = make_rig(make_options(project, pgo=False), stack, tmp_path)
    rig.engine.responder = answers(("cargo", 0, _missing(50)))
    variants.build_optimized(rig.pipeline, rig.log)
    assert rig.pipeline.state.coverage is None
    assert rig.pipeline.state.unbolted == f"{BIN_DIR}/optimized/demo"


def test_keep_variants_stores_every_variant_under_the_shipped_binarys_hash(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    engine = FakeEngine(missing=lambda path: f"binary {path}".encode())
    rig = make_rig(make_options(project), stack, tmp_path, engine=engine)
    state = rig.pipeline.state
    state.unbolted = f"{BIN_DIR}/optimized"
    state.shipped = state.bolted = f"{BIN_DIR}/optimized.bolt"
    artifact = tmp_path / "artifact"
    artifact.mkdir()
    (artifact / rig.pipeline.plan.binary).write_bytes(b"shipped")
    store = rig.pipeline.options.cache_dir / "variants" / sha256_file(artifact / "demo")
    store.mkdir(parents=True)
    (store / "stale").write_text("from an earlier run")
    described = variants.keep_variants(rig.pipeline, artifact, rig.log)
    assert list(described) == ["baseline", "release", "pgo", "pgo-bolt"]
    assert sorted(p.name for p in store.iterdir()) == sorted([*described, "variants.json"])
    assert (store / "pgo-bolt").read_bytes() == f"binary {BIN_DIR}/optimized.bolt".encode()
    record = read_record(store / "variants.json", VariantsRecord)
    assert record.image == rig.pipeline.plan.image.reference
    assert record.variants == described
    assert described["pgo"].sha256 == sha256_file(store / "pgo")
    assert not store.with_name(store.name + ".partial").exists()


def test_a_build_script_that_goes_on_without_its_write_is_warned_about_on_the_console(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    warning = (
        "warning: writes-source@0.1.0: could not write /build/src/src/generated.rs: "
        "Read-only file system (os error 30)"
    )
    engine = FakeEngine(responder=answers(("cargo", 0, [warning])))
    rig = make_rig(make_options(project), stack, tmp_path, engine=engine)
    variants.build_release(rig.pipeline, rig.log)
    assert "could not write into the read-only sources (/build/src) and went on" in rig.console
    assert "src/generated.rs: Read-only file system" in rig.console

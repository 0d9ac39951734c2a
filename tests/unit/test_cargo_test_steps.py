"""`cargo test` in two cached steps: test-build compiles the tests and keeps their target
folder in the step cache; test runs them. A retry with a skip list puts the compiled folder
back and runs the tests without `cargo test --no-run` again."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config.resolve.options import Options
from orchestrator.errors import StepFailedError
from orchestrator.execute.verdict import cargo_test
from orchestrator.host.source import snapshot
from orchestrator.host.step_cache import ENTRY_FILE, StepCache
from orchestrator.model.documents.cache_records import StepEntryRecord
from orchestrator.model.documents.records import read_record
from orchestrator.model.documents.reports import BuildPlanReport
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.plan.serialize import plan_summary
from orchestrator.plan.step_keys import cargo_test_build_key, cargo_test_key, config_member
from orchestrator.plan.steps import StepName
from orchestrator.release.step_plan import StepPlanner

from .conftest import plan_for
from .execute_rig import Rig, answers, make_options, make_rig
from .fakes import FakeEngine

FAILED = [
    "test tests::answer_is_42 ... FAILED",
    "failures:",
    "    tests::answer_is_42",
    "test result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out",
]
PACKED = b"the compiled test folder, gzipped"
SKIP = ("--", "--skip", "tests::answer_is_42")


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


def _plan(options: Options) -> BuildPlan:
    plan = plan_for(replace(options, target_cpu="x86-64-v2"), "cpu")
    source = snapshot(options.crate_dir, options.source_date_epoch, options.source_exclude)
    return replace(plan, source=source)


def _rig(options: Options, stack: ExitStack, tmp_path: Path, name: str, **kw: Any) -> Rig:
    folder = tmp_path / name
    folder.mkdir()
    engine = FakeEngine(missing=lambda _path: PACKED, **kw)
    rig = make_rig(options, stack, folder, plan=_plan(options), engine=engine)
    rig.pipeline.step_cache = StepCache(options.cache_dir / "steps")
    vendor = tmp_path / "vendor.tar"
    if not vendor.exists():
        vendor.write_bytes(b"vendored")
    rig.pipeline.state.vendor = vendor
    return rig


def _cargo_tests(rig: Rig) -> list[tuple[str, ...]]:
    """The `cargo test` command lines the rig's build container ran."""
    return [argv for argv in rig.box.argvs if argv[1:2] == ("test",)]


def _both(rig: Rig) -> None:
    cargo_test.test_build(rig.pipeline, rig.log)
    cargo_test.test(rig.pipeline, rig.log)


def test_a_failed_run_is_retried_with_a_skip_list_without_compiling_again(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    options = make_options(project)
    first = _rig(
        options,
        stack,
        tmp_path,
        "first",
        responder=answers(("--no-run", 0, []), ("test --release", 101, FAILED)),
    )
    with pytest.raises(StepFailedError) as failed:
        _both(first)
    assert failed.value.step == StepName.TEST
    assert failed.value.hint is not None and '"--skip", "tests::answer_is_42"' in failed.value.hint
    compile_run, test_run = _cargo_tests(first)
    assert compile_run[-1] == "--no-run" and test_run[-1] != "--no-run"
    target = cargo_test.test_target_dir(first.pipeline.plan)
    parent, name = target.rsplit("/", 1)
    assert (
        "tar",
        "--use-compress-program",
        "gzip -1",
        "-C",
        parent,
        "-cf",
        cargo_test.PACKED,
        name,
    ) in first.box.argvs
    # The compile was kept before the run failed; the run was not.
    plan = first.pipeline.plan
    steps = options.cache_dir / "steps"
    entry = read_record(steps / cargo_test_build_key(plan, None) / ENTRY_FILE, StepEntryRecord)
    assert entry.step == "test-build" and cargo_test.TEST_TREE in entry.files
    assert not (steps / cargo_test_key(plan, None)).exists()

    retry = _rig(replace(options, test_args=SKIP), stack, tmp_path, "retry")
    _both(retry)
    (run,) = _cargo_tests(retry)  # no `cargo test --no-run` again
    assert run[-3:] == SKIP
    assert StepName.TEST_BUILD in retry.pipeline.state.reused
    assert StepName.TEST not in retry.pipeline.state.reused
    # The compiled folder went back in, in place of the folder there, before the run.
    with tarfile.open(fileobj=io.BytesIO(retry.box.archives["/build/out"])) as tar:
        (member,) = tar.getmembers()
        handle = tar.extractfile(member)
        assert member.name == cargo_test.TEST_TREE and handle is not None
        assert handle.read() == PACKED
    argvs = retry.box.argvs
    order = [
        argvs.index(("rm", "-rf", target)),
        argvs.index(("tar", "-C", parent, "-xzf", cargo_test.PACKED)),
        argvs.index(run),
    ]
    assert order == sorted(order)
    assert "compiled" not in retry.console  # cargo compiled nothing again

    # The same skip list again: the run is cached too, and nothing is put back.
    again = _rig(replace(options, test_args=SKIP), stack, tmp_path, "again")
    _both(again)
    assert _cargo_tests(again) == [] and "/build/out" not in again.box.archives
    assert {StepName.TEST_BUILD, StepName.TEST} <= set(again.pipeline.state.reused)


def test_a_run_that_compiles_after_the_put_back_says_so(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    options = make_options(project)
    _both(_rig(options, stack, tmp_path, "first"))
    compiling = ["   Compiling failing-tests v0.0.1 (/build/src)", "test result: ok."]
    rig = _rig(
        replace(options, test_args=SKIP),
        stack,
        tmp_path,
        "retry",
        responder=answers(("cargo", 0, compiling)),
    )
    _both(rig)
    assert "cargo test compiled 1 crates again (failing-tests v0.0.1)" in rig.console


def test_without_a_step_cache_the_compile_is_not_packed(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig = _rig(make_options(project), stack, tmp_path, "reproduce")
    rig.pipeline.step_cache = None  # reproduce: the run follows in the same container
    _both(rig)
    assert [argv[-1] == "--no-run" for argv in _cargo_tests(rig)] == [True, False]
    assert not any(argv[0] == "tar" for argv in rig.box.argvs)


def test_a_dry_run_notes_both_steps_by_their_own_keys(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    options = make_options(project, pgo=False)  # the tests read no profile
    _both(_rig(options, stack, tmp_path, "first"))
    skipping = _plan(replace(options, test_args=SKIP))
    assert [s.name for s in skipping.steps if s.name.startswith("test")] == ["test-build", "test"]
    notes = {
        n.step: n
        for n in StepPlanner(
            options.cache_dir, {}, config_member(options.config_path, options.crate_dir)
        ).notes(skipping)
    }
    assert notes["test-build"].reused is True and notes["test-build"].reason == "in the step cache"
    assert notes["test"].reused is False


def test_build_dry_run_shows_both_commands(project: Path) -> None:
    plan = _plan(replace(make_options(project), test_args=SKIP))
    report = BuildPlanReport.model_validate(plan_summary(plan))
    assert report.test[-3:] == list(SKIP)
    assert report.test_build is not None and report.test_build[-1] == "--no-run"
    assert "--skip" not in report.test_build
    assert report.steps[report.steps.index("test-build") + 1] == "test"

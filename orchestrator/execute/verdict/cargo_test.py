"""`cargo test` as two steps, each cached by its own inputs (plan/step_keys.py).

test-build compiles the tests (`cargo test --no-run`, the test args before "--") and keeps
the test target folder in the step cache, packed as cargo left it; test runs them (`cargo
test` with every test arg). The run's key holds the compile's key and its own command
line, so a retry with another skip list (`[flavors.<name>.test] args = ["--", "--skip",
...]`) finds the compile cached, puts its folder back and runs the tests without compiling
them again: cargo sees every output newer than the sources (their snapshot's mtime is
SOURCE_DATE_EPOCH) and compiles nothing. A cached run puts nothing back.
"""

from __future__ import annotations

import re

from orchestrator.errors import StepFailedError
from orchestrator.execute.steps.commands import cargo, run
from orchestrator.execute.steps.pipeline import Pipeline
from orchestrator.execute.steps.step_reuse import (
    build_inputs,
    config_of,
    look_up,
    mark_reused,
    store,
)
from orchestrator.host.step_cache import StepEntry, file_tar
from orchestrator.model.layout import PATHS
from orchestrator.model.verdict.failed_tests import skip_hint
from orchestrator.model.verdict.pgo_report import summarised_output
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.plan.step_keys import cargo_test_build_key, cargo_test_key
from orchestrator.plan.steps import StepName
from orchestrator.progress.reporter import StepLog

TEST_TREE = "test-target.tar.gz"  # the test target folder as `cargo test --no-run` left it
TEST_LOG = "cargo-test.log"  # what the passing run printed: the record that it passed
PACKED = f"{PATHS.out}/{TEST_TREE}"
# cargo's line for each crate it compiles ("   Compiling demo v0.1.0 (/build/src)")
_COMPILING = re.compile(r"^\s*Compiling (\S+ v\S+)")


def test_target_dir(plan: BuildPlan) -> str:
    """The target folder the tests compile into (--target-dir of the test commands)."""
    argv = plan.test_build.argv
    return argv[argv.index("--target-dir") + 1]


def compiled(output: str) -> list[str]:
    """The crates cargo's output says it compiled ("name vX.Y.Z"), in its order."""
    return [m.group(1) for line in output.splitlines() if (m := _COMPILING.match(line))]


def _profile(pipeline: Pipeline) -> str | None:
    pgo = pipeline.state.pgo
    return pgo.sha256 if pgo is not None else None


def test_build(pipeline: Pipeline, log: StepLog) -> None:
    """Compile the tests, or find them compiled in the step cache (put back by the run,
    only if it runs)."""
    plan, state, step = pipeline.plan, pipeline.state, StepName.TEST_BUILD
    key = cargo_test_build_key(plan, _profile(pipeline), config_of(pipeline))
    inputs = build_inputs(pipeline)
    entry = look_up(pipeline, log, step, key, inputs)
    if entry is not None:
        state.test_tree = entry
        mark_reused(pipeline, log, step, entry)
        return
    cargo(pipeline.box, plan.test_build, log, step)
    if pipeline.step_cache is None:  # reproduce: the run follows in this container
        return
    target = test_target_dir(plan)
    parent, name = target.rsplit("/", 1)
    # gzip -1: a large test folder packs in seconds; its bytes compress several times
    packing = ["tar", "--use-compress-program", "gzip -1", "-C", parent, "-cf", PACKED, name]
    run(pipeline.box, packing, log, step)
    store(pipeline, log, step, key, container_files={TEST_TREE: PACKED}, inputs=inputs)
    run(pipeline.box, ["rm", "-f", PACKED], log, step)


def _put_back(pipeline: Pipeline, log: StepLog, entry: StepEntry) -> None:
    """The compiled test folder from the step cache, in place of whatever is there."""
    step, box = StepName.TEST, pipeline.box
    target = test_target_dir(pipeline.plan)
    parent = target.rsplit("/", 1)[0]
    log.line(f"+ docker cp <step cache {entry.record.key[:12]} {TEST_TREE}> {PACKED}")
    outer = file_tar(TEST_TREE, entry.file(TEST_TREE), pipeline.scratch / f"{TEST_TREE}.tar")
    with outer.open("rb") as handle:
        box.put_archive(PATHS.out, handle)
    outer.unlink()
    # The shipped binaries were copied out of it already: the folder becomes exactly what
    # the compile left, so cargo's fingerprints and the files agree.
    run(box, ["rm", "-rf", target], log, step)
    run(box, ["mkdir", "-p", parent], log, step)
    run(box, ["tar", "-C", parent, "-xzf", PACKED], log, step)
    run(box, ["rm", "-f", PACKED], log, step)


def test(pipeline: Pipeline, log: StepLog) -> None:
    """Run the tests; a passing run is recorded in the step cache by its log."""
    plan, state, step = pipeline.plan, pipeline.state, StepName.TEST
    key = cargo_test_key(plan, _profile(pipeline), config_of(pipeline))
    inputs = build_inputs(pipeline)
    entry = look_up(pipeline, log, step, key, inputs)
    if entry is not None:
        mark_reused(pipeline, log, step, entry)
        return
    if state.test_tree is not None:
        _put_back(pipeline, log, state.test_tree)
    try:
        output = cargo(pipeline.box, plan.test, log, step)
    except StepFailedError as error:  # the hint names the setting that skips a test
        args = pipeline.options.for_flavor(plan.flavor).test_args
        error.hint = skip_hint(plan.flavor, args, error.failed_tests)
        raise
    again = compiled(output)
    if state.test_tree is not None and again:  # slower, not wrong: say it, once
        log.warn(
            f"cargo test compiled {len(again)} crates again ({', '.join(again[:3])}) "
            "although test-build's compiled tests were put back"
        )
    store(
        pipeline,
        log,
        step,
        key,
        container_files={},
        texts={TEST_LOG: summarised_output(output)},
        inputs=inputs,
    )

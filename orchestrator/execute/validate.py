"""The validation gate: the shipped binary's outputs equal the baseline's (`validate`)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.errors import ValidationError
from orchestrator.execute.pipeline import BIN_DIR, Pipeline, fetch_file, run
from orchestrator.model.layout import PATHS
from orchestrator.model.outputs import Captured, compare_captured, render_diff
from orchestrator.plan.steps import StepName
from orchestrator.progress import StepLog
from orchestrator.runtime.engine import Container

VALIDATE_DIR = f"{PATHS.out}/validate"
# Runs the command with stdout and stderr in files of their own: their bytes are compared
# as written (not decoded, not interleaved by the pipe), each on its own.
_CAPTURE = 'o=$1; e=$2; shift 2; exec "$@" > "$o" 2> "$e"'


def capture(
    pipeline: Pipeline,
    box: Container,
    binary: str,
    name: str,
    log: StepLog,
    *,
    step: str,
    runner: tuple[str, ...],
    out_dir: str = VALIDATE_DIR,
) -> Captured:
    """Run validate.command with `binary` in `box` at the crate's root; its stdout and stderr
    as written, fetched to the host."""
    plan = pipeline.plan
    stdout, stderr = f"{out_dir}/{name}.stdout", f"{out_dir}/{name}.stderr"
    run(box, ["mkdir", "-p", out_dir], log, step)
    argv = ["/bin/sh", "-c", _CAPTURE, "sh", stdout, stderr]
    argv += [*runner, binary, *plan.validate_command]
    run(box, argv, log, step, environment=plan.run.environment, workdir=plan.run.workdir)
    folder = pipeline.scratch / f"{step}-{name}"
    captured = Captured(
        fetch_file(box, stdout, folder).read_bytes(), fetch_file(box, stderr, folder).read_bytes()
    )
    for line in captured.text().splitlines()[:40]:
        log.line(f"{name}> {line}")
    return captured


def _capture(pipeline: Pipeline, binary: str, name: str, log: StepLog) -> Captured:
    return capture(
        pipeline,
        pipeline.box,
        binary,
        name,
        log,
        step=StepName.VALIDATE,
        runner=pipeline.plan.runner,
    )


def validate_binary(
    pipeline: Pipeline, binary: str, log: StepLog, *, what: str
) -> dict[str, object]:
    command = pipeline.plan.validate_command
    if not command:
        log.line("no validate.command configured: outputs not compared")
        return {"command": [], "compared": False}
    tolerance = pipeline.plan.validate_tolerance
    expected = _capture(pipeline, f"{BIN_DIR}/baseline", "baseline", log)
    pipeline.state.expected = expected  # what the distros step compares with, too
    got = _capture(pipeline, binary, Path(binary).name, log)
    differences = compare_captured(expected, got, tolerance)
    if differences:
        diff = render_diff(expected, got, expected_name="baseline", got_name=what)
        raise ValidationError(
            f"{what} printed something else than the baseline for "
            f"`{' '.join(command)}` ({differences}):\n{diff}"
        )
    return {
        "command": list(command),
        "compared": True,
        "tolerance": tolerance,
        "identical": expected == got,
        "output_lines": len(expected.stdout.splitlines()),
        "stdout_bytes": len(expected.stdout),
        "stderr_bytes": len(expected.stderr),
    }


def validate(pipeline: Pipeline, log: StepLog) -> None:
    validation = validate_binary(pipeline, pipeline.state.shipped, log, what="the optimized binary")
    pipeline.state.validation = validation
    log.detail = (
        "outputs identical"
        if validation.get("identical")
        else ("within tolerance" if validation["compared"] else "nothing to compare")
    )

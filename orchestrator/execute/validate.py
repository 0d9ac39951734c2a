"""The checks on the shipped binary: outputs equal the baseline's (`validate`), and what
it needs from the machine it runs on (`portability`)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.errors import StepFailedError, ValidationError
from orchestrator.execute.pipeline import BIN_DIR, Pipeline, fetch_file, run
from orchestrator.model.layout import PATHS
from orchestrator.model.outputs import Captured, compare_captured, render_diff
from orchestrator.model.portability import parse as parse_portability
from orchestrator.plan.steps import StepName
from orchestrator.progress import StepLog

VALIDATE_DIR = f"{PATHS.out}/validate"
# Runs the command with stdout and stderr in files of their own: their bytes are compared
# as written (not decoded, not interleaved by the pipe), each on its own.
_CAPTURE = 'o=$1; e=$2; shift 2; exec "$@" > "$o" 2> "$e"'


def _capture(pipeline: Pipeline, binary: str, name: str, log: StepLog) -> Captured:
    plan, box, step = pipeline.plan, pipeline.box, StepName.VALIDATE
    stdout, stderr = f"{VALIDATE_DIR}/{name}.stdout", f"{VALIDATE_DIR}/{name}.stderr"
    run(box, ["mkdir", "-p", VALIDATE_DIR], log, step)
    argv = ["/bin/sh", "-c", _CAPTURE, "sh", stdout, stderr]
    argv += [*plan.runner, binary, *plan.validate_command]
    run(box, argv, log, step, environment=plan.run.environment, workdir=plan.run.workdir)
    folder = pipeline.scratch / f"validate-{name}"
    captured = Captured(
        fetch_file(box, stdout, folder).read_bytes(), fetch_file(box, stderr, folder).read_bytes()
    )
    for line in captured.text().splitlines()[:40]:
        log.line(f"{name}> {line}")
    return captured


def validate_binary(
    pipeline: Pipeline, binary: str, log: StepLog, *, what: str
) -> dict[str, object]:
    command = pipeline.plan.validate_command
    if not command:
        log.line("no validate.command configured: outputs not compared")
        return {"command": [], "compared": False}
    tolerance = pipeline.plan.validate_tolerance
    expected = _capture(pipeline, f"{BIN_DIR}/baseline", "baseline", log)
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


def portability(pipeline: Pipeline, log: StepLog) -> None:
    plan, box, binary = pipeline.plan, pipeline.box, pipeline.state.shipped
    if not binary:
        raise StepFailedError("internal: portability runs before any binary was built")
    codegen = [f for f in plan.rustflags if f.startswith(("-Ctarget-cpu", "-Ctarget-feature"))]
    step = StepName.PORTABILITY
    report = parse_portability(
        target=plan.rust_target,
        target_cpu=plan.target_cpu,
        version_info=run(
            box, ["readelf", "--version-info", "--wide", binary], log, step, keep_output=True
        ),
        dynamic=run(box, ["readelf", "--dynamic", "--wide", binary], log, step, keep_output=True),
        rustc_cfg=run(
            box,
            [
                plan.toolchain.tool("rustc"),
                "--print",
                "cfg",
                "--target",
                plan.rust_target,
                *codegen,
            ],
            log,
            step,
            keep_output=True,
        ),
    )
    pipeline.state.portability = report
    log.detail = f"glibc {report.glibc_max}, needs {', '.join(report.needed)}"

"""The checks on the shipped binary: outputs equal the baseline's (`validate`), and what
it needs from the machine it runs on (`portability`)."""

from __future__ import annotations

from orchestrator.errors import StepFailedError, ValidationError
from orchestrator.execute.pipeline import BIN_DIR, Pipeline, run
from orchestrator.model.outputs import compare_outputs, render_diff
from orchestrator.model.portability import parse as parse_portability
from orchestrator.plan.steps import StepName
from orchestrator.progress import StepLog


def validate_binary(
    pipeline: Pipeline, binary: str, log: StepLog, *, what: str
) -> dict[str, object]:
    command = pipeline.plan.validate_command
    if not command:
        log.line("no validate.command configured: outputs not compared")
        return {"command": [], "compared": False}
    baseline = f"{BIN_DIR}/baseline"
    runner = pipeline.plan.runner
    step = StepName.VALIDATE
    expected = run(pipeline.box, [*runner, baseline, *command], log, step, keep_output=True)
    got = run(pipeline.box, [*runner, binary, *command], log, step, keep_output=True)
    differences = compare_outputs(expected, got, pipeline.plan.validate_tolerance)
    if differences:
        diff = render_diff(expected, got, expected_name="baseline", got_name=what)
        raise ValidationError(
            f"{what} printed something else than the baseline for "
            f"`{' '.join(command)}` ({len(differences)} line(s) differ):\n{diff}"
        )
    return {
        "command": list(command),
        "compared": True,
        "tolerance": pipeline.plan.validate_tolerance,
        "identical": expected == got,
        "output_lines": len(expected.splitlines()),
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

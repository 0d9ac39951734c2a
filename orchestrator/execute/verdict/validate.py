"""The validation gate: the shipped binaries' outputs equal the baseline's (`validate`)."""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.config.declarations.kinds import Run
from orchestrator.errors import ValidationError
from orchestrator.execute.steps.commands import fetch_file, run
from orchestrator.execute.steps.pipeline import Pipeline, variant_binary
from orchestrator.model.layout import PATHS
from orchestrator.model.verdict.outputs import Captured, compare_captured, render_diff
from orchestrator.plan.steps import StepName
from orchestrator.progress.reporter import StepLog
from orchestrator.runtime.engine import Container

VALIDATE_DIR = f"{PATHS.out}/validate"
# Runs the command with stdout and stderr in files of their own: their bytes are compared
# as written (not decoded, not interleaved by the pipe), each on its own.
_CAPTURE = 'o=$1; e=$2; shift 2; exec "$@" > "$o" 2> "$e"'


def capture(
    pipeline: Pipeline,
    box: Container,
    binary: str,
    args: tuple[str, ...],
    log: StepLog,
    *,
    name: str,
    step: str,
    runner: tuple[str, ...],
    out_dir: str = VALIDATE_DIR,
) -> Captured:
    """Run `binary` with `args` in `box` at the crate's root; its stdout and stderr as
    written, fetched to the host."""
    plan = pipeline.plan
    stdout, stderr = f"{out_dir}/{name}.stdout", f"{out_dir}/{name}.stderr"
    run(box, ["mkdir", "-p", out_dir], log, step)
    argv = ["/bin/sh", "-c", _CAPTURE, "sh", stdout, stderr, *runner, binary, *args]
    run(box, argv, log, step, environment=plan.run.environment, workdir=plan.run.workdir)
    folder = pipeline.scratch / f"{step}-{name}"
    captured = Captured(
        fetch_file(box, stdout, folder).read_bytes(), fetch_file(box, stderr, folder).read_bytes()
    )
    for line in captured.text().splitlines()[:40]:
        log.line(f"{name}> {line}")
    return captured


def validate_binaries(
    pipeline: Pipeline, binaries: Mapping[str, str], log: StepLog, *, what: str, label: str
) -> dict[str, object]:
    """Every validation run of the binaries given (name -> path) prints what the baseline's
    binary of that name prints; `label` names the captured files. The baseline's outputs
    are kept for the distros step."""
    plan = pipeline.plan
    runs = [run for run in plan.validation_runs if run.binary_or(plan.binary) in binaries]
    if not runs:
        log.line("no validate.command configured: outputs not compared")
        return {"command": [], "compared": False}
    tolerance = plan.validate_tolerance
    expected_all: list[Captured] = []
    results: list[dict[str, object]] = []
    for index, check in enumerate(runs):
        name = check.binary_or(plan.binary)
        expected = _capture(
            pipeline, variant_binary("baseline", name), check, f"baseline-{index}", log
        )
        _check_steady(pipeline, check, name, expected, log, label=f"baseline-{index}")
        got = _capture(pipeline, binaries[name], check, f"{label}-{index}", log)
        differences = compare_captured(expected, got, tolerance, plan.validate_select)
        if differences:
            diff = render_diff(expected, got, expected_name="baseline", got_name=what)
            raise ValidationError(
                f"{what} printed something else than the baseline for "
                f"`{name} {' '.join(check.args)}` ({differences}):\n{diff}"
            )
        expected_all.append(expected)
        results.append(
            {
                "run": check.shape(),
                "identical": expected == got,
                "stdout_bytes": len(expected.stdout),
                "stderr_bytes": len(expected.stderr),
            }
        )
    if len(expected_all) == len(plan.validation_runs):
        pipeline.state.expected = expected_all  # what the distros step compares with, too
    first = expected_all[0]
    record: dict[str, object] = {
        "command": list(plan.validate_command),
        "compared": True,
        "tolerance": tolerance,
        **({"select": plan.validate_select} if plan.validate_select else {}),
        "identical": all(r["identical"] for r in results),
        "output_lines": len(first.stdout.splitlines()),
        "stdout_bytes": len(first.stdout),
        "stderr_bytes": len(first.stderr),
    }
    if plan.validate_runs:
        record["runs"] = results
    return record


class NondeterministicOutputError(ValidationError):
    """The baseline's validate command printed something else on a second run."""

    exit_code = 74
    summary = (
        "validation cannot judge: the baseline printed something else when its validate "
        "command ran twice (the command is not deterministic)"
    )
    default_hint = (
        "Make validate.command print the same every time: sort its output, run it with one "
        "thread, fix its random seed; or set validate.tolerance for numeric noise."
    )


def _check_steady(
    pipeline: Pipeline, check: Run, name: str, first: Captured, log: StepLog, *, label: str
) -> None:
    """Run the baseline's command a second time (once per run and build): if the baseline
    itself prints something else, comparing the optimized binary with it would fail or
    pass by chance, so say that the command is not deterministic, and what to do."""
    key = (name, check.args)
    if key in pipeline.state.steady:
        return
    again = _capture(pipeline, variant_binary("baseline", name), check, f"{label}-again", log)
    differences = compare_captured(
        first, again, pipeline.plan.validate_tolerance, pipeline.plan.validate_select
    )
    if differences:
        command = " ".join((name, *check.args))
        raise NondeterministicOutputError(
            f"`{command}` is not deterministic: the baseline printed something else when "
            f"run twice ({differences}), so no optimized binary can be compared with it:\n"
            + render_diff(first, again, expected_name="baseline", got_name="baseline again"),
            hint=nondeterminism_hint(first, again),
        )
    pipeline.state.steady.add(key)
    log.line(f"the baseline printed the same twice for `{' '.join((name, *check.args))}`")


def nondeterminism_hint(first: Captured, again: Captured) -> str:
    """What to change in validate.command, from how the two runs differ: the same lines in
    another order want sorting; anything else a single thread or a fixed seed."""
    reordered = all(
        sorted(getattr(first, stream).splitlines()) == sorted(getattr(again, stream).splitlines())
        for stream in ("stdout", "stderr")
    )
    if reordered:
        return (
            "The same lines came out in another order (threads finishing in turn): add "
            "the tool's flag that sorts its output (e.g. --sort path) to validate.command, "
            "or the one that runs it with one thread (--threads 1, or RAYON_NUM_THREADS=1 "
            "in the environment)."
        )
    return (
        "Other values came out: run it with one thread (a --threads 1 flag, "
        "RAYON_NUM_THREADS=1), fix its random seed, leave out times and addresses; or "
        "set validate.tolerance if only numbers differ a little."
    )


def _capture(pipeline: Pipeline, binary: str, check: Run, name: str, log: StepLog) -> Captured:
    return capture(
        pipeline,
        pipeline.box,
        binary,
        check.args,
        log,
        name=name,
        step=StepName.VALIDATE,
        runner=pipeline.plan.runner,
    )


def validate(pipeline: Pipeline, log: StepLog) -> None:
    shipped = pipeline.plan.final.name  # release, or optimized with PGO or BOLT
    validation = validate_binaries(
        pipeline, pipeline.shipped(), log, what="the optimized binary", label=shipped
    )
    pipeline.state.validation = validation
    log.detail = (
        "outputs identical"
        if validation.get("identical")
        else ("within tolerance" if validation["compared"] else "nothing to compare")
    )

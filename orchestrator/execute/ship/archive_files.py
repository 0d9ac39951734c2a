"""[[archive.generate]]: files of the archives that the shipped binary prints (shell
completions, a man page), made in the build container once validation passed.

Each command runs twice, through the flavor's runner for a foreign architecture (as
validation runs it); two runs that print different bytes stop the build, since a
reproduction would pack another archive. The output is kept in the artifact folder under
generated/ and recorded in build.json, so `release assemble` and `reproduce` pack the same
archive bytes without running anything."""

from __future__ import annotations

from pathlib import Path

from orchestrator.errors import GeneratedFileError, StepFailedError
from orchestrator.execute.steps.pipeline import Pipeline
from orchestrator.execute.verdict.validate import capture
from orchestrator.model.documents.records import GeneratedFile
from orchestrator.model.hashing import sha256_bytes
from orchestrator.model.layout import PATHS
from orchestrator.model.verdict.outputs import render_diff
from orchestrator.plan.steps import StepName
from orchestrator.progress.reporter import StepLog
from orchestrator.supply.archives import GENERATED_DIR

GENERATE_DIR = f"{PATHS.out}/generate"


def generate_archive_files(pipeline: Pipeline, artifact: Path, log: StepLog) -> list[GeneratedFile]:
    """Run every [[archive.generate]] entry twice with the binary that ships; write its
    stdout to `artifact`/generated/<path>; their records for build.json."""
    options, plan = pipeline.options, pipeline.plan
    shipped = pipeline.shipped()
    made: list[GeneratedFile] = []
    for index, entry in enumerate(options.archive_generate):
        name = entry.binary_or(plan.binary)
        command = " ".join((name, *entry.args))
        outputs = []
        for attempt in ("first", "again"):
            try:
                captured = capture(
                    pipeline,
                    pipeline.box,
                    shipped[name],
                    entry.args,
                    log,
                    name=f"generate-{index}-{attempt}",
                    step=StepName.EXTRACT,
                    runner=plan.runner,
                    out_dir=GENERATE_DIR,
                )
            except StepFailedError as error:
                raise GeneratedFileError(
                    f"[[archive.generate]] {entry.path!r}: `{command}` failed: {error.message}",
                    hint="Run the command by hand on the built binary; it must exit 0 and "
                    "print the file on stdout.",
                ) from error
            outputs.append(captured)
        first, again = outputs
        if first.stdout != again.stdout:
            raise GeneratedFileError(
                f"[[archive.generate]] {entry.path!r}: `{command}` printed something else "
                "when run twice, so a reproduction would pack another archive:\n"
                + render_diff(first, again, expected_name="first run", got_name="second run")
            )
        dest = artifact / GENERATED_DIR / entry.path
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(first.stdout)
        dest.chmod(0o644)
        made.append(
            GeneratedFile(
                path=entry.path,
                binary=name,
                args=list(entry.args),
                sha256=sha256_bytes(first.stdout),
                size=len(first.stdout),
            )
        )
        log.line(f"generated {entry.path} ({len(first.stdout)} bytes) with `{command}`")
    return made

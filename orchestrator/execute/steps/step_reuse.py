"""How a step uses the step cache (host/step_cache.py): look its key up, put the cached
binaries back where the step would have left them, or store what the step made.

Every lookup checks the inputs the plan cannot know (the vendored crates' digest) against
those the entry recorded; a tampered entry is ignored with a warning on the console and
the step runs again. Without a step cache (`pipeline.step_cache` None) nothing is read
or stored; reproduce has one of its own, empty when it starts, so its targets share what
an earlier one of the same reproduction ran (release/lock/reproduce_plan.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from orchestrator.errors import StepFailedError
from orchestrator.execute.steps.commands import fetch_file, run
from orchestrator.execute.steps.pipeline import BIN_DIR, Pipeline
from orchestrator.host.step_cache import StepEntry, files_tar
from orchestrator.model.hashing import sha256_file
from orchestrator.plan.step_keys import config_member
from orchestrator.progress.reporter import StepLog

# The log of the run that made an entry, kept with it: a reused step's log then still
# shows what the compiler, the tests or llvm-bolt printed, not only that it was reused.
STEP_LOG = "step.log"


def config_of(pipeline: Pipeline) -> str:
    """The config file's member in the source snapshot, left out of the keys ("" if none)."""
    return config_member(pipeline.options.config_path, pipeline.options.crate_dir)


def build_inputs(pipeline: Pipeline) -> dict[str, str]:
    """What a cargo step reads that the plan cannot know: the vendored crates' digest."""
    state = pipeline.state
    if pipeline.step_cache is None:  # nothing looked up or stored: no need to hash them
        return {}
    if not state.vendor_sha256:
        if state.vendor is None:
            raise StepFailedError("internal: a build step runs before fetch-crates")
        state.vendor_sha256 = sha256_file(state.vendor)
    return {"vendored_crates_sha256": state.vendor_sha256}


def look_up(
    pipeline: Pipeline, log: StepLog, step: str, key: str, inputs: Mapping[str, str]
) -> StepEntry | None:
    """The verified entry for `key`, or None (no cache, none stored, or not usable)."""
    cache = pipeline.step_cache
    if cache is None:
        return None
    return cache.get(key, step, inputs, log.warn, log.line)


def mark_reused(
    pipeline: Pipeline, log: StepLog, step: str, entry: StepEntry, detail: str = ""
) -> None:
    """The step line says whence its outputs came (then `detail`); build.json lists the
    step as reused."""
    pipeline.state.reused[step] = entry.reused()
    whence = entry.describe(pipeline.plan.artifact_dir)
    log.mark_cached(f"{whence}; {detail}" if detail else whence)
    if STEP_LOG in entry.record.files:
        record = entry.record
        log.copy_in(
            f"--- the {record.step} log of the run that made these outputs "
            f"({record.made_by}, {record.built_at}) ---",
            entry.file(STEP_LOG).read_text(encoding="utf-8", errors="replace"),
        )


def restore_binaries(
    pipeline: Pipeline, log: StepLog, step: str, variant: str, entry: StepEntry
) -> dict[str, str]:
    """Put the entry's binaries of `variant` where copy_binaries leaves a build's:
    /build/out/bin/<variant>/<name>; name -> path, main first."""
    names = list(pipeline.plan.variants[variant].binaries)
    run(pipeline.box, ["mkdir", "-p", BIN_DIR], log, step)
    log.line(f"+ docker cp <step cache {entry.record.key[:12]}> {BIN_DIR}/{variant}")
    pipeline.box.put_archive(
        BIN_DIR, files_tar(variant, {name: entry.file(name) for name in names})
    )
    return {name: f"{BIN_DIR}/{variant}/{name}" for name in names}


def store(
    pipeline: Pipeline,
    log: StepLog,
    step: str,
    key: str,
    *,
    container_files: Mapping[str, str],
    texts: Mapping[str, str] | None = None,
    inputs: Mapping[str, str],
) -> None:
    """Store what the step made: files from the build container (name -> path there) and
    texts the step printed (name -> text, e.g. its tool's report, parsed again on reuse)."""
    cache = pipeline.step_cache
    if cache is None:
        return
    scratch = pipeline.scratch / f"step-{step}-{key[:12]}"
    scratch.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    for name, path in container_files.items():
        folder = scratch / f"in-{len(files)}"
        folder.mkdir(exist_ok=True)
        files[name] = fetch_file(pipeline.box, path, folder)
    texts = dict(texts or {})
    if (history := log.written()) and STEP_LOG not in texts:
        texts[STEP_LOG] = history
    for name, text in texts.items():
        written = scratch / f"text-{len(files)}"
        written.write_text(text, encoding="utf-8")
        files[name] = written
    stored = cache.put(key, step, files, made_by=pipeline.plan.artifact_dir, inputs=inputs)
    log.line(f"{step} outputs kept in the step cache: {stored.folder}")

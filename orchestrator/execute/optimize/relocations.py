"""The strip-relocations step: a shipped binary keeps no relocations that only BOLT reads.

With BOLT planned, the optimized build links with `--emit-relocs` (plan/cargo_flags.py
RELOCATIONS), which leaves a static relocation section beside every relocated one:
a third of the binary and more. BOLT reads them; its output carries none. When what ships
is not BOLT's output (the speed gate picked the PGO build, BOLT fell back, or a binary
BOLT did not rewrite) they are removed with the toolchain's llvm-objcopy, which writes the
same bytes for the same input. The loaded segments are untouched, so the code that runs
is the one the gate counted; the stripped binaries are still validated against the
baseline before they replace the shipped ones. Each llvm-objcopy run is cached by its
input's sha256 and command (plan/step_keys.py strip_key), like every other step.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.errors import StepFailedError
from orchestrator.execute.steps.commands import fetch_file, run
from orchestrator.execute.steps.pipeline import BIN_DIR, Pipeline, variant_binary
from orchestrator.execute.steps.step_reuse import look_up, store
from orchestrator.execute.verdict.validate import validate_binaries
from orchestrator.host.step_cache import StepEntry, files_tar
from orchestrator.model.binaries.relocations import (
    StaticRelocations,
    StrippedBinary,
    static_relocation_sections,
)
from orchestrator.model.hashing import sha256_file
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.plan.step_keys import strip_key
from orchestrator.plan.steps import StepName
from orchestrator.progress.reporter import StepLog

STRIPPED = "stripped"  # the binaries without static relocations: /build/out/bin/stripped/
STEP = StepName.STRIP_RELOCATIONS


def objcopy(plan: BuildPlan) -> str:
    """The toolchain's own llvm-objcopy (the llvm-<major> package has it)."""
    return f"llvm-objcopy-{plan.toolchain.llvm_major}"


def _sections(path: Path) -> list[str]:
    with path.open("rb") as stream:
        return static_relocation_sections(stream)


def _strip_one(
    pipeline: Pipeline, name: str, source: Path, sections: list[str], log: StepLog
) -> tuple[str, Path, StepEntry | None]:
    """Where the binary without `sections` is in the build container, a copy of it on the
    host, and the step cache entry that stood in for llvm-objcopy (None: it ran)."""
    box, plan = pipeline.box, pipeline.plan
    output = variant_binary(STRIPPED, name)
    shipped = pipeline.shipped()[name]
    argv = [objcopy(plan), *(f"--remove-section={s}" for s in sections), shipped, output]
    key = strip_key(plan, binary_sha256=sha256_file(source), argv=argv)
    entry = look_up(pipeline, log, STEP, key, {})
    if entry is not None:
        log.line(f"+ docker cp <step cache {key[:12]}> {output}")
        run(box, ["mkdir", "-p", BIN_DIR], log, STEP)
        box.put_archive(BIN_DIR, files_tar(STRIPPED, {name: entry.file(name)}))
    else:
        run(box, ["mkdir", "-p", f"{BIN_DIR}/{STRIPPED}"], log, STEP)
        run(box, argv, log, STEP)
        store(pipeline, log, STEP, key, container_files={name: output}, inputs={})
    folder = pipeline.scratch / f"{STEP}-{name}-after"
    folder.mkdir(exist_ok=True)
    fetched = fetch_file(box, output, folder)
    left = _sections(fetched)
    if left:  # llvm-objcopy said nothing and removed nothing: never ship that unnoticed
        raise StepFailedError(f"step {STEP}: {name} still has {', '.join(left)} after {argv[0]}")
    return output, fetched, entry


def strip_relocations(pipeline: Pipeline, log: StepLog) -> None:
    state, main = pipeline.state, pipeline.plan.binary
    records: dict[str, StrippedBinary] = {}
    replaced: dict[str, str] = {}  # name -> the binary without static relocations
    reused: list[StepEntry] = []
    for name, path in pipeline.shipped().items():
        folder = pipeline.scratch / f"{STEP}-{name}"
        folder.mkdir(exist_ok=True)
        source = fetch_file(pipeline.box, path, folder)
        before = source.stat().st_size
        sections = _sections(source)
        if not sections:  # BOLT's output, or the release build: nothing to remove
            records[name] = StrippedBinary(sections=[], size_before=before, size_after=before)
            continue
        output, stripped, entry = _strip_one(pipeline, name, source, sections, log)
        after = stripped.stat().st_size
        log.line(f"{name}: {', '.join(sections)} removed, {before} -> {after} bytes")
        records[name] = StrippedBinary(sections=sections, size_before=before, size_after=after)
        replaced[name] = output
        if entry is not None:
            reused.append(entry)
    record = StaticRelocations.of(objcopy(pipeline.plan), records)
    if replaced:
        validation = validate_binaries(
            pipeline, replaced, log, what="the binary without static relocations", label=STRIPPED
        )
        record = record.model_copy(update={"validation": validation})
        shipped = pipeline.shipped()
        state.stripped.update({shipped[name]: path for name, path in replaced.items()})
        state.shipped = replaced.get(main, state.shipped)
        state.others = {name: replaced.get(name, path) for name, path in state.others.items()}
    state.static_relocations = record
    if not replaced:
        why = "BOLT's output ships" if state.shipped == state.bolted else "none was linked for BOLT"
        log.detail = f"no shipped binary has static relocations ({why})"
        return
    log.detail = f"{record.bytes_saved} bytes of static relocations removed"
    if len(reused) == len(replaced):
        state.reused[STEP] = reused[0].reused()
        log.mark_cached(f"as before; {log.detail}")

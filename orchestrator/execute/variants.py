"""The cargo builds: the plain baseline (the yardstick), the release profile, the
optimized build (PGO profile and/or relocations for BOLT), and `cargo test`.

Every variant's binary is copied to /build/out/bin/<variant> so later steps (PGO
training, BOLT, validation, bench) find it under one name.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from orchestrator.errors import SourceError, StepFailedError
from orchestrator.execute.pipeline import (
    BIN_DIR,
    Pipeline,
    cargo,
    fetch_file,
    run,
    variant_binary,
)
from orchestrator.host.inputs import pack_inputs
from orchestrator.host.source import crate_snapshot
from orchestrator.host.step_cache import StepEntry, files_tar
from orchestrator.model.cache_records import VariantsRecord
from orchestrator.model.hashing import sha256_file
from orchestrator.model.layout import PATHS
from orchestrator.model.pgo_report import Coverage, missing_functions
from orchestrator.model.records import FileDigest, write_record
from orchestrator.plan.step_keys import baseline_key
from orchestrator.plan.steps import StepName
from orchestrator.progress.reporter import StepLog


def build_baseline(pipeline: Pipeline, log: StepLog) -> None:
    plan, options, box, vendor = (
        pipeline.plan,
        pipeline.options,
        pipeline.box,
        pipeline.state.vendor,
    )
    if vendor is None:
        raise StepFailedError("internal: the baseline build runs after fetch-crates")
    # Re-snapshot: a source edited since planning must not slip in unrecorded.
    current = crate_snapshot(options)
    if current.archive_sha256 != plan.source.archive_sha256:
        raise SourceError(
            "the crate's sources changed while the build was starting",
            hint="Run the build again.",
        )
    if [i.sha256 for i in pack_inputs(options)] != [i.sha256 for i in plan.run.inputs]:
        raise SourceError(
            "the training inputs ([train] inputs) changed while the build was starting",
            hint="Run the build again.",
        )
    pipeline.load_sources(log)  # read-only from here on: every variant builds from these
    for item in plan.run.inputs:  # unpacked into their volume at /build/inputs
        log.line(f"+ docker cp <input {item.name} {item.sha256[:12]}> {item.path}")
        box.put_archive(PATHS.root, item.archive)
    log.line(f"+ docker cp <vendored crates {vendor.name[:12]}> {PATHS.vendor}")
    box.put_archive(PATHS.root, vendor.read_bytes())
    # Read by the build but not part of its key (the plan cannot know them).
    inputs = {"vendored_crates_sha256": sha256_file(vendor)}
    key, cache = baseline_key(plan), pipeline.step_cache
    entry = cache.get(key, StepName.BUILD_BASELINE, inputs, log.warn, log.line) if cache else None
    if entry is not None:
        _restore_baseline(pipeline, entry, log)
        return
    cargo(box, plan.variants["baseline"].build, log, StepName.BUILD_BASELINE)
    copied = pipeline.copy_binaries("baseline", log)
    if cache is not None:
        fetched = {name: fetch_file(box, path, pipeline.scratch) for name, path in copied.items()}
        stored = cache.put(
            key, StepName.BUILD_BASELINE, fetched, made_by=plan.artifact_dir, inputs=inputs
        )
        log.line(f"baseline binaries kept in the step cache: {stored.folder}")


def _restore_baseline(pipeline: Pipeline, entry: StepEntry, log: StepLog) -> None:
    """Put the cached baseline binaries where the later steps read them."""
    names = list(pipeline.plan.variants["baseline"].binaries)
    run(pipeline.box, ["mkdir", "-p", BIN_DIR], log, StepName.BUILD_BASELINE)
    log.line(f"+ docker cp <step cache {entry.record.key[:12]}> {BIN_DIR}/baseline")
    pipeline.box.put_archive(
        BIN_DIR, files_tar("baseline", {name: entry.file(name) for name in names})
    )
    pipeline.state.reused[StepName.BUILD_BASELINE] = entry.reused()
    log.mark_cached(entry.describe(pipeline.plan.artifact_dir))


def build_release(pipeline: Pipeline, log: StepLog) -> None:
    cargo(pipeline.box, pipeline.plan.variants["release"].build, log, StepName.BUILD_RELEASE)
    pipeline.ship("release", log)


def build_optimized(pipeline: Pipeline, log: StepLog) -> None:
    plan, state = pipeline.plan, pipeline.state
    output = cargo(pipeline.box, plan.variants["optimized"].build, log, StepName.BUILD_OPTIMIZED)
    pipeline.ship("optimized", log)
    if plan.pgo is not None and state.pgo is not None:
        functions = state.pgo.details.get("functions", 0)
        coverage = Coverage(
            profiled_functions=int(functions) if isinstance(functions, int) else 0,
            missing_functions=len(missing_functions(output)),
            max_missing_ratio=plan.pgo.max_missing_ratio,
        )
        state.coverage = coverage
        log.detail = (
            f"{coverage.missing_functions} functions without profile ({coverage.missing_ratio:.1%})"
        )
        coverage.check()


def test(pipeline: Pipeline, log: StepLog) -> None:
    cargo(pipeline.box, pipeline.plan.test, log, StepName.TEST)


def keep_variants(pipeline: Pipeline, artifact: Path, log: StepLog) -> dict[str, FileDigest]:
    """Store every variant's main binary for `orchestrator bench`, keyed by the shipped one."""
    state = pipeline.state
    main = pipeline.plan.binary
    names = {
        "baseline": variant_binary("baseline", main),
        "release": variant_binary("release", main),
    }
    if pipeline.plan.pgo:
        names["pgo"] = state.unbolted
    if state.bolted:  # kept whether or not the speed gate shipped it
        names["pgo-bolt" if pipeline.plan.pgo else "bolt"] = state.bolted
    shipped_sha = sha256_file(artifact / pipeline.plan.binary)
    store = pipeline.options.cache_dir / "variants" / shipped_sha
    partial = store.with_name(store.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    described: dict[str, FileDigest] = {}
    for name, path in names.items():
        fetched = fetch_file(pipeline.box, path, pipeline.scratch)
        target = partial / name
        shutil.move(fetched, target)
        described[name] = FileDigest(sha256=sha256_file(target), size=target.stat().st_size)
    write_record(
        partial / "variants.json",
        VariantsRecord(image=pipeline.image.reference, variants=described),
    )
    shutil.rmtree(store, ignore_errors=True)
    partial.replace(store)
    log.line(f"variants for `orchestrator bench` kept in {store}")
    return described

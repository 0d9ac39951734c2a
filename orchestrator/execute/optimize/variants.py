"""The cargo builds: the plain baseline (the yardstick), the release profile, the
optimized build (PGO profile and/or relocations for BOLT); `cargo test` is
execute/verdict/cargo_test.py.

Every variant's binary is copied to /build/out/bin/<variant> so later steps (PGO
training, BOLT, validation, bench) find it under one name.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from orchestrator.errors import SourceError, StepFailedError
from orchestrator.execute.steps.commands import cargo, fetch_file
from orchestrator.execute.steps.pipeline import Pipeline, variant_binary
from orchestrator.execute.steps.step_reuse import (
    build_inputs,
    config_of,
    look_up,
    mark_reused,
    restore_binaries,
    store,
)
from orchestrator.host.git_facts import shim_archive
from orchestrator.host.inputs import pack_inputs
from orchestrator.host.source import CrateView, crate_snapshot
from orchestrator.model.documents.cache_records import VariantsRecord
from orchestrator.model.documents.records import FileDigest, write_record
from orchestrator.model.hashing import sha256_file
from orchestrator.model.layout import PATHS
from orchestrator.model.verdict.pgo_report import Coverage, missing_functions
from orchestrator.plan.c_code import C_OFF
from orchestrator.plan.git_shim import SHIM_PATH
from orchestrator.plan.step_keys import (
    baseline_key,
    c_off_key,
    optimized_key,
    release_key,
)
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
    current = crate_snapshot(CrateView.from_options(options))
    if current.archive_sha256 != plan.source.archive_sha256:
        raise SourceError(
            "the crate's sources changed while the build was starting",
            hint="Run the build again.",
        )
    if [i.sha256 for i in pack_inputs(options.train_inputs)] != [i.sha256 for i in plan.run.inputs]:
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
    facts = plan.source.git
    if facts is not None:  # every cargo step of this container finds it first on PATH
        log.line(f"+ docker cp <build-time git of {facts.commit[:12]}> {SHIM_PATH}")
        box.put_archive("/", shim_archive(facts, mtime=options.source_date_epoch, uid=0))
    key = baseline_key(plan, config_of(pipeline))
    inputs = build_inputs(pipeline)  # read by the build, not part of its key
    entry = look_up(pipeline, log, StepName.BUILD_BASELINE, key, inputs)
    if entry is not None:
        restore_binaries(pipeline, log, StepName.BUILD_BASELINE, "baseline", entry)
        mark_reused(pipeline, log, StepName.BUILD_BASELINE, entry)
        return
    cargo(box, plan.variants["baseline"].build, log, StepName.BUILD_BASELINE)
    copied = pipeline.copy_binaries("baseline", log)
    store(pipeline, log, StepName.BUILD_BASELINE, key, container_files=copied, inputs=inputs)


def build_release(pipeline: Pipeline, log: StepLog) -> None:
    key, inputs = release_key(pipeline.plan, config_of(pipeline)), build_inputs(pipeline)
    entry = look_up(pipeline, log, StepName.BUILD_RELEASE, key, inputs)
    if entry is not None:
        pipeline.take(restore_binaries(pipeline, log, StepName.BUILD_RELEASE, "release", entry))
        mark_reused(pipeline, log, StepName.BUILD_RELEASE, entry)
        return
    cargo(pipeline.box, pipeline.plan.variants["release"].build, log, StepName.BUILD_RELEASE)
    pipeline.ship("release", log)
    copied = {name: variant_binary("release", name) for name in pipeline.plan.binaries}
    store(pipeline, log, StepName.BUILD_RELEASE, key, container_files=copied, inputs=inputs)


CARGO_LOG = "cargo.log"  # the cached optimized build's output: its missing-profile warnings


def build_optimized(pipeline: Pipeline, log: StepLog) -> None:
    plan, state = pipeline.plan, pipeline.state
    profile = state.pgo.sha256 if state.pgo is not None else None
    key = optimized_key(plan, profile, config_of(pipeline))
    inputs = build_inputs(pipeline)
    entry = look_up(pipeline, log, StepName.BUILD_OPTIMIZED, key, inputs)
    if entry is not None:
        restored = restore_binaries(pipeline, log, StepName.BUILD_OPTIMIZED, "optimized", entry)
        pipeline.take(restored)
        output = entry.file(CARGO_LOG).read_text()
    else:
        output = cargo(pipeline.box, plan.variants["optimized"].build, log, "build-optimized")
        pipeline.ship("optimized", log)
        copied = {name: variant_binary("optimized", name) for name in plan.binaries}
        texts = {CARGO_LOG: output}
        store(
            pipeline,
            log,
            "build-optimized",
            key,
            container_files=copied,
            texts=texts,
            inputs=inputs,
        )
    detail = ""
    if plan.pgo is not None and state.pgo is not None:
        functions = state.pgo.details.get("functions", 0)
        coverage = Coverage(
            profiled_functions=int(functions) if isinstance(functions, int) else 0,
            missing_functions=len(missing_functions(output)),
            max_missing_ratio=plan.pgo.max_missing_ratio,
        )
        state.coverage = coverage
        detail = (
            f"{coverage.missing_functions} functions without profile ({coverage.missing_ratio:.1%})"
        )
        coverage.check()
    if entry is not None:
        mark_reused(pipeline, log, StepName.BUILD_OPTIMIZED, entry, detail)
    else:
        log.detail = detail


def build_c_off(pipeline: Pipeline, log: StepLog) -> None:
    """[c_code] mode off, for the speed gate: built and kept, never shipped from here."""
    plan, state = pipeline.plan, pipeline.state
    profile = state.pgo.sha256 if state.pgo is not None else None
    key, inputs = c_off_key(plan, profile, config_of(pipeline)), build_inputs(pipeline)
    entry = look_up(pipeline, log, StepName.BUILD_C_OFF, key, inputs)
    if entry is not None:
        restore_binaries(pipeline, log, StepName.BUILD_C_OFF, C_OFF, entry)
        output = entry.file(CARGO_LOG).read_text()
    else:
        output = cargo(pipeline.box, plan.variants[C_OFF].build, log, StepName.BUILD_C_OFF)
        copied = pipeline.copy_binaries(C_OFF, log)
        texts = {CARGO_LOG: output}
        store(
            pipeline,
            log,
            StepName.BUILD_C_OFF,
            key,
            container_files=copied,
            texts=texts,
            inputs=inputs,
        )
    # The profile was trained on the mode's build: how much of this build it covers
    detail = ""
    if profile is not None:
        state.c_off_missing = len(missing_functions(output))
        detail = f"{state.c_off_missing} functions without profile"
    if entry is not None:
        mark_reused(pipeline, log, StepName.BUILD_C_OFF, entry, detail)
    else:
        log.detail = detail


def keep_variants(pipeline: Pipeline, artifact: Path, log: StepLog) -> dict[str, FileDigest]:
    """Store every variant's main binary for `orchestrator bench`, keyed by the shipped one."""
    state = pipeline.state
    main = pipeline.plan.binary
    names = {"baseline": variant_binary("baseline", main)}
    if "release" in pipeline.plan.variants:  # planned only where something reads it
        names["release"] = variant_binary("release", main)
    if pipeline.plan.pgo:  # as it ships: without the relocations only BOLT reads
        names["pgo"] = state.stripped.get(state.unbolted, state.unbolted)
    if state.bolted:  # kept whether or not the speed gate shipped it
        names["pgo-bolt" if pipeline.plan.pgo else "bolt"] = state.bolted
    if pipeline.plan.c_off:
        names[pipeline.plan.c_off] = variant_binary(C_OFF, main)
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

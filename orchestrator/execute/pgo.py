"""The PGO steps: instrumented build, training in the profiling container, merge.

A profile whose inputs are unchanged is taken from the cache: the three steps then say
`cached` and only put the stored .profdata where the optimized build reads it.
"""

from __future__ import annotations

from orchestrator.errors import ProfileError, StepFailedError
from orchestrator.execute.pipeline import (
    Pipeline,
    cargo,
    fetch_file,
    put_file,
    run,
    run_workloads,
    variant_binary,
)
from orchestrator.execute.profiles import ProfileRecord, load_profile, store_profile
from orchestrator.model.pgo_report import parse_profdata_show
from orchestrator.plan.build_plan import PgoPlan
from orchestrator.plan.steps import StepName
from orchestrator.progress.reporter import StepLog


def _pgo(pipeline: Pipeline) -> PgoPlan:
    if pipeline.plan.pgo is None:
        raise StepFailedError("internal: a PGO step in a plan without PGO")
    return pipeline.plan.pgo


def _stored(pipeline: Pipeline, log: StepLog) -> ProfileRecord | None:
    """The cached profile for this plan's profile key, unless --retrain."""
    if pipeline.retrain:
        return None
    pgo = _pgo(pipeline)
    cache = pipeline.options.cache_dir / "profiles" / "pgo" / f"{pgo.profile_key}.profdata"
    return load_profile(cache, "PGO", log.warn)


def instrument(pipeline: Pipeline, log: StepLog) -> None:
    pipeline.state.pgo = _stored(pipeline, log)
    if pipeline.state.pgo is not None:
        log.mark_cached(f"profile {pipeline.state.pgo.sha256[:12]} unchanged inputs")
        return
    cargo(pipeline.box, pipeline.plan.variants["pgo-generate"].build, log, StepName.PGO_INSTRUMENT)
    pipeline.copy_binaries("pgo-generate", log)


def train(pipeline: Pipeline, log: StepLog) -> None:
    if pipeline.state.pgo is not None:
        log.mark_cached(f"profile {pipeline.state.pgo.sha256[:12]} unchanged inputs")
        return
    pgo = _pgo(pipeline)
    run(pipeline.box, ["mkdir", "-p", pgo.raw_dir], log, StepName.PGO_TRAIN)
    run_workloads(
        pipeline,
        {name: variant_binary("pgo-generate", name) for name in pipeline.plan.binaries},
        log,
        StepName.PGO_TRAIN,
        environment={"LLVM_PROFILE_FILE": pgo.profile_file_pattern},
    )


def merge(pipeline: Pipeline, log: StepLog) -> None:
    pgo, stored = _pgo(pipeline), pipeline.state.pgo
    if stored is not None:
        put_file(pipeline.box, pgo.merged, stored.path.read_bytes())
        log.mark_cached(f"{stored.size} bytes, sha256 {stored.sha256[:12]}")
        return
    box = pipeline.box
    listing = run(
        box,
        ["find", pgo.raw_dir, "-name", "*.profraw", "-type", "f"],
        log,
        StepName.PGO_MERGE,
        keep_output=True,
    )
    raw_files = [line for line in listing.splitlines() if line.strip()]
    if not raw_files:
        raise ProfileError(
            "training wrote no .profraw file: the instrumented binary never reached exit",
            hint="Workloads must exit normally (a process killed or aborting writes no profile).",
        )
    run(box, pgo.merge_argv, log, StepName.PGO_MERGE)
    summary = parse_profdata_show(
        run(box, pgo.show_argv, log, StepName.PGO_MERGE, keep_output=True)
    )
    fetched = fetch_file(box, pgo.merged, pipeline.scratch)
    cache = pipeline.options.cache_dir / "profiles" / "pgo" / f"{pgo.profile_key}.profdata"
    record = store_profile(fetched, cache, {"raw_files": len(raw_files), **summary.as_dict()})
    pipeline.state.pgo = record
    log.detail = f"{len(raw_files)} .profraw -> {record.size} bytes, {summary.functions} functions"

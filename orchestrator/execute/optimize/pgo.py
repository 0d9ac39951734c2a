"""The PGO steps: instrumented build, training in the profiling container, merge.

A profile whose inputs are unchanged is taken from the cache: the three steps then say
`cached` and only put the stored .profdata where the optimized build reads it. Two stores
can hold it: the profile store (PgoPlan.profile_key, over the whole source snapshot, which
release.lock names) and the step cache (plan/step_keys.py `pgo_key`, the same inputs but
orchestrator's own config file), so that a change of a setting no build reads reuses it.
"""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.errors import ProfileError, StepFailedError
from orchestrator.execute.optimize.train_elsewhere import import_profiles
from orchestrator.execute.steps.commands import cargo, fetch_file, put_file, run
from orchestrator.execute.steps.pipeline import Pipeline, run_workloads, variant_binary
from orchestrator.execute.steps.profiles import ProfileRecord, load_profile, store_profile
from orchestrator.execute.steps.step_reuse import (
    build_inputs,
    config_of,
    look_up,
    mark_reused,
    store,
)
from orchestrator.model.verdict.pgo_report import parse_profdata_show
from orchestrator.plan.c_code import C_OFF_GENERATE, profile_c_functions
from orchestrator.plan.pgo import PgoPlan
from orchestrator.plan.step_keys import pgo_key
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
    return load_profile(_store_path(pipeline), "PGO", log.warn)


MERGED = "merged.profdata"
DETAILS = "details.json"  # what llvm-profdata show said of it, as the profile store keeps


def _store_path(pipeline: Pipeline) -> Path:
    pgo = _pgo(pipeline)
    return pipeline.options.cache_dir / "profiles" / "pgo" / f"{pgo.profile_key}.profdata"


def _from_step_cache(pipeline: Pipeline, log: StepLog) -> ProfileRecord | None:
    """The merged profile the step cache holds for the same inputs but the config file;
    put into the profile store too (under this plan's profile key, which the lock names)."""
    if pipeline.retrain or pipeline.step_cache is None:
        return None
    key = pgo_key(pipeline.plan, config_of(pipeline))
    entry = look_up(pipeline, log, StepName.PGO_MERGE, key, build_inputs(pipeline))
    if entry is None:
        return None
    try:  # its sha256 was checked against the sealed record; still, never fatal
        details = json.loads(entry.file(DETAILS).read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        details = None
    if not isinstance(details, dict):
        log.warn(f"ignoring the cached PGO profile {key[:12]}: its {DETAILS} is no JSON object")
        return None
    record = store_profile(entry.file(MERGED), _store_path(pipeline), details)
    record.cached = True
    for step in (StepName.PGO_INSTRUMENT, StepName.PGO_TRAIN, StepName.PGO_MERGE):
        pipeline.state.reused[step] = entry.reused()
    mark_reused(pipeline, log, StepName.PGO_INSTRUMENT, entry, f"profile {record.sha256[:12]}")
    return record


def instrument(pipeline: Pipeline, log: StepLog) -> None:
    if pipeline.profiles_from is not None:  # the bundle's binaries were instrumented
        log.detail = f"trained elsewhere: profiles from {pipeline.profiles_from.name}"
        return
    pipeline.state.pgo = _stored(pipeline, log)
    if pipeline.state.pgo is not None:
        log.mark_cached(f"profile {pipeline.state.pgo.sha256[:12]} unchanged inputs")
        return
    pipeline.state.pgo = _from_step_cache(pipeline, log)
    if pipeline.state.pgo is not None:
        return
    for name in _instrumented(pipeline):
        cargo(pipeline.box, pipeline.plan.variants[name].build, log, StepName.PGO_INSTRUMENT)
        pipeline.copy_binaries(name, log)


def _instrumented(pipeline: Pipeline) -> list[str]:
    """The instrumented builds: pgo-generate, and the [c_code] mode-off one the gate judges
    (trained beside it into the same merged profile: each finds its own functions there)."""
    return [name for name in ("pgo-generate", C_OFF_GENERATE) if name in pipeline.plan.variants]


def train(pipeline: Pipeline, log: StepLog) -> None:
    if pipeline.state.pgo is not None:
        log.mark_cached(f"profile {pipeline.state.pgo.sha256[:12]} unchanged inputs")
        return
    pgo = _pgo(pipeline)
    run(pipeline.box, ["mkdir", "-p", pgo.raw_dir], log, StepName.PGO_TRAIN)
    if pipeline.profiles_from is not None:
        import_profiles(pipeline, pipeline.profiles_from, log)
        return
    for variant in _instrumented(pipeline):
        run_workloads(
            pipeline,
            {name: variant_binary(variant, name) for name in pipeline.plan.binaries},
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
    shown = run(box, pgo.show_argv, log, StepName.PGO_MERGE, keep_output=True)
    summary = parse_profdata_show(shown)
    fetched = fetch_file(box, pgo.merged, pipeline.scratch)
    details: dict[str, object] = {"raw_files": len(raw_files), **summary.as_dict()}
    if pipeline.state.profile_source:  # kept with the profile: the lock records details
        details["profile_source"] = pipeline.state.profile_source
    if "--all-functions" in pgo.show_argv:  # [c_code] lto-pgo: which C functions it holds
        details["c_functions"] = profile_c_functions(shown)
    record = store_profile(fetched, _store_path(pipeline), details)
    pipeline.state.pgo = record
    store(
        pipeline,
        log,
        StepName.PGO_MERGE,
        pgo_key(pipeline.plan, config_of(pipeline)),
        container_files={MERGED: pgo.merged},
        texts={DETAILS: json.dumps(details, sort_keys=True)},
        inputs=build_inputs(pipeline),
    )
    log.detail = f"{len(raw_files)} .profraw -> {record.size} bytes, {summary.functions} functions"

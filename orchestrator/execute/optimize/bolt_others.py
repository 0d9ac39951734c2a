"""BOLT for every binary of an artifact: the main one's steps (execute/optimize/bolt.py), then each
other binary of package.binaries that a training workload runs, profiled with the
workloads that run it (in the main one's profile mode: the lock pins one mode per target)
and rewritten by llvm-bolt. A binary no workload runs ships as the optimized build made
it; build.json says which, per binary (BoltInfo.binaries).

The main binary's failure under bolt.policy "fallback" ships every binary unBOLTed (there
is no BOLT variant then); another binary's failure ships only that one unBOLTed, with a
warning and its reason. Under "require" either fails the build.
"""

from __future__ import annotations

from orchestrator.errors import OrchestratorError
from orchestrator.execute.optimize import bolt
from orchestrator.execute.steps.commands import put_file, run
from orchestrator.execute.steps.pipeline import Pipeline
from orchestrator.execute.steps.profiles import ProfileRecord
from orchestrator.plan.steps import StepName
from orchestrator.progress.reporter import StepLog


def profile(pipeline: Pipeline, log: StepLog) -> None:
    """The main binary's BOLT profile, then every other run binary's."""
    bolt.profile(pipeline, log)
    state = pipeline.state
    mode = str((state.bolt_report or {}).get("mode", ""))
    profiled = 0
    for name, path in state.unbolted_others.items():
        runs = bolt.workloads_of(pipeline, name)
        record: dict[str, object] = {"workloads": runs}
        state.bolt_binaries[name] = record
        if not runs:
            record["reason"] = "no training workload runs it: ships as the optimized build made it"
            continue
        try:
            stored = _profile_one(pipeline, name, path, mode, log)
        except OrchestratorError as error:
            failed(pipeline, name, error)
            continue
        state.bolt_other_profiles[name] = stored
        record["profile"] = stored.as_dict()
        profiled += 1
        if not stored.cached and log.cached:  # the main profile was stored, this one not
            log.cached = False
    if profiled:
        log.detail += f"; {profiled} other binar{'y' if profiled == 1 else 'ies'} profiled"


def _profile_one(
    pipeline: Pipeline, name: str, path: str, mode: str, log: StepLog
) -> ProfileRecord:
    """Binary `name`'s profile in `mode`: the stored one for its bytes, or a fresh one."""
    binary_sha = run(
        pipeline.box, ["sha256sum", path], log, StepName.BOLT_PROFILE, keep_output=True
    ).split()[0]
    cache = bolt.profile_cache(pipeline, binary_sha, mode)
    stored = None if pipeline.retrain else bolt.load_stored(pipeline, mode, cache, log, name)
    if stored is None:
        log.line(f"BOLT profile of {name}: {mode}, from the workloads that run it")
        return bolt.collect(pipeline, mode, path, cache, log, name=name)
    put_file(pipeline.box, bolt.profile_path(pipeline, name), stored.path.read_bytes())
    log.line(f"BOLT profile of {name}: stored for this exact binary ({binary_sha[:12]})")
    return stored


def optimize(pipeline: Pipeline, log: StepLog) -> None:
    """The main binary's rewrite, then every other profiled binary's."""
    bolt.optimize(pipeline, log)
    state = pipeline.state
    rewritten, ran = 0, False
    for name, stored in list(state.bolt_other_profiles.items()):
        record = state.bolt_binaries.setdefault(name, {})
        try:
            output, coverage, entry = bolt.rewrite(
                pipeline, name, state.unbolted_others[name], profile=stored, report=record, log=log
            )
        except OrchestratorError as error:
            failed(pipeline, name, error)
            continue
        ran = ran or entry is None
        state.bolted_others[name] = state.others[name] = output
        record |= {
            "applied": True,
            "reason": f"BOLTed with the {stored.details.get('mode')} profile of its workloads",
        }
        log.line(
            f"BOLT rewrote {name}: {coverage.profiled_functions}/{coverage.total_functions} "
            "functions with profile"
        )
        rewritten += 1
    if rewritten:
        log.detail += f"; {rewritten} other binar{'y' if rewritten == 1 else 'ies'} BOLTed"
    if ran and log.cached:  # the main rewrite came from the step cache, not the others
        log.cached = False
        state.reused.pop(StepName.BOLT_OPTIMIZE, None)


def failed(pipeline: Pipeline, name: str, error: OrchestratorError) -> None:
    """BOLT failed for binary `name`, not the main one: ship it unBOLTed (fallback) or fail
    the build (require), as for the main binary."""
    if bolt.policy_of(pipeline) == "require":
        raise error
    state = pipeline.state
    pipeline.reporter.warn(
        f"BOLT FAILED for {name}, shipping it without BOLT (bolt.policy = fallback): "
        f"{error.message}"
    )
    state.bolt_binaries.setdefault(name, {}).update(
        applied=False, reason=f"BOLT failed: {error.message}"
    )
    state.bolt_other_profiles.pop(name, None)
    state.bolted_others.pop(name, None)
    if name in state.unbolted_others:
        state.others[name] = state.unbolted_others[name]


def fall_back(pipeline: Pipeline, error: OrchestratorError) -> None:
    """The main binary's BOLT failed: every binary ships unBOLTed (or the build fails)."""
    bolt.fall_back(pipeline, error)
    state, plan = pipeline.state, pipeline.plan
    reason = f"BOLT failed: {error.message}"
    state.bolt_binaries.setdefault(plan.binary, {}).update(applied=False, reason=reason)
    for name in state.unbolted_others or state.others:
        record = state.bolt_binaries.setdefault(name, {})
        if record.get("reason") and not record.get("workloads"):
            continue  # no workload runs it: said so already
        record.update(applied=False, reason=f"not BOLTed: the main binary's {reason}")
    if state.unbolted_others:
        state.others = dict(state.unbolted_others)
    state.bolted_others.clear()
    state.bolt_other_profiles.clear()

"""The speed gate (`speed-gate`): count each variant's workloads under callgrind, then ship
the best validated variant (model/verdict/gate.py decides).

It runs in the build container (no network, no capabilities), after validation: the
variant it picks is validated against the baseline before it replaces the shipped one.
"""

from __future__ import annotations

from orchestrator.errors import SpeedGateError, StepFailedError
from orchestrator.execute.steps.commands import run
from orchestrator.execute.steps.pipeline import Pipeline, variant_binary
from orchestrator.execute.steps.step_reuse import look_up, store
from orchestrator.execute.verdict.gate_binaries import judge_bolted, pin_bolted
from orchestrator.execute.verdict.gate_counts import CountRun, parallel_runs, run_counts
from orchestrator.execute.verdict.validate import validate_binaries
from orchestrator.host.step_cache import StepEntry
from orchestrator.model.documents.lockfile import LockDriftError
from orchestrator.model.documents.records import GateInfo
from orchestrator.model.verdict.callgrind import Counts, parse_totals
from orchestrator.model.verdict.gate import BASELINE, cycles_change, decide, gain
from orchestrator.model.verdict.gate_table import splits, table_lines, workload_rows
from orchestrator.plan.c_code import C_OFF
from orchestrator.plan.gate import GatePlan
from orchestrator.plan.step_keys import count_key
from orchestrator.plan.steps import StepName
from orchestrator.progress.reporter import StepLog


def candidates(pipeline: Pipeline) -> dict[str, dict[str, str]]:
    """The variants that may ship, least optimized first: name -> {binary: path}, main
    binary first, then the build with [c_code] mode off where there is one. The other
    binaries of the PGO variant are those of the optimized build;
    the BOLT variant's are BOLT's where it rewrote them (execute/optimize/bolt_others.py)."""
    plan, state = pipeline.plan, pipeline.state
    main = plan.binary
    unbolted_others = state.unbolted_others or state.others
    found = {"release": {name: variant_binary("release", name) for name in plan.binaries}}
    if plan.pgo is not None and state.unbolted:
        found["pgo"] = {main: state.unbolted, **unbolted_others}
    elif state.unbolted and not state.bolted:
        # No PGO and BOLT failed: the release profile with relocations is what ships now.
        found["optimized"] = {main: state.unbolted, **unbolted_others}
    if state.bolted:
        found["pgo-bolt" if plan.pgo is not None else "bolt"] = {main: state.bolted, **state.others}
    if plan.c_off:  # last: the alternative to all of the above ([c_code] mode off)
        found[plan.c_off] = {name: variant_binary(C_OFF, name) for name in plan.binaries}
    return found


def _sha_lines(listing: str) -> list[tuple[str, str]]:
    """(path, sha256) of each `sha256sum` output line."""
    return [
        (parts[1], parts[0])
        for parts in (line.split(maxsplit=1) for line in listing.splitlines())
        if len(parts) == 2
    ]


COUNTS_FILE = "callgrind.txt"  # the `events:`/`summary:` lines of one cached count


def _shas(
    pipeline: Pipeline, variant: str, binaries: dict[str, str], log: StepLog
) -> dict[str, str]:
    """name -> sha256 of each binary (what a count is keyed by); {} without a step cache."""
    if pipeline.step_cache is None:
        return {}
    listing = run(
        pipeline.box,
        ["sha256sum", *binaries.values()],
        log,
        StepName.SPEED_GATE,
        keep_output=True,
    )
    by_path = dict(_sha_lines(listing))
    if set(binaries.values()) - set(by_path):
        raise StepFailedError(f"sha256sum did not hash every binary of {variant}: {listing}")
    return {name: by_path[path] for name, path in binaries.items()}


def _count_all(
    pipeline: Pipeline, measured: dict[str, dict[str, str]], log: StepLog
) -> tuple[dict[str, list[Counts]], list[StepEntry]]:
    """The counts of each gate workload run by each variant's binaries (variant ->
    {binary: path}), and the step cache entries that stood in for runs (a count is keyed
    by the binaries' sha256, not their names). The runs not stored go out side by side."""
    gate, plan = pipeline.plan.gate, pipeline.plan
    if gate is None:
        raise StepFailedError("internal: the speed gate runs without a gate plan")
    found: dict[tuple[str, int], Counts] = {}
    reused: list[StepEntry] = []
    to_run: list[tuple[str, int, str]] = []  # variant, workload index, step cache key
    runs: list[CountRun] = []
    for variant, binaries in measured.items():
        log.line(f"counting {variant}: {len(gate.workloads)} workloads under callgrind")
        shas = _shas(pipeline, variant, binaries, log)
        for index, workload in enumerate(gate.workloads):
            key = ""
            if shas:
                key = count_key(
                    plan, binaries=shas, workload=workload, container=plan.build.environment
                )
                entry = look_up(pipeline, log, StepName.SPEED_GATE, key, {})
                if entry is not None:
                    whence = entry.describe(plan.artifact_dir)
                    log.line(f"{variant} workload {index}: counted before ({whence})")
                    text = entry.file(COUNTS_FILE).read_text()
                    found[variant, index] = parse_totals(text.splitlines())
                    reused.append(entry)
                    continue
            binary = binaries[workload.binary_or(plan.binary)]
            to_run.append((variant, index, key))
            runs.append(
                CountRun(
                    label=f"{variant} workload {index}",
                    out_dir=f"{gate.work_dir}/{variant}-{index}",
                    stdin=plan.run.stdin,
                    command=(binary, *workload.args),
                )
            )
    box = pipeline.box
    at_once = parallel_runs(_engine_cores(pipeline), box.limits.memory, len(runs))
    outputs = run_counts(
        box,
        runs,
        log,
        StepName.SPEED_GATE,
        at_once=at_once,
        environment=plan.run.environment,
        workdir=plan.run.workdir,
    )
    for (variant, index, key), output in zip(to_run, outputs, strict=True):
        found[variant, index] = parse_totals(output.splitlines())
        if key:
            kept = "\n".join(
                line for line in output.splitlines() if line.startswith(("events:", "summary:"))
            )
            store(
                pipeline,
                log,
                StepName.SPEED_GATE,
                key,
                container_files={},
                texts={COUNTS_FILE: kept + "\n"},
                inputs={},
            )
    counts = {
        variant: [found[variant, index] for index in range(len(gate.workloads))]
        for variant in measured
    }
    return counts, reused


def _engine_cores(pipeline: Pipeline) -> int:
    """The cores a build on this engine has: those `release` gave it (CARGO_BUILD_JOBS),
    else all the engine reports."""
    if pipeline.cargo_jobs:
        return pipeline.cargo_jobs
    try:
        return max(1, int(pipeline.engine.info().get("NCPU", 1)))
    except (TypeError, ValueError):
        return 1


def speed_gate(pipeline: Pipeline, log: StepLog) -> None:
    plan, state = pipeline.plan, pipeline.state
    gate = plan.gate
    if gate is None:
        raise StepFailedError("internal: the speed gate runs without a gate plan")
    choices = candidates(pipeline)
    shipped_now = next(
        name for name, paths in choices.items() if paths[plan.binary] == state.shipped
    )
    if gate.pinned:
        _ship_pinned(pipeline, gate, choices, shipped_now, log)
        return
    measured = {
        BASELINE: {name: variant_binary("baseline", name) for name in plan.binaries},
        **choices,
    }
    counts, reused = _count_all(pipeline, measured, log)
    judge_bolted(pipeline, choices, counts, log)  # before the decision: it may revert some
    decision = decide(
        counts,
        [name for name in choices if name != plan.c_off],
        policy=gate.policy,
        min_gain=gate.min_gain,
        alternative=plan.c_off,
    )
    for reason in decision.reasons:
        log.line(f"gate: {reason}")
    per_workload = workload_rows(counts, [str(workload) for workload in gate.workloads])
    log.line("gate: estimated cycles per workload (changes against plain cargo build --release")
    log.line("and against the release profile; minus is fewer cycles):")
    for line in table_lines(per_workload):
        log.line(f"  {line}")
    split = splits(per_workload)
    for variant in split:
        log.line(f"gate: {variant.line()}")
    state.gate = GateInfo(
        policy=gate.policy,
        min_gain=gate.min_gain,
        metric=gate.metric,
        workloads=len(gate.workloads),
        variants={
            name: {
                **sum(runs, Counts()).as_dict(),
                "per_workload": [c.estimated_cycles for c in runs],
                "gain_vs_baseline": gain(counts, name, BASELINE),
            }
            for name, runs in counts.items()
        },
        shipped=decision.shipped,
        reasons=list(decision.reasons),
        gain_vs_baseline=gain(counts, decision.shipped, BASELINE),
        gain_vs_release=gain(counts, decision.shipped, "release"),
        per_workload=per_workload,
    )
    if decision.failure:
        raise SpeedGateError(f"speed gate (require-all): {decision.failure}")
    if decision.shipped != shipped_now:
        _switch(pipeline, choices[decision.shipped], decision.shipped, log)
        pipeline.reporter.warn(
            f"speed gate ships {decision.shipped}, not {shipped_now}: " + decision.reasons[-1]
        )
    elif choices[shipped_now] != pipeline.shipped():  # a binary's BOLT did not pay
        _switch(pipeline, choices[shipped_now], shipped_now, log)
    saved = state.gate.gain_vs_baseline or 0.0
    log.detail = f"ships {decision.shipped}: {cycles_change(1.0 - saved)} than cargo build"
    # A mean over workloads hides a loss: the step line says so where it is what ships.
    shipped_split = [variant.text() for variant in split if variant.variant == decision.shipped]
    if shipped_split:
        log.detail += "; " + shipped_split[0]
    if reused and len(reused) == len(measured) * len(gate.workloads):
        # Every count came from the step cache: the decision itself is made again.
        log.mark_cached(f"every count as before; {log.detail}")
        state.reused[StepName.SPEED_GATE] = reused[0].reused()


def _switch(pipeline: Pipeline, picked: dict[str, str], variant: str, log: StepLog) -> None:
    """Ship `picked` (binary name -> path) instead: validated first, like every variant."""
    validate_binaries(pipeline, picked, log, what=f"the {variant} binary", label=variant)
    pipeline.state.shipped = picked[pipeline.plan.binary]
    pipeline.state.others = {
        name: path for name, path in picked.items() if name != pipeline.plan.binary
    }


def _ship_pinned(
    pipeline: Pipeline,
    gate: GatePlan,
    choices: dict[str, dict[str, str]],
    shipped_now: str,
    log: StepLog,
) -> None:
    """A reproduction ships the variant its lock names, without counting anything."""
    if gate.pinned not in choices:
        raise LockDriftError(
            f"the lock says the speed gate shipped {gate.pinned}, but this build made only "
            f"{', '.join(choices)}",
            hint="The locked config no longer builds that variant: reproduce with the "
            "orchestrator version (and config) that made the release.",
        )
    reason = f"pinned by the lock: the release shipped {gate.pinned}; nothing was counted"
    log.line(f"gate: {reason}")
    pin_bolted(pipeline, choices, gate.pinned_unbolted, log)
    pipeline.state.gate = GateInfo(
        policy=gate.policy,
        min_gain=gate.min_gain,
        metric=gate.metric,
        shipped=gate.pinned,
        reasons=[reason],
        skipped=reason,
    )
    # Another variant, or the same one with a binary the release shipped unBOLTed
    if gate.pinned != shipped_now or choices[gate.pinned] != pipeline.shipped():
        _switch(pipeline, choices[gate.pinned], gate.pinned, log)
    log.detail = f"ships {gate.pinned} (pinned by the lock)"

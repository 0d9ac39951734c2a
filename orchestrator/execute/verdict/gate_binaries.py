"""The speed gate's verdict on each BOLTed binary other than the main one (issue 33).

The BOLT variant holds every binary BOLT rewrote (execute/optimize/bolt_others.py). Before the gate
picks a variant, each of the other binaries keeps its BOLT output only if the workloads
that run it count at least gate.min_gain fewer estimated cycles than with the unBOLTed
build (model/verdict/bolt_binaries.py); one that does not is put back unBOLTed in the BOLT variant,
and its workloads count as unBOLTed in the variant's totals. The main binary's BOLT is the
BOLT variant itself: the gate's choice of variant decides it, as before (its own gain is
recorded). Under gate.policy require-all every BOLT output stays (that policy ships every
optimization); the gains are recorded. A reproduction reverts the binaries its lock names,
without counting.
"""

from __future__ import annotations

from collections.abc import Collection

from orchestrator.execute.steps.pipeline import Pipeline
from orchestrator.model.verdict.bolt_binaries import binaries_in, counts_without, judge_binaries
from orchestrator.model.verdict.callgrind import Counts
from orchestrator.progress.reporter import StepLog


def bolt_variant(pipeline: Pipeline) -> str:
    return "pgo-bolt" if pipeline.plan.pgo is not None else "bolt"


def judge_bolted(
    pipeline: Pipeline,
    choices: dict[str, dict[str, str]],
    counts: dict[str, list[Counts]],
    log: StepLog,
) -> None:
    """Each BOLTed binary's verdict, recorded; the BOLT variant's binaries and counts
    without the other binaries whose BOLT did not pay (changed in place)."""
    plan, state, gate = pipeline.plan, pipeline.state, pipeline.plan.gate
    variant = bolt_variant(pipeline)
    if gate is None or variant not in counts or not state.bolted:
        return
    reference = "pgo" if "pgo" in counts else "release"
    owners = [workload.binary_or(plan.binary) for workload in gate.workloads]
    verdicts = judge_binaries(
        [plan.binary, *state.bolted_others],
        owners,
        counts[variant],
        counts[reference],
        unbolted_variant=reference,
        min_gain=gate.min_gain,
    )
    revert: set[str] = set()
    for name, verdict in verdicts.items():
        record = state.bolt_binaries.setdefault(name, {})
        record["gain"] = verdict.gain
        if name == plan.binary:  # its BOLT is the variant's: the variant's verdict
            continue
        keep = verdict.keep or gate.policy == "require-all"
        said = verdict.reason
        if not verdict.keep:
            said += (
                ": ships unBOLTed" if not keep else ": kept, as gate.policy require-all ships all"
            )
        record["kept"] = keep
        record["reason"] = f"{record.get('reason', 'BOLTed')}; speed gate: {said}"
        log.line(f"gate: BOLT of {name}: {said}")
        if not keep:
            revert.add(name)
    if revert:
        counts[variant] = counts_without(counts[variant], counts[reference], owners, revert)
        choices[variant] = binaries_in(choices[variant], state.unbolted_others, revert)


def pin_bolted(
    pipeline: Pipeline,
    choices: dict[str, dict[str, str]],
    unbolted: Collection[str],
    log: StepLog,
) -> None:
    """A reproduction: the BOLT variant ships unBOLTed the binaries the release's gate
    put back (its lock says), the others BOLTed; nothing is counted."""
    state = pipeline.state
    variant = bolt_variant(pipeline)
    if variant not in choices:
        return
    revert = {name for name in unbolted if name in state.bolted_others}
    for name in state.bolted_others:
        kept = name not in revert
        record = state.bolt_binaries.setdefault(name, {})
        record["kept"] = kept
        verdict = "BOLT kept" if kept else "shipped unBOLTed"
        record["reason"] = (
            f"{record.get('reason', 'BOLTed')}; speed gate: {verdict}, pinned by the lock"
        )
    if revert:
        log.line(f"gate: pinned by the lock: {', '.join(sorted(revert))} ship unBOLTed")
        choices[variant] = binaries_in(choices[variant], state.unbolted_others, revert)

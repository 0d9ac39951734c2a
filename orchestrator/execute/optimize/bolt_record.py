"""build.json's record of BOLT per binary (`bolt.binaries`)."""

from __future__ import annotations

from orchestrator.execute.steps.pipeline import Pipeline
from orchestrator.model.documents.records import BoltBinary


def bolt_binaries_shipped(pipeline: Pipeline) -> dict[str, bool]:
    """Whether each binary ships BOLT's output (after the speed gate), main one first."""
    state = pipeline.state
    shipped = {pipeline.plan.binary: bool(state.bolted) and state.shipped == state.bolted}
    for name, path in state.others.items():
        bolted = state.bolted_others.get(name)
        shipped[name] = bolted is not None and path == bolted
    return shipped


def bolt_binaries_record(pipeline: Pipeline) -> dict[str, BoltBinary]:
    """`bolt.binaries`: every binary of the artifact, what BOLT did to it and whether the
    published one is BOLT's."""
    state = pipeline.state
    shipped = bolt_binaries_shipped(pipeline)
    shipped_variant = state.gate.shipped if state.gate else None
    records: dict[str, BoltBinary] = {}
    for name in pipeline.plan.binaries:
        found = dict(state.bolt_binaries.get(name, {}))
        reason = str(found.pop("reason", "") or "not BOLTed")
        applied = bool(found.pop("applied", False))
        ships = shipped.get(name, False)
        if applied and not ships and found.get("kept") is not False and shipped_variant:
            reason += f"; the speed gate shipped {shipped_variant}"
        records[name] = BoltBinary.model_validate(
            {**found, "applied": applied, "reason": reason, "shipped": ships}
        )
    return records

"""`release --dry-run`: per cached step of each target, whether it would run or be reused,
and why. Reads the step cache and the stored PGO profiles' records: a profile record that
is unreadable or unsealed counts as absent (the reason names it), as the release treats
it; files' hashes are not checked (a tampered entry, or other vendored crates, still run
the step when the release does).

Within one release a step whose key an earlier target has is reused from it. Where a key
needs what an earlier step makes (the merged PGO profile), a profile made in this release
stands in by its own key, so two targets training the same profile share what follows.
Steps keyed by binaries that only exist as the release runs (llvm-bolt, the callgrind
counts) are said to be decided then.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path

from orchestrator.execute.optimize.pgo import MERGED
from orchestrator.execute.steps.profiles import profile_slot
from orchestrator.host.cache_read import S, UnusableRecord, read_sealed
from orchestrator.host.step_cache import ENTRY_FILE, StepCache
from orchestrator.model.documents.cache_records import ProfileSidecar, StepEntryRecord
from orchestrator.model.documents.reports import StepNote
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.plan.step_keys import (
    baseline_key,
    c_off_key,
    cargo_test_build_key,
    cargo_test_key,
    optimized_key,
    pgo_key,
    release_key,
)
from orchestrator.plan.steps import StepName

PGO_STEPS = (StepName.PGO_INSTRUMENT, StepName.PGO_TRAIN, StepName.PGO_MERGE)
AT_RUN = {
    StepName.BOLT_OPTIMIZE: "decided as it runs: keyed by the optimized binary's and its "
    "BOLT profile's sha256",
    StepName.SPEED_GATE: "decided as it runs: each count keyed by the variant's binaries' "
    "sha256 and the workload",
    StepName.STRIP_RELOCATIONS: "decided as it runs: keyed by the shipped binaries' sha256",
}


def _sealed(path: Path, model: type[S], slot: str, unusable: list[str]) -> S | None:
    """The record, or None; why one that is there cannot be used goes into `unusable`."""
    try:
        return read_sealed(path, model, slot)
    except UnusableRecord as why:
        unusable.append(f"{path} cannot be used ({why})")
        return None


@dataclass
class StepPlanner:
    """Notes for the targets of one release, in build order (`seen`: key -> the first
    target that would run the step)."""

    cache_dir: Path
    seen: MutableMapping[str, str]
    config: str = ""  # the config file's member in the sources, left out of the keys

    @property
    def steps(self) -> StepCache:
        return StepCache(self.cache_dir / "steps")

    def _keyed(self, plan: BuildPlan, step: str, key: str) -> StepNote:
        first = self.seen.setdefault(key, plan.artifact_dir)
        if first != plan.artifact_dir:
            return StepNote(step=step, reused=True, reason=f"same inputs as {first}")
        if self.steps.contains(key):
            return StepNote(step=step, reused=True, reason="in the step cache")
        return StepNote(step=step, reused=False, reason="no step cache entry for its inputs")

    def _profile(self, plan: BuildPlan) -> tuple[str | None, StepNote | None]:
        """The merged profile's sha256 (or its stand-in) and the PGO steps' note."""
        if plan.pgo is None:
            return None, None
        key = plan.pgo.profile_key
        stored = self.cache_dir / "profiles" / "pgo" / f"{key}.profdata"
        unusable: list[str] = []  # records the release would ignore, with why
        sidecar = _sealed(
            stored.with_suffix(".json"), ProfileSidecar, profile_slot(stored), unusable
        )
        if stored.is_file() and sidecar is not None:
            reason = f"stored PGO profile {sidecar.sha256[:12]} for the same inputs"
            return sidecar.sha256, StepNote(step="pgo", reused=True, reason=reason)
        key = pgo_key(plan, self.config)
        entry = self.cache_dir / "steps" / key / ENTRY_FILE
        record = _sealed(entry, StepEntryRecord, self.steps.slot(key), unusable)
        merged = None if record is None else record.files.get(MERGED)
        if merged is not None:
            reason = f"PGO profile {merged.sha256[:12]} in the step cache"
            return merged.sha256, StepNote(step="pgo", reused=True, reason=reason)
        first = self.seen.setdefault(f"pgo/{key}", plan.artifact_dir)
        stand_in = f"pgo-key:{key}"
        if first != plan.artifact_dir:
            return stand_in, StepNote(step="pgo", reused=True, reason=f"same inputs as {first}")
        reason = "; ".join(["no stored PGO profile", *unusable])
        return stand_in, StepNote(step="pgo", reused=False, reason=reason)

    def notes(self, plan: BuildPlan) -> list[StepNote]:
        """A note per cached step the plan has, in its order."""
        profile, pgo = self._profile(plan)
        notes: list[StepNote] = []
        for step in plan.steps:
            name = step.name
            if name == StepName.BUILD_BASELINE:
                notes.append(self._keyed(plan, name, baseline_key(plan, self.config)))
            elif name == StepName.BUILD_RELEASE:
                notes.append(self._keyed(plan, name, release_key(plan, self.config)))
            elif name in PGO_STEPS and pgo is not None:
                notes.append(pgo.model_copy(update={"step": name}))
            elif name == StepName.BUILD_OPTIMIZED:
                notes.append(self._keyed(plan, name, optimized_key(plan, profile, self.config)))
            elif name == StepName.BUILD_C_OFF:
                notes.append(self._keyed(plan, name, c_off_key(plan, profile, self.config)))
            elif name == StepName.TEST_BUILD:
                key = cargo_test_build_key(plan, profile, self.config)
                notes.append(self._keyed(plan, name, key))
            elif name == StepName.TEST:
                notes.append(self._keyed(plan, name, cargo_test_key(plan, profile, self.config)))
            elif name in AT_RUN:
                notes.append(StepNote(step=name, reused=None, reason=AT_RUN[name]))
        return notes

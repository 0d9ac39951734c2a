"""`release --dry-run`: every target's plan, what the caches already hold and which
engines can build it, without building anything; the report `--json` prints."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from orchestrator.host.step_cache import StepCache
from orchestrator.model.documents.release_summary import EngineJobs
from orchestrator.model.documents.reports import (
    CacheState,
    EngineFit,
    PlannedTargetEntry,
    ReleasePlanReport,
)
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.plan.serialize import action_key
from orchestrator.plan.step_keys import baseline_key, config_member
from orchestrator.release.run import plan_targets
from orchestrator.release.step_plan import StepPlanner
from orchestrator.release.targets.action_cache import look_up
from orchestrator.release.targets.release_view import ReleaseView
from orchestrator.release.targets.schedule import Needs, fits, needs_by_flavor
from orchestrator.release.targets.target import Target
from orchestrator.runtime.api import EngineApi, engine_facts


@dataclass(frozen=True)
class PlannedTarget:
    target: Target
    plan: BuildPlan
    cached: CacheState
    engines: tuple[EngineFit, ...] = ()

    def entry(self) -> PlannedTargetEntry:
        return PlannedTargetEntry(
            flavor=self.target.flavor,
            level=self.target.level,
            artifact=self.plan.artifact_dir,
            rust_target=self.plan.rust_target,
            target_cpu=self.plan.target_cpu,
            toolchain=self.plan.toolchain.name,
            base_image=self.plan.base_image.reference,
            image=self.plan.image.reference,
            steps=[] if self.cached.artifact else [step.name for step in self.plan.steps],
            cached=self.cached,
            engines=list(self.engines),
        )


def dry_run(
    release: ReleaseView,
    chosen: Sequence[Target],
    engines: Sequence[EngineApi],
    unreachable: Mapping[str, str] | None = None,
) -> list[PlannedTarget]:
    """The plan per target, what the caches already hold and which engines can build it;
    builds nothing. A target whose published artifact is current has no steps (its
    signatures are checked by the run). `engines` are those that answered, `unreachable`
    the others with why; an image counts as held when any engine holds it."""
    facts = [engine_facts(engine) for engine in engines]
    needs = needs_by_flavor(release.engines.require)

    def held(reference: str) -> bool | None:  # None: no Docker to ask
        if not engines:
            return None
        return any(engine.image(reference) is not None for engine in engines)

    planned = []
    cache = release.cache_dir
    steps = StepCache(cache / "steps")
    baselines: dict[str, str] = {}  # baseline key -> the first target that builds it
    # Per cached step: run or reused, and why.
    planner = StepPlanner(
        cache, {}, config_member(release.crate.config_path, release.crate.crate_dir)
    )
    for target, plan in plan_targets(chosen):
        key = baseline_key(plan, planner.config)
        first = baselines.setdefault(key, plan.artifact_dir)
        if first != plan.artifact_dir:
            baseline = f"same inputs as {first}"
        else:
            baseline = "in the step cache" if steps.contains(key) else ""
        profile = (
            cache / "profiles" / "pgo" / f"{plan.pgo.profile_key}.profdata" if plan.pgo else None
        )
        published = release.artifacts_dir / plan.release_dir / plan.artifact_dir
        lookup = look_up(published, action_key(plan, target.options), None)
        cached = CacheState(
            base_image=held(plan.base_image.reference),
            toolchain_image=held(plan.image.reference),
            crates=(cache / "crates" / f"{plan.source.cargo_lock_sha256}.tar").is_file(),
            pgo_profile=None if profile is None else profile.is_file(),
            artifact=lookup.hit,
            artifact_reason=lookup.reason,
            baseline=bool(baseline),
            baseline_reason=baseline,
            steps=planner.notes(plan),
        )
        images = (plan.image.reference, plan.base_image.reference)
        answered = fits(needs.get(target.flavor, Needs()), images, facts)
        entries = [
            EngineFit(engine=fit.engine, fits=not fit.unmet, holds=fit.holds, note=fit.unmet)
            for fit in answered
        ] + [
            EngineFit(engine=name, fits=False, holds="", note=f"unreachable: {why}")
            for name, why in (unreachable or {}).items()
        ]
        planned.append(PlannedTarget(target, plan, cached, tuple(entries)))
    return planned


def plan_report(
    release: ReleaseView,
    planned: Sequence[PlannedTarget],
    *,
    docker_reachable: bool,
    jobs: Sequence[EngineJobs] = (),
) -> ReleasePlanReport:
    """What `release --dry-run --json` prints: every target in build order, and how many
    targets each engine would build at a time."""
    return ReleasePlanReport(
        name=release.binary,
        version=release.version,
        release_dir=str(release.release_dir),
        docker_reachable=docker_reachable,
        targets=[item.entry() for item in planned],
        jobs_per_engine=list(jobs),
    )

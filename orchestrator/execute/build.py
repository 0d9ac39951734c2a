"""Run a BuildPlan: its steps, in its order, each by the executor its name maps to.

The plan is the queue: `EXECUTORS` maps every `StepName` to the function that runs it,
and `run_build` walks `plan.steps`, so a step the plan lists is a step that runs (a unit
test checks that no name lacks an executor and no executor lacks a name).

Only `fetch-crates` has a network. Every other container runs with `--network none`, as
the image's non-root user, with all capabilities dropped. The one exception is the
profiling container, which gets only the perf access that `runtime.perf` proves it
needs. Build and profiling containers share one volume at /build/out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from orchestrator.config.resolve.options import Options
from orchestrator.config.resolve.target_cpus import check_recorded_cpu
from orchestrator.config.resolve.toolchains import load_base_spec, load_distros, load_toolchain
from orchestrator.errors import OrchestratorError, StepFailedError
from orchestrator.execute.optimize import bolt_others, pgo, relocations, variants
from orchestrator.execute.ship import inventory, publish
from orchestrator.execute.steps import crates, sysroot, toolchain
from orchestrator.execute.steps.pipeline import Pipeline, start_pipeline
from orchestrator.execute.verdict import cargo_test, device, gate, portability, validate
from orchestrator.flavors import get_flavor
from orchestrator.host.git_facts import crate_git_facts
from orchestrator.host.inputs import pack_inputs
from orchestrator.host.signals import ShieldedExitStack
from orchestrator.host.source import CrateView, crate_snapshot
from orchestrator.host.step_cache import StepCache
from orchestrator.model.documents.git_facts import GitFacts
from orchestrator.model.documents.records import BuildManifest
from orchestrator.plan.build_plan import BuildPlan, make_plan
from orchestrator.plan.dockerfiles import image_packages, render_dockerfile
from orchestrator.plan.steps import BOLT_STEPS, Step, StepName
from orchestrator.progress.reporter import Reporter, StepLog
from orchestrator.runtime.engine import Engine
from orchestrator.supply.attest import Signer

StepExecutor = Callable[[Pipeline, StepLog], None]
StepCacheUse = Literal["use", "refresh", "off"]

EXECUTORS: Mapping[StepName, StepExecutor] = {
    StepName.BASE_IMAGE: toolchain.base_image,
    StepName.TOOLCHAIN_IMAGE: toolchain.toolchain_image,
    StepName.TOOLCHAIN_CHECK: toolchain.toolchain_check,
    StepName.GLIBC_VIEW: sysroot.glibc_view,
    StepName.GPU_TARGETS: device.gpu_targets,
    StepName.FETCH_CRATES: crates.fetch_crates,
    StepName.BUILD_BASELINE: variants.build_baseline,
    StepName.BUILD_RELEASE: variants.build_release,
    StepName.PGO_INSTRUMENT: pgo.instrument,
    StepName.PGO_TRAIN: pgo.train,
    StepName.PGO_MERGE: pgo.merge,
    StepName.BUILD_OPTIMIZED: variants.build_optimized,
    StepName.BUILD_C_OFF: variants.build_c_off,
    StepName.TEST_BUILD: cargo_test.test_build,
    StepName.TEST: cargo_test.test,
    StepName.BOLT_PROFILE: bolt_others.profile,  # every binary a workload runs
    StepName.BOLT_OPTIMIZE: bolt_others.optimize,
    StepName.DEVICE_CODE: device.device_code,
    StepName.VALIDATE: validate.validate,
    StepName.SPEED_GATE: gate.speed_gate,
    StepName.STRIP_RELOCATIONS: relocations.strip_relocations,
    StepName.PORTABILITY: portability.portability,
    StepName.DISTROS: portability.distros,
    StepName.SBOM: inventory.sbom,
    StepName.EXTRACT: publish.extract,
    StepName.PUBLISH: publish.publish,
}


def prepare_plan(
    options: Options, flavor_name: str, *, git: GitFacts | Literal["checkout"] | None = "checkout"
) -> BuildPlan:
    """Read every input from disk, then plan (the planning itself is pure). `git`: what
    build scripts' `git` answers; "checkout" reads it from the crate's repository
    (reproduce passes the lock's instead)."""
    flavor = get_flavor(flavor_name)
    toolchain_spec = load_toolchain(options.toolchain)
    crate = CrateView.from_options(options)
    plan = make_plan(
        options,
        flavor,
        toolchain=toolchain_spec,
        base=load_base_spec(),
        dockerfile=render_dockerfile(flavor, toolchain_spec),
        packages=image_packages(flavor, toolchain_spec),
        source=replace(
            crate_snapshot(crate), git=crate_git_facts(crate) if git == "checkout" else git
        ),
        inputs=pack_inputs(options.train_inputs),
        distros=load_distros(),
    )
    # Where the toolchain's CPU list is recorded, a misspelt CPU fails here, dry run included.
    check_recorded_cpu(
        plan.target_cpu, plan.rust_target, toolchain_spec.name, always_known=flavor.known_cpus
    )
    return plan


@dataclass(frozen=True)
class BuildOutcome:
    artifact: Path
    binary: Path
    manifest: BuildManifest


def run_build(
    options: Options,
    plan: BuildPlan,
    engine: Engine,
    reporter: Reporter,
    *,
    signer: Signer | None,
    keep_containers: bool = False,
    retrain: bool = False,
    step_cache: StepCacheUse = "use",
    unsigned_out: Path | None = None,
    cargo_jobs: int | None = None,
    profiles_from: Path | None = None,
) -> BuildOutcome:
    """Run the plan's steps and publish. `step_cache`: "use" skips a step whose outputs
    the step cache holds and stores what runs; "refresh" (release --force) runs every
    step and stores; "off" neither reads nor writes (reproduce uses "use" on a step cache of
    its own, empty when it starts).
    Without a `signer` the finished folder is moved, unsigned, into `unsigned_out`
    (`build --target`; `release assemble` signs and publishes it). `cargo_jobs`: cargo's
    share of the engine's cores when targets build side by side (CARGO_BUILD_JOBS).
    `profiles_from`: a profiles.tar trained elsewhere, merged in place of training here."""
    options = options.for_flavor(plan.flavor)  # what its plan was made with
    with ShieldedExitStack() as stack:
        pipeline = start_pipeline(
            stack,
            options,
            plan,
            engine,
            reporter,
            signer=signer,
            keep_containers=keep_containers,
            retrain=retrain or profiles_from is not None,  # never a stored profile then
            profiles_from=profiles_from,
            unsigned_out=unsigned_out,
            cargo_jobs=cargo_jobs,
            step_cache=None
            if step_cache == "off"
            else StepCache(options.cache_dir / "steps", read=step_cache == "use"),
        )
        run_steps(pipeline)
        published, manifest = pipeline.state.published, pipeline.state.manifest
        if published is None or manifest is None:
            raise StepFailedError(f"the plan for {plan.artifact_dir} has no publish step")
        return BuildOutcome(published, published / plan.binary, manifest)
    raise AssertionError("unreachable")  # pragma: no cover - ExitStack never swallows


def run_steps(
    pipeline: Pipeline,
    executors: Mapping[StepName, StepExecutor] = EXECUTORS,
    *,
    plan_steps: tuple[Step, ...] | None = None,  # the first steps only (--train-elsewhere)
) -> None:
    """Each step of the plan, in order; BOLT steps may give way under bolt.policy."""
    bolt_failed = False
    for step in pipeline.plan.steps if plan_steps is None else plan_steps:
        if step.name in BOLT_STEPS and bolt_failed:
            continue  # the earlier BOLT step's failure is recorded; nothing to optimize
        try:
            with pipeline.reporter.step(step.name, step.title) as log:
                executors[step.name](pipeline, log)
        except OrchestratorError as error:
            if step.name not in BOLT_STEPS:
                raise
            bolt_others.fall_back(pipeline, error)
            bolt_failed = True

"""`build --train-elsewhere DIR`: the plan's steps up to the instrumented build, then the
training bundle (execute/optimize/train_elsewhere.py writes it)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.config.resolve.options import Options
from orchestrator.errors import BundleError
from orchestrator.execute.build import run_steps
from orchestrator.execute.optimize.train_elsewhere import export_bundle
from orchestrator.execute.steps.pipeline import start_pipeline
from orchestrator.host.signals import ShieldedExitStack
from orchestrator.host.step_cache import StepCache
from orchestrator.model.documents.training_bundle import TrainingManifest
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.plan.steps import StepName
from orchestrator.progress.reporter import Reporter
from orchestrator.runtime.engine import Engine
from orchestrator.supply.attest import Signer


def run_training_export(
    options: Options,
    plan: BuildPlan,
    engine: Engine,
    reporter: Reporter,
    *,
    signer: Signer,
    dest: Path,
    keep_containers: bool = False,
) -> TrainingManifest:
    """The plan's steps up to the instrumented build (always built: a stored profile is
    not what a bundle is for), then the bundle."""
    options = options.for_flavor(plan.flavor)
    names = [step.name for step in plan.steps]
    if StepName.PGO_INSTRUMENT not in names:
        raise BundleError("--train-elsewhere needs PGO: this build has it off")
    upto = plan.steps[: names.index(StepName.PGO_INSTRUMENT) + 1]
    with ShieldedExitStack() as stack:
        pipeline = start_pipeline(
            stack,
            options,
            plan,
            engine,
            reporter,
            signer=signer,
            keep_containers=keep_containers,
            retrain=True,
            step_cache=StepCache(options.cache_dir / "steps", read=True),
        )
        run_steps(pipeline, plan_steps=upto)
        return export_bundle(pipeline, dest)
    raise AssertionError("unreachable")  # pragma: no cover - ExitStack never swallows

"""`orchestrator build`: one flavor built, tested, optimized and published; `build --target`
one target of the release, unsigned."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.cli.app import (
    ArtifactsOption,
    CacheOption,
    ConfigOption,
    FlavorOption,
    TargetCpuOption,
    ToolchainOption,
    app,
    console,
    err_console,
    resolve_options,
    setting_option,
    signer_for,
    styled,
)
from orchestrator.cli.output import emit_json, json_option
from orchestrator.config.init.run_files import ConfiguredRuns, run_hazards, run_problems
from orchestrator.config.resolve.options import LOCK_BLOCKER_HINT, lock_blocker
from orchestrator.errors import (
    ConfigError,
)

if TYPE_CHECKING:
    from orchestrator.config.resolve.options import Options
    from orchestrator.model.documents.records import BuildManifest
    from orchestrator.plan.build_plan import BuildPlan
    from orchestrator.progress.reporter import Reporter
    from orchestrator.runtime.engine import Engine
    from orchestrator.supply.attest import Signer


@app.command()
def build(
    ctx: typer.Context,
    flavor: FlavorOption = "cpu",
    config: ConfigOption = None,
    toolchain: ToolchainOption = None,
    target_cpu: TargetCpuOption = None,
    artifacts_dir: ArtifactsOption = None,
    cache_dir: CacheOption = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Print the plan as JSON (orchestrator/build-plan, "
            "schemas/build-plan-1.schema.json); build nothing.",
        ),
    ] = False,
    keep_containers: Annotated[
        bool, typer.Option("--keep-containers", help="Leave build containers behind for debugging.")
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose", "-v", help="Stream every command's output, not only the step lines."
        ),
    ] = False,
    pgo: Annotated[bool | None, setting_option("pgo.enabled")] = None,
    bolt: Annotated[bool | None, setting_option("bolt.enabled")] = None,
    bolt_mode: Annotated[str | None, setting_option("bolt.mode")] = None,
    bolt_policy: Annotated[str | None, setting_option("bolt.policy")] = None,
    privileged: Annotated[bool | None, setting_option("profiling.privileges")] = None,
    allow_privileged: Annotated[bool | None, setting_option("profiling.allow_privileged")] = None,
    gate: Annotated[str | None, setting_option("gate.policy")] = None,
    c_code: Annotated[str | None, setting_option("c_code.mode")] = None,
    glibc_floor: Annotated[str | None, setting_option("release.glibc_floor")] = None,
    distro_check: Annotated[str | None, setting_option("release.distro_check")] = None,
    retrain: Annotated[
        bool,
        typer.Option("--retrain", help="Profile again even when a stored profile matches."),
    ] = False,
    release_target: Annotated[
        str | None,
        typer.Option(
            "--target",
            metavar="NAME",
            help="Build one target of the release (a name from `release --dry-run`, e.g. "
            "linux-x86_64-cpu-v3) into an UNSIGNED folder under --out, for `release "
            "assemble` on the machine with the key. Its plan is the release's: the flavor, "
            "level and build options come from the config.",
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            metavar="DIR",
            help="With --target: where its folder goes (default: <artifacts>/targets).",
        ),
    ] = None,
    bench_runs: Annotated[
        int | None,
        typer.Option(
            "--bench-runs",
            min=0,
            metavar="N",
            help="With --target: quick runs for release.json's speedup column (0: skip; "
            "default: bench.runs where the config or environment sets it, else 3).",
        ),
    ] = None,
    train_elsewhere: Annotated[
        Path | None,
        typer.Option(
            "--train-elsewhere",
            metavar="DIR",
            help="Stop after the instrumented build and write a signed training bundle "
            "into DIR (a new folder): run `sh train.sh` in a copy of it on a machine of the "
            "target's architecture, then build with --profiles.",
        ),
    ] = None,
    profiles: Annotated[
        Path | None,
        typer.Option(
            "--profiles",
            metavar="FILE",
            help="Merge the profiles.tar a bundle's train.sh wrote instead of training "
            "here, then finish the build; build.json says where it was trained.",
        ),
    ] = None,
    json_output: Annotated[
        bool, json_option("orchestrator/build-plan", when="with --dry-run only")
    ] = False,
) -> None:
    """Build, test, optimize (PGO, BOLT), validate and publish one flavor into artifacts/.

    With --target, build one target of the release on this machine (a CI runner) into an
    unsigned folder; `orchestrator release assemble` checks, signs and publishes the
    folders of every target on the one machine that holds the signing key.

    \b
    Examples:
      orchestrator build --flavor cpu --target-cpu x86-64-v3
      orchestrator build --bolt-mode instrument --bolt-policy require
      orchestrator build --no-pgo --no-bolt     # the plain release profile only
      orchestrator build --target linux-x86_64-cpu-v3 --out targets/
    """
    from orchestrator.execute.build import prepare_plan, run_build
    from orchestrator.host.cachedir import ensure_cache_dir
    from orchestrator.host.step_times import earlier_step_seconds
    from orchestrator.model.documents.reports import BuildPlanReport
    from orchestrator.model.verdict.gate_table import gate_splits
    from orchestrator.plan.serialize import plan_summary
    from orchestrator.progress.reporter import Reporter
    from orchestrator.runtime.engine import Engine
    from orchestrator.supply.chain import check_signing_key

    overrides: dict[str, object] = {  # what changes the plan (refused with --target)
        "build.toolchain": toolchain,
        "build.target_cpu": target_cpu,
        "pgo.enabled": pgo,
        "bolt.enabled": bolt,
        "bolt.mode": bolt_mode,
        "bolt.policy": bolt_policy,
        "profiling.privileges": privileged,
        "profiling.allow_privileged": allow_privileged,
        "gate.policy": gate,
        "c_code.mode": c_code,
        "release.glibc_floor": glibc_floor,
        "release.distro_check": distro_check,
    }
    if json_output and not dry_run:
        raise ConfigError(
            "--json goes with --dry-run: a build prints its steps, and writes build.json",
            hint="orchestrator build --dry-run --json prints the plan as one JSON document.",
        )
    _refuse_training_mix(train_elsewhere, profiles, release_target, dry_run=dry_run)
    if release_target is not None:
        changed = [key for key, value in overrides.items() if value is not None]
        source = ctx.get_parameter_source("flavor")
        if source is not None and source.name != "DEFAULT":
            changed.insert(0, "flavor")
        if changed:
            raise ConfigError(
                f"--target builds the release's own plan; {', '.join(changed)} would change it",
                hint="Set them in the config file, or build without --target.",
            )
        _build_release_target(
            config,
            artifacts_dir,
            cache_dir,
            release_target,
            out,
            bench_runs=bench_runs,
            retrain=retrain,
            dry_run=dry_run,
        )
        return
    if out is not None:
        raise ConfigError(
            "--out goes with --target", hint="--artifacts-dir sets where a build goes."
        )
    options = resolve_options(
        config,
        {**overrides, "build.artifacts_dir": artifacts_dir, "build.cache_dir": cache_dir},
    )
    plan = prepare_plan(options, flavor)
    blocker = lock_blocker(options.crate_dir, options.project_dir, options.config_path.name)
    if blocker:  # a build needs no lock, but `release` and `lock` of this setup would fail
        err_console.print(styled("warning:", "yellow bold", f" cannot be locked: {blocker}"))
    # init's placeholders, files nobody provides
    for problem in run_problems(ConfiguredRuns.from_options(options)):
        err_console.print(styled("warning:", "yellow bold", f" {problem}"))
    for hazard in run_hazards(options, [flavor]):  # interactive, a GPU it lacks, sampling
        err_console.print(styled("warning:", "yellow bold", f" {hazard}"))
    if dry_run:
        emit_json(BuildPlanReport.model_validate(plan_summary(plan)))
        return
    ensure_cache_dir(options.cache_dir)
    signer = signer_for(options)  # reads the key: every input before Docker
    check_signing_key(options.artifacts_dir / plan.release_dir, signer.key.public)
    engine = Engine.connect()
    stale = engine.remove_stale_containers() + engine.remove_stale_volumes()
    if stale:
        console.print(f"removed {stale} container(s)/volume(s) left by an earlier run")
    reporter = Reporter(
        console,
        options.cache_dir / "runs" / engine.session,
        verbose=verbose,
        plan_steps=[step.name for step in plan.steps],
        estimates=earlier_step_seconds(options.artifacts_dir, flavor),
    )
    if _wrote_bundle(options, plan, (engine, reporter, signer), train_elsewhere, profiles):
        return
    console.print(
        f"building {options.binary} {options.version} ({flavor}, "
        f"{plan.toolchain.name}, target-cpu {plan.target_cpu}); "
        f"logs: {reporter.log_dir}"
    )
    outcome = run_build(
        options,
        plan,
        engine,
        reporter,
        signer=signer,
        keep_containers=keep_containers,
        retrain=retrain,
        profiles_from=profiles,
    )
    console.print(styled("published", "bold green", f" {outcome.artifact}"))
    console.print(f"  binary  {outcome.binary}")
    console.print(f"  ships   {shipped_description(outcome.manifest)}")
    for split in gate_splits(outcome.manifest.gate):  # a loss the gate's mean hides
        console.print(f"  gate    {split} (build.json: gate.per_workload)", markup=False)
    console.print(f"  verify  cd {outcome.artifact} && sha256sum -c SHA256SUMS")


def _refuse_training_mix(
    train_elsewhere: Path | None, profiles: Path | None, target: str | None, *, dry_run: bool
) -> None:
    given = [flag for flag, value in (("--train-elsewhere", train_elsewhere), ("--profiles",
             profiles)) if value is not None]  # fmt: skip
    if not given:
        return
    if len(given) == 2:
        raise ConfigError(
            "--train-elsewhere writes a bundle; --profiles brings back what it trained",
            hint="Run them as two builds: first --train-elsewhere DIR, then --profiles FILE.",
        )
    if target is not None or dry_run:
        raise ConfigError(f"{given[0]} goes with neither --target nor --dry-run")
    if profiles is not None and not profiles.is_file():
        raise ConfigError(f"--profiles {profiles}: no such file")


def _wrote_bundle(
    options: Options,
    plan: BuildPlan,
    run_with: tuple[Engine, Reporter, Signer],
    dest: Path | None,
    profiles: Path | None,
) -> bool:
    """`--train-elsewhere DIR`: the bundle written (True); `--profiles` checked for PGO."""
    from orchestrator.execute.train_export import run_training_export

    if profiles is not None and plan.pgo is None:
        raise ConfigError("--profiles needs PGO: this build has it off", hint="Drop --no-pgo.")
    if dest is None:
        return False
    engine, reporter, signer = run_with
    manifest = run_training_export(options, plan, engine, reporter, signer=signer, dest=dest)
    console.print(styled("bundle", "bold green", f" {dest} ({manifest.arch})"))
    console.print(f"  train   copy it to a Linux machine ({manifest.arch}) and run: sh train.sh")
    console.print(
        f"  then    orchestrator build --flavor {plan.flavor} --profiles <copy>/profiles.tar"
    )
    return True


def shipped_description(manifest: BuildManifest) -> str:
    """Which variant the binary is, and why: the speed gate's pick or the plan's last."""
    gate = manifest.gate
    made_with = ", ".join(manifest.artifact.optimizations) or "the release profile"
    if gate is not None and gate.shipped:
        return f"{gate.shipped} (the speed gate's pick; built with {made_with})"
    why = f", gate skipped: {gate.skipped}" if gate is not None and gate.skipped else ""
    return f"the most optimized variant ({made_with}{why})"


def _build_release_target(
    config: Path | None,
    artifacts_dir: Path | None,
    cache_dir: Path | None,
    name: str,
    out: Path | None,
    *,
    bench_runs: int | None,
    retrain: bool,
    dry_run: bool,
) -> None:
    """`build --target NAME`: the release's plan for that target, built unsigned."""
    from orchestrator.cli.release_common import quick_bench_runs
    from orchestrator.host.cachedir import ensure_cache_dir
    from orchestrator.model.documents.reports import BuildPlanReport
    from orchestrator.plan.serialize import plan_summary
    from orchestrator.release.assemble.shard import build_target_folder, pick_target
    from orchestrator.release.run import plan_targets
    from orchestrator.release.targets.target import targets
    from orchestrator.runtime.engine import Engine

    options = resolve_options(
        config, {"build.artifacts_dir": artifacts_dir, "build.cache_dir": cache_dir}
    )
    chosen = targets(options, list(options.flavors))
    blocker = lock_blocker(options.crate_dir, options.project_dir, options.config_path.name)
    if blocker:  # assemble writes release.lock from this folder's pins: refuse before work
        raise ConfigError(f"cannot build a release target: {blocker}", hint=LOCK_BLOCKER_HINT)
    target, plan = pick_target(plan_targets(chosen), name)
    if dry_run:
        emit_json(BuildPlanReport.model_validate(plan_summary(plan)))
        return
    ensure_cache_dir(options.cache_dir)
    destination = out if out is not None else options.artifacts_dir / "targets"
    engine = Engine.connect()
    console.print(
        f"building {plan.artifact_dir} (target-cpu {plan.target_cpu}) unsigned into {destination}"
    )
    folder = build_target_folder(
        target,
        plan,
        engine,
        console,
        destination,
        bench_runs=quick_bench_runs(
            bench_runs,
            configured=options.bench_runs,
            source=options.sources.get("bench.runs", "default"),
        ),
        retrain=retrain,
        force=False,
    )
    console.print(styled("built", "bold green", f" {folder} (unsigned)"))
    console.print(
        "  next    orchestrator release assemble <every target's folder>  (where the key is)"
    )

"""`orchestrator release`: every target, then the pins (`lock` alone: cli/lock.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.cli.app import (
    INTERRUPTED,
    AllowDirtyOption,
    App,
    ArtifactsOption,
    CacheOption,
    ConfigOption,
    app,
    err_console,
    resolve_options,
    setting_option,
    sign_release_index,
    signer_for,
    styled,
)
from orchestrator.cli.complete import complete_flavor_list
from orchestrator.cli.output import emit_json, json_option, text_console
from orchestrator.cli.release_common import (
    closing_lines,
    connect_engines,
    dirty_files,
    quick_bench_runs,
    refuse_dirty,
)
from orchestrator.config.init.run_files import ConfiguredRuns, check_runs, run_hazards
from orchestrator.config.resolve.options import LOCK_BLOCKER_HINT, lock_blocker
from orchestrator.errors import (
    ConfigError,
    OrchestratorError,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from rich.console import Console

    from orchestrator.model.documents.release_summary import EngineJobs
    from orchestrator.plan.build_plan import BuildPlan
    from orchestrator.release.targets.release_view import ReleaseView
    from orchestrator.release.targets.target import Target, TargetResult
    from orchestrator.supply.attest import Signer


release_app = App(no_args_is_help=False)
app.add_typer(release_app, name="release")


@release_app.group_command()
def release(
    ctx: typer.Context,
    config: ConfigOption = None,
    flavors: Annotated[
        str | None,
        typer.Option(
            "--flavors",
            help="Comma-separated flavors, e.g. cpu,cuda (default: build.flavors from the config).",
            metavar="LIST",
            autocompletion=complete_flavor_list,
        ),
    ] = None,
    artifacts_dir: ArtifactsOption = None,
    cache_dir: CacheOption = None,
    engines: Annotated[str | None, setting_option("engines.contexts")] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run", help="Print the plan (targets, images, steps, cache hits); build nothing."
        ),
    ] = False,
    bench_runs: Annotated[
        int | None,
        typer.Option(
            "--bench-runs",
            min=0,
            metavar="N",
            help="Quick interleaved runs per target for the speedup column (0: skip; "
            "default: bench.runs where the config or environment sets it, else 3).",
        ),
    ] = None,
    retrain: Annotated[
        bool, typer.Option("--retrain", help="Profile again everywhere (and build every target).")
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Build every target, even one whose published artifact is current (same "
            "inputs, binaries and signatures intact), which is otherwise reported as cached; "
            "and run every step, none taken from the step cache (what runs is stored again).",
        ),
    ] = False,
    allow_dirty: AllowDirtyOption = False,
    rebuild_on: Annotated[
        str | None,
        typer.Option(
            "--rebuild-on",
            help="Build every target a second time on this Docker context, with a cache of "
            "its own, and sign only what both builds gave byte for byte (exit 77 otherwise).",
            metavar="CONTEXT",
        ),
    ] = None,
    rebuild_cache_dir: Annotated[
        Path | None,
        typer.Option(
            "--rebuild-cache-dir",
            help="The second build's cache (default: beside the cache, <cache>-rebuild).",
            metavar="DIR",
        ),
    ] = None,
    json_output: Annotated[
        bool,
        json_option(
            "orchestrator/release-run",
            when="with --dry-run orchestrator/release-plan, schemas/release-plan-*.schema.json",
        ),
    ] = False,
) -> None:
    """Build every flavor and CPU level of the release, then one summary.

    Targets come from build.flavors and each flavor's levels (e.g. [flavors.cpu] levels =
    ["x86-64-v2", "x86-64-v3"]). A failed target does not stop the others; the exit code
    is 0 only if all succeeded. Writes release.json next to the artifacts, and
    release.lock, which pins every input (their files go into the vault) so that
    `orchestrator reproduce` can rebuild the same bytes.

    A target whose published artifact is current (the same inputs, hashed: sources, lock,
    toolchain, image, flags, profiles, settings; its binaries and signatures intact) is not
    built again: it shows as `cached`. --force builds it anyway. Within a build, a step
    whose inputs are unchanged (today the plain baseline build, shared by targets that
    differ only in CPU level) is taken from the step cache (<cache>/steps); --force runs
    it again.

    Across CI runners: `orchestrator build --target NAME` builds each target unsigned on
    its own machine, and `orchestrator release assemble FOLDER...` signs and publishes them
    on the one that holds the key (`orchestrator ci github` writes that workflow).

    Two builders: --rebuild-on CONTEXT builds every target again on another Docker engine
    with a cache of its own and signs a target only when both builds shipped the same
    bytes; otherwise nothing is signed and the first differing file and offset are named.

    \b
    Examples:
      orchestrator release --dry-run     # the plan, and which targets are cached
      orchestrator release --flavors cpu --bench-runs 0
      orchestrator release --force       # build every target again
      orchestrator release assemble targets/*
      orchestrator release --rebuild-on buildbox   # a second engine must agree
    """
    if ctx.invoked_subcommand is not None:
        return
    from orchestrator.cli.release_table import release_table
    from orchestrator.host.cachedir import ensure_cache_dir
    from orchestrator.release.ending import changed_note
    from orchestrator.release.run import ReleaseIncompleteError, incomplete_hint, run_report
    from orchestrator.release.targets.release_view import ReleaseView
    from orchestrator.release.targets.target import targets
    from orchestrator.supply.chain import check_signing_key

    started = time.monotonic()
    out = text_console(json_output)
    options = resolve_options(
        config,
        {
            "build.artifacts_dir": artifacts_dir,
            "build.cache_dir": cache_dir,
            "engines.contexts": engines,
        },
    )
    release = ReleaseView.from_options(options)  # what the release's rooms read of them
    names = [f for f in flavors.split(",") if f] if flavors else list(options.flavors)
    chosen = targets(options, names)
    runs = quick_bench_runs(
        bench_runs,
        configured=options.bench_runs,
        source=options.sources.get("bench.runs", "default"),
    )
    blocker = lock_blocker(options.crate_dir, options.project_dir, options.config_path.name)
    if blocker and not dry_run:  # a release always writes release.lock: refuse before work
        raise ConfigError(f"cannot release: {blocker}", hint=LOCK_BLOCKER_HINT)
    if blocker:
        err_console.print(styled("warning:", "yellow bold", f" a release would fail: {blocker}"))
    check_runs(  # placeholders of `init`, files nobody provides: refused before work
        ConfiguredRuns.from_options(options),
        refuse=not dry_run,
        warn=lambda text: err_console.print(
            styled("warning:", "yellow bold", f" a release would fail: {text}")
        ),
    )
    for hazard in run_hazards(options, names):  # interactive, a GPU it lacks, sampling
        err_console.print(styled("warning:", "yellow bold", f" {hazard}"))
    if dry_run:
        changed = [] if allow_dirty else dirty_files(release.crate)
        if changed:
            err_console.print(
                styled(
                    "warning:",
                    "yellow bold",
                    f" a release would refuse: uncommitted changes ({', '.join(changed[:5])}); "
                    "commit them or pass --allow-dirty",
                )
            )
        from orchestrator.cli.release_plan import print_plan

        print_plan(release, chosen, json_output=json_output)
        return
    refuse_dirty(release.crate, allow_dirty=allow_dirty)
    if rebuild_on is not None:
        from orchestrator.cli.rebuild import release_rebuilt

        release_rebuilt(
            options,
            chosen,
            rebuild_on,
            rebuild_cache_dir,
            bench_runs=runs,
            retrain=retrain,
            force=force,
        )
        return
    plans = _read_inputs(chosen, release.release_dir)
    ensure_cache_dir(release.cache_dir)
    signer = signer_for(options)
    check_signing_key(release.release_dir, signer.key.public)  # before hours of building
    results, lock, changed, unpinned, jobs = _run_and_pin(
        release,
        chosen,
        plans,
        out,
        signer,
        retrain=retrain,
        bench_runs=runs,
        force=force,
    )
    out.print(release_table(results, f"release {release.binary} {release.version}", out.width))
    for result in results:
        for warning in result.warnings:
            err_console.print(styled("warning:", "bold yellow", f" {result.artifact}: {warning}"))
    report = run_report(
        release, results, signer, seconds=time.monotonic() - started, lockfile=lock, jobs=jobs
    )
    if json_output:
        emit_json(report)
    notes = (
        [changed_note(changed, locked=lock is not None, failed=bool(report.failed))]
        if changed
        else []
    )
    closing_lines(report, out, notes, unpinned=unpinned.message if unpinned else None)
    failed = report.failed
    if failed:
        raise ReleaseIncompleteError(
            f"{len(failed)} of {len(results)} targets failed: " + ", ".join(failed),
            hint=incomplete_hint(results),  # a failed `cargo test`: the args that skip it
        )
    if unpinned is not None:  # published, but not pinned: the lock's own error and code
        raise unpinned


def _run_and_pin(
    release: ReleaseView,
    chosen: Sequence[Target],
    plans: Sequence[tuple[Target, BuildPlan]],
    out: Console,
    signer: Signer,
    *,
    retrain: bool,
    bench_runs: int,
    force: bool,
) -> tuple[list[TargetResult], Path | None, list[str], OrchestratorError | None, list[EngineJobs]]:
    """Build every target, then pin what was published in release.lock: the results, the
    lock (None: not written), the crate's files that changed while it ran, why the lock
    could not be written (said after the summary, not in place of it), and how many targets
    each engine built at a time. Stopped (Ctrl-C, SIGTERM, SIGHUP), it ends saying what
    was published and whether the lock was written."""
    from orchestrator.model.documents.lockfile import LOCK_FILE
    from orchestrator.release.ending import files_text, interrupted, published_marks
    from orchestrator.release.lock.reproduce import record_release, vault_for
    from orchestrator.release.run import run_release
    from orchestrator.release.targets.engine_jobs import jobs_per_engine
    from orchestrator.release.targets.sources_at_start import changed_since_start, sources_at_start

    release_dir = release.release_dir
    # What the ending says is found out, not assumed: what was published before, and the
    # sources every target is built from (the lock pins those, whatever changes meanwhile).
    marks = published_marks(release_dir, [plan.artifact_dir for _, plan in plans])
    at_start = sources_at_start(release.crate, plans[0][1]) if plans else None
    try:
        engines = connect_engines(release.engines.contexts)
        jobs = jobs_per_engine(
            release.engines.jobs, engines, len(plans), prefetch=release.engines.prefetch
        )
        results = run_release(
            release,
            plans,
            engines,
            out,
            signer,
            retrain=retrain,
            bench_runs=bench_runs,
            announce=out.print,
            force=force,
            jobs=jobs,
        )
        lock, unpinned = None, None
        changed = changed_since_start(release.crate, at_start) if at_start else []
        if changed:
            err_console.print(
                styled("warning:", "yellow bold", f" the crate changed: {files_text(changed)}")
            )
        if any(r.status in ("ok", "cached") for r in results):
            try:
                lock = record_release(
                    release,
                    chosen,
                    release_dir,
                    vault_for(release.cache_dir),
                    planned=plans,
                    at_start=at_start,
                )
            except OrchestratorError as error:
                unpinned = error
            else:
                sign_release_index(release_dir, signer, vouched=(LOCK_FILE,))  # covers the lock
                out.print(
                    f"pinned every input in {lock} (files in {vault_for(release.cache_dir).root})"
                )
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM, SIGHUP: cleanup has run; say what stays
        INTERRUPTED.set()
        raise interrupted(release_dir, marks) from None
    return results, lock, changed, unpinned, jobs


def _read_inputs(chosen: Sequence[Target], release_dir: Path) -> list[tuple[Target, BuildPlan]]:
    """Read and check every input of a release before Docker is asked: each target's plan
    (config, toolchain, sources) and the release.json this run will merge into."""
    from orchestrator.model.documents.record_io import read_record
    from orchestrator.model.documents.release_summary import ReleaseSummary
    from orchestrator.release.run import RELEASE_JSON, plan_targets

    planned = plan_targets(chosen)
    if (release_dir / RELEASE_JSON).is_file():
        read_record(release_dir / RELEASE_JSON, ReleaseSummary)
    return planned

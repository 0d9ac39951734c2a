"""`orchestrator release` and `orchestrator lock`: every target, then the pins."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from orchestrator.cli.app import (
    AllowDirtyOption,
    ArtifactsOption,
    CacheOption,
    ConfigOption,
    app,
    console,
    err_console,
    resolve_options,
    signer_for,
)
from orchestrator.config.options import Options
from orchestrator.errors import (
    OrchestratorError,
)


@app.command()
def release(
    config: ConfigOption = None,
    flavors: Annotated[
        str | None,
        typer.Option(
            "--flavors", help="Comma-separated flavors (default: build.flavors from the config)."
        ),
    ] = None,
    artifacts_dir: ArtifactsOption = None,
    cache_dir: CacheOption = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run", help="Print the plan (targets, images, steps, cache hits); build nothing."
        ),
    ] = False,
    bench_runs: Annotated[
        int,
        typer.Option(
            "--bench-runs",
            min=0,
            help="Quick interleaved runs per target for the speedup column (0: skip).",
        ),
    ] = 3,
    retrain: Annotated[bool, typer.Option("--retrain", help="Profile again everywhere.")] = False,
    allow_dirty: AllowDirtyOption = False,
) -> None:
    """Build every flavor and CPU level of the release, then one summary.

    Targets come from build.flavors and each flavor's levels (e.g. [flavors.cpu] levels =
    ["x86-64-v2", "x86-64-v3"]). A failed target does not stop the others; the exit code
    is 0 only if all succeeded. Writes release.json next to the artifacts, and
    release.lock, which pins every input (their files go into the vault) so that
    `orchestrator reproduce` can rebuild the same bytes.

    Examples:
      orchestrator release --dry-run
      orchestrator release --flavors cpu --bench-runs 0
    """
    from orchestrator.host.cachedir import ensure_cache_dir
    from orchestrator.model.layout import release_dir_name
    from orchestrator.release.reproduce import record_release, vault_for
    from orchestrator.release.run import ReleaseIncompleteError, run_release, targets
    from orchestrator.release.run import dry_run as plan_release
    from orchestrator.runtime.engine import Engine
    from orchestrator.supply.attest import update_release_index

    options = resolve_options(
        config, {"build.artifacts_dir": artifacts_dir, "build.cache_dir": cache_dir}
    )
    names = [f for f in flavors.split(",") if f] if flavors else list(options.flavors)
    chosen = targets(options, names)
    if dry_run:
        try:
            engine: Engine | None = Engine.connect()
        except OrchestratorError:
            engine = None  # the plan needs no Docker; cache hits then say "unknown"
        table = Table(
            "target",
            "artifact",
            "image",
            "cached",
            "steps",
            title="release plan (nothing is built)",
        )
        for item in plan_release(options, chosen, engine):
            hits = ", ".join(k for k, v in item.cached.items() if v) or "nothing"
            table.add_row(
                f"{item.target.flavor} {item.target.level}",
                item.plan.artifact_dir,
                item.plan.image.reference,
                hits if engine else f"{hits} (Docker not reachable)",
                " ".join(s.name for s in item.plan.steps),
            )
        console.print(table)
        return
    _refuse_dirty(options, allow_dirty=allow_dirty)
    release_dir = options.artifacts_dir / release_dir_name(options.binary, options.version)
    ensure_cache_dir(options.cache_dir)
    engine = Engine.connect()
    signer = signer_for(options)
    results = run_release(
        options,
        chosen,
        engine,
        console,
        signer,
        retrain=retrain,
        bench_runs=bench_runs,
        announce=console.print,
    )
    if any(r.status == "ok" for r in results):
        lock = record_release(options, chosen, release_dir, vault_for(options))
        update_release_index(release_dir, signer)  # SHA256SUMS now covers the lock
        console.print(f"pinned every input in {lock} (files in {vault_for(options).root})")
    table = Table(
        "target",
        "status",
        "time",
        "size",
        "speedup",
        "notes",
        title=f"release {options.binary} {options.version}",
    )
    for result in results:
        status = "[green]ok[/]" if result.status == "ok" else f"[red]{result.status}[/]"
        table.add_row(
            result.artifact,
            status,
            f"{result.seconds:.0f}s",
            f"{result.size / 1e6:.2f} MB" if result.size else "-",
            f"{result.speedup:.3f}x" if result.speedup else "-",
            "; ".join([result.error, *result.warnings]).strip("; "),
        )
    console.print(table)
    for result in results:
        for warning in result.warnings:
            err_console.print(f"[bold yellow]warning:[/] {result.artifact}: {warning}")
    failed = [r.artifact for r in results if r.status != "ok"]
    if failed:
        raise ReleaseIncompleteError(
            f"{len(failed)} of {len(results)} targets failed: " + ", ".join(failed)
        )


def _refuse_dirty(options: Options, *, allow_dirty: bool) -> None:
    from orchestrator.errors import SourceError
    from orchestrator.host.system import source_identity

    if source_identity(options.crate_dir).get("dirty") and not allow_dirty:
        raise SourceError(
            f"{options.crate_dir} has uncommitted changes: the release could not be "
            "reproduced from its git commit",
            hint="Commit them, or pass --allow-dirty (release.lock records it).",
        )


@app.command()
def lock(
    config: ConfigOption = None,
    artifacts_dir: ArtifactsOption = None,
    cache_dir: CacheOption = None,
    check: Annotated[
        bool,
        typer.Option(
            "--check", help="Only compare release.lock with the config and sources (exit 54)."
        ),
    ] = False,
    allow_dirty: AllowDirtyOption = False,
) -> None:
    """Pin every input of the published release into release.lock and the vault.

    `orchestrator release` does this itself; run `lock` to re-pin a release built target
    by target with `orchestrator build`. The lockfile (JSON, schema orchestrator/lock@1)
    records the rootfs, every Debian package of every image (name, version, architecture,
    sha256), toolchain versions as the tools reported them, the git commit, Cargo.lock and
    vendored crates, every flag and environment variable, and the profiles by sha256.

    Examples:
      orchestrator lock
      orchestrator lock --check      # in CI: has anything drifted from the lock?
    """
    from orchestrator.model.layout import release_dir_name
    from orchestrator.model.lockfile import LOCK_FILE, LockDriftError, read_lock
    from orchestrator.release.reproduce import check_lock, record_release, vault_for
    from orchestrator.release.run import targets
    from orchestrator.supply.attest import update_release_index

    options = resolve_options(
        config, {"build.artifacts_dir": artifacts_dir, "build.cache_dir": cache_dir}
    )
    release_dir = options.artifacts_dir / release_dir_name(options.binary, options.version)
    chosen = targets(options, list(options.flavors))
    if check:
        changes = check_lock(options, read_lock(release_dir / LOCK_FILE), chosen)
        if changes:
            for change in changes:
                console.print(f"  {change}")
            raise LockDriftError(
                f"{release_dir / LOCK_FILE} no longer matches: {len(changes)} difference(s)"
            )
        console.print(f"{release_dir / LOCK_FILE} matches the config and the sources")
        return
    _refuse_dirty(options, allow_dirty=allow_dirty)
    path = record_release(options, chosen, release_dir, vault_for(options))
    update_release_index(release_dir, signer_for(options))
    console.print(f"wrote {path}")

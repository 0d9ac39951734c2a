"""`render`, `config`, `doctor`, `clean`: the project, the host, the leftovers."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from orchestrator.cli.app import (
    ConfigOption,
    app,
    console,
    resolve_options,
)
from orchestrator.errors import (
    DoctorBlockerError,
    OrchestratorError,
)


@app.command()
def render(
    check: Annotated[
        bool,
        typer.Option(
            "--check", help="Fail (exit 50) when committed Dockerfiles differ from the templates."
        ),
    ] = False,
) -> None:
    """Render dockerfiles/<flavor>.Dockerfile from images/templates/ (default toolchain).

    Example: orchestrator render --check   # in CI, after editing a template
    """
    from orchestrator.plan.dockerfiles import render_all

    results = render_all(check=check)
    for result in results:
        state = "up to date" if not result.changed else ("stale" if check else "written")
        console.print(f"{result.path}: {state}")


@app.command("config")
def show_config(config: ConfigOption = None) -> None:
    """Show every resolved setting and where it came from (default, file, env, flag).

    Example: ORCHESTRATOR_TARGET_CPU=x86-64-v3 orchestrator config
    """
    options = resolve_options(config)
    table = Table("setting", "value", "from", title=str(options.config_path))
    for key, value, source in options.describe():
        table.add_row(key, value, source)
    console.print(table)


@app.command()
def doctor(config: ConfigOption = None) -> None:
    """Check this host: Docker, BuildKit, disk, privileges, perf in containers, qemu-user.

    Example: orchestrator doctor   # exit code 60 when something blocks builds
    """
    from orchestrator.runtime.doctor import run_checks

    try:
        cache_dir: Path | None = resolve_options(config).cache_dir
    except OrchestratorError:
        cache_dir = None  # doctor also helps before any project is set up
    checks = run_checks(cache_dir)
    table = Table("check", "status", "detail")
    colours = {"ok": "green", "warn": "yellow", "fail": "red", "info": "cyan"}
    for check in checks:
        table.add_row(check.name, f"[{colours[check.status]}]{check.status}[/]", check.detail)
    console.print(table)
    blockers = [c.name for c in checks if c.status == "fail"]
    if blockers:
        raise DoctorBlockerError(
            f"blocked by: {', '.join(blockers)}",
            hint="Fix the failing checks above and run `orchestrator doctor` again.",
        )


@app.command()
def clean(
    config: ConfigOption = None,
    images: Annotated[
        bool,
        typer.Option(
            "--images", help="Also remove every orchestrator image (they are rebuilt on demand)."
        ),
    ] = False,
    cache: Annotated[
        bool,
        typer.Option(
            "--cache",
            help="Also empty the host cache (rootfs, .debs, crates, logs); the vault stays. "
            "Refused (exit 12) for a folder that is not orchestrator's cache.",
        ),
    ] = False,
    everything: Annotated[
        bool,
        typer.Option(
            "--all",
            help="Remove every labelled container and volume, also those of builds still "
            "running: this KILLS running builds. Default: only those whose process is gone.",
        ),
    ] = False,
) -> None:
    """Remove leftover containers, volumes and staging folders; optionally images and cache.

    Containers and volumes of a build that is still running (its process is alive) are
    kept unless --all is given.

    Example: orchestrator clean --images
    """
    from orchestrator.host.cachedir import CACHE_MARKER, check_cache_dir, ensure_cache_dir
    from orchestrator.host.staging import _remove_abandoned as remove_abandoned
    from orchestrator.host.staging import staging_root
    from orchestrator.runtime.engine import Engine

    options = resolve_options(config)
    if cache:
        check_cache_dir(options.cache_dir)  # before anything is removed
    engine = Engine.connect()
    if everything:
        managed = engine.managed_containers()
        for container in managed:
            container.remove(force=True)
        containers, volumes = len(managed), engine.remove_managed_volumes()
    else:
        containers, volumes = engine.remove_leftovers()
    console.print(f"removed {containers} container(s) and {volumes} volume(s)")
    staging = staging_root(options.artifacts_dir)
    if staging.exists() and everything:
        shutil.rmtree(staging)
        console.print(f"removed {staging}")
    elif staging.exists():
        remove_abandoned(staging)  # a running build's staging folder stays
        console.print(f"removed abandoned staging folders in {staging}")
    if images:
        removed = engine.managed_images()
        for image in removed:
            engine.remove_image(image.id)
        console.print(
            f"removed {len(removed)} image(s), {sum(i.size for i in removed) / 1e9:.1f} GB"
        )
    if cache and options.cache_dir.exists():
        ensure_cache_dir(options.cache_dir)  # marks a cache made before markers existed
        # The vault holds what past releases need to be reproduced: not a cache to empty.
        for entry in options.cache_dir.iterdir():
            if entry.name not in ("vault", CACHE_MARKER):
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
        console.print(f"emptied {options.cache_dir} (kept vault/)")

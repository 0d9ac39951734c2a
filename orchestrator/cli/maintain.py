"""`render`, `config`, `doctor`, `clean`: the project, the host, the leftovers."""

from __future__ import annotations

import shlex
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table
from rich.text import Text

from orchestrator.cli.app import (
    ConfigOption,
    app,
    cache_root,
    console,
    resolve_options,
    setting_option,
    styled,
)
from orchestrator.cli.output import emit_json, json_option
from orchestrator.errors import (
    DoctorBlockerError,
    OrchestratorError,
)

if TYPE_CHECKING:
    from orchestrator.runtime.doctor import Check


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

    Works on the checkout of orchestrator around the working directory; outside one,
    --check checks the copy an installed orchestrator carries.

    \b
    Examples:
      orchestrator render
      orchestrator render --check     # in CI, after editing a template
    """
    from orchestrator.plan.dockerfiles import render_all

    results = render_all(check=check)
    for result in results:
        state = "up to date" if not result.changed else ("stale" if check else "written")
        console.print(f"{result.path}: {state}")


@app.command("config")
def show_config(
    config: ConfigOption = None,
    json_output: Annotated[bool, json_option("orchestrator/config")] = False,
) -> None:
    """Show every resolved setting and where it came from (default, file, env, flag).

    \b
    Examples:
      orchestrator config
      ORCHESTRATOR_BUILD_TARGET_CPU=x86-64-v3 orchestrator config --config other.toml
    """
    options = resolve_options(config)
    if json_output:
        from orchestrator.model.documents.reports import config_report

        emit_json(config_report(options))
        return
    table = Table("setting", "value", "from", title=str(options.config_path))
    for key, value, source in options.describe():
        table.add_row(key, value, source)
    console.print(table)


@app.command()
def doctor(
    config: ConfigOption = None,
    allow_privileged: Annotated[
        bool | None,
        setting_option(
            "profiling.allow_privileged",
            "let the perf probe try a --privileged container as its last resort, as a build "
            "with this setting would",
        ),
    ] = None,
    json_output: Annotated[bool, json_option("orchestrator/doctor")] = False,
) -> None:
    """Check this host: Docker, BuildKit, disk, privileges, perf in containers, qemu-user.

    \b
    Examples:
      orchestrator doctor     # exit code 60 when something blocks builds
    """
    from orchestrator.runtime.doctor import run_checks

    try:
        options = resolve_options(config, {"profiling.allow_privileged": allow_privileged})
        cache_dir, allowed = options.cache_dir, options.profiling_allow_privileged
    except OrchestratorError:
        cache_dir = cache_root(None)  # doctor also helps before any project is set up
        allowed = bool(allow_privileged)
    checks = run_checks(cache_dir, allow_privileged=allowed)
    blockers = [c.name for c in checks if c.status == "fail"]
    if json_output:  # the blocker error still follows, on stderr, with its exit code
        from orchestrator.model.documents.reports import DoctorCheck, DoctorReport

        emit_json(
            DoctorReport(
                ok=not blockers,
                blockers=blockers,
                checks=[DoctorCheck(name=c.name, status=c.status, detail=c.detail) for c in checks],
            )
        )
    else:
        _print_checks(checks)
    if blockers:
        raise DoctorBlockerError(
            f"blocked by: {', '.join(blockers)}",
            hint="Fix the failing checks above and run `orchestrator doctor` again.",
        )


def _print_checks(checks: Sequence[Check]) -> None:
    table = Table("check", "status", "detail")
    colours = {"ok": "green", "warn": "yellow", "fail": "red", "info": "cyan", "skip": "dim"}
    for check in checks:
        table.add_row(check.name, Text(check.status, style=colours[check.status]), check.detail)
    console.print(table)


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

    \b
    Examples:
      orchestrator clean
      orchestrator clean --images --cache
    """
    from orchestrator.host.cachedir import CACHE_MARKER, check_cache_dir, ensure_cache_dir
    from orchestrator.host.scratch import remove_abandoned, scratch_root
    from orchestrator.host.staging import remove_abandoned_staging, staging_root
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
        # A running build's staging folder stays; an emptied root goes too.
        gone = [p for p in remove_abandoned_staging(options.artifacts_dir) if p != staging]
        console.print(f"removed {len(gone)} abandoned staging folder(s) in {staging}")
    # Scratch of runs that were killed; a running build's scratch stays.
    scratch_folder = scratch_root(options.cache_dir)
    scratch = remove_abandoned(scratch_folder)
    if scratch:
        console.print(f"removed {len(scratch)} abandoned scratch folder(s) in {scratch_folder}")
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


@app.command()
def init(
    directory: Annotated[
        Path,
        typer.Argument(help="The crate's or workspace's folder.", metavar="DIR"),
    ] = Path(),
    force: Annotated[
        bool, typer.Option("--force", help="Replace an existing orchestrator.toml.")
    ] = False,
) -> None:
    """Write a commented orchestrator.toml for the Rust project in DIR.

    The package (or the workspace member with a binary), its binaries and features come
    from Cargo.toml. Workloads (and the validate and bench commands) are read from the
    crate without building it: README and docs examples, scripts, the integration tests'
    invocations, the binary's clap subcommands filled with the tree's data files. Each
    names only files of the tree and does more than --help/--version; runs that cannot
    work are left out with the reason as a comment. When none is found, a marked
    PLACEHOLDER is written: `build --dry-run` warns and `release` refuses until it is
    replaced.

    \b
    Examples:
      orchestrator init
      orchestrator init path/to/workspace --force
    """
    from orchestrator.config.init.scaffold import detect, render
    from orchestrator.config.resolve.options import CONFIG_FILENAME
    from orchestrator.errors import ConfigError

    root = directory.resolve()
    target = root / CONFIG_FILENAME
    if target.exists() and not force:
        raise ConfigError(
            f"{target} exists: not overwriting it", hint="Pass --force to replace it."
        )
    found = detect(root)
    partial = target.with_name(f".{target.name}.partial")
    partial.write_text(render(found))
    partial.replace(target)
    what = f"{found.package} (workspace member)" if found.member else found.package
    console.print(f"wrote {target}")
    console.print(f"  package   {what}, binary {found.binaries[0]}")
    for candidate in found.proposal.workloads:
        console.print(f"  workload  {' '.join(candidate.args)} (from {candidate.source})")
    if not found.proposal.workloads:
        console.print(f"  workload  {' '.join(found.placeholder_run)} (PLACEHOLDER)")
    if found.proposal.rejected:
        console.print(
            f"  skipped   {len(found.proposal.rejected)} example run(s) that cannot work as "
            "workloads (why: comments in the file)"
        )
    here = root == Path.cwd().resolve()
    shown = CONFIG_FILENAME if here else str(target)
    git = "git" if here else f"git -C {shlex.quote(str(root))}"
    config_flag = "" if here else f" --config {shlex.quote(str(target))}"
    if not found.proposal.workloads:
        console.print(
            styled(
                "first:",
                "yellow bold",
                f" edit {shown}: replace the PLACEHOLDER runs "
                "([train], [validate], [bench]); `release` refuses them",
            )
        )
    console.print("next:")
    console.print(
        f"  {git} add {CONFIG_FILENAME} && {git} commit -m 'Add orchestrator.toml'"
        "   # release refuses uncommitted changes",
        soft_wrap=True,  # whole lines, to copy
    )
    console.print(
        f"  orchestrator build{config_flag}   # build, train, validate (--dry-run: the plan only)",
        soft_wrap=True,
    )

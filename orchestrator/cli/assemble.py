"""`orchestrator release assemble`: a release built across machines, checked against this
checkout's plan, then signed and published once, where the key is (release/shard.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cli.app import (
    AllowDirtyOption,
    ArtifactsOption,
    CacheOption,
    ConfigOption,
    console,
    err_console,
    resolve_options,
    sign_release_index,
    signer_for,
    styled,
)
from orchestrator.cli.complete import complete_flavor_list
from orchestrator.cli.release import closing_lines, refuse_dirty, release_app
from orchestrator.config.options import LOCK_BLOCKER_HINT, lock_blocker
from orchestrator.errors import ConfigError


@release_app.command("assemble")
def release_assemble(
    folders: Annotated[
        list[Path],
        typer.Argument(
            help="The unsigned folder of every target, from `orchestrator build --target`.",
            metavar="FOLDER",
        ),
    ],
    config: ConfigOption = None,
    flavors: Annotated[
        str | None,
        typer.Option(
            "--flavors",
            help="Comma-separated flavors the release has (default: build.flavors).",
            metavar="LIST",
            autocompletion=complete_flavor_list,
        ),
    ] = None,
    artifacts_dir: ArtifactsOption = None,
    cache_dir: CacheOption = None,
    allow_dirty: AllowDirtyOption = False,
) -> None:
    """Check, sign and publish a release built across machines.

    Each FOLDER is one target built with `orchestrator build --target` (on a CI runner,
    unsigned). Every folder must be intact (each file as its target.json lists it, nothing
    added) and built from the plan this checkout makes (the same action key: sources,
    Cargo.lock, toolchain, settings, orchestrator version), and every target of the release
    must have one. Then, on this machine only, the binaries, archives and install.sh are
    signed, and release.json, SHA256SUMS, provenance and release.lock are written: the same
    bytes as `orchestrator release` on one machine.

    \b
    Examples:
      orchestrator release assemble targets/*
      ORCHESTRATOR_SIGNING_KEY=signing.key orchestrator release assemble downloaded/*/
    """
    from orchestrator.host.cachedir import ensure_cache_dir
    from orchestrator.model.layout import release_dir_name
    from orchestrator.model.lockfile import LOCK_FILE
    from orchestrator.release.run import RELEASE_JSON, plan_targets, run_report
    from orchestrator.release.shard import assemble, check_folders, compose_where_possible
    from orchestrator.release.target import targets
    from orchestrator.supply.chain import check_signing_key

    started = time.monotonic()
    options = resolve_options(
        config, {"build.artifacts_dir": artifacts_dir, "build.cache_dir": cache_dir}
    )
    names = [f for f in flavors.split(",") if f] if flavors else list(options.flavors)
    chosen = targets(options, names)
    blocker = lock_blocker(options)
    if blocker:
        raise ConfigError(f"cannot assemble: {blocker}", hint=LOCK_BLOCKER_HINT)
    refuse_dirty(options, allow_dirty=allow_dirty)
    release_dir = options.artifacts_dir / release_dir_name(options.binary, options.version)
    ensure_cache_dir(options.cache_dir)
    signer = signer_for(options)  # the key first: a wrong one is refused before any check
    check_signing_key(release_dir, signer.key.public)
    checked = check_folders(plan_targets(chosen), folders)

    def warn(text: str) -> None:
        err_console.print(styled("warning:", "yellow bold", f" {text}"))

    results, lock = assemble(options, checked, signer, console.print, warn)
    built = [(result, item.plan) for result, item in zip(results, checked, strict=True)]
    composed = compose_where_possible(
        options, release_dir, built, signer, announce=console.print, warn=warn
    )
    sign_release_index(release_dir, signer, vouched=(RELEASE_JSON, LOCK_FILE, *composed))
    report = run_report(options, results, signer, seconds=time.monotonic() - started, lockfile=lock)
    console.print(f"pinned every input in {lock}")
    closing_lines(report, console)

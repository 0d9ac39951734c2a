"""`orchestrator release assemble`: a release built across machines, checked against this
checkout's plan, then signed and published once, where the key is (release/assemble/shard.py)."""

from __future__ import annotations

import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cli.app import (
    AllowDirtyOption,
    ArtifactsOption,
    CacheOption,
    ConfigOption,
    resolve_options,
    signer_for,
)
from orchestrator.cli.complete import complete_flavor_list
from orchestrator.cli.release import release_app
from orchestrator.cli.release_common import refuse_dirty
from orchestrator.config.resolve.options import LOCK_BLOCKER_HINT, lock_blocker
from orchestrator.errors import ConfigError


class Agree(StrEnum):
    """--agree: how many targets must come from two builders that agree."""

    NONE = "none"
    ONE = "one"
    ALL = "all"


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
    agree: Annotated[
        Agree,
        typer.Option(
            "--agree",
            help="The two-builder rule: `all` signs only when every target comes as two "
            "folders (two builders) with byte-identical shipped files; `one`: at least one "
            "target does; `none`: one folder per target. A pair that differs: exit 77.",
            case_sensitive=False,
            metavar="RULE",
        ),
    ] = Agree.NONE,
) -> None:
    """Check, sign and publish a release built across machines.

    Each FOLDER is one target built with `orchestrator build --target` (on a CI runner,
    unsigned). Nothing a folder says of itself is believed: it must hold only the files
    its plan makes (regular files with safe names, within size limits, each as target.json
    lists it), be built from the plan this checkout makes (the same action key; lock
    inputs, pins and build.json compared field by field), and every binary is checked
    again: its ELF machine and type, the CPU level of its instructions, the glibc floor and
    the rustc that compiled it (exit 71 when one is not what the plan builds). Every
    target of the release must have a folder. Then, on this machine only, the binaries,
    archives and install.sh are signed, and release.json, SHA256SUMS, provenance and
    release.lock are written: the same bytes as `orchestrator release` on one machine.

    With --agree, a target may come twice, built by two builders: each folder is checked
    on its own, then their shipped files (binaries, generated files) must be byte-identical,
    or nothing is signed (exit 77, naming the first differing file and offset).

    \b
    Examples:
      orchestrator release assemble targets/*
      orchestrator release assemble --agree all runner-a/* runner-b/*
      ORCHESTRATOR_SIGNING_KEY=signing.key orchestrator release assemble downloaded/*/
    """
    from orchestrator.cli.rebuild import publish_checked
    from orchestrator.host.cachedir import ensure_cache_dir
    from orchestrator.release.assemble.shard import check_folders, check_folders_agreeing
    from orchestrator.release.run import plan_targets
    from orchestrator.release.targets.release_view import ReleaseView
    from orchestrator.release.targets.target import targets
    from orchestrator.supply.chain import check_signing_key

    started = time.monotonic()
    options = resolve_options(
        config, {"build.artifacts_dir": artifacts_dir, "build.cache_dir": cache_dir}
    )
    names = [f for f in flavors.split(",") if f] if flavors else list(options.flavors)
    chosen = targets(options, names)
    blocker = lock_blocker(options.crate_dir, options.project_dir, options.config_path.name)
    if blocker:
        raise ConfigError(f"cannot assemble: {blocker}", hint=LOCK_BLOCKER_HINT)
    release = ReleaseView.from_options(options)
    refuse_dirty(release.crate, allow_dirty=allow_dirty)
    release_dir = release.release_dir
    ensure_cache_dir(release.cache_dir)
    signer = signer_for(options)  # the key first: a wrong one is refused before any check
    check_signing_key(release_dir, signer.key.public)
    check = check_folders if agree is Agree.NONE else check_folders_agreeing
    checked = check(plan_targets(chosen), folders)
    publish_checked(release, checked, agree.value, signer, started=started)

"""`orchestrator images`: a release target's toolchain image kept in a CI cache, as a
`docker save` archive in a folder the CI caches (runtime/image_archive.py says what is
checked before one is used)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.cli.app import (
    App,
    ConfigOption,
    app,
    console,
    err_console,
    resolve_options,
    styled,
)

if TYPE_CHECKING:
    from orchestrator.plan.images import ImagePlan

images_app = App(
    help="A release target's toolchain image kept in a CI cache: `load` before "
    "`build --target`, `save` after it (what `orchestrator ci` writes).\n\n"
    "\b\n"
    "Examples:\n"
    "  orchestrator images load ~/.cache/orchestrator-images --target linux-x86_64-cpu\n"
    "  orchestrator images save ~/.cache/orchestrator-images --target linux-x86_64-cpu",
    no_args_is_help=True,
)
app.add_typer(images_app, name="images")

FolderArgument = Annotated[
    Path, typer.Argument(help="The folder the CI caches (one image archive).", metavar="DIR")
]
TargetOption = Annotated[
    str,
    typer.Option(
        "--target",
        metavar="NAME",
        help="The release target (a name from `release --dry-run`) whose image it is.",
    ),
]


def _image_of(config: Path | None, name: str) -> ImagePlan:
    from orchestrator.release.assemble.shard import pick_target
    from orchestrator.release.run import plan_targets
    from orchestrator.release.targets.target import targets

    options = resolve_options(config)
    _, plan = pick_target(plan_targets(targets(options, list(options.flavors))), name)
    return plan.image


def _say(line: str) -> None:
    console.print(line, markup=False, highlight=False)


def _warn(line: str) -> None:
    err_console.print(styled("warning:", "yellow bold", f" {line}"))


@images_app.command("load")
def images_load(folder: FolderArgument, target: TargetOption, config: ConfigOption = None) -> None:
    """Load the target's toolchain image from its archive in DIR, if the archive is sealed
    with this machine's cache key (ORCHESTRATOR_CACHE_KEY) and holds the very image the
    plan names; otherwise say why, and the build makes it. Exit 0 either way.

    \b
    Examples:
      orchestrator images load ~/.cache/orchestrator-images --target linux-x86_64-cpu
    """
    from orchestrator.runtime.engine import Engine
    from orchestrator.runtime.image_archive import load_image_archive

    image = _image_of(config, target)  # a config error before the engine is asked
    load_image_archive(Engine.connect(), image, folder, _say, _warn)


@images_app.command("save")
def images_save(folder: FolderArgument, target: TargetOption, config: ConfigOption = None) -> None:
    """Save the target's toolchain image into DIR (a `docker save` archive and its sealed
    record), unless DIR holds it already; archives of other images there are removed.

    \b
    Examples:
      orchestrator images save ~/.cache/orchestrator-images --target linux-x86_64-cpu
    """
    from orchestrator.runtime.engine import Engine
    from orchestrator.runtime.image_archive import save_image_archive

    image = _image_of(config, target)  # a config error before the engine is asked
    save_image_archive(Engine.connect(), image, folder, _say, _warn)

"""Render per-flavor Dockerfiles from the jinja2 templates in images/templates/."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import jinja2

from orchestrator.config.resolve.toolchains import ToolchainSpec, load_toolchain
from orchestrator.config.resources import (
    bundled_dir,
    checkout_around,
    repository_root,
    resource_dir,
)
from orchestrator.errors import ConfigError, StaleRenderError
from orchestrator.flavors import FLAVORS, Flavor
from orchestrator.model.layout import BUILDER_UID, PATHS, UNPACK_ROOT

DEFAULT_TOOLCHAIN = "rustc-web-1.96"


def _environment(templates: Path | None = None) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(templates or resource_dir("images") / "templates"),
        undefined=jinja2.StrictUndefined,  # a typo in a template is an error, not ""
        keep_trailing_newline=True,
        autoescape=False,  # noqa: S701 - Dockerfiles, not HTML
    )


def image_packages(flavor: Flavor, toolchain: ToolchainSpec) -> dict[str, str]:
    return toolchain.packages_for(flavor.name)


def render_dockerfile(
    flavor: Flavor, toolchain: ToolchainSpec, *, templates: Path | None = None
) -> str:
    try:
        template = _environment(templates).get_template(flavor.template)
        return template.render(
            template_name=flavor.template,
            flavor=flavor.name,
            foreign_architectures=flavor.foreign_architectures,
            toolchain=toolchain,
            packages=list(image_packages(flavor, toolchain).items()),
            unpack=list(toolchain.unpack_for(flavor.name, flavor.arch).items()),
            unpack_root=UNPACK_ROOT,
            uid=BUILDER_UID,
            paths=PATHS,
        )
    except jinja2.TemplateError as exc:
        raise ConfigError(f"rendering {flavor.template}: {exc}") from exc


@dataclass(frozen=True)
class RenderTree:
    """What `render` reads and writes: one tree's templates, toolchain pins and Dockerfiles."""

    templates: Path
    toolchains: Path
    dockerfiles: Path
    writable: bool


def render_tree(cwd: Path | None = None) -> RenderTree:
    """The checkout around the working directory, else the one this package runs from.

    A maintainer checks the checkout they are in, whichever orchestrator runs (an installed
    one included). With no checkout at all, an installed wheel checks its own bundled copy,
    which it must never write to.
    """
    root = checkout_around(cwd or Path.cwd()) or repository_root()
    if root is not None:
        return RenderTree(
            root / "images" / "templates", root / "toolchains", root / "dockerfiles", True
        )
    return RenderTree(
        bundled_dir("images") / "templates",
        bundled_dir("toolchains"),
        bundled_dir("dockerfiles"),
        writable=False,
    )


@dataclass(frozen=True)
class RenderResult:
    path: Path
    changed: bool


def render_all(*, check: bool, output_dir: Path | None = None) -> list[RenderResult]:
    """Render every flavor with the default toolchain; in check mode, only compare."""
    tree = render_tree()
    if output_dir is not None:
        tree = replace(tree, dockerfiles=output_dir, writable=True)
    if not check and not tree.writable:
        raise ConfigError(
            "`orchestrator render` writes into a checkout's dockerfiles/, and no checkout of "
            "orchestrator holds the working directory",
            hint="Run it inside a git checkout of orchestrator; outside one, --check checks "
            "the installed copy.",
        )
    toolchain = load_toolchain(DEFAULT_TOOLCHAIN, tree.toolchains)
    results: list[RenderResult] = []
    for name, flavor in FLAVORS.items():
        text = render_dockerfile(flavor, toolchain, templates=tree.templates)
        path = tree.dockerfiles / f"{name}.Dockerfile"
        changed = not path.is_file() or path.read_text() != text
        if changed and not check:
            tree.dockerfiles.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(text)
            tmp.replace(path)
        results.append(RenderResult(path, changed))
    if check:
        stale = [r.path.name for r in results if r.changed]
        if stale:
            raise StaleRenderError(
                "committed Dockerfiles are stale: "
                + ", ".join(stale)
                + " differ from what the templates render"
            )
    return results

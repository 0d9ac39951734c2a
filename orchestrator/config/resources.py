"""Where orchestrator's own files live: images/ (templates, base and distro pins),
toolchains/, schemas/ and dockerfiles/.

The one place that locates them. In a source checkout (an editable install) they are the
checkout's folders, so an edit takes effect at once; an installed wheel carries a copy
under orchestrator/_resources/ (pyproject's force-include), read when no checkout is.
"""

from __future__ import annotations

import functools
import tomllib
from pathlib import Path

DISTRIBUTION = "rust-release-orchestrator"  # the name on PyPI; the package stays orchestrator
RESOURCES = ("images", "toolchains", "schemas", "dockerfiles")

_PACKAGE_DIR = Path(__file__).resolve().parents[1]  # orchestrator/
_BUNDLED_DIR = _PACKAGE_DIR / "_resources"


def is_checkout(folder: Path) -> bool:
    """A source checkout of orchestrator: our pyproject.toml beside images/templates/.

    The project name is what tells it apart from a user's project that happens to have
    an images/ folder.
    """
    if not (folder / "images" / "templates").is_dir():
        return False
    try:
        project = tomllib.loads((folder / "pyproject.toml").read_text()).get("project", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    return isinstance(project, dict) and project.get("name") == DISTRIBUTION


@functools.cache
def repository_root() -> Path | None:
    """The source checkout this package runs from, if it does (editable installs)."""
    root = _PACKAGE_DIR.parent
    return root if is_checkout(root) else None


def checkout_around(start: Path) -> Path | None:
    """The checkout of orchestrator that holds `start` (a maintainer's working directory)."""
    start = start.resolve()
    return next((folder for folder in (start, *start.parents) if is_checkout(folder)), None)


def bundled_dir(name: str) -> Path:
    """The copy of `name` inside the installed package (what a wheel ships)."""
    return _BUNDLED_DIR / name


def resource_dir(name: str) -> Path:
    """orchestrator's own `name` folder: the checkout's in development, else the wheel's."""
    root = repository_root()
    return root / name if root is not None else bundled_dir(name)

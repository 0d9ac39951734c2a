"""Where the templates and toolchain pins live: the repository in a checkout, else the wheel."""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parents[1]  # orchestrator/


def repository_root() -> Path | None:
    """The source checkout this package runs from, if it does (editable installs)."""
    root = _PACKAGE_DIR.parent
    return root if (root / "pyproject.toml").is_file() and (root / "images").is_dir() else None


def resource_dir(name: str) -> Path:
    root = repository_root()
    if root is not None:
        return root / name
    return _PACKAGE_DIR / "_resources" / name

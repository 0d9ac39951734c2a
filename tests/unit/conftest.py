from __future__ import annotations

from pathlib import Path

import pytest

CARGO_TOML = """\
[package]
name = "demo"
version = "1.2.3"
edition = "2021"
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A minimal project: orchestrator.toml next to a crate with Cargo.toml and Cargo.lock."""
    crate = tmp_path / "crate"
    (crate / "src").mkdir(parents=True)
    (crate / "Cargo.toml").write_text(CARGO_TOML)
    (crate / "Cargo.lock").write_text(
        'version = 4\n\n[[package]]\nname = "demo"\nversion = "1.2.3"\n'
    )
    (crate / "src" / "main.rs").write_text("fn main() {}\n")
    (tmp_path / "orchestrator.toml").write_text(
        '[package]\ncrate = "crate"\n[train]\nworkloads = [["--help"]]\n'
    )
    return tmp_path


def write_config(project: Path, text: str) -> Path:
    path = project / "orchestrator.toml"
    path.write_text(text)
    return path

"""Where orchestrator's own files are found: a checkout's folders, else the wheel's copy.

The installed wheel itself is tested in tests/integration/test_install.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from orchestrator.config import resources
from orchestrator.config.resources import (
    DISTRIBUTION,
    checkout_around,
    is_checkout,
    repository_root,
    resource_dir,
)
from orchestrator.errors import ConfigError, StaleRenderError
from orchestrator.plan import dockerfiles
from orchestrator.plan.dockerfiles import render_all, render_tree

REPO = Path(__file__).resolve().parents[2]


def _copy_checkout(destination: Path) -> Path:
    destination.mkdir()
    shutil.copy2(REPO / "pyproject.toml", destination / "pyproject.toml")
    for name in ("images", "toolchains", "dockerfiles"):
        shutil.copytree(REPO / name, destination / name)
    return destination


def test_the_development_install_reads_the_repository() -> None:
    assert repository_root() == REPO
    assert resource_dir("toolchains") == REPO / "toolchains"
    assert resource_dir("schemas") == REPO / "schemas"


def test_a_checkout_is_told_apart_by_its_project_name(tmp_path: Path) -> None:
    (tmp_path / "images" / "templates").mkdir(parents=True)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "someone-else"\n')
    assert not is_checkout(tmp_path)
    (tmp_path / "pyproject.toml").write_text("not toml [")
    assert not is_checkout(tmp_path)
    (tmp_path / "pyproject.toml").write_text(f'[project]\nname = "{DISTRIBUTION}"\n')
    assert is_checkout(tmp_path)
    assert checkout_around(tmp_path / "images" / "templates") == tmp_path


def test_render_checks_the_checkout_around_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkout = _copy_checkout(tmp_path / "checkout")
    monkeypatch.chdir(checkout / "toolchains")
    tree = render_tree()
    assert tree.dockerfiles == checkout / "dockerfiles"
    assert tree.templates == checkout / "images" / "templates"
    assert all(not result.changed for result in render_all(check=True))
    # A template edited in that checkout is what is rendered, not the repository's.
    template = checkout / "images" / "templates" / "toolchain.Dockerfile.j2"
    template.write_text(template.read_text() + "# local edit\n")
    with pytest.raises(StaleRenderError, match=r"cpu\.Dockerfile"):
        render_all(check=True)
    render_all(check=False)
    assert (checkout / "dockerfiles" / "cpu.Dockerfile").read_text().endswith("# local edit\n")
    assert (REPO / "dockerfiles" / "cpu.Dockerfile").read_text() != (
        checkout / "dockerfiles" / "cpu.Dockerfile"
    ).read_text()


def test_outside_any_checkout_render_falls_back_to_the_package_then_refuses_to_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert render_tree().dockerfiles == REPO / "dockerfiles"  # the editable install's
    # An installed wheel: no checkout anywhere, its bundled copy is read-only.
    monkeypatch.setattr(dockerfiles, "repository_root", lambda: None)
    tree = render_tree()
    assert not tree.writable
    assert tree.dockerfiles == resources.bundled_dir("dockerfiles")
    with pytest.raises(ConfigError, match="checkout"):
        render_all(check=False)

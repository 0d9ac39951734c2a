"""The tool as users get it: the built wheel installed into a fresh virtualenv.

No editable install and no checkout on the way: the wheel is built from this checkout,
installed with its dependencies from PyPI into a new virtualenv, and every command runs
from a temporary folder, so a file the wheel forgot cannot be read from the repository.
Dry runs only: nothing here needs the Docker Engine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from email.parser import HeaderParser
from pathlib import Path

import pytest

from orchestrator import __version__
from orchestrator.config.resources import DISTRIBUTION, RESOURCES

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "workspace-project"
WHEEL_PREFIX = f"{DISTRIBUTION.replace('-', '_')}-{__version__}"


def _resource_files() -> list[Path]:
    """Every file of the checkout's resource folders, relative to the checkout."""
    return sorted(
        path.relative_to(REPO)
        for name in RESOURCES
        for path in (REPO / name).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    )


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(REPO)],
        check=True,
        timeout=600,
    )
    (built,) = out.glob("*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv holding the wheel and its dependencies (from PyPI or pip's cache)."""
    root = tmp_path_factory.mktemp("venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True, timeout=120)
    subprocess.run(
        [str(root / "bin" / "python"), "-m", "pip", "install", "--quiet", str(wheel)],
        check=True,
        timeout=900,
    )
    return root


def _clean_env() -> dict[str, str]:
    # Nothing that could point Python back at the checkout or the development virtualenv.
    drop = {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"}
    return {key: value for key, value in os.environ.items() if key not in drop}


def installed(
    venv: Path, args: Sequence[str], cwd: Path, *, program: str = "orchestrator"
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(venv / "bin" / program), *args],
        cwd=cwd,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    sys.stdout.write(result.stdout + result.stderr)  # shown by pytest when a test fails
    return result


def test_wheel_carries_license_metadata_and_every_resource(wheel: Path) -> None:
    assert wheel.name == f"{WHEEL_PREFIX}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = HeaderParser().parsestr(
            archive.read(f"{WHEEL_PREFIX}.dist-info/METADATA").decode()
        )
    assert f"{WHEEL_PREFIX}.dist-info/licenses/LICENSE" in names
    assert metadata["Name"] == DISTRIBUTION
    assert metadata["Version"] == __version__
    assert metadata["License-Expression"] == "MIT"
    assert any(c.startswith("Topic :: ") for c in metadata.get_all("Classifier") or [])
    expected = _resource_files()
    # The folders --help names: toolchain pins, image templates, schemas, Dockerfiles.
    for folder in ("toolchains", "images/templates", "schemas", "dockerfiles"):
        assert any(path.is_relative_to(folder) for path in expected), folder
    missing = [
        str(path) for path in expected if f"orchestrator/_resources/{path.as_posix()}" not in names
    ]
    assert missing == []


def test_installed_command_reports_the_version_from_the_venv(venv: Path, tmp_path: Path) -> None:
    version = installed(venv, ["--version"], tmp_path)
    assert version.returncode == 0
    assert version.stdout.strip() == f"orchestrator {__version__}"
    where = installed(
        venv,
        [
            "-c",
            "import importlib.metadata as m, orchestrator; "
            f"print(orchestrator.__file__); print(m.version({DISTRIBUTION!r}))",
        ],
        tmp_path,
        program="python",
    )
    assert where.returncode == 0
    module, dist_version = where.stdout.split()
    assert Path(module).is_relative_to(venv), "the package must come from the wheel"
    assert dist_version == __version__


def test_render_check_reads_the_checkout_it_runs_in(venv: Path, tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    shutil.copy2(REPO / "pyproject.toml", checkout / "pyproject.toml")
    for name in ("images", "toolchains", "dockerfiles"):
        shutil.copytree(REPO / name, checkout / name)
    inside = checkout / "images"  # any folder of the checkout will do
    ok = installed(venv, ["render", "--check"], inside)
    assert ok.returncode == 0
    assert str(checkout / "dockerfiles" / "cpu.Dockerfile") in ok.stdout
    # It is this copy that is checked, not the one inside the wheel.
    stale = checkout / "dockerfiles" / "cpu.Dockerfile"
    stale.write_text(stale.read_text() + "# edited by hand\n")
    refused = installed(venv, ["render", "--check"], checkout)
    assert refused.returncode == 50
    assert "cpu.Dockerfile" in refused.stderr


def test_render_outside_a_checkout_checks_the_bundled_copy_only(venv: Path, tmp_path: Path) -> None:
    checked = installed(venv, ["render", "--check"], tmp_path)
    assert checked.returncode == 0
    assert f"{venv}/" in checked.stdout  # the wheel's own dockerfiles/, in site-packages
    written = installed(venv, ["render"], tmp_path)
    assert written.returncode == 10
    assert "checkout" in written.stderr


def test_init_and_dry_run_on_a_fixture_crate(venv: Path, tmp_path: Path) -> None:
    project = tmp_path / "workspace-project"
    shutil.copytree(FIXTURE, project, symlinks=True, ignore=shutil.ignore_patterns("target"))
    (project / "orchestrator.toml").unlink()
    init = installed(venv, ["init", str(project)], tmp_path)
    assert init.returncode == 0
    assert "wordfreq-cli (workspace member)" in init.stdout
    config = project / "orchestrator.toml"
    dry = installed(venv, ["build", "--dry-run", "--config", str(config)], tmp_path)
    assert dry.returncode == 0
    plan = json.loads(dry.stdout)
    assert plan["flavor"] == "cpu"
    assert plan["toolchain"] in {p.stem for p in (REPO / "toolchains").glob("*.toml")}
    # The bundled templates and pins are the checkout's: the development install plans
    # the very same images (their input hashes cover templates and pins).
    development = subprocess.run(
        [sys.executable, "-m", "orchestrator", "build", "--dry-run", "--config", str(config)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert plan == json.loads(development.stdout)

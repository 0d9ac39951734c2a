"""`clean` after a killed run leaves no empty staging folder, and never a live one."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.host.staging import remove_abandoned_staging, staging_area, staging_root
from orchestrator.runtime.engine import Engine
from tests.unit.fakes import FakeEngine

runner = CliRunner()


def _dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def _config(project: Path) -> Path:
    config = project / "orchestrator.toml"
    config.write_text(
        '[package]\ncrate = "crate"\n[train]\nworkloads = [["--help"]]\n'
        f'[build]\nartifacts_dir = "{project / "out"}"\ncache_dir = "{project / "cache"}"\n'
    )
    return config


def test_clean_after_a_killed_run_leaves_no_empty_staging_folder(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What `kill -9` during a build leaves: its staging folder under the staging root.
    staging = staging_root(project / "out")
    (staging / f"{_dead_pid()}-killed" / "artifact").mkdir(parents=True)
    engine = FakeEngine()
    monkeypatch.setattr(Engine, "connect", staticmethod(lambda: engine))
    result = runner.invoke(app, ["clean", "--config", str(_config(project))])
    assert result.exit_code == 0, result.output
    assert "removed 1 abandoned staging folder(s)" in result.output
    assert not staging.exists()
    assert sorted(p.name for p in project.iterdir()) == ["crate", "orchestrator.toml"]


def test_a_running_builds_staging_folder_and_its_root_stay(tmp_path: Path) -> None:
    artifacts = tmp_path / "out"
    with staging_area(artifacts, "live") as area:  # this process: alive
        dead = staging_root(artifacts) / f"{_dead_pid()}-killed"
        dead.mkdir()
        removed = remove_abandoned_staging(artifacts)
        assert removed == [dead]
        assert area.is_dir()
    assert not staging_root(artifacts).exists()  # the build removed its own, and the root


def test_nothing_to_remove_is_no_error(tmp_path: Path) -> None:
    assert remove_abandoned_staging(tmp_path / "out") == []
    root = staging_root(tmp_path / "out")
    (root / "not-a-pid").mkdir(parents=True)  # not ours to judge: stays, and so does root
    assert remove_abandoned_staging(tmp_path / "out") == []
    assert (root / "not-a-pid").is_dir()
    assert [p.name for p in root.iterdir()] == ["not-a-pid"]

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from orchestrator.cli import app

runner = CliRunner()


def test_config_error_exit_code_and_hint(project: Path) -> None:
    (project / "orchestrator.toml").write_text('[package]\ncrate = "crate"\nspeed = 11\n')
    result = runner.invoke(app, ["config", "--config", str(project / "orchestrator.toml")])
    assert result.exit_code == 10
    assert "unknown key 'package.speed'" in result.output
    assert "hint:" in result.output


def test_dry_run_prints_plan_without_docker(project: Path) -> None:
    result = runner.invoke(
        app,
        [
            "build",
            "--dry-run",
            "--config",
            str(project / "orchestrator.toml"),
            "--target-cpu",
            "x86-64-v3",
        ],
        env={"DOCKER_HOST": "unix:///nonexistent.sock"},
    )
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    assert plan["artifact"] == "demo-1.2.3/demo-1.2.3-linux-x86_64-cpu-v3"
    assert plan["rustflags"][0] == "-Ctarget-cpu=x86-64-v3"
    assert plan["steps"][0] == "base-image"


def test_build_without_docker_is_a_clear_error(project: Path) -> None:
    result = runner.invoke(
        app,
        ["build", "--config", str(project / "orchestrator.toml")],
        env={"DOCKER_HOST": "unix:///nonexistent.sock"},
    )
    assert result.exit_code == 20
    assert "Docker Engine" in result.output


def test_render_check_passes_on_committed_files() -> None:
    result = runner.invoke(app, ["render", "--check"])
    assert result.exit_code == 0, result.output
    assert "up to date" in result.output


def test_unknown_flavor_is_refused(project: Path) -> None:
    result = runner.invoke(
        app,
        ["build", "--dry-run", "--flavor", "amiga", "--config", str(project / "orchestrator.toml")],
    )
    assert result.exit_code == 10
    assert "unknown flavor 'amiga'" in result.output


def test_a_long_error_reaches_a_log_on_one_line(tmp_path: Path) -> None:
    """Without a terminal, errors are not hard-wrapped: `grep` on a CI log finds them."""
    deep = tmp_path / ("folder-with-a-long-name-" * 8) / "orchestrator.toml"
    result = runner.invoke(app, ["config", "--config", str(deep)])
    assert result.exit_code == 10
    line = next(x for x in result.output.splitlines() if x.startswith("error:"))
    assert str(deep) in line and line.endswith("does not exist")

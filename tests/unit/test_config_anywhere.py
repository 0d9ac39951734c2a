"""orchestrator.toml outside the crate's repository: the crate's own git gives the epoch,
and a setup that release.lock cannot describe is refused at the start, not after builds."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from orchestrator.config.resolve.options import lock_blocker, resolve
from orchestrator.host.system import git_commit_time

from .test_cli_bad_input import cli, docker_down, refused  # noqa: F401 (a fixture)

COMMITTED_AT = 1_650_000_000


@pytest.fixture
def apart(tmp_path: Path) -> Path:
    """A crate in a git repository of its own; the config in an unrelated folder."""
    crate = tmp_path / "repo" / "crate"
    (crate / "src").mkdir(parents=True)
    (crate / "Cargo.toml").write_text('[package]\nname = "demo"\nversion = "1.2.3"\n')
    (crate / "Cargo.lock").write_text('version = 4\n\n[[package]]\nname = "demo"\n')
    (crate / "src" / "main.rs").write_text("fn main() {}\n")
    env = {
        "GIT_AUTHOR_DATE": f"@{COMMITTED_AT} +0000",
        "GIT_COMMITTER_DATE": f"@{COMMITTED_AT} +0000",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.org",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.org",
        "PATH": "/usr/bin:/bin:/usr/local/bin",
    }
    repo = tmp_path / "repo"
    for argv in (["init", "-q"], ["add", "."], ["commit", "-qm", "crate"]):
        subprocess.run(["git", *argv], cwd=repo, env=env, check=True)
    config_dir = tmp_path / "configs"
    config_dir.mkdir()
    (config_dir / "orchestrator.toml").write_text(
        f'[package]\ncrate = "{crate}"\n[train]\nworkloads = [["--help"]]\n'
    )
    return config_dir / "orchestrator.toml"


def test_the_epoch_comes_from_the_crates_repository(apart: Path) -> None:
    options = resolve(apart, env={}, commit_time=git_commit_time)
    assert options.source_date_epoch == COMMITTED_AT
    assert options.sources["build.source_date_epoch"] == "the crate's git HEAD commit time"


def test_a_crate_outside_the_config_folder_cannot_be_locked(apart: Path) -> None:
    options = resolve(apart, env={})
    blocker = lock_blocker(options.crate_dir, options.project_dir, options.config_path.name)
    assert "is not inside" in blocker


@pytest.mark.usefixtures("docker_down")
def test_release_refuses_it_at_the_start_and_dry_runs_warn(apart: Path) -> None:
    output = refused(cli("release", "-c", str(apart), "--bench-runs", "0"), 10, "cannot release")
    assert "Put orchestrator.toml in the crate's folder" in output
    assert "Docker" not in output
    planned = cli("build", "--dry-run", "-c", str(apart))
    assert planned.exit_code == 0, planned.output
    assert "cannot be locked" in planned.output
    refused(cli("lock", "-c", str(apart)), 10, "cannot lock")


def test_a_config_at_or_above_the_crate_can_be_locked(project: Path) -> None:
    options = resolve(project / "orchestrator.toml", env={})
    assert lock_blocker(options.crate_dir, options.project_dir, options.config_path.name) == ""

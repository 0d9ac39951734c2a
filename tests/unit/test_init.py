"""`orchestrator init` on crates shaped like real ones: the file it writes names the right
package, member and binary, takes a workload from the README when there is one, and works
with `build --dry-run` at once (which workloads it proposes: test_init_workloads.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app

from .test_cli_bad_input import docker_down  # noqa: F401 (a fixture)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "workspace-project"
runner = CliRunner()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "wordfreq"
    shutil.copytree(FIXTURE, root, symlinks=True)
    (root / "orchestrator.toml").unlink()
    return root


def _init(*args: str) -> str:
    result = runner.invoke(app, ["init", *args])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.usefixtures("docker_down")
def test_a_workspace_gets_its_member_binary_and_readme_workload(workspace: Path) -> None:
    (workspace / "README.md").write_text(
        "# wordfreq\n\nRun it:\n\n```console\n$ wordfreq count data/corpus.txt | head\n"
        "$ wordfreq count data/corpus.txt\n```\n"
    )
    output = _init(str(workspace))
    assert "binary wordfreq" in output and "(from README.md)" in output
    text = (workspace / "orchestrator.toml").read_text()
    assert 'package = "wordfreq-cli"' in text and 'binary = "wordfreq"' in text
    assert 'workloads = [["count", "data/corpus.txt"]]' in text
    planned = runner.invoke(
        app, ["build", "--dry-run", "--config", str(workspace / "orchestrator.toml")]
    )
    assert planned.exit_code == 0, planned.output
    plan = json.loads(planned.stdout)
    assert plan["artifact"] == "wordfreq-0.4.0/wordfreq-0.4.0-linux-x86_64-cpu"
    assert plan["workloads"] == [["count", "data/corpus.txt"]]


@pytest.mark.usefixtures("docker_down")
def test_a_single_crate_without_readme_gets_a_marked_placeholder(project: Path) -> None:
    crate = project / "crate"
    (crate / "src" / "bin").mkdir()
    (crate / "src" / "bin" / "helper.rs").write_text("fn main() {}\n")
    _init(str(crate))
    text = (crate / "orchestrator.toml").read_text()
    assert 'binary = "demo"' in text and "other binaries of demo: helper" in text
    assert '# binaries = ["demo", "helper"]' in text
    assert (
        'workloads = [["<placeholder: the arguments of a run that does real work>"]]  # PLACEHOLDER'
    ) in text
    assert "package = " not in text  # not a workspace member
    planned = runner.invoke(
        app, ["build", "--dry-run", "--config", str(crate / "orchestrator.toml")]
    )
    assert planned.exit_code == 0, planned.output


@pytest.mark.usefixtures("docker_down")
def test_init_keeps_an_existing_file_and_needs_a_crate(workspace: Path, tmp_path: Path) -> None:
    (workspace / "orchestrator.toml").write_text("# mine\n")
    refused = runner.invoke(app, ["init", str(workspace)])
    assert refused.exit_code == 10 and "not overwriting" in refused.output
    assert (workspace / "orchestrator.toml").read_text() == "# mine\n"
    _init(str(workspace), "--force")
    empty = tmp_path / "empty"
    empty.mkdir()
    nothing = runner.invoke(app, ["init", str(empty)])
    assert nothing.exit_code == 10 and "has no Cargo.toml" in nothing.output
    assert list(empty.iterdir()) == []

"""Every binary of an artifact BOLTed (issue 33, point 3), on the workspace fixture whose
two binaries each run a training workload: `wordfreq` (the main one) and `wordgrep`.

Built with gate.policy require-all, which ships every optimization, so that both shipped
binaries must be llvm-bolt's (its `.note.bolt_info` section) whatever the counts say;
the per-binary gate's reverting is covered by tests/unit/test_bolt_binaries.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import docker
import pytest
from elftools.elf.elffile import ELFFile

from tests.integration.conftest import REPO, managed_containers, orchestrator

pytestmark = pytest.mark.integration

FIXTURE = REPO / "tests" / "fixtures" / "workspace-project"
DATA = REPO / "tests" / "fixtures" / "workspace-data"  # its [train] inputs, beside it
ARTIFACT = "wordfreq-0.4.0/wordfreq-0.4.0-linux-x86_64-cpu"
BOLT_SECTIONS = {".note.bolt_info", ".bolt.org.text"}  # what llvm-bolt leaves in its output


def _bolt_sections(binary: Path) -> set[str]:
    with binary.open("rb") as stream:
        return {section.name for section in ELFFile(stream).iter_sections()} & BOLT_SECTIONS


def test_every_binary_a_workload_runs_is_bolted_and_recorded(
    docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    project = tmp_path / "wordfreq"
    shutil.copytree(DATA, tmp_path / DATA.name)  # where ../workspace-data points
    shutil.copytree(FIXTURE, project, symlinks=True, ignore=shutil.ignore_patterns("target"))
    artifacts = tmp_path / "artifacts"
    config = ["--config", str(project / "orchestrator.toml"), "--artifacts-dir", str(artifacts)]
    run = orchestrator(["build", *config], env={"ORCHESTRATOR_GATE_POLICY": "require-all"})
    assert run.returncode == 0, run.output
    assert managed_containers(docker_client) == []
    artifact = artifacts / ARTIFACT
    manifest = json.loads((artifact / "build.json").read_text())
    bolt = manifest["bolt"]
    assert manifest["gate"]["shipped"] == "pgo-bolt" and bolt["shipped"] is True
    assert list(bolt["binaries"]) == ["wordfreq", "wordgrep"]
    for name, record in bolt["binaries"].items():
        assert record["applied"] is True and record["shipped"] is True, (name, record)
        assert _bolt_sections(artifact / name), f"{name} is not llvm-bolt's output"
        assert isinstance(record["gain"], float), name  # its own gate workloads, counted
    wordgrep = bolt["binaries"]["wordgrep"]
    assert wordgrep["workloads"] == 1 and wordgrep["kept"] is True
    assert wordgrep["coverage"]["profiled_functions"] > 0
    # Its own profile, from its own workload, shipped beside the main binary's.
    assert wordgrep["profile"]["inputs"] != bolt["profile"]["inputs"]
    assert wordgrep["profile"]["mode"] == bolt["mode"]
    profile = artifact / "profiles" / "bolt-wordgrep.fdata"
    assert profile.is_file() and (artifact / "profiles" / "bolt.fdata").is_file()
    assert manifest["profiles"]["bolt-wordgrep.fdata"]["sha256"] == wordgrep["profile"]["sha256"]
    # The step line says so (or its log, echoed on failure).
    assert "1 other binary BOLTed" in run.output or "BOLT rewrote wordgrep" in run.output

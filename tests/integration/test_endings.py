"""A crate edited while its release runs: the release names the changed file, publishes
what it built from the sources of the start, and still writes release.lock for them (it
ended with no lock and exit 53 before). On a copy of tests/fixtures/writes-source (no PGO,
no BOLT: two quick builds)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import docker
import pytest

from tests.integration.conftest import REPO, STARTED_PIDS, Run, managed_containers

pytestmark = pytest.mark.integration
FIXTURE = REPO / "tests" / "fixtures" / "writes-source"
RELEASE = "writes-source-0.1.0"


def test_a_crate_changed_during_the_release_is_named_and_its_start_is_locked(
    docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    project = tmp_path / "crate"
    shutil.copytree(FIXTURE, project, ignore=shutil.ignore_patterns("target"))
    artifacts = tmp_path / "artifacts"
    argv = ["release", "--config", str(project / "orchestrator.toml"), "--bench-runs", "0"]
    argv += ["--artifacts-dir", str(artifacts), "--allow-dirty"]  # a copy outside git
    process = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", *argv],
        cwd=REPO,
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    STARTED_PIDS.add(process.pid)
    lines: list[str] = []
    assert process.stdout is not None
    main = project / "src" / "main.rs"
    for line in process.stdout:
        lines.append(line)
        # The sources are in the container, checked against the plan's snapshot at the
        # start of build-baseline (run or taken from the step cache): an edit now changes
        # nothing that is built.
        if line.startswith("▶ build-release"):
            main.write_text(main.read_text() + "// edited while the release ran\n")
            break
    rest, _ = process.communicate(timeout=1200)
    run = Run(process.returncode, "".join(lines) + rest)
    sys.stdout.write(run.output)
    assert run.returncode == 0, run.output
    assert "warning: the crate changed: src/main.rs" in run.output
    assert "the crate changed while the release ran: src/main.rs" in run.output
    release_dir = artifacts / RELEASE
    lock = json.loads((release_dir / "release.lock").read_text())
    manifest = json.loads((release_dir / f"{RELEASE}-linux-x86_64-cpu" / "build.json").read_text())
    # The lock pins the sources the published target was built from: the start's.
    built_from = manifest["inputs"]["source_archive_sha256"]
    assert lock["source"]["source_archive_sha256"] == built_from
    assert managed_containers(docker_client) == []

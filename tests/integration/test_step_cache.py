"""The step cache for real: a release of two CPU levels builds the plain baseline once,
and the release's binaries are the same bytes when every step runs (--force)."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import docker
import pytest

from tests.integration.conftest import REPO, managed_containers, orchestrator

pytestmark = pytest.mark.integration
FIXTURE = REPO / "tests" / "fixtures" / "level-sensitive"
NAME = "level-sensitive"
V2 = f"{NAME}-0.0.1-linux-x86_64-cpu"
V3 = f"{NAME}-0.0.1-linux-x86_64-cpu-v3"
# Two levels of one flavor, nothing but the builds: the baselines of both are identical.
CONFIG = """[package]
crate = "."

[build]
source_date_epoch = 1700000000
flavors = ["cpu"]

[flavors.cpu]
levels = ["x86-64-v2", "x86-64-v3"]

[pgo]
enabled = false

[bolt]
enabled = false

[test]
enabled = false
reason = "its tests refuse AVX2 builds; this release is about the baseline"
"""


def _baseline_cargo_runs(artifact: Path) -> int:
    """`cargo build` commands in the artifact's build-baseline step log."""
    (log,) = (artifact / "logs").glob("*-build-baseline.log")
    return sum(
        1 for line in log.read_text().splitlines() if line.startswith("+ ") and " build " in line
    )


def test_two_cpu_levels_build_the_baseline_once(
    tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    project = tmp_path / "project"
    shutil.copytree(FIXTURE, project, ignore=shutil.ignore_patterns("target"))
    (project / "orchestrator.toml").write_text(CONFIG)
    # Sources no earlier run built: the step cache (shared with other runs) has no entry.
    with (project / "src" / "main.rs").open("a") as source:
        source.write(f"// {uuid.uuid4().hex}\n")
    config = ["--config", str(project / "orchestrator.toml"), "--bench-runs", "0"]
    first = tmp_path / "first"
    run = orchestrator(["release", *config, "--artifacts-dir", str(first), "--allow-dirty"])
    assert run.returncode == 0, run.output
    assert "= build-baseline" in run.output
    assert f"(same inputs as {V2})" in run.output
    release = first / f"{NAME}-0.0.1"
    manifests = {a: json.loads((release / a / "build.json").read_text()) for a in (V2, V3)}
    assert _baseline_cargo_runs(release / V2) == 1
    assert _baseline_cargo_runs(release / V3) == 0
    assert manifests[V2]["variants"]["baseline"] == manifests[V3]["variants"]["baseline"]
    assert manifests[V2].get("reused_steps") is None
    reused = manifests[V3]["reused_steps"]["build-baseline"]
    assert reused["made_by"] == V2
    assert reused["files"][NAME]["sha256"] == manifests[V2]["variants"]["baseline"]["sha256"]
    # The levels differ where they should: only the baseline was shared.
    assert manifests[V2]["artifact"]["sha256"] != manifests[V3]["artifact"]["sha256"]

    # Every step run again, none from the step cache: the same release binaries.
    second = tmp_path / "second"
    forced = orchestrator(
        ["release", *config, "--artifacts-dir", str(second), "--allow-dirty", "--force"]
    )
    assert forced.returncode == 0, forced.output
    assert "= build-baseline" not in forced.output
    again = second / f"{NAME}-0.0.1"
    for artifact in (V2, V3):
        assert _baseline_cargo_runs(again / artifact) == 1
        assert (again / artifact / NAME).read_bytes() == (release / artifact / NAME).read_bytes()
    assert managed_containers(docker_client) == []

"""`orchestrator release` over flavors and CPU levels: plans, partial failure, release.json
and logs/targets.json."""

from __future__ import annotations

import json
from pathlib import Path

import docker
import pytest

from tests.integration.conftest import (
    REPO,
    Release,
    managed_containers,
    managed_images,
    orchestrator,
)

pytestmark = pytest.mark.integration
LEVELS = REPO / "tests" / "fixtures" / "level-sensitive" / "orchestrator.toml"


def test_dry_run_prints_the_plan_and_builds_nothing(
    release: Release, tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    before = managed_images(docker_client)
    run = orchestrator(["release", "--dry-run", "--artifacts-dir", str(tmp_path)])
    assert run.returncode == 0, run.output
    assert "release plan (nothing is built)" in run.output
    assert "tinyllm-0.1.0-linux-x86_64-cpu " in run.output
    assert "tinyllm-0.1.0-linux-x86_64-cpu-v3" in run.output
    assert "toolchain image" in run.output  # a cache hit: the image exists by now
    assert list(tmp_path.iterdir()) == []
    assert managed_images(docker_client) == before


def test_portability_report_in_manifest(release: Release) -> None:
    portability = release.manifest["portability"]
    assert portability["target"] == "x86_64-unknown-linux-gnu"
    assert portability["glibc_max"].startswith("2.")
    assert "libc.so.6" in portability["needed"]
    assert "sse4.2" in portability["cpu_features"]
    assert "avx2" not in portability["cpu_features"]  # x86-64-v2 stays portable


def test_failing_level_and_flavor_do_not_hide_the_others(
    tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    config = ["--config", str(LEVELS), "--artifacts-dir", str(tmp_path)]
    run = orchestrator(["release", *config, "--bench-runs", "0", "--allow-dirty"])
    assert run.returncode == 49, run.output
    assert "2 of 3 targets failed" in run.output
    assert "refuses AVX2 builds" in run.output
    assert "refuses Arm builds" in run.output  # its tests ran under qemu, and failed
    release_dir = tmp_path / "level-sensitive-0.0.1"
    # how each went: the unsigned logs/targets.json; release.json lists what is published
    listing = json.loads((release_dir / "logs" / "targets.json").read_text())
    statuses = {a["artifact"]: a["status"] for a in listing["targets"]}
    assert statuses == {
        "level-sensitive-0.0.1-linux-x86_64-cpu": "ok",
        "level-sensitive-0.0.1-linux-x86_64-cpu-v3": "failed",
        "level-sensitive-0.0.1-linux-aarch64-cpu": "failed",
    }
    assert (release_dir / "level-sensitive-0.0.1-linux-x86_64-cpu" / "level-sensitive").is_file()
    assert not (release_dir / "level-sensitive-0.0.1-linux-x86_64-cpu-v3").exists()
    assert not (release_dir / "level-sensitive-0.0.1-linux-aarch64-cpu").exists()
    published = json.loads((release_dir / "release.json").read_text())
    assert [a["artifact"] for a in published["artifacts"]] == [
        "level-sensitive-0.0.1-linux-x86_64-cpu"
    ]
    assert "release.json" in (release_dir / "SHA256SUMS").read_text()
    verified = orchestrator(["verify", str(release_dir)])
    assert verified.returncode == 0, verified.output
    assert managed_containers(docker_client) == []

"""The tool on rootful Podman 4.3 (Debian's package), through its Docker-compatible
socket, with nothing done by hand: `doctor` names the engine and finds every capability,
a build of the smallest fixture passes, `verify` passes, a second build reuses every
step, and the release the host's Docker Engine built reproduces on Podman bit for bit.

The Podman service has a store of its own (podman_engine.py); the base and toolchain
images come from the host engine by `docker save | podman load`. Podman's build has a
cache of its own holding what the host cache has of rootfs, .debs and crates but no
step, so every step runs on Podman; the second build then takes all of them from it.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from orchestrator.config.options import resolve_cache_dir
from tests.integration.conftest import REPO, Run, managed_containers, orchestrator
from tests.integration.podman_engine import PodmanEngine, podman_engine

pytestmark = pytest.mark.integration

FIXTURE = REPO / "tests" / "fixtures" / "level-sensitive"
NAME = "level-sensitive-0.0.1"
ARTIFACT = f"{NAME}-linux-x86_64-cpu"
# One flavor, one level; what is not about the engine is off.
CONFIG = """
[package]
crate = "."

[build]
source_date_epoch = 1700000000
flavors = ["cpu"]

[flavors.cpu]
levels = ["x86-64-v2"]

[pgo]
enabled = false

[bolt]
enabled = false

[gate]
policy = "off"

[test]
enabled = false
reason = "the Podman tests are about the engine, not the crate's tests"

[release]
distro_check = "off"
"""
# The steps a build of CONFIG takes from the step cache when nothing changed.
CACHED = {"build-baseline", "build-release"}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    project = tmp_path_factory.mktemp("podman") / "level-sensitive"
    shutil.copytree(FIXTURE, project, ignore=shutil.ignore_patterns("target"))
    (project / "orchestrator.toml").write_text(CONFIG)
    return project


def config(project: Path) -> list[str]:
    return ["--config", str(project / "orchestrator.toml")]


@pytest.fixture(scope="module")
def docker_release(project: Path, docker_client: docker.DockerClient) -> Path:
    """The release on the host's Docker Engine (its images are made here if missing)."""
    artifacts = project.parent / "on-docker"
    options = ["--artifacts-dir", str(artifacts), "--bench-runs", "0", "--allow-dirty"]
    run = orchestrator(["release", *config(project), *options])
    assert run.returncode == 0, run.output
    assert managed_containers(docker_client) == []
    return artifacts / NAME


@pytest.fixture(scope="module")
def podman(project: Path, docker_release: Path) -> Iterator[PodmanEngine]:
    """A fresh Podman holding the plan's images, as the host engine made them."""
    plan = orchestrator(["build", *config(project), "--dry-run", "--json"])
    assert plan.returncode == 0, plan.output
    document = json.loads(plan.output[plan.output.index("{") :])
    images = [document["base_image"]["reference"], document["image"]["reference"]]
    with podman_engine() as engine:
        engine.load(images)
        yield engine


def on_podman(podman: PodmanEngine, args: list[str]) -> Run:
    return orchestrator(args, env={"DOCKER_HOST": podman.docker_host})


@pytest.fixture(scope="module")
def cache(project: Path) -> Path:
    """A cache of Podman's own: the host cache's rootfs, .debs and crates, hard-linked;
    no step, so the first build on Podman runs every one."""
    main = resolve_cache_dir(os.environ, None)
    where = project.parent / "podman-cache"
    where.mkdir()
    for part in ("rootfs", "packages", "crates"):
        if (main / part).is_dir():
            shutil.copytree(main / part, where / part, copy_function=os.link)
    return where


def build(podman: PodmanEngine, project: Path, cache: Path, out: str) -> tuple[Run, Path]:
    artifacts = project.parent / out
    options = ["--artifacts-dir", str(artifacts), "--cache-dir", str(cache), "--bench-runs", "0"]
    run = on_podman(podman, ["build", *config(project), *options])
    assert run.returncode == 0, run.output
    return run, artifacts / NAME / ARTIFACT


def manifest(artifact: Path) -> dict[str, Any]:
    return dict(json.loads((artifact / "build.json").read_text()))


def run_log(artifact: Path) -> dict[str, Any]:
    """How the build went: steps, reused steps, engine (the unsigned logs/run.json)."""
    return dict(json.loads((artifact / "logs" / "run.json").read_text()))


def test_doctor_names_podman_and_finds_every_capability(podman: PodmanEngine) -> None:
    run = on_podman(podman, ["doctor", "--json"])
    assert run.returncode == 0, run.output
    report = json.loads(run.output[run.output.index("{") :])
    checks = {check["name"]: check for check in report["checks"]}
    assert checks["docker"]["detail"].startswith("Podman 4.3.1 (rootful), API 1.41")
    for name in (
        "import and tag",
        "image cleanup",
        "image lock",
        "init",
        "seccomp profile",
        "read-only volumes",
        "pids and memory limits",
        "perf in a container",  # our seccomp profile, from a file, lets perf sample
    ):
        assert checks[name]["status"] == "ok", checks[name]


@pytest.fixture(scope="module")
def first_build(podman: PodmanEngine, project: Path, cache: Path) -> Path:
    run, artifact = build(podman, project, cache, "first")
    assert not run_log(artifact).get("reused_steps"), run.output
    return artifact


def test_a_build_on_podman_passes_verify(first_build: Path, podman: PodmanEngine) -> None:
    record = run_log(first_build)
    assert record["engine"]["version"] == "4.3.1"
    verified = orchestrator(["verify", str(first_build.parent)])
    assert verified.returncode == 0, verified.output
    client = podman.client()
    # Nothing left behind, and the import's tag lost by Podman left no stray name.
    assert client.containers.list(all=True) == []
    tags = [tag for image in client.images.list() for tag in image.tags]
    assert not [tag for tag in tags if tag.endswith(":latest")], tags


def test_a_second_build_on_podman_reuses_every_step(
    first_build: Path, podman: PodmanEngine, project: Path, cache: Path
) -> None:
    run, artifact = build(podman, project, cache, "second")
    reused = set(run_log(artifact)["reused_steps"])
    assert reused == CACHED, run.output
    statuses = {step["name"]: step["status"] for step in run_log(artifact)["steps"]}
    ran = {name for name, status in statuses.items() if status not in ("cached", "skipped")}
    print(f"second build on Podman: {len(reused)} steps reused; run again: {sorted(ran)}")
    assert (artifact / "level-sensitive").read_bytes() == (
        first_build / "level-sensitive"
    ).read_bytes()


def test_the_docker_release_reproduces_on_podman_bit_for_bit(
    docker_release: Path, podman: PodmanEngine, project: Path
) -> None:
    workdir = project.parent / "reproduced"
    options = ["--reuse-images", "--source", str(project), "--workdir", str(workdir)]
    run = on_podman(podman, ["reproduce", str(docker_release), *options])
    assert run.returncode == 0, run.output
    assert "bit-identical" in run.output
    lock = json.loads((docker_release / "release.lock").read_text())
    (target,) = lock["targets"]
    assert target["built_on"]["version"] != "4.3.1"  # Docker built it; Podman rebuilt it

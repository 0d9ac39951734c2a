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
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from tests.integration.conftest import Run, orchestrator
from tests.integration.engine_kinds import (
    ARTIFACT,
    NAME,
    config,
    engine_project,
    inputs_only_cache,
    plan_images,
    release_on_host,
    run_log,
)
from tests.integration.podman_engine import PodmanEngine, podman_engine

pytestmark = pytest.mark.integration

# The steps a build of the shared config takes from the step cache when nothing changed.
CACHED = {"build-baseline", "build-release"}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return engine_project(tmp_path_factory, "podman")


@pytest.fixture(scope="module")
def docker_release(project: Path, docker_client: docker.DockerClient) -> Path:
    return release_on_host(project, docker_client)


@pytest.fixture(scope="module")
def podman(project: Path, docker_release: Path) -> Iterator[PodmanEngine]:
    """A fresh Podman holding the plan's images, as the host engine made them."""
    images = plan_images(project)
    with podman_engine() as engine:
        engine.load(images)
        yield engine


def on_podman(podman: PodmanEngine, args: list[str]) -> Run:
    return orchestrator(args, env={"DOCKER_HOST": podman.docker_host})


@pytest.fixture(scope="module")
def cache(project: Path) -> Path:
    return inputs_only_cache(project, "podman")


def build(podman: PodmanEngine, project: Path, cache: Path, out: str) -> tuple[Run, Path]:
    artifacts = project.parent / out
    options = ["--artifacts-dir", str(artifacts), "--cache-dir", str(cache), "--bench-runs", "0"]
    run = on_podman(podman, ["build", *config(project), *options])
    assert run.returncode == 0, run.output
    return run, artifacts / NAME / ARTIFACT


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
    # Docker built it (logs/run.json; the signed lock names no engine); Podman rebuilt it.
    assert run_log(docker_release / ARTIFACT)["engine"]["version"] != "4.3.1"

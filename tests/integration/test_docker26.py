"""The tool on a current Docker Engine: Debian trixie's docker.io (26.x, API 1.45), started
beside the host's 20.10 (docker26_engine.py), with nothing done by hand: `doctor` names it
and finds every capability, a build of the smallest fixture passes `verify`, and the
release the host's engine built reproduces on it bit for bit.

The base and toolchain images come from the host engine by `docker save | docker load`.
The build has a cache of its own holding what the host cache has of rootfs, .debs and
crates but no step, so every step runs on Docker 26.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from tests.integration.conftest import Run, orchestrator
from tests.integration.docker26_engine import Docker26Engine, docker26_engine
from tests.integration.engine_kinds import (
    ARTIFACT,
    NAME,
    config,
    engine_project,
    inputs_only_cache,
    plan_images,
    release_on_host,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return engine_project(tmp_path_factory, "docker26")


@pytest.fixture(scope="module")
def docker_release(project: Path, docker_client: docker.DockerClient) -> Path:
    return release_on_host(project, docker_client)


@pytest.fixture(scope="module")
def engine(project: Path, docker_release: Path) -> Iterator[Docker26Engine]:
    """A fresh Docker 26 holding the plan's images, as the host engine made them."""
    images = plan_images(project)
    with docker26_engine() as started:
        started.load(images)
        yield started


def on_docker26(engine: Docker26Engine, args: list[str]) -> Run:
    return orchestrator(args, env={"DOCKER_HOST": engine.docker_host})


@pytest.fixture(scope="module")
def cache(project: Path) -> Path:
    return inputs_only_cache(project, "docker26")


def engine_record(artifact: Path) -> dict[str, Any]:
    """The engine that built `artifact`: logs/run.json's, else (older layout) build.json's."""
    for record in (artifact / "logs" / "run.json", artifact / "build.json"):
        if record.is_file():
            found = json.loads(record.read_text()).get("engine")
            if found:
                return dict(found)
    raise AssertionError(f"no engine record in {artifact}")


def test_doctor_names_docker_26_and_finds_every_capability(engine: Docker26Engine) -> None:
    run = on_docker26(engine, ["doctor", "--json"])
    assert run.returncode == 0, run.output
    report = json.loads(run.output[run.output.index("{") :])
    checks = {check["name"]: check for check in report["checks"]}
    version = engine.client().version()
    print(f"Docker 26 here: {checks['docker']['detail']}")  # the storage driver it chose
    assert checks["docker"]["detail"].startswith(f"Docker Engine {version['Version']} (root")
    assert version["Version"].split(".")[0] == "26"
    for name in (
        "import and tag",
        "image cleanup",
        "image lock",
        "init",
        "seccomp profile",
        "read-only volumes",
        "pids and memory limits",
        "perf in a container",
    ):
        assert checks[name]["status"] == "ok", checks[name]


def test_a_build_on_docker_26_passes_verify(
    engine: Docker26Engine, project: Path, cache: Path
) -> None:
    artifacts = project.parent / "on-docker26"
    options = ["--artifacts-dir", str(artifacts), "--cache-dir", str(cache), "--bench-runs", "0"]
    run = on_docker26(engine, ["build", *config(project), *options])
    assert run.returncode == 0, run.output
    artifact = artifacts / NAME / ARTIFACT
    record = engine_record(artifact)
    assert record["kind"] == "docker" and record["version"].startswith("26.")
    assert record["api_version"] == engine.client().version()["ApiVersion"]
    assert record["unapplied_limits"] == []  # rootful: the pids and memory limits held
    verified = orchestrator(["verify", str(artifact.parent)])
    assert verified.returncode == 0, verified.output
    assert engine.client().containers.list(all=True) == []  # nothing left behind


def test_the_docker_release_reproduces_on_docker_26_bit_for_bit(
    docker_release: Path, engine: Docker26Engine, project: Path
) -> None:
    workdir = project.parent / "reproduced"
    options = ["--reuse-images", "--source", str(project), "--workdir", str(workdir)]
    run = on_docker26(engine, ["reproduce", str(docker_release), *options])
    assert run.returncode == 0, run.output
    assert "bit-identical" in run.output
    assert (
        engine_record(docker_release / ARTIFACT)["version"] != engine.client().version()["Version"]
    )  # the host's engine built it; Docker 26 rebuilt it

"""What the engine-kind tests (test_podman.py, test_docker26.py) share: the smallest
fixture with everything that is not about the engine turned off, its release on the host's
Docker Engine (which the other engine then reproduces), the images that engine needs, and
a cache of its own that holds the host cache's inputs but no step.

One config for every engine kind: the host's release of it is made once and shared through
the step cache.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import docker
import pytest

from orchestrator.config.resolve.options import resolve_cache_dir
from tests.integration.conftest import REPO, managed_containers, orchestrator

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
reason = "the engine-kind tests are about the engine, not the crate's tests"

[release]
distro_check = "off"
"""


def engine_project(tmp_path_factory: pytest.TempPathFactory, kind: str) -> Path:
    """A copy of the fixture with CONFIG, in a folder of the engine kind's own."""
    project = tmp_path_factory.mktemp(kind) / "level-sensitive"
    shutil.copytree(FIXTURE, project, ignore=shutil.ignore_patterns("target"))
    (project / "orchestrator.toml").write_text(CONFIG)
    return project


def config(project: Path) -> list[str]:
    return ["--config", str(project / "orchestrator.toml")]


def release_on_host(project: Path, docker_client: docker.DockerClient) -> Path:
    """The release on the host's Docker Engine (its images are made here if missing)."""
    artifacts = project.parent / "on-docker"
    options = ["--artifacts-dir", str(artifacts), "--bench-runs", "0", "--allow-dirty"]
    run = orchestrator(["release", *config(project), *options])
    assert run.returncode == 0, run.output
    assert managed_containers(docker_client) == []
    return artifacts / NAME


def plan_images(project: Path) -> list[str]:
    """The base and toolchain image references a build of `project` uses."""
    plan = orchestrator(["build", *config(project), "--dry-run", "--json"])
    assert plan.returncode == 0, plan.output
    document = json.loads(plan.output[plan.output.index("{") :])
    return [document["base_image"]["reference"], document["image"]["reference"]]


def inputs_only_cache(project: Path, kind: str) -> Path:
    """A cache of the engine kind's own: the host cache's rootfs, .debs and crates,
    hard-linked; no step, so the first build on that engine runs every one."""
    main = resolve_cache_dir(os.environ, None)
    where = project.parent / f"{kind}-cache"
    where.mkdir()
    for part in ("rootfs", "packages", "crates"):
        if (main / part).is_dir():
            shutil.copytree(main / part, where / part, copy_function=os.link)
    return where


def run_log(artifact: Path) -> dict[str, Any]:
    """How the build went: steps, reused steps, engine (the unsigned logs/run.json)."""
    return dict(json.loads((artifact / "logs" / "run.json").read_text()))

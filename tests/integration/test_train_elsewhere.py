"""`build --train-elsewhere` and `build --profiles` for real, on portable-cli's cpu flavor:
the bundle's train.sh runs in a bare Debian container (orchestrator's base image: no
orchestrator, no toolchain, no network, PATH=/usr/bin:/bin) and the profile merged from
what it brings back is the very profile that training in place makes."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import docker
import pytest

from tests.integration.conftest import REPO, managed_containers, orchestrator

pytestmark = pytest.mark.integration
FIXTURE = REPO / "tests" / "fixtures" / "portable-cli"
CONFIG = """[package]
crate = "."
binary = "sumtool"

[build]
source_date_epoch = 1700000000
flavors = ["cpu"]

[release]
glibc_floor = "2.28"

[train]
workloads = [["data/numbers.txt", "40"], ["data/numbers.txt", "3"]]

[validate]
command = ["data/numbers.txt", "2"]

[bench]
command = ["data/numbers.txt", "200"]

[bolt]
enabled = false

[gate]
policy = "off"
"""


def _base_image(client: docker.DockerClient) -> str:
    tags = sorted(
        tag
        for image in client.images.list("orchestrator/base")
        for tag in image.tags
        if tag.startswith("orchestrator/base:trixie-")
    )
    assert tags, "the first build made orchestrator's base image"
    return tags[-1]


def _build_json(artifacts: Path) -> dict[str, Any]:
    (found,) = artifacts.glob("*/sumtool-*-cpu/build.json")
    data: dict[str, Any] = json.loads(found.read_text())
    return data


def test_profiles_trained_in_a_bare_container_equal_training_here(
    tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    started = time.monotonic()
    project = tmp_path / "project"
    shutil.copytree(FIXTURE, project, ignore=shutil.ignore_patterns("target"))
    (project / "orchestrator.toml").write_text(CONFIG)
    config = ["--flavor", "cpu", "--config", str(project / "orchestrator.toml")]

    here = orchestrator(["build", *config, "--retrain", "--artifacts-dir", str(tmp_path / "a1")])
    assert here.returncode == 0, here.output
    trained_here = _build_json(tmp_path / "a1")["pgo"]
    assert trained_here["profile_source"] == "trained here"

    bundle = tmp_path / "bundle"
    export = orchestrator(
        [
            "build",
            *config,
            "--artifacts-dir",
            str(tmp_path / "a2"),
            "--train-elsewhere",
            str(bundle),
        ]
    )
    assert export.returncode == 0, export.output
    assert {"train.sh", "manifest.json", "manifest.json.minisig"} <= {
        p.name for p in bundle.iterdir()
    }
    assert (bundle / "src" / "data" / "numbers.txt").is_file()
    copy = tmp_path / "elsewhere"
    shutil.copytree(bundle, copy)
    trained = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "-v", f"{copy}:/bundle",
         _base_image(docker_client), "env", "-i", "PATH=/usr/bin:/bin", "sh", "/bundle/train.sh"],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr

    back = orchestrator(
        [
            "build",
            *config,
            "--artifacts-dir",
            str(tmp_path / "a3"),
            "--profiles",
            str(copy / "profiles.tar"),
        ]
    )
    assert back.returncode == 0, back.output
    elsewhere = _build_json(tmp_path / "a3")["pgo"]
    source = str(elsewhere["profile_source"])
    manifest_sha = subprocess.run(
        ["sha256sum", str(bundle / "manifest.json")], capture_output=True, text=True, check=True
    ).stdout.split()[0]
    assert source.startswith("trained elsewhere: arch x86_64, cpu ")
    assert source.endswith(f"bundle {manifest_sha}")
    assert elsewhere["profile"]["sha256"] == trained_here["profile"]["sha256"]
    assert managed_containers(docker_client) == []
    print(f"train-elsewhere round trip: {time.monotonic() - started:.0f} s")

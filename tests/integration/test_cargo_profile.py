"""[build] profile for real: a crate that keeps `debug = 1` in `release`, built with its
`dist` profile (inherits release, debug = false, strip = true), ships a binary without
DWARF sections or symbols, smaller than its plain `cargo build --release` (the yardstick,
which keeps the release profile's debug info). One build: the default profile's path is
every other integration test's, and the warning about debug info is a unit test's."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import docker
import pytest

from orchestrator.config.resolve.options import default_cache_dir
from orchestrator.model.documents.shipped_profile import DEBUG_PREFIXES, section_sizes
from tests.integration.conftest import REPO, managed_containers, orchestrator

pytestmark = pytest.mark.integration
FIXTURE = REPO / "tests" / "fixtures" / "dist-profile"
NAME = "dist-profile"
ARTIFACT = f"{NAME}-0.0.1-linux-x86_64-cpu"


def _build(project: Path, artifacts: Path, env: dict[str, str]) -> tuple[str, Path]:
    config = ["--config", str(project / "orchestrator.toml"), "--artifacts-dir", str(artifacts)]
    run = orchestrator(["build", *config, "--flavor", "cpu"], env=env)
    assert run.returncode == 0, run.output
    return run.output, artifacts / f"{NAME}-0.0.1" / ARTIFACT


def _manifest(artifact: Path) -> dict[str, Any]:
    return dict(json.loads((artifact / "build.json").read_text()))


def test_the_crates_dist_profile_ships_without_debug_info(
    tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    project = tmp_path / "project"
    shutil.copytree(FIXTURE, project, ignore=shutil.ignore_patterns("target"))
    with (project / "src" / "main.rs").open("a") as source:  # builds no run has cached
        source.write(f"// {uuid.uuid4().hex}\n")
    output, dist = _build(project, tmp_path / "dist", {"ORCHESTRATOR_BUILD_PROFILE": "dist"})
    manifest = _manifest(dist)
    sections = section_sizes(dist / NAME)
    assert not any(name.startswith(DEBUG_PREFIXES) for name in sections), sorted(sections)
    assert ".symtab" not in sections  # strip = true
    assert manifest["profile"] == {
        "name": "dist",
        "debug_sections": [],
        "debug_bytes": 0,
        "symbols": False,
    }
    assert "debug info" not in output
    cargo = manifest["flags"]["variants"]["release"]["cargo"]
    assert cargo[cargo.index("--profile") + 1] == "dist" and 'profile.dist.lto="fat"' in cargo
    # The yardstick is plain `cargo build --release`: the crate's release profile, with its
    # debug = 1, as a user without orchestrator gets it (kept for `orchestrator bench`).
    assert "--release" in manifest["flags"]["variants"]["baseline"]["cargo"]
    shipped = hashlib.sha256((dist / NAME).read_bytes()).hexdigest()  # keep_variants' key
    plain = default_cache_dir(os.environ) / "variants" / shipped / "baseline"
    plain_sections = section_sizes(plain)
    assert ".debug_info" in plain_sections and ".symtab" in plain_sections
    small, large = (dist / NAME).stat().st_size, plain.stat().st_size
    print(f"shipped {NAME}: plain cargo build --release {large} bytes, dist profile {small}")
    assert small < large
    assert managed_containers(docker_client) == []

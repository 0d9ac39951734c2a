"""Portable artifacts: tests/fixtures/portable-cli spawns a child process (Rust std's newest
glibc references) and parses numbers with C's strtol under _GNU_SOURCE (glibc 2.38's
__isoc23_strtol with Debian 13's headers). Released for cpu and aarch64, each binary must
need no glibc above the floor (2.31), load and validate in Debian 11 and 13 containers (the
`distros` step, qemu for aarch64), and the x86_64 one must run on this host.

The plain `cargo build --release` of the same fixture (the baseline, linked against the
image's own glibc) is what orchestrator shipped before floors: it needs glibc 2.39.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import pytest

from orchestrator.config.resolve.options import resolve_cache_dir
from orchestrator.model.binaries.elf import loader_needs, version_tuple
from tests.integration.conftest import REPO, Run, orchestrator, release_copy

pytestmark = pytest.mark.integration

FIXTURE = REPO / "tests" / "fixtures" / "portable-cli"
RELEASE = "sumtool-0.3.0"
ARTIFACTS = (f"{RELEASE}-linux-x86_64-cpu", f"{RELEASE}-linux-aarch64-cpu")
FLOOR = "2.28"


@dataclass(frozen=True)
class PortableRelease:
    run: Run
    project: Path
    directory: Path

    def manifest(self, artifact: str) -> dict[str, Any]:
        return dict(json.loads((self.directory / artifact / "build.json").read_text()))


@pytest.fixture(scope="module")
def portable_release(
    docker_client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory
) -> PortableRelease:
    project = tmp_path_factory.mktemp("portable") / "portable-cli"
    run, artifacts = release_copy(FIXTURE, project, docker_client)
    return PortableRelease(run, project, artifacts / RELEASE)


@pytest.mark.parametrize("artifact", ARTIFACTS)
def test_no_symbol_above_the_floor(portable_release: PortableRelease, artifact: str) -> None:
    binary = portable_release.directory / artifact / "sumtool"
    dynamic = subprocess.run(
        ["objdump", "-T", str(binary)], capture_output=True, text=True, check=True
    ).stdout
    versions = {
        word.strip("()")
        for line in dynamic.splitlines()
        for word in line.split()
        if word.startswith("(GLIBC_2.")
    }
    assert versions, dynamic  # it does link against glibc
    newest = max(versions, key=lambda v: version_tuple(v.removeprefix("GLIBC_")))
    assert version_tuple(newest.removeprefix("GLIBC_")) <= version_tuple(FLOOR), dynamic
    assert "__isoc23_strtol" not in dynamic  # the C was compiled with Debian 11's headers
    assert "strtol" in dynamic
    portability = portable_release.manifest(artifact)["portability"]
    assert portability["glibc_floor"] == FLOOR
    assert portability["above_floor"] == []
    assert loader_needs(binary).glibc_max == portability["glibc_max"]


@pytest.mark.parametrize("artifact", ARTIFACTS)
def test_it_ran_on_old_and_new_debian(portable_release: PortableRelease, artifact: str) -> None:
    manifest = portable_release.manifest(artifact)
    runs = manifest["portability"]["distros"]
    assert [(r["suite"], r["loads"], r["validated"]) for r in runs] == [
        ("bullseye", True, True),
        ("trixie", True, True),
    ]
    assert manifest["pgo"] is not None
    assert manifest["bolt"]["applied"] is True or artifact.endswith("aarch64-cpu")
    summary = json.loads((portable_release.directory / "release.json").read_text())
    target = next(t for t in summary["artifacts"] if t["artifact"] == artifact)
    assert target["oldest_distribution"] == "Debian 11 (bullseye, glibc 2.31)"
    assert target["glibc"] == manifest["portability"]["glibc_max"]


def test_the_x86_64_binary_runs_on_this_host(portable_release: PortableRelease) -> None:
    binary = portable_release.directory / ARTIFACTS[0] / "sumtool"
    ran = subprocess.run(
        [str(binary), "data/numbers.txt", "2"],
        cwd=portable_release.project,
        capture_output=True,
        text=True,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("child saw 5829 numbers\n"), ran.stdout
    assert "skipped: 171" in ran.stdout


def test_the_same_fixture_linked_the_old_way_needs_glibc_2_39(
    portable_release: PortableRelease,
) -> None:
    """The baseline (plain cargo build, the image's glibc) as orchestrator kept it for
    bench: this is what the release shipped before it linked against the floor."""
    sha = portable_release.manifest(ARTIFACTS[0])["artifact"]["sha256"]
    baseline = resolve_cache_dir(os.environ) / "variants" / sha / "baseline"
    needs = loader_needs(baseline)
    assert needs.glibc_max == "2.39"
    above = {s.name for s in needs.symbols_above(FLOOR)}
    assert {"pidfd_spawnp", "__isoc23_strtol"} <= above
    verified = orchestrator(["verify", str(portable_release.directory)])
    assert verified.returncode == 0, verified.output
    assert "glibc" in verified.output

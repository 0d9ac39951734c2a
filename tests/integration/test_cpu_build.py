"""`orchestrator build --flavor cpu` on examples/tinyllm, for real."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import docker
import pytest
from testcontainers.core.container import DockerContainer

from tests.integration.conftest import (
    Release,
    interrupt_when,
    managed_containers,
    managed_images,
    managed_volumes,
    orchestrator,
)

pytestmark = pytest.mark.integration


STEPS = [
    "base-image",
    "toolchain-image",
    "toolchain-check",
    "glibc-view",
    "fetch-crates",
    "build-baseline",
    "build-release",
    "pgo-instrument",
    "pgo-train",
    "pgo-merge",
    "build-optimized",
    "test-build",
    "test",
    "bolt-profile",
    "bolt-optimize",
    "validate",
    "speed-gate",
    "strip-relocations",
    "portability",
    "distros",
    "sbom",
    "extract",
]


def _run_log(artifact: Path) -> dict[str, Any]:
    """How the build went: the folder's unsigned logs/run.json."""
    return dict(json.loads((artifact / "logs" / "run.json").read_text()))


def test_every_step_is_announced_and_timed(release: Release) -> None:
    for step in [*STEPS, "publish"]:
        assert f"▶ {step}" in release.run.output
    # how the build went: the unsigned logs/run.json (build.json, signed, has none of it)
    run = _run_log(release.directory)
    steps = run["steps"]
    assert release.manifest["steps"] is None and release.manifest["started_at"] is None
    assert [s["name"] for s in steps] == STEPS
    assert all(s["status"] in ("ok", "cached") for s in steps)
    # Step times are measured, not made up: none negative, and together no longer than
    # the build itself (started_at..finished_at, whole seconds) plus rounding.
    started = dt.datetime.fromisoformat(run["started_at"])
    finished = dt.datetime.fromisoformat(run["finished_at"])
    assert all(s["seconds"] >= 0 for s in steps)
    assert sum(s["seconds"] for s in steps) <= (finished - started).total_seconds() + 2
    logs = {p.name: p for p in (release.directory / "logs").iterdir()}
    assert "07-build-release.log" in logs  # numbered in the order the steps ran
    build_log = logs["07-build-release.log"].read_text()
    assert "+ " in build_log and "cargo build --bin tinyllm" in build_log
    assert "--offline --locked" in build_log


def test_images_built_from_a_clean_engine(release: Release) -> None:
    images = release.manifest["images"]
    assert isinstance(images, dict)
    assert images["toolchain"]["reference"].startswith("orchestrator/cpu:rustc-web-1.96-")
    assert images["base"]["labels"]["org.orchestrator.rootfs-sha256"]
    # Built this run exactly when the Engine did not have the image before the run.
    made = _run_log(release.directory)["images"]
    for kind in ("base", "toolchain"):
        existed = images[kind]["reference"] in release.images_before
        assert made[kind]["built_this_run"] is (not existed), kind


def test_checksums_verify_with_sha256sum(release: Release) -> None:
    subprocess.run(
        ["sha256sum", "--strict", "-c", "SHA256SUMS"],
        cwd=release.directory,
        check=True,
        capture_output=True,
    )
    listed = (release.directory / "SHA256SUMS").read_text()
    assert "  tinyllm\n" in listed and "  build.json\n" in listed


def test_manifest_records_toolchain_flags_and_inputs(release: Release) -> None:
    manifest = release.manifest
    toolchain = manifest["toolchain"]
    assert isinstance(toolchain, dict)
    assert toolchain["reported"]["rustc"]["LLVM version"].startswith("22.")
    assert toolchain["reported"]["llvm_major"] == 22
    flags = manifest["flags"]
    assert isinstance(flags, dict)
    assert flags["rustflags"][0] == "-Ctarget-cpu=x86-64-v2"
    assert (
        "-Cprofile-use=/build/out/pgo/merged.profdata"
        in flags["variants"]["optimized"]["rustflags"]
    )
    assert flags["release_profile"]["lto"] == "fat"
    inputs = manifest["inputs"]
    assert isinstance(inputs, dict)
    assert len(inputs["cargo_lock_sha256"]) == 64
    artifact = manifest["artifact"]
    assert isinstance(artifact, dict)
    binary = release.directory / "tinyllm"
    assert artifact["size"] == binary.stat().st_size


def test_binary_runs_on_the_host(release: Release) -> None:
    out = subprocess.run(
        [str(release.directory / "tinyllm"), "generate", "--seed", "1", "--tokens", "16"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    lines = out.splitlines()
    assert lines[0].startswith("tokens: ") and len(lines[0].split()) == 17
    assert lines[1].startswith("checksum: ")


def test_binary_runs_in_a_bare_base_container(release: Release) -> None:
    """No toolchain, no Rust runtime: just Debian's minbase and the shipped binary."""
    images = release.manifest["images"]
    assert isinstance(images, dict)
    base = images["base"]["reference"]
    container = (
        DockerContainer(base)
        .with_volume_mapping(str(release.directory), "/release", "ro")
        .with_command("/release/tinyllm generate --seed 1 --tokens 16")
    )
    with container:
        wrapped = container.get_wrapped_container()
        status = wrapped.wait(timeout=120)
        logs = wrapped.logs().decode()
    assert status["StatusCode"] == 0, logs
    host = subprocess.run(
        [str(release.directory / "tinyllm"), "generate", "--seed", "1", "--tokens", "16"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert logs == host  # same bytes out, wherever it runs


def test_second_run_rebuilds_no_image(release: Release, docker_client: docker.DockerClient) -> None:
    before = managed_images(docker_client)
    run = orchestrator(["build", "--flavor", "cpu", "--artifacts-dir", str(release.artifacts)])
    assert run.returncode == 0, run.output
    assert managed_images(docker_client) == before
    manifest = json.loads((release.directory / "build.json").read_text())
    run_log = _run_log(release.directory)
    statuses = {s["name"]: s["status"] for s in run_log["steps"]}
    for step in (
        "base-image",
        "toolchain-image",
        "fetch-crates",
        "pgo-instrument",
        "pgo-train",
        "pgo-merge",
        "bolt-profile",
    ):
        assert statuses[step] == "cached", step
    assert "pgo" in run_log["profiles_reused"]
    assert manifest["pgo"]["profile"]["sha256"] == release.manifest["pgo"]["profile"]["sha256"]
    assert run_log["images"]["toolchain"]["built_this_run"] is False
    # Same inputs, fresh containers: the same bytes, and callgrind the same counts.
    assert manifest["artifact"]["sha256"] == release.manifest["artifact"]["sha256"]
    gate, first = manifest["gate"], release.manifest["gate"]
    assert gate["shipped"] == first["shipped"]
    for name, counts in gate["variants"].items():
        # tinyllm's rayon hand-off may spin a few instructions more or less (2 in 40 M).
        expected = first["variants"][name]["estimated_cycles"]
        assert abs(counts["estimated_cycles"] - expected) <= expected * 1e-6, name


@pytest.mark.parametrize(
    "signals",
    [
        (signal.SIGINT,),
        (signal.SIGTERM,),  # what CI systems, `docker stop` and systemd send
        (signal.SIGINT, signal.SIGINT),  # an impatient second Ctrl-C during cleanup
    ],
    ids=["ctrl-c", "sigterm", "ctrl-c-twice"],
)
def test_a_stop_signal_leaves_nothing_behind(
    release: Release,
    docker_client: docker.DockerClient,
    tmp_path: Path,
    signals: tuple[signal.Signals, ...],
) -> None:
    artifacts = tmp_path / "artifacts"
    run = interrupt_when(
        ["build", "--flavor", "cpu", "--artifacts-dir", str(artifacts)],
        "▶ build-release",
        env={},
        signals=signals,
    )
    assert run.returncode == 130, run.output
    assert "stopping: removing containers" in run.output
    assert managed_volumes(docker_client) == []
    assert not artifacts.exists() or list(artifacts.iterdir()) == []
    assert list(tmp_path.iterdir()) in ([], [artifacts])
    assert managed_containers(docker_client) == []


def test_artifacts_dir_had_only_the_release(release: Release) -> None:
    assert sorted(p.name for p in release.artifacts.iterdir()) == ["tinyllm-0.1.0"]
    assert shutil.which("sha256sum")

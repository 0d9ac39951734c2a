"""A cuda flavor whose GPU path is broken as torchless-rs's was (tests/fixtures/
nvrtc-infinity: its kernel, compiled by NVRTC when the program runs, uses INFINITY, which
NVRTC does not know), through the training bundle.

What is real and what is not, since this machine has no GPU:
- Built in place, with no GPU, its logs/run.json says `gpu path: not exercised: <why>`; so
  does a build from profiles that a bare container without a GPU trained.
- The refusal at signing: train.sh runs in the cuda toolchain image, which holds the real
  NVRTC (libnvrtc.so.12 of CUDA 12.4) and no driver, with a stub `nvidia-smi` that lists
  one GPU, so the bundle's GPU check runs. The fixture's GPU path then really calls NVRTC
  on its kernel, and NVRTC's own error (`identifier "INFINITY" is undefined`) is what the
  recorded GPU run holds; `build --profiles` refuses to sign with exit 76 and quotes it.
  The device is the stub's: no kernel reaches a GPU here (this one would not compile
  anywhere), so what this shows is the refusal of a failed GPU run, not a GPU's verdict.

Extended: it needs the cuda image (6.4 GB), which only the extended tests build.
"""

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

pytestmark = [pytest.mark.integration, pytest.mark.extended]
FIXTURE = REPO / "tests" / "fixtures" / "nvrtc-infinity"
STUB_SMI = """#!/bin/sh
# A stub of the driver's nvidia-smi: one GPU listed, as train.sh's probe asks
case "$*" in
  *--query-gpu*) echo "NVIDIA Stub GPU, 999.1" ;;
  *-L*) echo "GPU 0: NVIDIA Stub GPU (UUID: GPU-00000000-0000-0000-0000-000000000000)" ;;
esac
"""


def _images(config: list[str]) -> tuple[str, str]:
    plan = orchestrator(["build", *config, "--dry-run"])
    assert plan.returncode == 0, plan.output
    data, _ = json.JSONDecoder().raw_decode(plan.output[plan.output.index("{") :])
    return str(data["base_image"]["reference"]), str(data["image"]["reference"])


def _build_json(artifacts: Path) -> dict[str, Any]:
    (found,) = artifacts.glob("*/rowmax-*-linux-x86_64-cuda/build.json")
    data: dict[str, Any] = json.loads(found.read_text())
    return data


def _gpu_path(artifacts: Path) -> str:
    """What the build says of its GPU path: a fact of the machine, so in the unsigned
    logs/run.json, never in the signed build.json."""
    assert _build_json(artifacts).get("gpu_path") is None  # kept only to read older files
    (found,) = artifacts.glob("*/rowmax-*-linux-x86_64-cuda/logs/run.json")
    return str(json.loads(found.read_text())["gpu_path"])


def _train(image: str, bundle: Path, *mounts: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "-v", f"{bundle}:/bundle", *mounts,
         image, "env", "-i", "PATH=/usr/bin:/bin", "sh", "/bundle/train.sh"],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip


def test_a_kernel_nvrtc_refuses_is_refused_at_signing_and_unexercised_is_said(
    tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    started = time.monotonic()
    project = tmp_path / "project"
    shutil.copytree(FIXTURE, project, ignore=shutil.ignore_patterns("target"))
    config = ["--flavor", "cuda", "--config", str(project / "orchestrator.toml")]
    base_image, cuda_image = _images(config)

    here = orchestrator(["build", *config, "--artifacts-dir", str(tmp_path / "a1")])
    assert here.returncode == 0, here.output
    manifest = _build_json(tmp_path / "a1")
    assert _gpu_path(tmp_path / "a1").startswith("not exercised: ")
    assert manifest["validation"]["identical"] is True  # the CPU path is fine

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
    (check,) = json.loads((bundle / "manifest.json").read_text())["gpu_checks"]
    assert check["gpu_args"] == [*check["cpu_args"], "--backend", "cuda"]

    # A machine without a GPU: the bundle trains, and says the GPU path was not exercised.
    plain = tmp_path / "plain"
    shutil.copytree(bundle, plain)
    trained = _train(base_image, plain)
    assert trained.returncode == 0, trained.stderr
    back = orchestrator(
        ["build", *config, "--artifacts-dir", str(tmp_path / "a3"),
         "--profiles", str(plain / "profiles.tar")]
    )  # fmt: skip
    assert back.returncode == 0, back.output
    assert _gpu_path(tmp_path / "a3") == (
        "not exercised: no GPU on this machine (through the training bundle)"
    )

    # NVRTC for real, a GPU by stub: the GPU run fails to compile its kernel.
    gpu = tmp_path / "gpu"
    shutil.copytree(bundle, gpu)
    smi = tmp_path / "nvidia-smi"
    smi.write_text(STUB_SMI)
    smi.chmod(0o755)
    # as root: the image's own user (the build's uid 1000) cannot write into this copy
    trained = _train(cuda_image, gpu, "--user", "0", "-v", f"{smi}:/usr/bin/nvidia-smi:ro")
    assert trained.returncode == 0, trained.stderr  # a failed GPU run is recorded, not fatal
    assert "gpu check g0" in trained.stderr and "exited with 1" in trained.stderr
    refused = orchestrator(
        ["build", *config, "--artifacts-dir", str(tmp_path / "a4"),
         "--profiles", str(gpu / "profiles.tar")]
    )  # fmt: skip
    assert refused.returncode == 76, refused.output
    said = " ".join(refused.output.split())  # however the message was wrapped
    assert "GPU check 0: the GPU run `rowmax --rows 128 --backend cuda` exited with 1" in said
    assert "on NVIDIA Stub GPU, driver 999.1" in said
    # NVRTC's own words, from the run on the training machine
    assert "rowmax: CUDA compile error: NVRTC_ERROR_COMPILATION" in said
    assert 'error: identifier "INFINITY" is undefined' in said
    assert not list((tmp_path / "a4").glob("*/rowmax-*/build.json"))  # nothing signed
    assert managed_containers(docker_client) == []
    print(f"broken GPU kernel through the bundle: {time.monotonic() - started:.0f} s")

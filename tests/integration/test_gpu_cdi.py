"""GPU passthrough through CDI with a fake device, on the Podman service the other Podman
tests start (podman_engine.py), driven through the engine layer as a build drives it.

The CDI spec declares `nvidia.com/gpu=all` as a stub `nvidia-smi` and a stub NVML library
mounted into the container; the service reads it as its /etc/cdi (a mount namespace of its
own: Podman 4.3 has no cdi_spec_dirs, and the machine's /etc/cdi stays empty).

What it pins: the spec is one Podman resolves (its own API gives a container the stub),
and the way orchestrator reaches an engine, the Docker-compatible API, is refused the CDI
name by Podman 4.3 in the engine's own words, so a cuda build there records its GPU path
as not exercised, `require` fails with exit 33, and no container is left behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.errors import GpuUnavailableError
from orchestrator.runtime.engine import Engine
from orchestrator.runtime.gpu_probe import gpu_use
from tests.integration.conftest import REPO
from tests.integration.podman_engine import PodmanEngine, podman_engine

pytestmark = pytest.mark.integration

STUB_GPU = "NVIDIA Stub GPU, 999.1"
NVML = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
SMI = f"""#!/bin/sh
# What the driver check asks: one line per GPU, name and driver
case "$*" in *--query-gpu*) echo "{STUB_GPU}"; exit 0;; esac
echo "| NVIDIA-SMI 999.1   Driver Version: 999.1   CUDA Version: 13.0 |"
"""


def fake_cdi(folder: Path) -> Path:
    """A CDI spec of one fake NVIDIA device: a stub nvidia-smi and a stub library."""
    (folder / "cdi").mkdir()
    smi, nvml = folder / "nvidia-smi", folder / "libnvidia-ml.so.1"
    smi.write_text(SMI)
    smi.chmod(0o755)
    nvml.write_text("not a library: the stub stands for the driver's NVML\n")
    bind = ["ro", "nosuid", "nodev", "bind"]
    spec = {
        "cdiVersion": "0.5.0",
        "kind": "nvidia.com/gpu",
        "devices": [
            {
                "name": "all",
                "containerEdits": {
                    "mounts": [
                        {
                            "hostPath": str(smi),
                            "containerPath": "/usr/bin/nvidia-smi",
                            "options": bind,
                        },
                        {"hostPath": str(nvml), "containerPath": NVML, "options": bind},
                    ]
                },
            }
        ],
    }
    (folder / "cdi" / "fake-nvidia.json").write_text(json.dumps(spec))
    return folder / "cdi"


@pytest.fixture(scope="module")
def base_image() -> str:
    """The example project's base image (small, with a shell), as the plan names it."""
    plan = subprocess.run(
        [sys.executable, "-m", "orchestrator", "build", "--flavor", "cpu", "--dry-run"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    return str(json.loads(plan.stdout)["base_image"]["reference"])


@pytest.fixture(scope="module")
def podman(tmp_path_factory: pytest.TempPathFactory, base_image: str) -> Iterator[PodmanEngine]:
    with podman_engine(cdi_dir=fake_cdi(tmp_path_factory.mktemp("cdi"))) as engine:
        engine.load([base_image])
        yield engine


def test_fake_cdi_gpu_on_podman(podman: PodmanEngine, base_image: str) -> None:
    started = time.monotonic()
    # Podman's own API resolves the spec: the container sees the stub driver.
    query = f"nvidia-smi --query-gpu=name,driver_version --format=csv,noheader && test -f {NVML}"
    own = subprocess.run(
        [
            *("podman", "--url", podman.docker_host, "run", "--rm", "--network", "none"),
            *("--device", "nvidia.com/gpu=all", base_image, "sh", "-c", query),
        ],
        env={**os.environ, **podman.environment},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert own.returncode == 0 and STUB_GPU in own.stdout, own.stderr
    engine = Engine(podman.client(), name="podman")
    use = gpu_use(engine, base_image, "cuda", "auto")
    # The compat API takes the CDI name for a device path and says so.
    assert use.passthrough is None
    assert "stat nvidia.com/gpu=all: no such file or directory" in use.why
    with pytest.raises(GpuUnavailableError):
        gpu_use(engine, base_image, "cuda", "require")
    assert engine.managed_containers() == []
    print(f"fake CDI GPU on Podman: {time.monotonic() - started:.1f} s")

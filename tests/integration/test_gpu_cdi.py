"""GPU passthrough through CDI with a fake device, on the Podman service the other Podman
tests start (podman_engine.py), driven through the engine layer as a build drives it.

The CDI spec declares `nvidia.com/gpu=all` as a stub `nvidia-smi` and a stub NVML library
mounted into the container; the service reads it as its /etc/cdi (a mount namespace of its
own: Podman 4.3 has no cdi_spec_dirs, and the machine's /etc/cdi stays empty).

What it pins: the spec is one Podman resolves, `gpu_use` finds the device by trying it,
and a container started by `Engine.container` with it (made through Podman's own API,
since its Docker-compatible one refuses CDI names) sees the stub: the driver check names
the stub GPU, with every capability still dropped and a build volume mounted.
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

from orchestrator.execute.verdict.gpu_path import NVIDIA_QUERY, devices_seen, exercised
from orchestrator.runtime.api import ContainerSpec, Limits
from orchestrator.runtime.engine import Engine
from orchestrator.runtime.gpu_probe import CDI_NVIDIA, gpu_use
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
    use = gpu_use(engine, base_image, "cuda", "require")
    assert use.passthrough == CDI_NVIDIA
    check = f"test -f {NVML} && grep CapEff /proc/self/status && touch /build/out/ok"
    with engine.volume("out") as volume:
        spec = ContainerSpec(
            base_image,
            volumes={volume: "/build/out"},
            limits=Limits(pids=256, memory=256 << 20),
            gpu=use.passthrough,
        )
        with engine.container(spec) as box:
            lines: list[str] = []
            assert box.exec(NVIDIA_QUERY, on_output=lines.append) == 0, lines
            assert exercised(devices_seen(lines)) == "exercised on NVIDIA Stub GPU, driver 999.1"
            said: list[str] = []
            assert box.exec(["sh", "-c", check], on_output=said.append) == 0, said
            assert said == ["CapEff:\t0000000000000000"]
            # Labelled and limited as every container the Engine makes.
            host = podman.client().api.inspect_container(box.id)["HostConfig"]
            assert (host["PidsLimit"], host["Memory"]) == (256, 256 << 20)
            assert [c.id for c in engine.managed_containers()] == [box.id]
        # A container without a GPU gets none of it.
        with engine.container(ContainerSpec(base_image)) as plain:
            assert plain.exec(["sh", "-c", f"test ! -e {NVML}"], on_output=print) == 0
    assert engine.managed_containers() == []
    print(f"fake CDI GPU on Podman: {time.monotonic() - started:.1f} s")

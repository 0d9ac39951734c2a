"""GPUs an engine can give a container, and what one container asks for.

A container gets one `GpuPassthrough`, given only to the containers that run the GPU
path (training, validation, the driver check); it adds devices and groups, never
capabilities. What an engine can give is asked of it in runtime/gpu_probe.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.runtime.quirks import EngineKind

NVIDIA = "nvidia"  # DeviceRequests, as `docker run --gpus all` sends them
CDI = "cdi"  # CDI device names (nvidia.com/gpu=all)
AMD = "amd"  # /dev/kfd, /dev/dri and the groups that may open them
NVIDIA_CDI_ALL = "nvidia.com/gpu=all"
AMD_DEVICES = ("/dev/kfd", "/dev/dri")
AMD_GROUPS = ("video", "render")


@dataclass(frozen=True)
class GpuPassthrough:
    """The GPU one container is given: `kind` says through which door."""

    kind: str  # NVIDIA | CDI | AMD
    cdi_devices: tuple[str, ...] = ()  # CDI names, for kind CDI
    devices: tuple[str, ...] = ()  # device nodes of the host, for kind AMD
    groups: tuple[str, ...] = ()  # supplementary groups that may open them

    def describe(self) -> str:
        if self.kind == NVIDIA:
            return (
                "DeviceRequests: all GPUs with capability gpu (the nvidia runtime), as --gpus all"
            )
        if self.kind == CDI:
            return f"CDI devices {', '.join(self.cdi_devices)}"
        return f"devices {', '.join(self.devices)}; groups {', '.join(self.groups)}"

    def engine_options(self, engine: EngineKind) -> dict[str, Any]:
        """The container-create options (the Docker SDK's names) for `engine`."""
        if self.kind == NVIDIA:
            return {"device_requests": [_request("")]}
        if self.kind == CDI:
            if engine.podman:
                # As devices: Engine.container makes it through Podman's own API
                # (runtime/libpod.py), which resolves CDI names; its compat API does not.
                return {"devices": list(self.cdi_devices)}
            # Docker 25+: CDI names travel as a DeviceRequest of driver "cdi".
            return {"device_requests": [_request("cdi", list(self.cdi_devices))]}
        return {
            "devices": [f"{path}:{path}:rwm" for path in self.devices],
            "group_add": list(self.groups),
        }


def _request(driver: str, device_ids: list[str] | None = None) -> dict[str, Any]:
    """One DeviceRequest as the docker CLI sends it: `--gpus all` asks any driver for
    every device with capability gpu; `--device <CDI name>` names the devices."""
    if device_ids:
        return {"driver": driver, "device_ids": device_ids}
    return {"driver": driver, "count": -1, "capabilities": [["gpu"]]}

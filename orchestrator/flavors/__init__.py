"""Flavor registry: one module per flavor, all behind `Flavor`."""

from __future__ import annotations

from orchestrator.errors import ConfigError
from orchestrator.flavors.aarch64 import Aarch64Flavor
from orchestrator.flavors.base import DeviceCode, Flavor
from orchestrator.flavors.cpu import CpuFlavor
from orchestrator.flavors.cuda import CudaFlavor
from orchestrator.flavors.rocm import RocmFlavor

FLAVORS: dict[str, Flavor] = {
    "cpu": CpuFlavor(),
    "cuda": CudaFlavor(),
    "rocm": RocmFlavor(),
    "aarch64": Aarch64Flavor(),
}


def get_flavor(name: str) -> Flavor:
    try:
        return FLAVORS[name]
    except KeyError:
        raise ConfigError(
            f"unknown flavor {name!r}", hint="Known flavors: " + ", ".join(FLAVORS)
        ) from None


__all__ = ["FLAVORS", "DeviceCode", "Flavor", "get_flavor"]

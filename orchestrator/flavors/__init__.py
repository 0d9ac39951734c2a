"""Flavor registry: one module per flavor, all behind `Flavor`."""

from __future__ import annotations

from orchestrator.config.suggest import suggest
from orchestrator.errors import ConfigError
from orchestrator.flavors.aarch64 import Aarch64Flavor
from orchestrator.flavors.base import DeviceCode, Flavor, FlavorView
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
        what = "an empty flavor name" if not name.strip() else f"unknown flavor {name!r}"
        meant = suggest(name, FLAVORS)
        raise ConfigError(
            what + (f"; did you mean {meant!r}?" if meant else ""),
            hint="Known flavors: " + ", ".join(FLAVORS),
        ) from None


__all__ = ["FLAVORS", "DeviceCode", "Flavor", "FlavorView", "get_flavor"]

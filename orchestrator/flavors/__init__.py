"""Flavor registry: one module per flavor, all behind `Flavor`."""

from __future__ import annotations

from orchestrator.errors import ConfigError
from orchestrator.flavors.base import Flavor
from orchestrator.flavors.cpu import CpuFlavor

FLAVORS: dict[str, Flavor] = {"cpu": CpuFlavor()}


def get_flavor(name: str) -> Flavor:
    try:
        return FLAVORS[name]
    except KeyError:
        raise ConfigError(
            f"unknown flavor {name!r}", hint="Known flavors: " + ", ".join(FLAVORS)
        ) from None


__all__ = ["FLAVORS", "Flavor", "get_flavor"]

"""x86_64 CPU builds, portable by default (x86-64-v2), with CPU levels as variants."""

from __future__ import annotations

from orchestrator.flavors.x86 import PORTABLE_LEVEL, X86Flavor, short_level


class CpuFlavor(X86Flavor):
    name = "cpu"
    template = "cpu.Dockerfile.j2"


__all__ = ["PORTABLE_LEVEL", "CpuFlavor", "short_level"]

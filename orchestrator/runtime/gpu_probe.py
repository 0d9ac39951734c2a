"""Which GPU an engine can give a container, asked of the engine itself.

Each way in is tried as a build would use it: a throwaway container started with that
passthrough. The engine resolves CDI names from its own spec folders (/etc/cdi,
/var/run/cdi, or Podman's `cdi_spec_dirs`) and device nodes on its own host, so the
answer is the engine's view even when it runs on another machine. /info's `Runtimes`
says whether the nvidia runtime is there; only then is `--gpus all` tried.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.errors import GpuUnavailableError
from orchestrator.runtime.api import EngineApi
from orchestrator.runtime.gpu import (
    AMD,
    AMD_DEVICES,
    AMD_GROUPS,
    CDI,
    NVIDIA,
    NVIDIA_CDI_ALL,
    GpuPassthrough,
)

# Which vendor's GPU a flavor runs on.
FLAVOR_VENDOR = {"cuda": "nvidia", "rocm": "amd"}
CDI_NVIDIA = GpuPassthrough(CDI, cdi_devices=(NVIDIA_CDI_ALL,))
RUNTIME_NVIDIA = GpuPassthrough(NVIDIA)
KFD_AMD = GpuPassthrough(AMD, devices=AMD_DEVICES, groups=AMD_GROUPS)


@dataclass(frozen=True)
class Tried:
    """One way in, tried: what it was and what the engine said."""

    passthrough: GpuPassthrough
    ok: bool
    answer: str  # the engine's refusal, "" when it started

    def describe(self) -> str:
        # The engine's own words, without ContainerError's "cannot start ... on <engine>: "
        reason = self.answer.split(": ", 1)[-1] if self.answer.startswith("cannot") else self.answer
        said = "starts a container" if self.ok else f"refused: {reason.strip()[:160]}"
        return f"{self.passthrough.describe()}: {said}"


@dataclass(frozen=True)
class GpuUse:
    """The GPU the build container of one flavor gets, and why (or why none)."""

    passthrough: GpuPassthrough | None
    why: str  # what was found, or why there is none
    tried: tuple[Tried, ...] = ()


def nvidia_runtime(info: Mapping[str, Any]) -> bool:
    """Whether the engine lists the nvidia container runtime (/info `Runtimes`)."""
    runtimes = info.get("Runtimes")
    return isinstance(runtimes, Mapping) and "nvidia" in runtimes


def candidates(
    vendor: str, info: Mapping[str, Any], *, podman: bool = False
) -> tuple[GpuPassthrough, ...]:
    """The ways in worth trying for `vendor`, best first: CDI names the devices and mounts
    the driver's files itself; the nvidia runtime only where /info lists it, and never on
    Podman, whose compat API starts a container with DeviceRequests and ignores them (so a
    start would prove nothing)."""
    if vendor == "nvidia":
        runtime = nvidia_runtime(info) and not podman
        return (CDI_NVIDIA, RUNTIME_NVIDIA) if runtime else (CDI_NVIDIA,)
    if vendor == "amd":
        return (KFD_AMD,)
    return ()


def try_passthrough(engine: EngineApi, image: str, passthrough: GpuPassthrough) -> Tried:
    code, output = engine.probe(image, ["true"], gpu=passthrough)
    return Tried(passthrough, code == 0, "" if code == 0 else output or f"exit {code}")


def offers(
    engine: EngineApi, image: str, vendor: str, *, stop_at_first: bool = True
) -> list[Tried]:
    """Each way in for `vendor` tried on the engine (up to the first that works)."""
    tried: list[Tried] = []
    for passthrough in candidates(vendor, engine.info(), podman=engine.kind().podman):
        tried.append(try_passthrough(engine, image, passthrough))
        if tried[-1].ok and stop_at_first:
            break
    return tried


def gpu_use(engine: EngineApi, image: str, flavor: str, mode: str) -> GpuUse:
    """What the flavor's build container gets under `flavors.<flavor>.gpu = mode`: none
    for "off" or a flavor with no GPU; the first way in the engine accepts for "auto";
    GpuUnavailableError for "require" where it accepts none."""
    vendor = FLAVOR_VENDOR.get(flavor)
    if vendor is None:
        return GpuUse(None, f"the {flavor} flavor runs no GPU code")
    if mode == "off":
        return GpuUse(None, f'flavors.{flavor}.gpu = "off"')
    tried = offers(engine, image, vendor)
    chosen = next((t.passthrough for t in tried if t.ok), None)
    if chosen is not None:
        return GpuUse(chosen, chosen.describe(), tuple(tried))
    why = f"the engine can give no {vendor} GPU (" + "; ".join(t.describe() for t in tried) + ")"
    if mode == "require":
        raise GpuUnavailableError(f'flavors.{flavor}.gpu = "require", but {why}')
    return GpuUse(None, why, tuple(tried))


def engine_gpus(engine: EngineApi, image: str) -> str:
    """For `doctor`: what the engine lists (its nvidia runtime) and, per vendor, what a
    GPU container would be given, or each way in with the engine's refusal."""
    info = engine.info()
    parts = [f"nvidia runtime {'listed' if nvidia_runtime(info) else 'not listed'} in /info"]
    for vendor in ("nvidia", "amd"):
        tried = offers(engine, image, vendor, stop_at_first=False)
        passed = next((t.passthrough for t in tried if t.ok), None)
        if passed is not None:
            parts.append(f"{vendor}: would pass {passed.describe()}")
        else:
            parts.append(f"{vendor}: none (" + "; ".join(t.describe() for t in tried) + ")")
    return "; ".join(parts)

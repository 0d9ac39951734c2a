"""How a plan runs BOLT: the profile mode a flavor and the perf access allow, and its flags."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from orchestrator.config.resolve.options import Options
from orchestrator.config.resolve.toolchains import ToolchainSpec
from orchestrator.errors import ConfigError
from orchestrator.flavors import Flavor
from orchestrator.model.layout import PATHS


@dataclass(frozen=True)
class BoltPlan:
    mode: str  # auto | lbr | sample | instrument
    policy: str  # fallback | require
    flags: tuple[str, ...]
    instrument_args: tuple[str, ...]  # e.g. the runtime library for a cross target
    work_dir: str
    tools: Mapping[str, str]
    max_growth: float = 1.5  # the BOLTed binary's size / the input binary's, at most
    min_samples: int = 20000  # fewer in a sampled profile: auto mode instruments instead
    sample_repeat: int = 1  # how many times the workloads run under perf


@dataclass(frozen=True)
class BoltSettings:
    """What BOLT reads of the settings: [bolt], and the perf access its sampled modes need
    (profiling.privileges), with where the mode and that access were set (for the error
    that refuses the two together). Built once from a target's options by the plan."""

    mode: str
    mode_source: str
    policy: str
    flags: tuple[str, ...]
    max_growth: float
    min_samples: int
    sample_repeat: int
    privileges: bool
    privileges_source: str

    @classmethod
    def from_options(cls, options: Options) -> BoltSettings:
        return cls(
            mode=options.bolt_mode,
            mode_source=options.sources.get("bolt.mode", "default"),
            policy=options.bolt_policy,
            flags=options.bolt_flags,
            max_growth=options.bolt_max_growth,
            min_samples=options.bolt_min_samples,
            sample_repeat=options.bolt_sample_repeat,
            privileges=options.profiling_privileges,
            privileges_source=options.sources.get("profiling.privileges", "default"),
        )


def bolt_plan(settings: BoltSettings, flavor: Flavor, toolchain: ToolchainSpec) -> BoltPlan:
    """How `flavor`'s build runs BOLT, with the toolchain's BOLT tools."""
    return BoltPlan(
        mode=bolt_mode(settings, flavor),
        instrument_args=flavor.bolt_instrument_args(toolchain),
        policy=settings.policy,
        flags=settings.flags,
        work_dir=f"{PATHS.out}/bolt",
        tools={
            "llvm_bolt": toolchain.tool("llvm_bolt"),
            "perf2bolt": toolchain.tool("perf2bolt"),
            "merge_fdata": toolchain.tool("merge_fdata"),
        },
        max_growth=settings.max_growth,
        min_samples=settings.min_samples,
        sample_repeat=settings.sample_repeat,
    )


def bolt_mode(settings: BoltSettings, flavor: Flavor) -> str:
    """auto stays auto where perf can help; a flavor that can only instrument says so.

    lbr and sample profile with perf in the profiling container, which needs the perf
    access that profiling.privileges = false forbids: asking for both is refused here,
    not after the builds that come before BOLT.
    """
    requested = settings.mode
    if requested == "auto":
        return "auto" if len(flavor.bolt_modes) > 1 else flavor.bolt_modes[0]
    if requested not in flavor.bolt_modes:
        raise ConfigError(
            f"bolt.mode {requested} cannot work for the {flavor.name} flavor",
            hint=f"{flavor.name} supports: {', '.join(flavor.bolt_modes)} (or auto).",
        )
    if requested != "instrument" and not settings.privileges:
        raise ConfigError(
            f"bolt.mode {requested} (from {settings.mode_source}) samples "
            "with perf, but profiling.privileges is off (from "
            f"{settings.privileges_source}, e.g. --no-privileged): the "
            "profiling container gets no perf access, so only instrument can work",
            hint="Drop --no-privileged (profiling.privileges = true), or use "
            "--bolt-mode instrument (or auto, which falls back to it).",
        )
    return requested

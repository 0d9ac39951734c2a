"""How a plan runs BOLT: the profile mode a flavor and the perf access allow, and its flags."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from orchestrator.config.resolve.options import Options
from orchestrator.errors import ConfigError
from orchestrator.flavors import Flavor


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


def bolt_mode(options: Options, flavor: Flavor) -> str:
    """auto stays auto where perf can help; a flavor that can only instrument says so.

    lbr and sample profile with perf in the profiling container, which needs the perf
    access that profiling.privileges = false forbids: asking for both is refused here,
    not after the builds that come before BOLT.
    """
    requested = options.bolt_mode
    if requested == "auto":
        return "auto" if len(flavor.bolt_modes) > 1 else flavor.bolt_modes[0]
    if requested not in flavor.bolt_modes:
        raise ConfigError(
            f"bolt.mode {requested} cannot work for the {flavor.name} flavor",
            hint=f"{flavor.name} supports: {', '.join(flavor.bolt_modes)} (or auto).",
        )
    if requested != "instrument" and not options.profiling_privileges:
        sources = options.sources
        raise ConfigError(
            f"bolt.mode {requested} (from {sources.get('bolt.mode', 'default')}) samples "
            "with perf, but profiling.privileges is off (from "
            f"{sources.get('profiling.privileges', 'default')}, e.g. --no-privileged): the "
            "profiling container gets no perf access, so only instrument can work",
            hint="Drop --no-privileged (profiling.privileges = true), or use "
            "--bolt-mode instrument (or auto, which falls back to it).",
        )
    return requested

"""BOLT: choosing how to profile, and reading llvm-bolt's report."""

from __future__ import annotations

import re
from dataclasses import dataclass

from orchestrator.errors import BoltError

MODES = ("lbr", "sample", "instrument")  # best first
_PROFILED_RE = re.compile(
    r"BOLT-INFO: (\d+) out of (\d+) functions in the binary \(([\d.]+)%\) have non-empty "
    r"execution profile"
)


@dataclass(frozen=True)
class PerfCapabilities:
    """What perf could do inside the profiling container, found by trying."""

    lbr: bool
    sampling: bool
    grant: str  # how the container was started, e.g. "seccomp orchestrator-perf (...)"


@dataclass(frozen=True)
class ModeChoice:
    mode: str
    reason: str


def choose_mode(requested: str, perf: PerfCapabilities) -> ModeChoice:
    """The best profile mode this container supports, or the forced one if it works here."""
    available = {"lbr": perf.lbr, "sample": perf.sampling, "instrument": True}
    if requested != "auto":
        if requested not in available:
            raise BoltError(f"unknown BOLT mode {requested!r}; expected auto or one of {MODES}")
        if not available[requested]:
            what = "branch-stack (LBR) sampling" if requested == "lbr" else "perf sampling"
            raise BoltError(
                f"--bolt-mode {requested} needs {what}, which perf cannot do in the profiling "
                f"container here (granted: {perf.grant})",
                hint="`orchestrator doctor` shows what perf can do; --bolt-mode instrument "
                "works everywhere.",
            )
        return ModeChoice(requested, "forced by --bolt-mode / bolt.mode")
    for mode in MODES:
        if available[mode]:
            reasons = {
                "lbr": "perf records branch stacks (LBR) here",
                "sample": "perf samples here but the CPU offers no branch stacks (LBR)",
                "instrument": "perf cannot sample in the profiling container here",
            }
            return ModeChoice(mode, reasons[mode])
    raise AssertionError("instrument is always available")  # pragma: no cover


@dataclass(frozen=True)
class BoltReport:
    profiled_functions: int
    total_functions: int
    percent: float

    def as_dict(self) -> dict[str, object]:
        return {
            "profiled_functions": self.profiled_functions,
            "total_functions": self.total_functions,
            "percent": self.percent,
        }


def parse_report(output: str) -> BoltReport:
    match = _PROFILED_RE.search(output)
    if match is None:
        raise BoltError("llvm-bolt did not report how many functions had a profile")
    profiled, total, percent = match.groups()
    return BoltReport(int(profiled), int(total), float(percent))

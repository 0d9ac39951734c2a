"""Profile-guided optimization: reading what llvm-profdata and rustc say about a profile."""

from __future__ import annotations

import re
from dataclasses import dataclass

from orchestrator.errors import ProfileError

# rustc relays LLVM's -pgo-warn-missing-function as:
#   warning: <module>: no profile data available for function <symbol> Hash = ...
_MISSING_RE = re.compile(r"no profile data available for function (\S+)")
_SHOW_RE = re.compile(r"^(Total functions|Maximum function count|Total count): (\d+)$", re.M)


@dataclass(frozen=True)
class ProfileSummary:
    functions: int
    max_function_count: int
    total_count: int

    def as_dict(self) -> dict[str, int]:
        return {
            "functions": self.functions,
            "max_function_count": self.max_function_count,
            "total_count": self.total_count,
        }


def parse_profdata_show(text: str) -> ProfileSummary:
    """`llvm-profdata show merged.profdata` -> counts; a profile with no counts is useless."""
    found = {key: int(value) for key, value in _SHOW_RE.findall(text)}
    if "Total functions" not in found:
        raise ProfileError(f"llvm-profdata show printed no function count:\n{text.strip()[:400]}")
    return ProfileSummary(
        functions=found["Total functions"],
        max_function_count=found.get("Maximum function count", 0),
        total_count=found.get("Total count", 0),
    )


def missing_functions(build_output: str) -> list[str]:
    """Symbols rustc compiled without profile data (stale profile or untrained code)."""
    return sorted(set(_MISSING_RE.findall(build_output)))


def is_missing_profile_line(line: str) -> bool:
    """rustc's warning for one function the profile has no data for: a PGO build prints
    thousands (every function of the test harness, code no workload reached)."""
    return _MISSING_RE.search(line) is not None


def missing_profile_note(count: int) -> str:
    """The one line a log keeps of `count` such warnings."""
    return (  # worded so that it is no such warning itself
        f"({count:,} of rustc's 'no profile data available' warnings left out of this log, "
        "one per function the PGO profile never reached, the test harness's among them; "
        "build-optimized counts its own against pgo.max_missing_ratio)"
    )


def summarised_output(output: str) -> str:
    """`output` with its missing-profile warnings replaced by one line with their count."""
    lines = output.splitlines()
    kept = [line for line in lines if not is_missing_profile_line(line)]
    count = len(lines) - len(kept)
    return "\n".join([*kept, missing_profile_note(count)] if count else kept)


@dataclass(frozen=True)
class Coverage:
    profiled_functions: int
    missing_functions: int
    max_missing_ratio: float

    @property
    def missing_ratio(self) -> float:
        return self.missing_functions / max(self.profiled_functions, 1)

    def check(self) -> None:
        if self.profiled_functions == 0 or self.missing_ratio > self.max_missing_ratio:
            raise ProfileError(
                f"the PGO profile covers too little: rustc found no profile data for "
                f"{self.missing_functions} functions against {self.profiled_functions} in the "
                f"profile ({self.missing_ratio:.1%}, limit {self.max_missing_ratio:.1%})",
                hint="The profile no longer matches the code: run with --retrain, add "
                "workloads under [train], or raise pgo.max_missing_ratio.",
            )

    def as_dict(self) -> dict[str, object]:
        return {
            "profiled_functions": self.profiled_functions,
            "missing_functions": self.missing_functions,
            "missing_ratio": round(self.missing_ratio, 4),
            "max_missing_ratio": self.max_missing_ratio,
        }

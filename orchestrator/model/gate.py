"""The speed gate's decision: which validated variant ships, by estimated cycles.

Pure: it sees callgrind counts per variant and workload, never a container. Candidates
come least optimized first (release, pgo, pgo-bolt); the baseline, plain `cargo build
--release`, is the yardstick only: it is built without the release's glibc floor, so it
never ships.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from orchestrator.model.callgrind import Counts, cycles_ratio

POLICIES = ("best", "require-all", "off")
BASELINE = "baseline"


@dataclass(frozen=True)
class GateDecision:
    shipped: str
    reasons: tuple[str, ...]  # one line per comparison, in the order they were made
    failure: str = ""  # require-all only: why the release must fail ("" when it passes)


def _change(ratio: float) -> str:
    """0.87 -> '13.0% fewer estimated cycles'; 1.02 -> '2.0% more estimated cycles'."""
    if ratio <= 1.0:
        return f"{1.0 - ratio:.1%} fewer estimated cycles"
    return f"{ratio - 1.0:.1%} more estimated cycles"


def decide(
    counts: Mapping[str, Sequence[Counts]],
    candidates: Sequence[str],
    *,
    policy: str,
    min_gain: float,
) -> GateDecision:
    """best: walk from the least optimized candidate up; each must beat the one chosen so
    far by at least `min_gain` (a fraction of estimated cycles) to replace it.
    require-all: ship the most optimized one, and fail when any candidate needs more than
    `min_gain` more estimated cycles than the baseline."""
    if not candidates:
        raise ValueError("the gate needs at least one candidate")
    if policy == "require-all":
        reasons, failures = [], []
        for name in candidates:
            ratio = cycles_ratio(counts[name], counts[BASELINE])
            reasons.append(f"{name}: {_change(ratio)} than cargo build --release")
            if ratio > 1.0 + min_gain:
                failures.append(
                    f"{name} is slower than plain cargo build --release ({_change(ratio)}, "
                    f"more than gate.min_gain {min_gain:.1%})"
                )
        return GateDecision(candidates[-1], tuple(reasons), "; ".join(failures))
    chosen = candidates[0]
    reasons = []
    for name in candidates[1:]:
        ratio = cycles_ratio(counts[name], counts[chosen])
        if 1.0 - ratio >= min_gain:
            reasons.append(f"{name}: {_change(ratio)} than {chosen}: ships {name}")
            chosen = name
        else:
            reasons.append(
                f"{name}: {_change(ratio)} than {chosen}, short of gate.min_gain "
                f"{min_gain:.1%}: keeps {chosen}"
            )
    return GateDecision(chosen, tuple(reasons))


def gain(counts: Mapping[str, Sequence[Counts]], variant: str, reference: str) -> float | None:
    """The share of estimated cycles `variant` saves against `reference` (None: unmeasured)."""
    if variant not in counts or reference not in counts:
        return None
    return round(1.0 - cycles_ratio(counts[variant], counts[reference]), 4)

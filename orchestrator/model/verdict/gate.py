"""The speed gate's decision: which validated variant ships, by estimated cycles.

Pure: it sees callgrind counts per variant and workload, never a container. Candidates
come least optimized first (release, pgo, pgo-bolt), then the build with [c_code] mode
off where it was made (pgo-c-off, judged against the choice); the baseline, plain `cargo build
--release`, is the yardstick only: it is built without the release's glibc floor, so it
never ships.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from orchestrator.model.verdict.callgrind import Counts, cycles_ratio

POLICIES = ("best", "require-all", "off")
BASELINE = "baseline"


@dataclass(frozen=True)
class GateDecision:
    shipped: str
    reasons: tuple[str, ...]  # one line per comparison, in the order they were made
    failure: str = ""  # require-all only: why the release must fail ("" when it passes)


def basis_points(ratio: float) -> int:
    """A ratio of estimated cycles in whole basis points (1.00149 -> 10015): the one
    rounding every ratio goes through, stored or shown. Records keep ratios to 4 decimals,
    so a text made from a record (a cached target) and one made from the counts agree."""
    return round(ratio * 10_000)


def stored_ratio(ratio: float) -> float:
    """A ratio as records keep it: its basis points (1.00149 -> 1.0015)."""
    return basis_points(ratio) / 10_000


def saved_share(ratio: float) -> float:
    """The share of estimated cycles a ratio saves, as records keep it: 0.9917 -> 0.0083."""
    return (10_000 - basis_points(ratio)) / 10_000


def shown_tenths(ratio: float) -> int:
    """The change a ratio shows, in tenths of a percent, from its basis points, halves away
    from zero: 1.0015 -> 2, 0.887 -> -113, 1.0004 -> 0 (a tie)."""
    change = basis_points(ratio) - 10_000
    tenths = (abs(change) + 5) // 10
    return tenths if change >= 0 else -tenths


def percent_change(ratio: float) -> str:
    """0.887 -> '-11.3%'; 1.0415 -> '+4.2%'; 1.0004 -> '+0.0%': one rounding everywhere."""
    tenths = shown_tenths(ratio)
    return f"{'-' if tenths < 0 else '+'}{abs(tenths) // 10}.{abs(tenths) % 10}%"


def cycles_change(ratio: float) -> str:
    """0.87 -> '13.0% fewer estimated cycles'; 1.02 -> '2.0% more estimated cycles'."""
    tenths = shown_tenths(ratio)
    amount = f"{abs(tenths) // 10}.{abs(tenths) % 10}%"
    return f"{amount} {'more' if tenths > 0 else 'fewer'} estimated cycles"


def saved_change(saved: float) -> str:
    """A share of estimated cycles saved (0.083, as records keep it) as a change: '-8.3%'."""
    return percent_change(1.0 - saved)


def decide(
    counts: Mapping[str, Sequence[Counts]],
    candidates: Sequence[str],
    *,
    policy: str,
    min_gain: float,
    alternative: str = "",
) -> GateDecision:
    """best: walk from the least optimized candidate up; each must beat the one chosen so
    far by at least `min_gain` (a fraction of estimated cycles) to replace it.
    require-all: ship the most optimized one, and fail when any candidate needs more than
    `min_gain` more estimated cycles than the baseline.
    Then `alternative` (the build with [c_code] mode off), under either policy, replaces the
    choice where it beats it by `min_gain`; under require-all only where it is no slower
    than the baseline by more than `min_gain`. It is never a failure."""
    if not candidates:
        raise ValueError("the gate needs at least one candidate")
    if policy == "require-all":
        decision = _require_all(counts, candidates, min_gain)
    else:
        decision = _best(counts, candidates, min_gain)
    if not alternative:
        return decision
    chosen, reasons = decision.shipped, list(decision.reasons)
    ratio = cycles_ratio(counts[alternative], counts[chosen])
    to_baseline = cycles_ratio(counts[alternative], counts[BASELINE])
    if 1.0 - ratio < min_gain:
        reasons.append(
            f"{alternative}: {cycles_change(ratio)} than {chosen}, short of gate.min_gain "
            f"{min_gain:.1%}: keeps {chosen}"
        )
    elif policy == "require-all" and to_baseline > 1.0 + min_gain:
        reasons.append(
            f"{alternative}: {cycles_change(ratio)} than {chosen} but "
            f"{cycles_change(to_baseline)} than cargo build --release: keeps {chosen}"
        )
    else:
        reasons.append(f"{alternative}: {cycles_change(ratio)} than {chosen}: ships {alternative}")
        chosen = alternative
    return GateDecision(chosen, tuple(reasons), decision.failure)


def _require_all(
    counts: Mapping[str, Sequence[Counts]], candidates: Sequence[str], min_gain: float
) -> GateDecision:
    reasons, failures = [], []
    for name in candidates:
        ratio = cycles_ratio(counts[name], counts[BASELINE])
        reasons.append(f"{name}: {cycles_change(ratio)} than cargo build --release")
        if ratio > 1.0 + min_gain:
            failures.append(
                f"{name} is slower than plain cargo build --release ({cycles_change(ratio)}, "
                f"more than gate.min_gain {min_gain:.1%})"
            )
    return GateDecision(candidates[-1], tuple(reasons), "; ".join(failures))


def _best(
    counts: Mapping[str, Sequence[Counts]], candidates: Sequence[str], min_gain: float
) -> GateDecision:
    chosen = candidates[0]
    reasons = []
    for name in candidates[1:]:
        ratio = cycles_ratio(counts[name], counts[chosen])
        if 1.0 - ratio >= min_gain:
            reasons.append(f"{name}: {cycles_change(ratio)} than {chosen}: ships {name}")
            chosen = name
        else:
            reasons.append(
                f"{name}: {cycles_change(ratio)} than {chosen}, short of gate.min_gain "
                f"{min_gain:.1%}: keeps {chosen}"
            )
    return GateDecision(chosen, tuple(reasons))


def gain(counts: Mapping[str, Sequence[Counts]], variant: str, reference: str) -> float | None:
    """The share of estimated cycles `variant` saves against `reference` (None: unmeasured)."""
    if variant not in counts or reference not in counts:
        return None
    return saved_share(cycles_ratio(counts[variant], counts[reference]))

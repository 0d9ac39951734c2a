"""BOLT per binary: which binaries of an artifact a workload runs, and the speed gate's
verdict on each BOLTed one, from the counts of the workloads that run it.

Pure: it sees callgrind counts per workload, never a container. A binary's BOLT output
stays in the BOLT variant only if the workloads that run that binary count at least
gate.min_gain fewer estimated cycles than with its unBOLTed build; otherwise the variant
ships that binary unBOLTed, and those workloads count as they did unBOLTed.

Each other binary's BOLT profile ships in the artifact's profiles/ folder as
`bolt-<binary>.fdata` (`.unshipped.fdata` when it ships unBOLTed); release/lock/pin.py locks it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from orchestrator.model.verdict.callgrind import Counts, cycles_ratio
from orchestrator.model.verdict.gate import cycles_change, saved_share


@dataclass(frozen=True)
class BinaryVerdict:
    keep: bool  # the BOLT variant ships this binary BOLTed
    reason: str
    gain: float | None  # share of estimated cycles its own workloads saved (None: unmeasured)


def runs_per_binary(owners: Sequence[str]) -> dict[str, list[int]]:
    """binary -> the indices of the workloads that run it (`owners[i]` runs workload i)."""
    found: dict[str, list[int]] = {}
    for index, binary in enumerate(owners):
        found.setdefault(binary, []).append(index)
    return found


def judge_binaries(
    bolted: Collection[str],
    owners: Sequence[str],
    with_bolt: Sequence[Counts],
    without_bolt: Sequence[Counts],
    *,
    unbolted_variant: str,
    min_gain: float,
) -> dict[str, BinaryVerdict]:
    """The verdict on each BOLTed binary, from the gate workloads that run it (`owners[i]`
    runs workload i; `with_bolt`/`without_bolt` are their counts in the BOLT variant and in
    `unbolted_variant`). A binary no gate workload runs is kept: validated, not measured."""
    if not len(owners) == len(with_bolt) == len(without_bolt):
        raise ValueError("one owner and one count per gate workload, in both variants")
    runs = runs_per_binary(owners)
    verdicts: dict[str, BinaryVerdict] = {}
    for binary in sorted(bolted):
        indices = runs.get(binary, [])
        if not indices:
            reason = "no gate workload runs it: kept unmeasured (it validated)"
            verdicts[binary] = BinaryVerdict(True, reason, None)
            continue
        ratio = cycles_ratio([with_bolt[i] for i in indices], [without_bolt[i] for i in indices])
        saved = saved_share(ratio)
        what = f"{len(indices)} gate workload{'s' if len(indices) > 1 else ''} of it"
        if saved >= min_gain:
            reason = f"{what}: {cycles_change(ratio)} than {unbolted_variant}"
            verdicts[binary] = BinaryVerdict(True, reason, saved)
        else:
            reason = (
                f"{what}: {cycles_change(ratio)} than {unbolted_variant}, short "
                f"of gate.min_gain {min_gain:.1%}"
            )
            verdicts[binary] = BinaryVerdict(False, reason, saved)
    return verdicts


def counts_without(
    with_bolt: Sequence[Counts],
    without_bolt: Sequence[Counts],
    owners: Sequence[str],
    unbolted: Collection[str],
) -> list[Counts]:
    """The BOLT variant's counts once the `unbolted` binaries ship unBOLTed: their
    workloads count as in the unBOLTed variant (exact unless one starts another binary)."""
    return [
        without_bolt[i] if owner in unbolted else with_bolt[i] for i, owner in enumerate(owners)
    ]


def binaries_in(
    binaries: Mapping[str, str], unbolted: Mapping[str, str], revert: Collection[str]
) -> dict[str, str]:
    """A variant's binaries (name -> path) with those in `revert` taken from `unbolted`."""
    return {name: unbolted[name] if name in revert else path for name, path in binaries.items()}


OTHER_PROFILE_PREFIX = "bolt-"  # bolt-<binary>.fdata; the main one's is bolt.fdata


def other_profile_name(binary: str, *, shipped: bool) -> str:
    """The profile file of another binary than the main one: `bolt-<binary>.fdata`, or
    `bolt-<binary>.unshipped.fdata` when that binary ships unBOLTed."""
    return f"{OTHER_PROFILE_PREFIX}{binary}{'' if shipped else '.unshipped'}.fdata"


def binary_of_profile(file: str) -> str:
    """The binary an other binary's profile file is of ("" for any other file)."""
    if not file.startswith(OTHER_PROFILE_PREFIX) or not file.endswith(".fdata"):
        return ""
    return file.removeprefix(OTHER_PROFILE_PREFIX).removesuffix(".fdata").removesuffix(".unshipped")

"""find_perf_access: the least grant giving the best perf mode the hardware has, decided by
probe answers; --privileged only when allowed; the answer cached per engine and kernel."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from orchestrator.runtime.engine import Privileges
from orchestrator.runtime.perf import (
    GRANTS,
    LAST_RESORT,
    LBR_PROBE,
    NO_ACCESS,
    SAMPLING_PROBE,
    find_perf_access,
)
from tests.unit.fakes import FakeEngine, Prober, as_engine

IMAGE = "orchestrator/cpu:rustc-web-1.96-" + "0" * 16
PERFMON, SYS_ADMIN, UNCONFINED = GRANTS
PRIVILEGED = LAST_RESORT
DENIED = "perf_event_open(..., PERF_FLAG_FD_CLOEXEC) failed: Operation not permitted"
NO_LBR = "Error: branch stack sampling not supported"


def works(
    *,
    lbr: Sequence[Privileges] = (),
    sampling: Sequence[Privileges] = (),
    lbr_failure: str = DENIED,
) -> Prober:
    """A prober under which LBR works with the `lbr` grants, sampling with `sampling`; a
    failing LBR probe says `lbr_failure` where sampling works, DENIED elsewhere."""

    def prober(image: str, argv: Sequence[str], privileges: Privileges) -> tuple[int, str]:
        assert image == IMAGE
        assert tuple(argv) in (LBR_PROBE, SAMPLING_PROBE)
        if tuple(argv) == SAMPLING_PROBE:
            return (0, "") if privileges in sampling else (1, DENIED)
        if privileges in lbr:
            return 0, ""
        return 1, lbr_failure if privileges in sampling else DENIED

    return prober


def test_least_grant_with_lbr_wins() -> None:
    fake = FakeEngine(prober=works(lbr=(SYS_ADMIN, PRIVILEGED), sampling=GRANTS))
    access = find_perf_access(as_engine(fake), IMAGE, allowed=True)
    assert access.privileges == SYS_ADMIN
    assert (access.capabilities.lbr, access.capabilities.sampling) == (True, True)
    assert access.as_dict() == {"granted": "cap-add SYS_ADMIN", "lbr": True, "sampling": True}
    # PERFMON first (LBR, then sampling), then SYS_ADMIN's LBR probe succeeds: no more.
    assert [(argv, p) for _, argv, p, _ in fake.probes] == [
        (LBR_PROBE, PERFMON),
        (SAMPLING_PROBE, PERFMON),
        (LBR_PROBE, SYS_ADMIN),
    ]


def test_lbr_under_a_bigger_grant_beats_sampling_under_a_smaller() -> None:
    fake = FakeEngine(prober=works(lbr=(PRIVILEGED,), sampling=(PERFMON,)))
    access = find_perf_access(as_engine(fake), IMAGE, allowed=True, allow_privileged=True)
    assert access.privileges == PRIVILEGED
    assert access.capabilities.lbr
    # Sampling was found with PERFMON already: not probed again under later grants.
    assert sum(argv == SAMPLING_PROBE for _, argv, _, _ in fake.probes) == 1


def test_sampling_only_takes_the_least_grant_that_samples() -> None:
    fake = FakeEngine(prober=works(sampling=(UNCONFINED, PRIVILEGED)))
    access = find_perf_access(as_engine(fake), IMAGE, allowed=True)
    assert access.privileges == UNCONFINED
    assert (access.capabilities.lbr, access.capabilities.sampling) == (False, True)
    assert access.capabilities.grant == "security-opt seccomp=unconfined"


def test_nothing_works_gives_no_access_and_never_tries_privileged() -> None:
    fake = FakeEngine(prober=works(lbr=(PRIVILEGED,), sampling=(PRIVILEGED,)))
    assert find_perf_access(as_engine(fake), IMAGE, allowed=True) == NO_ACCESS
    assert len(fake.probes) == 2 * len(GRANTS)
    assert PRIVILEGED not in [p for _, _, p, _ in fake.probes]


def test_privileged_is_the_last_resort_when_allowed() -> None:
    fake = FakeEngine(prober=works(lbr=(PRIVILEGED,), sampling=(PRIVILEGED,)))
    access = find_perf_access(as_engine(fake), IMAGE, allowed=True, allow_privileged=True)
    assert access.privileges == PRIVILEGED
    assert [p for _, _, p, _ in fake.probes][-1] == PRIVILEGED


def test_no_lbr_hardware_stops_at_the_first_grant_that_samples() -> None:
    # A VM: sampling works with PERFMON, LBR fails for want of hardware, not of rights.
    fake = FakeEngine(prober=works(sampling=GRANTS, lbr_failure=NO_LBR))
    access = find_perf_access(as_engine(fake), IMAGE, allowed=True, allow_privileged=True)
    assert access.privileges == PERFMON
    assert (access.capabilities.lbr, access.capabilities.sampling) == (False, True)
    assert [(argv, p) for _, argv, p, _ in fake.probes] == [
        (LBR_PROBE, PERFMON),
        (SAMPLING_PROBE, PERFMON),
    ]


def _identified(prober: Prober, kernel: str = "6.12.0") -> FakeEngine:
    return FakeEngine(prober=prober, info={"ID": "engine-1", "KernelVersion": kernel})


def test_the_answer_is_cached_per_engine_and_kernel(tmp_path: Path) -> None:
    first = _identified(works(sampling=GRANTS, lbr_failure=NO_LBR))
    access = find_perf_access(as_engine(first), IMAGE, allowed=True, cache_dir=tmp_path)
    again = _identified(works())  # would find nothing: must not be asked
    assert find_perf_access(as_engine(again), IMAGE, allowed=True, cache_dir=tmp_path) == access
    assert again.probes == []
    other_kernel = _identified(works(), kernel="6.18.0")
    assert find_perf_access(as_engine(other_kernel), IMAGE, allowed=True, cache_dir=tmp_path) == (
        NO_ACCESS
    )
    assert other_kernel.probes != []


def test_a_damaged_or_escalating_cache_entry_is_probed_again(tmp_path: Path) -> None:
    engine = _identified(works(sampling=GRANTS, lbr_failure=NO_LBR))
    find_perf_access(as_engine(engine), IMAGE, allowed=True, cache_dir=tmp_path)
    (entry,) = (tmp_path / "perf-access").iterdir()
    for text in ("{not json", '{"grant_index": 3, "grant": "privileged", "lbr": true}'):
        entry.write_text(text)
        fresh = _identified(works(sampling=GRANTS, lbr_failure=NO_LBR))
        access = find_perf_access(as_engine(fresh), IMAGE, allowed=True, cache_dir=tmp_path)
        assert access.privileges == PERFMON  # never the privileged grant the file claimed
        assert fresh.probes != []


def test_not_allowed_probes_nothing() -> None:
    fake = FakeEngine(prober=works(lbr=GRANTS, sampling=GRANTS))
    access = find_perf_access(as_engine(fake), IMAGE, allowed=False)
    assert access.privileges == Privileges()
    assert (access.capabilities.lbr, access.capabilities.sampling) == (False, False)
    assert access.capabilities.grant == "none (not asked)"
    assert fake.probes == []

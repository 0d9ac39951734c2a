"""find_perf_access: the least grant giving the best perf mode, decided by probe answers."""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.runtime.engine import Privileges
from orchestrator.runtime.perf import (
    GRANTS,
    LBR_PROBE,
    NO_ACCESS,
    SAMPLING_PROBE,
    find_perf_access,
)
from tests.unit.fakes import FakeEngine, Prober, as_engine

IMAGE = "orchestrator/cpu:rustc-web-1.96-" + "0" * 16
PERFMON, SYS_ADMIN, UNCONFINED, PRIVILEGED = GRANTS


def works(*, lbr: Sequence[Privileges] = (), sampling: Sequence[Privileges] = ()) -> Prober:
    """A prober under which LBR works with the `lbr` grants, sampling with `sampling`."""

    def prober(image: str, argv: Sequence[str], privileges: Privileges) -> tuple[int, str]:
        assert image == IMAGE
        allowed = lbr if tuple(argv) == LBR_PROBE else sampling
        assert tuple(argv) in (LBR_PROBE, SAMPLING_PROBE)
        return (0, "") if privileges in allowed else (1, "perf_event_open: Operation not permitted")

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
    access = find_perf_access(as_engine(fake), IMAGE, allowed=True)
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


def test_nothing_works_gives_no_access() -> None:
    fake = FakeEngine(prober=works())
    assert find_perf_access(as_engine(fake), IMAGE, allowed=True) == NO_ACCESS
    assert len(fake.probes) == 2 * len(GRANTS)


def test_not_allowed_probes_nothing() -> None:
    fake = FakeEngine(prober=works(lbr=GRANTS, sampling=GRANTS))
    access = find_perf_access(as_engine(fake), IMAGE, allowed=False)
    assert access.privileges == Privileges()
    assert (access.capabilities.lbr, access.capabilities.sampling) == (False, False)
    assert access.capabilities.grant == "none (not asked)"
    assert fake.probes == []

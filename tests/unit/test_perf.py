"""find_perf_access: the least grant giving the best perf mode the hardware has, decided by
probe answers; --privileged only when allowed; the answer cached per engine and kernel."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from orchestrator.runtime import perf
from orchestrator.runtime.engine import Privileges
from orchestrator.runtime.perf import (
    GRANTS,
    LAST_RESORT,
    LBR_PROBE,
    NO_ACCESS,
    SAMPLING_PROBE,
    find_perf_access,
)
from orchestrator.runtime.seccomp import profile_sha256
from tests.unit.fakes import FakeEngine, Prober, as_engine

IMAGE = "orchestrator/cpu:rustc-web-1.96-" + "0" * 16
PROFILE, PERFMON = GRANTS  # our seccomp profile alone, then with CAP_PERFMON
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
    fake = FakeEngine(prober=works(lbr=(PERFMON, PRIVILEGED), sampling=GRANTS))
    access = find_perf_access(as_engine(fake), IMAGE, allowed=True)
    assert access.privileges == PERFMON
    assert (access.capabilities.lbr, access.capabilities.sampling) == (True, True)
    granted = "seccomp orchestrator-perf (Docker's default + perf_event_open), cap-drop ALL"
    assert access.as_dict()["granted"] == f"{granted}, cap-add PERFMON"
    # The profile alone first (LBR, then sampling), then PERFMON's LBR probe succeeds.
    assert [(argv, p) for _, argv, p, _ in fake.probes] == [
        (LBR_PROBE, PROFILE),
        (SAMPLING_PROBE, PROFILE),
        (LBR_PROBE, PERFMON),
    ]


def test_lbr_under_a_bigger_grant_beats_sampling_under_a_smaller() -> None:
    fake = FakeEngine(prober=works(lbr=(PRIVILEGED,), sampling=(PROFILE,)))
    access = find_perf_access(as_engine(fake), IMAGE, allowed=True, allow_privileged=True)
    assert access.privileges == PRIVILEGED
    assert access.capabilities.lbr
    # Sampling was found with the profile already: not probed again under later grants.
    assert sum(argv == SAMPLING_PROBE for _, argv, _, _ in fake.probes) == 1


def test_sampling_only_takes_the_least_grant_that_samples() -> None:
    fake = FakeEngine(prober=works(sampling=(PERFMON, PRIVILEGED)))
    access = find_perf_access(as_engine(fake), IMAGE, allowed=True)
    assert access.privileges == PERFMON
    assert (access.capabilities.lbr, access.capabilities.sampling) == (False, True)
    assert access.capabilities.grant.endswith("cap-drop ALL, cap-add PERFMON")


def test_grants_are_our_profile_then_perfmon_and_nothing_that_opens_the_box() -> None:
    assert [(g.seccomp, g.cap_add) for g in GRANTS] == [
        ("orchestrator-perf", ()),
        ("orchestrator-perf", ("PERFMON",)),
    ]
    for grant in GRANTS:
        assert not grant.privileged and grant.security_opt == ()
        assert "SYS_ADMIN" not in grant.cap_add
        options = grant.engine_options()
        assert options["cap_drop"] == ["ALL"]
        assert "no-new-privileges" in options["security_opt"]
        assert "seccomp=unconfined" not in options["security_opt"]
    # The one rights escalation left is --privileged, and only when asked for.
    fake = FakeEngine(prober=works())
    find_perf_access(as_engine(fake), IMAGE, allowed=True)
    assert {p for _, _, p, _ in fake.probes} == set(GRANTS)


def test_the_record_says_what_the_engine_is_sent() -> None:
    access = find_perf_access(
        as_engine(FakeEngine(prober=works(sampling=GRANTS, lbr_failure=NO_LBR))),
        IMAGE,
        allowed=True,
    )
    grant = access.as_dict()["grant"]
    assert grant == {
        "privileged": False,
        "cap_add": [],
        "cap_drop": ["ALL"],
        "no_new_privileges": True,
        "seccomp": "orchestrator-perf",
        "seccomp_sha256": profile_sha256("orchestrator-perf"),
        "seccomp_added": ["perf_event_open"],
    }
    (profile,) = [
        o for o in access.privileges.engine_options()["security_opt"] if o.startswith("seccomp=")
    ]
    sent = profile.removeprefix("seccomp=")
    assert hashlib.sha256(sent.encode()).hexdigest() == grant["seccomp_sha256"]
    assert "perf_event_open" in json.loads(sent)["syscalls"][0]["names"]


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
    # A VM: sampling works with the profile, LBR fails for want of hardware, not rights.
    fake = FakeEngine(prober=works(sampling=GRANTS, lbr_failure=NO_LBR))
    access = find_perf_access(as_engine(fake), IMAGE, allowed=True, allow_privileged=True)
    assert access.privileges == PROFILE
    assert (access.capabilities.lbr, access.capabilities.sampling) == (False, True)
    assert [(argv, p) for _, argv, p, _ in fake.probes] == [
        (LBR_PROBE, PROFILE),
        (SAMPLING_PROBE, PROFILE),
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
    claims = (
        "{not json",
        '{"grant_index": 3, "grant": "privileged", "lbr": true}',
        # an index still on offer, but naming another grant than the one there now
        '{"grant_index": 1, "grant": "cap-add SYS_ADMIN", "lbr": true, "sampling": true}',
    )
    for text in claims:
        entry.write_text(text)
        fresh = _identified(works(sampling=GRANTS, lbr_failure=NO_LBR))
        access = find_perf_access(as_engine(fresh), IMAGE, allowed=True, cache_dir=tmp_path)
        assert access.privileges == PROFILE  # never the privileged grant the file claimed
        assert fresh.probes != []


def test_not_allowed_probes_nothing() -> None:
    fake = FakeEngine(prober=works(lbr=GRANTS, sampling=GRANTS))
    access = find_perf_access(as_engine(fake), IMAGE, allowed=False)
    assert access.privileges == Privileges()
    assert (access.capabilities.lbr, access.capabilities.sampling) == (False, False)
    assert access.capabilities.grant == "none (not asked)"
    assert fake.probes == []


def test_a_changed_grant_list_is_probed_afresh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cache key holds the grants on offer: an answer found under older grants (the
    SYS_ADMIN era, or another profile) is never read back as if it were about new ones."""
    first = _identified(works(sampling=GRANTS, lbr_failure=NO_LBR))
    find_perf_access(as_engine(first), IMAGE, allowed=True, cache_dir=tmp_path)
    monkeypatch.setattr(perf, "GRANTS", (PERFMON,))
    again = _identified(works(sampling=(PERFMON,), lbr_failure=NO_LBR))
    access = find_perf_access(as_engine(again), IMAGE, allowed=True, cache_dir=tmp_path)
    assert again.probes != [] and access.privileges == PERFMON
    # ... and the profile's exact bytes are part of the key too.
    monkeypatch.setattr(perf, "GRANTS", GRANTS)
    monkeypatch.setattr(perf, "profile_sha256", lambda name: "0" * 64)
    changed = _identified(works(sampling=GRANTS, lbr_failure=NO_LBR))
    find_perf_access(as_engine(changed), IMAGE, allowed=True, cache_dir=tmp_path)
    assert changed.probes != []
    assert len(list((tmp_path / "perf-access").iterdir())) == 3

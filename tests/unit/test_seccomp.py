"""The profiling container's seccomp profile: Docker's default for a container without
capabilities, plus perf_event_open, and nothing that lets a workload leave its box."""

from __future__ import annotations

import json
from typing import Any

import pytest

from orchestrator.runtime.seccomp import (
    CLONE_NAMESPACE_FLAGS,
    DOCKER_DEFAULT_ALLOWED,
    NEVER_ALLOWED,
    PERF_PROFILE,
    allowed_syscalls,
    perf_profile,
    profile_json,
    profile_sha256,
)

CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET = 0x10000000, 0x00020000, 0x40000000
# The syscalls the issue names: each stays refused inside the profiling container.
ESCAPES = ("unshare", "mount", "setns", "bpf", "keyctl", "clone3")


def _rules(name: str) -> list[dict[str, Any]]:
    syscalls: list[dict[str, Any]] = perf_profile()["syscalls"]  # type: ignore[assignment]
    return [rule for rule in syscalls if name in rule["names"]]


def test_perf_event_open_is_allowed_without_conditions() -> None:
    (rule,) = _rules("perf_event_open")
    assert rule["action"] == "SCMP_ACT_ALLOW"
    assert not {"args", "includes", "excludes"} & set(rule)


@pytest.mark.parametrize("name", ESCAPES)
def test_the_ways_out_stay_refused(name: str) -> None:
    assert name not in allowed_syscalls(perf_profile())
    assert all(rule["action"] != "SCMP_ACT_ALLOW" for rule in _rules(name))


def test_nothing_never_allowed_is_allowed_and_the_default_stays_a_refusal() -> None:
    profile = perf_profile()
    assert not set(NEVER_ALLOWED) & allowed_syscalls(profile)
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO"
    assert profile["defaultErrnoRet"] == 1  # EPERM, as Docker's default


def test_no_rule_depends_on_a_capability() -> None:
    """Docker's CAP_SYS_ADMIN block (unshare, mount, setns, bpf, namespace clone, ...) is
    what `--cap-add SYS_ADMIN` used to switch on: no capability-conditional rule at all."""
    syscalls: list[dict[str, Any]] = perf_profile()["syscalls"]  # type: ignore[assignment]
    for rule in syscalls:
        for condition in ("includes", "excludes"):
            assert "caps" not in rule.get(condition, {}), rule


def test_clone_is_allowed_only_without_namespace_flags() -> None:
    rules = _rules("clone")
    assert len(rules) == 2  # s390 passes the flags as the second argument
    for rule in rules:
        (arg,) = rule["args"]
        assert arg["op"] == "SCMP_CMP_MASKED_EQ" and arg["valueTwo"] == 0
        assert arg["value"] == CLONE_NAMESPACE_FLAGS
    for flag in (CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET):
        assert CLONE_NAMESPACE_FLAGS & flag
    (clone3,) = _rules("clone3")
    assert (clone3["action"], clone3["errnoRet"]) == ("SCMP_ACT_ERRNO", 38)  # ENOSYS


def test_allowed_is_dockers_default_plus_perf_and_nothing_else() -> None:
    conditional = {"socket", "personality", "clone", "ptrace"}
    conditional |= {"process_vm_readv", "process_vm_writev"}  # kernel >= 4.8, as Docker's
    by_arch = {
        name
        for rule in perf_profile()["syscalls"]  # type: ignore[attr-defined]
        if "arches" in rule.get("includes", {}) and rule["names"] != ["clone"]
        for name in rule["names"]
    }
    expected = {*DOCKER_DEFAULT_ALLOWED, "perf_event_open"} | conditional | by_arch
    assert allowed_syscalls(perf_profile()) == expected
    assert "perf_event_open" not in DOCKER_DEFAULT_ALLOWED
    assert not {"io_uring_setup", "io_uring_enter"} & expected  # as Engine 25+ does


def test_the_json_sent_is_stable_and_names_only_our_profile() -> None:
    text = profile_json(PERF_PROFILE)
    assert text == profile_json(PERF_PROFILE)
    assert json.loads(text) == perf_profile()
    assert " " not in text  # compact: the exact bytes its sha256 in build.json is of
    assert len(profile_sha256(PERF_PROFILE)) == 64
    with pytest.raises(ValueError, match="unknown seccomp profile"):
        profile_json("unconfined")

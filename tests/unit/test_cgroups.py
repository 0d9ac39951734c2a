"""A container's limits and their hits, read from its cgroup files under v1 and v2.

The files are fixtures in tests/unit/cgroups/ (its README says where their shapes come
from: Documentation/admin-guide/cgroup-v2.rst for v2, this project's hosts for v1).
`Container.limit_hits` runs on a stub Docker client that answers the `grep` the real
class sends with those files, as grep prints them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import docker
import pytest

from orchestrator.runtime import cgroups
from orchestrator.runtime.api import Limits
from orchestrator.runtime.container import Container

FIXTURES = Path(__file__).parent / "cgroups"
MIB = 1 << 20


def grep_output(fixture: str, argv: Sequence[str]) -> list[str]:
    """What `grep -s -H '' <files>` prints in a container whose /sys/fs/cgroup is
    `fixture`: each line of each file that exists, as `path:line`."""
    assert list(argv[:4]) == ["grep", "-s", "-H", ""]
    lines = []
    for path in argv[4:]:
        source = FIXTURES / fixture / Path(path).relative_to(cgroups.ROOT)
        if source.is_file():
            lines += [f"{path}:{line}" for line in source.read_text().splitlines()]
    return lines


def read(fixture: str, version: int) -> cgroups.Reading:
    chosen = cgroups.layouts(version)
    return cgroups.parse(grep_output(fixture, cgroups.read_command(chosen)), chosen)


def test_v2_limits_in_force_and_no_hits() -> None:
    reading = read("v2-limits", 2)
    assert reading.limits == {"pids": 256, "memory": 8192 * MIB}
    assert reading.hits == {"pids": 0, "memory": 0}
    assert reading.current == {"pids": 3}


def test_v2_counts_refused_forks_and_oom_not_reclaim() -> None:
    reading = read("v2-hits", 2)
    assert reading.limits == {"pids": 64, "memory": 256 * MIB}
    # memory.events' `max` (1187: reclaim near the limit) is no failure: oom + oom_kill
    assert reading.hits == {"pids": 5712, "memory": 3 + 2}
    assert reading.current == {"pids": 61}


def test_v2_without_delegated_controllers_shows_no_limit() -> None:
    reading = read("v2-undelegated", 2)
    assert reading == cgroups.Reading()


def test_v1_limits_unlimited_memory_and_hits() -> None:
    assert read("v1-limits", 1).limits == {"pids": 256, "memory": None}
    hits = read("v1-hits", 1)
    assert hits.hits == {"pids": 311, "memory": 1}
    assert hits.limits == {"pids": 256, "memory": 256 * MIB}


def test_each_version_reads_only_its_own_files_and_unknown_reads_both() -> None:
    v1, v2 = (cgroups.read_command(cgroups.layouts(v))[4:] for v in (1, 2))
    assert all("/pids/" in p or "/memory/" in p for p in v1)
    assert f"{cgroups.ROOT}/memory.max" in v2 and f"{cgroups.ROOT}/memory.events" in v2
    assert not set(v1) & set(v2)
    assert cgroups.read_command(cgroups.layouts(0))[4:] == [*v1, *v2]
    # Under an engine that does not say, a v2 container's files are still found.
    assert read("v2-hits", 0).hits == {"pids": 5712, "memory": 5}


def test_garbage_lines_are_ignored() -> None:
    chosen = cgroups.layouts(2)
    lines = [
        "grep: /sys/fs/cgroup/pids.max: Permission denied",
        f"{cgroups.ROOT}/pids.max:lots",
        f"{cgroups.ROOT}/memory.events:oom many",
        f"{cgroups.ROOT}/elsewhere:oom 4",
    ]
    assert cgroups.parse(lines, chosen) == cgroups.Reading(limits={"pids": None})


class StubApi:
    """exec_* of the Engine API: each exec of the cgroup read answers with `fixture`."""

    def __init__(self, fixture: str) -> None:
        self.fixture = fixture
        self.argvs: list[list[str]] = []

    def exec_create(self, _container: str, argv: list[str], **_options: Any) -> dict[str, str]:
        self.argvs.append(argv)
        return {"Id": str(len(self.argvs))}

    def exec_start(self, exec_id: str, *, stream: bool) -> Iterator[bytes]:
        assert stream
        lines = grep_output(self.fixture, self.argvs[int(exec_id) - 1])
        return iter([("\n".join(lines) + "\n").encode()])

    def exec_inspect(self, _exec_id: str) -> dict[str, int]:
        return {"ExitCode": 0}


class StubSdk:
    id = "c0ffee"

    def __init__(self, stats: dict[str, Any]) -> None:
        self._stats = stats

    def stats(self, *, stream: bool) -> dict[str, Any]:
        assert not stream
        return self._stats


def container(fixture: str, version: int, limits: Limits, stats: dict[str, Any]) -> Container:
    client = type("StubClient", (), {"api": StubApi(fixture)})()
    return Container(
        cast("docker.DockerClient", client),
        cast("Any", StubSdk(stats)),
        limits,
        cgroup_version=version,
    )


@pytest.mark.parametrize(("fixture", "version"), [("v2-hits", 2), ("v1-hits", 1)])
def test_limit_hits_names_each_limit_once(fixture: str, version: int) -> None:
    box = container(fixture, version, Limits(pids=64, memory=256 * MIB), {})
    assert box.limit_hits() == ("memory", "pids")
    assert box.limit_hits() == ()  # the same counts again: nothing new was hit


def test_no_hit_where_counters_are_zero() -> None:
    box = container("v2-limits", 2, Limits(pids=256, memory=8192 * MIB), {})
    assert box.limit_hits() == ()


def test_podman_stats_without_pids_limit_still_tell_a_full_container() -> None:
    """No counter to read (the controller's files are absent) and stats with no pids
    limit, as Podman's are: the limit asked for decides."""
    full = container("v2-undelegated", 2, Limits(pids=64), {"pids_stats": {"current": 60}})
    assert full.limit_hits() == ("pids",)
    roomy = container("v2-undelegated", 2, Limits(pids=64), {"pids_stats": {"current": 5}})
    assert roomy.limit_hits() == ()


def test_no_limits_asked_reads_nothing() -> None:
    box = container("v2-hits", 2, Limits(), {})
    assert box.limit_hits() == ()
    assert box._client.api.argvs == []  # type: ignore[attr-defined]


def test_unapplied_names_the_limits_not_in_force() -> None:
    in_force = read("v2-limits", 2)  # pids 256, memory 8 GiB
    assert cgroups.unapplied(in_force, {"pids": 256, "memory": 8192 * MIB}) == ()
    assert cgroups.unapplied(in_force, {"pids": 128, "memory": 0}) == ("pids",)  # looser
    # v1-limits: memory unlimited (the huge number) though 256 MiB was asked
    assert cgroups.unapplied(read("v1-limits", 1), {"pids": 256, "memory": 256 * MIB}) == (
        "memory",
    )
    # No controller at all (rootless, undelegated): nothing is in force
    nothing = read("v2-undelegated", 2)
    assert cgroups.unapplied(nothing, {"pids": 64, "memory": MIB}) == ("pids", "memory")


def test_a_container_says_which_of_its_limits_are_not_in_force() -> None:
    given = Limits(pids=256, memory=256 * MIB)
    assert container("v1-limits", 1, given, {}).unapplied_limits() == ("memory",)
    assert container("v1-hits", 1, given, {}).unapplied_limits() == ()
    # Not one file answered: unknown, not "none applied"
    assert container("v2-undelegated", 2, given, {}).unapplied_limits() is None

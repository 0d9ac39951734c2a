"""A container's own cgroup, read from inside it: the limits in force and how often they
were hit. The container sees its cgroup at /sys/fs/cgroup under either hierarchy; which
files hold what depends on the version the engine reports (`CgroupVersion` in /info).

cgroup v1 (one hierarchy per controller): `pids/pids.events` ("max N": forks refused),
`pids/pids.max`, `pids/pids.current`, `memory/memory.oom_control` ("oom_kill N", since
Linux 4.13) and `memory/memory.limit_in_bytes` (a huge number when unlimited).

cgroup v2 (Documentation/admin-guide/cgroup-v2.rst): `pids.events` ("max N"),
`pids.max` and `memory.max` ("max" when unlimited), `pids.current`, `memory.events`
("oom N": the limit was reached and an allocation was about to fail; "oom_kill N":
processes the OOM killer took). Its `max`/`high` counters count reclaim, not failures.

Pure: the Container (container.py) runs `read_command` in the container and hands the
output to `parse`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

ROOT = "/sys/fs/cgroup"
# v1 reports "no limit" as the largest page-aligned signed 64-bit value; anything this
# large is no limit a container was given.
UNLIMITED_FROM = 1 << 62
# What the engine answers when the exec's own process cannot be forked (EAGAIN).
_REFUSED = "resource temporarily unavailable"


@dataclass(frozen=True)
class Layout:
    """Where one cgroup version keeps the files we read."""

    version: int
    # path -> (limit kind, the counters in it whose sum grows on each hit)
    events: Mapping[str, tuple[str, tuple[str, ...]]]
    maxima: Mapping[str, str]  # path -> limit kind: the limit in force
    current: Mapping[str, str]  # path -> limit kind: what is in use now

    @property
    def paths(self) -> tuple[str, ...]:
        return (*self.events, *self.maxima, *self.current)


V1 = Layout(
    version=1,
    events={
        f"{ROOT}/pids/pids.events": ("pids", ("max",)),
        f"{ROOT}/memory/memory.oom_control": ("memory", ("oom_kill",)),
    },
    maxima={
        f"{ROOT}/pids/pids.max": "pids",
        f"{ROOT}/memory/memory.limit_in_bytes": "memory",
    },
    current={f"{ROOT}/pids/pids.current": "pids"},
)
V2 = Layout(
    version=2,
    events={
        f"{ROOT}/pids.events": ("pids", ("max",)),
        f"{ROOT}/memory.events": ("memory", ("oom", "oom_kill")),
    },
    maxima={f"{ROOT}/pids.max": "pids", f"{ROOT}/memory.max": "memory"},
    current={f"{ROOT}/pids.current": "pids"},
)


def layouts(cgroup_version: int) -> tuple[Layout, ...]:
    """The files to read under the engine's cgroup version; both where it does not say
    (files that are absent are skipped)."""
    return {1: (V1,), 2: (V2,)}.get(cgroup_version, (V1, V2))


def read_command(chosen: Iterable[Layout]) -> list[str]:
    """Every file, each line as `path:line`; absent files silently skipped (`-s`).
    grep is in every Debian image (it is Essential), even minbase."""
    return ["grep", "-s", "-H", "", *(p for layout in chosen for p in layout.paths)]


@dataclass(frozen=True)
class Reading:
    """What a container's cgroup said: per limit kind ("pids", "memory")."""

    hits: Mapping[str, int] = field(default_factory=dict)  # the hit counters, summed
    limits: Mapping[str, int | None] = field(default_factory=dict)  # None: unlimited
    current: Mapping[str, int] = field(default_factory=dict)
    # The read itself could not start a process: the pids limit is reached.
    refused: bool = False


def _number(text: str) -> int | None:
    """A limit file's value; None for "max" or v1's "unlimited" huge number."""
    value = text.strip()
    if not value.isdigit():
        return None
    return None if int(value) >= UNLIMITED_FROM else int(value)


def parse(lines: Iterable[str], chosen: Iterable[Layout]) -> Reading:
    """The output of `read_command`. Lines of files it did not ask for, and malformed
    values (the files are the kernel's, but the output passes through the container),
    are ignored."""
    events: dict[str, tuple[str, tuple[str, ...]]] = {}
    maxima: dict[str, str] = {}
    current: dict[str, str] = {}
    for layout in chosen:
        events.update(layout.events)
        maxima.update(layout.maxima)
        current.update(layout.current)
    hits: dict[str, int] = {}
    limits: dict[str, int | None] = {}
    now: dict[str, int] = {}
    refused = False
    for line in lines:
        refused = refused or _REFUSED in line.lower()
        path, colon, content = line.partition(":")
        if not colon:
            continue
        if path in events:
            kind, counters = events[path]
            key, _, value = content.partition(" ")
            if key in counters and value.strip().isdigit():
                hits[kind] = hits.get(kind, 0) + int(value)
        elif path in maxima and content.strip() and maxima[path] not in limits:
            limits[maxima[path]] = _number(content)
        elif path in current and content.strip().isdigit():
            now[current[path]] = int(content)
    return Reading(hits=hits, limits=limits, current=now, refused=refused)


def unapplied(reading: Reading, asked: Mapping[str, int]) -> tuple[str, ...]:
    """The limits asked for (kind -> value, 0: none asked) that are not in force in the
    container: unlimited there, higher than asked, or no file says (no such controller).
    A rootless engine under cgroup v1 accepts the limits and applies none of them."""

    def missing(kind: str, value: int) -> bool:
        in_force = reading.limits.get(kind)
        return in_force is None or in_force > value

    return tuple(kind for kind, value in asked.items() if value and missing(kind, value))

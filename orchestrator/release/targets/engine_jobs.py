"""How many targets each engine builds at a time (`engines.jobs`), and how many of its
cores each of those builds gives cargo.

`auto` (the default) is a rule of thumb: one target per 4 cores and per 6 GiB of the
engine's memory, at most the number of targets, at least one. An optimized build of a
real crate keeps a few cores busy for its crate graph and then links with LTO on one or
two cores for minutes, holding a few GiB; fewer cores or less memory per target than that
and two targets side by side only slow each other down (or meet the OOM killer). So a
2-core engine builds one target at a time whatever its memory; 16 cores and 64 GiB build 4.
Every engine is judged by its own `docker info` (NCPU, MemTotal), a remote one
(`release --engines`) as much as the local one.

Cargo's own parallelism stays within the engine's cores: with N targets at a time on C
cores each build runs with CARGO_BUILD_JOBS = max(1, C // N). That sets how many rustc
processes run at once, never what they produce: the release profile fixes codegen-units,
so the bytes, the action key, the step keys and release.lock are the same whatever the
jobs. It is set on the build container only (execute/steps/pipeline.py), never in the plan's
commands that those keys hash.

An engine that builds one target at a time makes the next target's images while one
compiles (`engines.prefetch`, release/targets/prefetch.py) when it runs on this host and has room
beside a build: 2 cores and 8 GiB (a build's 6 GiB, and 2 for apt and the image's
flattening, which are disk and network work more than CPU). Only on this host: making an
image is also work on this host (the rootfs, the .debs, the build context), and an
engine's `docker info` says nothing of the room here.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from orchestrator.model.documents.release_summary import EngineJobs

CORES_PER_JOB = 4
GIB_PER_JOB = 6
_GIB = 1024**3
AUTO = "auto"
AUTO_RULE = f"auto: one per {CORES_PER_JOB} cores and per {GIB_PER_JOB} GiB"
PREFETCH_CORES = 2
PREFETCH_GIB = GIB_PER_JOB + 2


class _Sized(Protocol):
    """What the rule asks of an engine: its context's name and `docker info`."""

    name: str

    def info(self) -> dict[str, Any]: ...


def _count(value: object) -> int:
    """A `docker info` number; 0 when the engine leaves it out or reports nonsense."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def prefetch_of(info: Mapping[str, Any], jobs: int, targets: int) -> tuple[bool, str]:
    """Whether an engine with `info` that builds `jobs` of `targets` targets at a time makes
    the next target's images while one compiles, and why (engines.prefetch is on)."""
    if jobs > 1:
        return False, "off: targets build side by side, each making its own images"
    if targets < 2:
        return False, "off: one target to build"
    host = info.get("Name")
    if host != socket.gethostname():
        return False, f"off: the engine runs on {host or 'an unnamed host'}, not this host"
    cores, memory = _count(info.get("NCPU")), _count(info.get("MemTotal"))
    if cores < PREFETCH_CORES or memory < PREFETCH_GIB * _GIB:
        return False, f"off: no room beside a build ({PREFETCH_CORES} cores, {PREFETCH_GIB} GiB)"
    return True, f"on: this host, room beside a build ({PREFETCH_CORES} cores, {PREFETCH_GIB} GiB)"


def jobs_of(
    name: str,
    info: Mapping[str, Any],
    setting: int | str,
    targets: int,
    *,
    no_prefetch: str = "",
) -> EngineJobs:
    """The jobs for one engine with `info` (its `docker info`), building up to `targets`
    targets, under `engines.jobs = setting` (a count, or "auto"); `no_prefetch`: why the
    release makes no images ahead whatever the engine ("": the engine decides)."""
    cores, memory = _count(info.get("NCPU")), _count(info.get("MemTotal"))
    most = max(1, targets)  # more workers than targets would idle, and starve cargo
    if setting == AUTO:
        jobs = max(1, min(most, cores // CORES_PER_JOB, memory // (GIB_PER_JOB * _GIB)))
        reason = AUTO_RULE
        if jobs == most and most > 1:
            reason += f"; {most} targets"
    else:
        jobs = min(most, max(1, int(setting)))
        reason = f"engines.jobs = {setting}"
    ahead, why = (False, no_prefetch) if no_prefetch else prefetch_of(info, jobs, targets)
    return EngineJobs(
        engine=name,
        cores=cores,
        memory_gib=round(memory / _GIB, 1),
        jobs=jobs,
        cargo_jobs=max(1, cores // jobs) if cores else None,
        reason=reason,
        prefetch=ahead,
        prefetch_reason=why,
    )


def jobs_per_engine(
    setting: int | str, engines: Sequence[_Sized], targets: int, *, prefetch: bool = True
) -> list[EngineJobs]:
    """The jobs for each engine a release builds on, in their order. `prefetch`:
    engines.prefetch; only a release on one engine builds one target after another."""
    no_prefetch = (
        "off: engines.prefetch = false"
        if not prefetch
        else "off: several engines build side by side"
        if len(engines) > 1
        else ""
    )
    return [
        jobs_of(engine.name, engine.info(), setting, targets, no_prefetch=no_prefetch)
        for engine in engines
    ]


def cargo_jobs_on(jobs: Sequence[EngineJobs], engine: str) -> int | None:
    """CARGO_BUILD_JOBS for a build on `engine` (None: cargo's own default)."""
    return next((item.cargo_jobs for item in jobs if item.engine == engine), None)


def jobs_text(jobs: Sequence[EngineJobs]) -> str:
    """One line for the console: 'jobs: current: 2 cores, 23 GiB: 1 target at a time...'."""
    return "jobs: " + "; ".join(f"{item.engine}: {item.describe()}" for item in jobs)

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
jobs. It is set on the build container only (execute/pipeline.py), never in the plan's
commands that those keys hash.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from orchestrator.model.release_summary import EngineJobs

CORES_PER_JOB = 4
GIB_PER_JOB = 6
_GIB = 1024**3
AUTO = "auto"
AUTO_RULE = f"auto: one per {CORES_PER_JOB} cores and per {GIB_PER_JOB} GiB"


class _Sized(Protocol):
    """What the rule asks of an engine: its context's name and `docker info`."""

    name: str

    def info(self) -> dict[str, Any]: ...


def _count(value: object) -> int:
    """A `docker info` number; 0 when the engine leaves it out or reports nonsense."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def jobs_of(name: str, info: Mapping[str, Any], setting: int | str, targets: int) -> EngineJobs:
    """The jobs for one engine with `info` (its `docker info`), building up to `targets`
    targets, under `engines.jobs = setting` (a count, or "auto")."""
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
    return EngineJobs(
        engine=name,
        cores=cores,
        memory_gib=round(memory / _GIB, 1),
        jobs=jobs,
        cargo_jobs=max(1, cores // jobs) if cores else None,
        reason=reason,
    )


def jobs_per_engine(
    setting: int | str, engines: Sequence[_Sized], targets: int
) -> list[EngineJobs]:
    """The jobs for each engine a release builds on, in their order."""
    return [jobs_of(engine.name, engine.info(), setting, targets) for engine in engines]


def cargo_jobs_on(jobs: Sequence[EngineJobs], engine: str) -> int | None:
    """CARGO_BUILD_JOBS for a build on `engine` (None: cargo's own default)."""
    return next((item.cargo_jobs for item in jobs if item.engine == engine), None)


def jobs_text(jobs: Sequence[EngineJobs]) -> str:
    """One line for the console: 'jobs: current: 2 cores, 23 GiB: 1 target at a time...'."""
    return "jobs: " + "; ".join(f"{item.engine}: {item.describe()}" for item in jobs)

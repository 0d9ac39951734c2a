"""Targets built side by side on several Docker Engines (`release --engines a,b`).

Each engine gets as many worker threads as it builds targets at a time
(release/targets/engine_jobs.py); each worker takes the next target that
fits its engine (release/targets/schedule.py) and builds it there through the Engine API, exactly
as a one-engine release does. Everything that needs the signing key or writes the release
happens on this host: each target's publication (one at a time) and, after every target
is back, release.json, the index and the lock.

When a target fails, its engine is asked whether it still answers: a failed build stays
failed, an engine that stopped answering is dropped and the target moves to another one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from orchestrator.release.targets.schedule import Job, Needs, Schedule, needs_by_flavor
from orchestrator.runtime.engine import Engine

T = TypeVar("T")

# How long an interrupted release waits for its workers to clean up their containers.
STOP_GRACE_S = 120.0


@dataclass(frozen=True)
class Work(Generic[T]):
    """One target to build, with what scheduling needs to know of it."""

    item: T
    artifact: str
    flavor: str
    images: tuple[str, str]  # (toolchain image, base image) references


@dataclass
class FarmReport:
    """What happened beside the targets' own results."""

    engine_of: dict[str, str] = field(default_factory=dict)  # artifact -> engine
    moves: dict[str, list[str]] = field(default_factory=dict)  # artifact -> ["ctx: why"]
    stranded: dict[str, str] = field(default_factory=dict)  # artifact -> why not built
    lost: dict[str, str] = field(default_factory=dict)  # engine -> why it was dropped


# build(item, engine, prefix) -> whether it failed; it records the outcome on `item`.
Build = Callable[[T, Engine, str], bool]


def _at_a_time(slots: Mapping[str, int]) -> str:
    """'at most 2 at a time on each', or per engine where they differ."""
    if len(set(slots.values())) == 1:
        return f"at most {next(iter(slots.values()))} at a time on each"
    return "at most " + ", ".join(f"{count} on {name}" for name, count in slots.items())


def build_on_engines(
    work: Sequence[Work[T]],
    engines: Sequence[Engine],
    build: Build[T],
    *,
    per_engine: int | Mapping[str, int],
    requirements: Sequence[str],
    announce: Callable[[str], None],
) -> FarmReport:
    """Build every item of `work` on `engines`; returns where each went and what moved."""
    needs = needs_by_flavor(requirements)
    jobs = [
        Job(index, unit.artifact, needs.get(unit.flavor, Needs()), unit.images)
        for index, unit in enumerate(work)
    ]
    facts = [engine.facts() for engine in engines]
    schedule = Schedule(facts, jobs, per_engine)
    slots = {
        e.name: per_engine if isinstance(per_engine, int) else per_engine[e.name] for e in engines
    }
    by_index = dict(enumerate(work))
    announce(
        f"building {len(work)} targets on {len(engines)} engines "
        f"({', '.join(e.name for e in engines)}), {_at_a_time(slots)}"
    )

    crashes: list[BaseException] = []

    def worker(engine: Engine) -> None:
        while (job := schedule.take(engine.name)) is not None:
            unit = by_index[job.index]
            announce(f"→ {job.artifact} on {engine.name}")
            try:  # a session of its own: other builds may run on this engine meanwhile
                failed = build(unit.item, engine.twin(), f"{job.artifact}@{engine.name}")
            except Exception as error:  # the SDK's own errors when an engine vanishes
                if engine.alive():  # not the engine: a bug, raised once all are back
                    crashes.append(error)
                    schedule.done(job)
                    schedule.cancel()
                    return
                failed = True
            if failed and not engine.alive():
                reason = "the engine stopped answering"
                announce(f"engine {engine.name}: {reason}; {job.artifact} goes to another")
                schedule.engine_lost(job, reason)
                return
            schedule.done(job)

    threads = [
        threading.Thread(target=worker, args=(engine,), name=f"engine-{engine.name}-{slot}")
        for engine in engines
        for slot in range(slots[engine.name])
    ]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            while thread.is_alive():
                thread.join(timeout=0.5)  # short waits: Ctrl-C reaches this thread
    except BaseException:
        schedule.cancel()
        for engine in engines:  # their builds' exec streams end; the workers clean up
            with suppress(Exception):  # an engine that no longer answers has nothing left
                engine.remove_session_containers()
        for thread in threads:
            thread.join(timeout=STOP_GRACE_S)
        raise
    if crashes:
        raise crashes[0]
    report = FarmReport(lost=dict(schedule.lost))
    for job in jobs:
        if job.engine:
            report.engine_of[job.artifact] = job.engine
        if job.moves:
            report.moves[job.artifact] = list(job.moves)
    for job, reason in schedule.stranded():
        report.stranded[job.artifact] = reason
    return report

"""Which engine builds which target (`release --engines`): pure bookkeeping, shared by the
engines' worker threads under one lock.

A target goes to an engine whose architecture and labels fit it; among those, an engine
that already holds the target's toolchain image (then its base image) takes it first. An
engine takes at most `jobs` targets at a time. An engine that stops answering is dropped;
the target it was building goes back to the queue for another engine, and the move is
recorded.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from orchestrator.errors import ConfigError
from orchestrator.runtime.api import EngineFacts

# Every toolchain image is built for x86_64 hosts (aarch64 is cross-compiled there).
BUILD_ARCHITECTURE = "x86_64"


@dataclass(frozen=True)
class Needs:
    """What an engine must offer to build one flavor."""

    architecture: str = BUILD_ARCHITECTURE
    labels: Mapping[str, str] = field(default_factory=dict)

    def unmet(self, engine: EngineFacts) -> str:
        """Why `engine` cannot build it; "" when it can."""
        if engine.architecture and engine.architecture != self.architecture:
            return f"{engine.name} is {engine.architecture}, not {self.architecture}"
        missing = [f"{k}={v}" for k, v in self.labels.items() if engine.labels.get(k) != v]
        return f"{engine.name} lacks the label {', '.join(missing)}" if missing else ""


def needs_by_flavor(requirements: Sequence[str]) -> dict[str, Needs]:
    """engines.require (FLAVOR:KEY=VALUE, checked by config/resolve/checks.py) by flavor."""
    labels: dict[str, dict[str, str]] = {}
    for requirement in requirements:
        flavor, _, label = requirement.partition(":")
        key, _, value = label.partition("=")
        labels.setdefault(flavor, {})[key] = value
    return {flavor: Needs(labels=wanted) for flavor, wanted in labels.items()}


@dataclass(frozen=True)
class Fit:
    """Whether one engine can take one target, and what of it the engine already holds."""

    engine: str
    unmet: str  # why it cannot build the target; "" when it can
    holds: str  # "toolchain image", "base image" or ""; the schedule prefers an engine that holds


def fits(needs: Needs, images: tuple[str, str], engines: Sequence[EngineFacts]) -> list[Fit]:
    """Each engine's fit for one target (`release --dry-run`): the rules `Schedule` picks by."""
    return [
        Fit(
            engine.name,
            needs.unmet(engine),
            "toolchain image"
            if images[0] in engine.images
            else "base image"
            if images[1] in engine.images
            else "",
        )
        for engine in engines
    ]


@dataclass
class Job:
    """One target waiting for, or on, an engine."""

    index: int  # its place in the release's order
    artifact: str
    needs: Needs
    images: tuple[str, str]  # (toolchain image, base image) references
    engine: str | None = None  # the engine building it now, or that built it
    moves: list[str] = field(default_factory=list)  # "engine: why it left"


class Schedule:
    """The queue of jobs and the engines' state; every method is thread-safe."""

    def __init__(
        self,
        engines: Sequence[EngineFacts],
        jobs: Sequence[Job],
        per_engine: int | Mapping[str, int],
    ) -> None:
        """`per_engine`: how many jobs each engine takes at a time, one count for all or
        per engine name (release/targets/engine_jobs.py)."""
        limits = {
            engine.name: per_engine if isinstance(per_engine, int) else per_engine[engine.name]
            for engine in engines
        }
        for name, limit in limits.items():
            if limit < 1:
                raise ConfigError(f"engines.jobs must be at least 1, got {limit} for {name}")
        self._engines = {engine.name: engine for engine in engines}
        self._lost: dict[str, str] = {}
        self._pending = list(jobs)
        self._running: dict[str, list[Job]] = {engine.name: [] for engine in engines}
        self._per_engine = limits
        self._cancelled = False
        self._changed = threading.Condition()

    # -- what the workers call ------------------------------------------------------
    def take(self, engine: str) -> Job | None:
        """The next job for `engine`, waiting while another engine's job might still come
        back to the queue; None when there is nothing more for it."""
        with self._changed:
            while True:
                if self._cancelled or engine in self._lost:
                    return None
                job = self._pick(engine)
                if job is not None:
                    self._pending.remove(job)
                    job.engine = engine
                    self._running[engine].append(job)
                    return job
                facts = self._engines[engine]
                waiting = any(not job.needs.unmet(facts) for job in self._pending)
                elsewhere = any(self._running[name] for name in self._running if name != engine)
                if not waiting and not elsewhere:
                    return None  # nothing for it, and nothing can come back: it is done
                self._changed.wait()

    def done(self, job: Job) -> None:
        with self._changed:
            self._running[job.engine or ""].remove(job)
            self._changed.notify_all()

    def engine_lost(self, job: Job, reason: str) -> None:
        """`job`'s engine stopped answering: drop the engine, queue its job again."""
        with self._changed:
            engine = job.engine or ""
            self._lost.setdefault(engine, reason)
            self._running[engine].remove(job)
            job.moves.append(f"{engine}: {reason}")
            job.engine = None
            self._pending.append(job)
            self._pending.sort(key=lambda item: item.index)
            self._changed.notify_all()

    def cancel(self) -> None:
        with self._changed:
            self._cancelled = True
            self._changed.notify_all()

    # -- what the release reads afterwards ----------------------------------------
    @property
    def lost(self) -> Mapping[str, str]:
        return dict(self._lost)

    def stranded(self) -> list[tuple[Job, str]]:
        """Jobs no engine took, each with why (after every worker returned)."""
        with self._changed:
            return [(job, self._why_not(job)) for job in self._pending]

    # -- internals --------------------------------------------------------------------
    def _live(self) -> list[EngineFacts]:
        return [facts for name, facts in self._engines.items() if name not in self._lost]

    def _pick(self, engine: str) -> Job | None:
        if len(self._running[engine]) >= self._per_engine[engine]:
            return None
        facts = self._engines[engine]
        fitting = [job for job in self._pending if not job.needs.unmet(facts)]
        if not fitting:
            return None
        for image in (0, 1):  # its toolchain image here, then its base image here
            held = [job for job in fitting if job.images[image] in facts.images]
            if held:
                return held[0]
        # A job whose images another live, fitting engine holds waits for that engine,
        # unless that engine is busy while this one is idle.
        for job in fitting:
            holders = [
                other
                for other in self._live()
                if other.name != engine
                and job.images[0] in other.images
                and not job.needs.unmet(other)
            ]
            if not holders or all(
                len(self._running[other.name]) >= self._per_engine[other.name] for other in holders
            ):
                return job
        return None

    def _why_not(self, job: Job) -> str:
        if self._cancelled:
            return "the release was interrupted"
        reasons = [job.needs.unmet(facts) or f"{facts.name} was lost" for facts in self._live()]
        reasons += [f"{name} stopped answering ({why})" for name, why in self._lost.items()]
        return "no engine can build it: " + "; ".join(reasons)

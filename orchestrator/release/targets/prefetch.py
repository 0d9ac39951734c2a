"""The next target's images, made while one target compiles (`engines.prefetch`).

On an engine that builds one target at a time (release/targets/engine_jobs.py decides where this
is worth it), the image steps of the targets after the current one would each wait their
turn: a toolchain image takes minutes of apt and flattening, mostly disk and network,
while cargo leaves a core idle for minutes of an LTO link. So while a target builds, one
background thread makes the base and toolchain images of the next target whose toolchain
image the engine lacks, exactly as that target's own steps would (runtime/images.py):
under the engine's lock for each image, so it and a step that needs the same image never
build it twice. It starts once the current target's own toolchain image is there, so two
image builds never compete.

A prefetch only saves time, never decides an outcome: when it fails, its target gets a
warning naming the error and the log, and that target's own image steps run as ever (and
fail on that target, if they fail again); the target that was compiling meanwhile never
sees it. A stop (Ctrl-C, SIGTERM) stops the prefetch at its next line of output and waits
for it to remove its lock and folders; one that stays silent past STOP_GRACE_S is left,
and what it leaves is named by this process's pid, which the next run removes as stale.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from orchestrator.execute.steps.toolchain import plan_images
from orchestrator.host.signals import deferred_stops
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.progress.reporter import StepLog
from orchestrator.runtime.engine import Engine

# How often the prefetch looks whether the current target's own image is there yet.
POLL_S = 2.0
# How long a stopped release waits for the prefetch to clean up after itself.
STOP_GRACE_S = 30.0
PREFETCH_LOGS = "prefetch"


class PrefetchStopped(Exception):  # noqa: N818 - a stop, not an error
    """The release stopped: the prefetch ends at its next line of output."""


class _StoppableLog(StepLog):
    """A step log whose next line ends the prefetch once the release stops."""

    def __init__(self, handle: IO[str], stop: threading.Event, path: Path) -> None:
        super().__init__(handle, None, None, "prefetch", path=path)
        self._stop = stop

    def line(self, text: str) -> None:
        if self._stop.is_set():
            raise PrefetchStopped
        super().line(text)


def ensure_images(
    engine: Engine, plan: BuildPlan, log: StepLog, *, cache_dir: Path, offline: bool
) -> None:
    """The base and toolchain images of `plan` on `engine`, as its image steps make them."""
    plan_images(engine, plan, log, cache_dir=cache_dir, offline=offline)


@dataclass
class _Prefetch:
    artifact: str
    image: str  # the toolchain image it makes
    log: Path
    after: str | None  # the image that must exist first: the compiling target's own
    previous_done: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    error: BaseException | None = None


class Prefetcher:
    """One prefetch at a time, for a release that builds its targets one after another.

    The release calls `turn` as each target's build comes: `arrived` (it waits for that
    target's prefetch, if any, and says how it went), then `ahead` (it starts the next
    prefetch); and `stop` at the end, also when interrupted.
    """

    def __init__(
        self,
        engine: Engine,
        announce: Callable[[str], None],
        *,
        cache_dir: Path,
        offline: bool,
        log_dir: Path,
    ) -> None:
        # A session of its own: its image build's stages are its own (runtime/engine.py)
        self._engine = engine.twin()
        self._cache_dir, self._offline = cache_dir, offline
        self._announce = announce
        self._log_dir = log_dir
        self._stop = threading.Event()
        self._current: _Prefetch | None = None

    def turn(self, plan: BuildPlan, later: Sequence[BuildPlan]) -> str | None:
        """`plan`'s target builds now and `later` after it: wait for its images if they are
        being made ahead, start the next ones; a warning for it when they failed ahead."""
        warning = self.arrived(plan)
        self.ahead(plan, later)
        return warning

    def arrived(self, plan: BuildPlan) -> str | None:
        """`plan`'s target is next to build: the build before it has ended. Waits for its
        prefetch when one runs; a warning for the target when that prefetch failed."""
        job = self._current
        if job is None:
            return None
        job.previous_done.set()  # a prefetch waiting for the previous target's image goes on
        if job.image != plan.image.reference:
            return None  # it makes a later target's images: let it run on
        if job.thread is not None and job.thread.is_alive():
            self._announce(f"  waiting for its images, being made ahead (log: {job.log})")
            job.thread.join()
        self._current = None
        if job.error is None:
            return None
        first = (str(job.error).splitlines() or [""])[0]
        return (
            f"making its images ahead failed ({type(job.error).__name__}): {first}; its own "
            f"image steps ran instead (log: {job.log})"
        )

    def ahead(self, current: BuildPlan, later: Sequence[BuildPlan]) -> None:
        """While `current` builds, make the images of the first of `later` (the targets
        still to build, in order) whose toolchain image is neither `current`'s nor on the
        engine. Nothing when a prefetch still runs."""
        if self._current is not None or self._stop.is_set():
            return
        for plan in later:
            reference = plan.image.reference
            if reference == current.image.reference or self._engine.image(reference):
                continue
            after = current.image.reference
            job = _Prefetch(
                plan.artifact_dir,
                reference,
                self._log_dir / f"{plan.artifact_dir}.log",
                None if self._engine.image(after) else after,
            )
            job.thread = threading.Thread(
                target=self._run, args=(job, plan), name=f"prefetch-{plan.artifact_dir}"
            )
            job.thread.daemon = True  # a silent one past STOP_GRACE_S must not hold the exit
            self._current = job
            self._announce(
                f"  making {plan.artifact_dir}'s images ahead, while "
                f"{current.artifact_dir} builds (log: {job.log})"
            )
            job.thread.start()
            return

    def stop(self) -> None:
        """End the prefetch: at once when it is done, else at its next line of output,
        waiting at most STOP_GRACE_S; no stop signal cuts the wait short."""
        self._stop.set()
        job, self._current = self._current, None
        if job is None or job.thread is None:
            return
        job.previous_done.set()
        with deferred_stops(raise_after=False):
            job.thread.join(timeout=STOP_GRACE_S)

    def _run(self, job: _Prefetch, plan: BuildPlan) -> None:
        """The thread: wait for the compiling target's image, then make `plan`'s."""
        try:
            job.log.parent.mkdir(parents=True, exist_ok=True)
            with job.log.open("w") as handle:
                log = _StoppableLog(handle, self._stop, job.log)
                while job.after is not None and self._engine.image(job.after) is None:
                    if job.previous_done.wait(POLL_S) or self._stop.is_set():
                        break  # its build ended (or failed before it made its image)
                log.line(f"making the images of {plan.artifact_dir} ahead")
                ensure_images(
                    self._engine, plan, log, cache_dir=self._cache_dir, offline=self._offline
                )
        except PrefetchStopped:
            job.error = None
        except Exception as error:
            job.error = error

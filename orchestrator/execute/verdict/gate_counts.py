"""The speed gate's callgrind runs, side by side.

Callgrind runs one program on one core, 20-100 times slower than natively, and the gate
counts every workload of every variant: on the README's first build that was more than
half the time. The counts are instruction and simulated-cache counts, the same however
many run at once, so the runs go out together, as many at a time as the engine has cores
(and the container's memory allows), each as its own exec in the one build container.
Each run's output is kept apart and written to the step log whole, run by run, as it
finishes, so the log reads as if they ran in turn.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from queue import SimpleQueue
from typing import Protocol

from orchestrator.errors import StepFailedError
from orchestrator.execute.steps.commands import limit_error, shown_environment
from orchestrator.plan.gate import callgrind_argv
from orchestrator.progress.reporter import StepLog
from orchestrator.runtime.api import Limits, OutputSink

# What one callgrind run of a big binary may take (valgrind's own state plus the
# program's): a container's memory limit allows this many at once.
MEMORY_PER_RUN = 2 << 30


class CountingBox(Protocol):
    """What the runs need of the build container."""

    def exec(
        self,
        argv: Sequence[str],
        *,
        on_output: OutputSink,
        environment: Mapping[str, str] | None = None,
        workdir: str | None = None,
        user: str | None = None,
    ) -> int: ...

    @property
    def limits(self) -> Limits: ...

    def limit_hits(self) -> tuple[str, ...]: ...


@dataclass(frozen=True)
class CountRun:
    """One variant's one workload under callgrind."""

    label: str  # "pgo workload 2": what the log and errors call it
    out_dir: str  # callgrind's output files, in the container
    stdin: str  # a file in the container, "" for none
    command: tuple[str, ...]

    def argv(self, slot: int) -> list[str]:
        """The command that counts it on the slot-th CPU of the container's."""
        return callgrind_argv(self.out_dir, self.stdin, list(self.command), slot=slot)


def parallel_runs(cores: int, memory_limit: int, runs: int) -> int:
    """How many callgrind runs go at once: one per core, fewer where the container's memory
    limit (0: none) would not hold them, never more than there are runs."""
    fit = max(1, memory_limit // MEMORY_PER_RUN) if memory_limit else cores
    return max(1, min(cores, fit, runs))


def run_counts(
    box: CountingBox,
    runs: Sequence[CountRun],
    log: StepLog,
    step: str,
    *,
    at_once: int,
    environment: Mapping[str, str],
    workdir: str | None,
) -> list[str]:
    """Every run's output, in the order of `runs`; StepFailedError (or ResourceLimitError)
    for the first that fails, after the ones already running have ended."""
    if not runs:
        return []
    outputs: dict[int, str] = {}
    shown = shown_environment(environment)
    if at_once > 1:
        log.line(f"{len(runs)} callgrind runs, {at_once} at a time")

    # Each run takes a free slot (a CPU of its own) for as long as it runs.
    slots: SimpleQueue[int] = SimpleQueue()
    for slot in range(at_once):
        slots.put(slot)
    argvs: dict[int, list[str]] = {}

    def one(index: int) -> tuple[int, list[str]]:
        slot = slots.get()
        try:
            argvs[index] = argv = runs[index].argv(slot)
            lines: list[str] = []
            code = box.exec(argv, environment=environment, on_output=lines.append, workdir=workdir)
            return code, lines
        finally:
            slots.put(slot)

    def finished(index: int, code: int, lines: list[str]) -> None:
        log.line(f"--- {runs[index].label} ({len(outputs) + 1} of {len(runs)} done) ---")
        log.command(argvs[index], shown)
        for line in lines:
            log.line(line)
        if code != 0:
            hits = box.limit_hits()
            if hits:
                raise limit_error(step, argvs[index], hits, box.limits)
            raise StepFailedError(
                f"step {step}: the callgrind run of {runs[index].label} exited with {code}",
                hint="Its output above (and the step log) says why; nothing was published.",
            )
        outputs[index] = "\n".join(lines)

    if at_once == 1:  # no thread at all where nothing runs beside
        for index in range(len(runs)):
            finished(index, *one(index))
        return [outputs[index] for index in range(len(runs))]
    _side_by_side(len(runs), at_once, one, finished)
    return [outputs[index] for index in range(len(runs))]


def _side_by_side(
    count: int,
    at_once: int,
    one: Callable[[int], tuple[int, list[str]]],
    finished: Callable[[int, int, list[str]], None],
) -> None:
    # No `with`: leaving it on Ctrl-C would wait for every running callgrind to end before
    # the cleanup that removes their container could run.
    pool = ThreadPoolExecutor(max_workers=at_once, thread_name_prefix="callgrind")
    pending: dict[Future[tuple[int, list[str]]], int] = {}
    try:
        for index in range(count):
            pending[pool.submit(one, index)] = index
        failure: BaseException | None = None
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                index = pending.pop(future)
                if failure is not None:
                    continue
                try:
                    finished(index, *future.result())
                except Exception as error:  # the others already running end first
                    failure = error
                    for waiting in pending:
                        waiting.cancel()
        if failure is not None:
            raise failure
    finally:
        pool.shutdown(wait=False, cancel_futures=True)

"""The speed gate's callgrind runs side by side (execute/verdict/gate_counts.py): how many at once,
outputs in the order asked, each run's log block whole, and a failure named by its run."""

from __future__ import annotations

import io
import threading
from collections.abc import Mapping, Sequence

import pytest

from orchestrator.errors import ResourceLimitError, StepFailedError
from orchestrator.execute.verdict.gate_counts import (
    MEMORY_PER_RUN,
    CountRun,
    parallel_runs,
    run_counts,
)
from orchestrator.progress.reporter import StepLog
from orchestrator.runtime.api import Limits, OutputSink


class _Box:
    """A container whose exec answers from `script`: output folder (the count script's
    first argument) -> (exit code, lines); runs wait on `barrier` first when one is given
    (they must be running together to pass it). `slots` holds each running run's CPU slot."""

    def __init__(
        self,
        script: Mapping[str, tuple[int, list[str]]],
        barrier: threading.Barrier | None = None,
        hits: tuple[str, ...] = (),
    ) -> None:
        self.script = script
        self.barrier = barrier
        self.hits = hits
        self.lock = threading.Lock()
        self.running = self.most = 0
        self.slots_together: set[tuple[str, ...]] = set()
        self.slots: list[str] = []

    def exec(
        self,
        argv: Sequence[str],
        *,
        on_output: OutputSink,
        environment: Mapping[str, str] | None = None,
        workdir: str | None = None,
        user: str | None = None,
    ) -> int:
        out_dir, slot = argv[4], argv[6]
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
            self.slots.append(slot)
            self.slots_together.add(tuple(sorted(self.slots)))
        try:
            if self.barrier is not None:
                self.barrier.wait(timeout=20)
            code, lines = self.script[out_dir]
            for line in lines:
                on_output(line)
            return code
        finally:
            with self.lock:
                self.running -= 1
                self.slots.remove(slot)

    @property
    def limits(self) -> Limits:
        return Limits(pids=64, memory=8 << 30)

    def limit_hits(self) -> tuple[str, ...]:
        return self.hits


def _log() -> tuple[StepLog, io.StringIO]:
    handle = io.StringIO()
    return StepLog(handle, None, None, "speed-gate"), handle


def _runs(*names: str) -> list[CountRun]:
    return [CountRun(f"{name} workload 0", name, "", ("/bin/prog", "--flag")) for name in names]


def test_as_many_runs_at_once_as_cores_unless_memory_or_runs_say_fewer() -> None:
    assert parallel_runs(cores=4, memory_limit=0, runs=9) == 4
    assert parallel_runs(cores=4, memory_limit=3 * MEMORY_PER_RUN, runs=9) == 3
    assert parallel_runs(cores=16, memory_limit=0, runs=2) == 2
    # A limit below one run's share still lets one run; no runs or cores still means one.
    assert parallel_runs(cores=8, memory_limit=MEMORY_PER_RUN // 2, runs=5) == 1
    assert parallel_runs(cores=0, memory_limit=0, runs=0) == 1


def test_runs_go_together_and_outputs_come_back_in_the_order_asked() -> None:
    script = {name: (0, [f"{name} line 1", f"{name} line 2"]) for name in ("a", "b", "c", "d")}
    box = _Box(script, barrier=threading.Barrier(2))
    log, handle = _log()
    outputs = run_counts(
        box,
        _runs("a", "b", "c", "d"),
        log,
        "speed-gate",
        at_once=2,
        environment={"K": "v"},
        workdir=None,
    )
    assert outputs == [f"{n} line 1\n{n} line 2" for n in ("a", "b", "c", "d")]
    assert box.most == 2  # the barrier of two passed: two ran together, never more
    # Runs side by side are pinned to different CPUs of the container's.
    assert ("0", "1") in box.slots_together and ("0", "0") not in box.slots_together
    assert ("1", "1") not in box.slots_together
    text = handle.getvalue()
    assert "4 callgrind runs, 2 at a time" in text
    # Each run's block is whole: its header, its command, then its own lines.
    for name in ("a", "b", "c", "d"):
        block = text.split(f"--- {name} workload 0 (")[1]
        command = block.splitlines()[1]
        assert command.startswith("+ K=v /bin/sh -c") and command.endswith("/bin/prog --flag")
        assert f" {name} '' " in command  # its own output folder, no stdin
        assert block.splitlines()[2:4] == [f"{name} line 1", f"{name} line 2"]


def test_one_at_a_time_runs_in_order_without_threads() -> None:
    box = _Box({"a": (0, ["x"]), "b": (0, ["y"])})
    log, handle = _log()
    assert run_counts(
        box, _runs("a", "b"), log, "speed-gate", at_once=1, environment={}, workdir="/w"
    ) == ["x", "y"]
    assert handle.getvalue().index("a workload 0") < handle.getvalue().index("b workload 0")
    assert "at a time" not in handle.getvalue()


def test_a_failed_run_is_named_and_the_others_output_still_reaches_the_log() -> None:
    box = _Box({"a": (0, ["fine"]), "b": (3, ["valgrind: broken"]), "c": (0, ["also fine"])})
    log, handle = _log()
    with pytest.raises(StepFailedError, match="callgrind run of b workload 0 exited with 3"):
        run_counts(
            box,
            _runs("a", "b", "c"),
            log,
            "speed-gate",
            at_once=3,
            environment={},
            workdir=None,
        )
    assert "valgrind: broken" in handle.getvalue()


def test_a_run_that_hit_the_container_s_limits_says_which() -> None:
    box = _Box({"a": (137, [])}, hits=("memory",))
    log, _ = _log()
    with pytest.raises(ResourceLimitError, match=r"limits\.memory"):
        run_counts(box, _runs("a"), log, "speed-gate", at_once=1, environment={}, workdir=None)

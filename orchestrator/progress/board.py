"""One live line per target while targets build side by side on a terminal.

The lines sit below everything printed and are redrawn in place, each with the target (the
part of its name that tells it apart: `linux-x86_64-cpu-v3`), the engine building it, its
current step, how long that step and the target have run, and the step's latest output.
Finished steps still print a line above them, so the scrollback keeps the whole story. In
CI there is no board: each reporter prints prefixed step lines and a heartbeat instead
(reporter.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from rich.console import Console
from rich.live import Live
from rich.text import Text

from orchestrator.progress.reporter import Marks, duration_text, marks_for

REFRESHES_PER_SECOND = 4
OUTPUT_WIDTH = 60  # of the latest output line shown at the end of a row


@dataclass
class TargetRow:
    """What one target's live line shows."""

    artifact: str
    state: str = "waiting"  # waiting | building | built | failed
    engine: str = ""
    step: str = ""
    started: float | None = None  # when its engine took it
    step_started: float | None = None
    finished: float | None = None
    output: str = ""


class TargetBoard:
    """The live lines of the targets of one release; every method is safe from any thread."""

    def __init__(
        self,
        console: Console,
        artifacts: Sequence[str] = (),
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.console = console
        self.marks: Marks = marks_for(console)
        self._clock = clock
        self._rows = {artifact: TargetRow(artifact) for artifact in artifacts}
        self._lock = threading.Lock()

    @contextmanager
    def shown(self) -> Iterator[TargetBoard]:
        """Redraw the lines until the block ends (also on Ctrl-C); they stay on screen."""
        live = Live(
            console=self.console,
            get_renderable=self.render,
            refresh_per_second=REFRESHES_PER_SECOND,
            transient=False,
        )
        with live:
            yield self

    def add(self, artifact: str) -> None:
        """A target waiting for an engine."""
        with self._lock:
            self._rows.setdefault(artifact, TargetRow(artifact))

    def took(self, artifact: str, engine: str) -> None:
        """`engine` starts on `artifact` (again, when it moved off another engine)."""
        with self._lock:
            row = self._rows.setdefault(artifact, TargetRow(artifact))
            row.state, row.engine, row.step, row.output = "building", engine, "", ""
            row.started = row.step_started = self._clock()
            row.finished = None

    def step(self, artifact: str, name: str) -> None:
        with self._lock:
            row = self._rows[artifact]
            row.step, row.step_started, row.output = name, self._clock(), ""

    def output(self, artifact: str, line: str) -> None:
        text = line.strip()
        if text:
            with self._lock:
                self._rows[artifact].output = text

    def ended(self, artifact: str, *, failed: bool) -> None:
        with self._lock:
            row = self._rows[artifact]
            row.state, row.output = ("failed" if failed else "built"), ""
            row.finished = self._clock()

    def lines(self) -> list[str]:
        """Each target's line, in the release's order (what `render` draws)."""
        with self._lock:
            rows = [TargetRow(**vars(row)) for row in self._rows.values()]
        now = self._clock()
        shared = _shared_prefix([row.artifact for row in rows])
        name_width = max((len(row.artifact) - len(shared) for row in rows), default=0)
        engine_width = max((len(row.engine) for row in rows), default=0)
        return [self._line(row, now, shared, name_width, engine_width) for row in rows]

    def _line(
        self, row: TargetRow, now: float, shared: str, name_width: int, engine_width: int
    ) -> str:
        mark = {
            "waiting": " ",
            "building": self.marks.start,
            "built": self.marks.ok,
            "failed": self.marks.failed,
        }[row.state]
        name = row.artifact.removeprefix(shared)
        head = f"{mark} {name:<{name_width}}  {row.engine or '-':<{engine_width}}  "
        if row.state == "waiting" or row.started is None:
            return head + "waiting for an engine"
        total = duration_text((row.finished or now) - row.started)
        if row.state != "building":
            return head + f"{row.state} in {total}"
        step = row.step or "starting"
        elapsed = duration_text(now - (row.step_started or now))
        shown = row.output if len(row.output) <= OUTPUT_WIDTH else row.output[:OUTPUT_WIDTH] + "..."
        return head + f"{step} {elapsed} (total {total})" + (f"  {shown}" if shown else "")

    def line_of(self, artifact: str) -> BoardLine:
        """What a target's reporter updates in place of its spinner."""
        return BoardLine(self, artifact)

    def render(self) -> Text:
        return Text("\n".join(self.lines()), no_wrap=True, overflow="ellipsis")


def _shared_prefix(artifacts: Sequence[str]) -> str:
    """What every artifact name starts with, up to a dash (`tinyllm-0.1.0-linux-`): the
    lines show the rest, which tells them apart. Nothing for a single target."""
    if len(artifacts) < 2:
        return ""
    first = artifacts[0]
    length = min(len(name) for name in artifacts)
    while length and any(not name.startswith(first[:length]) for name in artifacts):
        length -= 1
    common = first[:length]
    return common[: common.rfind("-") + 1]


@dataclass(frozen=True)
class BoardLine:
    """One target's line, as its reporter sees it (reporter.LiveLine)."""

    board: TargetBoard
    artifact: str

    def step(self, name: str) -> None:
        self.board.step(self.artifact, name)

    def output(self, line: str) -> None:
        self.board.output(self.artifact, line)

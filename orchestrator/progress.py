"""Progress for people and logs for later: one line per step start/end, full output in files.

On a terminal a rich spinner shows the running step and its latest output line; without
one (CI, pipes) plain lines are printed. Every external command is written to the step's
log as `+ cmd` before its output.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from rich.console import Console
from rich.status import Status
from rich.text import Text


@dataclass
class StepResult:
    name: str
    status: str  # "running" | "ok" | "cached" | "failed" | "interrupted"
    seconds: float
    detail: str = ""
    log: str = ""

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "status": self.status,
            "seconds": round(self.seconds, 3),
            "detail": self.detail,
            "log": self.log,
        }


class StepLog:
    """The sink a running step writes to: its log file, and the live status line."""

    def __init__(
        self, handle: IO[str], status: Status | None, echo: Console | None, name: str
    ) -> None:
        self._handle = handle
        self._status_prefix = Text(f"{name}: ")
        self._status = status
        self._echo = echo
        self.cached = False
        self.detail = ""
        self.tail: list[str] = []

    def command(self, argv: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted((env or {}).items()))
        self.line("+ " + (prefix + " " if prefix else "") + shlex.join(argv))

    def line(self, text: str) -> None:
        self._handle.write(text + "\n")
        self._handle.flush()
        self.tail = [*self.tail[-39:], text]
        if self._echo is not None:
            self._echo.print(Text(text), soft_wrap=True, highlight=False)
        elif self._status is not None and text.strip():
            self._status.update(self._status_prefix + Text(text.strip()[:100], style="dim"))

    def mark_cached(self, detail: str) -> None:
        self.cached = True
        self.detail = detail
        self.line(f"cached: {detail}")


class Reporter:
    def __init__(self, console: Console, log_dir: Path, *, verbose: bool = False) -> None:
        self.console = console
        self.log_dir = log_dir
        self.verbose = verbose
        self.results: list[StepResult] = []
        log_dir.mkdir(parents=True, exist_ok=True)

    @property
    def interactive(self) -> bool:
        return self.console.is_terminal

    def info(self, message: str) -> None:
        self.console.print(message, highlight=False)

    def warn(self, message: str) -> None:
        self.console.print(f"[bold yellow]warning:[/] {message}", highlight=False)

    @contextmanager
    def step(self, name: str, title: str) -> Iterator[StepLog]:
        index = len(self.results) + 1
        log_path = self.log_dir / f"{index:02d}-{name}.log"
        started = time.monotonic()
        self.console.print(f"[bold]▶ {name}[/]: {title}", highlight=False, soft_wrap=True)
        with log_path.open("w") as handle:
            status: Status | None = None
            if self.interactive and not self.verbose:
                status = self.console.status(Text(f"{name}: {title}"))
                status.start()
            sink = StepLog(handle, status, self.console if self.verbose else None, name)
            result = StepResult(name, "running", 0.0, log=log_path.name)
            self.results.append(result)
            try:
                yield sink
                result.status = "cached" if sink.cached else "ok"
                result.detail = sink.detail
            except KeyboardInterrupt:
                result.status = "interrupted"
                raise
            except BaseException as exc:
                result.status = "failed"
                result.detail = str(exc)
                raise
            finally:
                if status is not None:
                    status.stop()
                result.seconds = time.monotonic() - started
                self._finish(result, sink)

    def _finish(self, result: StepResult, sink: StepLog) -> None:
        seconds = f"{result.seconds:.1f}s"
        if result.status in ("ok", "cached"):
            mark = "[green]✓[/]" if result.status == "ok" else "[cyan]=[/]"
            extra = f" ({result.detail})" if result.detail else ""
            self.console.print(f"{mark} {result.name} {seconds}{extra}", highlight=False)
            return
        self.console.print(
            f"[red]✗ {result.name}[/] {result.status} after {seconds}", highlight=False
        )
        if sink.tail and not self.verbose:
            self.console.print(f"  last lines of {self.log_dir / result.log}:", highlight=False)
            for line in sink.tail[-20:]:
                self.console.print(Text("  | " + line), highlight=False, soft_wrap=True)

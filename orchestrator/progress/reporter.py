"""Progress for people and logs for later: one line per step start/end, full output in files.

On a terminal a rich spinner shows the running step and its latest output line; when
targets build side by side, their live lines (board.py) show it instead. In CI
(stdout not a terminal, or CI / GITHUB_ACTIONS set) plain lines are printed, a long step
prints a heartbeat line every minute, and on GitHub Actions each step's log is echoed
inside a folded `::group::`. Every external command is written to the step's log as
`+ cmd` before its output.
"""

from __future__ import annotations

import os
import shlex
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from rich.console import Console
from rich.status import Status
from rich.text import Text

ASCII_ENV = "ORCHESTRATOR_ASCII"
HEARTBEAT_SECONDS = 60.0


@dataclass(frozen=True)
class Marks:
    """The symbols of step lines; plain ASCII where the console cannot encode the others."""

    start: str
    ok: str
    cached: str
    failed: str
    warning: str


UNICODE_MARKS = Marks(start="▶", ok="✓", cached="=", failed="✗", warning="!")
ASCII_MARKS = Marks(start=">", ok="ok", cached="=", failed="FAIL", warning="!")


def _set(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


def marks_for(console: Console, env: Mapping[str, str] | None = None) -> Marks:
    """ASCII marks when ORCHESTRATOR_ASCII is set or the console's encoding lacks ▶ ✓ ✗."""
    if _set(os.environ if env is None else env, ASCII_ENV):
        return ASCII_MARKS
    symbols = UNICODE_MARKS.start + UNICODE_MARKS.ok + UNICODE_MARKS.failed
    try:
        symbols.encode(console.encoding)
    except (UnicodeEncodeError, LookupError):
        return ASCII_MARKS
    return UNICODE_MARKS


def in_ci(console: Console, env: Mapping[str, str] | None = None) -> bool:
    """Plain line-per-event output: no terminal, or a CI system says it is running us."""
    env = os.environ if env is None else env
    return not console.is_terminal or _set(env, "CI") or _set(env, "GITHUB_ACTIONS")


def on_github_actions(env: Mapping[str, str] | None = None) -> bool:
    return (os.environ if env is None else env).get("GITHUB_ACTIONS") == "true"


def duration_text(seconds: float) -> str:
    """45s, 2m0s, 1h5m3s: a heartbeat's elapsed time as CI logs usually show it."""
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


class Heartbeat:
    """Calls `beat` every `interval` seconds on a background thread until stopped."""

    def __init__(self, interval: float, beat: Callable[[], None], name: str) -> None:
        self._interval = interval
        self._beat = beat
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.wait(self._interval):
            self._beat()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join()


class LiveLine(Protocol):
    """A line kept on screen that shows the running step and its latest output."""

    def step(self, name: str) -> None: ...

    def output(self, line: str) -> None: ...


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
        self,
        handle: IO[str],
        status: Status | None,
        echo: Console | None,
        name: str,
        live: LiveLine | None = None,
        *,
        warn: Callable[[str], None] | None = None,
        status_prefix: Callable[[], str] | None = None,
        path: Path | None = None,
    ) -> None:
        self._handle = handle
        self._path = path
        self._warn = warn
        self._status_prefix = status_prefix or (lambda: f"{name}: ")
        self._status = status
        self._echo = echo
        self._live = live
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
        elif self._status is not None and text.strip() and not text.startswith("+ "):
            # A command's own line (+ ENV=... cargo ...) says less than where the step is.
            self._status.update(Text(self._status_prefix()) + Text(text.strip()[:100], style="dim"))
        elif self._live is not None:
            self._live.output(text)

    def warn(self, text: str) -> None:
        """A warning that changes what ships or what is reused (a stored profile ignored, a
        cache thrown away): in the step log and on the console, where a user sees it without
        opening the log (outside a CI fold, above a spinner or live line)."""
        if self._warn is None:
            self.line(f"warning: {text}")
            return
        self._handle.write(f"warning: {text}\n")
        self._handle.flush()
        self.tail = [*self.tail[-39:], f"warning: {text}"]
        self._warn(text)

    def mark_cached(self, detail: str) -> None:
        self.cached = True
        self.detail = detail
        self.line(f"cached: {detail}")

    def written(self) -> str:
        """What this step's log file holds so far ("" for a log kept nowhere)."""
        if self._path is None:
            return ""
        self._handle.flush()
        return self._path.read_text(encoding="utf-8", errors="replace")

    def copy_in(self, header: str, text: str) -> None:
        """Put `text` (an earlier run's log) into the log file only: it is history, not
        news, so it is neither echoed nor shown on the status line."""
        self._handle.write(f"{header}\n{text}")
        if text and not text.endswith("\n"):
            self._handle.write("\n")
        self._handle.flush()


class Reporter:
    def __init__(
        self,
        console: Console,
        log_dir: Path,
        *,
        verbose: bool = False,
        env: Mapping[str, str] | None = None,
        heartbeat_seconds: float = HEARTBEAT_SECONDS,
        prefix: str = "",
        live: LiveLine | None = None,
        plan_steps: Sequence[str] = (),
        estimates: Mapping[str, float] | None = None,
    ) -> None:
        self.console = console
        # "step 5 of 14" and, where this machine ran the step before, the time it took
        self.plan_steps = list(plan_steps)
        self.estimates = dict(estimates or {})
        # Targets built side by side share the console: each line says whose it is, and
        # no spinner runs (one live display at a time). On a terminal their live lines
        # show the running step; elsewhere a heartbeat says what still runs.
        self.prefix = prefix
        self.log_dir = log_dir
        self.verbose = verbose
        self.results: list[StepResult] = []
        self.ci = in_ci(console, env)
        self.live = None if self.ci or verbose else live
        self.spinner = not self.ci and not verbose and not prefix
        self.github = on_github_actions(env)
        self.marks = marks_for(console, env)
        self.heartbeat_seconds = heartbeat_seconds
        log_dir.mkdir(parents=True, exist_ok=True)

    def _print(self, text: Text, **options: Any) -> None:  # noqa: ANN401 - rich's options
        if self.prefix:
            text = Text.assemble((f"[{self.prefix}] ", "dim"), text)
        self.console.print(text, **options)

    @property
    def echoes(self) -> bool:
        """Whether step output is printed: with -v, and folded on GitHub Actions."""
        return self.verbose or self.github

    def where(self, name: str) -> str:
        """'step 5/14' when the plan's steps are known, else ''."""
        if name not in self.plan_steps:
            return ""
        return f"step {self.plan_steps.index(name) + 1}/{len(self.plan_steps)}"

    def time_left(self, name: str, elapsed: float) -> str:
        """'about 3m0s left', or how far past the usual time it is; '' without history."""
        usual = self.estimates.get(name)
        if usual is None or usual < 1:
            return ""
        if elapsed <= usual:
            return f"about {duration_text(usual - elapsed)} left"
        return f"past the {duration_text(usual)} it took before"

    def _progress(self, name: str, started: float) -> str:
        elapsed = time.monotonic() - started
        parts = [self.where(name), duration_text(elapsed), self.time_left(name, elapsed)]
        return ", ".join(part for part in parts if part)

    def _heartbeat(self, name: str, started: float, sink: StepLog) -> None:
        last = next(
            (
                line.strip()
                for line in reversed(sink.tail)
                if line.strip() and not line.startswith("+ ")
            ),
            "",
        )
        shown = (last[:117] + "...") if len(last) > 120 else last
        self._print(
            Text(
                f"still running: {name} ({self._progress(name, started)}, "
                f"last output: {shown or 'none yet'})"
            ),
            highlight=False,
            soft_wrap=True,
        )

    def info(self, message: str) -> None:
        self._print(Text(message), highlight=False)  # Text: no markup in paths

    def warn(self, message: str) -> None:
        self._print(Text.assemble(("warning:", "bold yellow"), f" {message}"))

    def _step_warning(self, name: str, text: str) -> None:
        self.warn(f"{name}: {text}")
        if self.github:  # an annotation: seen on the run's page, not only in the folded log
            self._print(Text(f"::warning title={name}::{text}"), highlight=False, soft_wrap=True)

    @contextmanager
    def step(self, name: str, title: str) -> Iterator[StepLog]:
        index = len(self.results) + 1
        log_path = self.log_dir / f"{index:02d}-{name}.log"
        started = time.monotonic()
        if self.live is not None:  # its live line shows the step while it runs
            self.live.step(name)
        else:
            where = ", ".join(
                part for part in (self.where(name), self.time_left(name, 0.0)) if part
            )
            self._print(
                Text.assemble(
                    (f"{self.marks.start} {name}", "bold"),
                    f": {title}" + (f" ({where})" if where else ""),
                ),
                highlight=False,
                soft_wrap=True,
            )
        with log_path.open("w", encoding="utf-8", errors="replace") as handle:
            status: Status | None = None
            if self.spinner:
                spinner = "dots" if self.marks is UNICODE_MARKS else "line"
                where = self.where(name)
                status = self.console.status(
                    Text(f"{name}" + (f" ({where})" if where else "") + f": {title}"),
                    spinner=spinner,
                )
                status.start()
            if self.github:  # GitHub folds what follows until ::endgroup::
                self._print(Text(f"::group::{name} log"), highlight=False, soft_wrap=True)
            echo = self.console if self.echoes else None
            sink = StepLog(
                handle,
                status,
                echo,
                name,
                self.live,
                warn=lambda text: self._step_warning(name, text),
                status_prefix=lambda: f"{name} ({self._progress(name, started)}): ",
                path=log_path,
            )
            heartbeat: Heartbeat | None = None
            if self.ci or (self.prefix and self.live is None):
                heartbeat = Heartbeat(
                    self.heartbeat_seconds,
                    lambda: self._heartbeat(name, started, sink),
                    name=f"heartbeat-{name}",
                )
                heartbeat.start()
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
                if heartbeat is not None:
                    heartbeat.stop()
                if status is not None:
                    status.stop()
                if self.github:
                    self._print(Text("::endgroup::"), highlight=False)
                result.seconds = time.monotonic() - started
                self._finish(result, sink)

    def _finish(self, result: StepResult, sink: StepLog) -> None:
        seconds = f"{result.seconds:.1f}s"
        if result.status in ("ok", "cached"):
            ok = result.status == "ok"
            mark = (self.marks.ok, "green") if ok else (self.marks.cached, "cyan")
            extra = f" ({result.detail})" if result.detail else ""
            self._print(Text.assemble(mark, f" {result.name} {seconds}{extra}"), highlight=False)
            return
        self._print(
            Text.assemble(
                (f"{self.marks.failed} {result.name}", "red"), f" {result.status} after {seconds}"
            ),
            highlight=False,
        )
        if sink.tail and not self.verbose:
            self._print(Text(f"  last lines of {self.log_dir / result.log}:"), highlight=False)
            for line in sink.tail[-20:]:
                self._print(Text("  | " + line), highlight=False, soft_wrap=True)

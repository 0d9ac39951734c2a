"""SIGTERM and SIGHUP stop a run the way Ctrl-C does, and no signal cuts cleanup short.

CI systems, `docker stop` and systemd send SIGTERM; a closed terminal sends SIGHUP. Python's
default for both is to die at once, leaving containers running cargo. Here they raise
`StopRequested`, a KeyboardInterrupt, so every cleanup path Ctrl-C takes runs for them too.

While cleanup runs (`ShieldedExitStack`), further stop signals are noted, not raised: an
impatient second Ctrl-C must not leave a volume behind. A third one abandons cleanup, for a
user who really wants out; `orchestrator clean` removes what is left.
"""

from __future__ import annotations

import signal
import sys
import threading
from contextlib import ExitStack
from types import FrameType, TracebackType
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
ABANDON_AFTER = 2  # signals during cleanup before it is given up


class StopRequested(KeyboardInterrupt):
    """SIGTERM or SIGHUP: handled exactly like Ctrl-C."""


def _raise_stop(signum: int, _frame: FrameType | None) -> None:
    raise StopRequested(signal.Signals(signum).name)


def stop_on_signals() -> None:
    """Make SIGINT raise KeyboardInterrupt and SIGTERM and SIGHUP StopRequested in the main
    thread (call it once, early).

    SIGINT and SIGTERM are handled even where the parent ignored them: a shell starts a
    script's background job (`orchestrator release &`) with SIGINT ignored, and Python
    then keeps it ignored, so `kill -INT` would never stop the run and clean up. An ignored
    SIGHUP stays ignored: `nohup` asks for a run that survives a closed terminal."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _raise_stop)
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        signal.signal(signal.SIGHUP, _raise_stop)


class deferred_stops:  # noqa: N801 - used like a function: `with deferred_stops():`
    """Stop signals that arrive inside are noted, then raised as StopRequested after, unless
    `raise_after` is false: cleanup that runs because of an error lets that error say why."""

    def __init__(self, *, raise_after: bool = True) -> None:
        self.raise_after = raise_after
        self.received: list[int] = []
        self._previous: dict[int, Any] = {}

    def _note(self, signum: int, _frame: FrameType | None) -> None:
        self.received.append(signum)
        if len(self.received) > ABANDON_AFTER:
            raise KeyboardInterrupt  # the user insists: give cleanup up
        sys.stderr.write(
            f"{signal.Signals(signum).name}: still removing containers, volumes and staging "
            f"folders; {ABANDON_AFTER + 1 - len(self.received)} more to abandon cleanup "
            "(then run `orchestrator clean`)\n"
        )

    def __enter__(self) -> None:
        # Only the main thread receives Python signal handlers; elsewhere this does nothing.
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, self._note) for sig in STOP_SIGNALS}

    def __exit__(self, _type: object, exc: BaseException | None, _tb: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        if self.received and self.raise_after and exc is None:
            raise StopRequested(signal.Signals(self.received[0]).name)


class ShieldedExitStack(ExitStack):
    """An ExitStack whose unwinding (removing containers, volumes, staging) no stop signal
    interrupts; a stop that came meanwhile is raised once everything is removed."""

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        with deferred_stops(raise_after=exc is None):
            # Said only once the shield is up: a second Ctrl-C prompted by this line must
            # find cleanup already protected, not the default handler.
            if isinstance(exc, KeyboardInterrupt):
                sys.stderr.write("stopping: removing containers, volumes and staging folders\n")
                sys.stderr.flush()
            return super().__exit__(exc_type, exc, traceback)

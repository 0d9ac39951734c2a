"""SIGTERM and SIGHUP stop a run like Ctrl-C, and no stop signal cuts cleanup short.

Each case runs a small program in a child process and talks to it through pipes: the
parent sends a signal only after the child said where it is, so nothing depends on timing.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from orchestrator.host.signals import stop_on_signals

CHILD = """
import pathlib, signal, sys, time
from orchestrator.host.signals import ShieldedExitStack, stop_on_signals

# A test run started in the background inherits an ignored SIGINT, and one started under
# nohup an ignored SIGHUP; a terminal's are not.
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGHUP, signal.SIG_DFL)
stop_on_signals()
marker = pathlib.Path(sys.argv[1])

def cleanup():
    print("cleaning", flush=True)
    sys.stdin.readline()  # the parent signals again, then sends a line
    marker.write_text("removed")

try:
    with ShieldedExitStack() as stack:
        stack.callback(cleanup)
        print("ready", flush=True)
        while True:
            time.sleep(1)
except KeyboardInterrupt as stop:
    print(f"stopped by {type(stop).__name__} {stop}", flush=True)
    sys.exit(130)
"""


def _stderr_until(child: subprocess.Popen[str], text: str) -> str:
    """Read the child's stderr up to the line holding `text`."""
    assert child.stderr is not None
    while line := child.stderr.readline():
        if text in line:
            return line
    raise AssertionError(f"the child exited without saying {text!r}")


def _start(tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    marker = tmp_path / "cleaned"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(marker)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # A child that misses a signal would leave the test reading its pipes for ever: kill it
    # after a minute, so the test fails instead of hanging the run.
    watchdog = threading.Timer(60, child.kill)
    watchdog.daemon = True
    watchdog.start()
    assert child.stdout is not None
    assert child.stdout.readline() == "ready\n"
    return child, marker


@pytest.mark.parametrize("first", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_stop_signal_runs_cleanup_then_exits_130(tmp_path: Path, first: signal.Signals) -> None:
    child, marker = _start(tmp_path)
    assert child.stdout is not None
    child.send_signal(first)
    assert child.stdout.readline() == "cleaning\n"
    out, err = child.communicate("go on\n", timeout=60)
    assert child.returncode == 130
    assert marker.read_text() == "removed"
    assert "stopped by" in out
    assert "stopping: removing containers, volumes and staging folders" in err


def test_a_second_signal_during_cleanup_does_not_cut_it_short(tmp_path: Path) -> None:
    child, marker = _start(tmp_path)
    assert child.stdout is not None
    assert child.stderr is not None
    child.send_signal(signal.SIGTERM)
    assert child.stdout.readline() == "cleaning\n"
    child.send_signal(signal.SIGINT)  # the impatient second Ctrl-C
    assert _stderr_until(child, "still removing").startswith("SIGINT: still removing containers")
    out, _ = child.communicate("go on\n", timeout=60)
    assert child.returncode == 130
    assert marker.read_text() == "removed"  # cleanup finished
    assert "stopped by StopRequested SIGTERM" in out


def test_three_more_signals_abandon_cleanup(tmp_path: Path) -> None:
    child, marker = _start(tmp_path)
    assert child.stdout is not None
    assert child.stderr is not None
    child.send_signal(signal.SIGTERM)
    assert child.stdout.readline() == "cleaning\n"
    for _ in range(2):
        child.send_signal(signal.SIGINT)
        _stderr_until(child, "still removing")
    child.send_signal(signal.SIGINT)
    child.communicate(timeout=60)
    assert child.returncode == 130
    assert not marker.exists()  # the user insisted: cleanup was given up


def test_an_ignored_sighup_stays_ignored() -> None:
    # `nohup orchestrator release &` asks for the run to survive a closed terminal.
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGHUP, signal.SIGTERM)}
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        stop_on_signals()
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


STUCK_AT_EXIT = """
import sys, threading, time
import orchestrator.cli as cli
from orchestrator.cli.app import app

@app.command("stuck-stop")
def stuck_stop() -> None:
    # What a stop cut short can leave: something interpreter shutdown waits for (a
    # non-daemon thread here, a Docker stream the daemon never closes in real life).
    threading.Thread(target=time.sleep, args=(3600,), daemon=False).start()
    raise KeyboardInterrupt

sys.argv = ["orchestrator", "stuck-stop"]
cli.main()
"""


def test_a_handled_stop_exits_at_once_even_if_shutdown_would_wait() -> None:
    child = subprocess.run(
        [sys.executable, "-c", STUCK_AT_EXIT],
        capture_output=True,
        text=True,
        timeout=60,  # without the prompt exit this waits for the thread's hour
        check=False,
    )
    assert child.returncode == 130, child.stderr
    assert "error: interrupted" in child.stdout + child.stderr


IGNORED_AT_START = """
import signal, sys, time
from orchestrator.host.signals import stop_on_signals

# Inherited from the parent, as a script's `orchestrator release &` has it.
assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
stop_on_signals()
try:
    print("ready", flush=True)
    while True:
        time.sleep(1)
except KeyboardInterrupt as stop:
    print(f"stopped by {type(stop).__name__}", flush=True)
    sys.exit(130)
"""


def _ignore_stop_signals() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


@pytest.mark.parametrize(
    ("sent", "raised"),
    [(signal.SIGINT, "KeyboardInterrupt"), (signal.SIGTERM, "StopRequested")],
)
def test_a_stop_signal_the_parent_ignored_still_stops_the_run(
    sent: signal.Signals, raised: str
) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", IGNORED_AT_START],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_ignore_stop_signals,  # noqa: PLW1509 - no threads run before the exec
    )
    watchdog = threading.Timer(60, child.kill)  # a missed signal fails instead of hanging
    watchdog.daemon = True
    watchdog.start()
    assert child.stdout is not None
    assert child.stdout.readline() == "ready\n"
    child.send_signal(sent)
    out, err = child.communicate(timeout=60)
    watchdog.cancel()
    assert child.returncode == 130, err
    assert out == f"stopped by {raised}\n"


def test_stop_on_signals_handles_an_ignored_sigint_in_this_process() -> None:
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        stop_on_signals()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_IGN, signal.SIG_DFL)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

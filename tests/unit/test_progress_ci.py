"""Progress in CI: line-per-event output, heartbeats on long steps, GitHub Actions folds,
and ASCII marks where the console cannot show ▶ ✓ ✗.

No timing is asserted: the heartbeat test waits for the heartbeat line itself (an event),
with a short injected interval.
"""

from __future__ import annotations

import io
import re
import threading
from pathlib import Path

import pytest
from rich.console import Console

from orchestrator.progress.reporter import (
    ASCII_MARKS,
    UNICODE_MARKS,
    Reporter,
    duration_text,
    in_ci,
    marks_for,
)


class Recorder(io.StringIO):
    """A console file that signals when a line containing `wanted` has been written."""

    def __init__(self, wanted: str) -> None:
        super().__init__()
        self.wanted = wanted
        self.seen = threading.Event()

    def write(self, text: str) -> int:
        written = super().write(text)
        if self.wanted in self.getvalue():
            self.seen.set()
        return written


def reporter(
    tmp_path: Path, file: io.StringIO, env: dict[str, str], heartbeat_seconds: float = 60.0
) -> Reporter:
    console = Console(file=file, width=200, highlight=False)
    return Reporter(console, tmp_path / "logs", env=env, heartbeat_seconds=heartbeat_seconds)


def test_a_long_step_prints_heartbeats_until_it_ends(tmp_path: Path) -> None:
    out = Recorder("last output: Compiling demo v1.2.3")
    progress = reporter(tmp_path, out, {}, heartbeat_seconds=0.05)
    assert progress.ci  # a file, not a terminal
    with progress.step("build-release", "cargo build") as log:
        log.line("   Compiling demo v1.2.3")
        log.line("")  # blank lines are not "last output"
        # Wait for the event, not for a duration; the timeout only stops a hung test.
        assert out.seen.wait(timeout=30)
    lines = out.getvalue().splitlines()
    beats = [line for line in lines if line.startswith("still running:")]
    pattern = r"still running: build-release \(\d+s, last output: Compiling demo v1\.2\.3\)"
    assert any(re.fullmatch(pattern, beat) for beat in beats), beats
    finished = next(i for i, line in enumerate(lines) if line.startswith("✓ build-release"))
    assert not any(line.startswith("still running:") for line in lines[finished:])
    assert not [t for t in threading.enumerate() if t.name == "heartbeat-build-release"]


def test_a_step_that_fails_stops_its_heartbeat(tmp_path: Path) -> None:
    out = Recorder("still running: pgo-train")
    progress = reporter(tmp_path, out, {}, heartbeat_seconds=0.05)
    with pytest.raises(RuntimeError), progress.step("pgo-train", "train") as log:
        assert out.seen.wait(timeout=30)
        log.line("boom")
        raise RuntimeError("workload failed")
    assert "last output: none yet" in out.getvalue()
    assert not [t for t in threading.enumerate() if t.name == "heartbeat-pgo-train"]
    assert "✗ pgo-train failed" in out.getvalue()


def test_no_heartbeat_thread_on_an_interactive_terminal(tmp_path: Path) -> None:
    console = Console(file=io.StringIO(), force_terminal=True, width=200)
    progress = Reporter(console, tmp_path / "logs", env={}, heartbeat_seconds=0.05)
    assert not progress.ci
    with progress.step("extract", "copy out"):
        assert not [t for t in threading.enumerate() if t.name == "heartbeat-extract"]


def test_ci_variables_mean_ci_even_on_a_terminal() -> None:
    terminal = Console(file=io.StringIO(), force_terminal=True)
    assert not in_ci(terminal, {})
    assert in_ci(terminal, {"CI": "true"})
    assert in_ci(terminal, {"GITHUB_ACTIONS": "true"})
    assert not in_ci(terminal, {"CI": "false"})
    assert in_ci(Console(file=io.StringIO()), {})  # a pipe or a file


def test_github_actions_folds_each_steps_log(tmp_path: Path) -> None:
    out = io.StringIO()
    progress = reporter(tmp_path, out, {"GITHUB_ACTIONS": "true", "CI": "true"})
    with progress.step("fetch-crates", "cargo vendor") as log:
        log.command(["cargo", "vendor", "--locked"])
        log.line("Vendoring demo v1.2.3")
    lines = out.getvalue().splitlines()
    assert lines == [
        "▶ fetch-crates: cargo vendor",
        "::group::fetch-crates log",
        "+ cargo vendor --locked",
        "Vendoring demo v1.2.3",
        "::endgroup::",
        lines[-1],
    ]
    assert lines[-1].startswith("✓ fetch-crates ")


def test_github_actions_shows_a_failures_last_lines_outside_the_fold(tmp_path: Path) -> None:
    out = io.StringIO()
    progress = reporter(tmp_path, out, {"GITHUB_ACTIONS": "true"})
    with pytest.raises(RuntimeError), progress.step("test", "cargo test") as log:
        log.line("test foo ... FAILED")
        raise RuntimeError("tests failed")
    text = out.getvalue()
    assert text.index("::endgroup::") < text.index("✗ test failed")
    assert text.rindex("test foo ... FAILED") > text.index("last lines of")


def test_without_github_actions_there_are_no_group_markers(tmp_path: Path) -> None:
    out = io.StringIO()
    progress = reporter(tmp_path, out, {"CI": "1"})
    with progress.step("validate", "compare outputs") as log:
        log.line("identical")
    assert "::group::" not in out.getvalue()
    assert "identical" not in out.getvalue()  # not echoed without -v


def test_ascii_marks_on_a_console_that_cannot_encode_them(tmp_path: Path) -> None:
    raw = io.BytesIO()
    ascii_file = io.TextIOWrapper(raw, encoding="ascii", write_through=True)
    console = Console(file=ascii_file, width=200)
    assert marks_for(console, {}) is ASCII_MARKS
    progress = Reporter(console, tmp_path / "logs", env={})
    with progress.step("build-release", "cargo build"):
        pass
    with pytest.raises(RuntimeError), progress.step("bolt-optimize", "llvm-bolt"):
        raise RuntimeError("bolt crashed")
    ascii_file.flush()
    text = raw.getvalue().decode("ascii")  # would raise on any non-ASCII byte
    assert "> build-release: cargo build" in text
    assert "ok build-release " in text
    assert "FAIL bolt-optimize failed" in text


def test_orchestrator_ascii_forces_ascii_marks() -> None:
    utf8 = Console(file=io.StringIO())
    assert marks_for(utf8, {}) is UNICODE_MARKS
    assert marks_for(utf8, {"ORCHESTRATOR_ASCII": "1"}) is ASCII_MARKS
    assert marks_for(utf8, {"ORCHESTRATOR_ASCII": "0"}) is UNICODE_MARKS


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.4, "0s"), (45, "45s"), (120, "2m0s"), (125.9, "2m5s"), (3723, "1h2m3s")],
)
def test_duration_text(seconds: float, text: str) -> None:
    assert duration_text(seconds) == text

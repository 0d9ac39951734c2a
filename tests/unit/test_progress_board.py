"""The live lines of targets built side by side on a terminal: one line per target with its
engine, current step, elapsed times and latest output, and reporters that feed them.

Time comes from an injected clock, so the elapsed texts are exact.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from orchestrator.progress.board import TargetBoard
from orchestrator.progress.reporter import Reporter


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def terminal(file: io.StringIO) -> Console:
    return Console(file=file, force_terminal=True, width=160, color_system=None)


@pytest.fixture
def no_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CI", "GITHUB_ACTIONS", "ORCHESTRATOR_ASCII"):
        monkeypatch.delenv(name, raising=False)


def test_each_target_has_one_line_with_engine_step_and_elapsed_times(no_ci: None) -> None:
    clock = Clock()
    board = TargetBoard(terminal(io.StringIO()), ["app-cpu-x86-64-v3", "app-cuda"], clock=clock)
    board.took("app-cpu-x86-64-v3", "default")
    clock.now += 5
    board.step("app-cpu-x86-64-v3", "pgo-train")
    clock.now += 65
    board.output("app-cpu-x86-64-v3", "   running workload 3 of 4  ")
    first, second = board.lines()
    assert first.split() == [
        "▶",
        "cpu-x86-64-v3",  # what tells it apart: all start with "app-"
        "default",
        "pgo-train",
        "1m5s",
        "(total",
        "1m10s)",
        "running",
        "workload",
        "3",
        "of",
        "4",
    ]
    assert second.split() == ["cuda", "-", "waiting", "for", "an", "engine"]


def test_a_finished_target_keeps_its_total_and_a_moved_one_starts_over(no_ci: None) -> None:
    clock = Clock()
    board = TargetBoard(terminal(io.StringIO()), ["a", "b"], clock=clock)
    board.took("a", "second")
    board.took("b", "default")
    clock.now += 30
    board.ended("b", failed=False)
    clock.now += 600  # a finished target's time no longer runs
    assert board.lines()[1].split() == ["✓", "b", "default", "built", "in", "30s"]
    board.ended("a", failed=True)  # its engine died ...
    board.took("a", "default")  # ... and it moved
    clock.now += 2
    assert board.lines()[0].split()[:5] == ["▶", "a", "default", "starting", "2s"]


def test_long_output_is_cut_and_blank_output_keeps_the_last_line(no_ci: None) -> None:
    clock = Clock()
    board = TargetBoard(terminal(io.StringIO()), ["a"], clock=clock)
    board.took("a", "e")
    board.output("a", "x" * 200)
    board.output("a", "   ")
    line = board.lines()[0]
    assert line.endswith("x" * 60 + "...")


def test_a_reporter_with_a_live_line_shows_its_steps_there(tmp_path: Path, no_ci: None) -> None:
    out = io.StringIO()
    console = terminal(out)
    clock = Clock()
    board = TargetBoard(console, ["app"], clock=clock)
    board.took("app", "second")
    reporter = Reporter(
        console, tmp_path / "logs", prefix="app@second", live=board.line_of("app"), env={}
    )
    with reporter.step("build-release", "cargo build") as log:
        log.line("   Compiling app v0.1.0")
        assert board.lines()[0].split()[3] == "build-release"
        assert board.lines()[0].endswith("Compiling app v0.1.0")
    printed = out.getvalue()
    assert "▶ build-release" not in printed  # the live line showed the start
    assert "[app@second] ✓ build-release" in printed  # the end stays in the scrollback
    assert (tmp_path / "logs" / "01-build-release.log").read_text() == ("   Compiling app v0.1.0\n")


def test_in_ci_a_reporter_ignores_the_live_line_and_prints_every_step(tmp_path: Path) -> None:
    out = io.StringIO()
    board = TargetBoard(terminal(io.StringIO()), ["app"])
    reporter = Reporter(
        Console(file=out, width=160),
        tmp_path / "logs",
        prefix="app@second",
        live=board.line_of("app"),
        env={"CI": "true"},
    )
    with reporter.step("build-release", "cargo build"):
        pass
    assert "[app@second] ▶ build-release: cargo build" in out.getvalue()
    assert board.lines()[0].split()[-3:] == [
        "for",
        "an",
        "engine",
    ]


def test_the_board_draws_its_lines_on_the_terminal(no_ci: None) -> None:
    out = io.StringIO()
    board = TargetBoard(terminal(out), ["app-cpu"])
    with board.shown():
        board.took("app-cpu", "default")
        board.step("app-cpu", "bolt-optimize")
    assert "app-cpu" in out.getvalue()
    assert "bolt-optimize" in out.getvalue()


def test_names_lose_only_the_prefix_all_share_up_to_a_dash(no_ci: None) -> None:
    board = TargetBoard(terminal(io.StringIO()), ["tool-1.0-linux-cpu", "tool-1.0-linux-cpu-v3"])
    assert [line.split()[0] for line in board.lines()] == ["cpu", "cpu-v3"]
    alone = TargetBoard(terminal(io.StringIO()), ["tool-1.0-linux-cpu"])
    assert alone.lines()[0].split()[0] == "tool-1.0-linux-cpu"

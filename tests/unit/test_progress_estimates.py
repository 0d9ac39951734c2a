"""Where a long step is: "step i/N" from the plan, and the time left from how long the
same step took in this machine's earlier builds of the flavor (their logs/run.json, or the
build.json of an older release)."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from orchestrator.host.step_times import earlier_step_seconds
from orchestrator.progress.reporter import Reporter


def _build_json(folder: Path, flavor: str, steps: list[dict[str, object]]) -> None:
    """A folder as published before build.json left how the run went to logs/run.json."""
    folder.mkdir(parents=True)
    document = {"artifact": {"flavor": flavor}, "steps": steps}
    (folder / "build.json").write_text(json.dumps(document))


def _run_json(folder: Path, flavor: str, steps: list[dict[str, object]]) -> None:
    """A folder as published now: its steps in the unsigned logs/run.json."""
    (folder / "logs").mkdir(parents=True)
    (folder / "build.json").write_text(json.dumps({"artifact": {"flavor": flavor}}))
    document = {"artifact": folder.name, "flavor": flavor, "steps": steps}
    (folder / "logs" / "run.json").write_text(json.dumps(document))


def test_the_estimate_is_the_median_of_earlier_builds_of_the_flavor(tmp_path: Path) -> None:
    for index, seconds in enumerate((100.0, 300.0, 200.0)):
        (_run_json if index else _build_json)(
            tmp_path / "demo-1.0.0" / f"cpu-{index}",
            "cpu",
            [
                {"name": "build-baseline", "status": "ok", "seconds": seconds},
                {"name": "fetch-crates", "status": "cached", "seconds": 0.1},
            ],
        )
    _build_json(
        tmp_path / "demo-1.0.0" / "cuda",
        "cuda",
        [{"name": "build-baseline", "status": "ok", "seconds": 5000}],
    )
    (tmp_path / "demo-1.0.0" / "broken").mkdir()
    (tmp_path / "demo-1.0.0" / "broken" / "build.json").write_text("{not json")
    assert earlier_step_seconds(tmp_path, "cpu") == {"build-baseline": 200.0}
    assert earlier_step_seconds(tmp_path, "rocm") == {}
    assert earlier_step_seconds(tmp_path / "nowhere", "cpu") == {}


def test_a_step_says_where_it_is_and_how_long_it_usually_takes(tmp_path: Path) -> None:
    out = io.StringIO()
    console = Console(file=out, width=200)
    reporter = Reporter(
        console,
        tmp_path / "logs",
        env={"CI": "true"},
        plan_steps=["fetch-crates", "build-baseline", "publish"],
        estimates={"build-baseline": 180.0},
    )
    with reporter.step("build-baseline", "cargo build --release") as log:
        log.command(["cargo", "build"], {"RUSTFLAGS": "-Ctarget-cpu=x86-64-v2"})
    with reporter.step("publish", "sign") as log:
        log.line("done")
    text = out.getvalue()
    assert "build-baseline: cargo build --release (step 2/3, about 3m0s left)" in text
    assert "publish: sign (step 3/3)" in text
    assert reporter.time_left("build-baseline", 200.0) == "past the 3m0s it took before"
    assert reporter.time_left("publish", 1.0) == ""
    assert reporter.where("not-planned") == ""

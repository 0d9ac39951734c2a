"""release's quick bench (the speedup column) honours bench.runs (issue 42.6): --bench-runs
first, then bench.runs where the config file or the environment sets it, else 3."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from orchestrator.cli.release_common import QUICK_BENCH_RUNS, quick_bench_runs
from orchestrator.config.resolve.options import resolve

from .fakes import FakeEngine


@pytest.mark.parametrize(
    ("config", "env", "flag", "runs"),
    [
        ("", {}, None, QUICK_BENCH_RUNS),
        ("[bench]\nruns = 5\n", {}, None, 5),
        ("", {"ORCHESTRATOR_BENCH_RUNS": "7"}, None, 7),
        ("[bench]\nruns = 5\n", {}, 0, 0),
        ("[bench]\nruns = 5\n", {}, 2, 2),
    ],
)
def test_the_runs_come_from_the_flag_then_bench_runs_then_the_quick_default(
    project: Path, config: str, env: dict[str, str], flag: int | None, runs: int
) -> None:
    path = project / "orchestrator.toml"
    path.write_text(path.read_text() + config)
    options = resolve(path, env=env)
    source = options.sources.get("bench.runs", "default")
    assert quick_bench_runs(flag, configured=options.bench_runs, source=source) == runs


def test_release_hands_bench_runs_to_the_release(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import orchestrator.release.run as release_run  # noqa: PLC0415
    from orchestrator.cli import app  # noqa: PLC0415

    from .test_cli_commands import configure, use_engine  # noqa: PLC0415

    asked: list[int] = []

    def run_release(*_args: Any, bench_runs: int, **_kwargs: Any) -> list[Any]:
        asked.append(bench_runs)
        raise RuntimeError("stop here: only the runs are tested")

    use_engine(monkeypatch, FakeEngine())
    monkeypatch.setattr(release_run, "run_release", run_release)
    config = configure(project, "[bench]\nruns = 6\n")
    result = CliRunner().invoke(app, ["release", "--flavors", "cpu", "-c", str(config)])
    assert asked == [6], result.output
    CliRunner().invoke(app, ["release", "--flavors", "cpu", "--bench-runs", "1", "-c", str(config)])
    assert asked == [6, 1]

"""The speed gate per workload (issue 33.4): each variant's estimated cycles on every
workload against cargo build and the release profile, the variants that win some
workloads and lose others, the step log's table and build.json's record, the release
table's "est. cycles vs cargo build" column, and the fixed cache geometry in the keys."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from pydantic import ValidationError as PydanticValidationError
from rich.console import Console
from typer.testing import CliRunner

from orchestrator.cli.release_table import CYCLES_COLUMN, release_table, shipped_text
from orchestrator.config.declarations.kinds import Run
from orchestrator.execute.steps.pipeline import BIN_DIR
from orchestrator.execute.verdict import gate as gate_step
from orchestrator.model.documents.records import GateInfo
from orchestrator.model.verdict import callgrind
from orchestrator.model.verdict.callgrind import Counts
from orchestrator.model.verdict.gate_table import (
    gate_splits,
    release_column,
    splits,
    table_lines,
    workload_rows,
)
from orchestrator.plan import serialize, step_keys
from orchestrator.release.targets.target import Target, TargetResult

from .conftest import plan_for
from .execute_rig import Rig, make_options, make_rig
from .fakes import FakeEngine

EVENTS = "events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw Bc Bcm Bi Bim"
LABELS = ["run a.txt", "run b.txt", "run c.txt"]
# pgo saves on workloads 1 and 3 and costs 5% more than cargo build on workload 2.
CYCLES = {
    "baseline": [1000, 2000, 400],
    "release": [900, 2000, 380],
    "pgo": [800, 2100, 300],
}


def _counts(cycles: dict[str, list[int]]) -> dict[str, list[Counts]]:
    return {name: [Counts(c) for c in runs] for name, runs in cycles.items()}


def test_each_workload_holds_every_variant_s_cycles_and_ratios() -> None:
    rows = workload_rows(_counts(CYCLES), LABELS)
    assert [row.workload for row in rows] == LABELS
    assert rows[1].cycles == {"baseline": 2000, "release": 2000, "pgo": 2100}
    assert rows[1].vs_baseline["pgo"] == pytest.approx(1.05)
    assert rows[2].vs_baseline["pgo"] == pytest.approx(0.75)
    assert rows[0].vs_release["pgo"] == pytest.approx(round(800 / 900, 4))
    assert rows[0].vs_baseline["baseline"] == 1.0
    # Without the release profile counted there is no ratio to it, and no error.
    only = workload_rows(_counts({"baseline": [10], "bolt": [9]}), ["x"])
    assert only[0].vs_release == {} and only[0].vs_baseline["bolt"] == pytest.approx(0.9)


def test_a_variant_that_wins_some_workloads_and_loses_others_is_flagged() -> None:
    found = splits(workload_rows(_counts(CYCLES), LABELS))
    # release ties on workload 2 and wins the others: a tie is no loss.
    assert [split.variant for split in found] == ["pgo"]
    assert found[0].text() == "pgo wins 2 of 3 workloads"
    assert found[0].line() == (
        "pgo wins 2 of 3 workloads against cargo build --release; more estimated cycles on "
        "workload 2 (`run b.txt`): +5.0%"
    )
    # Losing everywhere is what the mean already says: not a split.
    slower = _counts({"baseline": [100, 100], "pgo": [110, 120]})
    assert splits(workload_rows(slower, ["a", "b"])) == []
    assert splits([]) == [] and gate_splits(None) == []


def test_the_step_log_table_lines_up_each_workload_s_variants() -> None:
    lines = table_lines(workload_rows(_counts(CYCLES), LABELS))
    header = lines[0]
    assert header.split("  ")[0] == "workload"
    assert "est. cycles" in header and "vs cargo build" in header and "vs release" in header
    body = lines[1:10]
    assert len(body) == 9  # three variants for each of three workloads
    pgo_b = body[5]
    assert pgo_b.split() == ["pgo", "2,100", "+5.0%", "+5.0%"]
    assert body[3].split() == ["2", "baseline", "2,000", "-", "-"]
    # Numbers end in the same column as their header: right-aligned under it.
    for name in ("est. cycles", "vs cargo build", "vs release"):
        end = header.index(name) + len(name)
        assert {line[:end].rstrip()[-1:].isspace() for line in body} == {False}
        assert {len(line[:end]) for line in body} == {end}
    assert lines[10:] == [f"workload {n}: {label}" for n, label in enumerate(LABELS, 1)]
    assert table_lines([]) == []


def _rig(project: Path, stack: ExitStack, tmp_path: Path, cycles: dict[str, list[int]]) -> Rig:
    """A rig counting three workloads; callgrind answers `cycles[variant][index]`."""

    def respond(argv: Sequence[str]) -> tuple[int, list[str]]:
        joined = " ".join(argv)
        for variant, runs in cycles.items():
            for index, count in enumerate(runs):
                if f"--callgrind-out-file=/build/out/gate/{variant}-{index}/" in joined:
                    return 0, [EVENTS, f"summary: {count} 0 0 0 0 0 0 0 0 100 0 7 0"]
        return 0, []

    workloads = tuple(Run(tuple(label.split())) for label in LABELS)
    options = make_options(project, gate_workloads=workloads)
    engine = FakeEngine(responder=respond, missing=lambda path: b"same output\n")
    rig = make_rig(options, stack, tmp_path, engine=engine)
    state = rig.pipeline.state
    state.unbolted = f"{BIN_DIR}/optimized/demo"
    state.shipped = state.bolted = f"{BIN_DIR}/bolt/demo"
    return rig


def test_the_gate_step_records_and_prints_the_table_and_flags_a_split(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    cycles = {**CYCLES, "pgo-bolt": [799, 2099, 299]}  # short of min_gain: pgo ships
    rig = _rig(project, stack, tmp_path, cycles)
    gate_step.speed_gate(rig.pipeline, rig.log)
    gate = rig.pipeline.state.gate
    assert gate is not None and gate.shipped == "pgo"
    assert [row.workload for row in gate.per_workload] == LABELS
    assert gate.per_workload[1].cycles["pgo-bolt"] == 2099
    # The totals stay as before: integration tests sum `per_workload` of each variant.
    assert gate.variants["pgo"]["per_workload"] == [800, 2100, 300]
    assert rig.log.detail.startswith("ships pgo: ")
    # Only the shipped variant's split ends the step line; the log names both.
    assert rig.log.detail.endswith(" than cargo build; pgo wins 2 of 3 workloads")
    assert "gate: pgo wins 2 of 3 workloads against cargo build --release" in rig.text
    assert "gate: pgo-bolt wins 2 of 3 workloads against cargo build --release" in rig.text
    assert re.search(r"\n +2 +baseline +2,000 +- +-\n", rig.text)
    assert "  workload 3: run c.txt" in rig.text
    # The closing lines (build) and release warnings say it from build.json's record.
    assert gate_splits(gate)[0].startswith("pgo wins 2 of 3 workloads against cargo build")


def test_a_gate_that_wins_everywhere_adds_nothing_to_the_step_line(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    cycles = {
        "baseline": [1000, 1000, 1000],
        "release": [900, 900, 900],
        "pgo": [800, 800, 800],
        "pgo-bolt": [700, 700, 700],
    }
    rig = _rig(project, stack, tmp_path, cycles)
    gate_step.speed_gate(rig.pipeline, rig.log)
    assert rig.log.detail == "ships pgo-bolt: 30.0% fewer estimated cycles than cargo build"
    assert "workloads against cargo build" not in rig.text
    assert rig.pipeline.state.gate is not None
    assert gate_splits(rig.pipeline.state.gate) == []


def test_build_json_s_gate_record_holds_the_per_workload_table() -> None:
    info = GateInfo(
        policy="best",
        min_gain=0.01,
        metric="m",
        workloads=3,
        shipped="pgo",
        per_workload=workload_rows(_counts(CYCLES), LABELS),
    )
    document = json.loads(json.dumps(info.dump()))
    assert document["per_workload"][1] == {
        "workload": "run b.txt",
        "cycles": {"baseline": 2000, "release": 2000, "pgo": 2100},
        "vs_baseline": {"baseline": 1.0, "release": 1.0, "pgo": 1.05},
        "vs_release": {"baseline": 1.0, "release": 1.0, "pgo": 1.05},
    }
    assert GateInfo.model_validate(document) == info
    # A record written before the table still reads, with no rows.
    del document["per_workload"]
    assert GateInfo.model_validate(document).per_workload == []
    document["per_workload"] = [{"workload": "x", "cycles": {"pgo": "many"}}]
    with pytest.raises(PydanticValidationError, match=r"per_workload\.0\.cycles\.pgo"):
        GateInfo.model_validate(document)


def _results(project: Path) -> list[TargetResult]:
    options = make_options(project)
    measured = TargetResult(Target("cpu", "x86-64-v3", options), "demo-1.0-linux-x86_64-cpu-v3")
    measured.status, measured.size = "ok", 880_000
    measured.shipped_variant = "pgo-bolt"
    measured.cycles_saved_vs_baseline, measured.cycles_saved_vs_release = 0.318, 0.251
    measured.speedup, measured.glibc, measured.oldest_distribution = 1.2, "2.34", "bookworm"
    emulated = TargetResult(
        Target("aarch64", "generic", options), "demo-1.0-linux-aarch64-aarch64-generic"
    )
    emulated.status, emulated.size, emulated.speedup_note = "ok", 900_000, "emulated"
    return [measured, emulated]


def _render(results: list[TargetResult], width: int) -> str:
    console = Console(file=io.StringIO(), width=width, highlight=False)
    console.print(release_table(results, "release demo 1.0", width))
    file = console.file
    assert isinstance(file, io.StringIO)
    return file.getvalue()


def _column(text: str, index: int, *, sep: str = " ") -> list[str]:
    """Each row's cell in column `index` (0: the first), its folded lines joined by `sep`."""
    cells: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith("│"):
            parts = [part.strip() for part in line.split("│")[1:-1]]
            if parts[1]:  # a status opens a row
                cells.append([])
            cells[-1].append(parts[index])
    return [sep.join(part for part in cell if part) for cell in cells]


def _header(text: str) -> list[str]:
    """The header's cells, each folded line joined by a space."""
    rows = [[c.strip() for c in line.split("┃")[1:-1]] for line in text.splitlines() if "┃" in line]
    return [" ".join(row[i] for row in rows if row[i]) for i in range(len(rows[0]))]


def test_the_release_table_has_an_estimated_cycles_column_at_200_columns(project: Path) -> None:
    text = _render(_results(project), 200)
    header = _header(text)
    assert header == [
        "target",
        "status",
        "time",
        "size",
        "ships",
        CYCLES_COLUMN,
        "wall time",
        "glibc",
        "runs on",
        "notes",
    ]
    assert "\n".join(text.splitlines()[1:3]).count(CYCLES_COLUMN) == 1  # on one line
    column = header.index(CYCLES_COLUMN)
    assert _column(text, column) == ["-31.8%", "-"]
    assert _column(text, column - 1) == ["pgo-bolt (-25.1% vs release)", "-"]


def test_the_release_table_folds_at_80_columns_without_cutting_a_figure(project: Path) -> None:
    """Ten columns in 80 would cut every figure to "-31.…": the target, its status and the
    estimated cycles keep columns, the rest folds into one."""
    text = _render(_results(project), 80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert _header(text) == ["target", "status", CYCLES_COLUMN, "details"]
    assert _column(text, 0, sep="") == [
        "demo-1.0-linux-x86_64-cpu-v3",
        "demo-1.0-linux-aarch64-aarch64-generic",
    ]
    assert _column(text, 2) == ["-31.8%", "-"]
    measured, emulated = _column(text, 3)
    assert measured == (
        "ships pgo-bolt (-25.1% vs release); wall time 1.200x; time 0s; size 0.88 MB; "
        "glibc 2.34; runs on bookworm"
    )
    assert emulated == "wall time emulated; time 0s; size 0.90 MB"


@pytest.mark.parametrize("width", [80, 100, 140, 170, 200])
def test_no_width_cuts_a_word_of_the_release_table(project: Path, width: int) -> None:
    results = _results(project)
    split = "speed gate: pgo wins 2 of 3 workloads against cargo build"
    results[0].warnings = [split]
    text = _render(results, width)
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= width
    assert _column(text, 0, sep="")[0] == "demo-1.0-linux-x86_64-cpu-v3"
    assert "-31.8%" in _column(text, _header(text).index(CYCLES_COLUMN))
    last = _column(text, len(_header(text)) - 1)[0]
    assert split.replace(" ", "") in last.replace(" ", "")  # notes fold, whole


def test_release_cells_say_the_change_or_a_dash() -> None:
    assert release_column(None) == "-"
    assert release_column(0.113) == "-11.3%"
    assert release_column(-0.02) == "+2.0%"
    unmeasured = TargetResult.__new__(TargetResult)
    unmeasured.shipped_variant = None
    assert shipped_text(unmeasured) == "-"


def test_the_cache_geometry_is_one_valgrind_can_simulate() -> None:
    """Valgrind needs a power-of-two set count (size / (ways x line)) and line size."""
    sizes = {}
    for argument in callgrind.CACHE_GEOMETRY:
        name, values = argument.removeprefix("--").split("=")
        size, ways, line = map(int, values.split(","))
        sets, rest = divmod(size, ways * line)
        assert rest == 0 and sets & (sets - 1) == 0 and line & (line - 1) == 0, argument
        sizes[name] = (size, ways)
    assert sizes == {"I1": (32768, 8), "D1": (49152, 12), "LL": (1966080, 15)}


def test_another_cache_geometry_counts_and_builds_again(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Other simulated caches give other counts: no count or published artifact made with
    the old ones is reused."""
    options = make_options(project)
    plan = plan_for(options, "cpu")
    env = dict(plan.build.environment)
    count = step_keys.count_key(plan, binaries={"demo": "1" * 64}, workload=Run(()), container=env)
    action = serialize.action_key(plan, options)
    other = ("--I1=32768,8,64", "--D1=32768,8,64", "--LL=8388608,16,64")
    args = tuple(a for a in callgrind.CALLGRIND_ARGS if a not in callgrind.CACHE_GEOMETRY)
    monkeypatch.setattr(step_keys, "CALLGRIND_ARGS", (*args, *other))
    monkeypatch.setattr(serialize, "CALLGRIND_ARGS", (*args, *other))
    assert count != step_keys.count_key(
        plan, binaries={"demo": "1" * 64}, workload=Run(()), container=env
    )
    assert action != serialize.action_key(plan, options)


def test_a_release_shows_the_gate_s_figures_and_its_split_for_every_target(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through `orchestrator release`: the cycles column for the counted target, "-" for
    the emulated one, and the split among the target's warnings and in release.json."""
    import orchestrator.release.lock.reproduce as release_reproduce  # noqa: PLC0415
    import orchestrator.release.targets.target as release_target  # noqa: PLC0415
    from orchestrator.cli import app  # noqa: PLC0415
    from orchestrator.execute.build import BuildOutcome  # noqa: PLC0415

    from .test_cli_commands import configure, use_engine  # noqa: PLC0415

    gate = GateInfo(
        policy="best",
        min_gain=0.01,
        metric="m",
        workloads=3,
        shipped="pgo",
        gain_vs_baseline=0.113,
        gain_vs_release=0.083,
        per_workload=workload_rows(_counts(CYCLES), LABELS),
    )

    def build(options: Any, plan: Any, *_args: Any, **_kwargs: Any) -> BuildOutcome:
        folder = options.artifacts_dir / plan.release_dir / plan.artifact_dir
        folder.mkdir(parents=True, exist_ok=True)
        binary = folder / plan.binary
        binary.write_bytes(plan.artifact_dir.encode())
        counted = None if plan.flavor == "aarch64" else gate  # emulated: not counted
        facts = {"portability": None, "tests": None, "bolt": None, "cuda_runtime": None}
        facts["gpu_path"] = None
        return BuildOutcome(folder, binary, cast(Any, SimpleNamespace(gate=counted, **facts)))

    use_engine(monkeypatch, FakeEngine())
    monkeypatch.setattr(release_target, "run_build", build)
    monkeypatch.setattr(
        release_reproduce, "record_release", lambda *_a, **_k: project / "release.lock"
    )
    monkeypatch.setenv("COLUMNS", "200")
    config = configure(project)
    argv = ["release", "--json", "--flavors", "cpu,aarch64", "--bench-runs", "1", "-c", str(config)]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    targets = {t["artifact"]: t for t in json.loads(result.stdout)["targets"]}
    counted, emulated = (
        targets["demo-1.2.3-linux-x86_64-cpu"],
        targets["demo-1.2.3-linux-aarch64-cpu"],
    )
    assert counted["cycles_saved_vs_baseline"] == pytest.approx(0.113)
    assert counted["warnings"] == [f"speed gate: {gate_splits(gate)[0]}"]
    assert emulated["cycles_saved_vs_baseline"] is None and emulated["warnings"] == []
    table = result.stderr[result.stderr.index("release demo 1.2.3") :]
    column = _header(table).index(CYCLES_COLUMN)
    assert _column(table, column) == ["-11.3%", "-"]
    assert "warning: demo-1.2.3-linux-x86_64-cpu: speed gate: pgo wins 2 of 3" in result.stderr

"""bench: the statistics and reports (exact numbers), and `measure` through FakeEngine."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from orchestrator.errors import OrchestratorError, StepFailedError
from orchestrator.execute.verdict.bench import (
    BENCH_DIR,
    TIMER,
    BenchSetup,
    Sample,
    VariantStats,
    bench_cpu,
    measure,
    percentile,
    speedup_interval,
    summarise,
)
from orchestrator.execute.verdict.bench_report import hyperfine_json, markdown_table
from orchestrator.model.layout import BUILDER_UID
from orchestrator.runtime.engine import ContainerSpec
from tests.unit.fakes import FakeEngine, as_engine

TEMPLATE = VariantStats(
    name="baseline",
    times=(0.5,),
    max_rss_kb=2048,
    size=3_500_000,
    median=0.5,
    p95=0.75,
    mean=0.55,
    stddev=0.1,
    speedup=1.25,
    speedup_ci=(1.125, 1.375),
)


def stats(name: str, times: Sequence[float], **overrides: Any) -> VariantStats:
    return replace(TEMPLATE, name=name, times=tuple(times), **overrides)


# -- statistics ----------------------------------------------------------------------
def test_percentile_interpolates_linearly() -> None:
    assert percentile([4.0, 1.0, 3.0, 2.0], 0.5) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 0.95) == pytest.approx(4.8)
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 0.0) == 1.0
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 1.0) == 5.0
    assert percentile([7.0], 0.95) == 7.0
    with pytest.raises(ValueError, match="no values"):
        percentile([], 0.5)


def test_speedup_interval_is_exact_for_constant_runs() -> None:
    assert speedup_interval([2.0, 2.0, 2.0], [0.5, 0.5]) == (4.0, 4.0)


def test_speedup_interval_is_seeded_and_brackets_the_ratio() -> None:
    baseline = [1.0, 1.1, 0.9, 1.05, 0.95, 1.2, 1.0]
    variant = [0.5, 0.55, 0.45, 0.52, 0.48, 0.6, 0.5]
    low, high = speedup_interval(baseline, variant)
    assert speedup_interval(baseline, variant) == (low, high)  # repeatable
    assert speedup_interval(baseline, variant, seed=1) != (low, high)
    assert low < 2.0 < high
    assert low > 1.5 and high < 2.6


def _samples(times: Sequence[float], rss: int) -> list[Sample]:
    return [Sample(t, rss - i, t / 2, t / 10, 0) for i, t in enumerate(times)]


def test_summarise() -> None:
    samples = {
        "baseline": _samples([1.0, 2.0, 3.0], 100),
        "pgo": _samples([0.5, 1.0, 1.5], 90),
        "bolt": _samples([0.8], 80),
    }
    sizes = {"baseline": 10, "pgo": 9, "bolt": 8}
    baseline, pgo, bolt = summarise(samples, sizes)
    assert [s.name for s in (baseline, pgo, bolt)] == ["baseline", "pgo", "bolt"]
    assert (baseline.median, baseline.mean, baseline.stddev) == (2.0, 2.0, 1.0)
    assert baseline.p95 == pytest.approx(2.9)
    assert baseline.speedup == 1.0
    assert baseline.speedup_ci[0] <= 1.0 <= baseline.speedup_ci[1]
    assert (pgo.median, pgo.stddev, pgo.speedup) == (1.0, 0.5, 2.0)
    assert (pgo.max_rss_kb, pgo.size, pgo.times) == (90, 9, (0.5, 1.0, 1.5))
    assert (pgo.user_s, pgo.system_s) == pytest.approx((0.5, 0.1))
    assert (pgo.rss_kb, pgo.exit_codes) == ((90, 89, 88), (0, 0, 0))
    assert (bolt.stddev, bolt.speedup) == (0.0, 2.5)  # one run: no spread


def test_an_interval_holding_one_is_no_measurable_difference() -> None:
    assert stats("baseline", [0.5]).verdict == "baseline"
    assert stats("pgo", [0.5]).verdict == "faster"
    assert stats("pgo", [0.5], speedup=0.8, speedup_ci=(0.7, 0.9)).verdict == "slower"
    noise = stats("pgo", [0.5], speedup=0.96, speedup_ci=(0.91, 1.02))
    assert noise.verdict == "no measurable difference"
    assert noise.speedup_text() == "no measurable difference (0.910-1.020)"
    assert noise.as_dict()["verdict"] == "no measurable difference"


def test_markdown_table() -> None:
    table = markdown_table(
        [
            stats("baseline", [0.4], speedup=1.0, speedup_ci=(1.0, 1.0)),
            stats("pgo", [0.5]),
            stats("pgo", [0.5], speedup=0.99, speedup_ci=(0.95, 1.05)),
        ],
        "demo: --help",
    )
    assert table.splitlines() == [
        "### demo: --help",
        "",
        "| variant | median | p95 | speedup vs baseline (95% CI) | max RSS | size |",
        "|---|---:|---:|---:|---:|---:|",
        "| cargo build --release | 500.0 ms | 750.0 ms | 1.000x (1.000-1.000) "
        "| 2.0 MiB | 3.50 MB |",
        "| + PGO | 500.0 ms | 750.0 ms | 1.250x (1.125-1.375) | 2.0 MiB | 3.50 MB |",
        "| + PGO | 500.0 ms | 750.0 ms | no measurable difference (0.950-1.050) | 2.0 MiB "
        "| 3.50 MB |",
    ]


def test_hyperfine_json() -> None:
    measured = stats(
        "pgo",
        [0.5, 0.25, 0.75],
        user_s=0.4,
        system_s=0.05,
        rss_kb=(2048, 1024, 4096),
        exit_codes=(0, 0, 0),
    )
    report = hyperfine_json([measured], ["demo", "--help"])
    assert report == {
        "results": [
            {
                "command": "pgo: demo --help",
                "mean": 0.55,
                "stddev": 0.1,
                "median": 0.5,
                "min": 0.25,
                "max": 0.75,
                "user": 0.4,
                "system": 0.05,
                "times": [0.5, 0.25, 0.75],
                "exit_codes": [0, 0, 0],
                "memory_usage_byte": [2 << 20, 1 << 20, 4 << 20],
            }
        ]
    }


def test_as_dict_rounds_the_speedup() -> None:
    data = stats("pgo", [0.5], speedup=1.234567, speedup_ci=(1.11111, 1.99999)).as_dict()
    assert (data["label"], data["runs"]) == ("+ PGO", 1)
    assert (data["speedup_vs_baseline"], data["speedup_ci95"]) == (1.2346, [1.1111, 2.0])


def test_bench_cpu_is_the_last_one() -> None:
    assert bench_cpu(as_engine(FakeEngine(info={"NCPU": 8}))) == "7"
    assert bench_cpu(as_engine(FakeEngine(info={"Driver": "overlay2"}))) == "0"


# -- measure -------------------------------------------------------------------------
@pytest.fixture
def setup(tmp_path: Path) -> BenchSetup:
    variants = tmp_path / "variants"
    variants.mkdir()
    for name in ("baseline", "pgo"):
        (variants / name).write_bytes(b"\x7fELF " + name.encode())
    return BenchSetup(
        artifact=tmp_path / "demo-1.2.3-x86_64",
        variants_dir=variants,
        image="orchestrator/cpu:rustc-web-1.96-" + "0" * 16,
        sizes={"pgo": 9, "baseline": 10},
        output_dir=tmp_path / "bench",
    )


class Timer:
    """Answers the TIMER wrapper: per binary, a queue of (exit code, nanoseconds, kB); user
    and system seconds are a tenth and a hundredth of the wall time."""

    def __init__(self, answers: dict[str, list[tuple[int, int, int]]]) -> None:
        self.answers = answers

    def __call__(self, argv: Sequence[str]) -> tuple[int, list[str]]:
        assert list(argv[:4]) == ["sh", "-c", TIMER, "sh"]
        code, ns, kb = self.answers[argv[4]].pop(0)
        return 0, [f"{code} {ns} {kb} {ns / 1e10:.2f} {ns / 1e11:.2f}"]


def test_measure_interleaves_and_skips_the_warm_up(setup: BenchSetup) -> None:
    warm_up = (0, 9_000_000_000, 999_999)  # must count for neither time nor RSS
    timer = Timer(
        {
            f"{BENCH_DIR}/baseline": [warm_up, (0, 200_000_000, 1000), (0, 400_000_000, 1200)],
            f"{BENCH_DIR}/pgo": [warm_up, (0, 100_000_000, 900), (0, 200_000_000, 800)],
        }
    )
    fake = FakeEngine(responder=timer)
    fake.add_image(setup.image)
    progress: list[str] = []
    result = measure(
        as_engine(fake),
        setup,
        ["--help"],
        runs=2,
        warmup=1,
        cpu="3",
        progress=progress.append,
    )
    baseline, pgo = result
    assert (baseline.name, baseline.times, baseline.max_rss_kb) == ("baseline", (0.2, 0.4), 1200)
    assert (pgo.name, pgo.times, pgo.max_rss_kb, pgo.size) == ("pgo", (0.1, 0.2), 900, 9)
    assert pgo.speedup == pytest.approx(2.0)
    assert progress == ["round 1/3 (warm-up)", "round 2/3", "round 3/3"]

    (box,) = fake.containers
    assert box.spec == ContainerSpec(setup.image, cpuset="3", purpose="bench")
    assert box.removed
    assert [argv[4:] for argv in box.argvs] == [
        (f"{BENCH_DIR}/{name}", "--help") for _ in range(3) for name in ("baseline", "pgo")
    ]
    ((path, data),) = box.puts
    assert path == "/build"
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = tar.getmembers()
        assert [m.name for m in members] == ["bench/baseline", "bench/pgo"]
        assert {(m.mode, m.uid, m.gid) for m in members} == {(0o755, BUILDER_UID, BUILDER_UID)}
        extracted = tar.extractfile("bench/pgo")
        assert extracted is not None and extracted.read() == b"\x7fELF pgo"


def test_measure_fails_on_a_failing_run(setup: BenchSetup) -> None:
    timer = Timer({f"{BENCH_DIR}/baseline": [(1, 1000, 10)], f"{BENCH_DIR}/pgo": []})
    fake = FakeEngine(responder=timer)
    fake.add_image(setup.image)
    with pytest.raises(StepFailedError, match=f"{BENCH_DIR}/baseline failed"):
        measure(as_engine(fake), setup, [], runs=1, warmup=0, cpu="0", progress=lambda _line: None)
    assert fake.containers[0].removed  # removed on the way out


def test_measure_fails_on_garbled_timer_output(setup: BenchSetup) -> None:
    fake = FakeEngine(responder=lambda _argv: (0, ["sh: 1: date: not found"]))
    fake.add_image(setup.image)
    with pytest.raises(StepFailedError, match="date: not found"):
        measure(as_engine(fake), setup, [], runs=1, warmup=0, cpu="0", progress=lambda _line: None)


def test_measure_needs_the_build_image(setup: BenchSetup) -> None:
    fake = FakeEngine()
    with pytest.raises(OrchestratorError, match="is gone"):
        measure(as_engine(fake), setup, [], runs=1, warmup=0, cpu="0", progress=lambda _line: None)
    assert fake.containers == []

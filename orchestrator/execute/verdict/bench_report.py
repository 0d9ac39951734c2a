"""What `orchestrator bench` writes: bench.json, bench.md, bench.png / callgrind.png and
hyperfine.json, from the timed runs (execute/verdict/bench.py) and the counts
(execute/verdict/bench_counts.py). Both of those measure; this module only draws and writes.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from orchestrator.execute.verdict.bench import LABELS, NO_DIFFERENCE, BenchSetup, VariantStats
from orchestrator.model.documents.records import record_text
from orchestrator.model.documents.reports import BenchReport, BenchVariant, CountedVariant
from orchestrator.model.verdict.callgrind import FORMULA, Counts


def markdown_table(stats: Sequence[VariantStats], title: str) -> str:
    lines = [
        f"### {title}",
        "",
        "| variant | median | p95 | speedup vs baseline (95% CI) | max RSS | size |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for s in stats:
        lines.append(
            f"| {LABELS.get(s.name, s.name)} | {s.median * 1000:.1f} ms | {s.p95 * 1000:.1f} ms "
            f"| {s.speedup_text()} "
            f"| {s.max_rss_kb / 1024:.1f} MiB | {s.size / 1e6:.2f} MB |"
        )
    return "\n".join(lines) + "\n"


def hyperfine_json(stats: Sequence[VariantStats], command: Sequence[str]) -> dict[str, object]:
    """The same numbers in hyperfine's --export-json shape, for tools that read it."""
    return {
        "results": [
            {
                "command": f"{s.name}: {' '.join(command)}",
                "mean": s.mean,
                "stddev": s.stddev,
                "median": s.median,
                "min": min(s.times),
                "max": max(s.times),
                "user": s.user_s,
                "system": s.system_s,
                "times": list(s.times),
                "exit_codes": list(s.exit_codes),
                "memory_usage_byte": [kb * 1024 for kb in s.rss_kb],
            }
            for s in stats
        ]
    }


def bar_chart(stats: Sequence[VariantStats], title: str, path: Path) -> None:
    import matplotlib  # noqa: PLC0415 - heavy; only bench draws

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    names = [LABELS.get(s.name, s.name) for s in stats]
    medians = [s.median * 1000 for s in stats]
    upper = [(s.p95 - s.median) * 1000 for s in stats]
    figure, axes = plt.subplots(figsize=(8, 4), dpi=100)
    bars = axes.barh(
        names[::-1],
        medians[::-1],
        xerr=[[0.0] * len(stats), upper[::-1]],
        color="#4c72b0",
        capsize=3,
    )
    for bar, s in zip(bars, stats[::-1], strict=True):
        axes.text(
            s.p95 * 1000,  # right of the error bar
            bar.get_y() + bar.get_height() / 2,
            f"  {s.speedup:.2f}x" if s.verdict != NO_DIFFERENCE else "  no measurable difference",
            va="center",
        )
    axes.set_xlabel("median wall time, ms (error bar: p95)")
    axes.set_title(title)
    axes.margins(x=0.15)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def _millions(value: int) -> str:
    return f"{value / 1e6:,.2f} M"


def counts_markdown(counted: Sequence[CountedVariant], title: str) -> str:
    """Totals per variant, then estimated cycles per run: the deterministic tables."""
    lines = [
        f"### {title}: callgrind counts",
        "",
        f"Estimated cycles = {FORMULA}. Ratios are geometric means over the runs, against "
        "plain `cargo build --release`; the same binary and input give the same counts.",
        "",
        "| variant | instructions | L1 misses | LL misses | mispredicts | est. cycles "
        "| cycles vs baseline | size |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for variant in counted:
        total = sum(
            (
                Counts(r.instructions, r.l1_misses, r.ll_misses, r.branches, r.mispredicts)
                for r in variant.runs
            ),
            Counts(),
        )
        lines.append(
            f"| {variant.label} | {_millions(total.instructions)} | {total.l1_misses:,} "
            f"| {total.ll_misses:,} | {total.mispredicts:,} | {_millions(total.estimated_cycles)} "
            f"| {variant.cycles_vs_baseline:.3f}x | {variant.size_bytes / 1e6:.2f} MB |"
        )
    header = " | ".join(v.label for v in counted)
    lines += ["", f"| run | {header} |", "|---|" + "---:|" * len(counted)]
    for index, run in enumerate(counted[0].runs if counted else []):
        cells = " | ".join(_millions(v.runs[index].estimated_cycles) for v in counted)
        lines.append(f"| {run.label}: `{' '.join(run.command)}` | {cells} |")
    return "\n".join(lines) + "\n"


def counts_chart(counted: Sequence[CountedVariant], title: str, path: Path) -> None:
    import matplotlib  # noqa: PLC0415 - heavy; only bench draws

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    names = [v.label for v in counted][::-1]
    ratios = [v.cycles_vs_baseline for v in counted][::-1]
    figure, axes = plt.subplots(figsize=(8, 4), dpi=100)
    bars = axes.barh(names, ratios, color="#55a868")
    for bar, ratio in zip(bars, ratios, strict=True):
        axes.text(ratio, bar.get_y() + bar.get_height() / 2, f"  {ratio:.3f}x", va="center")
    axes.axvline(1.0, color="#444444", linewidth=0.8)
    axes.set_xlabel("estimated cycles vs cargo build --release (geometric mean; lower is better)")
    axes.set_title(f"{title} (callgrind)")
    axes.margins(x=0.15)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def write_report(
    setup: BenchSetup,
    stats: Sequence[VariantStats],
    command: Sequence[str],
    *,
    cpu: str,
    runs: int,
    warmup: int,
    counted: Sequence[CountedVariant] = (),
) -> Path:
    """bench.json and bench.md; bench.png and hyperfine.json for wall time, callgrind.png
    for the counts; written atomically (a folder renamed into place)."""
    title = f"{setup.artifact.name}: {' '.join(command)}"
    setup.output_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=setup.output_dir.parent, prefix=".bench-") as tmp:
        staging = Path(tmp) / "report"
        staging.mkdir()
        report = BenchReport(  # bench.json, and what `bench --json` prints
            artifact=setup.artifact.name,
            image=setup.image,
            command=list(command),
            cpu=cpu,
            runs=runs if stats else 0,
            warmup=warmup if stats else 0,
            order="interleaved",
            variants=[BenchVariant.model_validate(s.as_dict()) for s in stats],
            metric="all" if stats and counted else ("callgrind" if counted else "wall"),
            counts=list(counted),
            counts_formula=FORMULA if counted else None,
        )
        (staging / "bench.json").write_text(record_text(report))
        tables = [markdown_table(stats, title)] if stats else []
        if counted:
            tables.append(counts_markdown(counted, title))
            counts_chart(counted, title, staging / "callgrind.png")
        (staging / "bench.md").write_text("\n".join(tables))
        if stats:
            (staging / "hyperfine.json").write_text(
                json.dumps(hyperfine_json(stats, command), indent=2) + "\n"
            )
            bar_chart(stats, title, staging / "bench.png")
        if setup.output_dir.exists():
            shutil.rmtree(setup.output_dir)
        staging.replace(setup.output_dir)
    return setup.output_dir

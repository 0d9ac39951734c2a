"""`orchestrator bench`: the optimization levels of one published build, side by side."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from orchestrator.cli.app import (
    ArtifactsOption,
    BenchFlavorOption,
    BenchTargetCpuOption,
    CacheOption,
    ConfigOption,
    app,
    resolve_options,
    setting_option,
    sign_release_index,
    signer_for,
)
from orchestrator.cli.output import emit_json, json_option, text_console
from orchestrator.errors import ConfigError

if TYPE_CHECKING:
    from orchestrator.execute.verdict.bench import VariantStats
    from orchestrator.model.documents.reports import CountedVariant


class Metric(StrEnum):
    WALL = "wall"
    CALLGRIND = "callgrind"
    ALL = "all"


@app.command()
def bench(
    flavor: BenchFlavorOption = "cpu",
    config: ConfigOption = None,
    target_cpu: BenchTargetCpuOption = None,
    artifacts_dir: ArtifactsOption = None,
    cache_dir: CacheOption = None,
    runs: Annotated[int | None, setting_option("bench.runs", min=2)] = None,
    warmup: Annotated[int | None, setting_option("bench.warmup", min=0)] = None,
    metric: Annotated[
        Metric,
        typer.Option(
            "--metric",
            metavar="METRIC",
            help="wall: timed runs (noisy on shared machines); callgrind: instruction, cache "
            "and branch counts of the bench command and of each workload the speed gate "
            "counts ([gate] workloads, else [train] workloads), the same on every run (~50x "
            "slower than one run); all: both",
        ),
    ] = Metric.WALL,
    json_output: Annotated[bool, json_option("orchestrator/bench")] = False,
) -> None:
    """Benchmark a built flavor: plain cargo, release profile, +PGO, +PGO+BOLT, side by side.

    Wall-time runs are interleaved (A B C D A B C D ...) in one container of the build's
    image pinned to one CPU. `--metric callgrind` counts instructions, simulated cache
    misses and branch mispredictions instead: repeatable, so a 1% difference shows. Writes
    bench.json, bench.md, bench.png / callgrind.png and hyperfine.json under
    artifacts/<release>/bench/<artifact>/.

    \b
    Examples:
      orchestrator build && orchestrator bench --runs 20
      orchestrator bench --metric callgrind
      orchestrator bench --flavor cuda --target-cpu x86-64-v3 --warmup 5
    """
    from orchestrator.execute.verdict.bench import bench_cpu, locate, measure
    from orchestrator.execute.verdict.bench_counts import count_jobs, count_variants
    from orchestrator.execute.verdict.bench_report import write_report
    from orchestrator.model.documents.records import read_record
    from orchestrator.model.documents.reports import BenchReport
    from orchestrator.plan.runs import run_plan
    from orchestrator.runtime.engine import Engine
    from orchestrator.supply.chain import check_signing_key

    out = text_console(json_output)

    options = resolve_options(
        config,
        {
            "build.target_cpu": target_cpu,
            "build.artifacts_dir": artifacts_dir,
            "build.cache_dir": cache_dir,
            "bench.runs": runs,
            "bench.warmup": warmup,
        },
    ).for_flavor(flavor)  # its own [flavors.<name>.bench] and gate workloads
    if not options.bench_command:
        raise ConfigError(
            "bench.command is empty: nothing to benchmark",
            hint='Set [bench] command = ["bench"] (arguments for the binary).',
        )
    setup = locate(options, flavor)
    signer = signer_for(options)  # the report is signed into the release: the key first
    check_signing_key(setup.artifact.parent, signer.key.public)
    engine = Engine.connect()
    cpu = bench_cpu(engine)
    stats = []
    if metric != Metric.CALLGRIND:
        out.print(
            f"benchmarking {setup.artifact.name}: `{' '.join(options.bench_command)}`, "
            f"{options.bench_runs} runs after {options.bench_warmup} warm-up, CPU {cpu}"
        )
        stats = measure(
            engine,
            setup,
            options.bench_command,
            runs=options.bench_runs,
            warmup=options.bench_warmup,
            cpu=cpu,
            progress=out.print,
        )
    counted = []
    if metric != Metric.WALL:
        workloads = options.gate_workloads or options.workloads  # what the gate counts
        stdin = run_plan(options.run_env, options.run_stdin).stdin
        job = count_jobs(options.bench_command, workloads, stdin)
        out.print(
            f"counting {setup.artifact.name} under callgrind: {len(job.commands)} commands "
            f"per variant, CPU {cpu}"
        )
        counted = count_variants(engine, setup, job, cpu=cpu, progress=out.print)
    output = write_report(
        setup,
        stats,
        options.bench_command,
        cpu=cpu,
        runs=options.bench_runs,
        warmup=options.bench_warmup,
        counted=counted,
    )
    if stats:
        out.print(_wall_table(setup.artifact.name, options.bench_command, stats))
    if counted:
        out.print(_counts_table(setup.artifact.name, counted))
    out.print(f"report: {output}")
    # The report lies in the release folder: the signed index must list it, or `verify`
    # would rightly call it a file nobody signed.
    release_dir = setup.artifact.parent
    sign_release_index(release_dir, signer, vouched=(output.relative_to(release_dir).as_posix(),))
    out.print(f"re-signed the release index of {setup.artifact.parent.name} to cover it")
    if json_output:  # bench.json as written, read back through its record
        emit_json(read_record(output / "bench.json", BenchReport))


def _wall_table(name: str, command: Sequence[str], stats: Sequence[VariantStats]) -> Table:
    table = Table(
        "variant",
        "median",
        "p95",
        "speedup (95% CI)",
        "max RSS",
        "size",
        title=f"{name}: {' '.join(command)}",
    )
    for s in stats:
        table.add_row(
            s.name,
            f"{s.median * 1000:.1f} ms",
            f"{s.p95 * 1000:.1f} ms",
            s.speedup_text(),
            f"{s.max_rss_kb / 1024:.1f} MiB",
            f"{s.size / 1e6:.2f} MB",
        )
    return table


def _counts_table(name: str, counted: Sequence[CountedVariant]) -> Table:
    table = Table(
        "variant",
        "instructions",
        "est. cycles",
        "cycles vs baseline",
        "size",
        title=f"{name}: callgrind counts over {len(counted[0].runs)} commands (repeatable)",
    )
    for variant in counted:
        table.add_row(
            variant.name,
            f"{sum(r.instructions for r in variant.runs) / 1e6:,.1f} M",
            f"{sum(r.estimated_cycles for r in variant.runs) / 1e6:,.1f} M",
            f"{variant.cycles_vs_baseline:.3f}x",
            f"{variant.size_bytes / 1e6:.2f} MB",
        )
    return table

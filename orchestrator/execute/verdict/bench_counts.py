"""`orchestrator bench --metric callgrind`: every variant's bench command and the workloads
the speed gate counts, under callgrind, in one container of the build's image.

The counts are repeatable (model/verdict/callgrind.py): the same binary and input give the same
numbers on a second run, so a 1% difference is a real one. Each variant is compared with
the baseline by the geometric mean over the runs of its estimated cycles ratio.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from orchestrator.config.declarations.kinds import Run
from orchestrator.errors import StepFailedError
from orchestrator.execute.verdict.bench import (
    BENCH_DIR,
    LABELS,
    BenchSetup,
    bench_box,
    kept_variants,
)
from orchestrator.model.documents.reports import CountedRun, CountedVariant
from orchestrator.model.layout import PATHS
from orchestrator.model.verdict.callgrind import Counts, cycles_ratio, parse_totals
from orchestrator.plan.gate import callgrind_argv
from orchestrator.runtime.engine import Engine

COUNT_DIR = "/build/counts"


@dataclass(frozen=True)
class CountJob:
    """What is counted: (label, arguments) for the main binary, and stdin for workloads."""

    commands: tuple[tuple[str, tuple[str, ...]], ...]
    stdin: str = ""  # a file in the container the training workloads read, "" for none


def count_jobs(bench_command: Sequence[str], workloads: Sequence[Run], stdin: str) -> CountJob:
    """The bench command, then every workload that runs the main binary (the variants kept
    for bench are the main binary's only)."""
    commands = [("bench", tuple(bench_command))] if bench_command else []
    commands += [
        (f"workload {index}", workload.args)
        for index, workload in enumerate(workloads)
        if not workload.binary
    ]
    return CountJob(tuple(commands), stdin)


def count_variants(
    engine: Engine,
    setup: BenchSetup,
    job: CountJob,
    *,
    cpu: str,
    progress: Callable[[str], None],
) -> list[CountedVariant]:
    """Count every kept variant on every command; the baseline first."""
    names = kept_variants(setup)
    counted: dict[str, list[Counts]] = {name: [] for name in names}
    with bench_box(engine, setup, cpu) as box:
        for index, (label, args) in enumerate(job.commands):
            stdin = job.stdin if label != "bench" else ""
            for name in names:
                lines: list[str] = []
                argv = callgrind_argv(
                    f"{COUNT_DIR}/{name}-{index}", stdin, [f"{BENCH_DIR}/{name}", *args]
                )
                code = box.exec(
                    argv, on_output=lines.append, environment=setup.environment, workdir=PATHS.src
                )
                if code != 0:
                    raise StepFailedError(
                        f"callgrind run of {name} on `{' '.join(args)}` failed: "
                        + " ".join(lines)[-300:]
                    )
                counted[name].append(parse_totals(lines))
            progress(f"counted {label}: `{' '.join(args)}` ({index + 1}/{len(job.commands)})")
    baseline = counted[names[0]]
    return [
        CountedVariant(
            name=name,
            label=LABELS.get(name, name),
            size_bytes=setup.sizes[name],
            cycles_vs_baseline=round(cycles_ratio(runs, baseline), 5),
            instructions_vs_baseline=round(
                cycles_ratio(
                    [Counts(r.instructions) for r in runs],
                    [Counts(b.instructions) for b in baseline],
                ),
                5,
            ),
            runs=[
                CountedRun(command=list(args), label=label, **counts.as_dict())
                for (label, args), counts in zip(job.commands, runs, strict=True)
            ],
        )
        for name, runs in counted.items()
    ]

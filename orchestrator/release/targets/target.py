"""One target of a release: what it is (flavor, CPU level, options), how its build went
(`TargetResult`, what release.json says of it), building it on one engine and the quick
speed figure measured right after."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from rich.console import Console

from orchestrator.config.resolve.options import Options
from orchestrator.errors import ConfigError, OrchestratorError
from orchestrator.execute.build import run_build
from orchestrator.execute.verdict.bench import (
    NO_DIFFERENCE,
    VariantStats,
    bench_cpu,
    locate,
    measure,
)
from orchestrator.flavors import FlavorView, get_flavor
from orchestrator.host.step_times import earlier_step_seconds
from orchestrator.model.documents.records import BuildManifest
from orchestrator.model.documents.release_summary import TargetSummary, bolt_summary
from orchestrator.model.documents.run_logs import read_build_run
from orchestrator.model.hashing import sha256_file
from orchestrator.model.verdict.gate_table import gate_splits
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.progress.reporter import LiveLine, Reporter, marks_for
from orchestrator.runtime.engine import Engine
from orchestrator.supply.attest import Signer


@dataclass(frozen=True)
class Target:
    flavor: str
    level: str
    options: Options

    @property
    def rust_target(self) -> str:
        return get_flavor(self.flavor).rust_target


@dataclass
class TargetResult:
    target: Target
    artifact: str
    status: Literal["planned", "ok", "cached", "failed"] = "planned"
    seconds: float = 0.0
    size: int = 0
    sha256: str = ""
    speedup: float | None = None
    speedup_note: str = ""  # why there is no speedup figure
    glibc: str | None = None  # the newest glibc symbol version the binary needs
    oldest_distribution: str | None = None  # the oldest Debian release it ran on
    shipped_variant: str | None = None  # what the speed gate shipped
    cycles_saved_vs_baseline: float | None = None  # callgrind's estimated cycles
    cycles_saved_vs_release: float | None = None
    bolt: str | None = None  # BOLT's mode and coverage, or why not
    cuda_runtime: str | None = None  # the CUDA release its driver must serve (cudarc)
    gpu_path: str | None = None  # GPU flavors: whether the GPU path ran on a GPU
    engine: str | None = None  # the Docker context of the engine that built it
    moves: list[str] = field(default_factory=list)  # engines it left: "ctx: why"
    error: str = ""  # the first line of the error's message
    folder: Path | None = None  # where its build put the artifact folder
    warnings: list[str] = field(default_factory=list)
    exception: OrchestratorError | None = field(default=None, repr=False, compare=False)

    def summary(self) -> TargetSummary:
        return TargetSummary(
            flavor=self.target.flavor,
            level=self.target.level,
            artifact=self.artifact,
            status=self.status,
            seconds=round(self.seconds, 1),
            size=self.size,
            sha256=self.sha256 or None,
            speedup_vs_baseline=self.speedup,
            error=self.error or None,
            error_class=type(self.exception).__name__ if self.exception else None,
            exit_code=self.exception.exit_code if self.exception else None,
            warnings=list(self.warnings),
            rust_target=self.target.rust_target,
            speedup_note=self.speedup_note or None,
            glibc=self.glibc,
            oldest_distribution=self.oldest_distribution,
            shipped_variant=self.shipped_variant,
            cycles_saved_vs_baseline=self.cycles_saved_vs_baseline,
            cycles_saved_vs_release=self.cycles_saved_vs_release,
            bolt=self.bolt,
            cuda_runtime=self.cuda_runtime,
            gpu_path=self.gpu_path,
            engine=self.engine,
            moved_from=list(self.moves),
        )

    @classmethod
    def from_summary(cls, target: Target, entry: TargetSummary) -> TargetResult:
        """A result as a target folder's record describes its build (`release assemble`)."""
        return cls(
            target,
            entry.artifact,
            status=entry.status,
            seconds=entry.seconds,
            size=entry.size,
            sha256=entry.sha256 or "",
            speedup=entry.speedup_vs_baseline,
            speedup_note=entry.speedup_note or "",
            glibc=entry.glibc,
            oldest_distribution=entry.oldest_distribution,
            shipped_variant=entry.shipped_variant,
            cycles_saved_vs_baseline=entry.cycles_saved_vs_baseline,
            cycles_saved_vs_release=entry.cycles_saved_vs_release,
            bolt=entry.bolt,
            cuda_runtime=entry.cuda_runtime,
            gpu_path=entry.gpu_path,
            engine=entry.engine,
            moves=list(entry.moved_from),
            warnings=list(entry.warnings),
        )

    def take_build_facts(self, manifest: BuildManifest) -> None:
        """What the published build.json says: glibc, oldest distro, the gate's choice, BOLT."""
        if manifest.portability is not None:
            self.glibc = manifest.portability.glibc_max
            self.oldest_distribution = manifest.portability.oldest_distribution
        gate = manifest.gate
        if gate is not None and gate.shipped:
            self.shipped_variant = gate.shipped
            self.cycles_saved_vs_baseline = gate.gain_vs_baseline
            self.cycles_saved_vs_release = gate.gain_vs_release
        self.bolt = bolt_summary(manifest)
        if manifest.cuda_runtime is not None and manifest.cuda_runtime.binding == "run time":
            self.cuda_runtime = manifest.cuda_runtime.cuda_api
        self.gpu_path = manifest.gpu_path  # a build.json from before logs/run.json held it

    def as_dict(self) -> dict[str, object]:
        return self.summary().dump()


def targets(options: Options, flavors: Sequence[str]) -> list[Target]:
    found = []
    view = FlavorView.from_options(options)
    for name in flavors:
        flavor = get_flavor(name)
        for level in flavor.levels(view):
            if level == "native":
                raise ConfigError(
                    f"flavor {name}: target-cpu 'native' is refused for releases: the binary "
                    "would only run on CPUs like this build machine's",
                    hint="Use x86-64-v2/v3/v4 or a named CPU; `orchestrator build "
                    "--target-cpu native` is fine for local use.",
                )
            flavored = options.for_flavor(name)  # its own train/validate/bench/gate/test
            found.append(Target(name, level, replace(flavored, target_cpu=level)))
    return found


def build_target(
    result: TargetResult,
    plan: BuildPlan,
    engine: Engine,
    console: Console,
    signer: Signer | None,
    *,
    retrain: bool,
    bench_runs: int,
    prefix: str = "",
    live: LiveLine | None = None,
    force: bool = False,
    unsigned_out: Path | None = None,
    cargo_jobs: int | None = None,
) -> str | None:
    """Build one target on `engine` and fill `result`; the failure line to announce when
    it failed (result.exception holds the error), None when it was built. Without a
    `signer`, the target folder goes unsigned into `unsigned_out` (`build --target`)."""
    target = result.target
    started = time.monotonic()
    reporter = Reporter(
        console,
        target.options.cache_dir / "runs" / engine.session / plan.artifact_dir,
        prefix=prefix,
        live=live,
        plan_steps=[step.name for step in plan.steps],
        estimates=earlier_step_seconds(target.options.artifacts_dir, target.flavor),
    )
    try:
        outcome = run_build(
            target.options,
            plan,
            engine,
            reporter,
            signer=signer,
            retrain=retrain,
            step_cache="refresh" if force else "use",
            unsigned_out=unsigned_out,
            cargo_jobs=cargo_jobs,
        )
    except OrchestratorError as error:
        result.status, result.exception = "failed", error
        result.error = (error.message.splitlines() or [""])[0]
        return (
            f"{marks_for(console).failed} {plan.artifact_dir} failed: {type(error).__name__} "
            f"(exit {error.exit_code}): {result.error} (logs: {reporter.log_dir})"
        )
    finally:
        result.seconds += time.monotonic() - started
    result.status, result.engine = "ok", engine.name
    result.folder = outcome.artifact
    result.size = outcome.binary.stat().st_size
    result.sha256 = sha256_file(outcome.binary)
    result.take_build_facts(outcome.manifest)
    run = read_build_run(outcome.artifact)
    if run is not None and run.gpu_path is not None:  # the builder's hardware: not signed
        result.gpu_path = run.gpu_path
    # A loss on one workload that the gate's mean hides
    result.warnings += [f"speed gate: {line}" for line in gate_splits(outcome.manifest.gate)]
    tests = outcome.manifest.tests or {}
    if tests.get("ran") is False:
        result.warnings.append(f"cargo test not run: {tests.get('reason')}")
    result.speedup_note = no_speedup_reason(target, bench_runs)
    return None


def measure_speedup(
    result: TargetResult,
    engine: Engine,
    runs: int,
    announce: Callable[[str], None],
    warning_mark: str,
) -> None:
    """The quick bench of a built target: a ratio where it is measurable, else why not.
    A failed bench is a warning: the binary is built and published, and stays."""
    try:
        shipped = _quick_bench(result.target, engine, runs)
    except OrchestratorError as error:
        reason = (error.message.splitlines() or [""])[0]
        result.warnings.append(f"bench failed ({type(error).__name__}): {reason}")
        result.speedup_note = "bench failed (see warnings)"
        announce(f"{warning_mark} {result.artifact}: bench failed, no speedup: {reason}")
        return
    if shipped.verdict == NO_DIFFERENCE:  # its interval holds 1.0: a ratio would be noise
        result.speedup_note = f"{shipped.speedup_text()}, {runs} runs"
    else:
        result.speedup = round(shipped.speedup, 3)


def no_speedup_reason(target: Target, bench_runs: int) -> str:
    """Why a built target gets no speed figure; "" when it gets one."""
    runner = get_flavor(target.flavor).runner
    if runner:  # timing an emulator says nothing about the binary
        return f"n/a: emulated ({Path(runner[0]).name})"
    if bench_runs == 0:
        return "skipped: --bench-runs 0"
    if not target.options.bench_command:
        return "skipped: no bench.command"
    return ""


def _quick_bench(target: Target, engine: Engine, runs: int) -> VariantStats:
    """The shipped binary against plain `cargo build --release`, interleaved, same run."""
    options = target.options
    setup = locate(options, target.flavor)
    cpu = bench_cpu(engine)
    stats = measure(
        engine, setup, options.bench_command, runs=runs, warmup=1, cpu=cpu, progress=lambda _: None
    )
    return stats[-1]

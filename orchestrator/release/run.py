"""`orchestrator release`: every flavor and level of the config, one after another.

A failed target does not stop the others; the summary and release.json show all of them,
each failed one with its error's class and exit code, and the exit code says whether all
succeeded (49 when any failed, whatever their errors). A failed quick bench is only a
warning on its target.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from rich.console import Console

from orchestrator.config.options import Options
from orchestrator.errors import ConfigError, OrchestratorError
from orchestrator.execute.bench import bench_cpu, locate, measure
from orchestrator.execute.build import prepare_plan, run_build
from orchestrator.flavors import get_flavor
from orchestrator.model.hashing import sha256_file
from orchestrator.model.layout import release_dir_name
from orchestrator.model.portability import version_tuple
from orchestrator.model.records import ReleaseSummary, TargetSummary, read_record, write_record
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.progress import Reporter
from orchestrator.runtime.engine import Engine
from orchestrator.supply.attest import Signer, update_release_index

RELEASE_JSON = "release.json"


class ReleaseIncompleteError(OrchestratorError):
    exit_code = 49
    default_hint = "The summary above says which targets failed and why; their logs are kept."


@dataclass(frozen=True)
class Target:
    flavor: str
    level: str
    options: Options


@dataclass
class TargetResult:
    target: Target
    artifact: str
    status: Literal["planned", "ok", "failed"] = "planned"
    seconds: float = 0.0
    size: int = 0
    sha256: str = ""
    speedup: float | None = None
    error: str = ""  # the first line of the error's message
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
        )

    def as_dict(self) -> dict[str, object]:
        return self.summary().dump()


def targets(options: Options, flavors: Sequence[str]) -> list[Target]:
    found = []
    for name in flavors:
        flavor = get_flavor(name)
        for level in flavor.levels(options):
            if level == "native":
                raise ConfigError(
                    f"flavor {name}: target-cpu 'native' is refused for releases: the binary "
                    "would only run on CPUs like this build machine's",
                    hint="Use x86-64-v2/v3/v4 or a named CPU; `orchestrator build "
                    "--target-cpu native` is fine for local use.",
                )
            found.append(Target(name, level, replace(options, target_cpu=level)))
    return found


@dataclass(frozen=True)
class PlannedTarget:
    target: Target
    plan: BuildPlan
    cached: dict[str, bool]


def dry_run(
    options: Options, chosen: Sequence[Target], engine: Engine | None
) -> list[PlannedTarget]:
    """The plan per target and what the caches already hold; builds nothing."""
    planned = []
    for target in chosen:
        plan = prepare_plan(target.options, target.flavor)
        cache = options.cache_dir
        cached = {
            "base image": engine is not None
            and engine.image(plan.base_image.reference) is not None,
            "toolchain image": engine is not None
            and engine.image(plan.image.reference) is not None,
            "crates": (cache / "crates" / f"{plan.source.cargo_lock_sha256}.tar").is_file(),
            "pgo profile": plan.pgo is not None
            and (cache / "profiles" / "pgo" / f"{plan.pgo.profile_key}.profdata").is_file(),
        }
        planned.append(PlannedTarget(target, plan, cached))
    return planned


def run_release(
    options: Options,
    chosen: Sequence[Target],
    engine: Engine,
    console: Console,
    signer: Signer,
    *,
    retrain: bool,
    bench_runs: int,
    announce: Callable[[str], None],
) -> list[TargetResult]:
    results = []
    release_dir = options.artifacts_dir / release_dir_name(options.binary, options.version)
    for index, target in enumerate(chosen, start=1):
        started = time.monotonic()
        plan = prepare_plan(target.options, target.flavor)
        result = TargetResult(target, plan.artifact_dir)
        results.append(result)
        announce(f"[{index}/{len(chosen)}] {plan.artifact_dir} (target-cpu {target.level})")
        reporter = Reporter(
            console, options.cache_dir / "runs" / engine.session / plan.artifact_dir
        )
        try:
            outcome = run_build(
                target.options, plan, engine, reporter, signer=signer, retrain=retrain
            )
        except OrchestratorError as error:
            result.status, result.exception = "failed", error
            result.error = (error.message.splitlines() or [""])[0]
            announce(
                f"✗ {plan.artifact_dir} failed: {type(error).__name__} (exit "
                f"{error.exit_code}): {result.error} (logs: {reporter.log_dir})"
            )
            continue
        finally:
            result.seconds = time.monotonic() - started
        result.status = "ok"
        result.size = outcome.binary.stat().st_size
        result.sha256 = sha256_file(outcome.binary)
        portability = outcome.manifest.portability
        if portability is not None:
            glibc = portability.glibc_max
            if glibc and version_tuple(glibc) > version_tuple(options.glibc_floor):
                result.warnings.append(
                    f"needs glibc {glibc}, newer than the floor {options.glibc_floor}"
                )
        if bench_runs > 0 and not get_flavor(target.flavor).runner:  # no timing of emulators
            try:
                result.speedup = _quick_speedup(target, engine, bench_runs)
            except OrchestratorError as error:  # the binary is built and published: keep it
                reason = (error.message.splitlines() or [""])[0]
                result.warnings.append(f"bench failed ({type(error).__name__}): {reason}")
                announce(f"! {plan.artifact_dir}: bench failed, no speedup: {reason}")
    write_release_json(release_dir, options, results)
    if release_dir.is_dir():
        update_release_index(release_dir, signer)
    return results


def _quick_speedup(target: Target, engine: Engine, runs: int) -> float | None:
    """Median speedup of the shipped binary over plain `cargo build --release`, same run."""
    options = target.options
    if not options.bench_command:
        return None
    setup = locate(options, target.flavor)
    cpu = bench_cpu(engine)
    stats = measure(
        engine, setup, options.bench_command, runs=runs, warmup=1, cpu=cpu, progress=lambda _: None
    )
    return round(stats[-1].speedup, 3)


def write_release_json(
    release_dir: Path, options: Options, results: Sequence[TargetResult]
) -> None:
    """release.json: every target of this run, merged with artifacts published earlier."""
    path = release_dir / RELEASE_JSON
    previous: dict[str, TargetSummary] = {}
    if path.is_file():
        for entry in read_record(path, ReleaseSummary).artifacts:
            previous[entry.artifact] = entry
    for result in results:
        previous[result.artifact] = result.summary()
    summary = ReleaseSummary(
        name=options.binary,
        version=options.version,
        artifacts=[previous[name] for name in sorted(previous)],
    )
    write_record(path, summary)

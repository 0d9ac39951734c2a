"""release.json: every target of a release and how its last build went."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import ClassVar, Literal

from pydantic import Field

from orchestrator.model.records import BuildManifest, JsonDict, Record


class TargetSummary(Record):
    flavor: str
    level: str
    artifact: str
    status: Literal["planned", "ok", "cached", "failed"] = Field(
        description="cached: the published artifact was current (its inputs unchanged), "
        "so it was not built again"
    )
    seconds: float
    size: int
    sha256: str | None
    speedup_vs_baseline: float | None
    error: str | None
    error_class: str | None = None
    exit_code: int | None = None
    warnings: list[str]
    # Added within version 2, so a file written before them still reads (as null).
    rust_target: str | None = Field(
        None, description="target triple, e.g. x86_64-unknown-linux-gnu"
    )
    speedup_note: str | None = Field(
        None, description="why speedup_vs_baseline is null (emulated, skipped, failed)"
    )
    glibc: str | None = Field(None, description="the newest glibc symbol version it needs")
    oldest_distribution: str | None = Field(
        None, description="the oldest Debian release it loaded and validated on"
    )
    shipped_variant: str | None = Field(
        None, description="what the speed gate shipped: release, pgo, pgo-bolt (null: unmeasured)"
    )
    cycles_saved_vs_baseline: float | None = Field(
        None, description="share of callgrind's estimated cycles saved vs cargo build --release"
    )
    cycles_saved_vs_release: float | None = Field(
        None, description="the same against the release profile alone"
    )
    bolt: str | None = Field(None, description="BOLT's mode and profile coverage, or why not")
    cuda_runtime: str | None = Field(
        None, description="the CUDA release the driver must serve where it runs (cudarc's feature)"
    )
    engine: str | None = Field(
        None, description="the Docker context of the engine that built it (null: cached)"
    )
    gpu_path: str | None = Field(
        None,
        description="GPU flavors: 'exercised on <device>, driver <version>' or 'not "
        "exercised: <why>' (build.json's gpu_path; null: no GPU flavor)",
    )
    moved_from: list[str] = Field(
        default_factory=list,
        description="engines that stopped answering while building it: 'context: why'",
    )


class EngineJobs(Record):
    """How many targets one engine built at a time, and why (release/engine_jobs.py)."""

    engine: str = Field(description="its Docker context (current: DOCKER_HOST or the default)")
    cores: int = Field(description="NCPU as the engine reports it (0: not reported)")
    memory_gib: float = Field(description="MemTotal as the engine reports it, in GiB")
    jobs: int = Field(description="targets it builds at a time")
    cargo_jobs: int | None = Field(
        description="CARGO_BUILD_JOBS each of its builds gets (null: cargo's own default)"
    )
    reason: str = Field(description="the rule that chose `jobs`: engines.jobs or auto's")
    # Added within version 2 (an older file reads as off, no reason).
    prefetch: bool = Field(
        False,
        description="whether the next target's images are made while one compiles "
        "(engines.prefetch; one target at a time only)",
    )
    prefetch_reason: str = Field("", description="why prefetch is on or off")

    def describe(self) -> str:
        """'2 cores, 23 GiB: 1 target at a time, cargo -j2 (auto: ...)'."""
        size = f"{self.cores} cores, {self.memory_gib:.0f} GiB" if self.cores else "size unknown"
        plural = "target" if self.jobs == 1 else "targets"
        cargo = f", cargo -j{self.cargo_jobs}" if self.cargo_jobs else ""
        ahead = "; the next target's images made while one compiles" if self.prefetch else ""
        return f"{size}: {self.jobs} {plural} at a time{cargo} ({self.reason}){ahead}"


def _release_v1_to_v2(document: JsonDict) -> JsonDict:
    """v1 spelled its version inside `schema` ("orchestrator/release@1")."""
    return {**document, "schema": "orchestrator/release", "schema_version": 2}


class ReleaseSummary(Record):
    """release.json: every target of the release and how its last build went, in the
    order they were built."""

    SCHEMA = "orchestrator/release"
    VERSION = 2
    MIGRATIONS: ClassVar[Mapping[int, Callable[[JsonDict], JsonDict]]] = {1: _release_v1_to_v2}

    schema_: Literal["orchestrator/release"] = Field("orchestrator/release", alias="schema")
    schema_version: Literal[2] = 2
    name: str
    version: str
    artifacts: list[TargetSummary]
    # Added within version 2 (an older file reads as []); `release assemble` has no engines.
    jobs_per_engine: list[EngineJobs] = Field(
        default_factory=list,
        description="the engines this run built on, each with how many targets at a time and why",
    )


def bolt_summary(manifest: BuildManifest) -> str | None:
    """'instrument, 42/619 functions profiled, not shipped' and the like; None without BOLT."""
    bolt = manifest.bolt
    if bolt is None:
        return None
    if not bolt.applied:
        return f"failed, not shipped: {bolt.fallback_reason or 'see build.json'}"
    coverage = bolt.coverage or {}
    text = (
        f"{bolt.mode}, {coverage.get('profiled_functions', '?')}/"
        f"{coverage.get('total_functions', '?')} functions profiled"
    )
    gate = manifest.gate
    if gate is not None and gate.shipped is not None and "bolt" not in gate.shipped:
        text += ", not shipped (speed gate)"
    return text

"""release.json: what a release publishes, and logs/targets.json: how its targets' last
builds went.

release.json is signed (the release's SHA256SUMS lists it), so it holds only what the
published folders' build.json files say: two honest builders of the same inputs write the
same bytes. Times, statuses, engines, quick-bench ratios and a run's warnings differ from
run to run and builder to builder: they go to logs/targets.json, which no signature covers
(nothing under a `logs/` folder is signed)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import ClassVar, Literal

from pydantic import Field

from orchestrator.model.documents.records import BuildManifest, JsonDict, Record


class TargetFacts(Record):
    """What a run's entry (TargetSummary) and release.json's (PublishedTarget) both say of
    one target, declared once: its flavor and what its build.json says of the shipped
    binary. Each record's JSON is written with sorted keys, so these fields coming first in
    the model changes no byte of it."""

    flavor: str
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


class TargetSummary(TargetFacts):
    """One target's build as a run saw it: `release --json`, logs/targets.json, and the
    runner's claim in target.json."""

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
    engine: str | None = Field(
        None, description="the Docker context of the engine that built it (null: cached)"
    )
    gpu_path: str | None = Field(
        None,
        description="GPU flavors: 'exercised on <device>, driver <version>' or 'not "
        "exercised: <why>' (the build's logs/run.json, or an older build.json; null: no GPU "
        "flavor)",
    )
    moved_from: list[str] = Field(
        default_factory=list,
        description="engines that stopped answering while building it: 'context: why'",
    )


class EngineJobs(Record):
    """How many targets one engine built at a time, and why (release/targets/engine_jobs.py)."""

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


class PublishedTarget(TargetFacts):
    """One target a release publishes, as its signed build.json describes it."""

    level: str = Field(description="the CPU level it was built for (rustc's target-cpu)")
    artifact: str = Field(description="its folder in the release (and the archive's name)")
    rust_target: str | None = Field(
        description="target triple, e.g. x86_64-unknown-linux-gnu (null: read from a "
        "release.json written before triples were recorded)"
    )
    size: int = Field(description="the main binary's size in bytes")
    sha256: str = Field(description="the main binary's sha256")
    gpu_path: str | None = Field(
        None,
        description="GPU flavors: build.json's gpu_path, in builds from before it moved to "
        "the unsigned logs/run.json (null: no GPU flavor, or a newer build)",
    )


def _release_v2_to_v3(document: JsonDict) -> JsonDict:
    """v3 keeps what the published build.json files say, sorted by folder: each run's
    times, statuses, engines, speed ratios and warnings, the failed targets and
    jobs_per_engine moved to logs/targets.json (unsigned)."""
    kept = set(PublishedTarget.model_fields)
    artifacts = [
        {"rust_target": None, **{key: value for key, value in entry.items() if key in kept}}
        for entry in document.get("artifacts", [])
        if isinstance(entry, dict) and entry.get("status") in ("ok", "cached")
    ]
    return {
        "schema": "orchestrator/release",
        "schema_version": 3,
        "name": document.get("name"),
        "version": document.get("version"),
        "artifacts": sorted(artifacts, key=lambda entry: str(entry.get("artifact"))),
    }


class ReleaseSummary(Record):
    """release.json: every target the release publishes, sorted by folder name; a pure
    function of the published build.json files (release/targets/release_json.py writes it)."""

    SCHEMA = "orchestrator/release"
    VERSION = 3
    MIGRATIONS: ClassVar[Mapping[int, Callable[[JsonDict], JsonDict]]] = {
        1: _release_v1_to_v2,
        2: _release_v2_to_v3,
    }

    schema_: Literal["orchestrator/release"] = Field("orchestrator/release", alias="schema")
    schema_version: Literal[3] = 3
    name: str
    version: str
    artifacts: list[PublishedTarget]


class TargetRuns(Record):
    """logs/targets.json, beside release.json and not signed: each target's last build as
    the release that made it saw it (a target found current keeps the entry of the build
    that made it), in build order, and the engines of the last run that built any."""

    SCHEMA = "orchestrator/target-runs"
    VERSION = 1

    schema_: Literal["orchestrator/target-runs"] = Field("orchestrator/target-runs", alias="schema")
    schema_version: Literal[1] = 1
    name: str
    version: str
    targets: list[TargetSummary]
    jobs_per_engine: list[EngineJobs] = Field(
        default_factory=list,
        description="the engines the last run built on, each with how many targets at a time "
        "and why ([] for `release assemble`, which has none)",
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


def published_target(folder: str, manifest: BuildManifest) -> PublishedTarget:
    """release.json's entry of the artifact folder `folder`, from its build.json alone."""
    portability, gate, cuda = manifest.portability, manifest.gate, manifest.cuda_runtime
    shipped = gate is not None and bool(gate.shipped)
    return PublishedTarget(
        flavor=manifest.artifact.flavor,
        level=manifest.flags.target_cpu,
        artifact=folder,
        rust_target=manifest.artifact.target,
        size=manifest.artifact.size,
        sha256=manifest.artifact.sha256,
        glibc=portability.glibc_max if portability else None,
        oldest_distribution=portability.oldest_distribution if portability else None,
        shipped_variant=gate.shipped if gate is not None and shipped else None,
        cycles_saved_vs_baseline=gate.gain_vs_baseline if gate is not None and shipped else None,
        cycles_saved_vs_release=gate.gain_vs_release if gate is not None and shipped else None,
        bolt=bolt_summary(manifest),
        cuda_runtime=cuda.cuda_api if cuda is not None and cuda.binding == "run time" else None,
        gpu_path=manifest.gpu_path,
    )

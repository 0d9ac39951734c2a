"""What every build step shares: the containers, the shared volume, and the state the steps
hand to each other.

One `Pipeline` lives for one build (`start_pipeline` makes it). Every command a step runs
goes through execute/steps/commands.py's `run`, which echoes it as `+ cmd` into the step
log and turns a non-zero exit into StepFailedError.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.config.resolve.options import Options
from orchestrator.config.resolve.toolchains import ToolchainReport
from orchestrator.errors import ProfileError, StepFailedError
from orchestrator.execute.steps.commands import run
from orchestrator.execute.steps.profiles import ProfileRecord
from orchestrator.host.scratch import scratch_dir
from orchestrator.host.staging import staging_area
from orchestrator.host.step_cache import StepCache, StepEntry
from orchestrator.model.binaries.portability import Portability
from orchestrator.model.binaries.relocations import StaticRelocations
from orchestrator.model.documents.records import (
    BuildManifest,
    CudaRuntimeInfo,
    DistroRun,
    FileDigest,
    GateInfo,
    GeneratedFile,
    ReusedStep,
)
from orchestrator.model.documents.shipped_profile import ShippedProfile
from orchestrator.model.layout import PATHS
from orchestrator.model.verdict.outputs import Captured
from orchestrator.model.verdict.pgo_report import Coverage
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.plan.runs import INPUTS_DIR
from orchestrator.plan.steps import StepName
from orchestrator.progress.reporter import Reporter, StepLog
from orchestrator.runtime.engine import Container, ContainerSpec, Engine, Limits
from orchestrator.runtime.gpu_probe import GpuUse, gpu_use
from orchestrator.runtime.images import ImageOutcome
from orchestrator.runtime.perf import NO_ACCESS, PerfAccess, find_perf_access
from orchestrator.supply.attest import Signer
from orchestrator.supply.sbom import Crate, DebPackage

BIN_DIR = f"{PATHS.out}/bin"


def variant_binary(variant: str, binary: str) -> str:
    """Where a variant's binary is kept for the later steps: /build/out/bin/<variant>/<name>."""
    return f"{BIN_DIR}/{variant}/{binary}"


@dataclass
class BuildState:
    """What the steps found out, handed from one step to the next (and into build.json)."""

    base: ImageOutcome | None = None
    image: ImageOutcome | None = None
    toolchain: ToolchainReport | None = None
    gpu: dict[str, object] | None = None
    vendor: Path | None = None
    vendor_sha256: str = ""  # the vendored crates' digest, once a step cache lookup needs it
    shipped: str = ""  # the main binary in the container that will ship, as the steps go
    unbolted: str = ""  # the last main binary before BOLT
    bolted: str = ""  # the main binary BOLT made and validation passed ("" without one)
    others: dict[str, str] = field(default_factory=dict)  # the other binaries that ship
    # The other binaries before BOLT, and those BOLT rewrote and validation passed
    unbolted_others: dict[str, str] = field(default_factory=dict)
    bolted_others: dict[str, str] = field(default_factory=dict)
    # What BOLT did to each binary, main one first (model/documents/records.py BoltBinary)
    bolt_binaries: dict[str, dict[str, object]] = field(default_factory=dict)
    bolt_other_profiles: dict[str, ProfileRecord] = field(default_factory=dict)
    pgo: ProfileRecord | None = None
    profile_source: str = ""  # `build --profiles`: where the .profraw files were trained
    coverage: Coverage | None = None
    c_off_missing: int | None = None  # functions the C_OFF build found no profile for
    bolt_report: dict[str, object] | None = None
    bolt_profile: ProfileRecord | None = None
    validation: dict[str, object] = field(default_factory=dict)
    gate: GateInfo | None = None  # the speed gate's counts and decision
    # strip-relocations: what it removed, and each binary it replaced (path -> new path)
    static_relocations: StaticRelocations | None = None
    stripped: dict[str, str] = field(default_factory=dict)
    portability: Portability | None = None  # the main binary's
    other_glibc: dict[str, str | None] = field(default_factory=dict)  # the others' glibc_max
    expected: list[Captured] = field(default_factory=list)  # the baseline's, per validation run
    # Validation runs whose baseline printed the same twice (execute/verdict/validate.py)
    steady: set[tuple[str, tuple[str, ...]]] = field(default_factory=set)
    distro_runs: list[DistroRun] = field(default_factory=list)
    crates: list[Crate] = field(default_factory=list)
    # cargo metadata's JSON, read once: the device-code step and the SBOM both use it
    metadata: dict[str, Any] | None = None
    cuda_runtime: CudaRuntimeInfo | None = None  # how a cudarc crate binds CUDA
    gpu_use: GpuUse | None = None  # the build container's GPU (runtime/gpu_probe.py)
    gpu_path: str | None = None  # build.json's gpu_path (execute/verdict/gpu_path.py)
    packages: list[DebPackage] = field(default_factory=list)
    artifact: Path | None = None  # the staged artifact folder
    binary: Path | None = None  # the staged binary
    profile: ShippedProfile | None = None  # build.json's profile: what the binary carries
    variants: dict[str, FileDigest] = field(default_factory=dict)
    generated: list[GeneratedFile] = field(default_factory=list)  # [[archive.generate]]
    reused: dict[str, ReusedStep] = field(default_factory=dict)  # steps the step cache skipped
    test_tree: StepEntry | None = None  # test-build's cached compile, put back if tests run
    manifest: BuildManifest | None = None
    published: Path | None = None


@dataclass(kw_only=True)
class Pipeline:
    """Everything one build run holds on to while it executes."""

    options: Options
    plan: BuildPlan
    engine: Engine
    reporter: Reporter
    signer: Signer | None  # None: `build --target`, handed over unsigned to unsigned_out
    stack: ExitStack  # containers and the volume close with it
    scratch: Path  # host folder for files fetched from containers
    staging: Path  # private folder the artifact is assembled in
    started: str
    keep_containers: bool = False
    retrain: bool = False
    profiles_from: Path | None = None  # `build --profiles`: a train.sh's profiles.tar
    step_cache: StepCache | None = None  # None: no step is skipped or stored
    unsigned_out: Path | None = None  # where an unsigned target folder goes
    state: BuildState = field(default_factory=BuildState)
    perf: PerfAccess = NO_ACCESS
    # CARGO_BUILD_JOBS in the build container (release/targets/engine_jobs.py); None: cargo's
    # default. Never in the plan: no key or recorded command depends on it.
    cargo_jobs: int | None = None
    _volume: str | None = None
    _sources: str | None = None
    _sources_loaded: bool = False
    _inputs: str | None = None
    _box: Container | None = None
    _profiler: Container | None = None

    def title(self, name: StepName) -> str:
        return next(s.title for s in self.plan.steps if s.name == name)

    @property
    def image(self) -> ImageOutcome:
        if self.state.image is None:
            raise StepFailedError("internal: a step needs the toolchain image before it exists")
        return self.state.image

    @property
    def volume(self) -> str:
        """The volume build and profiling containers share at /build/out."""
        if self._volume is None:
            self._volume = self.stack.enter_context(
                self.engine.volume("out", keep=self.keep_containers)
            )
        return self._volume

    @property
    def source_volume(self) -> str:
        """The crate's sources at /build/src: filled once from the planned snapshot by
        `load_sources`, then read-only in every container (builds, workloads), so every
        variant builds from the same pristine sources and a build script that writes into
        them fails instead of changing what a later variant compiles."""
        if self._sources is None:
            self._sources = self.stack.enter_context(
                self.engine.volume("src", keep=self.keep_containers)
            )
        return self._sources

    def load_sources(self, log: StepLog) -> None:
        """Copy the planned source snapshot into the source volume, through a short-lived
        container of its own: the only one that mounts the volume writable."""
        if self._sources_loaded:
            return
        log.line(f"+ docker cp <source {self.plan.source.archive_sha256[:12]}> {PATHS.src}")
        spec = ContainerSpec(
            self.image.reference, volumes={self.source_volume: PATHS.src}, purpose="sources"
        )
        with self.engine.container(spec) as loader:
            loader.put_archive(PATHS.root, self.plan.source.archive)
        self._sources_loaded = True

    def run_volumes(self) -> dict[str, str]:
        """What runs of the binary read besides /build/out: the sources and, when the config
        has [train] inputs, the volume they are unpacked into (volume -> mount path)."""
        mounts = {self.source_volume: PATHS.src}
        if self.plan.run.inputs:
            if self._inputs is None:
                self._inputs = self.stack.enter_context(
                    self.engine.volume("inputs", keep=self.keep_containers)
                )
            mounts[self._inputs] = INPUTS_DIR
        return mounts

    @property
    def box(self) -> Container:
        """The build container: no network, no capabilities, started on first use."""
        if self._box is None:
            runs = self.run_volumes()
            jobs = {} if self.cargo_jobs is None else {"CARGO_BUILD_JOBS": str(self.cargo_jobs)}
            spec = ContainerSpec(
                self.image.reference,
                environment={**self.plan.build.environment, **jobs},
                # [train] inputs are copied in through the build container; the sources
                # never change once loaded (load_sources).
                volumes={
                    self.volume: PATHS.out,
                    **{name: path for name, path in runs.items() if path != PATHS.src},
                },
                read_only_volumes={self.source_volume: PATHS.src},
                limits=self.limits,
                gpu=self.gpu.passthrough,  # it trains, validates and checks the driver
            )
            self._box = self.stack.enter_context(
                self.engine.container(spec, keep=self.keep_containers)
            )
        return self._box

    @property
    def gpu(self) -> GpuUse:
        """The GPU the build container gets (flavors.<name>.gpu), asked of the engine once."""
        if self.state.gpu_use is None:
            mode = self.options.settings_for(self.plan.flavor).gpu
            self.state.gpu_use = gpu_use(self.engine, self.image.reference, self.plan.flavor, mode)
        return self.state.gpu_use

    @property
    def limits(self) -> Limits:
        """Of the build and profiling containers, where the crate's own code runs."""
        return Limits(pids=self.plan.limit_pids, memory=self.plan.limit_memory)

    @property
    def profiler_started(self) -> bool:
        return self._profiler is not None

    def profiler(self) -> Container:
        """The profiling container, started once with the least perf access needed."""
        if self._profiler is None:
            if self.plan.bolt is not None and self.plan.bolt.mode != "instrument":
                self.perf = find_perf_access(
                    self.engine,
                    self.image.reference,
                    allowed=self.plan.profiling_privileges,
                    allow_privileged=self.plan.profiling_allow_privileged,
                    cache_dir=self.options.cache_dir,
                )
            spec = ContainerSpec(
                self.image.reference,
                privileges=self.perf.privileges,
                volumes={self.volume: PATHS.out},
                read_only_volumes=self.run_volumes(),
                purpose="profile",
                limits=self.limits,
            )
            self._profiler = self.stack.enter_context(
                self.engine.container(spec, keep=self.keep_containers)
            )
        return self._profiler

    def copy_binaries(self, variant: str, log: StepLog) -> dict[str, str]:
        """Copy a variant's binaries where later steps find them; name -> path, main first."""
        built = self.plan.variants[variant].binaries
        run(self.box, ["mkdir", "-p", f"{BIN_DIR}/{variant}"], log, variant)
        run(self.box, ["cp", *built.values(), f"{BIN_DIR}/{variant}/"], log, variant)
        return {name: variant_binary(variant, name) for name in built}

    def ship(self, variant: str, log: StepLog) -> None:
        """The variant's binaries are the ones to ship (BOLT may still rewrite the main one)."""
        self.take(dict(self.copy_binaries(variant, log)))

    def take(self, copied: dict[str, str]) -> None:
        """Ship these binaries (name -> path in the build container, main first), copied
        or restored from the step cache."""
        copied = dict(copied)
        self.state.shipped = self.state.unbolted = copied.pop(self.plan.binary)
        self.state.others = copied

    def shipped(self) -> dict[str, str]:
        """Every binary that ships, name -> path in the build container, main first."""
        return {self.plan.binary: self.state.shipped, **self.state.others}


def run_workloads(
    pipeline: Pipeline,
    binaries: Mapping[str, str],
    log: StepLog,
    step: str,
    *,
    environment: Mapping[str, str] | None = None,
    wrap: Sequence[str] = (),
) -> list[int]:
    """Run the workloads of the binaries given (name -> path in the container); the
    indices of those that ran ({index} in `wrap` is replaced by it)."""
    if not pipeline.plan.workloads:
        raise ProfileError(
            "no training workloads: [train] workloads is empty",
            hint="List argument lists for the binary under [train] workloads in "
            "orchestrator.toml, or build with --no-pgo --no-bolt.",
        )
    box = pipeline.profiler()
    plan = pipeline.plan
    ran: list[int] = []
    for index, workload in enumerate(plan.workloads):
        binary = binaries.get(workload.binary_or(plan.binary))
        if binary is None:
            continue
        wrapper = [part.replace("{index}", str(index)) for part in wrap]
        argv = [*wrapper, *plan.runner, binary, *workload.args]
        if plan.run.stdin:  # the shell only redirects; the workload is exec'd as given
            argv = ["/bin/sh", "-c", 'f=$1; shift; exec "$@" < "$f"', "sh", plan.run.stdin, *argv]
        run(
            box,
            argv,
            log,
            step,
            environment={**plan.run.environment, **(environment or {})},
            workdir=plan.run.workdir,
        )
        ran.append(index)
    return ran


def start_pipeline(
    stack: ExitStack,
    options: Options,
    plan: BuildPlan,
    engine: Engine,
    reporter: Reporter,
    *,
    signer: Signer | None,
    step_cache: StepCache | None,
    keep_containers: bool = False,
    retrain: bool = False,
    profiles_from: Path | None = None,
    unsigned_out: Path | None = None,
    cargo_jobs: int | None = None,
) -> Pipeline:
    """The Pipeline of one build, started now: its staging folder and scratch space close
    with `stack`, as its containers and volumes do."""
    return Pipeline(
        options=options,
        plan=plan,
        engine=engine,
        reporter=reporter,
        signer=signer,
        stack=stack,
        staging=stack.enter_context(staging_area(options.artifacts_dir, engine.session)),
        scratch=stack.enter_context(scratch_dir(options.cache_dir, "build")),
        started=dt.datetime.now(tz=dt.UTC).isoformat(timespec="seconds"),
        keep_containers=keep_containers,
        retrain=retrain,
        profiles_from=profiles_from,
        unsigned_out=unsigned_out,
        cargo_jobs=cargo_jobs,
        step_cache=step_cache,
    )

"""Typed records of build.json: what one artifact is, what it was built from and how, and
what was checked; validated whenever they are read (model/documents/record_io.py).

Informative sections that no code reads back (step timings, the validation transcript,
tool reports) stay free-form dictionaries; everything another module reads is typed.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from orchestrator.model.binaries.relocations import StaticRelocations
from orchestrator.model.documents.git_facts import GitFacts
from orchestrator.model.documents.record_io import (
    FileName,
    JsonDict,
    Migrations,
    Record,
    RecordError,
    parse_record,
    read_record,
    record_text,
    write_record,
)
from orchestrator.model.documents.shipped_profile import ShippedProfile


class RunRecord(Record):
    """A run of another binary than the main one (whose runs are plain argument lists)."""

    binary: str
    args: list[str]


RunShape = list[str] | RunRecord  # a run as orchestrator.toml writes it


class BinaryFile(Record):
    """A binary shipped beside the artifact's main one (package.binaries)."""

    file: FileName
    sha256: str
    size: int


class ArtifactInfo(Record):
    name: str
    version: str
    flavor: str
    arch: str
    target: str
    file: FileName
    sha256: str
    size: int
    optimizations: list[str]
    # package.binaries after the main one
    other_binaries: list[BinaryFile] = Field(default_factory=list)

    @property
    def binaries(self) -> list[BinaryFile]:
        """Every binary the artifact ships, the main one first."""
        main = BinaryFile(file=self.file, sha256=self.sha256, size=self.size)
        return [main, *self.other_binaries]


class ToolchainInfo(Record):
    spec: JsonDict
    reported: JsonDict


class ImageRecord(Record):
    reference: str
    # The Engine's id and whether this run made it differ from engine to engine and run to
    # run: null in a signed build.json, kept in the folder's logs/run.json
    # (model/documents/run_logs.py)
    id: str | None = None
    input_hash: str
    built_this_run: bool | None = None
    labels: dict[str, str]


class EngineRecord(Record):
    """The engine that built an artifact (`docker info` / `docker version`)."""

    context: str  # the Docker context it was reached by; "current": DOCKER_HOST
    name: str
    version: str  # the product's own (Podman's, not its API's)
    api_version: str
    os: str
    kernel: str
    architecture: str
    storage_driver: str
    # Added within version 2 (absent in older files): "docker" | "podman", as detected
    # (runtime/quirks.py), and the facts that change what the engine applies.
    kind: str = ""
    rootless: bool = False
    cgroup_version: int = 0  # 0: the engine did not say
    # The container limits ("pids", "memory") asked for but not in force in the first
    # container given them (read from its cgroup): a rootless engine under cgroup v1.
    unapplied_limits: list[str] = Field(default_factory=list)

    def described(self) -> str:
        """`build-box (Docker 27.3.1, Debian GNU/Linux 12, kernel 6.1.0, overlay2)`."""
        product = "Podman" if self.kind == "podman" else "Docker"
        facts = [
            f"{product} {self.version}{' rootless' if self.rootless else ''}"
            if self.version
            else "",
            self.os,
            f"kernel {self.kernel}" if self.kernel else "",
            self.storage_driver,
        ]
        return f"{self.context} ({', '.join(fact for fact in facts if fact)})"


class ImagesInfo(Record):
    base: ImageRecord
    toolchain: ImageRecord


class FlagsInfo(Record):
    target_cpu: str
    rustflags: list[str]
    release_profile: dict[str, str | int | bool]
    features: list[str]
    default_features: bool
    variants: dict[str, JsonDict]
    cargo_test: list[str]
    environment: dict[str, str]


class InputsInfo(Record):
    config: str
    config_sha256: str
    source_archive_sha256: str
    cargo_lock_sha256: str
    vendored_crates_sha256: str
    source_date_epoch: int
    workloads: list[RunShape]


class PgoInfo(Record):
    profile: JsonDict
    profile_key: str | None
    coverage: JsonDict | None
    # Whether the published binary was built with the profile (the speed gate may ship the
    # release profile instead); added within version 2: null in older files.
    shipped: bool | None = None
    # "trained here", or "trained elsewhere: <machine.txt>, bundle <manifest sha256>,
    # profiles <profiles.tar sha256>" (`build --profiles`); null in files written before it.
    profile_source: str | None = None


class CCodeInfo(Record):
    """How build scripts' C and C++ were compiled ([c_code] mode), and what shows it."""

    mode: str  # as configured: off | lto | lto-pgo
    applied: bool  # every variant but the baseline compiled its C with `cc` (clang)
    skipped: str | None = None  # why the mode does not apply to this flavor
    cc: str | None = None
    cxx: str | None = None
    cflags: list[str] = Field(default_factory=list)  # -flto=thin (PGO flags: per variant)
    rustflags: list[str] = Field(default_factory=list)  # -Clinker-plugin-lto, the linker
    # The shipped binary's .comment section names clang: its C came from clang's bitcode
    compiled_with_clang: bool | None = None
    comment: list[str] = Field(default_factory=list)  # that section's strings
    # lto-pgo: functions of the merged profile with unmangled names (C; Rust's are mangled)
    profile_c_functions: list[str] | None = None
    off_candidate: str | None = None  # the gate's name for the build with the mode off
    shipped: bool | None = None  # what ships has the mode (False: off_candidate shipped)
    off_functions_without_profile: int | None = None  # the mode-off build's, with PGO


class BoltBinary(Record):
    """What BOLT did to one binary of the artifact, and whether that one ships BOLTed."""

    applied: bool = False  # BOLT made a version of it that validated
    reason: str  # why it is, or is not, BOLTed
    # The speed gate kept its BOLT output in the BOLT variant (None: not gated)
    kept: bool | None = None
    gain: float | None = None  # share of estimated cycles its own gate workloads saved
    shipped: bool | None = None  # the published binary is BOLT's
    workloads: int = 0  # training workloads that run it
    profile: JsonDict | None = None  # the profile store's record of its own BOLT profile
    coverage: JsonDict | None = None
    size: JsonDict | None = None
    debug_info: JsonDict | None = None


class BoltInfo(Record):
    policy: str
    flags: list[str]
    mode: str | None = None  # a resolved input: the lock pins it, reproduce uses it
    mode_reason: str | None = None  # null since logs/run.json holds it (bolt_mode_reason)
    profile: JsonDict | None = None
    coverage: JsonDict | None = None
    applied: bool = False  # BOLT made a binary that validated: a candidate for the gate
    # Whether the published binary is BOLT's (the gate may ship a variant without it);
    # added within version 2: null in older files.
    shipped: bool | None = None
    fallback_reason: str | None = None
    size: JsonDict | None = None  # bytes before and after BOLT, and their ratio
    sample_gate: JsonDict | None = None  # null since logs/run.json holds it (bolt_sample_gate)
    debug_info: JsonDict | None = None  # asked for (its input had DWARF), kept, why
    # Every binary of the artifact, main one first (added within version 2: absent in
    # older files, whose BOLT rewrote only the main one)
    binaries: dict[str, BoltBinary] = Field(default_factory=dict)


class ContainerGrant(Record):
    """The rights a container was started with, as sent to the Engine."""

    privileged: bool
    cap_add: list[str]  # capabilities given back after dropping `cap_drop`
    cap_drop: list[str]  # ["ALL"] unless privileged
    no_new_privileges: bool
    # "docker-default" (the Engine's own profile), "unconfined", or one of ours by name
    seccomp: str
    seccomp_sha256: str | None = None  # of the exact profile JSON ours sent
    seccomp_added: list[str] = Field(default_factory=list)  # allowed beyond Docker's default


class ProfilingInfo(Record):
    """The profiling container (training workloads under perf) and its perf access."""

    # The machine's perf access: null since logs/run.json holds it (its `perf`), as a CI
    # runner and a host with other hardware make the same bytes (model/documents/run_logs.py)
    granted: str | None = None  # the grant in words: "seccomp orchestrator-perf (...)"
    lbr: bool | None = None  # perf could record branch stacks there
    sampling: bool | None = None  # perf could sample there
    # Whether it was started: not when the training came from a cache, so null since
    # logs/run.json holds it (model/documents/run_logs.py)
    container_started: bool | None = None
    grant: ContainerGrant | None = None  # added within version 2; absent in older files


class GateWorkload(Record):
    """One gate workload: each variant's estimated cycles, and its ratio to plain cargo
    build --release and to the release profile (< 1: fewer cycles)."""

    workload: str  # the run's arguments, as the config gives them
    cycles: dict[str, int]
    vs_baseline: dict[str, float]
    vs_release: dict[str, float]  # {} when the release profile was not counted


class GateInfo(Record):
    """The speed gate: what callgrind counted per variant and which variant shipped."""

    policy: str
    min_gain: float
    metric: str  # the estimated-cycles formula
    workloads: int = 0  # how many runs were counted per variant
    variants: dict[str, JsonDict] = Field(default_factory=dict)  # totals over the workloads
    shipped: str | None = None  # the variant that ships (None: not measured)
    reasons: list[str] = Field(default_factory=list)
    gain_vs_baseline: float | None = None  # share of estimated cycles saved
    gain_vs_release: float | None = None
    skipped: str | None = None  # why nothing was measured
    per_workload: list[GateWorkload] = Field(default_factory=list)  # in [gate] order


class FileDigest(Record):
    sha256: str
    size: int


class RootfsDependency(Record):
    suite: str
    sha256: str | None


class DebDependency(Record):
    name: str
    version: str
    arch: str
    sha256: str | None


class CrateDependency(Record):
    name: str
    version: str
    sha256: str | None


class Dependencies(Record):
    rootfs: RootfsDependency
    debian_packages: list[DebDependency]
    crates: list[CrateDependency]


class SourceIdentity(Record):
    git_commit: str | None
    dirty: bool | None
    # What build scripts' `git` answered in the build container (plan/git_shim.py); None:
    # the crate is in no repository, so they found no `git` at all
    git: GitFacts | None = None


class DistroRun(Record):
    distribution: str  # "Debian 11"
    suite: str
    glibc: str
    image: str
    loads: bool  # the loader resolved every library and symbol version
    validated: bool  # validate.command printed what the baseline printed
    not_validated: str | None = None  # why it did not run there (distro_check = load...)


class PortabilityInfo(Record):
    target: str
    target_cpu: str
    glibc_max: str | None
    needed: list[str]
    cpu_features: list[str]
    # Added within version 2 (the enforced floor and the distros step).
    glibc_floor: str | None = None
    above_floor: list[str] = Field(default_factory=list)
    interpreter: str | None = None
    distros: list[DistroRun] = Field(
        default_factory=list, description="Debian releases the binary ran on, oldest first"
    )
    other_binaries: dict[str, str | None] = Field(
        default_factory=dict, description="the glibc each other binary of the artifact needs"
    )

    def glibc_of(self, file: str) -> str | None:
        """The glibc a shipped binary needs, as recorded (the main one's is glibc_max)."""
        return self.other_binaries.get(file, self.glibc_max)

    @property
    def oldest_distribution(self) -> str | None:
        ran = [d for d in self.distros if d.loads]
        if not ran:
            return None
        oldest = min(ran, key=lambda d: tuple(int(p) for p in d.glibc.split(".")))
        return f"{oldest.distribution} ({oldest.suite}, glibc {oldest.glibc})"


def _build_v1_to_v2(document: JsonDict) -> JsonDict:
    """v1 spelled its version inside `schema` ("orchestrator/build@1")."""
    return {**document, "schema": "orchestrator/build", "schema_version": 2}


class ReusedStep(Record):
    """A step whose outputs came from the step cache: its key, who built them, when."""

    key: str
    made_by: str  # the artifact whose build ran the step
    built_at: str
    files: dict[str, FileDigest]


class CudaRuntimeInfo(Record):
    """How the binary binds CUDA (cudarc, from the resolved crate graph) and what it asks of
    the driver where it runs."""

    crate: str  # "cudarc 0.11.9"
    binding: Literal["run time", "build time"]
    why: str
    cuda_api: str | None = Field(description="the CUDA API it calls (cuda-12050: 12.5)")
    nvrtc: bool = Field(description="its nvrtc feature is on (kernels compiled at run time)")
    toolkit_check: str  # matched the image's toolkit, or why it was skipped
    # The builder's driver and the check against it: null since logs/run.json holds them
    driver_cuda: str | None = Field(None, description="the builder's driver, where it has a GPU")
    driver_check: str | None = None  # "not checked (no GPU)", or the comparison with driver_cuda


class GeneratedFile(Record):
    """A file of the archives printed by a shipped binary ([[archive.generate]]), kept in
    the artifact folder under generated/ so that `release assemble` and `reproduce` pack
    the same archive bytes."""

    path: str  # below the archive's top folder and below <artifact folder>/generated/
    binary: str
    args: list[str]
    sha256: str
    size: int


class BuildManifest(Record):
    """build.json: what one artifact is, what it was built from and how, what was checked."""

    SCHEMA = "orchestrator/build"
    VERSION = 2
    MIGRATIONS: ClassVar[Migrations] = {1: _build_v1_to_v2}

    schema_: Literal["orchestrator/build"] = Field("orchestrator/build", alias="schema")
    schema_version: Literal[2] = 2
    orchestrator_version: str
    artifact: ArtifactInfo
    toolchain: ToolchainInfo
    images: ImagesInfo
    flags: FlagsInfo
    inputs: InputsInfo
    pgo: PgoInfo | None
    bolt: BoltInfo | None
    profiling: ProfilingInfo
    validation: JsonDict
    variants: dict[str, FileDigest]
    # How the build went (null since logs/run.json holds it, model/documents/run_logs.py: two honest
    # builds of the same inputs differ there, and build.json is signed)
    steps: list[JsonDict] | None = None
    dependencies: Dependencies
    profiles: dict[str, FileDigest]
    source: SourceIdentity
    portability: PortabilityInfo | None
    device_code: JsonDict | None
    started_at: str | None = None  # null since logs/run.json holds it
    finished_at: str | None = None
    # Added within version 2: `cargo test` as run, or why it was not ([test] reason).
    tests: JsonDict | None = None
    run: JsonDict | None = None  # where and with what workloads and validation ran
    # Everything the build read or checked, hashed (plan/serialize.py: action_key): a
    # release does not build the target again while its key is unchanged.
    action_key: str | None = None
    gate: GateInfo | None = None  # the speed gate's counts and decision
    engine: EngineRecord | None = None  # where it was built (null since logs/run.json)
    # Steps not run because the step cache held their outputs (host/step_cache.py),
    # step name -> where they came from; None or absent when every step ran (and null
    # since logs/run.json holds it).
    reused_steps: dict[str, ReusedStep] | None = None
    cuda_runtime: CudaRuntimeInfo | None = None  # crates that bind CUDA (cudarc)
    generated: list[GeneratedFile] | None = None  # [[archive.generate]] outputs
    c_code: CCodeInfo | None = None  # [c_code] mode; None: off (or a file from before it)
    # What strip-relocations removed (model/binaries/relocations.py); None: not planned (no BOLT)
    static_relocations: StaticRelocations | None = None
    # GPU flavors: "exercised on <device>, driver <version>" where the build container
    # (training, validation, the driver check) had the engine's GPU, else "not exercised:
    # <why>"; None for a flavor with no GPU (or a file from before it), and null since
    # logs/run.json holds it: the builder's hardware, not what was built.
    gpu_path: str | None = None
    profile: ShippedProfile | None = None  # [build] profile and what it left in the binary


# What this module passes on from model/documents/record_io.py (the base, reading and writing), for
# the callers that read or write build.json; its own records are public as defined here.
__all__ = [
    "FileName",
    "JsonDict",
    "Record",
    "RecordError",
    "parse_record",
    "read_record",
    "record_text",
    "write_record",
]

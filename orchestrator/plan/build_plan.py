"""The pure plan: from resolved options to named, content-hashed steps. No Docker, no I/O.

Everything that can change the output is an input here, hashed; the executor only
follows the plan. `orchestrator build --dry-run` prints it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from orchestrator.config.declarations.kinds import Run
from orchestrator.config.resolve.archive_include import (
    check_archive_formats,
    check_generate_entries,
    included_files,
)
from orchestrator.config.resolve.checks import memory_bytes
from orchestrator.config.resolve.options import Options
from orchestrator.config.resolve.toolchains import AptSources, BaseSpec, DistroSpec, ToolchainSpec
from orchestrator.errors import ConfigError
from orchestrator.flavors import DeviceCode, Flavor, FlavorView
from orchestrator.model.documents.git_facts import GitFacts
from orchestrator.model.layout import PATHS, artifact_dir_name, release_dir_name
from orchestrator.plan.bolt import BoltPlan, BoltSettings, bolt_plan
from orchestrator.plan.c_code import (
    C_OFF,
    C_OFF_GENERATE,
    CCodePlan,
    c_code_plan,
    judges_c_off,
    off_candidate,
)
from orchestrator.plan.cargo_commands import CargoCommand, Variant, cargo_commands
from orchestrator.plan.cargo_flags import (
    RELOCATIONS,
    CargoSettings,
    release_needed,
    test_flags,
    variant_rustflags,
)
from orchestrator.plan.gate import GatePlan, GateSettings, gate_plan
from orchestrator.plan.images import ImagePlan, apt_sources, base_image_plan, toolchain_image_plan
from orchestrator.plan.pgo import PgoPlan, pgo_plan
from orchestrator.plan.portable import (
    DistroPlan,
    SysrootPlan,
    distro_plan,
    distro_validation,
    sysroot_plan,
)
from orchestrator.plan.runs import RunPlan, TrainInput, run_plan
from orchestrator.plan.steps import Step, steps_of


@dataclass(frozen=True)
class SourceSnapshot:
    """The crate's files as a deterministic tar, and the hashes that identify them."""

    archive: bytes
    archive_sha256: str
    cargo_lock_sha256: str
    # What the build-time `git` answers (plan/git_shim.py); None: no repository, no shim
    git: GitFacts | None = None


@dataclass(frozen=True)
class BuildPlan:
    flavor: str
    arch: str
    rust_target: str
    target_cpu: str
    toolchain: ToolchainSpec
    base: BaseSpec
    base_image: ImagePlan
    image: ImagePlan
    dockerfile: str
    packages: Mapping[str, str]
    unpack: Mapping[str, str]  # .debs unpacked into the image, not installed
    apt_sources: AptSources
    source: SourceSnapshot
    rustflags: tuple[str, ...]
    fetch: CargoCommand
    # In build order: baseline, release, pgo-generate (and c-off-generate), optimized
    # (shipped before BOLT, or release without PGO and BOLT), then c-off where the gate
    # judges [c_code] mode
    variants: Mapping[str, Variant]
    test: CargoCommand  # runs the tests (compiling nothing once test_build ran)
    test_build: CargoCommand  # `cargo test --no-run`: the test binaries, without the run's args
    test_skipped: str  # why `cargo test` does not run ([test] reason), or "" when it runs
    test_cpu: str  # the target-cpu `cargo test` compiles for
    # "" when `cargo test` runs with the shipped flags; else whose flags it runs with, and why
    test_shared: str
    run: RunPlan
    pgo: PgoPlan | None
    bolt: BoltPlan | None
    gate: GatePlan | None  # the speed gate, after validation
    gate_skipped: str  # why the gate does not run; "" when it does
    workloads: tuple[Run, ...]
    validate_command: tuple[str, ...]  # runs the main binary
    validate_runs: tuple[Run, ...]  # more validation runs, e.g. of the other binaries
    validate_tolerance: float
    validate_select: str  # a regular expression: only the lines it matches are compared
    profiling_privileges: bool
    profiling_allow_privileged: bool  # may the perf probe try --privileged at all
    limit_pids: int  # of the build and profiling containers (0: none)
    limit_memory: int  # bytes, the same (0: none)
    runner: tuple[str, ...]  # runs a target binary in the container (qemu for aarch64)
    device_code: DeviceCode | None
    glibc_floor: str  # the oldest glibc the binary must load on
    sysroot: SysrootPlan | None  # what shipped variants link against (None: the image's glibc)
    # How build scripts' C is compiled in every variant but the baseline (None: gcc), and
    # why [c_code] mode does not apply to this flavor ("" when it does or is off)
    c_code: CCodePlan | None
    c_code_skipped: str
    # The speed gate's name for the build with [c_code] mode off ("" when there is none)
    c_off: str
    distros: tuple[DistroPlan, ...]  # where `distros` runs it; () when the check is off
    distro_validation: str  # why validate.command does not run there; "" when it does
    binary: str  # the main binary
    binaries: tuple[str, ...]  # every binary the artifact ships, the main one first
    release_dir: str
    artifact_dir: str
    steps: tuple[Step, ...]

    @property
    def final(self) -> Variant:
        """The variant that ships unless the speed gate or BOLT says otherwise."""
        return self.variants.get("optimized") or self.variants["release"]

    @property
    def build(self) -> CargoCommand:
        return self.final.build

    @property
    def validation_runs(self) -> tuple[Run, ...]:
        """Every run whose output must equal the baseline's: validate.command (the main
        binary), then validate.runs."""
        first = (Run(self.validate_command),) if self.validate_command else ()
        return (*first, *self.validate_runs)


def _check_workloads(
    workloads: tuple[Run, ...], *, pgo: bool, bolt: bool, binary: str, config_path: str
) -> None:
    """PGO and BOLT train on workloads, and BOLT on the main binary's."""
    if (pgo or bolt) and not workloads:
        raise ConfigError(
            f"{config_path}: PGO and BOLT train on workloads, but [train] workloads is empty",
            hint="Add argument lists for the binary under [train] workloads, or build with "
            "--no-pgo --no-bolt.",
        )
    if bolt and all(w.binary for w in workloads):
        raise ConfigError(
            f"{config_path}: BOLT rewrites {binary}, but every [train] "
            "workload runs another binary",
            hint=f"Add a workload for {binary} (a plain argument list), or build with --no-bolt.",
        )


def _check_archive(
    source: SourceSnapshot,
    *,
    formats: tuple[str, ...],
    include: tuple[str, ...],
    generate: tuple[Run, ...],
    binaries: tuple[str, ...],
) -> None:
    """[archive]: its formats, its include patterns against the sources, and the files it
    generates with the binaries it ships."""
    check_archive_formats(formats)
    # A pattern matching nothing stops the plan, not the publication an hour later.
    included = included_files(source.archive, include)
    check_generate_entries(generate, binaries, [path for path, _ in included])


def _for_target(options: Options, flavor: Flavor) -> tuple[Options, FlavorView]:
    """The options a target of `flavor` is planned with, checked by the flavor: its
    [flavors.<name>.train|validate|bench|gate|test] tables applied, so in every step's key;
    with the flavor's view of them."""
    options = options.for_flavor(flavor.name)
    view = FlavorView.from_options(options)
    flavor.validate(view)
    return options, view


def make_plan(
    options: Options,
    flavor: Flavor,
    *,
    toolchain: ToolchainSpec,
    base: BaseSpec,
    dockerfile: str,
    packages: Mapping[str, str],
    source: SourceSnapshot,
    inputs: tuple[TrainInput, ...] = (),
    distros: tuple[DistroSpec, ...] = (),
) -> BuildPlan:
    options, view = _for_target(options, flavor)
    target_cpu = flavor.target_cpu(view)
    _check_workloads(
        options.workloads,
        pgo=options.pgo,
        bolt=options.bolt,
        binary=options.binary,
        config_path=str(options.config_path),
    )
    _check_archive(
        source,
        formats=options.archive_formats,
        include=options.archive_include,
        generate=options.archive_generate,
        binaries=options.binaries,
    )
    base_image = base_image_plan(base)
    image = toolchain_image_plan(flavor, toolchain, dockerfile, base_image)
    release_dir = release_dir_name(options.binary, options.version)

    sysroot = sysroot_plan(options.glibc_floor, flavor, toolchain)
    c_code, c_code_skipped = c_code_plan(options.c_code, flavor, toolchain)
    cargo = CargoSettings.from_options(options)
    baseline_flags, rustflags = variant_rustflags(
        cargo, view, flavor, release_dir=release_dir, sysroot=sysroot, c_code=c_code
    )

    commands = cargo_commands(
        cargo,
        view,
        flavor,
        toolchain,
        git_shim=source.git is not None,
        sysroot=sysroot,
        c_code=c_code,
    )
    runs = run_plan(options.run_env, options.run_stdin, inputs)
    gate, gate_skipped = gate_plan(
        GateSettings.from_options(options), flavor, optimized=options.pgo or options.bolt
    )
    pgo_dir = f"{PATHS.out}/pgo"
    variants = [
        # What `cargo build --release` gives without us: the yardstick for bench and validation.
        commands.variant("baseline", baseline_flags, profile=False),
    ]
    if release_needed(gate, optimized=options.pgo or options.bolt):
        variants.append(commands.variant("release", rustflags))
    optimized_flags = rustflags
    # [c_code] mode judged by the gate: the mode-off builds' rustflags (rustc's fat LTO)
    off_flags = variant_rustflags(cargo, view, flavor, release_dir=release_dir, sysroot=sysroot)[1]
    judge_c_off = judges_c_off(c_code, gate)
    pgo: PgoPlan | None = None
    if options.pgo:
        generate = commands.variant(
            "pgo-generate", (*rustflags, f"-Cprofile-generate={pgo_dir}/raw")
        )
        variants.append(generate)
        generate_off = None
        if judge_c_off:  # trained beside it: its functions are named otherwise in a profile
            generate_off = commands.variant(
                C_OFF_GENERATE, (*off_flags, f"-Cprofile-generate={pgo_dir}/raw"), c_off=True
            )
            variants.append(generate_off)
        pgo = pgo_plan(
            flavor,
            workloads=options.workloads,
            max_missing_ratio=options.pgo_max_missing_ratio,
            toolchain=toolchain,
            sources=(source.archive_sha256, source.cargo_lock_sha256),
            image_input_hash=image.input_hash,
            generate=generate,
            generate_off=generate_off,
            runs=runs,
            pgo_dir=pgo_dir,
            c_pgo=c_code is not None and c_code.mode == "lto-pgo",
        )
        optimized_flags = (
            *optimized_flags,
            f"-Cprofile-use={pgo.merged}",
            "-Cllvm-args=-pgo-warn-missing-function",
        )
    bolt: BoltPlan | None = None
    if options.bolt:
        optimized_flags = (*optimized_flags, RELOCATIONS)
        bolt = bolt_plan(BoltSettings.from_options(options), flavor, toolchain)
    if options.pgo or options.bolt:
        variants.append(commands.variant("optimized", optimized_flags))
    tests = test_flags(
        cargo,
        view,
        flavor,
        target_cpu,
        shipped=(variants[-1].name, optimized_flags),
        release_dir=release_dir,
        sysroot=sysroot,
        c_code=c_code,
    )
    test = commands.test(f"{PATHS.target}/{tests.target_dir}", tests.flags)
    test_build = commands.test(f"{PATHS.target}/{tests.target_dir}", tests.flags, no_run=True)
    fetch = commands.fetch()
    c_off = ""
    if judge_c_off:
        # rustc's fat LTO and gcc's C, with the same profile: for the gate to judge the mode
        if pgo is not None:
            off_flags = (*off_flags, *optimized_flags[len(rustflags) :])
            off_flags = tuple(flag for flag in off_flags if flag != RELOCATIONS)
        variants.append(commands.variant(C_OFF, off_flags, c_off=True))
        c_off = off_candidate(pgo is not None)

    device_code = flavor.device_code(view)
    steps = steps_of(
        binary=options.binary,
        glibc_floor=options.glibc_floor,
        workloads=len(options.workloads),
        tests=options.test_enabled,
        base_reference=base_image.reference,
        image_reference=image.reference,
        target_cpu=target_cpu,
        device_code=device_code,
        pgo=pgo is not None,
        bolt=(bolt.mode, bolt.flags) if bolt else None,
        optimized="optimized" in {v.name for v in variants},
        release="release" in {v.name for v in variants},
        test_cpu=tests.cpu if tests.shared else "",
        gate=gate,
        c_off=c_off,
        distros=tuple(d.title for d in distros) if options.distro_check != "off" else (),
        glibc_view=sysroot.glibc if sysroot and sysroot.view_dir else "",
    )
    return BuildPlan(
        flavor=flavor.name,
        arch=flavor.arch,
        rust_target=flavor.rust_target,
        target_cpu=target_cpu,
        toolchain=toolchain,
        base=base,
        base_image=base_image,
        image=image,
        dockerfile=dockerfile,
        packages=dict(packages),
        unpack=toolchain.unpack_for(flavor.name, flavor.arch),
        apt_sources=apt_sources(flavor, toolchain),
        source=source,
        rustflags=tuple(rustflags),
        fetch=fetch,
        variants={v.name: v for v in variants},
        test=test,
        test_build=test_build,
        test_skipped="" if options.test_enabled else options.test_reason.strip(),
        test_cpu=tests.cpu,
        test_shared=tests.shared,
        run=runs,
        pgo=pgo,
        bolt=bolt,
        gate=gate,
        gate_skipped=gate_skipped,
        workloads=options.workloads,
        validate_command=options.validate_command,
        validate_runs=options.validate_runs,
        validate_tolerance=options.validate_tolerance,
        validate_select=options.validate_select,
        profiling_privileges=options.profiling_privileges,
        profiling_allow_privileged=options.profiling_allow_privileged,
        limit_pids=options.limit_pids,
        limit_memory=memory_bytes(options.limit_memory) or 0,
        runner=flavor.runner,
        device_code=device_code,
        glibc_floor=options.glibc_floor,
        sysroot=sysroot,
        c_code=c_code,
        c_code_skipped=c_code_skipped,
        c_off=c_off,
        distros=tuple(distro_plan(d, flavor, base) for d in distros)
        if options.distro_check != "off"
        else (),
        distro_validation=distro_validation(
            options.distro_check, options.validate_command, device_code
        ),
        binary=options.binary,
        binaries=options.binaries,
        release_dir=release_dir,
        artifact_dir=artifact_dir_name(
            options.binary, options.version, flavor.arch, flavor.artifact_flavor
        )
        + flavor.artifact_suffix(view),
        steps=steps,
    )


# CargoCommand lives in plan/cargo_commands.py; callers of the plan may take it from here.
__all__ = ["BuildPlan", "CargoCommand", "PgoPlan", "SourceSnapshot", "make_plan"]

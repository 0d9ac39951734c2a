"""The pure plan: from resolved options to named, content-hashed steps. No Docker, no I/O.

Everything that can change the output is an input here, hashed; the executor only
follows the plan. `orchestrator build --dry-run` prints it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace

from orchestrator.config.options import Options
from orchestrator.config.toolchains import AptSources, BaseSpec, DistroSpec, ToolchainSpec
from orchestrator.errors import ConfigError
from orchestrator.flavors import DeviceCode, Flavor
from orchestrator.model.elf import version_tuple
from orchestrator.model.hashing import content_hash
from orchestrator.model.layout import PATHS, UNPACK_ROOT, artifact_dir_name, release_dir_name
from orchestrator.plan.steps import Step, steps_of

IMAGE_REPOSITORY = "orchestrator"

# The seeds' release profile, injected with `cargo --config` so the user's Cargo.toml
# is never edited.
RELEASE_PROFILE: dict[str, str | int | bool] = {
    "lto": "fat",
    "codegen-units": 1,
    "panic": "abort",
    "opt-level": 3,
    "incremental": False,
}


@dataclass(frozen=True)
class SourceSnapshot:
    """The crate's files as a deterministic tar, and the hashes that identify them."""

    archive: bytes
    archive_sha256: str
    cargo_lock_sha256: str


@dataclass(frozen=True)
class ImagePlan:
    reference: str
    input_hash: str


@dataclass(frozen=True)
class CargoCommand:
    argv: tuple[str, ...]
    environment: Mapping[str, str]


@dataclass(frozen=True)
class Variant:
    """One way of building the binary; bench compares them, validation compares two."""

    name: str  # baseline | release | pgo-generate | optimized
    build: CargoCommand
    binary: str  # where cargo leaves it in the build container

    @property
    def rustflags(self) -> list[str]:
        return self.build.environment["CARGO_ENCODED_RUSTFLAGS"].split("\x1f")


@dataclass(frozen=True)
class RunPlan:
    """How workloads, validation and bench run the binary: at the crate's root, whose files
    they may read (read-only for workloads), with `[train] env` and `[train] stdin`."""

    workdir: str
    environment: Mapping[str, str]
    stdin: str  # a path in the container, or "" for none

    @property
    def configured(self) -> bool:
        """Whether [train] env or stdin is set (the lock and profile key record it then)."""
        return bool(self.environment or self.stdin)

    def as_dict(self) -> dict[str, object]:
        return {"workdir": self.workdir, "env": dict(self.environment), "stdin": self.stdin}


def run_plan(options: Options) -> RunPlan:
    environment = dict(pair.split("=", 1) for pair in options.run_env)
    stdin = f"{PATHS.src}/{options.run_stdin}" if options.run_stdin else ""
    return RunPlan(PATHS.src, environment, stdin)


@dataclass(frozen=True)
class PgoPlan:
    profile_key: str  # cache key: everything the profile depends on
    raw_dir: str
    merged: str
    profile_file_pattern: str  # LLVM_PROFILE_FILE: one file per process and binary
    merge_argv: tuple[str, ...]
    show_argv: tuple[str, ...]
    max_missing_ratio: float


@dataclass(frozen=True)
class BoltPlan:
    mode: str  # auto | lbr | sample | instrument
    policy: str  # fallback | require
    flags: tuple[str, ...]
    instrument_args: tuple[str, ...]  # e.g. the runtime library for a cross target
    work_dir: str
    tools: Mapping[str, str]


@dataclass(frozen=True)
class DistroPlan:
    """A Debian release's bare container that runs the shipped binary (`distros` step)."""

    spec: DistroSpec
    base: BaseSpec  # how mmdebstrap makes its root filesystem
    image: ImagePlan
    runner: tuple[str, ...]  # qemu for a foreign-architecture binary


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
    variants: Mapping[str, Variant]  # in build order; the last one is shipped (before BOLT)
    test: CargoCommand
    test_skipped: str  # why `cargo test` does not run ([test] reason), or "" when it runs
    run: RunPlan
    pgo: PgoPlan | None
    bolt: BoltPlan | None
    workloads: tuple[tuple[str, ...], ...]
    validate_command: tuple[str, ...]
    validate_tolerance: float
    profiling_privileges: bool
    profiling_allow_privileged: bool  # may the perf probe try --privileged at all
    runner: tuple[str, ...]  # runs a target binary in the container (qemu for aarch64)
    device_code: DeviceCode | None
    glibc_floor: str  # the oldest glibc the binary must load on
    sysroot: SysrootPlan | None  # what shipped variants link against (None: the image's glibc)
    distros: tuple[DistroPlan, ...]  # where `distros` runs it; () when the check is off
    distro_validation: str  # why validate.command does not run there; "" when it does
    binary: str
    release_dir: str
    artifact_dir: str
    steps: tuple[Step, ...]

    @property
    def final(self) -> Variant:
        return list(self.variants.values())[-1]

    @property
    def build(self) -> CargoCommand:
        return self.final.build


def base_image_plan(base: BaseSpec) -> ImagePlan:
    digest = content_hash({"kind": "base-rootfs", "spec": base.as_dict()})
    return ImagePlan(f"{IMAGE_REPOSITORY}/base:{base.suite}-{digest[:16]}", digest)


def distro_plan(distro: DistroSpec, flavor: Flavor, base: BaseSpec) -> DistroPlan:
    """A bare `distro.suite` root filesystem (for a foreign architecture: plus that suite's
    qemu-user and the architecture's libc); the base image itself for the base's suite."""
    spec = BaseSpec(
        suite=distro.suite,
        mirror=base.mirror,
        variant=base.variant,
        components=base.components,
        source_date_epoch=base.source_date_epoch,
    )
    runner: tuple[str, ...] = ()
    for arch in flavor.foreign_architectures:
        spec = replace(
            spec,
            include=(*spec.include, distro.emulator_package, f"libc6:{arch}"),
            architectures=(*spec.architectures, arch),
        )
        runner = (f"qemu-{flavor.arch}{distro.emulator_suffix}",)
    if spec == base:
        return DistroPlan(distro, spec, base_image_plan(base), runner)
    digest = content_hash({"kind": "base-rootfs", "spec": spec.as_dict()})
    reference = f"{IMAGE_REPOSITORY}/distro:{distro.suite}-{flavor.arch}-{digest[:16]}"
    return DistroPlan(distro, spec, ImagePlan(reference, digest), runner)


def apt_sources(flavor: Flavor, toolchain: ToolchainSpec) -> AptSources:
    return AptSources(
        components=tuple(c for c in flavor.apt_components if c != "main"),
        architectures=flavor.foreign_architectures,
        suites=(toolchain.sysroot.suite,) if toolchain.sysroot else (),
    )


def toolchain_image_plan(
    flavor: Flavor, toolchain: ToolchainSpec, dockerfile: str, base_image: ImagePlan
) -> ImagePlan:
    key: dict[str, object] = {
        "kind": "toolchain-image",
        "flavor": flavor.name,
        "toolchain": toolchain.flavor_view(flavor.name, flavor.arch),
        "dockerfile": dockerfile,
        "base": base_image.input_hash,
    }
    if apt_sources(flavor, toolchain) != AptSources():
        key["apt_sources"] = apt_sources(flavor, toolchain).as_dict()
    digest = content_hash(key)
    return ImagePlan(f"{IMAGE_REPOSITORY}/{flavor.name}:{toolchain.name}-{digest[:16]}", digest)


def _profile_args() -> list[str]:
    args: list[str] = []
    for key, value in RELEASE_PROFILE.items():
        rendered = json.dumps(value)  # TOML and JSON agree on strings, ints and booleans
        args += ["--config", f"profile.release.{key}={rendered}"]
    return args


def _bolt_mode(options: Options, flavor: Flavor) -> str:
    """auto stays auto where perf can help; a flavor that can only instrument says so.

    lbr and sample profile with perf in the profiling container, which needs the perf
    access that profiling.privileges = false forbids: asking for both is refused here,
    not after the builds that come before BOLT.
    """
    requested = options.bolt_mode
    if requested == "auto":
        return "auto" if len(flavor.bolt_modes) > 1 else flavor.bolt_modes[0]
    if requested not in flavor.bolt_modes:
        raise ConfigError(
            f"bolt.mode {requested} cannot work for the {flavor.name} flavor",
            hint=f"{flavor.name} supports: {', '.join(flavor.bolt_modes)} (or auto).",
        )
    if requested != "instrument" and not options.profiling_privileges:
        sources = options.sources
        raise ConfigError(
            f"bolt.mode {requested} (from {sources.get('bolt.mode', 'default')}) samples "
            "with perf, but profiling.privileges is off (from "
            f"{sources.get('profiling.privileges', 'default')}, e.g. --no-privileged): the "
            "profiling container gets no perf access, so only instrument can work",
            hint="Drop --no-privileged (profiling.privileges = true), or use "
            "--bolt-mode instrument (or auto, which falls back to it).",
        )
    return requested


@dataclass(frozen=True)
class SysrootPlan:
    """Linking (and compiling build scripts' C) against an older glibc than the image's."""

    root: str
    glibc: str  # the sysroot's own glibc release
    floor: str
    multiarch: str  # x86_64-linux-gnu: where the sysroot keeps its libraries
    interpreter: str  # the dynamic loader, as libc.so's linker script names it
    # Where the `glibc-view` step puts the sysroot's libraries with symbol versions above
    # the floor hidden, searched first; "" when the floor is the sysroot's glibc or newer.
    view_dir: str
    link_args: tuple[str, ...]  # rustflags for the linker (gcc as rustc's linker driver)
    cflags_variable: str  # CFLAGS_<target>, which the cc crate reads for the target
    cflags: str


# The glibc libraries Rust's std and C code link against (-lc -lm -lpthread -ldl -lrt -lutil).
GLIBC_LIBRARIES = (
    "libc.so.6",
    "libm.so.6",
    "libpthread.so.0",
    "libdl.so.2",
    "librt.so.1",
    "libutil.so.1",
)
_INTERPRETERS = {"x86_64": "/lib64/ld-linux-x86-64.so.2", "aarch64": "/lib/ld-linux-aarch64.so.1"}


def sysroot_plan(options: Options, flavor: Flavor, toolchain: ToolchainSpec) -> SysrootPlan | None:
    """The toolchain's sysroot when the glibc floor is older than the image's own glibc.

    `--sysroot` alone is not enough with Debian's gcc: it searches its own multiarch
    folder (the image's glibc) before the sysroot, so the start files (-B) and the library
    folders (-L) of the sysroot are named first; a floor older than the sysroot's glibc
    puts the `glibc-view` folder before them all.
    """
    if toolchain.sysroot is None:
        return None
    floor = options.glibc_floor
    if version_tuple(floor) >= version_tuple(toolchain.glibc):
        return None  # the image's own glibc is old enough
    multiarch = f"{flavor.arch}-linux-gnu"
    root = UNPACK_ROOT
    older = version_tuple(floor) < version_tuple(toolchain.sysroot.glibc)
    view_dir = f"{PATHS.root}/glibc-{floor}" if older else ""
    link_args = (
        *((f"-L{view_dir}",) if view_dir else ()),
        f"--sysroot={root}",
        f"-B{root}/usr/lib/{multiarch}/",
        f"-L{root}/usr/lib/{multiarch}",
        f"-L{root}/lib/{multiarch}",
    )
    return SysrootPlan(
        root=root,
        glibc=toolchain.sysroot.glibc,
        floor=floor,
        multiarch=multiarch,
        interpreter=_INTERPRETERS[flavor.arch],
        view_dir=view_dir,
        link_args=tuple(f"-Clink-arg={arg}" for arg in link_args),
        cflags_variable=f"CFLAGS_{flavor.rust_target.replace('-', '_')}",
        # A cross gcc searches its own target headers before the sysroot's: name them first.
        cflags=f"--sysroot={root} -isystem {root}/usr/include/{multiarch} "
        f"-isystem {root}/usr/include",
    )


def _rustflags(
    options: Options, flavor: Flavor, release_dir: str, sysroot: SysrootPlan | None
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the baseline's rustflags, every other variant's)."""
    # Paths in panic messages and debug info must not depend on where we built.
    remap = (
        f"--remap-path-prefix={PATHS.src}={release_dir}",
        f"--remap-path-prefix={PATHS.vendor}=crates",
        f"--remap-path-prefix={PATHS.cargo_home}=cargo-home",
    )
    # The crate's own .cargo/config.toml rustflags come first (ours win where they clash:
    # later -C flags override earlier ones), in every variant, the baseline included.
    crate_flags = options.crate_cargo.rustflags_for(flavor.rust_target)
    # The baseline is plain `cargo build --release`: the image's own glibc, no sysroot.
    linking = sysroot.link_args if sysroot else ()
    return (*crate_flags, *remap), (*crate_flags, *flavor.rustflags(options), *linking, *remap)


def _distro_validation(options: Options, device_code: DeviceCode | None) -> str:
    """Why the distros step only asks the loader, or "" when it runs validate.command too."""
    if options.distro_check == "load":
        return "release.distro_check = load"
    if not options.validate_command:
        return "no validate.command"
    if device_code is not None and device_code.kernels == "runtime":
        # NVRTC/hiprtc come with the vendor's runtime, which a bare system does not have.
        return f"kernels compiled at run time need {device_code.runtime_compiler}"
    return ""


def _feature_args(default_features: bool, features: tuple[str, ...]) -> list[str]:
    args = [] if default_features else ["--no-default-features"]
    return [*args, "--features", ",".join(features)] if features else args


def _pgo_plan(
    options: Options,
    flavor: Flavor,
    *,
    toolchain: ToolchainSpec,
    source: SourceSnapshot,
    image: ImagePlan,
    generate: Variant,
    runs: RunPlan,
    pgo_dir: str,
) -> PgoPlan:
    return PgoPlan(
        profile_key=content_hash(
            {
                "kind": "pgo-profile",
                "source": source.archive_sha256,
                "cargo_lock": source.cargo_lock_sha256,
                "toolchain": toolchain.flavor_view(flavor.name, flavor.arch),
                "image": image.input_hash,
                "build": [generate.build.argv, dict(generate.build.environment)],
                "workloads": [list(w) for w in options.workloads],
                # What the workloads see besides their arguments (the files they read
                # are in the source tree, hashed above).
                # (absent without env/stdin: such keys stay as before these existed)
                **({"run": runs.as_dict()} if runs.configured else {}),
            }
        ),
        raw_dir=f"{pgo_dir}/raw",
        merged=f"{pgo_dir}/merged.profdata",
        profile_file_pattern=f"{pgo_dir}/raw/%m_%p.profraw",
        merge_argv=(
            toolchain.tool("llvm_profdata"),
            "merge",
            "-o",
            f"{pgo_dir}/merged.profdata",
            f"{pgo_dir}/raw",
        ),
        show_argv=(toolchain.tool("llvm_profdata"), "show", f"{pgo_dir}/merged.profdata"),
        max_missing_ratio=options.pgo_max_missing_ratio,
    )


def make_plan(
    options: Options,
    flavor: Flavor,
    *,
    toolchain: ToolchainSpec,
    base: BaseSpec,
    dockerfile: str,
    packages: Mapping[str, str],
    source: SourceSnapshot,
    distros: tuple[DistroSpec, ...] = (),
) -> BuildPlan:
    flavor.validate(options)
    target_cpu = flavor.target_cpu(options)
    if (options.pgo or options.bolt) and not options.workloads:
        raise ConfigError(
            f"{options.config_path}: PGO and BOLT train on workloads, but [train] workloads "
            "is empty",
            hint="Add argument lists for the binary under [train] workloads, or build with "
            "--no-pgo --no-bolt.",
        )
    base_image = base_image_plan(base)
    image = toolchain_image_plan(flavor, toolchain, dockerfile, base_image)
    settings = options.settings_for(flavor.name)
    release_dir = release_dir_name(options.binary, options.version)
    cargo = toolchain.tool("cargo")

    sysroot = sysroot_plan(options, flavor, toolchain)
    baseline_flags, rustflags = _rustflags(options, flavor, release_dir, sysroot)
    feature_args = _feature_args(settings.default_features, settings.features)

    def command(
        verb: str, target_dir: str, flags: tuple[str, ...], *, profile: bool, plain: bool = False
    ) -> CargoCommand:
        argv = [cargo, verb]
        if options.member:  # a workspace member: its binaries, its tests
            argv += ["--package", options.member]
        if verb == "build":
            argv += ["--bin", options.binary]
        argv += [
            "--release",
            "--offline",
            "--locked",
            "--manifest-path",
            f"{PATHS.src}/Cargo.toml",
            "--target",
            flavor.rust_target,
            "--target-dir",
            target_dir,
            *feature_args,
        ]
        if profile:
            argv += _profile_args()
        environment = {
            "SOURCE_DATE_EPOCH": str(options.source_date_epoch),
            # \x1f-separated: flags survive spaces, unlike RUSTFLAGS
            "CARGO_ENCODED_RUSTFLAGS": "\x1f".join(flags),
            "CARGO_HOME": PATHS.cargo_home,
            "TZ": "UTC",
            "LC_ALL": "C.UTF-8",
            **flavor.environment(options),
            # The cc crate forwards -Cprofile-generate/-use to clang (any LLVM major, whose
            # profiles llvm-profdata of ours may not read) but never to GCC: C code from
            # build scripts is compiled by GCC and stays out of the LLVM profile.
            "CC": "gcc",
        }
        if sysroot is not None:  # C for the target sees the floor's headers, not the image's
            environment[sysroot.cflags_variable] = "" if plain else sysroot.cflags
        return CargoCommand(tuple(argv), environment)

    def variant(name: str, flags: tuple[str, ...], *, profile: bool = True) -> Variant:
        target_dir = f"{PATHS.target}/{name}"
        return Variant(
            name,
            command("build", target_dir, flags, profile=profile, plain=not profile),
            f"{target_dir}/{flavor.rust_target}/release/{options.binary}",
        )

    runs = run_plan(options)
    pgo_dir = f"{PATHS.out}/pgo"
    variants = [
        # What `cargo build --release` gives without us: the yardstick for bench and validation.
        variant("baseline", baseline_flags, profile=False),
        variant("release", rustflags),
    ]
    optimized_flags = rustflags
    pgo: PgoPlan | None = None
    if options.pgo:
        generate = variant("pgo-generate", (*rustflags, f"-Cprofile-generate={pgo_dir}/raw"))
        variants.append(generate)
        pgo = _pgo_plan(
            options,
            flavor,
            toolchain=toolchain,
            source=source,
            image=image,
            generate=generate,
            runs=runs,
            pgo_dir=pgo_dir,
        )
        optimized_flags = (
            *optimized_flags,
            f"-Cprofile-use={pgo.merged}",
            "-Cllvm-args=-pgo-warn-missing-function",
        )
    bolt: BoltPlan | None = None
    if options.bolt:
        # BOLT rewrites the layout and needs the linker's relocations to do it.
        optimized_flags = (*optimized_flags, "-Clink-arg=-Wl,--emit-relocs")
        bolt = BoltPlan(
            mode=_bolt_mode(options, flavor),
            instrument_args=flavor.bolt_instrument_args(toolchain),
            policy=options.bolt_policy,
            flags=options.bolt_flags,
            work_dir=f"{PATHS.out}/bolt",
            tools={
                "llvm_bolt": toolchain.tool("llvm_bolt"),
                "perf2bolt": toolchain.tool("perf2bolt"),
                "merge_fdata": toolchain.tool("merge_fdata"),
            },
        )
    if options.pgo or options.bolt:
        variants.append(variant("optimized", optimized_flags))
    final = variants[-1]
    test = command("test", f"{PATHS.target}/{final.name}", optimized_flags, profile=True)
    # Last: a "--" among them passes what follows to the test binaries.
    test = CargoCommand((*test.argv, *options.test_args), test.environment)
    fetch = CargoCommand(
        (
            cargo,
            "vendor",
            "--locked",
            "--versioned-dirs",
            "--manifest-path",
            f"{PATHS.src}/Cargo.toml",
            PATHS.vendor,
        ),
        # A clean CARGO_HOME: the image's one points cargo at the (empty) vendor folder.
        {"CARGO_HOME": f"{PATHS.root}/fetch-home", "TZ": "UTC", "LC_ALL": "C.UTF-8"},
    )

    device_code = flavor.device_code(options)
    steps = steps_of(
        options,
        base_reference=base_image.reference,
        image_reference=image.reference,
        target_cpu=target_cpu,
        device_code=device_code,
        pgo=pgo is not None,
        bolt=(bolt.mode, bolt.flags) if bolt else None,
        optimized=final.name == "optimized",
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
        test_skipped="" if options.test_enabled else options.test_reason.strip(),
        run=runs,
        pgo=pgo,
        bolt=bolt,
        workloads=options.workloads,
        validate_command=options.validate_command,
        validate_tolerance=options.validate_tolerance,
        profiling_privileges=options.profiling_privileges,
        profiling_allow_privileged=options.profiling_allow_privileged,
        runner=flavor.runner,
        device_code=device_code,
        glibc_floor=options.glibc_floor,
        sysroot=sysroot,
        distros=tuple(distro_plan(d, flavor, base) for d in distros)
        if options.distro_check != "off"
        else (),
        distro_validation=_distro_validation(options, device_code),
        binary=options.binary,
        release_dir=release_dir,
        artifact_dir=artifact_dir_name(
            options.binary, options.version, flavor.arch, flavor.artifact_flavor
        )
        + flavor.artifact_suffix(options),
        steps=steps,
    )

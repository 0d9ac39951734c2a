"""What the plan fixes for binaries that start on older systems: the sysroot they link
against (and the glibc view below it), and the Debian releases they are run in."""

from __future__ import annotations

from dataclasses import dataclass, replace

from orchestrator.config.resolve.toolchains import BaseSpec, DistroSpec, ToolchainSpec
from orchestrator.flavors import DeviceCode, Flavor
from orchestrator.model.binaries.elf import version_tuple
from orchestrator.model.hashing import content_hash
from orchestrator.model.layout import PATHS, UNPACK_ROOT
from orchestrator.plan.images import IMAGE_REPOSITORY, ImagePlan, base_image_plan


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


def sysroot_plan(floor: str, flavor: Flavor, toolchain: ToolchainSpec) -> SysrootPlan | None:
    """The toolchain's sysroot when the glibc `floor` (release.glibc_floor) is older than
    the image's own glibc.

    `--sysroot` alone is not enough with Debian's gcc: it searches its own multiarch
    folder (the image's glibc) before the sysroot, so the start files (-B) and the library
    folders (-L) of the sysroot are named first; a floor older than the sysroot's glibc
    puts the `glibc-view` folder before them all.
    """
    if toolchain.sysroot is None:
        return None
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


@dataclass(frozen=True)
class DistroPlan:
    """A Debian release's bare container that runs the shipped binary (`distros` step)."""

    spec: DistroSpec
    base: BaseSpec  # how mmdebstrap makes its root filesystem
    image: ImagePlan
    runner: tuple[str, ...]  # qemu for a foreign-architecture binary


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


def distro_validation(
    distro_check: str, validate_command: tuple[str, ...], device_code: DeviceCode | None
) -> str:
    """Why the distros step only asks the loader, or "" when it runs `validate_command` too
    (`distro_check`: release.distro_check)."""
    if distro_check == "load":
        return "release.distro_check = load"
    if not validate_command:
        return "no validate.command"
    if device_code is not None and device_code.kernels == "runtime":
        # NVRTC/hiprtc come with the vendor's runtime, which a bare system does not have.
        return f"kernels compiled at run time need {device_code.runtime_compiler}"
    return ""

"""aarch64 cross build: GNU cross linker, the arm64 Rust std, and qemu-user to run the result.

Tests, PGO training and validation run the aarch64 binary under qemu in the same
container. BOLT can only profile by instrumentation here (perf samples of an emulated
process would describe qemu, not the binary), with the AArch64 instrumentation runtime.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from orchestrator.config.resolve.toolchains import ToolchainSpec
from orchestrator.errors import ConfigError
from orchestrator.flavors.base import DeviceCode, FlavorView
from orchestrator.model.layout import UNPACK_ROOT

SYSROOT = "/usr/aarch64-linux-gnu"
CROSS_RUNNER = "CROSS_RUNNER"  # cross-rs's name for how target binaries run
QEMU_USER = "qemu-user"  # cross-rs's value for user-mode emulation
QEMU_LD_PREFIX = "QEMU_LD_PREFIX"  # qemu-user's -L, as an environment variable
GENERIC = "generic"  # rustc's armv8-a baseline: runs on every 64-bit Arm Linux machine
_AARCH64_CPU_RE = re.compile(r"^[a-z0-9][a-z0-9_.+-]*$")


class Aarch64Flavor:
    name = "aarch64"
    arch = "aarch64"
    artifact_flavor = "cpu"  # tinyllm-0.1.0-linux-aarch64-cpu, as the seeds name it
    rust_target = "aarch64-unknown-linux-gnu"
    template = "aarch64.Dockerfile.j2"
    apt_components: tuple[str, ...] = ("main",)
    foreign_architectures: tuple[str, ...] = ("arm64",)
    runner: tuple[str, ...] = ("qemu-aarch64", "-L", SYSROOT)
    bolt_modes: tuple[str, ...] = ("instrument",)
    known_cpus: tuple[str, ...] = (GENERIC,)  # other names need the toolchain image's word

    def bolt_instrument_args(self, toolchain: ToolchainSpec) -> tuple[str, ...]:
        # llvm-bolt links its own (x86_64) runtime otherwise; the image unpacks the arm64
        # libbolt-<major>-dev next to it (toolchains/*.toml, [flavors.aarch64.unpack]).
        library = f"{UNPACK_ROOT}/usr/lib/llvm-{toolchain.llvm_major}/lib/libbolt_rt_instr.a"
        return (f"-runtime-instrumentation-lib={library}",)

    def target_cpu(self, view: FlavorView) -> str:
        # build.target_cpu is the x86_64 setting; an x86 level means nothing here.
        cpu = view.target_cpu
        if cpu.startswith("x86-64") or cpu == "native":
            return self.levels(view)[0]
        return cpu

    def rustflags(self, view: FlavorView) -> list[str]:
        return [f"-Ctarget-cpu={self.target_cpu(view)}"]

    def environment(self, view: FlavorView) -> Mapping[str, str]:
        target = self.rust_target.upper().replace("-", "_")
        return {
            f"CARGO_TARGET_{target}_LINKER": "aarch64-linux-gnu-gcc",
            # `cargo test` runs the test binaries through qemu
            f"CARGO_TARGET_{target}_RUNNER": " ".join(self.runner),
            # C from build scripts (cc crate) is compiled for the target, not the host
            f"CC_{self.rust_target.replace('-', '_')}": "aarch64-linux-gnu-gcc",
            f"AR_{self.rust_target.replace('-', '_')}": "aarch64-linux-gnu-ar",
        }

    def test_environment(self, view: FlavorView) -> Mapping[str, str]:
        # Integration tests that start the crate's own binary (CARGO_BIN_EXE_<name>) get
        # "exec format error" without a runner: the host has no binfmt entry, and we
        # register none. cross-rs's images set CROSS_RUNNER (the mode, "qemu-user"), and
        # tests written for cross (ripgrep's tests/util.rs) then run `qemu-<arch> <binary>`
        # without -L: QEMU_LD_PREFIX is where that qemu finds the arm64 loader and libc.
        return {CROSS_RUNNER: QEMU_USER, QEMU_LD_PREFIX: SYSROOT}

    def artifact_suffix(self, view: FlavorView) -> str:
        cpu = self.target_cpu(view)
        return "" if cpu == GENERIC else f"-{cpu}"

    def levels(self, view: FlavorView) -> tuple[str, ...]:
        return view.settings_for(self.name).levels or (GENERIC,)

    def device_code(self, view: FlavorView) -> DeviceCode | None:
        return None

    def validate(self, view: FlavorView) -> None:
        source = view.target_cpu_source
        if view.target_cpu.startswith("x86-64") and not source.startswith(("default", "file")):
            raise ConfigError(
                f"target-cpu {view.target_cpu} is an x86_64 level; the aarch64 flavor "
                "builds for Arm",
                hint="Leave --target-cpu out (generic armv8-a) or name an Arm CPU such as "
                "neoverse-n1; set [flavors.aarch64] levels for releases.",
            )
        cpu = self.target_cpu(view)
        if not _AARCH64_CPU_RE.match(cpu):
            raise ConfigError(f"target-cpu {cpu!r} is not a CPU name rustc accepts")
        if view.settings_for(self.name).gpu_targets:
            raise ConfigError(
                "flavors.aarch64.gpu_targets is set, but aarch64 builds no GPU code",
                hint="gpu_targets belongs under [flavors.cuda] or [flavors.rocm].",
            )

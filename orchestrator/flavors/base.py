"""The one Protocol every flavor (cpu, cuda, rocm, aarch64) implements, and what they share:
the device code of a GPU flavor, and the few options a flavor reads (`FlavorView`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from orchestrator.config.resolve.options import FlavorSettings, Options
from orchestrator.config.resolve.toolchains import ToolchainSpec


@dataclass(frozen=True)
class DeviceCode:
    """The GPU side of a flavor: which targets to compile for and how to check them.

    `list_argv` prints what the image's compiler supports; `parse_supported` reads that.
    """

    kind: str  # "cuda" | "rocm"
    targets: tuple[str, ...]
    list_argv: tuple[str, ...]
    compiler_version_argv: tuple[str, ...]
    # "embedded": device code inside the binary, one per target; "runtime": the program
    # compiles its kernels when it runs, with `runtime_compiler` (libnvrtc, libhiprtc).
    kernels: str = "embedded"
    runtime_compiler: str = ""


@dataclass(frozen=True)
class FlavorView:
    """What a flavor reads of the options: the build's target CPU and the layer that set
    it, and each flavor's `[flavors.<name>]` settings. Built once from `Options` by the
    caller (`from_options`), so that a flavor's methods depend on these alone."""

    target_cpu: str
    target_cpu_source: str  # default, the file, the environment or a flag (Options.sources)
    flavor_settings: Mapping[str, FlavorSettings]

    @classmethod
    def from_options(cls, options: Options) -> FlavorView:
        return cls(
            target_cpu=options.target_cpu,
            target_cpu_source=options.sources.get("build.target_cpu", "default"),
            flavor_settings=options.flavor_settings,
        )

    def settings_for(self, flavor: str) -> FlavorSettings:
        return self.flavor_settings.get(flavor, FlavorSettings())


class Flavor(Protocol):
    @property
    def name(self) -> str:
        """Flavor name as used on the command line and in artifact names."""
        ...

    @property
    def arch(self) -> str:
        """Architecture in artifact names (x86_64, aarch64)."""
        ...

    @property
    def artifact_flavor(self) -> str:
        """The last part of the seeds' artifact name: what the binary runs on (cpu, cuda,
        rocm); `…-linux-aarch64-cpu` for the aarch64 flavor."""
        ...

    @property
    def rust_target(self) -> str:
        """The target triple passed to cargo --target."""
        ...

    @property
    def template(self) -> str:
        """Dockerfile template under images/templates/."""
        ...

    @property
    def apt_components(self) -> tuple[str, ...]:
        """Debian archive components the flavor's packages come from."""
        ...

    @property
    def foreign_architectures(self) -> tuple[str, ...]:
        """dpkg architectures besides amd64 whose packages the image installs."""
        ...

    @property
    def runner(self) -> tuple[str, ...]:
        """Prefix that runs a target binary in the build container; () when native."""
        ...

    @property
    def bolt_modes(self) -> tuple[str, ...]:
        """BOLT profile modes that can work for this target, best first."""
        ...

    @property
    def known_cpus(self) -> tuple[str, ...]:
        """target-cpu names every rustc accepts for this target; the build asks the
        toolchain image's rustc about any other (`rustc --print target-cpus`)."""
        ...

    def bolt_instrument_args(self, toolchain: ToolchainSpec) -> tuple[str, ...]:
        """Extra llvm-bolt arguments for `-instrument` (a cross target's runtime library)."""
        ...

    def target_cpu(self, view: FlavorView) -> str:
        """The -Ctarget-cpu this build uses."""
        ...

    def rustflags(self, view: FlavorView) -> list[str]:
        """Code-generation flags specific to this flavor (target CPU, linker...)."""
        ...

    def environment(self, view: FlavorView) -> Mapping[str, str]:
        """Build environment: cross linker and C compiler, runner, GPU target lists."""
        ...

    def test_environment(self, view: FlavorView) -> Mapping[str, str]:
        """Added to `cargo test`'s environment only: how a test that starts the crate's own
        binary runs it (cross-rs's CROSS_RUNNER, qemu's loader prefix); {} when native."""
        ...

    def artifact_suffix(self, view: FlavorView) -> str:
        """Appended to the artifact name for a non-default variant (e.g. "-v3")."""
        ...

    def levels(self, view: FlavorView) -> tuple[str, ...]:
        """The CPU levels `release` builds for this flavor."""
        ...

    def device_code(self, view: FlavorView) -> DeviceCode | None:
        """GPU targets and how to check them; None for CPU-only flavors."""
        ...

    def validate(self, view: FlavorView) -> None:
        """Raise ConfigError when the options make no sense for this flavor."""
        ...

"""What the x86_64 flavors (cpu, cuda, rocm) share: CPU levels and native execution."""

from __future__ import annotations

import re
from collections.abc import Mapping

from orchestrator.config.resolve.toolchains import ToolchainSpec
from orchestrator.config.suggest import suggest
from orchestrator.errors import ConfigError
from orchestrator.flavors.base import DeviceCode, FlavorView

# rustc's x86-64 micro-architecture levels plus any named CPU rustc knows (znver4, ...).
_CPU_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")

PORTABLE_LEVEL = "x86-64-v2"
# The x86-64 psABI micro-architecture levels: every rustc knows them, and no other CPU
# name rustc knows starts with "x86", so anything else spelt that way is a typo.
PSABI_LEVELS = ("x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4")
_LEVEL_RE = re.compile(r"^x86-64-v([0-9]+)$")


def short_level(target_cpu: str) -> str:
    """x86-64-v3 -> v3; CPU names stay as they are (znver4)."""
    return target_cpu.removeprefix("x86-64-")


class X86Flavor:
    """An x86_64 host binary; GPU flavors add device code on top."""

    name = "cpu"
    arch = "x86_64"

    @property
    def artifact_flavor(self) -> str:
        return self.name

    rust_target = "x86_64-unknown-linux-gnu"
    template = "cpu.Dockerfile.j2"
    apt_components: tuple[str, ...] = ("main",)
    foreign_architectures: tuple[str, ...] = ()
    runner: tuple[str, ...] = ()
    bolt_modes: tuple[str, ...] = ("lbr", "sample", "instrument")
    # Known to every rustc: only other names need the toolchain image's word.
    known_cpus: tuple[str, ...] = (*PSABI_LEVELS, "native")

    def bolt_instrument_args(self, toolchain: ToolchainSpec) -> tuple[str, ...]:
        return ()  # the runtime library that comes with llvm-bolt is x86_64's

    def target_cpu(self, view: FlavorView) -> str:
        return view.target_cpu

    def rustflags(self, view: FlavorView) -> list[str]:
        return [f"-Ctarget-cpu={self.target_cpu(view)}"]

    def environment(self, view: FlavorView) -> Mapping[str, str]:
        return {}

    def test_environment(self, view: FlavorView) -> Mapping[str, str]:
        return {}  # native: tests start the crate's binaries directly

    def artifact_suffix(self, view: FlavorView) -> str:
        cpu = self.target_cpu(view)
        return "" if cpu == PORTABLE_LEVEL else f"-{short_level(cpu)}"

    def levels(self, view: FlavorView) -> tuple[str, ...]:
        return view.settings_for(self.name).levels or (view.target_cpu,)

    def device_code(self, view: FlavorView) -> DeviceCode | None:
        return None

    def validate(self, view: FlavorView) -> None:
        cpu = self.target_cpu(view)
        if not _CPU_NAME_RE.match(cpu):
            raise ConfigError(
                f"target-cpu {cpu!r} is not a CPU name rustc accepts",
                hint="Use x86-64-v2 (portable), x86-64-v3, x86-64-v4, a CPU name such as "
                "znver4, or native for local builds.",
            )
        _check_level(cpu)
        if view.settings_for(self.name).gpu_targets and self.device_code(view) is None:
            raise ConfigError(
                f"flavors.{self.name}.gpu_targets is set, but {self.name} builds no GPU code",
                hint="gpu_targets belongs under [flavors.cuda] or [flavors.rocm].",
            )


def _check_level(cpu: str) -> None:
    """Refuse at plan time what no rustc accepts: x86-64-v5 and up, misspelt levels."""
    if cpu in PSABI_LEVELS or not cpu.startswith("x86"):
        return  # a level, or a CPU name only the toolchain image's rustc can judge
    level = _LEVEL_RE.match(cpu)
    if level is not None and int(level.group(1)) > 4:
        problem = f"there is no level v{level.group(1)}: the x86-64 psABI levels stop at v4"
    elif level is not None and int(level.group(1)) == 1:
        problem = "level v1 is spelt 'x86-64'"
    else:
        match = suggest(cpu, PSABI_LEVELS)
        problem = "not an x86-64 level" + (f"; did you mean {match!r}?" if match else "")
    raise ConfigError(
        f"target-cpu {cpu!r}: {problem}",
        hint="Use x86-64-v2 (portable), x86-64-v3 or x86-64-v4, a CPU name such as znver4, "
        "or native for local builds (rustc alone would only warn, and build for a generic CPU).",
    )

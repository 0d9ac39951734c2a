"""x86_64 CPU builds, portable by default (x86-64-v2)."""

from __future__ import annotations

import re

from orchestrator.errors import ConfigError
from orchestrator.options import Options

# rustc's x86-64 micro-architecture levels plus any named CPU rustc knows (znver4, ...).
_CPU_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")


PORTABLE_LEVEL = "x86-64-v2"


def short_level(target_cpu: str) -> str:
    """x86-64-v3 -> v3; CPU names stay as they are (znver4)."""
    return target_cpu.removeprefix("x86-64-")


class CpuFlavor:
    name = "cpu"
    arch = "x86_64"
    rust_target = "x86_64-unknown-linux-gnu"
    template = "cpu.Dockerfile.j2"

    def extra_packages(self) -> dict[str, str]:
        return {}

    def rustflags(self, options: Options) -> list[str]:
        return [f"-Ctarget-cpu={options.target_cpu}"]

    def artifact_suffix(self, options: Options) -> str:
        if options.target_cpu == PORTABLE_LEVEL:
            return ""
        return f"-{short_level(options.target_cpu)}"

    def levels(self, options: Options) -> tuple[str, ...]:
        return options.settings_for(self.name).levels or (options.target_cpu,)

    def validate(self, options: Options) -> None:
        if not _CPU_NAME_RE.match(options.target_cpu):
            raise ConfigError(
                f"build.target_cpu = {options.target_cpu!r} is not a CPU name rustc accepts",
                hint="Use x86-64-v2 (portable), x86-64-v3, x86-64-v4, a CPU name such as "
                "znver4, or native for local builds.",
            )

"""The one Protocol every flavor (cpu, cuda, rocm, aarch64) implements."""

from __future__ import annotations

from typing import Protocol

from orchestrator.options import Options


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
    def rust_target(self) -> str:
        """The target triple passed to cargo --target."""
        ...

    @property
    def template(self) -> str:
        """Dockerfile template under images/templates/."""
        ...

    def extra_packages(self) -> dict[str, str]:
        """Debian packages (name -> exact version) on top of the toolchain's."""
        ...

    def rustflags(self, options: Options) -> list[str]:
        """Code-generation flags specific to this flavor (target CPU, linker...)."""
        ...

    def artifact_suffix(self, options: Options) -> str:
        """Appended to the artifact name for a non-default variant (e.g. "-v3")."""
        ...

    def levels(self, options: Options) -> tuple[str, ...]:
        """The variants `release` builds for this flavor (CPU levels for cpu)."""
        ...

    def validate(self, options: Options) -> None:
        """Raise ConfigError when the options make no sense for this flavor."""
        ...

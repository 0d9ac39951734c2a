"""Fixed paths inside build containers and the artifact naming scheme.

Fixed container paths are one half of reproducibility: the same source at the same
path with the same flags gives the same bytes. `--remap-path-prefix` is the other half.
"""

from __future__ import annotations

from dataclasses import dataclass

BUILDER_UID = 1000


@dataclass(frozen=True)
class ContainerPaths:
    root: str = "/build"
    src: str = "/build/src"
    vendor: str = "/build/vendor"
    target: str = "/build/target"
    cargo_home: str = "/build/cargo-home"
    out: str = "/build/out"


PATHS = ContainerPaths()

# Where toolchain images unpack (dpkg-deb -x) packages they must not install, such as
# another architecture's copy of a package the image already has.
UNPACK_ROOT = "/opt/orchestrator/unpack"


def release_dir_name(name: str, version: str) -> str:
    return f"{name}-{version}"


def artifact_dir_name(name: str, version: str, arch: str, flavor: str) -> str:
    """The seeds' naming: <name>-<version>-linux-<arch>-<flavor>."""
    return f"{name}-{version}-linux-{arch}-{flavor}"

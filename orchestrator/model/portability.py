"""What an artifact needs from the machine it runs on: glibc, shared libraries, CPU features."""

from __future__ import annotations

import re
from dataclasses import dataclass

_GLIBC_RE = re.compile(r"Name: GLIBC_(\d+(?:\.\d+)+)")
_NEEDED_RE = re.compile(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]")
_FEATURE_RE = re.compile(r'^target_feature="([^"]+)"$', re.M)


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


@dataclass(frozen=True)
class Portability:
    target: str
    target_cpu: str
    glibc_max: str | None  # highest GLIBC_x.y symbol version the binary needs
    needed: tuple[str, ...]  # DT_NEEDED
    cpu_features: tuple[str, ...]

    def as_dict(self) -> dict[str, object]:
        return {
            "target": self.target,
            "target_cpu": self.target_cpu,
            "glibc_max": self.glibc_max,
            "needed": list(self.needed),
            "cpu_features": list(self.cpu_features),
        }

    def glibc_above(self, floor: str) -> bool:
        return self.glibc_max is not None and version_tuple(self.glibc_max) > version_tuple(floor)


def parse(
    *, target: str, target_cpu: str, version_info: str, dynamic: str, rustc_cfg: str
) -> Portability:
    """From `readelf --version-info`, `readelf --dynamic` and `rustc --print cfg`."""
    versions = sorted(set(_GLIBC_RE.findall(version_info)), key=version_tuple)
    return Portability(
        target=target,
        target_cpu=target_cpu,
        glibc_max=versions[-1] if versions else None,
        needed=tuple(_NEEDED_RE.findall(dynamic)),
        cpu_features=tuple(sorted(_FEATURE_RE.findall(rustc_cfg))),
    )

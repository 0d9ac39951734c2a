"""When a crate binds CUDA: at build time (linked against a toolkit) or at run time (it
loads libcuda and libnvrtc itself), read from cargo metadata's resolved graph.

cudarc is the crate that matters here. Its releases 0.10 to 0.14 load the libraries
with libloading unless the `dynamic-linking` or `static-linking` feature asks to link;
from 0.15 that loading is the default `dynamic-loading` feature. Releases before 0.10
(no libloading dependency) linked in their build script. Its `cuda-XXYY0` feature picks
the CUDA API the bindings call: for a run-time binding that is what the driver on the
user's machine must offer, not a toolkit the build needs. Strings in the binary cannot
tell: cudarc 0.11 builds the library names with `format!`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.flavors.gpu import cudarc_cuda_version

LINK_FEATURES = ("dynamic-linking", "static-linking")
LOADER = "libloading"


@dataclass(frozen=True)
class CudaBinding:
    crate: str  # "cudarc 0.11.9"
    at_run_time: bool
    cuda_api: str | None  # "12.5", from the cuda-12050 feature; None: the build system's
    feature: str | None  # "cuda-12050"
    why: str  # what in the graph says so
    runtime_compiler: bool  # its nvrtc feature is on: it can compile kernels when it runs


def _version_key(version: str | None) -> tuple[int, ...]:
    return tuple(int(part) for part in (version or "0").split("."))


def cuda_bindings(metadata: Mapping[str, Any]) -> list[CudaBinding]:
    """Every cudarc in the resolved graph, as resolved for this build's features."""
    packages = {p["id"]: p for p in metadata.get("packages", [])}
    found = []
    for node in (metadata.get("resolve") or {}).get("nodes", []):
        package = packages.get(node["id"], {})
        if package.get("name") != "cudarc":
            continue
        features = list(node.get("features", []))
        linked = [f for f in features if f in LINK_FEATURES]
        loader = any(
            packages.get(dependency, {}).get("name") == LOADER
            for dependency in node.get("dependencies", [])
        )
        if linked:
            why = f"feature {linked[0]}: linked when built"
        elif loader:
            why = f"loads libcuda and libnvrtc with {LOADER} when it runs (no linking feature)"
        else:
            why = f"no {LOADER} dependency: its build script links the libraries"
        version = cudarc_cuda_version(features)
        found.append(
            CudaBinding(
                crate=f"cudarc {package.get('version', '?')}",
                at_run_time=loader and not linked,
                cuda_api=version,
                feature=next((f for f in features if re.fullmatch(r"cuda-\d{5}", f)), None),
                why=why,
                runtime_compiler="nvrtc" in features,
            )
        )
    return found


def run_time_requirement(bindings: list[CudaBinding]) -> CudaBinding | None:
    """The run-time binding that asks the most of the driver (the newest CUDA API)."""
    loading = [b for b in bindings if b.at_run_time]
    return max(loading, key=lambda b: _version_key(b.cuda_api), default=None)


def driver_cuda_version(nvidia_smi: str) -> str | None:
    """ "12.8" from nvidia-smi's banner line "... CUDA Version: 12.8 |"."""
    match = re.search(r"CUDA Version:\s*(\d+\.\d+)", nvidia_smi)
    return match.group(1) if match else None


def driver_serves(driver: str, needed: str) -> bool:
    """A driver serves every CUDA API up to its own version."""
    return _version_key(driver) >= _version_key(needed)

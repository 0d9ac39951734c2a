"""GPU targets: the naming rules, what the image's compiler supports, what a binary embeds.

The parsers here are pure so they are unit-tested against real tool output; the
pipeline runs the commands in the build container and hands their output over.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable

from orchestrator.errors import ConfigError, OrchestratorError


class GpuTargetError(OrchestratorError):
    exit_code = 31
    default_hint = (
        "Set flavors.<cuda|rocm>.gpu_targets in orchestrator.toml to targets the image's "
        "compiler lists (the error names them)."
    )


class DeviceCodeMissingError(OrchestratorError):
    exit_code = 32
    default_hint = (
        "The crate's build script must compile its kernels for every target in "
        "CUDAARCHS / AMDGPU_TARGETS, which the build sets from gpu_targets."
    )


CUDA_TARGET_RE = re.compile(r"^sm_[1-9][0-9]+a?$")
ROCM_TARGET_RE = re.compile(r"^gfx[0-9]{2,4}[a-z]?$")

DEFAULT_CUDA_TARGETS = ("sm_80", "sm_86", "sm_89", "sm_90")  # A100, A40/RTX 30, L4/L40, H100
DEFAULT_ROCM_TARGETS = ("gfx90a", "gfx1030", "gfx1100")  # MI200, RDNA2, RDNA3

_OFFLOAD_BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"


def check_target_names(flavor: str, targets: Iterable[str], pattern: re.Pattern[str]) -> None:
    targets = list(targets)
    if not targets:
        raise ConfigError(
            f"flavors.{flavor}.gpu_targets is empty: the binary would carry no device code",
            hint="List at least one target, or leave the key out for the default list.",
        )
    wrong = [t for t in targets if not pattern.match(t)]
    if wrong:
        example = "sm_80, sm_90" if flavor == "cuda" else "gfx90a, gfx1100"
        raise ConfigError(
            f"flavors.{flavor}.gpu_targets: {', '.join(map(repr, wrong))} "
            f"{'is' if len(wrong) == 1 else 'are'} not a {flavor} target name",
            hint=f"Targets look like {example}.",
        )
    duplicates = sorted({t for t in targets if targets.count(t) > 1})
    if duplicates:
        raise ConfigError(f"flavors.{flavor}.gpu_targets lists {', '.join(duplicates)} twice")


def cuda_supported(list_gpu_code: str) -> set[str]:
    """Targets from `nvcc --list-gpu-code` (one per line: sm_50 ... sm_90a)."""
    return {
        line.strip() for line in list_gpu_code.splitlines() if CUDA_TARGET_RE.match(line.strip())
    }


def cuda_embedded(list_elf: str) -> set[str]:
    """sm targets from `cuobjdump --list-elf`: `ELF file    1: tinyllm.1.sm_80.cubin`."""
    return set(re.findall(r"\.(sm_[0-9]+a?)\.cubin", list_elf))


def rocm_supported(cpu_help: str) -> set[str]:
    """gfx processors from `llc -march=amdgcn -mcpu=help` (lines like `  gfx90a - ...`)."""
    return set(re.findall(r"^\s*(gfx[0-9]{2,4}[a-z]?)\s+- Select", cpu_help, re.MULTILINE))


def offload_bundle_targets(data: bytes) -> set[str]:
    """gfx targets of every clang offload bundle inside `data` (a binary or a .hsaco).

    The format: the 24-byte magic, a little-endian u64 entry count, then per entry
    u64 offset, u64 size, u64 id length and the id, e.g. `hipv4-amdgcn-amd-amdhsa--gfx90a`.
    """
    found: set[str] = set()
    start = data.find(_OFFLOAD_BUNDLE_MAGIC)
    while start >= 0:
        cursor = start + len(_OFFLOAD_BUNDLE_MAGIC)
        try:
            (count,) = struct.unpack_from("<Q", data, cursor)
            cursor += 8
            for _ in range(min(count, 1024)):
                _offset, _size, id_length = struct.unpack_from("<QQQ", data, cursor)
                cursor += 24
                entry_id = data[cursor : cursor + id_length].decode("ascii", "replace")
                cursor += id_length
                if "amdgcn" in entry_id:
                    # the target id may carry features: gfx90a:xnack-
                    found.add(entry_id.rsplit("--", 1)[-1].split(":", 1)[0])
        except struct.error:
            pass  # a stray copy of the magic string, not a bundle
        start = data.find(_OFFLOAD_BUNDLE_MAGIC, start + 1)
    return found


def compiler_release(version_output: str) -> str:
    """The line of `nvcc --version` / `hipcc --version` that names the release."""
    for line in version_output.splitlines():
        if re.search(r"HIP version|release \d", line):
            return line.strip()
    return version_output.strip().splitlines()[0] if version_output.strip() else ""


def require_supported(
    flavor: str, compiler: str, wanted: Iterable[str], supported: set[str]
) -> None:
    missing = [t for t in wanted if t not in supported]
    if missing:
        raise GpuTargetError(
            f"{compiler} in the {flavor} image cannot compile for {', '.join(missing)}; "
            f"it supports: {', '.join(sorted(supported, key=_target_order))}"
        )


def require_embedded(artifact: str, wanted: Iterable[str], embedded: set[str]) -> None:
    missing = [t for t in wanted if t not in embedded]
    if missing:
        raise DeviceCodeMissingError(
            f"{artifact} carries no device code for {', '.join(missing)} "
            f"(found: {', '.join(sorted(embedded, key=_target_order)) or 'none'})"
        )


def _target_order(target: str) -> tuple[int, str]:
    digits = re.sub(r"[^0-9]", "", target)
    return (int(digits) if digits else 0, target)

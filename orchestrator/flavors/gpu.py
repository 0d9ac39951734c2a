"""GPU targets: the naming rules, what the image's compiler supports, what a binary embeds.

The parsers here are pure so they are unit-tested against real tool output; the
pipeline runs the commands in the build container and hands their output over.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable

from orchestrator.config.suggest import suggest
from orchestrator.errors import ConfigError, OrchestratorError


class GpuTargetError(OrchestratorError):
    exit_code = 31
    summary = "a GPU target the image's nvcc/hipcc does not support"
    default_hint = (
        "Set flavors.<cuda|rocm>.gpu_targets in orchestrator.toml to targets the image's "
        "compiler lists (the error names them)."
    )


class DeviceCodeMissingError(OrchestratorError):
    exit_code = 32
    summary = "a GPU binary lacks device code for a requested target"
    default_hint = (
        "The crate's build script must compile its kernels for every target in "
        "CUDAARCHS / AMDGPU_TARGETS, which the build sets from gpu_targets."
    )


# Real names, as `nvcc --list-gpu-code` prints them: sm_90, sm_90a, sm_100f.
CUDA_TARGET_RE = re.compile(r"^sm_[1-9][0-9]+[af]?$")

DEFAULT_CUDA_TARGETS = ("sm_80", "sm_86", "sm_89", "sm_90")  # A100, A40/RTX 30, L4/L40, H100
DEFAULT_ROCM_TARGETS = ("gfx90a", "gfx1030", "gfx1100")  # MI200, RDNA2, RDNA3

# Every real GPU architecture any nvcc (CUDA 11 to 13) or LLVM knows, checked when the plan
# is made so that a typo fails at once, not after the ~6-minute GPU image build. Whether
# the pinned compiler supports a known name is still the gpu-targets step's question.
# A toolchain pin that moves to a compiler with newer GPUs adds them here.
# Fermi and Kepler are real names today's nvcc no longer compiles for: the compiler check
# says so (exit 31) instead of calling them typos.
_CUDA_SM: tuple[int, ...] = (20, 21, 30, 32, 35, 37)  # Fermi, Kepler
_CUDA_SM += (50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 88, 89, 90)  # Maxwell to Hopper
_CUDA_SM += (100, 101, 103, 110, 120, 121)  # Blackwell
KNOWN_CUDA_TARGETS = frozenset(
    [f"sm_{n}" for n in _CUDA_SM]
    + [f"sm_{n}a" for n in _CUDA_SM if n >= 90]  # arch-specific features (Hopper on)
    + [f"sm_{n}f" for n in _CUDA_SM if n >= 100]  # family-specific features (Blackwell on)
)
_GFX: tuple[str, ...] = ("600", "601", "602", "700", "701", "702", "703", "704", "705")  # GCN 1-2
_GFX += ("801", "802", "803", "805", "810", "900", "902", "904", "906", "908", "909")  # GCN 3-5
_GFX += ("90a", "90c", "940", "941", "942", "950")  # CDNA 2-4 (gfx90c: an APU)
_GFX += ("1010", "1011", "1012", "1013", "1030", "1031", "1032", "1033", "1034", "1035", "1036")
_GFX += ("1100", "1101", "1102", "1103", "1150", "1151", "1152", "1153")  # RDNA 3, 3.5
_GFX += ("1200", "1201", "1250", "1251")  # RDNA 4, and gfx125x
KNOWN_ROCM_TARGETS = frozenset(f"gfx{name}" for name in _GFX)
KNOWN_TARGETS = {"cuda": KNOWN_CUDA_TARGETS, "rocm": KNOWN_ROCM_TARGETS}
_EXAMPLES = {"cuda": "sm_80, sm_90, sm_90a", "rocm": "gfx90a, gfx942, gfx1100"}

_OFFLOAD_BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"


def _why_unknown(flavor: str, target: str) -> str:
    """Why `target` is no target of `flavor`, with the closest known name if one is close."""
    virtual = re.fullmatch(r"compute_([0-9]+[af]?)", target)
    if flavor == "cuda" and virtual:
        # compute_XX is PTX for the driver to compile later: no device code to check.
        return (
            f"{target!r} is a virtual (PTX) architecture, not a cuda target name; "
            f"gpu_targets lists real ones: did you mean 'sm_{virtual.group(1)}'?"
        )
    other = next((f for f, known in KNOWN_TARGETS.items() if target in known), None)
    if other is not None:
        return f"{target!r} is a {other} target name, not a {flavor} target name"
    match = suggest(target, sorted(KNOWN_TARGETS[flavor]))
    close = f"; did you mean {match!r}?" if match else ""
    return f"{target!r} is not a {flavor} target name{close}"


def check_target_names(flavor: str, targets: Iterable[str]) -> None:
    """Refuse, before any image is built, a list no compiler could ever build for."""
    targets = list(targets)
    if not targets:
        raise ConfigError(
            f"flavors.{flavor}.gpu_targets is empty: the binary would carry no device code",
            hint="List at least one target, or leave the key out for the default list.",
        )
    wrong = [t for t in targets if t not in KNOWN_TARGETS[flavor]]
    if wrong:
        raise ConfigError(
            f"flavors.{flavor}.gpu_targets: " + "; ".join(_why_unknown(flavor, t) for t in wrong),
            hint=f"{flavor} targets look like {_EXAMPLES[flavor]}; the gpu-targets step "
            "of a build lists the ones the pinned compiler supports.",
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
    return set(re.findall(r"\.(sm_[0-9]+[af]?)\.cubin", list_elf))


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


KERNEL_MODES = ("embedded", "runtime")


def check_kernels_mode(flavor: str, kernels: str) -> None:
    if kernels not in KERNEL_MODES:
        raise ConfigError(
            f"flavors.{flavor}.kernels = {kernels!r}: expected one of {', '.join(KERNEL_MODES)}",
            hint='"embedded": the build compiles kernels into the binary (checked per target); '
            '"runtime": the program compiles them when it runs (NVRTC, hiprtc).',
        )


GPU_MODES = ("auto", "require", "off")


def check_gpu_mode(flavor: str, gpu: str) -> None:
    if gpu not in GPU_MODES:
        raise ConfigError(
            f"flavors.{flavor}.gpu = {gpu!r}: expected one of {', '.join(GPU_MODES)}",
            hint='"auto": give the GPU containers the engine\'s GPU where it has one; '
            '"require": fail without one; "off": never pass one.',
        )


def runtime_compiler_use(needed: Iterable[str], binary: bytes, library: str) -> list[str]:
    """How a binary reaches `library` (libnvrtc, libhiprtc): linked (DT_NEEDED) or named for
    dlopen (cudarc and libloading keep the file name as a string in the binary)."""
    found = [f"DT_NEEDED {name}" for name in needed if name.startswith(library)]
    pattern = re.compile(re.escape(library.encode()) + rb"[A-Za-z0-9_.\-]*\.so[0-9.]*")
    found += sorted(
        {f"dlopen name {m.group().decode()}" for m in pattern.finditer(binary)} - set(found)
    )
    return found


# cudarc picks the CUDA API it binds with a feature: cuda-12040 is CUDA 12.4.
_CUDARC_FEATURE = re.compile(r"^cuda-(\d{2})(\d{2})0$")


def cudarc_cuda_version(features: Iterable[str]) -> str | None:
    """The CUDA release a cudarc build targets ("12.4"), from its resolved features; None
    when it picks none (cuda-version-from-build-system, or no cudarc)."""
    for feature in features:
        match = _CUDARC_FEATURE.match(feature)
        if match:
            return f"{int(match.group(1))}.{int(match.group(2))}"
    return None


def nvcc_release(compiler_line: str) -> str | None:
    """ "12.4" from nvcc's "Cuda compilation tools, release 12.4, V12.4.131"."""
    match = re.search(r"release (\d+\.\d+)", compiler_line)
    return match.group(1) if match else None

"""How a cuda build's crates bind CUDA (cudarc), from the resolved crate graph.

Linked when built: its cuda-XXYY0 feature must name the image's toolkit release, or the
binary calls an API the toolkit lacks (GpuTargetError, exit 31). Loaded when it runs:
building needs no toolkit, so no release has to match; the API it names is what the
driver of the machine it runs on must serve, compared here where the builder has a GPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.execute.steps.metadata import cargo_metadata
from orchestrator.execute.steps.pipeline import Pipeline
from orchestrator.flavors.cuda_binding import (
    CudaBinding,
    cuda_bindings,
    driver_cuda_version,
    driver_serves,
    run_time_requirement,
)
from orchestrator.flavors.gpu import GpuTargetError, nvcc_release
from orchestrator.model.documents.records import CudaRuntimeInfo
from orchestrator.plan.steps import StepName
from orchestrator.progress.reporter import StepLog

NO_GPU = "not checked (no GPU)"
# Without nvidia-smi (every image made here) the shell says 127: no GPU to ask.
NVIDIA_SMI = ["sh", "-c", "command -v nvidia-smi >/dev/null || exit 127; exec nvidia-smi"]


def toolkit_check(binding: CudaBinding, toolkit: str | None) -> str:
    """What the build-time check concluded; GpuTargetError where a linked binding names
    another release than the image's toolkit."""
    if binding.at_run_time:
        return f"skipped: {binding.crate} binds CUDA at run time: no toolkit release has to match"
    if binding.cuda_api is None:
        return f"{binding.crate} takes its CUDA release from the build system's toolkit"
    if toolkit is None:
        return f"not checked: the image's toolkit release is unknown ({binding.crate})"
    if binding.cuda_api != toolkit:
        raise GpuTargetError(
            f"{binding.crate} is linked for CUDA {binding.cuda_api} (feature "
            f"{binding.feature}; {binding.why}), but the image's toolkit is CUDA {toolkit}",
            hint=f"Enable cudarc's feature for {toolkit} (e.g. "
            f"cuda-{''.join(part.zfill(2) for part in toolkit.split('.'))}0) in the cuda "
            "flavor's features, or cuda-version-from-build-system; or leave its linking "
            "features off so that it loads CUDA at run time.",
        )
    return f"CUDA {toolkit}: the image's toolkit release"


def driver_check(needed: str | None, driver: str | None) -> str:
    if driver is None:
        return NO_GPU
    if needed is None:
        return f"driver serves CUDA {driver}; the binary names no CUDA API release"
    if driver_serves(driver, needed):
        return f"ok: the driver serves CUDA {driver} >= {needed}"
    return f"fails: the driver serves CUDA {driver} < {needed}, the API the binary calls"


def builder_driver(pipeline: Pipeline, log: StepLog) -> str | None:
    """The CUDA release the build container's GPU driver serves; None without a GPU."""
    lines: list[str] = []
    log.command(NVIDIA_SMI)
    code = pipeline.box.exec(NVIDIA_SMI, on_output=lines.append)
    for line in lines:
        log.line(line)
    return driver_cuda_version("\n".join(lines)) if code == 0 else None


def cuda_runtime_record(
    bindings: list[CudaBinding], toolkit: str | None, driver: str | None
) -> CudaRuntimeInfo | None:
    """The record for build.json: the binding that asks the most of the driver, or the
    first linked one; every linked one is checked against the toolkit."""
    checks = {binding: toolkit_check(binding, toolkit) for binding in bindings}
    chosen = run_time_requirement(bindings) or (bindings[0] if bindings else None)
    if chosen is None:
        return None
    return CudaRuntimeInfo(
        crate=chosen.crate,
        binding="run time" if chosen.at_run_time else "build time",
        why=chosen.why,
        cuda_api=chosen.cuda_api,
        nvrtc=chosen.runtime_compiler,
        toolkit_check=checks[chosen],
        driver_cuda=driver,
        driver_check=driver_check(chosen.cuda_api, driver),
    )


def check_cuda_binding(pipeline: Pipeline, log: StepLog) -> CudaRuntimeInfo | None:
    """The cuda flavor's CUDA binding, checked and kept for build.json and the kernels check."""
    device = pipeline.plan.device_code
    if device is None or device.kind != "cuda":
        return None
    metadata: Mapping[str, Any] = cargo_metadata(pipeline, log, StepName.DEVICE_CODE)
    bindings = cuda_bindings(metadata)
    if not bindings:
        return None
    toolkit = nvcc_release(str((pipeline.state.gpu or {}).get("compiler", "")))
    record = cuda_runtime_record(bindings, toolkit, builder_driver(pipeline, log))
    if record is None:
        return None
    log.line(f"{record.crate} binds CUDA at {record.binding}: {record.why}")
    log.line(f"toolkit check: {record.toolkit_check}")
    needed = f"CUDA {record.cuda_api}" if record.cuda_api else "no CUDA release named"
    log.line(f"needs at run time: {needed}; driver check: {record.driver_check}")
    if (record.driver_check or "").startswith("fails"):
        # The artifact is for other machines too: say so loudly, ship it still.
        log.warn(f"this builder's GPU cannot run the binary's CUDA calls: {record.driver_check}")
    pipeline.state.cuda_runtime = record
    return record

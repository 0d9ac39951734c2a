"""GPU flavors' two checks, run in the build container: before building, that the image's
compiler supports every requested target; after, that the binary embeds device code for each.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from orchestrator.errors import StepFailedError
from orchestrator.execute.steps.commands import fetch_file, run
from orchestrator.execute.steps.pipeline import Pipeline
from orchestrator.execute.verdict.cuda_runtime import check_cuda_binding
from orchestrator.execute.verdict.gpu_path import record_gpu_path
from orchestrator.flavors import DeviceCode
from orchestrator.flavors.gpu import (
    DeviceCodeMissingError,
    compiler_release,
    cuda_embedded,
    cuda_supported,
    offload_bundle_targets,
    require_embedded,
    require_supported,
    rocm_supported,
    runtime_compiler_use,
)
from orchestrator.model.documents.records import CudaRuntimeInfo
from orchestrator.plan.steps import StepName
from orchestrator.progress.reporter import StepLog


def check_gpu_targets(pipeline: Pipeline, device: DeviceCode, log: StepLog) -> dict[str, object]:
    box = pipeline.box
    version = run(box, device.compiler_version_argv, log, StepName.GPU_TARGETS, keep_output=True)
    listing = run(box, device.list_argv, log, StepName.GPU_TARGETS, keep_output=True)
    if device.kind == "cuda":
        compiler, supported = "nvcc", cuda_supported(listing)
    else:
        compiler, supported = "hipcc (clang 17)", rocm_supported(listing)
    require_supported(pipeline.plan.flavor, compiler, device.targets, supported)
    log.detail = f"{compiler} supports all {len(device.targets)} targets"
    return {
        "kind": device.kind,
        "requested": list(device.targets),
        "compiler": compiler_release(version),
        "supported": sorted(supported),
    }


def check_runtime_kernels(
    pipeline: Pipeline,
    device: DeviceCode,
    binary: str,
    log: StepLog,
    cuda: CudaRuntimeInfo | None = None,
) -> dict[str, object]:
    """kernels = "runtime": the binary must reach the runtime compiler (linked, named for
    dlopen, or loaded by a crate the graph says binds CUDA at run time with NVRTC on), and
    which versions of it the image holds is recorded."""
    box, step, library = pipeline.box, StepName.DEVICE_CODE, device.runtime_compiler
    dynamic = run(box, ["readelf", "--dynamic", "--wide", binary], log, step, keep_output=True)
    needed = re.findall(r"Shared library: \[([^\]]+)\]", dynamic)
    local = fetch_file(box, binary, pipeline.scratch / step)
    uses = runtime_compiler_use(needed, local.read_bytes(), library)
    local.unlink()
    if not uses and cuda is not None and cuda.binding == "run time" and cuda.nvrtc:
        # cudarc 0.11 builds the library's file name with format!: no string to find
        uses = [f"dlopen by {cuda.crate} (nvrtc feature; file name built at run time)"]
    if not uses:
        raise DeviceCodeMissingError(
            f'{pipeline.plan.artifact_dir}: kernels = "runtime", but the binary neither links '
            f"nor names {library}.so: it has no way to compile its kernels",
            hint="Check the crate's GPU feature (cudarc: nvrtc), or set kernels = "
            f'"embedded" in [flavors.{pipeline.plan.flavor}] if the build compiles them.',
        )
    found = run(
        box,
        ["sh", "-c", f"find /usr /opt -name '{library}.so*' 2>/dev/null | sort"],
        log,
        step,
        keep_output=True,
    )
    in_image = sorted({PurePosixPath(line).name for line in found.splitlines() if line.strip()})
    for use in uses:
        log.line(f"loads the runtime compiler: {use}")
    log.detail = f"runtime kernels via {uses[0]}; image has {', '.join(in_image) or 'none'}"
    return {
        "kind": device.kind,
        "kernels": "runtime",
        "loads": uses,
        "image_runtime_compiler": in_image,
    }


def check_device_code(
    pipeline: Pipeline, device: DeviceCode, binary: str, log: StepLog
) -> dict[str, object]:
    """Which targets the shipped binary carries code for; fails on a missing one."""
    record_gpu_path(pipeline, log)
    cuda = check_cuda_binding(pipeline, log)
    if device.kernels == "runtime":
        return check_runtime_kernels(pipeline, device, binary, log, cuda)
    if device.kind == "cuda":
        listing = run(
            pipeline.box,
            ["cuobjdump", "--list-elf", binary],
            log,
            StepName.DEVICE_CODE,
            keep_output=True,
        )
        embedded = cuda_embedded(listing)
        how = "cuobjdump --list-elf"
    else:
        # clang offload bundles are read here on the host: no tool of the image involved
        local = fetch_file(pipeline.box, binary, pipeline.scratch / StepName.DEVICE_CODE)
        embedded = offload_bundle_targets(local.read_bytes())
        local.unlink()
        for target in sorted(embedded):
            log.line(f"code object: {target}")
        how = "clang offload bundle entries"
    require_embedded(pipeline.plan.artifact_dir, device.targets, embedded)
    log.detail = f"{len(embedded)} targets: {', '.join(sorted(embedded))}"
    return {"kind": device.kind, "checked_with": how, "embedded": sorted(embedded)}


def _device(pipeline: Pipeline) -> DeviceCode:
    if pipeline.plan.device_code is None:
        raise StepFailedError("internal: a device-code step in a plan for no GPU")
    return pipeline.plan.device_code


def gpu_targets(pipeline: Pipeline, log: StepLog) -> None:
    pipeline.state.gpu = check_gpu_targets(pipeline, _device(pipeline), log)


def device_code(pipeline: Pipeline, log: StepLog) -> None:
    found = check_device_code(pipeline, _device(pipeline), pipeline.state.shipped, log)
    pipeline.state.gpu = {**(pipeline.state.gpu or {}), "binary": found}

"""GPU flavors' two checks, run in the build container: before building, that the image's
compiler supports every requested target; after, that the binary embeds device code for each.
"""

from __future__ import annotations

from orchestrator.errors import StepFailedError
from orchestrator.execute.pipeline import Pipeline, fetch_file, run
from orchestrator.flavors import DeviceCode
from orchestrator.flavors.gpu import (
    compiler_release,
    cuda_embedded,
    cuda_supported,
    offload_bundle_targets,
    require_embedded,
    require_supported,
    rocm_supported,
)
from orchestrator.plan.steps import StepName
from orchestrator.progress import StepLog


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


def check_device_code(
    pipeline: Pipeline, device: DeviceCode, binary: str, log: StepLog
) -> dict[str, object]:
    """Which targets the shipped binary carries code for; fails on a missing one."""
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

"""build.json's `gpu_path`: whether the GPU flavor's GPU path ran on a GPU here.

The build container (training, validation, the driver check) gets the engine's GPU where
it has one (Pipeline.gpu); the driver check asks that container's nvidia-smi which
device and driver it sees. Without a GPU, the record says why, so that a cuda binary
trained and validated on the CPU path says so wherever it is listed.
"""

from __future__ import annotations

from orchestrator.execute.steps.pipeline import Pipeline
from orchestrator.progress.reporter import StepLog
from orchestrator.runtime.gpu import AMD

# Without nvidia-smi in the container the shell says 127.
NVIDIA_QUERY = [
    "sh",
    "-c",
    "command -v nvidia-smi >/dev/null || exit 127; "
    "exec nvidia-smi --query-gpu=name,driver_version --format=csv,noheader",
]
MAX_NAME = 80  # a device name as the container's nvidia-smi prints it: not ours, bounded


def devices_seen(lines: list[str]) -> list[tuple[str, str]]:
    """(device, driver) per GPU from nvidia-smi's `name,driver_version` CSV lines."""
    seen = []
    for line in lines:
        name, comma, driver = line.rpartition(",")
        name, driver = name.strip()[:MAX_NAME], driver.strip()[:MAX_NAME]
        if comma and name and driver:
            seen.append((name, driver))
    return seen


def exercised(seen: list[tuple[str, str]]) -> str:
    name, driver = seen[0]
    more = f" (and {len(seen) - 1} more)" if len(seen) > 1 else ""
    return f"exercised on {name}, driver {driver}{more}"


def record_gpu_path(pipeline: Pipeline, log: StepLog) -> str | None:
    """The driver check in the GPU container, and what build.json says of the GPU path."""
    if pipeline.plan.device_code is None:
        return None
    if pipeline.state.gpu_path is not None:  # `--profiles`: the training machine's word
        log.line(f"gpu path: {pipeline.state.gpu_path}")
        return pipeline.state.gpu_path
    use = pipeline.gpu
    if use.passthrough is None:
        pipeline.state.gpu_path = f"not exercised: {use.why}"
    elif use.passthrough.kind == AMD:
        pipeline.state.gpu_path = f"exercised on an AMD GPU ({use.why}); driver not queried"
    else:
        lines: list[str] = []
        log.command(NVIDIA_QUERY)
        code = pipeline.box.exec(NVIDIA_QUERY, on_output=lines.append)
        for line in lines:
            log.line(line)
        seen = devices_seen(lines) if code == 0 else []
        pipeline.state.gpu_path = (
            exercised(seen)
            if seen
            else f"not exercised: {use.why} was passed, but nvidia-smi in the build "
            f"container saw no GPU (exit {code})"
        )
    log.line(f"gpu path: {pipeline.state.gpu_path}")
    return pipeline.state.gpu_path

"""`build --profiles FILE` of a GPU flavor: the GPU validation that train.sh ran on the
training machine, judged here before anything is signed.

train.sh ran each of the manifest's GPU checks twice, with the CPU reference arguments
(gpu/c<index>.*) and with the GPU arguments (gpu/g<index>.*), and listed their sha256 in
gpu/SHA256SUMS. Here every file must match that list and every check must have both runs;
both must exit 0, and the GPU run must print what the CPU run printed by the flavor's
comparator (validate.select, validate.tolerance: the code the in-place validation uses).
profiles.tar is not signed (it is made where no key is): the sums find a damaged or
half-edited file, not a forger, as for the .profraw files beside them.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.errors import BundleError, GpuPathError
from orchestrator.execute.optimize.train_profiles import TrainedElsewhere
from orchestrator.execute.optimize.train_script import GPU_SUMS, NO_GPU
from orchestrator.execute.verdict.gpu_path import devices_seen, exercised
from orchestrator.model.documents.training_bundle import BundleGpuCheck, TrainingManifest
from orchestrator.model.hashing import sha256_bytes
from orchestrator.model.verdict.outputs import (
    Captured,
    compare_captured,
    compare_outputs,
    render_diff,
)

THROUGH_BUNDLE = "through the training bundle"
_TAIL = 12  # lines of a failed run's stderr quoted in the error


@dataclass(frozen=True)
class GpuRun:
    """One run of a GPU check on the training machine."""

    output: Captured
    status: int


def _checked_files(files: dict[str, bytes], where: str) -> dict[str, bytes]:
    """The gpu/ files, each as SHA256SUMS lists it; one missing, unlisted or altered is refused."""
    sums = files.get(GPU_SUMS)
    if sums is None:
        raise BundleError(
            f"{where} has GPU outputs but no gpu/{GPU_SUMS}: not what train.sh writes"
        )
    listed: dict[str, str] = {}
    for line in sums.decode("ascii", "replace").splitlines():
        digest, _, name = line.partition("  ")
        listed[name] = digest
    outputs = {name: data for name, data in files.items() if name != GPU_SUMS}
    for name in sorted(set(listed) | set(outputs)):
        if name not in outputs or name not in listed:
            raise BundleError(f"gpu/{name} in {where} is not what gpu/{GPU_SUMS} lists")
        if sha256_bytes(outputs[name]) != listed[name]:
            raise BundleError(
                f"gpu/{name} in {where} differs from its sha256 in gpu/{GPU_SUMS}: altered",
                hint="Bring back the profiles.tar that train.sh wrote, unchanged.",
            )
    return outputs


def _run(outputs: dict[str, bytes], side: str, check: BundleGpuCheck, where: str) -> GpuRun:
    names = [f"{side}{check.index}.{part}" for part in ("out", "err", "exit")]
    absent = [name for name in names if name not in outputs]
    if absent:
        what = "CPU reference" if side == "c" else "GPU"
        raise BundleError(
            f"{where} has no {what} run of GPU check {check.index} "
            f"(`{_command(check, side)}`): gpu/{absent[0]} is missing",
            hint="Run train.sh to its end on the GPU machine: it writes every check's runs.",
        )
    stdout, stderr, status = (outputs[name] for name in names)
    try:
        code = int(status.decode().strip())
    except (UnicodeDecodeError, ValueError):
        raise BundleError(f"gpu/{names[2]} in {where} holds no exit status") from None
    return GpuRun(Captured(stdout, stderr), code)


def _command(check: BundleGpuCheck, side: str) -> str:
    args = check.cpu_args if side == "c" else check.gpu_args
    return " ".join((check.binary.removeprefix("bin/"), *args))


def first_difference(cpu: Captured, gpu: Captured, tolerance: float, select: str) -> str:
    """`stream line N: expected ... got ...` of the first line the comparator rejects."""
    for stream in ("stdout", "stderr"):
        a = getattr(cpu, stream).decode("utf-8", "backslashreplace")
        b = getattr(gpu, stream).decode("utf-8", "backslashreplace")
        differences = compare_outputs(a, b, tolerance, select)
        if differences:
            first = differences[0]
            return f"{stream} line {first.line}: CPU {first.expected!r}, GPU {first.got!r}"
    return "the bytes differ, no line does"


def _device(machine: dict[str, str]) -> str:
    gpu = machine.get("gpu", "")
    seen = devices_seen([gpu])
    return exercised(seen).removeprefix("exercised on ") if seen else gpu or "a GPU"


def judge_gpu_checks(
    manifest: TrainingManifest,
    trained: TrainedElsewhere,
    *,
    tolerance: float,
    select: str,
    where: str = "profiles.tar",
) -> str:
    """build.json's gpu_path from the bundle's GPU checks; a failed or differing GPU run
    raises GpuPathError, naming the check and its first differing line."""
    if not manifest.gpu_checks:
        if trained.gpu_files:
            raise BundleError(f"{where} holds GPU outputs; the bundle asked for none")
        return f"not exercised: the training bundle of flavor {manifest.flavor} had no GPU checks"
    status = trained.machine.get("gpu_check", "")
    if status != "ran":
        if trained.gpu_files:
            raise BundleError(f"{where} holds GPU outputs, but its machine.txt says {status!r}")
        why = status.removeprefix("not exercised: ") if status else NO_GPU.split(": ", 1)[1]
        return f"not exercised: {why} ({THROUGH_BUNDLE})"
    outputs = _checked_files(trained.gpu_files, where)
    known = {
        f"{side}{c.index}.{part}"
        for c in manifest.gpu_checks
        for side in "cg"
        for part in ("out", "err", "exit")
    }
    strangers = sorted(set(outputs) - known)
    if strangers:
        raise BundleError(f"{where} holds gpu/{strangers[0]}, of no GPU check in the manifest")
    device = _device(trained.machine)
    for check in manifest.gpu_checks:
        cpu, gpu = _run(outputs, "c", check, where), _run(outputs, "g", check, where)
        for side, run in (("CPU reference", cpu), ("GPU", gpu)):
            if run.status != 0:
                tail = run.output.stderr.decode("utf-8", "backslashreplace").splitlines()[-_TAIL:]
                command = _command(check, "c" if side == "CPU reference" else "g")
                raise GpuPathError(
                    f"GPU check {check.index}: the {side} run `{command}` exited with "
                    f"{run.status} on {device}"
                    + ("; its stderr ends:\n" + "\n".join(tail) if tail else "")
                )
        differences = compare_captured(cpu.output, gpu.output, tolerance, select)
        if differences:
            first = first_difference(cpu.output, gpu.output, tolerance, select)
            raise GpuPathError(
                f"GPU check {check.index}: `{_command(check, 'g')}` on {device} printed "
                f"something else than the CPU reference `{_command(check, 'c')}` "
                f"({differences}); first: {first}\n"
                + render_diff(cpu.output, gpu.output, expected_name="cpu", got_name="gpu")
            )
    return f"exercised on {device} ({THROUGH_BUNDLE})"

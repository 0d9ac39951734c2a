"""What every build step shares: the containers, the shared volume, command running.

One `Pipeline` lives for one build. Every command a step runs goes through `run`, which
echoes it as `+ cmd` into the step log and turns a non-zero exit into StepFailedError.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from orchestrator.config.options import Options
from orchestrator.errors import (
    ProfileError,
    StepFailedError,
    ValidationError,
)
from orchestrator.host.archive import ChunkReader, safe_extract, single_file_tar
from orchestrator.model.layout import PATHS
from orchestrator.model.outputs import compare_outputs, render_diff
from orchestrator.plan.build_plan import (
    BuildPlan,
    CargoCommand,
)
from orchestrator.progress import Reporter, StepLog
from orchestrator.runtime.engine import Container, ContainerSpec, Engine
from orchestrator.runtime.images import (
    ImageOutcome,
)
from orchestrator.runtime.perf import NO_ACCESS, PerfAccess, find_perf_access
from orchestrator.supply.attest import Signer

BIN_DIR = f"{PATHS.out}/bin"


def run(
    box: Container,
    argv: Sequence[str],
    log: StepLog,
    step: str,
    *,
    environment: Mapping[str, str] | None = None,
    keep_output: bool = False,
) -> str:
    """Run a command, logging it as `+ cmd`; raise StepFailedError on a non-zero exit."""
    shown = {k: v for k, v in (environment or {}).items() if k != "CARGO_ENCODED_RUSTFLAGS"}
    if environment and "CARGO_ENCODED_RUSTFLAGS" in environment:
        shown["RUSTFLAGS"] = " ".join(environment["CARGO_ENCODED_RUSTFLAGS"].split("\x1f"))
    log.command(argv, shown)
    lines: list[str] = []

    def sink(line: str) -> None:
        if keep_output:
            lines.append(line)
        log.line(line)

    code = box.exec(argv, environment=environment, on_output=sink)
    if code != 0:
        raise StepFailedError(
            f"step {step}: `{' '.join(PurePosixPath(a).name for a in argv[:2])}` "
            f"exited with {code}",
            hint="The output above (and the step log) says why; nothing was published.",
        )
    return "\n".join(lines)


def cargo(box: Container, command: CargoCommand, log: StepLog, step: str) -> str:
    return run(box, command.argv, log, step, environment=command.environment, keep_output=True)


def fetch_file(box: Container, path: str, dest_dir: Path) -> Path:
    """Copy one file out of a container through the archive API (checked like any tar)."""
    written = safe_extract(ChunkReader(box.get_archive(path)), dest_dir)
    name = PurePosixPath(path).name
    if [p.as_posix() for p in written] != [name]:
        raise StepFailedError(f"expected only {name} in the archive of {path}, got {written}")
    return dest_dir / name


def put_file(box: Container, path: str, data: bytes) -> None:
    parent = str(PurePosixPath(path).parent)
    if box.exec(["mkdir", "-p", parent], on_output=lambda _: None) != 0:
        raise StepFailedError(f"cannot create {parent} in the container")
    box.put_archive(parent, single_file_tar(path, data))


@dataclass
class Pipeline:
    """Everything one build run holds on to while it executes."""

    options: Options
    plan: BuildPlan
    engine: Engine
    reporter: Reporter
    image: ImageOutcome
    box: Container
    volume: str
    stack: ExitStack
    keep: bool
    retrain: bool
    scratch: Path
    signer: Signer
    started: str
    perf: PerfAccess = NO_ACCESS
    _profiler: Container | None = None
    results: dict[str, object] = field(default_factory=dict)

    def step(self, name: str) -> AbstractContextManager[StepLog]:
        title = next(s.title for s in self.plan.steps if s.name == name)
        return self.reporter.step(name, title)

    def profiler(self) -> Container:
        """The profiling container, started once with the least perf access needed."""
        if self._profiler is None:
            if self.plan.bolt is not None and self.plan.bolt.mode != "instrument":
                self.perf = find_perf_access(
                    self.engine, self.image.reference, allowed=self.plan.profiling_privileges
                )
            spec = ContainerSpec(
                self.image.reference,
                privileges=self.perf.privileges,
                volumes={self.volume: PATHS.out},
                purpose="profile",
            )
            self._profiler = self.stack.enter_context(self.engine.container(spec, keep=self.keep))
        return self._profiler

    def copy_binary(self, variant: str, log: StepLog) -> str:
        target = f"{BIN_DIR}/{variant}"
        run(self.box, ["cp", self.plan.variants[variant].binary, target], log, variant)
        return target


def run_workloads(
    pipeline: Pipeline,
    binary: str,
    log: StepLog,
    step: str,
    *,
    environment: Mapping[str, str] | None = None,
    wrap: Sequence[str] = (),
) -> None:
    if not pipeline.plan.workloads:
        raise ProfileError(
            "no training workloads: [train] workloads is empty",
            hint="List argument lists for the binary under [train] workloads in "
            "orchestrator.toml, or build with --no-pgo --no-bolt.",
        )
    box = pipeline.profiler()
    for index, workload in enumerate(pipeline.plan.workloads):
        wrapper = [part.replace("{index}", str(index)) for part in wrap]
        argv = [*wrapper, *pipeline.plan.runner, binary, *workload]
        run(box, argv, log, step, environment=environment)


def validate_binary(
    pipeline: Pipeline, binary: str, log: StepLog, *, what: str
) -> dict[str, object]:
    command = pipeline.plan.validate_command
    if not command:
        log.line("no validate.command configured: outputs not compared")
        return {"command": [], "compared": False}
    baseline = f"{BIN_DIR}/baseline"
    runner = pipeline.plan.runner
    expected = run(pipeline.box, [*runner, baseline, *command], log, "validate", keep_output=True)
    got = run(pipeline.box, [*runner, binary, *command], log, "validate", keep_output=True)
    differences = compare_outputs(expected, got, pipeline.plan.validate_tolerance)
    if differences:
        diff = render_diff(expected, got, expected_name="baseline", got_name=what)
        raise ValidationError(
            f"{what} printed something else than the baseline for "
            f"`{' '.join(command)}` ({len(differences)} line(s) differ):\n{diff}"
        )
    return {
        "command": list(command),
        "compared": True,
        "tolerance": pipeline.plan.validate_tolerance,
        "identical": expected == got,
        "output_lines": len(expected.splitlines()),
    }

"""How a step runs a command in a container and how its failure is told: every command goes
through `run` (or `cargo`), which echoes it as `+ cmd` into the step log and turns a
non-zero exit into StepFailedError, naming a container limit or a write into the read-only
sources when that is why; files go in and out through the archive API.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

from orchestrator.errors import ConfigError, ResourceLimitError, SourceError, StepFailedError
from orchestrator.host.archive import ChunkReader, safe_extract
from orchestrator.host.packing import single_file_tar
from orchestrator.model.layout import PATHS
from orchestrator.model.verdict.failed_tests import failing_tests
from orchestrator.model.verdict.pgo_report import is_missing_profile_line, missing_profile_note
from orchestrator.plan.build_plan import CargoCommand
from orchestrator.progress.reporter import StepLog
from orchestrator.runtime.engine import Container, Limits


def run(
    box: Container,
    argv: Sequence[str],
    log: StepLog,
    step: str,
    *,
    environment: Mapping[str, str] | None = None,
    keep_output: bool = False,
    workdir: str | None = None,
) -> str:
    """Run a command, logging it as `+ cmd`; raise StepFailedError on a non-zero exit."""
    code, output = _logged_exec(
        box, argv, log, step, environment=environment, keep_output=keep_output, workdir=workdir
    )
    if code != 0:
        raise _exited(step, argv, code)
    return output


def output_of(box: Container, argv: Sequence[str], log: StepLog, step: str) -> str:
    """The output of a command that must print something (a path, a digest). Under load an
    Engine has been seen to pass on nothing from a quick exec that exited 0; asked once more
    before the step fails, so an empty answer never becomes a path or a digest."""
    for attempt in (1, 2):
        output = run(box, argv, log, step, keep_output=True).strip()
        if output:
            return output
        log.line(f"`{' '.join(argv)}` exited 0 with no output (try {attempt} of 2)")
    raise StepFailedError(
        f"step {step}: `{' '.join(argv)}` exited 0 but the Engine passed on no output, twice; "
        "run the build again (the step cache keeps the steps before it)"
    )


def shown_environment(environment: Mapping[str, str] | None) -> dict[str, str]:
    """The environment as a command's log line shows it: RUSTFLAGS readable, not encoded."""
    shown = {k: v for k, v in (environment or {}).items() if k != "CARGO_ENCODED_RUSTFLAGS"}
    if environment and "CARGO_ENCODED_RUSTFLAGS" in environment:
        shown["RUSTFLAGS"] = " ".join(environment["CARGO_ENCODED_RUSTFLAGS"].split("\x1f"))
    return shown


def _logged_exec(
    box: Container,
    argv: Sequence[str],
    log: StepLog,
    step: str,
    *,
    environment: Mapping[str, str] | None,
    keep_output: bool,
    workdir: str | None,
) -> tuple[int, str]:
    log.command(argv, shown_environment(environment))
    lines: list[str] = []
    missing_profile = 0

    def sink(line: str) -> None:
        nonlocal missing_profile
        if keep_output:
            lines.append(line)
        if is_missing_profile_line(line):  # thousands in a PGO build: counted, not logged
            missing_profile += 1
        else:
            log.line(line)

    code = box.exec(argv, environment=environment, on_output=sink, workdir=workdir)
    if missing_profile:
        log.line(missing_profile_note(missing_profile))
    if code != 0:
        hits = box.limit_hits()  # a fork bomb or runaway build script: say so, by name
        if hits:
            raise limit_error(step, argv, hits, box.limits)
    return code, "\n".join(lines)


def limit_error(
    step: str, argv: Sequence[str], hits: Sequence[str], limits: Limits
) -> ResourceLimitError:
    """A failed command whose container ran into its pids or memory limit meanwhile."""
    what = {
        "pids": f"its process limit (limits.pids = {limits.pids})",
        "memory": f"its memory limit (limits.memory = {limits.memory >> 20} MiB)",
    }
    named = " and ".join(what[h] for h in hits)
    settings = " / ".join(f"limits.{h}" for h in hits)
    variables = ", ".join(f"ORCHESTRATOR_LIMITS_{h.upper()}" for h in hits)
    return ResourceLimitError(
        f"step {step}: `{' '.join(PurePosixPath(a).name for a in argv[:2])}` failed after "
        f"its container ran into {named}: a build script, test or workload started more "
        "than that allows (a fork bomb stops in its container, not on the host)",
        hint=f"If the build really needs more, raise {settings} in orchestrator.toml or "
        f"{variables}; otherwise look at what the crate's build scripts and tests start.",
    )


def _exited(
    step: str, argv: Sequence[str], code: int, failed_tests: tuple[str, ...] = ()
) -> StepFailedError:
    return StepFailedError(
        f"step {step}: `{' '.join(PurePosixPath(a).name for a in argv[:2])}` exited with {code}",
        hint="The output above (and the step log) says why; nothing was published.",
        step=step,
        failed_tests=failed_tests,
    )


# rustc's warning for a -Ctarget-cpu it does not know, after which it builds for a
# generic CPU: a binary named for a CPU it was not built for.
_UNKNOWN_CPU = re.compile(r"'([^']*)' is not a recognized processor for this target")


# What a write into the read-only source mount fails with (EROFS), in Rust's io::Error
# Debug and Display forms and in C's strerror.
_READ_ONLY = re.compile(r"ReadOnlyFilesystem|Read-only file system|os error 30")
# cargo's line for a build script that failed: "... custom build command for `pkg v1.0 (path)`"
_BUILD_SCRIPT = re.compile(r"failed to run custom build command for `([^`]*)`")


def source_write_error(step: str, output: str) -> SourceError | None:
    """The error to raise when a failed cargo run failed writing into the sources."""
    if not _READ_ONLY.search(output):
        return None
    script = _BUILD_SCRIPT.search(output)
    who = f"the build script of `{script.group(1)}`" if script else "a build script or test"
    evidence = next(line.strip() for line in output.splitlines() if _READ_ONLY.search(line))
    return SourceError(
        f"step {step}: {who} tried to write into the crate's sources ({PATHS.src}), which "
        f"are read-only in the build container ({evidence[:200]})",
        hint="Build scripts may write only into OUT_DIR: write generated files to "
        'Path::new(&env::var("OUT_DIR")?) and include!(concat!(env!("OUT_DIR"), "/...")) '
        "them (`cargo package` refuses a build script that changes the sources too); "
        "tests may write into std::env::temp_dir().",
    )


def cargo(box: Container, command: CargoCommand, log: StepLog, step: str) -> str:
    """Run a cargo command; rustc ignoring the target-cpu is an error, not a warning, and a
    write into the read-only sources is said as such."""
    # At the crate's root, so cargo reads the crate's .cargo/config.toml ([env], [alias]...).
    code, output = _logged_exec(
        box,
        command.argv,
        log,
        step,
        environment=command.environment,
        keep_output=True,
        workdir=PATHS.src,
    )
    if code != 0:
        # `cargo test`: the failed tests it named, for the hint that skips them
        failed = failing_tests(output) if list(command.argv[1:2]) == ["test"] else ()
        raise source_write_error(step, output) or _exited(step, command.argv, code, failed)
    refused = next((line for line in output.splitlines() if _READ_ONLY.search(line)), None)
    if refused is not None:  # a build script that went on without its write: say so
        log.warn(
            f"a build script could not write into the read-only sources ({PATHS.src}) and "
            f"went on: {refused.strip()[:200]}"
        )
    unknown = _UNKNOWN_CPU.search(output)
    if unknown is not None:
        raise ConfigError(
            f"step {step}: rustc does not know target-cpu {unknown.group(1)!r} "
            f"({unknown.group(0)}, ignoring processor): the binary would be built for a "
            "generic CPU",
            hint="Pick a CPU from `rustc --print target-cpus` in the toolchain image.",
        )
    return output


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

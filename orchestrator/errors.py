"""Every error a user can meet, each with its own exit code and a hint on what to do next.

The CLI maps these to exit codes in one place; pipeline code raises them and never
prints or exits by itself. Raise a named subclass, never `OrchestratorError` itself: every
subclass must declare an exit code of its own, listed in docs/exit-codes.md's table
(tests/unit/test_mends_errors.py checks both), whose row is made from its `summary`.
"""

from __future__ import annotations

import errno


class OrchestratorError(Exception):
    """Base of all expected failures. Anything else reaching the CLI is a bug.

    Abstract in spirit: its exit code 1 is undocumented, and a subclass that does not
    declare its own code is refused when it is defined.
    """

    exit_code = 1
    default_hint = ""
    # Its code's meaning in one line of markdown: docs/exit-codes.md's table is made of
    # these (python -m orchestrator.cli.exit_codes; tests/unit/test_exit_codes.py).
    summary = ""

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if cls.exit_code == OrchestratorError.exit_code:
            raise TypeError(f"{cls.__qualname__} must declare an exit_code of its own (not 1)")

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint if hint is not None else self.default_hint


class ConfigError(OrchestratorError):
    """orchestrator.toml, a toolchain file, an environment variable or a flag is wrong."""

    exit_code = 10
    summary = "configuration error (file, environment or flag)"
    default_hint = "Fix the value named above; `orchestrator config` shows every resolved setting."


class SourceError(OrchestratorError):
    """The crate to release is not buildable as given (no Cargo.lock, no such binary...)."""

    exit_code = 11
    summary = "source error (e.g. no `Cargo.lock`)"


class ForeignFolderError(OrchestratorError):
    """A folder the tool would empty or remove (a --workdir, the cache) is not one it made."""

    exit_code = 12
    summary = (
        "refused to empty or remove a folder orchestrator did not make (`reproduce --workdir`, "
        "`clean --cache`): it has files but no `.orchestrator-workdir`/`.orchestrator-cache` "
        "marker, or the work folder is a symlink"
    )


class DockerUnavailableError(OrchestratorError):
    exit_code = 20
    summary = "Docker Engine not reachable"
    default_hint = (
        "Start the Docker Engine or point DOCKER_HOST at one; "
        "`orchestrator doctor` checks the setup."
    )


class BootstrapError(OrchestratorError):
    """Making the base root filesystem or fetching Debian packages on the host failed."""

    exit_code = 21
    summary = (
        "bootstrapping the rootfs or packages failed (e.g. `mmdebstrap` missing, pin not on the "
        "mirror)"
    )


class ImageBuildError(OrchestratorError):
    exit_code = 22
    summary = "image build failed"


class ContainerError(OrchestratorError):
    """The Engine cannot start a container, copy files into it, or find a path in it."""

    exit_code = 23
    summary = "the Engine cannot start a container, copy files into it, or find a path in it"
    default_hint = "`orchestrator doctor` checks the Engine; the step log has the details."


class DiskFullError(OrchestratorError):
    """A disk (or quota) filled up while writing: the cache, a staging folder, a release."""

    exit_code = 24
    summary = (
        "a disk (or quota) filled up while writing the cache, a staging folder or a release; "
        "nothing was half-published"
    )
    default_hint = (
        "Free space (`orchestrator clean --images` and `clean --cache` free the most) or point "
        "build.artifacts_dir / build.cache_dir at a bigger disk. Nothing was half-published: "
        "a release changes only by renames after everything was written."
    )


class ResourceLimitError(OrchestratorError):
    """A build or profiling container ran into its process (pids) or memory limit."""

    exit_code = 25
    summary = (
        "a build or profiling container ran into its process limit (`limits.pids`) or its "
        "memory limit (`limits.memory`): a fork bomb or a runaway build script stopped there"
    )
    default_hint = (
        "If the crate's build really needs more, raise limits.pids or limits.memory "
        "(ORCHESTRATOR_LIMITS_PIDS, ORCHESTRATOR_LIMITS_MEMORY); otherwise look at what its "
        "build scripts and tests start."
    )


class ToolchainMismatchError(OrchestratorError):
    """rustc, llvm-profdata and llvm-bolt inside the image do not share one LLVM major."""

    exit_code = 30
    summary = "toolchain LLVM majors disagree"
    default_hint = (
        "Profiles written by one LLVM major cannot be read by another: pin packages of one "
        "LLVM release in toolchains/<name>.toml and rebuild the image."
    )


class GpuUnavailableError(OrchestratorError):
    """`flavors.<cuda|rocm>.gpu = "require"`, and the engine can give a container no GPU."""

    exit_code = 33
    summary = (
        'a GPU flavor has `gpu = "require"` and the engine can give its containers no GPU '
        "(no nvidia runtime, no CDI spec, no `/dev/kfd`)"
    )
    default_hint = (
        "Install the NVIDIA Container Toolkit (nvidia-ctk runtime configure, or nvidia-ctk cdi "
        "generate) or give the engine /dev/kfd and /dev/dri; `orchestrator doctor` lists what "
        'each engine offers. Or set gpu = "auto" to build without the GPU path.'
    )


class StepFailedError(OrchestratorError):
    """A build step's command exited non-zero inside its container."""

    exit_code = 40
    summary = "a build step failed (`cargo build`, `cargo test`, ...)"

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        step: str = "",
        failed_tests: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message, hint=hint)
        self.step = step  # the plan's step whose command failed ("": not told)
        self.failed_tests = failed_tests  # `cargo test`: the tests its output named


class UnsafeArchiveError(OrchestratorError):
    exit_code = 41
    summary = "unsafe or unreadable archive (a container's output, a .crate, a vault archive)"
    default_hint = (
        "Nothing was written from it: an entry could escape its folder, or the archive is "
        "damaged or of another kind."
    )


class PublishError(OrchestratorError):
    exit_code = 42
    summary = "publishing failed"


class CacheCorruptError(OrchestratorError):
    exit_code = 43
    summary = "corrupt cache entry"
    default_hint = "Remove the named cache entry (or run `orchestrator clean --cache`) and retry."


class ProfileError(OrchestratorError):
    """A PGO or BOLT profile is missing, unreadable, or covers too little of the program."""

    exit_code = 44
    summary = "PGO/BOLT profile missing, altered, or covering too little"


class BundleError(OrchestratorError):
    """A training bundle or the profiles trained from it is incomplete, altered, or for
    another build or architecture (`build --train-elsewhere`, `build --profiles`)."""

    exit_code = 64
    summary = (
        "`build --train-elsewhere` / `--profiles`: a training bundle or its profiles.tar "
        "refused (altered, incomplete, another bundle's or another architecture's)"
    )


class ValidationError(OrchestratorError):
    """The optimized binary's output differs from the baseline's."""

    exit_code = 45
    summary = "validation failed: the optimized binary's output differs"
    default_hint = (
        "An optimization changed what the program computes. Check for floating-point "
        "reassociation or undefined behaviour, or set validate.tolerance for numeric noise."
    )


class GpuPathError(ValidationError):
    """A GPU flavor's GPU run, on the machine a training bundle ran on, failed or printed
    something else than its CPU reference (`build --profiles`)."""

    exit_code = 76
    summary = (
        "`build --profiles`: the GPU path failed on the training machine (a nonzero exit, "
        "e.g. a kernel that does not compile) or differs from the CPU reference"
    )
    default_hint = (
        "Fix the GPU path (the run's stderr is above), or compare only the lines that "
        "matter with [flavors.<name>.validate] select, or numbers with validate.tolerance."
    )


class BoltError(OrchestratorError):
    """BOLT failed, or its binary failed validation, and bolt.policy is "require"."""

    exit_code = 46
    summary = 'BOLT failed and `bolt.policy = "require"`'


class SpeedGateError(OrchestratorError):
    """Under gate.policy "require-all", a variant counts more estimated cycles than plain
    `cargo build --release`."""

    exit_code = 63
    summary = (
        'the speed gate (`gate.policy = "require-all"`): an optimized variant is slower than '
        "plain `cargo build --release` by callgrind's estimated cycles"
    )
    default_hint = (
        "build.json's `gate` lists every variant's counts. Train on workloads closer to real "
        'use, or let the gate ship the best variant: gate.policy = "best".'
    )


class NotAReleaseError(OrchestratorError):
    """`verify` was pointed at a folder that is not a release: nothing to check."""

    exit_code = 56
    summary = "`verify`: not a release folder (no `SHA256SUMS`): nothing to verify"
    default_hint = "Point at artifacts/<name>-<version>/."


class BenchError(OrchestratorError):
    """A benchmark cannot run: no published build, variants or image, or an emulated flavor."""

    exit_code = 57
    summary = (
        "`bench` cannot run: no published build, no variant binaries or image, or an emulated "
        "flavor (in `release`, a failed bench is only a warning)"
    )


class SbomError(OrchestratorError):
    """The generated SBOM does not validate against the CycloneDX 1.6 schema (a bug)."""

    exit_code = 58
    summary = "the generated SBOM is not valid CycloneDX 1.6 (a bug: please report it)"


class StaleRenderError(OrchestratorError):
    exit_code = 50
    summary = "committed Dockerfiles are stale"
    default_hint = "Run `orchestrator render` and commit the regenerated Dockerfiles."


class DoctorBlockerError(OrchestratorError):
    exit_code = 60
    summary = "`doctor` found a blocker"


class PortabilityError(OrchestratorError):
    """A shipped binary needs a newer glibc than release.glibc_floor, or does not start (or
    prints something else) in an older or newer distribution's container."""

    exit_code = 62
    summary = (
        "an artifact needs a newer glibc than `release.glibc_floor` (the symbols are named), "
        "or failed in a Debian release's container (`distros` step)"
    )


class GeneratedFileError(OrchestratorError):
    """An [[archive.generate]] entry failed, or printed something else when run twice."""

    exit_code = 73
    summary = (
        "an `[[archive.generate]]` command failed or is not deterministic (two runs of the "
        "shipped binary printed different files)"
    )
    default_hint = (
        "Make the command print the same every time (no dates, paths or random order), or "
        "ship the file itself from the crate with archive.include."
    )


class BuildInterruptedError(OrchestratorError):
    exit_code = 130
    summary = "interrupted (Ctrl-C, SIGTERM or SIGHUP)"
    default_hint = "Nothing was published; containers and staging folders were removed."


DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def disk_full(error: OSError) -> DiskFullError | None:
    """The DiskFullError an OSError means, or None when it is about something else."""
    if error.errno not in DISK_FULL_ERRNOS:
        return None
    where = f" writing {error.filename}" if error.filename else ""
    return DiskFullError(f"no space left on the device{where} ({error.strerror})")

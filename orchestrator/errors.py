"""Every error a user can meet, each with its own exit code and a hint on what to do next.

The CLI maps these to exit codes in one place; pipeline code raises them and never
prints or exits by itself. Raise a named subclass, never `OrchestratorError` itself: every
subclass must declare an exit code of its own, listed in README.md's exit-code table
(tests/unit/test_mends_errors.py checks both).
"""

from __future__ import annotations


class OrchestratorError(Exception):
    """Base of all expected failures. Anything else reaching the CLI is a bug.

    Abstract in spirit: its exit code 1 is undocumented, and a subclass that does not
    declare its own code is refused when it is defined.
    """

    exit_code = 1
    default_hint = ""

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
    default_hint = "Fix the value named above; `orchestrator config` shows every resolved setting."


class SourceError(OrchestratorError):
    """The crate to release is not buildable as given (no Cargo.lock, no such binary...)."""

    exit_code = 11


class ForeignFolderError(OrchestratorError):
    """A folder the tool would empty or remove (a --workdir, the cache) is not one it made."""

    exit_code = 12


class DockerUnavailableError(OrchestratorError):
    exit_code = 20
    default_hint = (
        "Start the Docker Engine or point DOCKER_HOST at one; "
        "`orchestrator doctor` checks the setup."
    )


class BootstrapError(OrchestratorError):
    """Making the base root filesystem or fetching Debian packages on the host failed."""

    exit_code = 21


class ImageBuildError(OrchestratorError):
    exit_code = 22


class ContainerError(OrchestratorError):
    """The Engine cannot start a container, copy files into it, or find a path in it."""

    exit_code = 23
    default_hint = "`orchestrator doctor` checks the Engine; the step log has the details."


class ToolchainMismatchError(OrchestratorError):
    """rustc, llvm-profdata and llvm-bolt inside the image do not share one LLVM major."""

    exit_code = 30
    default_hint = (
        "Profiles written by one LLVM major cannot be read by another: pin packages of one "
        "LLVM release in toolchains/<name>.toml and rebuild the image."
    )


class StepFailedError(OrchestratorError):
    """A build step's command exited non-zero inside its container."""

    exit_code = 40


class UnsafeArchiveError(OrchestratorError):
    exit_code = 41
    default_hint = "The container produced an archive entry that could escape the output folder."


class PublishError(OrchestratorError):
    exit_code = 42


class CacheCorruptError(OrchestratorError):
    exit_code = 43
    default_hint = "Remove the named cache entry (or run `orchestrator clean --cache`) and retry."


class ProfileError(OrchestratorError):
    """A PGO or BOLT profile is missing, unreadable, or covers too little of the program."""

    exit_code = 44


class ValidationError(OrchestratorError):
    """The optimized binary's output differs from the baseline's."""

    exit_code = 45
    default_hint = (
        "An optimization changed what the program computes. Check for floating-point "
        "reassociation or undefined behaviour, or set validate.tolerance for numeric noise."
    )


class BoltError(OrchestratorError):
    """BOLT failed, or its binary failed validation, and bolt.policy is "require"."""

    exit_code = 46


class NotAReleaseError(OrchestratorError):
    """`verify` was pointed at a folder that is not a release: nothing to check."""

    exit_code = 56
    default_hint = "Point at artifacts/<name>-<version>/."


class BenchError(OrchestratorError):
    """A benchmark cannot run: no published build, variants or image, or an emulated flavor."""

    exit_code = 57


class SbomError(OrchestratorError):
    """The generated SBOM does not validate against the CycloneDX 1.6 schema (a bug)."""

    exit_code = 58


class StaleRenderError(OrchestratorError):
    exit_code = 50
    default_hint = "Run `orchestrator render` and commit the regenerated Dockerfiles."


class DoctorBlockerError(OrchestratorError):
    exit_code = 60


class BuildInterruptedError(OrchestratorError):
    exit_code = 130
    default_hint = "Nothing was published; containers and staging folders were removed."

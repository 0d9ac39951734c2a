"""What `release assemble` refuses, by what the signer must do about it."""

from __future__ import annotations

from orchestrator.errors import OrchestratorError


class TargetFolderError(OrchestratorError):
    exit_code = 69
    summary = (
        "`release assemble`: a target folder is not intact or not safe to read: no readable "
        "target.json, a file changed, added or missing since `build --target` wrote it, a "
        "file its plan does not make, a link, FIFO, hard link, oversized file or unsafe name"
    )
    default_hint = (
        "Build the target again (`orchestrator build --target NAME`) and pass the new folder."
    )


class AssembleError(OrchestratorError):
    exit_code = 70
    summary = (
        "`release assemble`: the folders do not make this release: one was built from "
        "another commit, config or orchestrator, its lock inputs or build.json differ from "
        "what this checkout's plan gives, it names no target of it, comes twice, or a "
        "target has no folder"
    )
    default_hint = (
        "Build every target from this checkout (`orchestrator build --target NAME` for each "
        "name in `orchestrator release --dry-run`), then assemble their folders."
    )


class UnplannedBinaryError(OrchestratorError):
    """A binary's own bytes contradict the plan: whoever built the folder did not build
    what it claims (a binary of another level or machine, or a runner that is not sound)."""

    exit_code = 71
    summary = (
        "`release assemble`: a received binary is not what its target's plan builds: another "
        "machine or ELF type, instructions of a higher CPU level, glibc symbols above the "
        "floor, or another compiler than the plan's toolchain"
    )
    default_hint = (
        "Do not sign it. Find out how that runner came to hand over this binary (a target "
        "mixed up, or a runner not to be trusted), then build the target again elsewhere."
    )

"""What a run of a shipped binary sees (a training workload, a validation run, bench):
its working folder, environment, stdin, and the training inputs mounted beside the crate."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from orchestrator.model.layout import PATHS

INPUTS_DIR = f"{PATHS.root}/inputs"  # the volume each [train] input is unpacked into


@dataclass(frozen=True)
class TrainInput:
    """One `[train] inputs` file or folder, packed deterministically (host/inputs.py): its
    archive unpacks at /build to inputs/<name>."""

    name: str
    archive: bytes
    sha256: str

    @property
    def path(self) -> str:
        return f"{INPUTS_DIR}/{self.name}"


@dataclass(frozen=True)
class RunPlan:
    """How workloads, validation and bench run the binary: at the crate's root, whose files
    they may read (read-only for workloads), with `[train] env`, `[train] stdin`, and the
    `[train] inputs` at /build/inputs/<name>."""

    workdir: str
    environment: Mapping[str, str]
    stdin: str  # a path in the container, or "" for none
    inputs: tuple[TrainInput, ...] = ()

    @property
    def configured(self) -> bool:
        """Whether [train] env, stdin or inputs are set (the lock and profile key record
        them then)."""
        return bool(self.environment or self.stdin or self.inputs)

    def as_dict(self) -> dict[str, object]:
        shown: dict[str, object] = {
            "workdir": self.workdir,
            "env": dict(self.environment),
            "stdin": self.stdin,
        }
        if self.inputs:  # absent without inputs: records and keys made before them hold
            shown["inputs"] = {item.name: item.sha256 for item in self.inputs}
        return shown


def run_plan(env: tuple[str, ...], stdin: str, inputs: tuple[TrainInput, ...] = ()) -> RunPlan:
    """From `[train] env` (NAME=value pairs), `[train] stdin` (a path in the crate, or "")
    and the packed `[train] inputs`."""
    environment = dict(pair.split("=", 1) for pair in env)
    stdin = f"{PATHS.src}/{stdin}" if stdin else ""
    return RunPlan(PATHS.src, environment, stdin, inputs)

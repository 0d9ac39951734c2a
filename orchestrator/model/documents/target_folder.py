"""target.json: what `orchestrator build --target` leaves beside an unsigned target folder.

A release built across CI runners has one such folder per target; `release assemble`
reads them on the one machine that holds the signing key. The record says which plan the
folder was built from (its action key), what the release summary and the lock will say
of it, and the sha256 of every file in the folder, so that a folder changed on its way
(a file edited, added or lost) is refused whole.

Everything here is the runner's claim: assemble (release/assemble/assemble_checks.py) compares it
with what this checkout's plan gives and what the files themselves show, and signs the
plan's values, not these.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from orchestrator.model.documents.compose_record import DispatcherInfo
from orchestrator.model.documents.lockfile import LockedTarget, RelativeFile, Sha256, SharedPins
from orchestrator.model.documents.record_io import Record
from orchestrator.model.documents.release_summary import TargetSummary

TARGET_RECORD = "target.json"


def _not_the_record(path: str) -> str:
    if path == TARGET_RECORD:
        raise ValueError(f"{TARGET_RECORD} does not list itself")
    return path


FolderFile = Annotated[RelativeFile, AfterValidator(_not_the_record)]


class TargetFolder(Record):
    """target.json of an unsigned target folder."""

    SCHEMA = "orchestrator/target-folder"
    VERSION = 1

    schema_: Literal["orchestrator/target-folder"] = Field(
        "orchestrator/target-folder", alias="schema"
    )
    schema_version: Literal[1] = 1
    written_by: str  # "orchestrator <version>"
    artifact: str  # the folder's name, e.g. tinyllm-0.1.0-linux-x86_64-cpu-v3
    action_key: Sha256  # of the plan it was built from (plan/serialize.py action_key)
    summary: TargetSummary  # its entry in release.json
    lock: LockedTarget  # its entry in release.lock, less the archive (made by assemble)
    pins: SharedPins  # what every target of the release shares in the lock
    files: dict[FolderFile, Sha256]  # every other file of the folder
    # the dispatcher it carries (dispatcher/dispatcher) for the -auto folder, if any
    dispatcher: DispatcherInfo | None = None

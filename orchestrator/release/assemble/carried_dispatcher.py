"""The dispatcher carried in a target folder, so that `release assemble` composes the
-auto folders with no Docker Engine of its own (a CI assemble job has none, nor the
toolchain image).

A build job whose target is one level of a flavor that dispatches writes the dispatcher,
compiled in the target's own toolchain image (release/assemble/dispatcher_cache.py), into its
folder as `dispatcher/dispatcher`, and its record into target.json. assemble checks it
like any binary a runner hands over: listed and intact, compiled in the plan's image from
today's source, a static x86_64 executable with no loader; every folder that carries one
for an image must carry the same bytes (the compile is reproducible); with two builders,
the dispatcher is one of the files that must agree. It is never published in the level
folder: it goes into bin/ of the -auto folder only, as a one-machine release puts it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from orchestrator.errors import OrchestratorError, StepFailedError
from orchestrator.execute.ship.dispatcher import check_freestanding, dispatcher_source
from orchestrator.model.binaries.dispatch import dispatch_levels
from orchestrator.model.documents.compose_record import DispatcherInfo
from orchestrator.model.hashing import sha256_bytes
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.release.assemble.compose import DISPATCH_ARCH
from orchestrator.release.assemble.dispatcher_cache import MAX_DISPATCHER_BYTES, cached_dispatcher
from orchestrator.release.assemble.folder_files import read_checked
from orchestrator.release.targets.target import Target
from orchestrator.runtime.api import EngineApi

CARRIED_FILE = "dispatcher/dispatcher"

Carried = tuple[DispatcherInfo, bytes]


def carries_dispatcher(target: Target, plan: BuildPlan) -> bool:
    """Whether a target folder of `plan` carries the dispatcher: an x86_64 level of a
    flavor that dispatches between two or more levels."""
    settings = target.options.settings_for(plan.flavor)
    levels = dispatch_levels(settings.levels)
    return (
        plan.arch == DISPATCH_ARCH
        and settings.dispatch
        and len(levels) >= 2
        and target.level in levels
    )


def carry(
    folder: Path,
    target: Target,
    plan: BuildPlan,
    engine: EngineApi,
    warn: Callable[[str], object],
) -> DispatcherInfo | None:
    """Write the dispatcher into `folder` when its target carries one; its record. A
    dispatcher that cannot be had (the compile failed) is a warning: the -auto folder is
    then composed where the key is, as before, or left out there."""
    if not carries_dispatcher(target, plan):
        return None
    try:
        found = cached_dispatcher(
            engine, plan.image.reference, target.options.cache_dir, lambda _line: None, warn
        )
    except OrchestratorError as error:
        warn(f"the dispatcher is not carried in {plan.artifact_dir}: {error.message}")
        return None
    if found is None:
        warn(f"the dispatcher is not carried in {plan.artifact_dir}: no {plan.image.reference}")
        return None
    info, data = found
    path = folder / CARRIED_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(0o755)
    return info


class CarriedDispatcherError(OrchestratorError):
    exit_code = 78
    summary = (
        "`release assemble`: a dispatcher a target folder carries is not the one this "
        "checkout compiles (another image or source, not a static x86_64 executable, or "
        "another folder carries other bytes)"
    )
    default_hint = (
        "Build the level targets again from this checkout (`orchestrator build --target`); "
        "the dispatcher is compiled in the target's toolchain image and is the same bytes "
        "on every runner."
    )


def check_carried(
    folder: Path, info: DispatcherInfo | None, plan: BuildPlan, files: Mapping[str, str]
) -> Carried | None:
    """The carried dispatcher of a folder whose listing (`files`) was already checked
    intact: its record and bytes, once they are what this checkout compiles."""
    listed = CARRIED_FILE in files
    if info is None and not listed:
        return None
    if info is None or not listed:
        raise CarriedDispatcherError(
            f"{folder}: target.json and the folder disagree about {CARRIED_FILE}"
        )
    if info.image != plan.image.reference or info.source_sha256 != sha256_bytes(
        dispatcher_source()
    ):
        raise CarriedDispatcherError(
            f"{folder}: {CARRIED_FILE} was compiled in another image or from another source "
            f"than this checkout's {plan.image.reference}"
        )
    data = read_checked(folder / CARRIED_FILE, MAX_DISPATCHER_BYTES, CARRIED_FILE)
    if sha256_bytes(data) != files[CARRIED_FILE] or (len(data), sha256_bytes(data)) != (
        info.size,
        info.sha256,
    ):
        raise CarriedDispatcherError(f"{folder}: {CARRIED_FILE} is not the file its record names")
    try:
        check_freestanding(data, plan.image.reference)
    except StepFailedError as error:
        raise CarriedDispatcherError(f"{folder}: {error.message}") from None
    return info, data


def carried_dispatchers(folders: Sequence[tuple[Path, Carried | None]]) -> dict[str, Carried]:
    """The dispatcher of each toolchain image that the (folder, carried) pairs carry; every
    folder that carries one for an image must carry the same bytes."""
    found: dict[str, Carried] = {}
    where: dict[str, Path] = {}
    for path, carried in folders:
        if carried is None:
            continue
        image = carried[0].image
        if image in found and found[image][1] != carried[1]:
            raise CarriedDispatcherError(
                f"{path} and {where[image]} carry different dispatchers for {image}"
            )
        found.setdefault(image, carried)
        where.setdefault(image, path)
    return found

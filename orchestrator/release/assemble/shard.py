"""A release across machines: each target built on its own runner into an unsigned folder
(`orchestrator build --target`), then checked, signed and published once, on the machine
that holds the key (`orchestrator release assemble`).

The folder is the published artifact folder without its signatures, plus target.json
(model/documents/target_folder.py): the action key of the plan it was built from, its release.json
entry and lock entry, and the sha256 of every file. Assembling checks each folder against
the plan this checkout makes, believing none of its records (release/assemble/assemble_checks.py:
the files the plan makes and no other, read safely; lock inputs, pins, build.json and the
SBOM against the plan; every binary's ELF identity, CPU level, glibc floor and compiler),
then publishes through the same code as a one-machine release (execute/ship/publish.py
sign_and_publish), so the release holds the same bytes.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Mapping, Sequence
from difflib import get_close_matches
from pathlib import Path

from rich.console import Console

from orchestrator import __version__
from orchestrator.errors import ConfigError, OrchestratorError
from orchestrator.execute.ship.archive_stage import ArtifactToPublish
from orchestrator.execute.ship.publish import sign_and_publish
from orchestrator.host.staging import fsync_tree, staging_area
from orchestrator.model.documents.compose_record import DispatcherInfo
from orchestrator.model.documents.lockfile import LockedTarget, SharedPins
from orchestrator.model.documents.records import BuildManifest, read_record, write_record
from orchestrator.model.documents.target_folder import TARGET_RECORD, TargetFolder
from orchestrator.model.hashing import sha256_file
from orchestrator.model.layout import release_dir_name
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.plan.serialize import action_key
from orchestrator.release.assemble.assemble_checks import (
    LIMITS,
    CheckedFolder,
    check_folder,
    planned_kind,
)
from orchestrator.release.assemble.assemble_errors import (
    AssembleError,
    TargetFolderError,
    UnplannedBinaryError,
)
from orchestrator.release.assemble.carried_dispatcher import CARRIED_FILE, carry
from orchestrator.release.assemble.compose import compose_groups, compose_release
from orchestrator.release.assemble.folder_files import copy_checked, list_files
from orchestrator.release.lock.pin import (
    archive_outputs,
    locked_target,
    shared_pins,
    vault_for,
    write_release_lock,
)
from orchestrator.release.targets.release_json import write_release_json, write_target_runs
from orchestrator.release.targets.release_view import ReleaseView
from orchestrator.release.targets.target import Target, TargetResult, build_target, measure_speedup
from orchestrator.runtime.engine import Engine
from orchestrator.supply.attest import Signer

# Raised here, defined beside the checks; callers and tests import them from this module.
__all__ = [
    "AssembleError",
    "CheckedFolder",
    "TargetFolderError",
    "UnplannedBinaryError",
    "assemble",
    "build_target_folder",
    "check_folder",
    "check_folders",
    "check_folders_agreeing",
    "compose_where_possible",
    "folder_digests",
    "pick_target",
]


def pick_target(planned: Sequence[tuple[Target, BuildPlan]], name: str) -> tuple[Target, BuildPlan]:
    """The planned target `name` names: its artifact folder's name, or that name without
    the `<binary>-<version>-` prefix (linux-x86_64-cpu-v3)."""
    for target, plan in planned:
        if name in (plan.artifact_dir, plan.artifact_dir.removeprefix(_prefix(target) + "-")):
            return target, plan
    names = [plan.artifact_dir for _, plan in planned]
    short = [plan.artifact_dir.removeprefix(_prefix(t) + "-") for t, plan in planned]
    close = get_close_matches(name, [*names, *short], n=1)
    raise ConfigError(
        f"no target of this release is called {name!r}; its targets: {', '.join(names)}",
        hint=f"Did you mean {close[0]}?"
        if close
        else "`orchestrator release --dry-run` lists them.",
    )


def _prefix(target: Target) -> str:
    return release_dir_name(target.options.binary, target.options.version)


def build_target_folder(
    target: Target,
    plan: BuildPlan,
    engine: Engine,
    console: Console,
    out: Path,
    *,
    bench_runs: int,
    retrain: bool,
    force: bool,
) -> Path:
    """Build one target into `out`/<artifact>/, unsigned, with its target.json. The folder
    appears whole or not at all: it is made in a private folder beside it, then renamed."""
    out.mkdir(parents=True, exist_ok=True)
    private = out / f".{plan.artifact_dir}.{os.getpid()}.partial"
    shutil.rmtree(private, ignore_errors=True)
    try:
        result = TargetResult(target, plan.artifact_dir)
        failure = build_target(
            result,
            plan,
            engine,
            console,
            None,
            retrain=retrain,
            bench_runs=bench_runs,
            force=force,
            unsigned_out=private,
        )
        if failure is not None and result.exception is not None:
            raise result.exception
        if failure is None and not result.speedup_note:
            measure_speedup(result, engine, bench_runs, console.print, "warning:")
        folder = private / plan.artifact_dir
        dispatcher = carry(
            folder, target, plan, engine, lambda line: console.print(f"warning: {line}")
        )
        _describe(folder, target, plan, result, dispatcher)
        destination = out / plan.artifact_dir
        if destination.exists():
            destination.replace(private / "previous")
        folder.replace(destination)
        return destination
    finally:
        shutil.rmtree(private, ignore_errors=True)


def _describe(
    folder: Path,
    target: Target,
    plan: BuildPlan,
    result: TargetResult,
    dispatcher: DispatcherInfo | None,
) -> None:
    """target.json: what assemble needs to check and publish the folder. The inputs the
    lock pins are put in this machine's vault (as `release` does)."""
    options = target.options
    manifest = read_record(folder / "build.json", BuildManifest)
    vault = vault_for(options.cache_dir)
    record = TargetFolder(
        written_by=f"orchestrator {__version__}",
        artifact=plan.artifact_dir,
        action_key=action_key(plan, options),
        summary=result.summary(),
        lock=locked_target(target, plan, manifest, folder, vault, archive=None),
        pins=shared_pins(options.cache_dir, plan, vault),
        files=folder_digests(folder),
        dispatcher=dispatcher,
    )
    write_record(folder / TARGET_RECORD, record)
    fsync_tree(folder)


def folder_digests(folder: Path) -> dict[str, str]:
    """The sha256 of every file below `folder` but target.json, by relative path: the
    names `release assemble` accepts only (safe characters, regular files, no links)."""
    return {
        relative: sha256_file(folder / relative)
        for relative in list_files(folder)
        if relative != TARGET_RECORD
    }


def check_folders(
    planned: Sequence[tuple[Target, BuildPlan]], folders: Sequence[Path]
) -> list[CheckedFolder]:
    """Every folder checked against this checkout's plan (release/assemble/assemble_checks.py), one
    per planned target, in the plan's order, all with the same pins; TargetFolderError,
    AssembleError or UnplannedBinaryError naming the first that is not."""
    return _check_folders(planned, folders, allow_twice=False)


def check_folders_agreeing(
    planned: Sequence[tuple[Target, BuildPlan]], folders: Sequence[Path]
) -> list[CheckedFolder]:
    """As check_folders, but a target may come twice (two builders, release/assemble/agree.py):
    each folder checked on its own, all returned, the plan's order, the second of a pair
    after the first."""
    return _check_folders(planned, folders, allow_twice=True)


def _check_folders(
    planned: Sequence[tuple[Target, BuildPlan]], folders: Sequence[Path], *, allow_twice: bool
) -> list[CheckedFolder]:
    by_artifact: dict[str, CheckedFolder] = {}
    witnesses: dict[str, list[CheckedFolder]] = {}
    plans = [plan.artifact_dir for _, plan in planned]
    for folder in folders:
        item = check_folder(folder, planned)
        artifact = item.record.artifact
        if artifact in by_artifact and not allow_twice:
            raise AssembleError(
                f"{artifact} comes twice: {by_artifact[artifact].path} and {folder}"
            )
        if artifact in by_artifact:
            witnesses.setdefault(artifact, []).append(item)
        else:
            by_artifact[artifact] = item
    missing = [name for name in plans if name not in by_artifact]
    if missing:
        raise AssembleError(f"no folder for {len(missing)} target(s): {', '.join(missing)}")
    checked = [by_artifact[name] for name in plans]
    checked += [item for name in plans for item in witnesses.get(name, [])]
    first = checked[0].record.pins
    for item in checked[1:]:
        if item.record.pins != first:
            raise AssembleError(
                f"{item.path} pins another base rootfs, vendored crates or training inputs "
                f"than {checked[0].path}: they were not built from the same inputs"
            )
    return checked


def assemble(
    release: ReleaseView,
    checked: Sequence[CheckedFolder],
    signer: Signer,
    announce: Callable[[str], None],
    warn: Callable[[str], None],
) -> tuple[list[TargetResult], Path]:
    """Publish every checked folder into the release, signed, then release.json,
    logs/targets.json and release.lock; the targets' results and the lock's path."""
    release_dir = release.release_dir
    results: list[TargetResult] = []
    locked: list[LockedTarget] = []
    for item in checked:
        with staging_area(release.artifacts_dir, f"assemble-{uuid.uuid4().hex[:12]}") as area:
            staged = area / item.record.artifact
            _copy_folder(item, staged)
            sign_and_publish(
                ArtifactToPublish(
                    folder=staged,
                    name=item.record.artifact,
                    manifest=item.manifest,
                    source_archive=item.plan.source.archive,
                ),
                release.publishing,
                signer,
                staging=area,
                say=lambda _line: None,
                warn=warn,
            )
        locked.append(
            item.record.lock.model_copy(update=archive_outputs(release_dir, item.record.artifact))
        )
        results.append(TargetResult.from_summary(item.target, item.record.summary))
        # A runner's words: its control characters were escaped by the checks (the CLI's
        # consoles print without markup, so brackets need nothing more).
        engine = item.record.summary.engine or "an engine it did not name"
        announce(f"published {item.record.artifact} (built on {engine})")
    write_release_json(release_dir, release)
    # how the builds went, as the runners' target.json say (unsigned, like a runner's logs)
    write_target_runs(release_dir, release, results, earlier={})
    pins: SharedPins = checked[0].record.pins
    lock = write_release_lock(release, checked[0].plan, pins, locked, release_dir)
    return results, lock


def compose_where_possible(
    release: ReleaseView,
    release_dir: Path,
    built: Sequence[tuple[TargetResult, BuildPlan]],
    signer: Signer,
    *,
    announce: Callable[[str], None],
    warn: Callable[[str], None],
    carried: Mapping[str, tuple[DispatcherInfo, bytes]] | None = None,
) -> list[str]:
    """The -auto folders of the assembled levels, as a one-shot release composes them; the
    names written. Their dispatcher is the one the level folders carried (checked), else
    this machine's cache's or compiled by its Engine in the flavor's toolchain image;
    without any, the release goes out without them, with a warning (the level folders are
    whole on their own)."""
    groups, _ = compose_groups(release, built)
    if not groups:
        return []
    engine: Engine | None = None
    uncarried = [group.folder for group in groups if group.image not in (carried or {})]
    if uncarried:
        try:
            engine = Engine.connect()
        except OrchestratorError as exc:
            for folder in uncarried:
                warn(f"{folder} not composed: no Docker Engine here ({exc.message})")
            if len(uncarried) == len(groups):
                return []
    return compose_release(
        release, release_dir, built, engine, signer=signer, announce=announce, carried=carried
    )


def _copy_folder(item: CheckedFolder, dest: Path) -> None:
    """The checked files copied (with their permission bits) into `dest`, each read again
    as safely and hashed while copied: exactly what was checked, never target.json."""
    dest.mkdir()
    for relative, sha256 in item.files.items():
        if relative == CARRIED_FILE:  # for the -auto folder's bin/, not the level folder
            continue
        kind = planned_kind(relative, item.target, item.plan) or "record"
        target = dest / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        copy_checked(item.path / relative, target, limit=LIMITS[kind], sha256=sha256, name=relative)

"""A release across machines: each target built on its own runner into an unsigned folder
(`orchestrator build --target`), then checked, signed and published once, on the machine
that holds the key (`orchestrator release assemble`).

The folder is the published artifact folder without its signatures, plus target.json
(model/target_folder.py): the action key of the plan it was built from, its release.json
entry and lock entry, and the sha256 of every file. Assembling checks each folder against
the plan this checkout makes (the same action key: the same sources, lock, toolchain,
settings and orchestrator), refuses anything extra, missing or changed, then publishes
through the same code as a one-machine release (execute/publish.py sign_and_publish), so
the release holds the same bytes.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from difflib import get_close_matches
from pathlib import Path

from rich.console import Console

from orchestrator import __version__
from orchestrator.config.options import Options
from orchestrator.errors import ConfigError, OrchestratorError
from orchestrator.execute.archive_stage import ArtifactToPublish
from orchestrator.execute.publish import sign_and_publish
from orchestrator.host.staging import fsync_tree, staging_area
from orchestrator.model.hashing import sha256_file
from orchestrator.model.layout import release_dir_name
from orchestrator.model.lockfile import LockedTarget, SharedPins
from orchestrator.model.records import BuildManifest, RecordError, read_record, write_record
from orchestrator.model.target_folder import TARGET_RECORD, TargetFolder
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.plan.serialize import action_key
from orchestrator.release.compose import compose_groups, compose_release
from orchestrator.release.pin import (
    archive_outputs,
    locked_target,
    shared_pins,
    vault_for,
    write_release_lock,
)
from orchestrator.release.run import write_release_json
from orchestrator.release.target import Target, TargetResult, build_target, measure_speedup
from orchestrator.runtime.engine import Engine
from orchestrator.supply.attest import Signer

# A folder with more files than this is not one a build made (logs and profiles included).
MAX_FOLDER_FILES = 10_000


class TargetFolderError(OrchestratorError):
    exit_code = 69
    summary = (
        "`release assemble`: a target folder is not intact: no readable target.json, or a "
        "file changed, added or missing since `build --target` wrote it"
    )
    default_hint = (
        "Build the target again (`orchestrator build --target NAME`) and pass the new folder."
    )


class AssembleError(OrchestratorError):
    exit_code = 70
    summary = (
        "`release assemble`: the folders do not make this release: one was built from "
        "another commit, config or orchestrator, names no target of it, comes twice, or a "
        "target has no folder"
    )
    default_hint = (
        "Build every target from this checkout (`orchestrator build --target NAME` for each "
        "name in `orchestrator release --dry-run`), then assemble their folders."
    )


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
        _describe(folder, target, plan, result)
        destination = out / plan.artifact_dir
        if destination.exists():
            destination.replace(private / "previous")
        folder.replace(destination)
        return destination
    finally:
        shutil.rmtree(private, ignore_errors=True)


def _describe(folder: Path, target: Target, plan: BuildPlan, result: TargetResult) -> None:
    """target.json: what assemble needs to check and publish the folder. The inputs the
    lock pins are put in this machine's vault (as `release` does)."""
    options = target.options
    manifest = read_record(folder / "build.json", BuildManifest)
    vault = vault_for(options)
    record = TargetFolder(
        written_by=f"orchestrator {__version__}",
        artifact=plan.artifact_dir,
        action_key=action_key(plan, options),
        summary=result.summary(),
        lock=locked_target(target, plan, manifest, folder, vault, archive=None),
        pins=shared_pins(options, plan, vault),
        files=_digests(folder),
    )
    write_record(folder / TARGET_RECORD, record)
    fsync_tree(folder)


def _digests(folder: Path) -> dict[str, str]:
    """The sha256 of every regular file below `folder` but target.json, by relative path.
    Anything that is not a folder or a regular file (a link, a device) is refused."""
    found: dict[str, str] = {}
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder).as_posix()
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            raise TargetFolderError(f"{folder}: {relative} is not a regular file or folder")
        if path.is_file() and relative != TARGET_RECORD:
            found[relative] = sha256_file(path)
        if len(found) > MAX_FOLDER_FILES:
            raise TargetFolderError(f"{folder} holds more than {MAX_FOLDER_FILES} files")
    return found


@dataclass(frozen=True)
class CheckedFolder:
    """A target folder that matched its record and this checkout's plan."""

    path: Path
    record: TargetFolder
    manifest: BuildManifest
    target: Target
    plan: BuildPlan


def check_folders(
    planned: Sequence[tuple[Target, BuildPlan]], folders: Sequence[Path]
) -> list[CheckedFolder]:
    """Every folder intact and built from this checkout's plan, one per planned target, in
    the plan's order; TargetFolderError or AssembleError naming the first that is not."""
    return _check_folders(planned, folders, allow_twice=False)


def check_folders_agreeing(
    planned: Sequence[tuple[Target, BuildPlan]], folders: Sequence[Path]
) -> list[CheckedFolder]:
    """As check_folders, but a target may come twice (two builders, release/agree.py):
    each folder checked on its own, all returned, the plan's order, the second of a pair
    after the first."""
    return _check_folders(planned, folders, allow_twice=True)


def _check_folders(
    planned: Sequence[tuple[Target, BuildPlan]], folders: Sequence[Path], *, allow_twice: bool
) -> list[CheckedFolder]:
    by_artifact: dict[str, CheckedFolder] = {}
    witnesses: dict[str, list[CheckedFolder]] = {}
    plans = {plan.artifact_dir: (target, plan) for target, plan in planned}
    for folder in folders:
        record = _read_intact(folder)
        if record.artifact not in plans:
            raise AssembleError(
                f"{folder} holds {record.artifact}, which is not a target of this release "
                f"({', '.join(plans)})"
            )
        if record.artifact in by_artifact and not allow_twice:
            raise AssembleError(
                f"{record.artifact} comes twice: {by_artifact[record.artifact].path} and {folder}"
            )
        target, plan = plans[record.artifact]
        if record.action_key != action_key(plan, target.options):
            raise AssembleError(
                f"{folder} was built from another plan than this checkout makes for "
                f"{record.artifact} (another commit, config, toolchain or "
                f"{record.written_by} against orchestrator {__version__})",
                hint="Build it again from this checkout, or assemble in the checkout it came from.",
            )
        manifest = _read_manifest(folder)
        item = CheckedFolder(folder, record, manifest, target, plan)
        if record.artifact in by_artifact:
            witnesses.setdefault(record.artifact, []).append(item)
        else:
            by_artifact[record.artifact] = item
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


def _read_intact(folder: Path) -> TargetFolder:
    """target.json of `folder`, once every file it lists has its sha256 and nothing else
    is there."""
    if folder.is_symlink() or not folder.is_dir():
        raise TargetFolderError(f"{folder} is not a folder (a link is refused too)")
    try:
        record = read_record(folder / TARGET_RECORD, TargetFolder)
    except RecordError as error:
        raise TargetFolderError(
            f"{folder} is not a target folder: {TARGET_RECORD}: {error.message}"
        ) from error
    present = _digests(folder)
    extra = sorted(set(present) - set(record.files))
    lost = sorted(set(record.files) - set(present))
    changed = sorted(
        name for name in present.keys() & record.files.keys() if present[name] != record.files[name]
    )
    problems = [
        *(f"{name} was added" for name in extra),
        *(f"{name} is missing" for name in lost),
        *(f"{name} changed" for name in changed),
    ]
    if problems:
        raise TargetFolderError(
            f"{folder} is not as `build --target` left it: "
            + "; ".join(problems[:5])
            + (f" (and {len(problems) - 5} more)" if len(problems) > 5 else "")
        )
    return record


def _read_manifest(folder: Path) -> BuildManifest:
    manifest = read_record(folder / "build.json", BuildManifest)
    for shipped in manifest.artifact.binaries:
        path = folder / shipped.file
        if not path.is_file() or sha256_file(path) != shipped.sha256:
            raise TargetFolderError(f"{folder}: {shipped.file} is not the binary build.json names")
    return manifest


def assemble(
    options: Options,
    checked: Sequence[CheckedFolder],
    signer: Signer,
    announce: Callable[[str], None],
    warn: Callable[[str], None],
) -> tuple[list[TargetResult], Path]:
    """Publish every checked folder into the release, signed, then release.json and
    release.lock; the targets' results and the lock's path."""
    release_dir = options.artifacts_dir / release_dir_name(options.binary, options.version)
    results: list[TargetResult] = []
    locked: list[LockedTarget] = []
    for item in checked:
        with staging_area(options.artifacts_dir, f"assemble-{uuid.uuid4().hex[:12]}") as area:
            staged = area / item.record.artifact
            _copy_folder(item.path, staged, item.record)
            sign_and_publish(
                ArtifactToPublish(
                    folder=staged,
                    name=item.record.artifact,
                    manifest=item.manifest,
                    source_archive=item.plan.source.archive,
                ),
                options,
                signer,
                staging=area,
                say=lambda _line: None,
                warn=warn,
            )
        locked.append(
            item.record.lock.model_copy(update=archive_outputs(release_dir, item.record.artifact))
        )
        results.append(TargetResult.from_summary(item.target, item.record.summary))
        announce(f"published {item.record.artifact} (built on {item.record.summary.engine})")
    write_release_json(release_dir, options, results, carry_over=False)
    pins: SharedPins = checked[0].record.pins
    lock = write_release_lock(options, checked[0].plan, pins, locked, release_dir)
    return results, lock


def compose_where_possible(
    options: Options,
    release_dir: Path,
    built: Sequence[tuple[TargetResult, BuildPlan]],
    signer: Signer,
    *,
    announce: Callable[[str], None],
    warn: Callable[[str], None],
) -> list[str]:
    """The -auto folders of the assembled levels, as a one-shot release composes them; the
    names written. Their dispatcher comes from this machine's cache or is compiled by its
    Engine in the flavor's toolchain image; without either, the release goes out without
    them, with a warning (the level folders are whole on their own)."""
    groups, _ = compose_groups(options, built)
    if not groups:
        return []
    try:
        engine = Engine.connect()
    except OrchestratorError as exc:
        for group in groups:
            warn(f"{group.folder} not composed: no Docker Engine here ({exc.message})")
        return []
    return compose_release(options, release_dir, built, engine, signer=signer, announce=announce)


def _copy_folder(source: Path, dest: Path, record: TargetFolder) -> None:
    """The files target.json lists, copied (with their modes) into `dest`: exactly what
    was checked, never target.json itself."""
    dest.mkdir()
    for relative in record.files:
        target = dest / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / relative, target)
        target.chmod((source / relative).stat().st_mode & 0o777)

"""Rebuild a release from its pins (release.lock + vault), offline, bit for bit.

`record_release` (release/lock/pin.py, re-exported here) runs after `orchestrator release`:
it puts every input blob in the vault and writes release.lock. `read_locked` reads and
checks a lockfile and the vault; `reproduce` lays the sources (release/lock/locked_sources.py)
and the locked training inputs out in a fresh folder, plans every target, and only then
reaches Docker: it seeds a fresh cache from the vault only (rootfs, .debs, crates,
profiles), builds every target in fresh images and containers with `offline` set, so
nothing can be downloaded, and compares each binary with its recorded sha256. A target
that cannot be rebuilt keeps its error (class and exit code) on its result. Nothing is
installed: without diffoscope, the difference report is a byte comparison that says how to
install it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from rich.console import Console

from orchestrator.config.resolve.options import resolve
from orchestrator.errors import OrchestratorError
from orchestrator.execute.build import prepare_plan, run_build
from orchestrator.execute.steps.profiles import write_sidecar
from orchestrator.host.bootstrap import MANIFEST
from orchestrator.host.inputs import unpack_locked_inputs
from orchestrator.host.vault import Vault
from orchestrator.model.documents.cache_records import ProfileSidecar
from orchestrator.model.documents.lockfile import (
    LockDocument,
    LockDriftError,
    LockedTarget,
    LockfileError,
    blobs,
    drift,
    read_lock,
)
from orchestrator.model.documents.records import EngineRecord, RecordError, read_record
from orchestrator.model.documents.run_logs import BUILD_RUN, BuildRun
from orchestrator.model.hashing import sha256_file
from orchestrator.model.verdict.bolt_binaries import binary_of_profile
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.plan.images import ImagePlan
from orchestrator.plan.serialize import plan_inputs
from orchestrator.plan.step_keys import config_member
from orchestrator.plan.steps import Step
from orchestrator.progress.reporter import Reporter
from orchestrator.release.lock.locked_sources import config_folders, lay_out_sources
from orchestrator.release.lock.pin import check_lock, record_release, vault_for
from orchestrator.release.lock.reproduce_plan import plan_reproduction
from orchestrator.release.targets.target import Target, targets
from orchestrator.runtime.api import engine_record
from orchestrator.runtime.engine import Engine
from orchestrator.runtime.images import package_set_dir
from orchestrator.supply.archives import ARCHIVE_SUFFIX, ZIP_SUFFIX, archive_name
from orchestrator.supply.attest import Signer

__all__ = [  # record_release, check_lock and vault_for live in release/lock/pin.py
    "ReproduceMismatchError",
    "Reproduced",
    "check_lock",
    "read_locked",
    "record_release",
    "reproduce",
    "vault_for",
]


class ReproduceMismatchError(OrchestratorError):
    exit_code = 55
    summary = (
        "`reproduce`: at least one artifact is not bit-identical. A target that failed with an "
        "error exits with that error's code instead (e.g. 51), the first failed target's when "
        "several did"
    )
    default_hint = (
        "The table says which artifacts differ; the diffoscope reports say where, and the "
        "lines above name any recorded input that differed."
    )


# -- reproducing --------------------------------------------------------------------
@dataclass
class Reproduced:
    artifact: str
    expected: str
    got: str = ""
    seconds: float = 0.0
    expected_seconds: float | None = None  # from the release's recorded step times
    error: str = ""  # the first line of the error's message
    inputs_differing: list[str] = field(default_factory=list)
    # other binaries and the archive, by name
    others_differing: list[str] = field(default_factory=list)
    report: Path | None = None
    exception: OrchestratorError | None = field(default=None, repr=False, compare=False)

    def fail(self, error: OrchestratorError) -> None:
        self.exception = error
        self.error = (error.message.splitlines() or [""])[0]

    @property
    def identical(self) -> bool:
        return bool(self.got) and self.got == self.expected and not self.others_differing

    def as_dict(self) -> dict[str, object]:
        return {
            "artifact": self.artifact,
            "expected_sha256": self.expected,
            "got_sha256": self.got or None,
            "identical": self.identical,
            "seconds": round(self.seconds, 1),
            "expected_seconds": (
                None if self.expected_seconds is None else round(self.expected_seconds, 1)
            ),
            "error": self.error or None,
            "error_class": type(self.exception).__name__ if self.exception else None,
            "exit_code": self.exception.exit_code if self.exception else None,
            "inputs_differing": self.inputs_differing,
            "other_binaries_differing": self.others_differing,
            "diffoscope_report": str(self.report) if self.report else None,
        }


def seed_cache(
    document: LockDocument, plan: BuildPlan, target: LockedTarget, cache: Path, vault: Vault
) -> None:
    """Put every locked input of one target where the build looks for it, from the vault.

    Digests and paths come from the lock, whose model refuses any that would name a
    file outside its folder.
    """
    base, source, resolved = document.base, document.source, target.resolved
    vault.materialize(base.rootfs_sha256, cache / "rootfs" / f"{plan.base_image.input_hash}.tar")
    vault.materialize(source.vendor_sha256, cache / "crates" / f"{source.cargo_lock_sha256}.tar")
    set_dir = package_set_dir(plan.base, plan.packages, cache, plan.apt_sources, plan.unpack)
    entries = []
    for package in resolved.packages:
        vault.materialize(package.sha256, set_dir / package.file)
        entries.append({"file": package.file, "sha256": package.sha256, "size": package.size})
    (set_dir / MANIFEST).write_text(json.dumps(entries, indent=1) + "\n")
    for profile in resolved.profiles.values():
        path = cache / "profiles" / profile.cache_file
        vault.materialize(profile.sha256, path)
        # Sealed here: the bytes were just checked against the lock's digest by the vault.
        sidecar = ProfileSidecar(sha256=profile.sha256, size=profile.size, details=profile.details)
        write_sidecar(path, sidecar)


def differing_inputs(document: LockDocument, target: LockedTarget, plan: BuildPlan) -> list[str]:
    name = target.inputs.artifact
    changes = drift([target], {name: plan_inputs(plan)})
    if plan.source.archive_sha256 != document.source.source_archive_sha256:
        changes.insert(0, f"{name}: the source tree differs from the locked one")
    return changes


DIFFOSCOPE_INSTALL = "apt-get install diffoscope-minimal  (or: pip install diffoscope)"


def diffoscope_report(expected: Path, got: Path, report: Path, log: Callable[[str], None]) -> Path:
    """diffoscope's text report; without diffoscope, a byte comparison and how to get it.

    Nothing is installed here: library code never runs a package manager.
    """
    tool = shutil.which("diffoscope")
    if tool is None:
        log(f"diffoscope is not installed; for a full report: {DIFFOSCOPE_INSTALL}")
        differing = sum(
            a != b for a, b in zip(expected.read_bytes(), got.read_bytes(), strict=False)
        )
        report.write_text(
            "diffoscope is not installed, so this is a byte comparison only.\n"
            f"For a full report, install it ({DIFFOSCOPE_INSTALL}) and run:\n"
            f"  diffoscope {expected} {got}\n\n"
            f"{expected}: {expected.stat().st_size} bytes\n{got}: {got.stat().st_size} bytes\n"
            f"{differing} differing bytes in the common length\n"
        )
        return report
    subprocess.run(
        [tool, "--text", str(report), str(expected), str(got)], check=False, capture_output=True
    )
    return report


@dataclass(frozen=True)
class ReproduceRun:
    """What every target's reproduction shares."""

    document: LockDocument
    release_dir: Path
    engine: Engine
    vault: Vault
    console: Console
    signer: Signer
    cache: Path
    fresh_images: bool
    announce: Callable[[str], None]
    # Images built under this run's own references (fresh_images); removed at its end.
    built_images: set[str] = field(default_factory=set)


def read_locked(lock_path: Path, vault: Vault, only: Sequence[str] = ()) -> LockDocument:
    """The lockfile (a file, or a release folder holding one), cut down to the artifacts
    in `only` (all when empty), once the vault holds every input it names."""
    document = read_lock(lock_path)
    known = {t.inputs.artifact for t in document.targets}
    unknown = sorted(set(only) - known)
    if unknown:
        raise LockfileError(
            f"not in the lockfile: {', '.join(unknown)}",
            hint="It locks: " + ", ".join(sorted(known)),
        )
    if only:
        chosen = [t for t in document.targets if t.inputs.artifact in only]
        document = document.model_copy(update={"targets": chosen})
    missing = [
        f"{what} ({digest[:12]})"
        for digest, what in blobs(document).items()
        if not vault.has(digest)
    ]
    if missing:
        raise LockfileError(
            f"the vault lacks {len(missing)} input(s) of this release: " + ", ".join(missing[:5]),
            hint="Import the release's vault archive: orchestrator vault import <archive>.",
        )
    return document


def _check_locked_toolchain(document: LockDocument, configured: str) -> None:
    """The locked config's toolchain (a file in toolchains/, checked by `resolve`) is the
    one every target records: a lock whose config text was edited to another is refused."""
    recorded = sorted({t.inputs.toolchain for t in document.targets} - {configured})
    if recorded:
        raise LockfileError(
            f"the lock's config names toolchain {configured!r}, but its targets were built "
            f"with {', '.join(repr(name) for name in recorded)}: the lock is inconsistent",
            hint="Someone edited its config text. Download the release again from its publisher.",
        )


def reproduce(
    document: LockDocument,
    release_dir: Path,
    *,
    connect: Callable[[], Engine],
    vault: Vault,
    console: Console,
    signer: Signer,
    workdir: Path,
    source_dir: Path | None,
    fresh_images: bool,
    announce: Callable[[str], None],
) -> list[Reproduced]:
    """Rebuild every target of `document` (from `read_locked`) and compare the bytes with
    those published in `release_dir`. Docker is reached through `connect` only once the
    sources are laid out and every target is planned: bad input fails without it."""
    config = lay_out_sources(
        document, workdir / "src", source_dir, places=config_folders(release_dir)
    )
    cache = workdir / "cache"
    options = resolve(
        config,
        env={"SOURCE_DATE_EPOCH": str(document.source.source_date_epoch)},
        cli={"build.artifacts_dir": str(workdir / "artifacts"), "build.cache_dir": str(cache)},
        cwd=config.parent,
    )
    _check_locked_toolchain(document, options.toolchain)
    if document.limits is not None:  # the release's container limits, not this host's
        limits = document.limits
        options = replace(options, limit_pids=limits.pids, limit_memory=str(limits.memory))
    if options.train_inputs:  # from the vault, never from the paths the config names
        archives = {item.name: vault.verify(item.sha256) for item in document.source.inputs}
        unpacked = unpack_locked_inputs(archives, options.train_inputs, workdir / "inputs")
        options = replace(options, train_inputs=unpacked)
    configured: dict[str, tuple[Target, BuildPlan]] = {}
    flavors = sorted({t.inputs.flavor for t in document.targets})
    for target in targets(replace(options, offline=True), flavors):
        # Build scripts' `git` answers what it answered then, not what a checkout says now
        plan = prepare_plan(target.options, target.flavor, git=document.source.git)
        configured.setdefault(plan.artifact_dir, (target, plan))
    # The step cache starts empty: a step is reused only from an earlier target of this
    # reproduction, never from anything a build before it left in the work folder.
    shutil.rmtree(cache / "steps", ignore_errors=True)
    entries = sorted(document.targets, key=lambda t: t.inputs.artifact)
    results: list[Reproduced] = []
    pinned: dict[str, tuple[Target, BuildPlan]] = {}
    for entry in entries:
        name = entry.inputs.artifact
        results.append(Reproduced(name, entry.output.sha256))
        if name in configured:
            target, plan = configured[name]
            results[-1].inputs_differing = differing_inputs(document, entry, plan)
            pinned[name] = pin_resolved(document, entry, target, plan)
            seed_cache(document, pinned[name][1], entry, cache, vault)
    # What runs and what is shared, and how long the release's record says it takes
    schedule = plan_reproduction(
        [
            (entry, pinned[entry.inputs.artifact][1])
            for entry in entries
            if entry.inputs.artifact in pinned
        ],
        cache,
        release_dir,
        config_member(options.config_path, options.crate_dir),
    )
    for line in schedule.lines():
        announce(line)
    run = ReproduceRun(
        document, release_dir, connect(), vault, console, signer, cache, fresh_images, announce
    )
    try:
        for entry, result in zip(entries, results, strict=True):
            result.expected_seconds = schedule.expected_seconds(result.artifact)
            if result.artifact not in pinned:
                result.fail(LockDriftError("the locked config no longer yields this target"))
                continue
            _reproduce_one(run, entry, *pinned[result.artifact], result)
    finally:
        # Only what this run built: images that existed before, or that another run uses
        # or built, stay (they were never touched: other references).
        for reference in sorted(run.built_images):
            run.engine.remove_image(reference)
    return results


def private_images(plan: BuildPlan, session: str) -> BuildPlan:
    """The plan with its base and toolchain images under references of this run's own
    (`<repository>:repro-<session>-<tag>`): built afresh from the vault, without removing or
    re-tagging the shared images that other runs on the engine may be using."""

    def private(image: ImagePlan) -> ImagePlan:
        repository, tag = image.reference.rsplit(":", 1)
        return ImagePlan(f"{repository}:repro-{session}-{tag}", image.input_hash)

    base, image = private(plan.base_image), private(plan.image)
    renamed = {plan.base_image.reference: base.reference, plan.image.reference: image.reference}

    def retitled(step: Step) -> Step:  # the step lines name the images really built
        words = [renamed.get(word, word) for word in step.title.split(" ")]
        return replace(step, title=" ".join(words))

    steps = tuple(retitled(step) for step in plan.steps)
    return replace(plan, base_image=base, image=image, steps=steps)


def locked_unbolted(entry: LockedTarget, others: Sequence[str]) -> tuple[str, ...]:
    """The other binaries the release shipped unBOLTed: those its gate put back, and those
    whose BOLT profile the lock does not hold (no workload runs them, their BOLT failed, or
    the release predates BOLT of every binary)."""
    profiled = {binary_of_profile(name) for name in entry.resolved.profiles}
    gate = entry.resolved.gate
    put_back = set(gate.unbolted) if gate is not None else set()
    return tuple(name for name in others if name in put_back or name not in profiled)


def pin_resolved(
    document: LockDocument, entry: LockedTarget, target: Target, plan: BuildPlan
) -> tuple[Target, BuildPlan]:
    """The target and its plan with what the release resolved on its machine."""
    options = target.options
    locked_mode = entry.resolved.bolt.mode if entry.resolved.bolt else None
    if plan.bolt is not None and locked_mode and plan.bolt.mode != locked_mode:
        # `auto` picks a BOLT mode from what perf can do on this machine; the release's
        # choice is a resolved input, and its profile is keyed by it.
        options = replace(options, bolt_mode=locked_mode)
    if plan.gate is not None and entry.resolved.gate is not None:
        # The gate's pick is a resolved input: counting again on another machine could
        # land on the other side of min_gain and ship different bytes.
        options = replace(
            options,
            gate_pinned=entry.resolved.gate.shipped,
            gate_pinned_unbolted=locked_unbolted(entry, plan.binaries[1:]),
        )
    if options is target.options:
        return target, plan
    target = replace(target, options=options)  # planned once more, with both
    return target, prepare_plan(options, target.flavor, git=document.source.git)


def _reproduce_one(
    run: ReproduceRun, entry: LockedTarget, target: Target, plan: BuildPlan, result: Reproduced
) -> None:
    if run.fresh_images:
        plan = private_images(plan, run.engine.session)
        run.built_images.update((plan.base_image.reference, plan.image.reference))
    here = engine_record(run.engine).described()
    built_on = entry.built_on or _built_on(run.release_dir / result.artifact)
    there = f"; the release built it on {built_on.described()}" if built_on else ""
    run.announce(f"reproducing {result.artifact} on {here}{there}")
    reporter = Reporter(run.console, run.cache / "runs" / run.engine.session / result.artifact)
    started = time.monotonic()
    try:
        # Everything from the lock: the step cache is this reproduction's own, empty at
        # its start, so a step is only ever reused from an earlier target of this run.
        outcome = run_build(
            target.options, plan, run.engine, reporter, signer=run.signer, step_cache="use"
        )
    except OrchestratorError as error:
        result.fail(error)
        return
    finally:
        result.seconds = time.monotonic() - started
    result.got = sha256_file(outcome.binary)
    for other in entry.other_outputs:  # the artifact's other binaries, bit for bit too
        rebuilt = outcome.binary.parent / other.file
        if not rebuilt.is_file() or sha256_file(rebuilt) != other.sha256:
            result.others_differing.append(other.file)
    # The archive packs those bytes with the locked sources' docs at SOURCE_DATE_EPOCH:
    # it must come out byte for byte as locked too (a lock made before archives has none).
    for locked, suffix in ((entry.archive, ARCHIVE_SUFFIX), (entry.archive_zip, ZIP_SUFFIX)):
        rebuilt = outcome.artifact.parent / archive_name(result.artifact, suffix)
        if locked is not None and (not rebuilt.is_file() or sha256_file(rebuilt) != locked.sha256):
            result.others_differing.append(locked.file)
    expected = run.release_dir / result.artifact / entry.output.file
    if not result.identical and expected.is_file():
        report = outcome.artifact.parent.parent / f"{result.artifact}.diffoscope.txt"
        result.report = diffoscope_report(expected, outcome.binary, report, run.announce)


def _built_on(artifact: Path) -> EngineRecord | None:
    """The engine the folder's unsigned logs/run.json names (a lock written since its
    built_on left the signed files names none); None when it does not read."""
    try:
        return read_record(artifact / BUILD_RUN, BuildRun).engine
    except RecordError:
        return None

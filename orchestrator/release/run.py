"""`orchestrator release`: every flavor and level of the config, one after another.

A failed target does not stop the others; the summary and logs/targets.json show all of
them, each failed one with its error's class and exit code, and the exit code says whether
all succeeded (49 when any failed, whatever their errors). A failed quick bench is only a
warning on its target; a target without a speed figure says why (emulated, skipped).
release.json (signed) lists what the release publishes, from the folders' build.json; how
each target's last build went is in logs/targets.json (release/targets/release_json.py). A run
that builds nothing and finds every file current writes nothing.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import nullcontext
from pathlib import Path

from rich.console import Console

from orchestrator.errors import DockerUnavailableError, OrchestratorError
from orchestrator.execute.build import prepare_plan
from orchestrator.execute.ship.release_index import update_release_index
from orchestrator.model.documents.records import BuildManifest
from orchestrator.model.documents.release_summary import EngineJobs, TargetSummary
from orchestrator.model.documents.reports import (
    ReleaseRunReport,
    SigningInfo,
)
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.plan.serialize import action_key
from orchestrator.progress.board import TargetBoard
from orchestrator.progress.reporter import Marks, in_ci, marks_for
from orchestrator.release.assemble.compose import compose_release
from orchestrator.release.ending import failed_tests_advice
from orchestrator.release.targets.action_cache import CacheLookup, look_up
from orchestrator.release.targets.engine_jobs import cargo_jobs_on, jobs_per_engine
from orchestrator.release.targets.farm import Build, FarmReport, Work, build_on_engines
from orchestrator.release.targets.prefetch import PREFETCH_LOGS, Prefetcher
from orchestrator.release.targets.release_json import (
    RELEASE_JSON,
    earlier_runs,
    write_release_json,
    write_target_runs,
)
from orchestrator.release.targets.release_view import EngineSettings, ReleaseView
from orchestrator.release.targets.target import Target, TargetResult, build_target, measure_speedup
from orchestrator.runtime.engine import Engine
from orchestrator.supply.attest import PUBLIC_KEY, Signer
from orchestrator.supply.minisign import PublicKey, VerificationError

__all__ = [  # RELEASE_JSON is release/targets/release_json.py's; its callers read it here too
    "RELEASE_JSON",
    "ReleaseIncompleteError",
    "incomplete_hint",
    "plan_targets",
    "public_key_for",
    "run_release",
    "run_report",
    "verify_command",
]


class ReleaseIncompleteError(OrchestratorError):
    exit_code = 49
    summary = (
        "`release`: at least one target failed (the others are published). Always 49, whatever "
        "the targets' errors; the release's `logs/targets.json` records each failed target's "
        "`error_class` and `exit_code`"
    )
    default_hint = "The summary above says which targets failed and why; their logs are kept."


def incomplete_hint(results: Sequence[TargetResult]) -> str:
    """ReleaseIncompleteError's hint: its default, and for each flavor whose `cargo test`
    failed, the `[flavors.<name>.test] args` that skip the failed tests."""
    return "\n".join([ReleaseIncompleteError.default_hint, *failed_tests_advice(results)])


def plan_targets(chosen: Sequence[Target]) -> list[tuple[Target, BuildPlan]]:
    """Each target with its plan: every input (config, toolchain, sources) read and checked,
    before Docker is asked anything. Made once; the build runs exactly these plans."""
    return [(target, prepare_plan(target.options, target.flavor)) for target in chosen]


def run_release(
    release: ReleaseView,
    planned: Sequence[tuple[Target, BuildPlan]],
    engines: Engine | Sequence[Engine],
    console: Console,
    signer: Signer,
    *,
    retrain: bool,
    bench_runs: int,
    announce: Callable[[str], None],
    force: bool = False,
    jobs: Sequence[EngineJobs] | None = None,
) -> list[TargetResult]:
    """Build each planned target; a target whose published artifact is current
    (release/targets/action_cache.py) is `cached` instead, unless `force` or `retrain`. On one
    engine that builds one target at a time, they are built one after another, in order;
    otherwise side by side (release/targets/farm.py). `jobs`: each engine's targets at a time
    (release/targets/engine_jobs.py), worked out here when not given."""
    pool = list(engines) if isinstance(engines, Sequence) else [engines]
    jobs = list(jobs or jobs_per_engine(release.engines.jobs, pool, len(planned)))
    side_by_side = len(pool) > 1 or any(item.jobs > 1 for item in jobs)
    waiting: list[tuple[TargetResult, BuildPlan]] = []
    results: list[TargetResult] = []
    release_dir = release.release_dir
    marks = marks_for(console)
    earlier = earlier_runs(release_dir)  # how each target's last build went
    # One live line per target, redrawn in place, when they build side by side on a terminal
    board = TargetBoard(console) if side_by_side and not in_ci(console) else None

    def build(item: tuple[TargetResult, BuildPlan], on: Engine, prefix: str) -> bool:
        """Build one target on `on`, then its quick bench; whether the build failed. A
        target moved off a dead engine starts again from a clean result."""
        result, plan = item
        result.status, result.exception, result.error = "planned", None, ""
        live = None
        if board is not None:
            board.took(result.artifact, on.name)
            live = board.line_of(result.artifact)
        failure = build_target(
            result,
            plan,
            on,
            console,
            signer,
            retrain=retrain,
            bench_runs=bench_runs,
            prefix=prefix,
            live=live,
            force=force,
            cargo_jobs=cargo_jobs_on(jobs, on.name),
        )
        if failure is None and not result.speedup_note:
            if live is not None:
                live.step("quick bench")
            measure_speedup(result, on, bench_runs, announce, marks.warning)
        if board is not None:
            board.ended(result.artifact, failed=failure is not None)
        if failure is not None:
            announce(failure)
            return True
        return False

    ahead = None
    if not side_by_side and jobs[0].prefetch:
        logs = release.cache_dir / "runs" / pool[0].session / PREFETCH_LOGS
        ahead = Prefetcher(
            pool[0], announce, cache_dir=release.cache_dir, offline=release.offline, log_dir=logs
        )
    order = _InOrder(planned, release_dir, signer, earlier, announce, rebuild=force or retrain)
    try:
        for result, plan in order.to_build(results, marks, ahead):
            if not side_by_side:
                build((result, plan), pool[0], "")
                continue
            waiting.append((result, plan))
            if board is not None:
                board.add(plan.artifact_dir)
    finally:
        if ahead is not None:
            ahead.stop()
    if waiting:
        with board.shown() if board is not None else nullcontext():
            _build_side_by_side(waiting, pool, build, release.engines, announce, jobs=jobs)
    _finish(
        release,
        results,
        planned,
        pool[0],
        signer=signer,
        announce=announce,
        earlier=earlier,
        jobs=jobs,
    )
    return results


def _finish(
    release: ReleaseView,
    results: Sequence[TargetResult],
    planned: Sequence[tuple[Target, BuildPlan]],
    engine: Engine,
    *,
    signer: Signer,
    announce: Callable[[str], None],
    earlier: Mapping[str, TargetSummary],
    jobs: Sequence[EngineJobs],
) -> None:
    """After the targets: logs/targets.json when anything was built (or failed),
    release.json, the -auto folders and the index, each written only when it changes; a
    run that wrote none of them says the release is current."""
    release_dir = release.release_dir
    built = any(result.status != "cached" for result in results)
    if built:  # a run that built nothing keeps the record of the builds that made them
        write_target_runs(release_dir, release, results, earlier=earlier, jobs=jobs)
    changed = write_release_json(release_dir, release, lambda text: announce(f"warning: {text}"))
    signed = _compose_and_sign(release, results, planned, engine, signer=signer, announce=announce)
    if not (built or changed or signed):
        announce(f"{release_dir.name} is current: every target cached, nothing written")


def _compose_and_sign(
    release: ReleaseView,
    results: Sequence[TargetResult],
    planned: Sequence[tuple[Target, BuildPlan]],
    engine: Engine,
    *,
    signer: Signer,
    announce: Callable[[str], None],
) -> bool:
    """Compose the -auto folders from the published levels (release/assemble/compose.py), then sign
    the release index with them; whether anything was written (a current -auto folder and
    an index that would come out the same are left as they are)."""
    release_dir = release.release_dir
    built = [(result, plan) for result, (_target, plan) in zip(results, planned, strict=False)]
    composed = compose_release(
        release, release_dir, built, engine, signer=signer, announce=announce
    )
    return _sign_index(release_dir, signer, announce, composed=composed) or bool(composed)


class _InOrder:
    """The release's targets in their order, each with its result: one whose published
    artifact is current is cached; the others are built, one after another with their
    images made ahead (release/targets/prefetch.py), or side by side. The action cache is asked
    once per target: the prefetch asks ahead which later targets will be built."""

    def __init__(
        self,
        planned: Sequence[tuple[Target, BuildPlan]],
        release_dir: Path,
        signer: Signer,
        earlier: Mapping[str, TargetSummary],
        announce: Callable[[str], None],
        *,
        rebuild: bool,
    ) -> None:
        self._planned, self._release_dir, self._public = planned, release_dir, signer.key.public
        self._earlier, self._announce, self._rebuild = earlier, announce, rebuild
        self._found: dict[str, CacheLookup] = {}

    def to_build(
        self, results: list[TargetResult], marks: Marks, ahead: Prefetcher | None
    ) -> Iterator[tuple[TargetResult, BuildPlan]]:
        """Each target's result into `results`; the ones to build, as their turn comes."""
        announce = self._announce
        for index, (target, plan) in enumerate(self._planned, start=1):
            result = TargetResult(target, plan.artifact_dir)
            results.append(result)
            announce(
                f"[{index}/{len(self._planned)}] {plan.artifact_dir} (target-cpu {target.level})"
            )
            if not self._rebuild:
                lookup = self._lookup(target, plan)
                if lookup.manifest is not None:
                    _reuse(result, lookup.manifest, self._earlier.get(plan.artifact_dir))
                    announce(f"{marks.cached} {plan.artifact_dir}: cached, {lookup.reason}")
                    continue
                announce(f"  building: {lookup.reason}")
            if ahead is not None:  # its images, if made ahead; then the next target's
                later = [p for t, p in self._planned[index:] if self._built(t, p)]
                failed_ahead = ahead.turn(plan, later)
                if failed_ahead:
                    result.warnings.append(failed_ahead)
                    announce(f"{marks.warning} {plan.artifact_dir}: {failed_ahead}")
            yield result, plan

    def _built(self, target: Target, plan: BuildPlan) -> bool:
        return self._rebuild or self._lookup(target, plan).manifest is None

    def _lookup(self, target: Target, plan: BuildPlan) -> CacheLookup:
        if plan.artifact_dir not in self._found:
            key = action_key(plan, target.options)
            artifact = self._release_dir / plan.artifact_dir
            self._found[plan.artifact_dir] = look_up(artifact, key, self._public)
        return self._found[plan.artifact_dir]


def _sign_index(
    release_dir: Path,
    signer: Signer,
    announce: Callable[[str], None],
    *,
    composed: Sequence[str] = (),
) -> bool:
    """Sign the release index again: release.json and the -auto folders composed now are
    this run's own, the rest only as the last signature vouched for it; say what was left
    out. Whether the index was written (not when it would come out the same)."""
    if not release_dir.is_dir():
        return False
    vouched = (RELEASE_JSON, *composed)
    signature = update_release_index(release_dir, signer, vouched=vouched)
    for entry in signature.left_out:
        announce(f"warning: not signed again: {entry}")
    return bool(signature.written)


def _build_side_by_side(
    waiting: Sequence[tuple[TargetResult, BuildPlan]],
    pool: Sequence[Engine],
    build: Build[tuple[TargetResult, BuildPlan]],
    engines: EngineSettings,
    announce: Callable[[str], None],
    *,
    jobs: Sequence[EngineJobs],
) -> None:
    """Build the targets over the engines (release/targets/farm.py); record where each went."""
    work = [
        Work(
            (result, plan),
            plan.artifact_dir,
            result.target.flavor,
            (plan.image.reference, plan.base_image.reference),
        )
        for result, plan in waiting
    ]
    farm = build_on_engines(
        work,
        pool,
        build,
        per_engine={item.engine: item.jobs for item in jobs},
        requirements=engines.require,
        announce=announce,
    )
    _take_farm_report(farm, [result for result, _ in waiting])


def _take_farm_report(farm: FarmReport, results: Sequence[TargetResult]) -> None:
    """Where each target was built, which engines it left, and why one was not built."""
    for result in results:
        result.moves = farm.moves.get(result.artifact, [])
        reason = farm.stranded.get(result.artifact)
        if reason is not None:
            error = DockerUnavailableError(reason)
            result.status, result.exception, result.error = "failed", error, reason
        elif result.moves:
            result.warnings.append(
                f"built on {result.engine} after leaving " + "; ".join(result.moves)
            )


def _reuse(result: TargetResult, manifest: BuildManifest, entry: TargetSummary | None) -> None:
    """A cached target's result: its published build's record, and the speed figure the
    release that built it measured."""
    result.status = "cached"
    result.size, result.sha256 = manifest.artifact.size, manifest.artifact.sha256
    result.take_build_facts(manifest)
    if entry is not None:
        result.gpu_path = result.gpu_path or entry.gpu_path  # logs/targets.json's word
        result.speedup = entry.speedup_vs_baseline
        result.speedup_note = entry.speedup_note or ""
        result.warnings = list(entry.warnings)


def public_key_for(signer: Signer) -> Path | None:
    """The public half of the signing key, where keygen puts it (KEY with .pub in place of
    its suffix), when that file holds this key; None otherwise."""
    candidate = Path(signer.source).with_suffix(".pub")
    try:
        if PublicKey.load(candidate).key_id == signer.key.public.key_id:
            return candidate
    except (VerificationError, OSError):
        return None
    return None


def verify_command(release_dir: Path, public_key: Path | None) -> str:
    """The command that checks the published release against the publisher's key."""
    key = shlex.quote(str(public_key)) if public_key else "PUBLIC_KEY"
    return f"orchestrator verify {shlex.quote(str(release_dir))} --key {key}"


def run_report(
    release: ReleaseView,
    results: Sequence[TargetResult],
    signer: Signer,
    *,
    seconds: float,
    lockfile: Path | None,
    jobs: Sequence[EngineJobs] = (),
) -> ReleaseRunReport:
    """What `release --json` prints, and what the text summary ends with."""
    release_dir = release.release_dir
    published = (release_dir / PUBLIC_KEY).is_file()
    public_key = public_key_for(signer)
    return ReleaseRunReport(
        name=release.binary,
        version=release.version,
        release_dir=str(release_dir),
        published=published,
        seconds=round(seconds, 1),
        targets=[result.summary() for result in results],
        failed=[result.artifact for result in results if result.status == "failed"],
        lockfile=str(lockfile) if lockfile else None,
        signing=SigningInfo(
            key=signer.source,
            key_id=signer.key.public.id_text,
            throwaway=signer.throwaway,
            public_key=str(public_key) if public_key else None,
        ),
        verify_command=verify_command(release_dir, public_key) if published else None,
        jobs_per_engine=list(jobs),
    )

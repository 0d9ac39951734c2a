"""`orchestrator release --dry-run`: every target's plan, what is cached, which engines
can build it and how many targets each builds at a time, as a table or JSON. Nothing is
built; Docker is only asked what it holds."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Column, Table
from rich.text import Text

from orchestrator.cli.app import console, err_console, styled
from orchestrator.cli.output import emit_json
from orchestrator.errors import OrchestratorError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from orchestrator.model.documents.reports import EngineFit
    from orchestrator.release.dry_run import PlannedTarget
    from orchestrator.release.targets.release_view import ReleaseView
    from orchestrator.release.targets.target import Target
    from orchestrator.runtime.engine import Engine


def print_plan(release: ReleaseView, chosen: Sequence[Target], *, json_output: bool) -> None:
    """`release --dry-run`: every target's plan, what is cached and, with several engines,
    which of them can build it; as a table or JSON."""
    from orchestrator.release.dry_run import dry_run as plan_release
    from orchestrator.release.dry_run import plan_report
    from orchestrator.release.targets.engine_jobs import jobs_per_engine, jobs_text

    # Reading every target's sources and asking each engine takes a while: a sign of life
    # on a terminal (stderr, so that --json output stays clean; silent elsewhere).
    with err_console.status("planning: reading the sources, asking Docker what it holds"):
        engines, unreachable = _engines_that_answer(release.engines.contexts)
        planned = plan_release(release, chosen, engines, unreachable)
        to_build = sum(not item.cached.artifact for item in planned)
        jobs = jobs_per_engine(
            release.engines.jobs, engines, to_build, prefetch=release.engines.prefetch
        )
    for name, why in unreachable.items():  # connect_engines refuses to start without it
        err_console.print(
            styled("warning:", "yellow bold", f" a release would fail: engine {name}: {why}")
        )
    if json_output:
        emit_json(plan_report(release, planned, docker_reachable=bool(engines), jobs=jobs))
        return
    several = len(release.engines.contexts) > 1
    table = Table(
        "target",
        # Folded, never cut short: the end of a name is what tells targets apart (-cpu-v3).
        Column("artifact", overflow="fold"),
        Column("image", overflow="fold"),
        "cached",
        *(["engines"] if several else []),
        "steps",
        title="release plan (nothing is built)",
    )
    for item in planned:
        hits = ", ".join(k for k, v in item.cached.labelled().items() if v) or "nothing"
        table.add_row(
            f"{item.target.flavor} {item.target.level}",
            item.plan.artifact_dir,
            item.plan.image.reference,
            hits if engines or item.cached.artifact else f"{hits} (Docker not reachable)",
            *([_engines_text(item.engines)] if several else []),
            f"none: {item.cached.artifact_reason}"
            if item.cached.artifact
            else " ".join(s.name for s in item.plan.steps),
        )
    console.print(table)
    for line in _compositions(release, planned):
        console.print(Text(line), soft_wrap=True)
    if jobs:  # unwrapped: one line per release, read whole
        console.print(Text(jobs_text(jobs)), soft_wrap=True)
    if several:
        console.print(
            "engines: those that can build the target; which one does is decided as the "
            "release runs (an idle one, preferring one that holds the target's images)"
        )


def _compositions(release: ReleaseView, planned: Sequence[PlannedTarget]) -> list[str]:
    """The -auto folders the release composes when every target builds."""
    from orchestrator.release.assemble.compose import compose_groups
    from orchestrator.release.targets.target import TargetResult

    built = [
        (TargetResult(item.target, item.plan.artifact_dir, status="ok"), item.plan)
        for item in planned
    ]
    groups, _ = compose_groups(release, built)
    return [
        f"composes: {group.folder} (bin/{release.binary} runs the best of "
        f"{', '.join(level for level, _ in group.levels)} for the CPU it starts on; a level "
        "the gate counts no faster than the one below it is left out)"
        for group in groups
    ]


def _engines_that_answer(contexts: Sequence[str]) -> tuple[list[Engine], dict[str, str]]:
    """For a dry run: the engines that answer and, by name, why the others did not. A
    context the Docker CLI does not know is still an error: the release would refuse it."""
    from orchestrator.runtime.contexts import resolve_contexts
    from orchestrator.runtime.engine import Engine

    if not contexts:
        try:
            return [Engine.connect()], {}
        except OrchestratorError:
            return [], {}  # the plan needs no Docker; cache hits then say "unknown"
    engines, unreachable = [], {}
    for endpoint in resolve_contexts(contexts):
        try:
            engines.append(Engine.connect(endpoint))
        except OrchestratorError as error:
            unreachable[endpoint.label] = error.message
    return engines, unreachable


def _engines_text(fits: Sequence[EngineFit]) -> str:
    """`default (holds toolchain image), build-box`; where none fits, why not."""
    usable = [f"{f.engine} (holds {f.holds})" if f.holds else f.engine for f in fits if f.fits]
    if usable:
        return ", ".join(usable)
    return "none: " + "; ".join(fit.note for fit in fits)

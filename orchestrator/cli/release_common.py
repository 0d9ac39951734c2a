"""What `release`, `release assemble`, `release --rebuild-on` and `lock` share: the
engines a release builds on, the refusal of an uncommitted tree, and the closing lines."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.text import Text

from orchestrator.cli.app import err_console, styled

if TYPE_CHECKING:
    from rich.console import Console

    from orchestrator.host.source import CrateView
    from orchestrator.model.documents.reports import ReleaseRunReport
    from orchestrator.runtime.engine import Engine


QUICK_BENCH_RUNS = 3  # release's speedup column is a quick look, not `orchestrator bench`


def quick_bench_runs(flag: int | None, *, configured: int, source: str) -> int:
    """The runs of a release target's quick bench: --bench-runs, else bench.runs
    (`configured`) where the config file or the environment sets it (its `source`, as
    `Options.sources` says), else QUICK_BENCH_RUNS."""
    if flag is not None:
        return flag
    if not source.startswith("default"):
        return configured
    return QUICK_BENCH_RUNS


def connect_engines(contexts: Sequence[str]) -> list[Engine]:
    """The engines a release builds on: each named Docker context, else the current one.
    Every one must answer before anything is built."""
    from orchestrator.runtime.contexts import resolve_contexts
    from orchestrator.runtime.engine import Engine

    if not contexts:
        return [Engine.connect()]
    return [Engine.connect(endpoint) for endpoint in resolve_contexts(contexts)]


def closing_lines(
    report: ReleaseRunReport,
    out: Console,
    notes: Sequence[str] = (),
    *,
    unpinned: str | None = None,
) -> None:
    """What happened that the table does not say (`notes`, and a release.lock not
    written), where the release is, how long it took, what to run next; the key warning
    last, where it is read."""
    from orchestrator.progress.reporter import duration_text
    from orchestrator.release.ending import lock_line
    from orchestrator.release.targets.engine_jobs import jobs_text

    for note in notes:
        err_console.print(styled("note:", "yellow bold", f" {note}"))
    unlocked = lock_line(report, unpinned)
    if unlocked:
        out.print(Text(unlocked), soft_wrap=True)

    ok = len(report.targets) - len(report.failed)
    cached = sum(target.status == "cached" for target in report.targets)
    took = duration_text(report.seconds)
    counts = f"{ok} of {len(report.targets)} targets ok"
    if cached:  # a no-op release says that it was one
        counts += f", {cached} cached (inputs unchanged, not built again)"
    lines = [
        f"release: {report.release_dir} ({counts}, {took})"
        if report.published
        else f"nothing was published to {report.release_dir} ({took})"
    ]
    if report.verify_command:
        lines.append(f"verify:  {report.verify_command}")
        if report.signing.public_key is None:
            lines.append(f"         (PUBLIC_KEY: the public half of {report.signing.key})")
    if report.jobs_per_engine:  # before the path and verify: those stay the last lines
        lines.insert(0, jobs_text(report.jobs_per_engine))
    for line in lines:  # unwrapped, so the command can be copied whole
        out.print(Text(line), soft_wrap=True)
    if report.signing.throwaway:
        err_console.print(
            styled(
                "WARNING: signed with a THROWAWAY key",
                "bold yellow",
                f" ({report.signing.key}): its signatures prove integrity, not origin. Make "
                "a real key with `orchestrator keygen` and set signing.secret_key or "
                "ORCHESTRATOR_SIGNING_KEY.",
            )
        )


def refuse_dirty(crate: CrateView, *, allow_dirty: bool) -> None:
    from orchestrator.errors import SourceError

    changed = dirty_files(crate)
    if changed and not allow_dirty:
        shown = ", ".join(changed[:5]) + (
            f" and {len(changed) - 5} more" if len(changed) > 5 else ""
        )
        raise SourceError(
            f"{crate.crate_dir} has uncommitted changes ({shown}): the release could not "
            "be reproduced from its git commit",
            hint="Commit them, or pass --allow-dirty (release.lock records it). An "
            "uncommitted orchestrator.toml alone is fine: the lock carries its text.",
        )


def dirty_files(crate: CrateView) -> list[str]:
    """What makes the crate's tree dirty for a release (empty: clean, or not in git)."""
    from orchestrator.host.source import crate_identity, uncommitted_changes

    if not crate_identity(crate).get("dirty"):
        return []
    return uncommitted_changes(crate) or ["(git status says so)"]

"""How a release ends, said from what happened, never assumed: the targets it published
(found on disk, so that a stop anywhere is told right), whether release.lock was written
and, when not, why; for targets whose `cargo test` failed, the setting that skips a test."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.errors import BuildInterruptedError, StepFailedError
from orchestrator.model.documents.lockfile import LOCK_FILE
from orchestrator.model.documents.reports import ReleaseRunReport
from orchestrator.model.hashing import sha256_file
from orchestrator.model.verdict.failed_tests import named, skip_advice
from orchestrator.plan.steps import StepName

if TYPE_CHECKING:
    from orchestrator.release.targets.target import TargetResult

SHOWN = 5  # file names listed before "and N more"


def _digest(path: Path) -> str | None:
    try:
        return sha256_file(path)
    except OSError:  # absent (never published), or removed meanwhile
        return None


def published_marks(release_dir: Path, artifacts: Sequence[str]) -> dict[str, str | None]:
    """Each target's build.json digest before the release runs (None: not published), and
    release.lock's under LOCK_FILE: what `published_since` compares with."""
    marks = {name: _digest(release_dir / name / "build.json") for name in artifacts}
    marks[LOCK_FILE] = _digest(release_dir / LOCK_FILE)
    return marks


def published_since(release_dir: Path, marks: Mapping[str, str | None]) -> list[str]:
    """The targets published since `marks` were taken: a new or other build.json (publish
    moves a target's folder into the release at once, build.json inside it)."""
    return [
        name
        for name, before in marks.items()
        if name != LOCK_FILE
        and (now := _digest(release_dir / name / "build.json")) is not None
        and now != before
    ]


def interrupted(release_dir: Path, marks: Mapping[str, str | None]) -> BuildInterruptedError:
    """The error a stopped release ends with: what it published before the stop, and
    whether it wrote release.lock."""
    published = published_since(release_dir, marks)
    targets = [name for name in marks if name != LOCK_FILE]
    lock_written = _digest(release_dir / LOCK_FILE) not in (None, marks.get(LOCK_FILE))
    lock = (
        f"release.lock was written ({release_dir / LOCK_FILE})"
        if lock_written
        else "release.lock was not written (the release stopped before pinning its inputs)"
    )
    if not published:
        return BuildInterruptedError(
            f"interrupted: no target was published to {release_dir}; {lock}",
            hint="Nothing was published; containers and staging folders were removed.",
        )
    others = [name for name in targets if name not in published]
    message = (
        f"interrupted: {len(published)} of {len(targets)} targets published to {release_dir} "
        f"before the stop: {', '.join(published)}"
        + (f"; not published: {', '.join(others)}" if others else "")
        + f"; {lock}"
    )
    hint = (
        "The published targets are signed and in the release's index. Run the same "
        "`orchestrator release` again: it builds only the others (the published ones are "
        "cached), then writes release.lock; or `orchestrator lock` pins what is published "
        "now. Containers and staging folders were removed."
    )
    return BuildInterruptedError(message, hint=hint)


def files_text(files: Sequence[str]) -> str:
    """`src/main.rs, Cargo.toml and 3 more`."""
    shown = ", ".join(files[:SHOWN])
    return shown + (f" and {len(files) - SHOWN} more" if len(files) > SHOWN else "")


def changed_note(changed: Sequence[str], *, locked: bool, failed: bool = False) -> str:
    """What the summary says of a crate that changed while the release ran; `failed`:
    some target failed (one whose build began after the change refuses, saying so)."""
    pinned = (
        "the published targets were built from the sources as they were when the release "
        "started, and release.lock pins those (their commit and snapshot)"
        if locked
        else "release.lock was not written"
    )
    failures = (
        " A target whose build began after the change failed (the table says so)." if failed else ""
    )
    return (
        f"the crate changed while the release ran: {files_text(changed)}; {pinned}."
        f"{failures} Release again to ship the change."
    )


def lock_line(report: ReleaseRunReport, why: str | None = None) -> str | None:
    """`release.lock not written: why`, for a release that wrote none (None: it did);
    `why` is the error that stopped the lock, if one did."""
    if report.lockfile:
        return None
    if why:
        return f"lock:    release.lock not written: {why}"
    failed, total = len(report.failed), len(report.targets)
    return (
        f"lock:    release.lock not written: no target was published or current "
        f"({failed} of {total} failed)"
    )


def failed_tests_advice(results: Sequence[TargetResult]) -> list[str]:
    """A line for each flavor whose `cargo test` failed in some target: which targets,
    the tests their output named, and the `[flavors.<name>.test] args` that skip them
    (one table per flavor, with every test any of its levels named: the levels share it)."""
    failed: dict[str, tuple[list[str], list[str], tuple[str, ...]]] = {}
    for result in results:
        error = result.exception
        if not (isinstance(error, StepFailedError) and error.step == StepName.TEST):
            continue
        flavor = result.target.flavor
        args = result.target.options.for_flavor(flavor).test_args
        artifacts, names, _args = failed.setdefault(flavor, ([], [], args))
        artifacts.append(result.artifact)
        names.extend(name for name in error.failed_tests if name not in names)
    lines = []
    for flavor, (artifacts, names, args) in failed.items():
        what = f"the crate's own tests failed: {named(names)}" if names else "`cargo test` failed"
        lines.append(f"{', '.join(artifacts)}: {what}. {skip_advice(flavor, args, names)}")
    return lines

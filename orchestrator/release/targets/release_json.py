"""release.json, signed, and logs/targets.json, not: what a release publishes, and how its
targets' last builds went (model/documents/release_summary.py, model/documents/run_logs.py).

release.json is made from the published folders' build.json alone, sorted by folder, so a
release built on one machine, across CI runners or again from the same inputs writes the
same bytes, and a run that changes nothing leaves the file as it was (its mtime too).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from orchestrator.errors import ConfigError
from orchestrator.flavors import get_flavor
from orchestrator.model.documents.record_io import (
    Record,
    RecordError,
    read_record,
    record_text,
    write_record,
)
from orchestrator.model.documents.records import BuildManifest
from orchestrator.model.documents.release_summary import (
    EngineJobs,
    ReleaseSummary,
    TargetRuns,
    TargetSummary,
    published_target,
)
from orchestrator.model.documents.run_logs import TARGET_RUNS
from orchestrator.release.targets.release_view import ReleaseView
from orchestrator.release.targets.target import TargetResult

RELEASE_JSON = "release.json"
_LEGACY_BYTES = 16 << 20  # a release.json of before v3 read for its run entries, at most


def write_if_changed(path: Path, record: Record) -> bool:
    """Write `record` to `path` unless the file already holds exactly its text; whether it
    was written. An unchanged file keeps its bytes and its mtime."""
    text = record_text(record)
    try:
        if path.is_file() and not path.is_symlink() and path.read_text() == text:
            return False
    except (OSError, UnicodeDecodeError):
        pass  # unreadable: written afresh
    write_record(path, record)
    return True


def release_summary(
    release_dir: Path, release: ReleaseView, warn: Callable[[str], object] = lambda _text: None
) -> ReleaseSummary:
    """release.json's record: every artifact folder of the release, as its build.json says;
    a folder whose build.json does not read is left out, with a warning (the index leaves
    it out of the signature too, unless the last signature vouched for it)."""
    found = []
    folders = sorted(p for p in release_dir.iterdir() if p.is_dir()) if release_dir.is_dir() else []
    for folder in folders:
        if not (folder / "build.json").is_file():
            continue  # not an artifact folder: an -auto one, logs/
        try:
            found.append((folder.name, read_record(folder / "build.json", BuildManifest)))
        except RecordError as error:
            warn(f"{folder.name} is left out of {RELEASE_JSON}: {error.message}")
    return ReleaseSummary(
        name=release.binary,
        version=release.version,
        artifacts=[published_target(folder, manifest) for folder, manifest in found],
    )


def write_release_json(
    release_dir: Path, release: ReleaseView, warn: Callable[[str], object] = lambda _text: None
) -> bool:
    """Write release.json from the published folders; whether it changed."""
    record = release_summary(release_dir, release, warn)
    return write_if_changed(release_dir / RELEASE_JSON, record)


def earlier_runs(release_dir: Path) -> dict[str, TargetSummary]:
    """Each target's last build by artifact, as logs/targets.json has it; for a release
    written before that file, as its release.json (schema 2, which held them) has it; {}
    when neither reads: the file is only ever informative."""
    try:
        runs = read_record(release_dir / TARGET_RUNS, TargetRuns)
    except RecordError:
        return _legacy_runs(release_dir / RELEASE_JSON)
    return {entry.artifact: entry for entry in runs.targets}


def _legacy_runs(path: Path) -> dict[str, TargetSummary]:
    try:
        if not path.is_file() or path.stat().st_size > _LEGACY_BYTES:
            return {}
        document = json.loads(path.read_text())
        if not isinstance(document, dict) or document.get("schema_version") not in (1, 2):
            return {}
        entries = [TargetSummary.model_validate(item) for item in document.get("artifacts", [])]
    except (OSError, UnicodeDecodeError, ValueError):  # pydantic's errors are ValueErrors
        return {}
    return {entry.artifact: _with_triple(entry) for entry in entries}


def write_target_runs(
    release_dir: Path,
    release: ReleaseView,
    results: Sequence[TargetResult],
    *,
    earlier: Mapping[str, TargetSummary],
    jobs: Sequence[EngineJobs] = (),
) -> None:
    """logs/targets.json after a run that built (or failed) anything: the targets of earlier
    runs not in this one first, as they were listed; then this run's, in its order. A
    target found current keeps the entry of the build that made it (its time, engine and
    speed figure), so that a run that built nothing loses nothing."""
    ran = {result.artifact for result in results}
    entries = [_with_triple(entry) for name, entry in earlier.items() if name not in ran]
    for result in results:
        made_by = earlier.get(result.artifact)
        if result.status == "cached" and made_by is not None and made_by.sha256 == result.sha256:
            entries.append(_with_triple(made_by))  # the build that made these bytes
        else:
            entries.append(result.summary())
    record = TargetRuns(
        name=release.binary, version=release.version, targets=entries, jobs_per_engine=list(jobs)
    )
    write_if_changed(release_dir / TARGET_RUNS, record)


def _with_triple(entry: TargetSummary) -> TargetSummary:
    """An entry written before triples were recorded gets its flavor's."""
    if entry.rust_target is not None:
        return entry
    try:
        triple = get_flavor(entry.flavor).rust_target
    except ConfigError:  # a flavor this version no longer has: leave it unknown
        return entry
    return entry.model_copy(update={"rust_target": triple})

"""How long each step took in the earlier builds this machine published: the estimate a
long step shows while it runs ("about 4m left").

Read from the logs/run.json of every artifact under the artifacts folder, or the
build.json of one published before build.json left its run out (model/documents/run_logs.py); the
same flavor only: a cuda build's steps say little about a cpu one's. Steps that were taken
from a cache are left out: they say nothing about how long running them takes.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

# Enough history for a median; bounded so a folder of many releases stays quick to read.
MAX_RECORDS = 50
MAX_RECORD_BYTES = 4 * 1024 * 1024


def earlier_step_seconds(artifacts_dir: Path, flavor: str) -> dict[str, float]:
    """The median seconds of each step over the earlier builds of `flavor`; {} when none.
    A build.json that cannot be read is skipped: an estimate is never worth an error."""
    seen: dict[str, list[float]] = {}
    found = [*artifacts_dir.glob("*/*/logs/run.json"), *artifacts_dir.glob("*/*/build.json")]
    records = sorted(found, key=_modified, reverse=True)[:MAX_RECORDS]
    for path in records:
        for name, seconds in _step_seconds(path, flavor):
            seen.setdefault(name, []).append(seconds)
    return {name: statistics.median(values) for name, values in seen.items()}


def _modified(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _step_seconds(path: Path, flavor: str) -> list[tuple[str, float]]:
    try:
        if path.stat().st_size > MAX_RECORD_BYTES:
            return []
        document = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    if not isinstance(document, dict):
        return []
    artifact = document.get("artifact")  # build.json: a record; logs/run.json: a name
    of = artifact.get("flavor") if isinstance(artifact, dict) else document.get("flavor")
    if of != flavor:
        return []
    found = []
    for step in document.get("steps") or []:
        if not isinstance(step, dict) or step.get("status") != "ok":
            continue
        name, seconds = step.get("name"), step.get("seconds")
        if isinstance(name, str) and isinstance(seconds, int | float) and seconds >= 0:
            found.append((name, float(seconds)))
    return found

"""The JSON Schemas of every document orchestrator publishes, generated from its records.

`python -m orchestrator.tools.schemas` writes schemas/<name>-<version>.schema.json for
build.json, release.json, release.lock, the logs/ records and each `--json` output; `--check` writes
nothing and exits 1 when a committed file is stale, missing or no longer generated
(`make lint` runs it), so the schemas cannot drift from the code.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.config.resources import resource_dir
from orchestrator.model.documents.compose_record import ComposeRecord
from orchestrator.model.documents.lockfile import LockDocument
from orchestrator.model.documents.records import BuildManifest, Record
from orchestrator.model.documents.release_summary import ReleaseSummary, TargetRuns
from orchestrator.model.documents.reports import (
    BenchReport,
    BuildPlanReport,
    ConfigReport,
    DoctorReport,
    ReleasePlanReport,
    ReleaseRunReport,
    VerifyReport,
)
from orchestrator.model.documents.run_logs import BuildRun

PUBLISHED: tuple[type[Record], ...] = (
    BuildManifest,
    ReleaseSummary,
    LockDocument,
    ReleasePlanReport,
    ReleaseRunReport,
    BuildPlanReport,
    ConfigReport,
    DoctorReport,
    VerifyReport,
    BenchReport,
    ComposeRecord,
    BuildRun,  # a folder's logs/run.json and the release's logs/targets.json: not signed
    TargetRuns,
)
SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
SUFFIX = ".schema.json"
DEFAULT_DIR = resource_dir("schemas")


def schema_file_name(model: type[Record]) -> str:
    """verify-1.schema.json for orchestrator/verify version 1."""
    return f"{model.SCHEMA.removeprefix('orchestrator/')}-{model.VERSION}{SUFFIX}"


def schema_of(model: type[Record]) -> dict[str, object]:
    """The JSON Schema of what orchestrator writes as `model` (keys as spelled in JSON)."""
    generated = model.model_json_schema(by_alias=True, mode="serialization")
    return {"$schema": SCHEMA_DIALECT, **generated}


def schema_text(model: type[Record]) -> str:
    return json.dumps(schema_of(model), indent=2, sort_keys=True) + "\n"


@dataclass(frozen=True)
class SchemaFile:
    path: Path
    state: str  # "up to date" | "written" | "stale" | "missing" | "not generated"


def sync(folder: Path, *, check: bool) -> list[SchemaFile]:
    """Compare (and unless `check`, write) every schema; files no record makes go too."""
    expected = {schema_file_name(model): schema_text(model) for model in PUBLISHED}
    results = []
    for name, text in expected.items():
        path = folder / name
        current = path.read_text() if path.is_file() else None
        if current == text:
            results.append(SchemaFile(path, "up to date"))
        elif check:
            results.append(SchemaFile(path, "missing" if current is None else "stale"))
        else:
            folder.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            results.append(SchemaFile(path, "written"))
    for path in sorted(folder.glob(f"*{SUFFIX}")) if folder.is_dir() else []:
        if path.name not in expected:
            if not check:
                path.unlink()
            results.append(SchemaFile(path, "not generated" if check else "removed"))
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m orchestrator.tools.schemas")
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 when a file is stale"
    )
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="default: schemas/")
    arguments = parser.parse_args(argv)
    results = sync(arguments.dir, check=arguments.check)
    for result in results:
        print(f"{result.path}: {result.state}")
    stale = [r for r in results if r.state in ("stale", "missing", "not generated")]
    if stale:
        print(
            f"{len(stale)} schema file(s) out of date: run `python -m orchestrator.tools.schemas`"
            " and commit schemas/",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

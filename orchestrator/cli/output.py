"""`--json`: one JSON document on stdout, everything else on stderr.

The documents are the typed records of model/documents/reports.py (and release.json's,
bench.json's), each named by `schema` and `schema_version` and published under schemas/.
They are written as plain text, not through rich, so nothing wraps, colours or reflows
them.
"""

from __future__ import annotations

import sys
from typing import Any

import typer
from rich.console import Console

from orchestrator.cli.app import console, err_console
from orchestrator.model.documents.record_io import Record, record_text


def json_option(schema: str, *, when: str = "") -> Any:  # noqa: ANN401 - typer's OptionInfo
    """The `--json` flag of a command whose document is `schema` (`when`: its other one)."""
    name = schema.removeprefix("orchestrator/")
    return typer.Option(
        "--json",
        help=f"Print one JSON document on stdout ({schema}, schemas/{name}-*.schema.json"
        f"{'; ' + when if when else ''}); progress and warnings go to stderr.",
    )


def text_console(json_output: bool) -> Console:
    """Where a command's human-readable lines go: stderr while stdout carries JSON."""
    return err_console if json_output else console


def emit_json(record: Record) -> None:
    sys.stdout.write(record_text(record))
    sys.stdout.flush()

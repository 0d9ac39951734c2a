"""TOML and JSON read with bounded nesting.

Files someone else made (a crate's Cargo files, a lock's embedded config, a release's
records) can nest arrays thousands deep; Python's parsers recurse per level and die with a
RecursionError, and whatever walks the parsed value later would recurse as deep. Both
ways end here as a `NestingError`, a ValueError like any other parse error, so the
callers' `except ValueError` names the file and gives their own exit code.
"""

from __future__ import annotations

import json
import tomllib
from typing import Any

# Far more than any config, lock or record needs (they nest under ten levels), far less
# than the interpreter's recursion limit.
MAX_NESTING = 64


class NestingError(ValueError):
    """Tables, arrays or objects nested deeper than MAX_NESTING."""


def _too_deep() -> NestingError:
    return NestingError(f"nested more than {MAX_NESTING} levels deep")


def check_nesting(value: object, limit: int = MAX_NESTING) -> None:
    """Refuse a parsed value nested deeper than `limit`; walks without recursing."""
    pending: list[tuple[object, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict):
            children: list[object] = list(item.values())
        elif isinstance(item, list | tuple):
            children = list(item)
        else:
            continue
        if depth >= limit:
            raise _too_deep()
        pending.extend((child, depth + 1) for child in children)


def loads_toml(text: str) -> dict[str, Any]:
    """tomllib.loads, with nesting bounded (NestingError, a ValueError, when it is not)."""
    try:
        data = tomllib.loads(text)
    except RecursionError:
        raise _too_deep() from None
    check_nesting(data)
    return data


def loads_json(text: str | bytes) -> Any:  # noqa: ANN401 - JSON is any shape
    """json.loads, with nesting bounded (NestingError, a ValueError, when it is not)."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise _too_deep() from None
    check_nesting(data)
    return data

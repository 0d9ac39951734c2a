"""The validation gate: the optimized binary must print what the baseline prints."""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Difference:
    line: int  # 1-based
    expected: str
    got: str


def _close(expected: str, got: str, tolerance: float) -> bool:
    if expected == got:
        return True
    if tolerance <= 0:
        return False
    try:
        a, b = float(expected), float(got)
    except ValueError:
        return False
    if not (math.isfinite(a) and math.isfinite(b)):
        return False
    return abs(a - b) <= tolerance * max(abs(a), abs(b), 1e-300)


def compare_outputs(expected: str, got: str, tolerance: float = 0.0) -> list[Difference]:
    """Lines that differ; with a tolerance, numbers may differ by that relative amount.

    Tokens are split on whitespace (and a trailing `:`/`,`), so `loss: 0.30000001` and
    `loss: 0.3` agree at tolerance 1e-6 while any change to words or hex digests does not.
    """
    a_lines, b_lines = expected.splitlines(), got.splitlines()
    differences: list[Difference] = []
    for number in range(max(len(a_lines), len(b_lines))):
        a = a_lines[number] if number < len(a_lines) else ""
        b = b_lines[number] if number < len(b_lines) else ""
        a_tokens = [t.rstrip(":,") for t in a.split()]
        b_tokens = [t.rstrip(":,") for t in b.split()]
        same = len(a_tokens) == len(b_tokens) and all(
            _close(x, y, tolerance) for x, y in zip(a_tokens, b_tokens, strict=True)
        )
        if not same or (tolerance <= 0 and a != b):
            differences.append(Difference(number + 1, a, b))
    return differences


def render_diff(expected: str, got: str, *, expected_name: str, got_name: str) -> str:
    lines = difflib.unified_diff(
        expected.splitlines(), got.splitlines(), expected_name, got_name, lineterm="", n=2
    )
    return "\n".join(list(lines)[:80])

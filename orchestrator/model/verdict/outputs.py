"""The validation gate: the optimized binary must print what the baseline prints."""

from __future__ import annotations

import difflib
import math
import re
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


def _line_within(expected: str, got: str, tolerance: float) -> bool:
    """Equal but for numbers within `tolerance`: words, punctuation after a number and the
    whitespace between tokens must all be the same."""
    a_parts, b_parts = re.split(r"(\s+)", expected), re.split(r"(\s+)", got)
    if len(a_parts) != len(b_parts):
        return False
    for a, b in zip(a_parts, b_parts, strict=True):
        if a == b:
            continue
        a_core, b_core = a.rstrip(":,"), b.rstrip(":,")
        if a[len(a_core) :] != b[len(b_core) :] or not _close(a_core, b_core, tolerance):
            return False
    return True


def _selected(lines: list[str], select: re.Pattern[str] | None) -> list[tuple[int, str]]:
    """(1-based line number, line) of the lines `select` matches; every line without one."""
    return [
        (number, line)
        for number, line in enumerate(lines, start=1)
        if select is None or select.search(line)
    ]


def compare_outputs(
    expected: str, got: str, tolerance: float = 0.0, select: str = ""
) -> list[Difference]:
    """Lines that differ; with a tolerance, numbers may differ by that relative amount.

    Tokens are split on whitespace (and a trailing `:`/`,`), so `loss: 0.30000001` and
    `loss: 0.3` agree at tolerance 1e-6 while any change to words, spacing or hex digests
    does not. With `select` (a regular expression), only the lines it matches are
    compared, in order (a GPU run against the CPU reference: its token lines, not its
    timings); a selected line one side lacks is a difference.
    """
    pattern = re.compile(select) if select else None
    a_lines = _selected(expected.splitlines(), pattern)
    b_lines = _selected(got.splitlines(), pattern)
    differences: list[Difference] = []
    for index in range(max(len(a_lines), len(b_lines))):
        a_number, a = a_lines[index] if index < len(a_lines) else (0, "")
        b_number, b = b_lines[index] if index < len(b_lines) else (0, "")
        missing = index >= len(a_lines) or index >= len(b_lines)
        if missing or (a != b and (tolerance <= 0 or not _line_within(a, b, tolerance))):
            differences.append(Difference(a_number or b_number, a, b))
    return differences


@dataclass(frozen=True)
class Captured:
    """What one run of the validate command wrote, as bytes."""

    stdout: bytes
    stderr: bytes

    def text(self) -> str:
        """For people: undecodable bytes shown as \\xNN escapes, never replaced."""
        return _readable(self.stdout) + (
            "\n[stderr]\n" + _readable(self.stderr) if self.stderr else ""
        )


def _readable(data: bytes) -> str:
    return data.decode("utf-8", "backslashreplace")


def compare_captured(
    expected: Captured, got: Captured, tolerance: float = 0.0, select: str = ""
) -> str:
    """ "" when `got` passes, else what differs. Bytes are compared as written; with a
    tolerance, numbers in the text may differ by that relative amount and nothing else may
    (undecodable bytes take part as themselves, so no two different outputs look alike);
    with `select`, only the lines that regular expression matches are compared."""
    if expected == got:
        return ""
    problems = []
    for stream in ("stdout", "stderr"):
        a, b = getattr(expected, stream), getattr(got, stream)
        if a == b:
            continue
        if tolerance > 0 or select:
            # surrogateescape: a byte that is not UTF-8 stays distinct from every other
            a_text, b_text = (
                a.decode("utf-8", "surrogateescape"),
                b.decode("utf-8", "surrogateescape"),
            )
            lines = compare_outputs(a_text, b_text, tolerance, select)
            if lines:
                beyond = " beyond the tolerance" if tolerance > 0 else ""
                among = " of the selected lines" if select else ""
                problems.append(f"{stream}: {len(lines)} line(s){among} differ{beyond}")
        else:
            lines = compare_outputs(_readable(a), _readable(b))
            problems.append(f"{stream}: {len(lines) or 'no'} line(s) differ, bytes differ")
    return "; ".join(problems)


def render_diff(
    expected: str | Captured, got: str | Captured, *, expected_name: str, got_name: str
) -> str:
    a = expected.text() if isinstance(expected, Captured) else expected
    b = got.text() if isinstance(got, Captured) else got
    lines = list(
        difflib.unified_diff(
            a.splitlines(), b.splitlines(), expected_name, got_name, lineterm="", n=2
        )
    )
    if not lines:  # same text, other bytes (a line ending, a trailing newline)
        return f"(the text is the same; the bytes differ: {a!r:.200} vs {b!r:.200})"
    return "\n".join(lines[:80])

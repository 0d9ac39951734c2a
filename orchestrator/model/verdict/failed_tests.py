"""The tests a failed `cargo test` names, and the `[flavors.<name>.test] args` that skip
them on the next run.

libtest prints `test path::to::name ... FAILED` as each test fails, and the names again,
indented, under the last `failures:` of each test binary. The names are the crate's
output, untrusted text: only printable characters are kept, each is cut to MAX_NAME
characters (a prefix is still a `--skip` filter: libtest skips every test whose name
contains it) and at most MAX_FOUND are read.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

MAX_NAME = 200  # characters of one test name kept
MAX_FOUND = 50  # names read from one output
MAX_SKIPPED = 5  # names the example skips (and the hint lists)

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_FAILED = re.compile(r"^test (.+?) \.\.\. FAILED\b")
_SHOULD_PANIC = " - should panic"
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _clean(name: str) -> str:
    kept = "".join(c for c in name if c.isprintable()).strip()
    kept = kept.removesuffix(_SHOULD_PANIC).strip()
    return kept[:MAX_NAME]


def failing_tests(output: str) -> tuple[str, ...]:
    """The failed tests `output` (what `cargo test` printed) names, first failed first,
    each once: its `test <name> ... FAILED` lines, and the listing under `failures:` that
    ends a test binary's run (one that a blank line and `test result:` follow; a test's
    own output, shown above it, may say anything)."""
    found: list[str] = []

    def add(name: str) -> None:
        cleaned = _clean(name)
        if cleaned and cleaned not in found and len(found) < MAX_FOUND:
            found.append(cleaned)

    listing: list[str] | None = None  # the indented names under a `failures:` line
    ended = False  # the listing ended with a blank line: `test result:` must follow
    for raw in output.splitlines():
        line = _ANSI.sub("", raw).rstrip()
        if listing is not None:
            if not ended and line.startswith("    ") and line.strip():
                listing.append(line)
                continue
            if not ended and listing and not line:
                ended = True
                continue
            if ended and line.startswith("test result:"):
                for name in listing:
                    add(name)
            listing, ended = None, False
        if line == "failures:":
            listing = []
            continue
        matched = _FAILED.match(line)
        if matched:
            add(matched.group(1))
    return tuple(found)


def toml_string(text: str) -> str:
    """`text` as a TOML basic string (control characters escaped as \\uXXXX)."""
    escaped = []
    for c in text:
        if c in '"\\':
            escaped.append("\\" + c)
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            escaped.append(f"\\u{ord(c):04x}")
        else:
            escaped.append(c)
    return '"' + "".join(escaped) + '"'


def skip_args(args: Sequence[str], names: Sequence[str]) -> tuple[str, ...]:
    """`args` (the flavor's test.args as they are) with a `--skip` for each of `names`,
    after a `--` when they have none."""
    separator = () if "--" in args else ("--",)
    return (*args, *separator, *(word for name in names for word in ("--skip", name)))


def skip_table(flavor: str, args: Sequence[str], names: Sequence[str]) -> str:
    """The orchestrator.toml lines that skip `names` for `flavor`: its test table and
    the args it runs with, ready to paste."""
    key = flavor if _BARE_KEY.match(flavor) else toml_string(flavor)
    listed = ", ".join(toml_string(word) for word in skip_args(args, names))
    return f"[flavors.{key}.test]\nargs = [{listed}]"


def skip_advice(flavor: str, args: Sequence[str], names: Sequence[str]) -> str:
    """What to set to release `flavor` without the failed tests `names` (the table that
    skips at most MAX_SKIPPED of them), or, with no names, which setting skips a test."""
    setting = f"[flavors.{flavor}.test] args"
    if not names:
        example = skip_table(flavor, args, ["<test name>"]).replace("\n", " ")
        return (
            f"If a test of the crate's own fails, {setting} in orchestrator.toml skips it: "
            f"{example}."
        )
    shown = names[:MAX_SKIPPED]
    which = "it" if len(names) == 1 else "them" if len(names) == len(shown) else "these"
    table = "\n".join("    " + line for line in skip_table(flavor, args, shown).splitlines())
    return (
        f"To release without {which}, set {setting} in orchestrator.toml (it replaces "
        f"test.args for this flavor):\n{table}"
    )


def named(names: Sequence[str]) -> str:
    """`a, b, c, d, e and 2 more`: the failed tests a hint lists."""
    shown = names[:MAX_SKIPPED]
    more = f" and {len(names) - len(shown)} more" if len(names) > len(shown) else ""
    return ", ".join(shown) + more


def skip_hint(flavor: str, args: Sequence[str], names: Sequence[str]) -> str:
    """The hint of a failed `cargo test` for `flavor`, whose test.args are `args`:
    with the failed tests it named, the table that skips them (at most MAX_SKIPPED);
    without, where the setting is."""
    if not names:
        return (
            "The output above (and the step log) says why; nothing was published. "
            + skip_advice(flavor, args, names)
        )
    return (
        f"The crate's own tests failed: {named(names)}; the output above (and the step "
        f"log) says why, and nothing was published. {skip_advice(flavor, args, names)}"
    )

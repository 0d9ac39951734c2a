"""Text that someone else wrote, made safe to print on a terminal.

A runner's target.json, a stranger's release or a cache record can hold any string: an
escape sequence in it would move the cursor, rewrite earlier lines or set the window's
title on the terminal of whoever runs the command. Such text goes through `printable`
before it reaches a console or an error message.
"""

from __future__ import annotations

from collections.abc import Sequence


def printable(text: str, limit: int | None = None) -> str:
    """`text` with every character a terminal could act on (control characters, the
    C1 range, line and paragraph separators, lone surrogates) written as its Python escape
    (`\\x1b`, `\\n`, `\\u2028`), and cut to `limit` characters when one is given."""
    shown = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)
    if limit is not None and len(shown) > limit:
        return shown[: max(limit - 3, 0)] + "..."
    return shown


def printable_list(texts: Sequence[str], limit: int | None = None) -> list[str]:
    return [printable(text, limit) for text in texts]

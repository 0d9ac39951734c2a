"""Did-you-mean for misspelt names: settings, sections, flavors, CPUs, GPU targets."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(word: str, candidates: Iterable[str], shown: str = "'{}'") -> str:
    """Text like "did you mean 'x'? " for the closest candidate; "" when none is close."""
    match = suggest(word, candidates)
    return f"did you mean {shown.format(match)}? " if match else ""


def suggest(word: str, candidates: Iterable[str]) -> str | None:
    """The closest candidate to a misspelt `word`, if any is close enough."""
    matches = difflib.get_close_matches(word, list(candidates), n=1)
    return matches[0] if matches else None

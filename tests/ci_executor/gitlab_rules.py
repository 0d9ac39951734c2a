"""GitLab CI's `rules: if:` expressions and the expansion of `$VARIABLE` in the values a
job's configuration holds (variables, cache key prefixes), as GitLab evaluates them; any
other syntax raises WorkflowError."""

from __future__ import annotations

import re
from collections.abc import Mapping

from tests.ci_executor.errors import WorkflowError

_TOKEN = re.compile(
    r"\s*(?:(?P<variable>\$\{?[A-Za-z_][A-Za-z0-9_]*\}?)|(?P<string>\"[^\"]*\"|'[^']*')"
    r"|(?P<regex>/(?:[^/\\]|\\.)*/[imx]*)|(?P<op>==|!=|=~|!~|&&|\|\||[()])|(?P<null>null\b))"
)
_REFERENCE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def expand(text: str, variables: Mapping[str, str]) -> str:
    """`text` with each $NAME / ${NAME} replaced; a name no variable defines is an error
    here (the generated file must name only what the pipeline defines)."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in variables:
            raise WorkflowError(f"{text!r} names ${name}, which no variable defines")
        return variables[name]

    return _REFERENCE.sub(value, text)


def _tokens(text: str) -> list[tuple[str, str]]:
    found = []
    position = 0
    text = text.rstrip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            raise WorkflowError(f"rules if {text!r}: cannot read {text[position:]!r}")
        kind = match.lastgroup
        assert kind is not None
        found.append((kind, match.group(kind)))
        position = match.end()
    return found


class _Rule:
    def __init__(self, text: str, variables: Mapping[str, str]) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.position = 0
        self.variables = variables

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        token = self.peek()
        if token is None:
            raise WorkflowError(f"rules if {self.text!r}: ends too soon")
        self.position += 1
        return token

    def parse(self) -> bool:
        value = self.or_()
        if self.peek() is not None:
            raise WorkflowError(f"rules if {self.text!r}: unexpected {self.peek()}")
        return value

    def or_(self) -> bool:
        value = self.and_()
        while self.peek() == ("op", "||"):
            self.take()
            value = self.and_() or value
        return value

    def and_(self) -> bool:
        value = self.comparison()
        while self.peek() == ("op", "&&"):
            self.take()
            value = self.comparison() and value
        return value

    def operand(self) -> str | None:
        kind, text = self.take()
        if kind == "variable":
            return self.variables.get(text.strip("${}"))
        if kind == "string":
            return text[1:-1]
        if kind == "null":
            return None
        raise WorkflowError(f"rules if {self.text!r}: unexpected {text!r}")

    def comparison(self) -> bool:
        if self.peek() == ("op", "("):
            self.take()
            value = self.or_()
            if self.take() != ("op", ")"):
                raise WorkflowError(f"rules if {self.text!r}: expected ')'")
            return value
        left = self.operand()
        token = self.peek()
        if token is None or token[0] != "op" or token[1] not in ("==", "!=", "=~", "!~"):
            return bool(left)  # a variable alone: defined and not empty
        op = self.take()[1]
        if op in ("==", "!="):
            return (left == self.operand()) == (op == "==")
        kind, pattern = self.take()
        if kind != "regex":
            raise WorkflowError(f"rules if {self.text!r}: {op} needs a /regex/")
        body, flags = pattern[1:].rsplit("/", 1)
        matched = re.search(body, left or "", re.I if "i" in flags else 0) is not None
        return matched == (op == "=~")


def rule_matches(text: str, variables: Mapping[str, str]) -> bool:
    return _Rule(text, variables).parse()

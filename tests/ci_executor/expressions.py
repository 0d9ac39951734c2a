"""GitHub Actions' `${{ }}` expressions, the part of the language the generated workflows
use, with GitHub's semantics: case-insensitive context and property names, loose equality
that compares strings case-insensitively and other types as numbers, `&&`/`||` that
return an operand, and a missing property that is null. Anything else (an unknown
context, function or token) raises WorkflowError."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tests.ci_executor.errors import WorkflowError

_TOKEN = re.compile(
    r"\s*(?:(?P<string>'(?:[^']|'')*')|(?P<number>-?\d+(?:\.\d+)?)"
    r"|(?P<op>==|!=|<=|>=|&&|\|\||[<>!()\[\],.])|(?P<name>[A-Za-z_][A-Za-z0-9_-]*))"
)
_TEMPLATE = re.compile(r"\$\{\{((?:(?!\}\}).)*)\}\}", re.DOTALL)
STATUS_FUNCTIONS = ("success", "always", "failure", "cancelled")


@dataclass
class Context:
    """What an expression can read: the contexts by name (github, matrix, needs, steps,
    runner, secrets, env), the functions that need the runner (hashFiles) and the job's
    status so far."""

    contexts: Mapping[str, Any]
    functions: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    failed: bool = False


def _tokens(text: str) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    position = 0
    text = text.rstrip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            raise WorkflowError(f"expression {text!r}: cannot read {text[position:]!r}")
        kind = match.lastgroup
        assert kind is not None
        found.append((kind, match.group(kind)))
        position = match.end()
    return found


def truthy(value: object) -> bool:
    if value is None or value is False or value == "":
        return False
    if isinstance(value, int | float) and not isinstance(value, bool):
        return not (value == 0 or math.isnan(value))
    return True


def _number(value: object) -> float:
    if value is None:
        return 0.0
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip()) if value.strip() else 0.0
        except ValueError:
            return math.nan
    return math.nan


def loose_equal(left: object, right: object) -> bool:
    if isinstance(left, str) and isinstance(right, str):
        return left.casefold() == right.casefold()
    if type(left) is type(right) and not isinstance(left, int | float):
        return left is right if isinstance(left, dict | list) else left == right
    return _number(left) == _number(right)


def _lookup(value: object, name: object) -> object:
    if isinstance(value, Mapping):
        if not isinstance(name, str):
            return None
        for key, item in value.items():
            if isinstance(key, str) and key.casefold() == name.casefold():
                return item
        return None
    if isinstance(value, list) and isinstance(name, int | float) and not isinstance(name, bool):
        index = int(name)
        return value[index] if 0 <= index < len(value) else None
    return None


def to_text(value: object) -> str:
    """A value as interpolation writes it into a string."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, int | float | str):
        return str(value)
    raise WorkflowError(f"an object or array ({json.dumps(value)[:80]}) inside a string")


class _Parser:
    def __init__(self, text: str, context: Context) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.position = 0
        self.context = context

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def take(self, op: str | None = None) -> tuple[str, str]:
        token = self.peek()
        if token is None or (op is not None and token != ("op", op)):
            raise WorkflowError(f"expression {self.text!r}: expected {op or 'more'}")
        self.position += 1
        return token

    def parse(self) -> object:
        value = self.or_()
        if self.peek() is not None:
            raise WorkflowError(f"expression {self.text!r}: unexpected {self.peek()}")
        return value

    def or_(self) -> object:
        value = self.and_()
        while self.peek() == ("op", "||"):
            self.take()
            right = self.and_()
            value = value if truthy(value) else right
        return value

    def and_(self) -> object:
        value = self.comparison()
        while self.peek() == ("op", "&&"):
            self.take()
            right = self.comparison()
            value = right if truthy(value) else value
        return value

    def comparison(self) -> object:
        value = self.unary()
        token = self.peek()
        if (
            token is not None
            and token[0] == "op"
            and token[1] in ("==", "!=", "<", ">", "<=", ">=")
        ):
            op = self.take()[1]
            right = self.unary()
            if op in ("==", "!="):
                return loose_equal(value, right) == (op == "==")
            left_n, right_n = _number(value), _number(right)
            return {"<": left_n < right_n, ">": left_n > right_n}.get(
                op, left_n <= right_n if op == "<=" else left_n >= right_n
            )
        return value

    def unary(self) -> object:
        if self.peek() == ("op", "!"):
            self.take()
            return not truthy(self.unary())
        return self.postfix(self.primary())

    def primary(self) -> object:  # noqa: PLR0911 - one return per kind of token
        kind, text = self.take()
        if kind == "string":
            return text[1:-1].replace("''", "'")
        if kind == "number":
            return float(text)
        if (kind, text) == ("op", "("):
            value = self.or_()
            self.take(")")
            return value
        if kind != "name":
            raise WorkflowError(f"expression {self.text!r}: unexpected {text!r}")
        lowered = text.casefold()
        if lowered in ("true", "false"):
            return lowered == "true"
        if lowered == "null":
            return None
        if self.peek() == ("op", "("):
            return self.call(text)
        for name, value in self.context.contexts.items():
            if name.casefold() == lowered:
                return value
        raise WorkflowError(f"expression {self.text!r}: unknown context {text!r}")

    def postfix(self, value: object) -> object:
        while True:
            token = self.peek()
            if token == ("op", "."):
                self.take()
                kind, name = self.take()
                if kind != "name":
                    raise WorkflowError(f"expression {self.text!r}: a property name after '.'")
                value = _lookup(value, name)
            elif token == ("op", "["):
                self.take()
                index = self.or_()
                self.take("]")
                value = _lookup(value, index)
            else:
                return value

    def call(self, name: str) -> object:
        self.take("(")
        args: list[object] = []
        while self.peek() != ("op", ")"):
            args.append(self.or_())
            if self.peek() == ("op", ","):
                self.take()
        self.take(")")
        return _call(name, args, self.context, self.text)


def _call(name: str, args: list[object], context: Context, text: str) -> object:  # noqa: PLR0911
    lowered = name.casefold()
    if lowered == "fromjson" and len(args) == 1 and isinstance(args[0], str):
        try:
            return json.loads(args[0])
        except ValueError as error:
            raise WorkflowError(f"expression {text!r}: fromJSON of {args[0]!r}: {error}") from None
    if lowered == "tojson" and len(args) == 1:
        return json.dumps(args[0], indent=2)
    if lowered == "contains" and len(args) == 2:
        haystack, needle = args
        if isinstance(haystack, list):
            return any(loose_equal(item, needle) for item in haystack)
        return to_text(needle).casefold() in to_text(haystack).casefold()
    if lowered in ("startswith", "endswith") and len(args) == 2:
        whole, part = to_text(args[0]).casefold(), to_text(args[1]).casefold()
        return whole.startswith(part) if lowered == "startswith" else whole.endswith(part)
    if lowered in STATUS_FUNCTIONS and not args:
        return {
            "success": not context.failed,
            "always": True,
            "failure": context.failed,
            "cancelled": False,
        }[lowered]
    for known, function in context.functions.items():
        if known.casefold() == lowered:
            return function(*args)
    raise WorkflowError(f"expression {text!r}: unknown function {name}({len(args)} arguments)")


def evaluate(text: str, context: Context) -> object:
    """The value of one expression (the text between `${{` and `}}`)."""
    return _Parser(text, context).parse()


def render(value: object, context: Context) -> object:
    """A workflow value with its `${{ }}` replaced: a string that is one expression gives
    that expression's value (an array stays an array), other strings text; lists and
    mappings are rendered item by item."""
    if isinstance(value, list):
        return [render(item, context) for item in value]
    if isinstance(value, dict):
        return {key: render(item, context) for key, item in value.items()}
    if not isinstance(value, str) or "${{" not in value:
        return value
    whole = _TEMPLATE.fullmatch(value.strip())
    if whole is not None:
        return evaluate(whole.group(1), context)
    rendered = _TEMPLATE.sub(lambda match: to_text(evaluate(match.group(1), context)), value)
    if "${{" in rendered:
        raise WorkflowError(f"an unclosed expression in {value!r}")
    return rendered


def condition(text: object, context: Context) -> bool:
    """An `if:` value: an expression with or without `${{ }}`; without a status function,
    GitHub runs it only after success (`success() && (...)`)."""
    if isinstance(text, bool):
        return text and not context.failed
    if not isinstance(text, str):
        raise WorkflowError(f"an if: that is not an expression: {text!r}")
    stripped = text.strip()
    whole = _TEMPLATE.fullmatch(stripped)
    source = whole.group(1) if whole is not None else stripped
    if "${{" in source:
        raise WorkflowError(f"if: {text!r} mixes text and expressions")
    if not any(re.search(rf"\b{name}\s*\(", source, re.I) for name in STATUS_FUNCTIONS):
        source = f"success() && ({source})"
    return truthy(evaluate(source, context))

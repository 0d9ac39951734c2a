"""The kinds of value a setting holds, how each is checked and how text spells it, and
`Run`: one run of a shipped binary (a training workload, a validation run)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath
from typing import Literal

from orchestrator.config.nesting import loads_json
from orchestrator.errors import ConfigError

Kind = Literal[
    "str",
    "int",
    "int or auto",
    "float",
    "bool",
    "path",
    "list[str]",
    "list[path]",
    "list[run]",
    "list[generate]",
]


@dataclass(frozen=True)
class Run:
    """Arguments for one of the artifact's binaries. In TOML a run is an argument list (for
    package.binary) or a table naming another binary: {binary = "name", args = [...]}."""

    args: tuple[str, ...]
    binary: str = ""  # "": package.binary, the artifact's main binary
    path: str = ""  # [[archive.generate]]: the archive file its stdout becomes

    def shape(self) -> list[str] | dict[str, object]:
        """As TOML and JSON write it: a plain list unless another binary is named."""
        if self.path:
            table: dict[str, object] = {"path": self.path, "args": list(self.args)}
            return table | ({"binary": self.binary} if self.binary else {})
        if not self.binary:
            return list(self.args)
        return {"binary": self.binary, "args": list(self.args)}

    def binary_or(self, main: str) -> str:
        return self.binary or main

    def __str__(self) -> str:
        prefix = f"{self.binary}: " if self.binary else ""
        return prefix + " ".join(self.args)


# A default as `Options` holds it: lists are tuples so that declarations stay immutable.
Value = str | int | float | bool | tuple[str, ...] | tuple[Run, ...]

KIND_TEXT: dict[Kind, str] = {
    "str": "a string",
    "int": "a non-negative integer",
    "int or auto": 'a non-negative integer or "auto"',
    "float": "a non-negative number",
    "bool": "true or false",
    "path": "a path (string)",
    "list[str]": "a list of strings",
    "list[path]": "a list of paths (strings)",
    "list[run]": 'a list of argument lists, or {binary = "name", args = [...]} tables for '
    'another binary, e.g. [["--seed", "1"], {binary = "tool", args = ["check"]}]',
    "list[generate]": 'a list of {path = "file", args = [...]} tables (binary = "name" for '
    "another binary)",
}
# How text (environment variables) spells the kinds that are not plain text.
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
_BOOLS = {word: word in _TRUE for word in _TRUE + _FALSE}
_TEXT_HINT: dict[Kind, str] = {
    "bool": "true or false (1/0, true/false, yes/no, on/off)",
    "list[run]": 'JSON: a list of argument lists or tables, e.g. [["--help"], '
    '{"binary": "tool", "args": []}]',
}


def _is_argv(value: object) -> bool:
    return isinstance(value, list | tuple) and all(isinstance(a, str) for a in value)


def _is_run(value: object) -> bool:
    if isinstance(value, Run) or _is_argv(value):
        return True
    if not isinstance(value, dict) or set(value) != {"binary", "args"}:
        return False
    binary = value["binary"]
    return isinstance(binary, str) and binary != "" and _is_argv(value["args"])


_GENERATE_KEYS = {"path", "args", "binary"}


def _is_generate(value: object) -> bool:
    if isinstance(value, Run):
        return bool(value.path)
    if not isinstance(value, dict) or not {"path", "args"} <= set(value) <= _GENERATE_KEYS:
        return False
    path, binary = value["path"], value.get("binary", "x")
    texts = isinstance(path, str) and path != "" and isinstance(binary, str) and binary != ""
    return texts and _is_argv(value["args"])


def check_kind(value: object, kind: Kind, where: str) -> object:
    """Return `value` if it has `kind` (TOML shape: lists), else a ConfigError naming `where`."""
    ok: bool
    if kind in ("str", "path"):
        ok = isinstance(value, str) and value != ""
    elif kind == "int":
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    elif kind == "int or auto":  # "auto": the code decides (engines.jobs from the engine's size)
        ok = value == "auto" or (
            isinstance(value, int) and not isinstance(value, bool) and value >= 0
        )
    elif kind == "float":
        ok = isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
    elif kind == "bool":
        ok = isinstance(value, bool)
    elif kind == "list[str]":
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
    elif kind == "list[path]":
        ok = isinstance(value, list) and all(isinstance(v, str) and v for v in value)
    elif kind == "list[generate]":
        ok = isinstance(value, list) and all(_is_generate(item) for item in value)
    else:
        ok = isinstance(value, list) and all(_is_run(item) for item in value)
    if not ok and value == "":
        raise ConfigError(
            f"{where}: empty; expected {KIND_TEXT[kind]} (leave it out for the default)"
        )
    if not ok:
        raise ConfigError(
            f"{where}: expected {KIND_TEXT[kind]}, got {type(value).__name__} {value!r}"
        )
    return value


def to_run(item: object) -> Run:
    """A checked TOML-shaped run as `Options` holds it."""
    if isinstance(item, Run):
        return item
    if isinstance(item, dict):
        args = tuple(str(a) for a in item["args"])
        return Run(args, str(item.get("binary", "")), str(item.get("path", "")))
    return Run(tuple(str(a) for a in item) if isinstance(item, list | tuple) else ())


def parse_text(kind: Kind, raw: str, where: str) -> object:
    """A value of `kind` from text (an environment variable, a comma-separated flag).

    bool: 1/0, true/false, yes/no, on/off; int, float; list[str]: comma-separated;
    list[path] too; list[run]: JSON, e.g. '[["--help"]]'; str and path: as given.
    """
    word = raw.strip()
    value: object = raw
    try:
        if kind == "bool":
            value = _BOOLS[word.lower()]
        elif kind == "int":
            value = int(word)
        elif kind == "int or auto":
            value = word if word == "auto" else int(word)
        elif kind == "float":
            value = float(word)
        elif kind in ("list[str]", "list[path]"):
            value = [part.strip() for part in raw.split(",") if part.strip()]
        elif kind in ("list[run]", "list[generate]"):
            value = loads_json(raw)  # bounded nesting: a NestingError is a ValueError
    except (KeyError, ValueError):  # json.JSONDecodeError is a ValueError
        expected = _TEXT_HINT.get(kind, KIND_TEXT[kind])
        raise ConfigError(f"{where}: expected {expected}, got {raw!r}") from None
    return check_kind(value, kind, where)


def toml_shape(value: object) -> object:
    """Tuples (as `Options` holds lists) back to lists, runs to their TOML shape, as TOML
    and the layers hold them."""
    if isinstance(value, Run):
        return value.shape()
    if isinstance(value, PurePath):
        return str(value)
    return [toml_shape(v) for v in value] if isinstance(value, tuple | list) else value

"""A binary's command line, read from its clap derive attributes without building it.

`#[derive(Parser)]` structs, `#[derive(Subcommand)]` enums and `#[derive(Args)]` structs
are found in the package's Rust sources and read as far as `init` needs: the subcommands
(kebab-case variant names, or `name = "..."`), and for each its positional arguments and
the options it cannot run without. It is a reading of the source text, not a Rust parser:
what it cannot follow (the builder API, macros) it leaves out.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

_DERIVE = re.compile(r"#\[derive\(([^)]*)\)\]")
_ITEM = re.compile(r"\b(?:pub(?:\([^)]*\))?\s+)?(struct|enum)\s+([A-Za-z_][A-Za-z0-9_]*)")
_ATTRIBUTE = re.compile(r"#\[\s*(arg|clap|command|structopt)\s*\((.*?)\)\s*\]", re.DOTALL)
_FIELD = re.compile(r"(?:pub(?:\([^)]*\))?\s+)?([a-z_][A-Za-z0-9_]*)\s*:\s*(.+)", re.DOTALL)
_VARIANT = re.compile(r"([A-Z][A-Za-z0-9_]*)\s*(\{.*\}|\(.*\))?\s*$", re.DOTALL)
_NAME = re.compile(r"\bname\s*=\s*\"([^\"]+)\"")
_CHAR = re.compile(r"'(?:\\u\{[0-9a-fA-F]+\}|\\.|[^'\\\n])'")
_PATH_TYPES = ("PathBuf", "Path", "OsString", "Utf8PathBuf", "ClioPath", "Input")


@dataclass(frozen=True)
class Argument:
    """A field of a command: a positional argument unless it has a short or long name."""

    name: str
    rust_type: str
    positional: bool
    required: bool
    takes_many: bool

    @property
    def is_path(self) -> bool:
        return any(re.search(rf"\b{name}\b", self.rust_type) for name in _PATH_TYPES)


@dataclass(frozen=True)
class Command:
    """One command line the binary accepts: its subcommand words and its arguments."""

    words: tuple[str, ...]
    arguments: tuple[Argument, ...] = ()
    hidden: bool = False

    @property
    def positionals(self) -> tuple[Argument, ...]:
        return tuple(a for a in self.arguments if a.positional)

    @property
    def required_options(self) -> tuple[Argument, ...]:
        return tuple(a for a in self.arguments if a.required and not a.positional)


@dataclass
class _Item:
    kind: str  # struct | enum
    derives: frozenset[str]
    attributes: str  # the item's own #[command(...)] text
    body: str
    fields: list[tuple[str, str]] = field(default_factory=list)  # (attributes, field text)


def _strip_comments(text: str) -> str:
    """Rust source without // and /* */ comments (doc comments included) and with char
    literals blanked; strings kept."""
    out: list[str] = []
    index, length = 0, len(text)
    while index < length:
        char = text[index]
        if char == '"':
            end = index + 1
            while end < length and text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            out.append(text[index : end + 1])
            index = end + 1
        elif char == "'" and (literal := _CHAR.match(text, index)):
            out.append("'_'")  # '"' or '{' would confuse the bracket and string scans
            index = literal.end()
        elif text.startswith("//", index):
            end = text.find("\n", index)
            index = length if end < 0 else end
        elif text.startswith("/*", index):
            end = text.find("*/", index + 2)
            index = length if end < 0 else end + 2
        else:
            out.append(char)
            index += 1
    return "".join(out)


def _matching(text: str, start: int, opening: str, closing: str) -> int:
    """The index of the bracket closing the one at `start` (strings skipped), or -1."""
    depth, index = 0, start
    while index < len(text):
        char = text[index]
        if char == '"':
            index += 1
            while index < len(text) and text[index] != '"':
                index += 2 if text[index] == "\\" else 1
        elif char == opening:
            depth += 1
        elif char == closing:
            depth -= 1
            if depth == 0:
                return index
        index += 1
    return -1


def _split_top(body: str) -> Iterator[str]:
    """`body` split at the commas outside brackets, strings and generics."""
    depth, start, index = 0, 0, 0
    while index < len(body):
        char = body[index]
        if char == '"':
            index += 1
            while index < len(body) and body[index] != '"':
                index += 2 if body[index] == "\\" else 1
        elif char in "([{<":
            depth += 1
        elif char in ")]}>" and not (char == ">" and body[index - 1 : index] == "-"):
            depth -= 1
        elif char == "," and depth == 0:
            yield body[start:index]
            start = index + 1
        index += 1
    yield body[start:]


def _attributes_and_rest(part: str) -> tuple[str, str]:
    """The clap attributes in front of a field or variant (as `arg(...) command(...)`
    text), and the text after them; attributes inside a variant's body stay in it."""
    rest = part.strip()
    attributes: list[str] = []
    while rest.startswith("#["):
        end = _matching(rest, 1, "[", "]")
        if end < 0:
            break
        found = _ATTRIBUTE.fullmatch(rest[: end + 1])
        if found is not None:
            attributes.append(f"{found.group(1)}({found.group(2)})")
        rest = rest[end + 1 :].strip()
    return " ".join(attributes), rest


def _items(text: str) -> Iterator[tuple[str, _Item]]:
    source = _strip_comments(text)
    for derive in _DERIVE.finditer(source):
        derives = frozenset(word.strip().split("::")[-1] for word in derive.group(1).split(","))
        if not derives & {"Parser", "Subcommand", "Args", "StructOpt"}:
            continue
        item = _ITEM.search(source, derive.end())
        if item is None:
            continue
        between = source[derive.end() : item.start()]
        if ";" in between or "{" in between:
            continue  # the derive belongs to something else
        attributes = " ".join(m.group(2) for m in _ATTRIBUTE.finditer(between))
        brace = source.find("{", item.end())
        semicolon = source.find(";", item.end())
        if brace < 0 or (0 <= semicolon < brace):
            yield item.group(2), _Item(item.group(1), derives, attributes, "")
            continue
        end = _matching(source, brace, "{", "}")
        body = source[brace + 1 : end] if end > 0 else ""
        yield item.group(2), _Item(item.group(1), derives, attributes, body)


def _kebab(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "-", name).lower()


def _argument(attributes: str, name: str, rust_type: str) -> Argument:
    rust_type = " ".join(rust_type.split())
    named = re.search(r"\b(short|long)\b", attributes) is not None
    optional = rust_type.startswith(("Option<", "Option <")) or rust_type == "bool"
    many = rust_type.startswith("Vec<") or rust_type.startswith("Vec <")
    default = re.search(r"\bdefault_values?(_t|_os_t)?\b", attributes) is not None
    forced = re.search(r"\brequired\s*=\s*true\b", attributes) is not None
    required = forced or not (optional or many or default)
    if rust_type in ("u8",) and "Count" in attributes:
        required = False
    return Argument(name, rust_type, not named, required, many)


@dataclass(frozen=True)
class _Fields:
    arguments: tuple[Argument, ...]
    subcommand: str  # the type of the #[command(subcommand)] field, "" for none
    subcommand_required: bool
    flattened: tuple[str, ...]


def _fields(body: str) -> _Fields:
    arguments: list[Argument] = []
    subcommand, required, flattened = "", False, []
    for part in _split_top(body):
        attributes, rest = _attributes_and_rest(part)
        found = _FIELD.fullmatch(rest.strip())
        if found is None:
            continue
        name, rust_type = found.group(1), " ".join(found.group(2).split())
        if re.search(r"\bsubcommand\b", attributes):
            inner = re.fullmatch(r"Option\s*<\s*(\w+)\s*>", rust_type)
            subcommand = inner.group(1) if inner else rust_type
            required = inner is None
        elif re.search(r"\bflatten\b", attributes):
            flattened.append(rust_type)
        elif not re.search(r"\bskip\b", attributes):
            arguments.append(_argument(attributes, name, rust_type))
    return _Fields(tuple(arguments), subcommand, required, tuple(flattened))


class _Reader:
    def __init__(self, items: dict[str, _Item]) -> None:
        self.items = items

    def arguments(self, fields: _Fields, depth: int) -> tuple[Argument, ...]:
        found = list(fields.arguments)
        for name in fields.flattened:
            item = self.items.get(name)
            if item is not None and item.kind == "struct" and depth < 8:
                found += self.arguments(_fields(item.body), depth + 1)
        return tuple(found)

    def _variant_fields(self, shape: str, *, subcommand: bool) -> _Fields:
        """The fields of a variant: `{ named fields }`, `(ArgsStruct)`, `(SubEnum)`, none."""
        if shape.startswith("{"):
            return _fields(shape[1:-1])
        if not shape.startswith("("):
            return _Fields((), "", False, ())
        name = shape[1:-1].strip().split("::")[-1]
        target = self.items.get(name)
        if subcommand or (target is not None and target.kind == "enum"):
            return _Fields((), name, True, ())
        return _fields(target.body) if target is not None else _Fields((), "", False, ())

    def commands(
        self, words: tuple[str, ...], fields: _Fields, depth: int, hidden: bool = False
    ) -> list[Command]:
        own = self.arguments(fields, depth)
        enum = self.items.get(fields.subcommand)
        if enum is None or enum.kind != "enum" or depth >= 8:
            return [Command(words, own, hidden)]
        found = [] if fields.subcommand_required else [Command(words, own, hidden)]
        for part in _split_top(enum.body):
            attributes, rest = _attributes_and_rest(part)
            variant = _VARIANT.fullmatch(rest.strip())
            if variant is None:
                continue
            name = _NAME.search(attributes)
            word = name.group(1) if name else _kebab(variant.group(1))
            hide = hidden or re.search(r"\bhide\s*=\s*true\b", attributes) is not None
            shape = variant.group(2) or ""
            if re.search(r"\bexternal_subcommand\b", attributes):
                continue
            inner = self._variant_fields(
                shape, subcommand=bool(re.search(r"\bsubcommand\b", attributes))
            )
            for command in self.commands((*words, word), inner, depth + 1, hide):
                found.append(Command(command.words, own + command.arguments, command.hidden))
        return found


def read_commands(sources: list[Path], main_file: Path | None = None) -> list[Command]:
    """Every command line of the binary whose clap derive lives in `sources`: one entry
    per leaf subcommand (or the root alone). Empty when no `Parser` derive is found."""
    items: dict[str, _Item] = {}
    roots: list[tuple[bool, str]] = []
    for path in sources:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        for name, item in _items(text):
            items.setdefault(name, item)
            if item.derives & {"Parser", "StructOpt"} and item.kind == "struct":
                roots.append((path != main_file, name))
    if not roots:
        return []
    root = items[sorted(roots)[0][1]]
    return _Reader(items).commands((), _fields(root.body), 0)

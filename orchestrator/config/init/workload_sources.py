"""Where `init`'s candidate runs come from (config/init/workload_scan.py vets them): the crate's
files as a run sees them, command lines in its documents and scripts (code blocks, shell
lines, pipes and redirections), the URLs its README downloads from, and the invocations of
its integration tests (`Command::cargo_bin("x").args([...])`, CARGO_BIN_EXE_x)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

_FENCE = re.compile(r"^\s*(```|~~~)")
_SKIP_DIRS = frozenset({".git", "target", "node_modules", ".github", ".cargo", "vendor"})
_DATA_DIRS = frozenset(
    {"data", "testdata", "test-data", "fixtures", "samples", "corpus", "assets", "examples",
     "benches", "bench", "inputs", "resources"}
)  # fmt: skip
_TEXT = frozenset({"txt", "csv", "tsv", "json", "jsonl", "ndjson", "md", "log", "xml", "html"})
_NOT_DATA = frozenset({"rs", "toml", "lock", "orig", "rej", "sh", "py", "yml", "yaml"})
_MAX_DATA = 64 << 20  # bigger files are not proposed: a workload runs several times a build
_MAX_FILES = 20_000
_WRAPPERS = frozenset({"time", "sudo", "env", "command", "exec", "nice", "nohup"})
_URL = re.compile(r"https?://[^\s)\"'>\]]+")
_ENV_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*")
_CARGO_BIN = re.compile(r"(?:cargo_bin\(\s*\"([^\"]+)\"|CARGO_BIN_EXE_([A-Za-z0-9_-]+))")
_ARG_CALL = re.compile(r"\.(args?)\s*\(")
_STRING = re.compile(r"\"((?:[^\"\\]|\\.)*)\"")
_CHAIN_END = re.compile(r"\.(assert|output|status|spawn)\s*\(|;")


@dataclass
class Tree:
    """The crate's files as runs see them: paths relative to the crate's root."""

    root: Path
    files: dict[str, int] = field(default_factory=dict)  # relative path -> size
    referenced: set[str] = field(default_factory=set)  # named by tests or benches

    def exists(self, relative: str) -> bool:
        path = PurePosixPath(relative)
        if path.is_absolute() or ".." in path.parts:
            return False
        return (self.root / path).exists()

    def data_files(self, extension: str = "") -> list[str]:
        """Files a run could read, best first: named by tests or benches, in a data
        folder, text, bigger (up to the cap)."""

        def rank(item: tuple[str, int]) -> tuple[bool, bool, bool, int, str]:
            name, size = item
            parts = PurePosixPath(name).parts
            in_data = any(part.lower() in _DATA_DIRS for part in parts[:-1])
            text = file_extension(name) in _TEXT
            return (name not in self.referenced, not in_data, not text, -size, name)

        chosen = [
            (name, size)
            for name, size in self.files.items()
            if 0 < size <= _MAX_DATA
            and file_extension(name) not in _NOT_DATA
            and (not extension or file_extension(name) == extension)
            and PurePosixPath(name).name.lower() not in {"license", "copying"}
            and not PurePosixPath(name).name.lower().startswith(("license", "changelog"))
        ]
        return [name for name, _size in sorted(chosen, key=rank)]


def file_extension(name: str) -> str:
    return PurePosixPath(name).suffix.lower().lstrip(".")


def walk(root: Path) -> Tree:
    tree = Tree(root)
    stack = [root]
    while stack and len(tree.files) < _MAX_FILES:
        folder = stack.pop()
        try:
            entries = sorted(folder.iterdir())
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith(".") or entry.is_symlink():
                continue
            if entry.is_dir():
                if entry.name not in _SKIP_DIRS:
                    stack.append(entry)
            elif entry.is_file():
                tree.files[entry.relative_to(root).as_posix()] = entry.stat().st_size
    return tree


# --- command lines in documents -------------------------------------------------------


def code_lines(path: Path) -> Iterator[str]:
    """Shell lines of a document: code blocks of markdown, every line of a script;
    backslash continuations joined."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return
    markdown = path.suffix.lower() in (".md", ".markdown", "")
    in_code = not markdown
    pending = ""
    for line in text.splitlines():
        if markdown and _FENCE.match(line):
            in_code, pending = not in_code, ""
            continue
        if not in_code:
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        yield pending + line
        pending = ""


_SPAN = re.compile(r"(?<!`)`([^`]+)`(?!`)")


def code_spans(path: Path) -> Iterator[str]:
    """Inline code of a markdown document's prose and tables (`rg -tpy foo`), a span
    broken over two lines of a paragraph joined."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return
    in_code = False
    paragraph: list[str] = []
    for line in [*text.splitlines(), ""]:
        if _FENCE.match(line):
            in_code = not in_code
        elif not in_code and line.strip():
            paragraph.append(line.strip())
            continue
        yield from (span.strip() for span in _SPAN.findall(" ".join(paragraph)))
        paragraph = []


def _tokens(line: str) -> list[str] | None:
    text = line.strip()
    for prompt in ("$ ", "% ", "> ", "\u276f "):  # shell prompts
        if text.startswith(prompt):
            text = text[len(prompt) :]
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|<>")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        return list(lexer)
    except ValueError:
        return None


def commands_in(line: str, binary: str) -> Iterator[tuple[tuple[str, ...], str]]:
    """(arguments, problem) of each command of `line` that runs `binary`; problem is
    non-empty when it cannot be a workload as written (stdin from a file or a pipe)."""
    tokens = _tokens(line)
    if not tokens:
        return
    segment: list[str] = []
    for token in [*tokens, ";"]:
        if token in (";", "&&", "||", "&"):
            yield from _segment(segment, binary)
            segment = []
        else:
            segment.append(token)


def _segment(tokens: list[str], binary: str) -> Iterator[tuple[tuple[str, ...], str]]:
    stages: list[list[str]] = [[]]
    for token in tokens:
        if token == "|":  # noqa: S105 (a pipe, not a password)
            stages.append([])
        else:
            stages[-1].append(token)
    for position, stage in enumerate(stages):
        args = _invocation(stage, binary)
        if args is None:
            for token in stage:  # hyperfine 'tool args', bash -c 'tool args'
                if " " in token:
                    for inner, problem in commands_in(token, binary):
                        yield inner, problem
            continue
        kept, problem = _redirections(args)
        yield tuple(kept), ("reads its input from another command" if position else problem)


def _redirections(args: list[str]) -> tuple[list[str], str]:
    """The arguments without output redirections, and why not when stdin is a file."""
    kept: list[str] = []
    problem = ""
    words = iter(args)
    for word in words:
        if word.startswith((">", "<", "&>")) and kept and kept[-1].isdigit():
            kept.pop()  # `2>&1` reads as 2, >&, 1: the 2 names a descriptor
        if word in (">", ">>", ">&", "&>", "&>>", ">>&"):
            next(words, None)  # its output to a file: a workload's output is kept anyway
        elif word == "<":
            problem = problem or f"reads stdin from {next(words, '?')}"
        elif not word.startswith((">", "<", "&>")):
            kept.append(word)
    return kept, problem


def _invocation(stage: list[str], binary: str) -> list[str] | None:
    """The arguments when `stage` runs `binary` (directly, by path, or with cargo run)."""
    words = list(stage)
    while words and (_ENV_WORD.fullmatch(words[0]) or words[0] in _WRAPPERS):
        words.pop(0)
    if not words:
        return None
    head = words[0]
    if PurePosixPath(head).name == binary and not head.endswith((".rs", ".toml")):
        return words[1:]
    if words[:2] == ["cargo", "run"] and "--" in words:
        options = words[2 : words.index("--")]
        chosen = (
            options[options.index("--bin") + 1 : options.index("--bin") + 2]
            if ("--bin" in options)
            else [binary]
        )
        if "--example" not in options and chosen == [binary]:
            return words[words.index("--") + 1 :]
    return None


def downloads(path: Path) -> dict[str, str]:
    """File names a document fetches (curl/wget lines, links), with their URLs."""
    found: dict[str, str] = {}
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return found
    for line in text.splitlines():
        for url in _URL.findall(line):
            name = PurePosixPath(url.split("?")[0]).name
            if "." in name:
                found.setdefault(name, url)
                for packed in (".gz", ".zip", ".xz", ".bz2", ".zst", ".tgz"):
                    if name.endswith(packed):
                        found.setdefault(name[: -len(packed)], url)
        tokens = line.split()
        for flag in ("-o", "-O", "--output", "--output-document"):
            if flag in tokens and tokens.index(flag) + 1 < len(tokens):
                urls = _URL.findall(line)
                if urls:
                    found.setdefault(tokens[tokens.index(flag) + 1], urls[0])
    return found


# --- integration tests ----------------------------------------------------------------


def test_invocations(path: Path, binary: str) -> Iterator[tuple[str, ...]]:
    """Argument lists of `Command::cargo_bin("binary")` chains made of string literals."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return
    for found in _CARGO_BIN.finditer(text):
        name = found.group(1) or found.group(2)
        if name != binary:
            continue
        end = _CHAIN_END.search(text, found.end())
        chain = text[found.end() : end.start() if end else len(text)]
        if any(word in chain for word in ("write_stdin", "current_dir", "pipe_stdin")):
            continue
        args: list[str] = []
        literal = True
        for call in _ARG_CALL.finditer(chain):
            close = _close_paren(chain, call.end() - 1)
            inside = chain[call.end() : close]
            strings = _STRING.findall(inside)
            rest = _STRING.sub("", inside)
            if call.group(1) == "arg":
                literal = literal and len(strings) == 1 and not re.search(r"\w", rest)
            else:
                literal = literal and not re.search(r"[A-Za-z_]\w*", rest.replace("&", ""))
            args += [bytes(s, "utf-8").decode("unicode_escape") for s in strings]
        if literal and args:
            yield tuple(args)


def _close_paren(text: str, start: int) -> int:
    depth = 0
    for index in range(start, len(text)):
        if text[index] == "(":
            depth += 1
        elif text[index] == ")":
            depth -= 1
            if depth == 0:
                return index
    return len(text)


def referenced_files(tree: Tree, folders: Sequence[str]) -> set[str]:
    """Files of the tree named by string literals in the tests' and benches' sources."""
    named: set[str] = set()
    for relative in tree.files:
        parts = PurePosixPath(relative).parts
        if relative.endswith(".rs") and any(part in ("tests", "benches") for part in parts):
            try:
                text = (tree.root / relative).read_text(errors="replace")
            except OSError:
                continue
            for literal in _STRING.findall(text):
                for base in ("", *folders):
                    candidate = f"{base}/{literal}" if base else literal
                    if candidate in tree.files:
                        named.add(candidate)
                for packaged in re.findall(r"\.\./([^\"]+)", literal):
                    for base in folders:
                        if f"{base}/{packaged}" in tree.files:
                            named.add(f"{base}/{packaged}")
    return named

"""Workloads for a first orchestrator.toml, found by reading the crate (nothing is built).

Where runs come from, in this order: command lines in the README, the guides beside it
(GUIDE.md, FAQ.md) and docs (code blocks, and inline code in prose and tables), in shell
scripts under examples/, benches/ and scripts/, the integration tests' assert_cmd
invocations (`Command::cargo_bin("x").args([...])`), and the binary's subcommands read from
its clap derive attributes, filled with data files of the tree. Each is then vetted: every
file it names must exist (a README's file the tree lacks is swapped for one of the same
kind that the tree holds, and said so), it must do more than `--help`/`--version`, and it
must not be non-deterministic or reach outside as far as its words tell (sleep, date,
random, a server, a URL, running other programs), nor be interactive, need a GPU the
flavor lacks or sample without a seed (config/init/workload_hazards.py). A search without a
path (`rg PATTERN`) searches the crate's tree, where runs start. What is left over is
kept, with the reason, for the file's comments.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from orchestrator.config.init.clap_source import Command, read_commands
from orchestrator.config.init.run_files import DATA_EXTENSIONS, looks_like_path, path_arguments
from orchestrator.config.init.workload_hazards import read_cli_facts, workload_hazards
from orchestrator.config.init.workload_sources import (
    Tree,
    code_lines,
    code_spans,
    commands_in,
    downloads,
    file_extension,
    referenced_files,
    test_invocations,
    walk,
)

_TRIVIAL = frozenset({"--help", "-h", "--version", "-V", "help", "version", "-help"})
# Words that tell a run is not the same twice, or waits, or serves: validation compares
# outputs, and a training run must end.
_UNSTABLE = frozenset(
    {"sleep", "date", "now", "random", "rand", "shuffle", "uuid", "timestamp", "clock",
     "watch", "serve", "server", "daemon", "listen", "follow", "repl", "interactive",
     "shell", "login", "update", "upgrade", "install", "download", "upload", "publish"}
)  # fmt: skip
_EXEC_OPTIONS = frozenset({"--exec", "--exec-batch", "-x", "-X"})
_EXTENSION_OPTIONS = frozenset({"-e", "--extension", "--ext"})
_OUTPUT_OPTIONS = frozenset({"-o", "--output", "--out", "--out-file", "--output-file"})


@dataclass(frozen=True)
class Candidate:
    args: tuple[str, ...]
    source: str  # where it was read: "README.md", "tests/cli.rs", "clap: src/main.rs"
    note: str = ""  # what was changed, e.g. a README file swapped for the tree's


@dataclass(frozen=True)
class Rejected:
    candidate: Candidate
    reason: str


@dataclass(frozen=True)
class Proposal:
    """What `init` writes for [train], [validate] and [bench]."""

    workloads: tuple[Candidate, ...]
    rejected: tuple[Rejected, ...]
    shape: tuple[str, ...] = ()  # a command line to complete when nothing was found


# --- vetting --------------------------------------------------------------------------


_WAITS = frozenset({"watch", "serve", "server", "daemon", "listen", "follow", "repl",
                    "interactive", "shell"})  # fmt: skip
_ONLINE = frozenset({"login", "update", "upgrade", "install", "download", "upload", "publish"})


def _unstable(arg: str) -> str:
    """Why the words of `arg` tell that a run differs each time, waits, or needs the
    network; "" when they do not."""
    words = sorted(set(re.split(r"[^a-z]+", arg.lower())) & _UNSTABLE)
    if not words:
        return ""
    if words[0] in _WAITS:
        return f"{words[0]!r}: it waits (a server, a watcher, a prompt) instead of ending"
    if words[0] in _ONLINE:
        return f"{words[0]!r}: it needs the network, which runs do not have"
    return f"{words[0]!r}: its output differs from run to run, so validation cannot compare it"


def _outside(arg: str) -> str:
    """Why `arg` needs a shell or the network, "" when it does not."""
    if "://" in arg:
        return f"reaches the network ({arg}); runs have none"
    if "$" in arg or "`" in arg or arg.startswith("~"):
        return f"needs a shell to expand {arg!r}; runs have none"
    if "*" in arg and ("/" in arg or re.fullmatch(r"\*+\.\w+", arg)):
        return f"needs a shell to expand the glob {arg!r}"
    return ""


def _arg_problem(arg: str, following: str, tree: Tree) -> str:
    """Why one argument (with the one after it) keeps a run from being a workload."""
    outside = _outside(arg) or _unstable(arg)
    if outside:
        return outside
    program = following and not looks_like_path(following)
    if (
        arg in _EXEC_OPTIONS
        and program
        and (arg.startswith("--") or re.fullmatch(r"[a-z][a-z0-9_-]*", following))
    ):
        return f"runs another program ({arg} {following}), which the container may lack"
    extension = following.lower()
    if (
        arg in _EXTENSION_OPTIONS
        and extension in DATA_EXTENSIONS
        and not any(file_extension(name) == extension for name in tree.files)
    ):
        return f"looks for .{following} files and the tree has none: it finds nothing"
    if arg in _OUTPUT_OPTIONS and following and looks_like_path(following):
        return f"writes {following}; runs see the crate read-only"
    return ""


def _problem(args: tuple[str, ...], tree: Tree) -> str:
    """Why `args` cannot be a workload as written, "" when nothing tells so."""
    if not args:
        return "no arguments"
    if all(arg in _TRIVIAL for arg in args):
        return "prints help or the version only: PGO learns nothing from it"
    if all(arg.startswith("-") for arg in args):
        return "options only, no input: PGO learns little from it"
    for index, arg in enumerate(args):
        problem = _arg_problem(arg, args[index + 1] if index + 1 < len(args) else "", tree)
        if problem:
            return problem
    return ""


def _replace(args: list[str], value: str, new: str) -> None:
    """`value` (an argument, or an option's `=value`) replaced by `new` in `args`."""
    for index, arg in enumerate(args):
        if arg == value:
            args[index] = new
            return
        if arg.startswith("-") and arg.endswith(f"={value}"):
            args[index] = arg[: -len(value)] + new
            return


def _vet(
    candidate: Candidate, tree: Tree, downloads: dict[str, str], folders: Sequence[str]
) -> Candidate | Rejected:
    """The candidate as a workload (files it names found in the tree), or why not."""
    problem = _problem(candidate.args, tree)
    if problem:
        return Rejected(candidate, problem)
    fixed = list(candidate.args)
    notes = []
    for value in path_arguments(candidate.args):
        if tree.exists(value):
            continue
        relocated = next((f"{f}/{value}" for f in folders if tree.exists(f"{f}/{value}")), "")
        if relocated:  # a member's README or test: paths relative to the member
            _replace(fixed, value, relocated)
            continue
        url = downloads.get(PurePosixPath(value).name, "")
        fetched = f"; {candidate.source} fetches it from {url}" if url else ""
        same = tree.data_files(file_extension(value)) if file_extension(value) else []
        if not same:
            return Rejected(candidate, f"{value} is not in the tree{fetched}")
        _replace(fixed, value, same[0])
        notes.append(f"{value} is not in the tree{fetched}: {same[0]} instead")
    return Candidate(tuple(fixed), candidate.source, "; ".join(notes))


def _work(candidate: Candidate, tree: Tree) -> tuple[int, int]:
    """How much work a run shows: files it reads, then its words that are not flags."""
    reads = sum(1 for value in path_arguments(candidate.args) if tree.exists(value))
    return reads, sum(1 for arg in candidate.args if not arg.startswith("-"))


# --- candidates from the binary's command line ----------------------------------------


_DIR_NAMES = frozenset({"dir", "dirs", "directory", "root", "folder", "paths", "path"})


def _fill(command: Command, tree: Tree) -> tuple[str, ...] | None:
    """Arguments for `command` with the tree's data files, None when it needs a value
    that cannot be guessed (a required pattern, a required option)."""
    args = list(command.words)
    if command.required_options:
        return None
    used: set[str] = set()
    for argument in command.positionals:
        hinted = next((ext for ext in DATA_EXTENSIONS if ext in argument.name.lower()), "")
        if argument.is_path or hinted:
            if argument.name.lower() in _DIR_NAMES and not hinted:
                folders = sorted({str(PurePosixPath(n).parent) for n in tree.data_files()} - {"."})
                if folders:
                    args.append(folders[0])
                    continue
            choices = [n for n in tree.data_files(hinted) if n not in used]
            if not choices:
                return None if argument.required else tuple(args)
            used.add(choices[0])
            args.append(choices[0])
        elif argument.required:
            return None
    return tuple(args)


def _rust_sources(folder: Path) -> list[Path]:
    return sorted(p for p in (folder / "src").rglob("*.rs") if p.is_file())[:500]


# Markdown files beside the README that are not guides: no command lines to read there.
_NOT_GUIDES = ("changelog", "changes", "history", "contributing", "code_of_conduct",
               "license", "licence", "security", "release", "authors", "news")  # fmt: skip


def _documents(root: Path, package_dir: Path) -> list[Path]:
    """The README of the root and of the package with the guides beside it (GUIDE.md,
    FAQ.md), and the docs, examples, benches and scripts that may show command lines."""
    documents: list[Path] = []
    for folder in dict.fromkeys((root, package_dir)):
        readme = next(
            (folder / n for n in ("README.md", "README", "readme.md") if (folder / n).is_file()),
            None,
        )
        documents += [readme] if readme else []
        documents += sorted(
            p
            for p in folder.glob("*.md")
            if p.is_file() and p != readme and not p.stem.lower().startswith(_NOT_GUIDES)
        )[:20]
        for sub in ("docs", "doc", "examples", "benches", "scripts"):
            if (folder / sub).is_dir():
                documents += sorted(
                    p
                    for p in (folder / sub).rglob("*")
                    if p.suffix in (".md", ".sh", ".bash") and p.is_file()
                )[:200]
    return documents


@dataclass
class _Found:
    candidates: list[Candidate] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    downloads: dict[str, str] = field(default_factory=dict)


def _from_documents(found: _Found, root: Path, package_dir: Path, binary: str) -> None:
    for document in _documents(root, package_dir):
        found.downloads.update(downloads(document))
        shown = document.relative_to(root).as_posix()
        for line in code_lines(document):
            for args, problem in commands_in(line, binary):
                if problem:
                    found.rejected.append(Rejected(Candidate(args, shown), problem))
                else:
                    found.candidates.append(Candidate(args, shown))
        if document.suffix.lower() == ".md":  # `rg -tpy foo` in prose and tables
            for span in code_spans(document):
                found.candidates += [
                    Candidate(args, shown)
                    for args, problem in commands_in(span, binary)
                    if args and not problem
                ]
    for folder in dict.fromkeys((root, package_dir)):
        for test in sorted((folder / "tests").glob("**/*.rs"))[:200]:
            shown = test.relative_to(root).as_posix()
            found.candidates += [Candidate(a, shown) for a in test_invocations(test, binary)]


def _from_clap(
    found: _Found, tree: Tree, root: Path, package_dir: Path, main_file: Path | None
) -> tuple[str, ...]:
    """Candidates from the binary's clap commands; the shape of the first one that could
    not be filled (for a placeholder)."""
    shown = (main_file or package_dir / "src").relative_to(root).as_posix()
    shape: tuple[str, ...] = ()
    for command in read_commands(_rust_sources(package_dir), main_file):
        filled = None if command.hidden else _fill(command, tree)
        if filled:
            found.candidates.append(Candidate(filled, f"its clap arguments ({shown})"))
        elif not shape and command.words and not command.hidden:
            shape = (*command.words, *(f"<{a.name}>" for a in command.positionals))
    return shape


def find_workloads(
    root: Path,
    package_dir: Path,
    binary: str,
    main_file: Path | None = None,
    flavor: str = "cpu",
) -> Proposal:
    """Workloads for `binary` of the package at `package_dir`, runs at `root`, for
    `flavor`'s runs: one that is interactive, needs a GPU the flavor lacks or samples
    without a seed is rejected (config/init/workload_hazards.py)."""
    tree = walk(root)
    member = package_dir.relative_to(root).as_posix() if package_dir != root else ""
    folders = [member] if member else []
    tree.referenced = referenced_files(tree, folders)
    found = _Found()
    _from_documents(found, root, package_dir, binary)
    shape = _from_clap(found, tree, root, package_dir, main_file)
    cli = read_cli_facts(_rust_sources(package_dir))
    accepted: list[Candidate] = []
    hazardous: list[Rejected] = []  # listed first: the file's comments keep only a dozen
    seen: set[tuple[str, ...]] = set()
    for candidate in found.candidates:
        if candidate.args in seen:
            continue
        seen.add(candidate.args)
        verdict = _vet(candidate, tree, found.downloads, folders)
        if isinstance(verdict, Rejected):
            found.rejected.append(verdict)
        elif hazards := workload_hazards(verdict.args, flavor, cli):
            hazardous.append(Rejected(candidate, "; ".join(hazards)))
        elif verdict.args not in {c.args for c in accepted}:
            accepted.append(verdict)
    return Proposal(_best(accepted, tree), (*hazardous, *found.rejected), shape)


def _best(accepted: list[Candidate], tree: Tree, most: int = 3) -> tuple[Candidate, ...]:
    """Up to `most` runs that read files or do more than flags, different subcommands
    first; the order of discovery breaks ties (README before tests before clap)."""
    order = {id(c): index for index, c in enumerate(accepted)}
    ranked = sorted(accepted, key=lambda c: (-min(_work(c, tree)[0], 1), order[id(c)]))
    chosen: list[Candidate] = []
    heads: set[str] = set()
    for candidate in ranked:  # one per subcommand first
        if candidate.args[0] not in heads and len(chosen) < most:
            chosen.append(candidate)
            heads.add(candidate.args[0])
    for candidate in ranked:
        if candidate not in chosen and len(chosen) < most:
            chosen.append(candidate)
    return tuple(chosen)

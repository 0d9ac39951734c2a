"""Whether the configured runs (workloads, validation, bench, the gate's) can work: no
placeholder left by `orchestrator init`, and every file an argument names is in the crate
or among `[train] inputs`.

Runs start at the crate's root (/build/src), so a relative path names a file of the crate;
/build/src/... names one too, and /build/inputs/<name>/... (or ../inputs/<name>/...) one
of `[train] inputs`. Other absolute paths (/dev/null, /tmp) belong to the container and
are not checked. What counts as a path is judged statically: an argument (or an option's
`=value`) with a `/` between plain name parts, or a plain name with a data file's
extension (`cities.csv`); `a/b` without such an extension (a pattern, maybe) is checked
only when the crate has a folder `a`.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from orchestrator.config.init.workload_hazards import read_cli_facts, workload_hazards
from orchestrator.config.init.workload_sources import walk
from orchestrator.errors import ConfigError

if TYPE_CHECKING:
    from orchestrator.config.declarations.kinds import Run
    from orchestrator.config.resolve.options import Options

# The sentinel `init` writes where it found nothing that works; see `placeholder`.
PLACEHOLDER_MARK = "<placeholder"
_SRC = "/build/src"
_INPUTS = "/build/inputs"
# Extensions of files a workload reads or writes; a plain word with one names a file.
DATA_EXTENSIONS = frozenset(
    {
        "avro", "bin", "bmp", "bz2", "cbor", "csv", "dat", "db", "flac", "gguf", "gif", "gz",
        "html", "ini", "jpeg", "jpg", "json", "jsonl", "log", "lz4", "md", "mp3", "mp4",
        "ndjson", "npy", "onnx", "parquet", "pdf", "png", "pt", "rs", "safetensors", "sqlite",
        "svg", "tar", "tgz", "toml", "tsv", "txt", "wasm", "wav", "webp", "xml", "xz", "yaml",
        "yml", "zip", "zst",
    }
)  # fmt: skip
_PART = re.compile(r"[A-Za-z0-9_.+@%-]+")
_NAME = re.compile(r"[A-Za-z0-9_+@%-][A-Za-z0-9_.+@%-]*\.([A-Za-z0-9]{1,12})")


def placeholder(what: str) -> str:
    """An argument that marks a run `init` could not find: config checks recognise it."""
    return f"{PLACEHOLDER_MARK}: {what}>"


def is_placeholder(argument: str) -> bool:
    return argument.startswith(PLACEHOLDER_MARK)


def looks_like_path(text: str) -> bool:
    """Whether `text` names a file (judged from its shape, not from the disk)."""
    if not text or text.startswith("-") or "://" in text:
        return False
    if "/" in text:
        parts = [part for part in text.split("/") if part]
        return bool(parts) and all(_PART.fullmatch(part) for part in parts)
    return _data_name(text)


def _data_name(text: str) -> bool:
    found = _NAME.fullmatch(PurePosixPath(text).name)
    return found is not None and found.group(1).lower() in DATA_EXTENSIONS


def path_arguments(args: Iterable[str]) -> Iterator[str]:
    """The arguments (or `--option=value` values) that name files."""
    for argument in args:
        value = argument
        if argument.startswith("-"):
            _name, equals, value = argument.partition("=")
            if not equals:
                continue
        if looks_like_path(value):
            yield value


def missing_files(args: Iterable[str], crate_dir: Path, inputs: Sequence[Path] = ()) -> list[str]:
    """The files `args` name that a run at the crate's root would not find."""
    named = {item.name: item for item in inputs}
    missing = []
    for value in path_arguments(args):
        path = PurePosixPath(posixpath.normpath(posixpath.join(_SRC, value)))
        if path.is_relative_to(_SRC):
            inside = path.relative_to(_SRC)
            found = (crate_dir / inside).exists()
            if not (found or _data_name(value) or not inside.parts):
                # `a/b` without a data extension may be a pattern, not a path: a path only
                # when its first folder is the crate's
                found = not (crate_dir / inside.parts[0]).is_dir()
        elif path.is_relative_to(_INPUTS) and path != PurePosixPath(_INPUTS):
            first, *rest = path.relative_to(_INPUTS).parts
            found = first in named and named[first].joinpath(*rest).exists()
        else:
            continue  # the container's own files
        if not found:
            missing.append(value)
    return missing


@dataclass(frozen=True)
class ConfiguredRuns:
    """What the run checks read of the settings: every configured run with the setting
    that holds it (`train.workloads[0]`, `validate.command`, ...), and what the files
    they name are looked for in: the crate and `[train] inputs`."""

    runs: tuple[tuple[str, Run | tuple[str, ...]], ...]
    crate_dir: Path
    train_inputs: tuple[Path, ...]

    @classmethod
    def from_options(cls, options: Options) -> ConfiguredRuns:
        runs: list[tuple[str, Run | tuple[str, ...]]] = [
            (f"train.workloads[{index}]", run) for index, run in enumerate(options.workloads)
        ]
        if options.validate_command:
            runs.append(("validate.command", options.validate_command))
        runs += [
            (f"validate.runs[{index}]", run) for index, run in enumerate(options.validate_runs)
        ]
        if options.bench_command:
            runs.append(("bench.command", options.bench_command))
        runs += [
            (f"gate.workloads[{index}]", run) for index, run in enumerate(options.gate_workloads)
        ]
        return cls(tuple(runs), options.crate_dir, options.train_inputs)


def run_problems(configured: ConfiguredRuns) -> list[str]:
    """Why configured runs cannot work as written: placeholders, files nobody provides."""
    problems = []
    for key, run in configured.runs:
        args = run if isinstance(run, tuple) else run.args
        shown = " ".join(args)
        marks = [arg for arg in args if is_placeholder(arg)]
        if marks:
            problems.append(f"{key} is a placeholder left by `orchestrator init`: {marks[0]}")
            continue
        for name in missing_files(args, configured.crate_dir, configured.train_inputs):
            problems.append(
                f"{key} ({shown}) names {name}, which is neither in {configured.crate_dir} nor "
                "among [train] inputs"
            )
    return problems


def run_hazards(options: Options, flavors: Sequence[str]) -> list[str]:
    """One line per configured run that is interactive, needs a GPU a flavor lacks or
    samples without a seed (config/init/workload_hazards.py), with the flavors it concerns;
    each flavor's [flavors.<name>.*] tables applied. Warnings: such a run may still work."""
    tree = walk(options.crate_dir)
    sources = [
        options.crate_dir / name
        for name in sorted(tree.files)
        if name.endswith(".rs") and "src" in PurePosixPath(name).parts[:-1]
    ][:500]
    cli = read_cli_facts(sources)
    found: dict[tuple[str, str, str], list[str]] = {}
    for flavor in flavors:
        for key, run in ConfiguredRuns.from_options(options.for_flavor(flavor)).runs:
            args = run if isinstance(run, tuple) else run.args
            hazards = workload_hazards(args, flavor, cli)
            if hazards and not any(is_placeholder(arg) for arg in args):
                found.setdefault((key, " ".join(args), "; ".join(hazards)), []).append(flavor)
    return [
        f"{key} ({shown}) for {', '.join(names)}: {reasons}"
        for (key, shown, reasons), names in found.items()
    ]


RUN_PROBLEMS_HINT = (
    "Edit the runs in orchestrator.toml: give each one arguments that do real work on files "
    "the crate holds (paths relative to its root), or list outside data in [train] inputs "
    "and name it as /build/inputs/<name>. `orchestrator build --dry-run` lists what is left."
)


def refuse_run_problems(configured: ConfiguredRuns, what: str = "release") -> None:
    """ConfigError before any work while a run is a placeholder or names a missing file."""
    problems = run_problems(configured)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ConfigError(f"cannot {what}: {problems[0]}{more}", hint=RUN_PROBLEMS_HINT)


def check_runs(configured: ConfiguredRuns, *, refuse: bool, warn: Callable[[str], None]) -> None:
    """Refuse (a release) or warn (its dry run) while a run cannot work as written."""
    if refuse:
        refuse_run_problems(configured)
    for problem in run_problems(configured):
        warn(problem)

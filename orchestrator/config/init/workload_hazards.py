"""What makes a run a poor workload for one flavor, read from its arguments (nothing runs).

Three hazards, each a short reason (`init` rejects a candidate with one, `build --dry-run`
and `release --dry-run` warn about every configured run that has one):

- interactive: `--chat`, `--interactive`, `--repl`, or a switch whose help text in the
  binary's clap source says it reads stdin or is a REPL (`-i` only with that evidence:
  ripgrep's `-i` ignores case). A run gets no input, so it waits or learns nothing.
- a GPU the flavor lacks: `--backend cuda`, `--device cuda:0`, `--gpu` on a flavor whose
  runs have no GPU of that kind (cpu, aarch64; a rocm run on cuda and back).
- sampling without determinism: a `--temperature` other than 0, or `--top-p`/`--top-k`,
  without a seed; an inference-looking command (`generate`, `sample`, `chat`) with neither
  a seed nor temperature 0. Validation compares outputs, which sampling changes each run.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# The GPU words each flavor's runs can use; every other flavor's runs have none.
_GPU_OF_FLAVOR: Mapping[str, frozenset[str]] = {
    "cuda": frozenset({"cuda", "gpu", "nvidia", "cudnn"}),
    "rocm": frozenset({"rocm", "hip", "gpu", "amd"}),
}
_GPU_WORDS = frozenset({"cuda", "cudnn", "nvidia", "rocm", "hip", "amd", "gpu", "metal", "mps"})
_DEVICE_OPTIONS = frozenset({"--backend", "--device", "--accelerator", "--compute-backend"})
_GPU_SWITCHES: Mapping[str, str] = {
    "--gpu": "gpu", "--use-gpu": "gpu", "--cuda": "cuda", "--use-cuda": "cuda",
    "--rocm": "rocm", "--hip": "hip", "--metal": "metal",
}  # fmt: skip
_INTERACTIVE = frozenset({"--chat", "--interactive", "--repl", "--interactive-mode"})
_SAYS_INTERACTIVE = re.compile(
    r"\b(stdin|standard input|interactive(ly)?|repl|read-eval|chat mode|chat session)\b", re.I
)
_TEMPERATURE = frozenset({"--temperature", "--temp"})
_TRUNCATION = frozenset({"--top-p", "--top_p", "--top-k", "--top_k", "--min-p", "--min_p"})
_GREEDY = frozenset({"--greedy", "--argmax", "--deterministic"})
_INFERENCE_WORDS = frozenset({"generate", "sample", "chat"})
_SAMPLING_OPTIONS = _TEMPERATURE | _TRUNCATION | {"--seed"}


@dataclass(frozen=True)
class CliFacts:
    """What the binary's clap source tells about its options; empty when nothing was read."""

    switches: Mapping[str, str] = field(default_factory=dict)  # "-i" -> its help text
    options: frozenset[str] = frozenset()  # every option name read: "--seed", "-i"


def _name_and_value(args: Sequence[str], index: int) -> tuple[str, str]:
    """The option at `index` and its value (`--x=v` or `--x v`; "" when none)."""
    arg = args[index]
    name, equals, value = arg.partition("=")
    if equals:
        return name, value
    following = args[index + 1] if index + 1 < len(args) else ""
    return arg, "" if following.startswith("-") else following


def _interactive(args: Sequence[str], cli: CliFacts) -> list[str]:
    found = []
    for arg in args:
        name = arg.partition("=")[0]
        if name in _INTERACTIVE and arg.partition("=")[2].lower() not in ("false", "0", "no"):
            found.append(f"{name} starts an interactive session: a run has no input to give it")
        elif name in cli.switches and _SAYS_INTERACTIVE.search(cli.switches[name]):
            said = " ".join(cli.switches[name].split())[:60]
            found.append(f"{name} reads stdin (its help: {said!r}): a run has no input to give it")
    return found


def _gpu_problem(shown: str, word: str, flavor: str) -> str:
    if word in _GPU_OF_FLAVOR.get(flavor, frozenset()):
        return ""
    if flavor in _GPU_OF_FLAVOR:
        return f"{shown} needs a GPU the {flavor} flavor's runs do not have"
    return f"{shown} needs a GPU, and the {flavor} flavor's runs have none"


def _gpu(args: Sequence[str], flavor: str) -> list[str]:
    found = []
    for index, arg in enumerate(args):
        name, value = _name_and_value(args, index)
        if name in _DEVICE_OPTIONS and value:
            word = re.split(r"[^a-z]", value.lower(), maxsplit=1)[0]
            if word in _GPU_WORDS:
                found.append(_gpu_problem(f"{name} {value}", word, flavor))
        elif arg in _GPU_SWITCHES:
            found.append(_gpu_problem(arg, _GPU_SWITCHES[arg], flavor))
    return [problem for problem in found if problem]


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _sampling(args: Sequence[str], cli: CliFacts) -> list[str]:
    seeded = any(arg.startswith("-") and "seed" in arg.partition("=")[0] for arg in args)
    if seeded or any(arg in _GREEDY for arg in args):
        return []
    temperature: float | None = None
    shown = ""
    truncation = ""
    for index in range(len(args)):
        name, value = _name_and_value(args, index)
        if name in _TEMPERATURE and _number(value) is not None:
            temperature, shown = _number(value), f"{name} {value}"
        elif name in _TRUNCATION and not truncation:
            truncation = name
    if temperature == 0:
        return []
    why = "its output differs from run to run, so validation cannot compare it"
    if temperature is not None:
        return [f"samples at {shown} without a seed: {why}"]
    if truncation:
        return [f"samples with {truncation} without a seed: {why}"]
    words = {arg.lower() for arg in args if not arg.startswith("-")}
    samples = not cli.options or bool(cli.options & _SAMPLING_OPTIONS)
    if words & _INFERENCE_WORDS and samples:
        return [f"sampling without a seed or --temperature 0: {why}"]
    return []


def workload_hazards(args: Sequence[str], flavor: str, cli: CliFacts | None = None) -> list[str]:
    """Why `args` make a poor workload (or validation or bench run) on `flavor`; [] when
    nothing in them tells so. `cli`: what the binary's clap source says of its options."""
    facts = cli or CliFacts()
    return [*_interactive(args, facts), *_gpu(args, flavor), *_sampling(args, facts)]


# --- what the binary's source says of its options -------------------------------------


_FIELD = re.compile(r"\s*(?:pub(?:\([^)]*\))?\s+)?([a-z_][a-z0-9_]*)\s*:\s*([^,{}]+?)\s*,?\s*$")
_LONG = re.compile(r"\blong\s*=\s*\"([^\"]+)\"")
_SHORT = re.compile(r"\bshort\s*=\s*'(.)'")
_HELP = re.compile(r"\b(?:help|about|long_help)\s*(?:=|\()\s*\"((?:[^\"\\]|\\.)*)\"")
_BUILDER = re.compile(r"\bArg::(?:new|with_name)\(\s*\"([^\"]+)\"\s*\)")


def _derive_fields(text: str) -> Iterable[tuple[str, str, str, str]]:
    """(attributes, doc comment, field name, type) of each field with a clap attribute."""
    docs: list[str] = []
    attributes: list[str] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if pending or stripped.startswith("#["):
            pending += " " + stripped
            if pending.count("[") <= pending.count("]"):
                attributes.append(pending)
                pending = ""
            continue
        if stripped.startswith("///"):
            docs.append(stripped[3:].strip())
            continue
        found = _FIELD.fullmatch(line)
        joined = " ".join(attributes)
        if found and re.search(r"#\[\s*(arg|clap|structopt)\s*\(", joined):
            yield joined, " ".join(docs), found.group(1), found.group(2)
        docs, attributes = [], []


def _builder_args(text: str) -> Iterable[tuple[str, str, str, bool]]:
    """(short, long, help, is a switch) of each `Arg::new("name")...` chain."""
    starts = list(_BUILDER.finditer(text))
    for index, start in enumerate(starts):
        end = starts[index + 1].start() if index + 1 < len(starts) else len(text)
        chain = text[start.end() : min(end, start.end() + 1500)].split(";", maxsplit=1)[0]
        short = re.search(r"\.short\(\s*'(.)'\s*\)", chain)
        long = re.search(r"\.long\(\s*\"([^\"]+)\"\s*\)", chain)
        helps = " ".join(m.group(1) for m in _HELP.finditer(chain))
        takes = re.search(r"takes_value\(\s*true|num_args|value_name|value_parser|Set\b", chain)
        yield (short.group(1) if short else "", long.group(1) if long else "", helps, not takes)


def read_cli_facts(sources: Iterable[Path]) -> CliFacts:
    """The binary's options and the help text of its switches, from clap derive fields
    (doc comments, `help = "..."`) and builder chains in `sources`."""
    switches: dict[str, str] = {}
    options: set[str] = set()
    for path in sources:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        for attributes, docs, name, rust_type in _derive_fields(text):
            long = _LONG.search(attributes)
            short = _SHORT.search(attributes)
            names = [f"--{long.group(1)}"] if long else []
            if not long and re.search(r"\blong\b(?!\s*=)", attributes):
                names.append("--" + name.replace("_", "-"))
            names += [f"-{short.group(1)}"] if short else []
            if not short and re.search(r"\bshort\b(?!\s*=)", attributes):
                names.append(f"-{name[0]}")
            helps = " ".join([docs, *(m.group(1) for m in _HELP.finditer(attributes)), name])
            options.update(names)
            if rust_type.strip() == "bool":
                switches.update(dict.fromkeys(names, helps))
        for short_name, long_name, helps, switch in _builder_args(text):
            names = [f"-{short_name}"] * bool(short_name) + [f"--{long_name}"] * bool(long_name)
            options.update(names)
            if switch:
                switches.update(dict.fromkeys(names, f"{helps} {long_name}"))
    return CliFacts(switches, frozenset(options))

"""docs/ (and README.md) say only what is true, and say all of it.

- The site builds with `mkdocs build --strict`: a link to a missing page or anchor fails it
  (mkdocs.yml sets `validation.anchors: warn`, and --strict makes warnings fatal).
- Every `--flag` named anywhere exists on some orchestrator command, and one named after
  `orchestrator COMMAND` exists on that command; every setting named (`section.key`,
  `[section] key`, a key of a TOML example) is declared in config/declarations/settings.py;
  every step in a step table is a `StepName`; every exit code mentioned is in the generated
  table.
- Every setting, every flag of every command and every step is documented in docs/:
  named outside the generated settings table (which documents everything by construction).

The checks are functions of the pages' text, so the tests below also run them on made-up
pages and declarations and see them fail.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import typer.main

from orchestrator.cli import app
from orchestrator.cli.exit_codes import exit_codes_markdown
from orchestrator.config.declarations.settings import FLAVOR_SETTINGS, SETTINGS
from orchestrator.config.resolve.flavor_overrides import (
    APPEND_SECTIONS,
    ARGS_APPEND,
    OVERRIDE_SECTIONS,
)
from orchestrator.plan.steps import StepName

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
TABLE_START = "<!-- settings table: generated from orchestrator/config/declarations/settings.py -->"
TABLE_END = "<!-- end of settings table -->"

# `--flags` the pages name that belong to other programs, each with whose it is. A flag
# here that orchestrator also has is checked as orchestrator's after `orchestrator CMD`.
FOREIGN_FLAGS = {
    # cargo and rustc
    "--release": "cargo build --release",
    "--locked": "cargo",
    "--offline": "cargo",
    "--bin": "cargo",
    "--package": "cargo",
    "--workspace": "cargo test",
    "--skip": "the test harness",
    "--no-run": "cargo test --no-run (the test-build step)",
    "--profile": "cargo build --profile (build.profile)",
    "--emit-relocs": "the linker (for BOLT)",
    "--remap-path-prefix": "rustc",
    "--print": "rustc --print target-cpus",
    "--sysroot": "the linker and C compiler",
    "--cap-drop": "docker",
    "--cap-add": "docker",
    "--gpus": "docker run (GPU passthrough, docs/flavors.md)",
    "--device": "docker run (CDI devices, docs/flavors.md)",
    "--label": "dockerd",
    "--docker": "docker context create",
    "--list": "ld.so --list",
    "--list-elf": "cuobjdump",
    "--list-gpu-code": "nvcc",
    "--genco": "hipcc",
    "--tool": "valgrind --tool=callgrind",
    "--cache-sim": "valgrind",
    "--branch-sim": "valgrind",
    "--no-deps": "pip wheel",
    "--quiet": "pip",
    "--ignore-missing": "sha256sum -c",
    "--update-golden": "this repository's pytest option",
    # the example crate tinyllm
    "--seed": "tinyllm",
    "--tokens": "tinyllm",
    "--backend": "tinyllm",
    "--model": "a workload's argument",
    # a workload's arguments that init and the dry runs flag (config/init/workload_hazards.py)
    "--chat": "a workload's argument",
    "--interactive": "a workload's argument",
    "--repl": "a workload's argument",
    "--gpu": "a workload's argument",
    "--temperature": "a workload's argument",
    "--top-p": "a workload's argument",
    "--top-k": "a workload's argument",
    # the generated install.sh
    "--from": "install.sh",
    "--prefix": "install.sh",
    "--cpu-level": "install.sh",
    # other tools
    "--strict": "mypy --strict, mkdocs build --strict",
    "--network": "docker run --network none",
    "--time": "podman system service --time=0",
    "--rounds": "bench/engines.py",
    "--print-man-page": "a crate's own binary, in an [[archive.generate]] example",
}
# Settings-like names that are other programs' settings.
FOREIGN_SETTINGS = {
    "build.rustflags": "cargo's [build] rustflags in a crate's .cargo/config.toml",
    "flavors.<name>.packages": "a table of toolchains/*.toml: the flavor's pinned packages",
}
# Exit statuses of other programs the pages mention.
FOREIGN_EXITS = {1: "python -m orchestrator.tools.schemas --check (make lint)"}
# Names after a dot that make `section.x` a file name, not a setting (`build.json`).
FILE_SUFFIXES = {"json", "lock", "md", "png", "rs", "yml", "yaml", "toml", "py", "sh", "key", "pub"}
FILE_SUFFIXES |= {"fdata", "profdata"}
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
EXIT = re.compile(r"\bexit(?:s| code| codes| status)? (\d+(?:(?:, | or | and |/)\d+)*)")


# -- what exists -------------------------------------------------------------------------
def command_flags() -> dict[str, set[str]]:
    """Every command's long options by its path ("", "build", "release assemble")."""
    found: dict[str, set[str]] = {}

    def walk(command: Any, path: str) -> None:
        params = command.get_params(command.context_class(command))
        found[path] = {
            name
            for param in params
            if param.param_type_name == "option"
            for name in (*param.opts, *param.secondary_opts)
            if name.startswith("--")
        }
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, f"{path} {name}".strip())

    walk(typer.main.get_command(app), "")
    return found


def setting_keys() -> set[str]:
    return {s.key for s in SETTINGS}


def flavor_keys() -> set[str]:
    return {s.name for s in FLAVOR_SETTINGS}


def record_fields() -> set[str]:
    """`parent.field` of every JSON document orchestrator writes (build.json's
    `bolt.applied`, `gate.skipped`...): a dotted name may be one of those instead."""
    found: set[str] = set()
    for path in sorted((ROOT / "schemas").glob("*.schema.json")):
        schema = json.loads(path.read_text())
        defs: dict[str, Any] = schema.get("$defs", {})
        for holder in [schema, *defs.values()]:
            for name, value in holder.get("properties", {}).items():
                for child in _objects(value, defs):
                    found.update(f"{name}.{field}" for field in child["properties"])
    return found


def _objects(node: object, defs: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The object schemas a property's schema stands for ($ref, anyOf, items...)."""
    if not isinstance(node, dict):
        return
    if "$ref" in node:
        yield from _objects(defs.get(node["$ref"].rsplit("/", 1)[-1]), defs)
    if "properties" in node:
        yield node
    for key in ("anyOf", "oneOf", "allOf"):
        for option in node.get(key, []):
            yield from _objects(option, defs)
    for key in ("items", "additionalProperties"):
        yield from _objects(node.get(key), defs)


def exit_codes() -> set[int]:
    return {int(c) for c in re.findall(r"^\| (\d+) \|", exit_codes_markdown(), re.MULTILINE)}


# -- what the pages say ------------------------------------------------------------------
# README.md is not a page of the site, but what it names must exist all the same.
READMES = ["README.md"]


def doc_pages() -> dict[str, str]:
    """The site's pages (mkdocs.yml's docs_dir, less what it excludes)."""
    return {p.name: p.read_text() for p in sorted(DOCS.glob("*.md"))}


def checked_pages() -> dict[str, str]:
    """docs/ and the README: whatever they name must exist."""
    pages = {f"docs/{name}": text for name, text in doc_pages().items()}
    return pages | {name: (ROOT / name).read_text() for name in READMES}


def without_generated_table(text: str) -> str:
    if TABLE_START not in text:
        return text
    return text[: text.index(TABLE_START)] + text[text.index(TABLE_END) + len(TABLE_END) :]


def _toml_keys(text: str) -> Iterator[tuple[str, str]]:
    """(section, key) of the TOML examples, commented-out keys included."""
    for block in re.findall(r"```toml\n(.*?)```", text, re.DOTALL):
        section = ""
        for raw in block.splitlines():
            line = raw.strip()
            entries = re.match(r"^\[\[([\w.<>-]+)\]\]", line)
            if entries:  # an array of tables is one setting; its keys are an entry's fields
                parent, _, key = entries.group(1).rpartition(".")
                yield parent, key
                section = ""
                continue
            header = re.match(r"^\[([\w.<>-]+)\]", line)
            if header:
                section = header.group(1)
                continue
            key = re.match(r"^#?\s*([a-z_]+)\s*=", line)
            if key and section:
                yield section, key.group(1)


def named_settings(text: str) -> Iterator[str]:
    """Every name that reads as a setting: "bolt.mode", "flavors.<name>.levels"."""
    sections = {key.split(".")[0] for key in setting_keys()}
    for section, key in _toml_keys(text):
        yield _setting_name(section, key)
    for section, key in re.findall(r"`\[([\w.<>-]+)\] ([a-z_]+)", text):
        if section.split(".")[0] in sections | {"flavors"}:
            yield _setting_name(section, key)
    dotted = r"(?<![\w./<>-])([a-z]+)\.((?:<name>|[a-z0-9]+)\.)?([a-z_]+)(?![\w(/-]|\.\w)"
    for section, flavor, key in re.findall(dotted, text):
        if key in FILE_SUFFIXES or section not in sections | {"flavors"}:
            continue
        if section == "flavors":
            if flavor:
                yield f"flavors.<name>.{key}"
        elif not flavor:
            yield f"{section}.{key}"


def _setting_name(section: str, key: str) -> str:
    parts = section.split(".")
    if parts[0] == "flavors" and len(parts) == 2:
        return f"flavors.<name>.{key}"
    if parts[0] == "flavors" and len(parts) == 3 and parts[2] in OVERRIDE_SECTIONS:
        # A flavor's override table takes its top-level section's keys, and args_append.
        return f"flavors.<name>.{parts[2]}.{key}" if key == ARGS_APPEND else f"{parts[2]}.{key}"
    return f"{section}.{key}"


def step_table_names(text: str) -> Iterator[str]:
    """The step names in the first column of tables headed `| step |` or `| build |`."""
    in_table = False
    for line in text.splitlines():
        if not line.startswith("|"):
            in_table = False
            continue
        first = line.split("|")[1].strip()
        if first in {"step", "build"}:
            in_table = True
            continue
        if in_table and not first.startswith("---"):
            for name in re.findall(r"`([^`]+)`", first):
                if re.fullmatch(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*", name):
                    yield name


def mentioned_exit_codes(text: str) -> Iterator[int]:
    for group in EXIT.findall(text):
        yield from (int(n) for n in re.findall(r"\d+", group))


def _command_lines(text: str, commands: Iterable[str]) -> Iterator[tuple[str, list[str]]]:
    """(command path, its --flags) for each `orchestrator COMMAND ...` in the text."""
    known = set(commands)
    for match in re.finditer(r"(?<![\w/.-])orchestrator ([^\n`|;#>&]*)", text):
        words = match.group(1).split()
        path = ""
        for word in words:
            if f"{path} {word}".strip() in known:
                path = f"{path} {word}".strip()
            else:
                break
        if path:
            yield path, [w.split("=")[0] for w in words if FLAG.fullmatch(w.split("=")[0])]


def problems(
    pages: Mapping[str, str],
    flags: Mapping[str, set[str]],
    settings: set[str],
) -> list[str]:
    """What the pages name that does not exist."""
    everywhere = set().union(*flags.values())
    steps = {s.value for s in StepName}
    codes = exit_codes()
    fields = record_fields()
    found: list[str] = []
    for page, text in pages.items():
        for flag in sorted(set(FLAG.findall(text))):
            if flag not in everywhere and flag not in FOREIGN_FLAGS:
                found.append(f"{page}: {flag} is no option of any orchestrator command")
        for path, named in _command_lines(text, flags):
            for flag in named:
                if flag not in flags[path] | flags[""]:
                    found.append(f"{page}: `orchestrator {path}` has no option {flag}")
        for name in sorted(set(named_settings(text))):
            if name not in settings and name not in fields and name not in FOREIGN_SETTINGS:
                found.append(f"{page}: {name} is no setting (config/declarations/settings.py)")
        for name in sorted(set(step_table_names(text))):
            if name not in steps:
                found.append(f"{page}: step {name} is no StepName")
        for code in sorted(set(mentioned_exit_codes(text))):
            if code not in codes and code not in FOREIGN_EXITS:
                found.append(f"{page}: exit {code} is no exit code of orchestrator")
    return found


def undocumented(
    pages: Mapping[str, str],
    flags: Mapping[str, set[str]],
    settings: set[str],
) -> list[str]:
    """What exists that no page of docs/ names (the generated table does not count)."""
    text = "\n".join(without_generated_table(t) for t in pages.values())
    named = set(named_settings(text))
    found = [f"setting {key} is in no page of docs/" for key in sorted(settings - named)]
    words = set(FLAG.findall(text))
    for path, options in sorted(flags.items()):
        for flag in sorted(options - {"--help", "--install-completion", "--show-completion"}):
            if flag not in words:
                command = f"orchestrator {path}".strip()
                found.append(f"{command} {flag} is in no page of docs/")
    listed = set(step_table_names(text))
    found += [f"step {s.value} is in no step table of docs/" for s in StepName if s not in listed]
    return found


def all_settings() -> set[str]:
    flavor_tables = {f"flavors.<name>.{section}" for section in OVERRIDE_SECTIONS}
    appends = {f"flavors.<name>.{section}.{ARGS_APPEND}" for section in APPEND_SECTIONS}
    return (
        setting_keys()
        | {f"flavors.<name>.{key}" for key in flavor_keys()}
        | flavor_tables
        | appends
    )


# -- the tests ---------------------------------------------------------------------------
MKDOCS = (sys.executable, "-m", "mkdocs", "build", "--strict")


def _mkdocs(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [*MKDOCS, "--config-file", str(config), "--site-dir", str(site)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        cwd=config.parent,
    )


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    built = _mkdocs(ROOT / "mkdocs.yml", tmp_path / "site")
    assert built.returncode == 0, built.stdout + built.stderr
    assert (tmp_path / "site" / "configuration" / "index.html").is_file()
    assert (tmp_path / "site" / "exit-codes" / "index.html").is_file()


def test_a_link_to_a_missing_anchor_or_page_fails_the_build(tmp_path: Path) -> None:
    shutil.copytree(DOCS, tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    page = tmp_path / "docs" / "install.md"
    original = page.read_text()
    page.write_text(
        original + "\nSee [the gate](pgo-bolt.md#no-such-heading) and [that](no-such-page.md).\n"
    )
    built = _mkdocs(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert built.returncode != 0
    assert "'pgo-bolt.md#no-such-heading'" in built.stderr
    assert "'no-such-page.md'" in built.stderr
    page.write_text(original)
    assert _mkdocs(tmp_path / "mkdocs.yml", tmp_path / "site").returncode == 0


def _links(text: str) -> Iterator[str]:
    yield from re.findall(r"\]\(([^)\s]+)\)", re.sub(r"```.*?```", "", text, flags=re.DOTALL))


def _anchors(text: str) -> set[str]:
    """The anchors GitHub gives a file's headings (where a README's links are followed)."""
    titles = [line.lstrip("#").strip() for line in text.splitlines() if re.match("#+ ", line)]
    return {re.sub(r"[^\w\- ]", "", t.lower()).replace(" ", "-") for t in titles}


@pytest.mark.parametrize("readme", READMES)
def test_the_readmes_links_reach_pages_and_headings(readme: str) -> None:
    """README.md's links (and the proposed one's, written for the repository root) reach
    files that exist, and their anchors headings of those files."""
    text = (ROOT / readme).read_text()
    for link in _links(text):
        if re.match(r"[a-z]+:", link):
            continue
        target, _, anchor = link.partition("#")
        path = ROOT / target if target else ROOT / readme
        assert path.exists(), f"{readme}: {link}: no such file"
        if anchor:
            headings = _anchors(path.read_text())
            assert anchor in headings, f"{readme}: {link}: no such heading"


def test_every_flag_setting_step_and_exit_code_named_exists() -> None:
    assert problems(checked_pages(), command_flags(), all_settings()) == []


def test_every_flag_setting_and_step_that_exists_is_documented() -> None:
    assert undocumented(doc_pages(), command_flags(), all_settings()) == []


def test_the_checks_see_what_is_not_there() -> None:
    flags = command_flags()
    made_up = {
        "page.md": "```sh\norchestrator build --gate best --no-such-flag\n```\n"
        "Run `orchestrator verify --retrain` and set `bolt.no_such_key` or\n"
        "`[gate] no_such_key`; exits 99.\n\n| step | what |\n|---|---|\n| `no-such-step` | x |\n"
        "```toml\n[train]\nno_such_workloads = []\n```\n"
    }
    found = problems(made_up, flags, all_settings())
    assert "page.md: --no-such-flag is no option of any orchestrator command" in found
    assert "page.md: `orchestrator verify` has no option --retrain" in found
    assert "page.md: bolt.no_such_key is no setting (config/declarations/settings.py)" in found
    assert "page.md: gate.no_such_key is no setting (config/declarations/settings.py)" in found
    assert (
        "page.md: train.no_such_workloads is no setting (config/declarations/settings.py)" in found
    )
    assert "page.md: step no-such-step is no StepName" in found
    assert "page.md: exit 99 is no exit code of orchestrator" in found
    assert not any("--gate" in line for line in found)


def test_what_no_page_names_is_undocumented() -> None:
    flags = {**command_flags(), "frobnicate": {"--frob-level", "--help"}}
    settings = all_settings() | {"bolt.made_up_setting"}
    found = undocumented(doc_pages(), flags, settings)
    assert found == [
        "setting bolt.made_up_setting is in no page of docs/",
        "orchestrator frobnicate --frob-level is in no page of docs/",
    ]

"""How the declared settings are shown: CLI flags with their help and value names, and the
settings table of docs/configuration.md. Derived from config/declarations/settings.py;
nothing here is declared twice."""

from __future__ import annotations

import json
from dataclasses import dataclass

from orchestrator.config.declarations.kinds import Kind, toml_shape
from orchestrator.config.declarations.settings import (
    FLAVOR_SETTINGS,
    SETTINGS,
    FlavorKey,
    Setting,
)


def default_text(spec: Setting | FlavorKey, *, for_flag: bool = False) -> str:
    """The default as a person reads it: "x86-64-v2", "on", "none", "the package name"."""
    value = spec.default
    text = str(value)
    if value is None:
        text = spec.computed if isinstance(spec, Setting) else "none"
    elif isinstance(value, bool):
        text = ("on" if value else "off") if for_flag else text.lower()
    elif value == ():
        text = "none"
    elif spec.kind == "list[run]":
        text = json.dumps(toml_shape(value))
    elif isinstance(value, tuple):
        text = ", ".join(str(v) for v in value)
    return text


@dataclass(frozen=True)
class FlagSpec:
    """How the CLI declares one setting's option: typer.Option(*decls, help=help,
    metavar=metavar)."""

    key: str  # the dotted key to put in `resolve(cli=...)`
    decls: tuple[str, ...]  # ("--target-cpu",) or ("--pgo/--no-pgo",)
    names: tuple[str, ...]  # ("--target-cpu",) or ("--pgo", "--no-pgo")
    kind: Kind
    choices: tuple[str, ...]
    help: str  # "... (default x86-64-v2; env ORCHESTRATOR_BUILD_TARGET_CPU)."
    origin: str  # the help's tail alone: "(default x86-64-v2; env ...)."
    metavar: str | None  # what the value is called in --help: "CPU", "DIR"; None for flags

    def help_for(self, purpose: str) -> str:
        """The help of a command that uses the setting for `purpose`, not as declared."""
        return f"{purpose} {self.origin}"


def flag_origin(spec: Setting) -> str:
    """The help's tail, the same for every command: the default and every variable read
    (the canonical one first, then the older names still accepted)."""
    return f"(default {default_text(spec, for_flag=True)}; env {' or '.join(spec.env_names)})."


def flag_help(spec: Setting) -> str:
    """`spec.help` with the default and the environment variable appended."""
    return f"{spec.help} {flag_origin(spec)}"


# The value's name in --help by kind, as cargo writes them (`--jobs N`, `--target-dir DIR`).
_KIND_METAVAR: dict[Kind, str] = {
    "int": "N",
    "int or auto": "N|auto",
    "float": "NUMBER",
    "list[str]": "LIST",
    "list[path]": "PATHS",
    "list[run]": "JSON",
    "list[generate]": "JSON",
}


def flag_metavar(spec: Setting) -> str | None:
    """The value's name in --help: None for an on/off flag; paths are a DIR when the key
    says so (artifacts_dir), else a FILE; a string is named by its key's last word (the
    CPU of target_cpu, the MODE of bolt.mode)."""
    if spec.kind == "bool":
        return None
    if spec.kind == "path":
        return "DIR" if spec.name.endswith("_dir") else "FILE"
    if spec.kind == "str":
        return spec.name.rsplit("_", 1)[-1].upper()
    return _KIND_METAVAR[spec.kind]


def flag_specs() -> dict[str, FlagSpec]:
    """Per dotted key of each setting that has a CLI flag, in declaration order."""
    return {
        s.key: FlagSpec(
            s.key,
            (s.flag,),
            s.flag_names,
            s.kind,
            s.choices,
            flag_help(s),
            flag_origin(s),
            flag_metavar(s),
        )
        for s in SETTINGS
        if s.flag is not None
    }


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _default_cell(spec: Setting | FlavorKey) -> str:
    """A literal default in backticks; "none" and computed defaults as plain words."""
    text = _cell(default_text(spec))
    return text if spec.default in (None, ()) else f"`{text}`"


def settings_table_markdown() -> str:
    """docs/configuration.md's settings table: key | type | default | env var | flag | meaning."""
    rows = [
        "| key | type | default | env var | flag | meaning |",
        "|---|---|---|---|---|---|",
    ]
    for spec in SETTINGS:
        env = " or ".join(f"`{name}`" for name in spec.env_names)
        flag = f"`{spec.flag}`" if spec.flag else ""
        listed = all(choice in spec.help for choice in spec.choices)
        meaning = spec.help + ("" if listed else f"; one of: {', '.join(spec.choices)}")
        rows.append(
            f"| `{spec.key}` | {spec.kind} | {_default_cell(spec)} | {env} | {flag} "
            f"| {_cell(meaning)} |"
        )
    for key in FLAVOR_SETTINGS:
        rows.append(
            f"| `flavors.<name>.{key.name}` | {key.kind} | {_default_cell(key)} | "
            f"| | {_cell(key.help)} |"
        )
    return "\n".join(rows) + "\n"

"""The layers of `resolve`: built-in default < config file < environment < CLI flag.

Finds and reads orchestrator.toml, checks every key of it against the declarations in
`orchestrator.config.declarations.settings` (an unknown one is an error that suggests the
closest), and stacks the four layers into one value per setting with where it came from.
What the values become in `Options` is config/resolve/options.py's.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from orchestrator.config.declarations.kinds import check_kind, toml_shape
from orchestrator.config.declarations.settings import (
    FLAVOR_KEYS,
    SECTIONS,
    SETTINGS,
    SETTINGS_BY_KEY,
    Setting,
    check_choice,
    parse_setting_text,
)
from orchestrator.config.resolve.crate_files import read_toml
from orchestrator.config.resolve.flavor_overrides import (
    OVERRIDE_SECTIONS,
    flatten_override,
    table_of,
)
from orchestrator.config.resolve.typos import (
    check_environment,
    check_flag_conflicts,
    check_flag_not_empty,
)
from orchestrator.config.suggest import did_you_mean, suggest
from orchestrator.errors import ConfigError

CONFIG_FILENAME = "orchestrator.toml"
# The flavor registry (orchestrator.flavors) imports config, so the names live here; a
# unit test keeps the two in step.
KNOWN_FLAVORS = ("cpu", "cuda", "rocm", "aarch64")


def find_config(start: Path) -> Path:
    for directory in (start, *start.parents):
        candidate = directory / CONFIG_FILENAME
        if candidate.is_file():
            return candidate
    raise ConfigError(
        f"no {CONFIG_FILENAME} in {start} or any parent folder",
        hint="Run from a project with orchestrator.toml, or pass --config PATH.",
    )


def load_config(
    config_path: Path | None, env: Mapping[str, str], cwd: Path
) -> tuple[Path, dict[str, object]]:
    """The config file's resolved path and its parsed TOML: --config, else
    ORCHESTRATOR_CONFIG, else the nearest orchestrator.toml from `cwd` upwards."""
    if config_path is None and env.get("ORCHESTRATOR_CONFIG"):
        config_path = Path(env["ORCHESTRATOR_CONFIG"])
    path = (config_path if config_path is not None else find_config(cwd)).resolve()
    if not path.is_file():
        what = "is a folder, not a file" if path.is_dir() else "does not exist"
        raise ConfigError(
            f"config file {path} {what}",
            hint="Pass --config PATH to an existing orchestrator.toml.",
        )
    return path, read_toml(path)


def _unknown_key_hint(section: str, key: str) -> str:
    """The closest key of `section`, else the closest same-named key of another section."""
    match = suggest(key, [s.name for s in SETTINGS if s.section == section])
    if match:
        return f"did you mean '{section}.{match}'? "
    match = suggest(key, sorted({s.name for s in SETTINGS}))
    others = [f"'{s.key}'" for s in SETTINGS if s.name == match]
    return f"did you mean {' or '.join(others)}? " if others else ""


def _flatten_file(data: Mapping[str, object], path: Path) -> dict[str, object]:
    """Validate the parsed TOML against the schema and flatten it to dotted keys."""
    flat: dict[str, object] = {}
    sections = (*SECTIONS, "flavors")
    for section, body in data.items():
        if section not in sections:
            raise ConfigError(
                f"{path}: unknown section [{section}]; "
                + did_you_mean(section, sections, "[{}]")
                + "expected one of: "
                + ", ".join(sorted(sections))
            )
        if not isinstance(body, dict):
            raise ConfigError(f"{path}: [{section}] must be a table")
        if section == "flavors":
            flat.update(_flatten_flavors(body, path))
            continue
        for key, value in body.items():
            dotted = f"{section}.{key}"
            spec = SETTINGS_BY_KEY.get(dotted)
            if spec is None:
                allowed = sorted(s.name for s in SETTINGS if s.section == section)
                raise ConfigError(
                    f"{path}: unknown key '{dotted}'; "
                    + _unknown_key_hint(section, key)
                    + f"[{section}] takes: "
                    + ", ".join(allowed)
                )
            where = f"{path}: {dotted}"
            flat[dotted] = check_choice(check_kind(value, spec.kind, where), spec, where)
    return flat


def _flatten_flavors(body: Mapping[str, object], path: Path) -> dict[str, object]:
    flat: dict[str, object] = {}
    for name, table in body.items():
        if name not in KNOWN_FLAVORS:
            raise ConfigError(
                f"{path}: unknown flavor [flavors.{name}]; "
                + did_you_mean(name, KNOWN_FLAVORS, "[flavors.{}]")
                + "known flavors: "
                + ", ".join(KNOWN_FLAVORS)
            )
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: [flavors.{name}] must be a table")
        for key, value in table.items():
            if key in OVERRIDE_SECTIONS:  # [flavors.<name>.train] and its like
                flat.update(flatten_override(name, key, value, path))
                continue
            kind = FLAVOR_KEYS.get(key)
            dotted = f"flavors.{name}.{key}"
            if kind is None:
                raise ConfigError(
                    f"{path}: unknown key '{dotted}'; "
                    + did_you_mean(
                        key, [*FLAVOR_KEYS, *OVERRIDE_SECTIONS], f"'flavors.{name}.{{}}'"
                    )
                    + "a flavor takes: "
                    + ", ".join(sorted(FLAVOR_KEYS))
                    + f"; and the tables [flavors.{name}.<section>] for "
                    + ", ".join(OVERRIDE_SECTIONS)
                )
            flat[dotted] = check_kind(value, kind, f"{path}: {dotted}")
    return flat


def default_cache_dir(env: Mapping[str, str]) -> Path:
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "orchestrator"


def _env_value(spec: Setting, env: Mapping[str, str]) -> tuple[object, str] | None:
    """The setting's value from the environment and its source, None when unset. The
    canonical ORCHESTRATOR_<SECTION>_<KEY> first: it wins over older aliases."""
    name = next((n for n in spec.env_names if env.get(n)), None)
    if name is None:
        return None
    return parse_setting_text(spec, env[name], f"environment variable {name}"), f"env {name}"


def resolve_cache_dir(env: Mapping[str, str], flag: Path | None = None) -> Path:
    """build.cache_dir for a command that reads no orchestrator.toml (`reproduce`, `vault`,
    `doctor` outside a project): the flag, else the declared environment variables, else
    the computed default; the same declaration `resolve` layers."""
    check_environment(env)
    value: object = flag
    if value is None:
        found = _env_value(SETTINGS_BY_KEY["build.cache_dir"], env)
        value = found[0] if found is not None else default_cache_dir(env)
    return Path(str(value)).expanduser().resolve()


class Layers:
    """Values (TOML shape) layered default < file < env < flag, with their sources."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.values: dict[str, object] = {}
        self.sources: dict[str, str] = {}

    def set(self, key: str, value: object, source: str) -> None:
        self.values[key] = value
        self.sources[key] = source

    def text(self, key: str) -> str | None:
        value = self.values.get(key)
        return value if isinstance(value, str) else None


def _flag_value(key: str, value: object) -> object:
    """A CLI value, checked like a file's; text for a non-text kind is parsed like env."""
    spec = SETTINGS_BY_KEY.get(key)
    if spec is None:
        raise ConfigError(f"internal: unknown CLI key {key}. " + did_you_mean(key, SETTINGS_BY_KEY))
    where = f"flag for {key}"
    check_flag_not_empty(key, value)
    if isinstance(value, str) and spec.kind not in ("str", "path"):
        return parse_setting_text(spec, value, where)
    return check_choice(check_kind(toml_shape(value), spec.kind, where), spec, where)


def layer_values(
    path: Path, data: Mapping[str, object], env: Mapping[str, str], cli: Mapping[str, object]
) -> Layers:
    layers = Layers(path)
    for spec in SETTINGS:
        if spec.default is not None:
            layers.set(spec.key, toml_shape(spec.default), "default")
    layers.set("build.cache_dir", str(default_cache_dir(env)), "default")  # computed default
    for key, value in _flatten_file(data, path).items():
        table = table_of(key)  # a flavor's override names its table
        layers.set(key, value, f"file {path.name}" + (f" {table}" if table else ""))
    for spec in SETTINGS:
        found = _env_value(spec, env)
        if found is not None:
            layers.set(spec.key, *found)
    for key, value in cli.items():
        if value is not None:  # None: flag not given
            layers.set(key, _flag_value(key, value), "flag")
    check_flag_conflicts(
        {k: layers.values[k] for k, src in layers.sources.items() if src == "flag"}
    )
    return layers

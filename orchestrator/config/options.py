"""Resolve orchestrator.toml, the environment and CLI flags into one frozen `Options`.

Precedence, lowest first: built-in defaults < config file < environment < CLI flags.
Every resolved value remembers where it came from (`Options.sources`), so
`orchestrator config` can explain any setting. What the settings are (kinds, defaults,
environment variables, flags) is declared once, in `orchestrator.config.settings`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from orchestrator.config.checks import check_ci_runners, check_run_settings, resolve_binaries
from orchestrator.config.ci_install import PYPI, install_requirement
from orchestrator.config.crate_files import (
    CrateCargoConfig,
    read_cargo_package,
    read_crate_cargo_config,
    read_toml,
)
from orchestrator.config.flavor_overrides import (
    OVERRIDE_SECTIONS,
    Appends,
    Overrides,
    check_flavor_values,
    effective_values,
    flatten_override,
    flavor_tables,
    override_rows,
    table_of,
)
from orchestrator.config.kinds import Kind, Run, check_kind, to_run, toml_shape
from orchestrator.config.settings import (
    DEFAULT_BOLT_FLAGS,
    FLAVOR_KEYS,
    FLAVOR_SETTINGS,
    SECTIONS,
    SETTINGS,
    SETTINGS_BY_KEY,
    Setting,
    check_choice,
    default_of,
    flavor_default_of,
    parse_setting_text,
)
from orchestrator.config.suggest import did_you_mean, suggest
from orchestrator.config.toolchains import check_toolchain_name
from orchestrator.config.typos import check_environment, check_flag_conflicts, check_flag_not_empty
from orchestrator.errors import ConfigError

__all__ = [
    "CONFIG_FILENAME",
    "DEFAULT_BOLT_FLAGS",
    "FALLBACK_SOURCE_DATE_EPOCH",
    "KNOWN_FLAVORS",
    "CommitTime",
    "FlavorSettings",
    "Options",
    "default_cache_dir",
    "find_config",
    "read_toml",
    "resolve",
    "resolve_cache_dir",
]

CONFIG_FILENAME = "orchestrator.toml"
# How the caller learns a folder's last commit time (config stays pure: it runs no git).
CommitTime = Callable[[Path], int | None]
# 1980-01-01: the earliest time zip and many archive formats can store.
FALLBACK_SOURCE_DATE_EPOCH = 315532800
# The flavor registry (orchestrator.flavors) imports this module, so the names live here;
# a unit test keeps the two in step.
KNOWN_FLAVORS = ("cpu", "cuda", "rocm", "aarch64")


@dataclass(frozen=True)
class FlavorSettings:
    features: tuple[str, ...] = flavor_default_of("features")
    default_features: bool = flavor_default_of("default_features")
    levels: tuple[str, ...] = flavor_default_of("levels")  # empty: just build.target_cpu
    gpu_targets: tuple[str, ...] = flavor_default_of("gpu_targets")  # empty: flavor's list
    kernels: str = flavor_default_of("kernels")  # embedded | runtime
    test_every_level: bool = flavor_default_of("test_every_level")  # off: first level's flags
    dispatch: bool = flavor_default_of("dispatch")  # on: compose <artifact>-auto from levels
    # Its [flavors.<name>.<section>] tables, applied by `Options.for_flavor`.
    overrides: Overrides = ()  # (top-level key, value)
    args_append: Appends = ()  # (section, arguments)


@dataclass(frozen=True)
class Options:
    config_path: Path
    project_dir: Path
    crate_dir: Path
    package_name: str
    binary: str  # the main binary: it names the artifact; bench runs it
    binaries: tuple[str, ...]  # every binary shipped, `binary` first
    version: str
    toolchain: str
    target_cpu: str
    flavors: tuple[str, ...]
    flavor_settings: Mapping[str, FlavorSettings]
    source_date_epoch: int
    artifacts_dir: Path
    cache_dir: Path
    workloads: tuple[Run, ...]
    validate_command: tuple[str, ...]
    bench_command: tuple[str, ...]
    # Defaults below come from the declarations in settings.py.
    pgo: bool = default_of("pgo.enabled")
    pgo_max_missing_ratio: float = default_of("pgo.max_missing_ratio")
    bolt: bool = default_of("bolt.enabled")
    bolt_mode: str = default_of("bolt.mode")
    bolt_policy: str = default_of("bolt.policy")
    bolt_flags: tuple[str, ...] = default_of("bolt.flags")
    bolt_max_growth: float = default_of("bolt.max_growth")
    bolt_min_samples: int = default_of("bolt.min_samples")
    bolt_sample_repeat: int = default_of("bolt.sample_repeat")
    c_code: str = default_of("c_code.mode")
    gate_policy: str = default_of("gate.policy")
    gate_min_gain: float = default_of("gate.min_gain")
    gate_workloads: tuple[Run, ...] = default_of("gate.workloads")
    engine_contexts: tuple[str, ...] = default_of("engines.contexts")
    engine_jobs: int | str = default_of("engines.jobs")  # a count, or "auto"
    engine_prefetch: bool = default_of("engines.prefetch")
    engine_require: tuple[str, ...] = default_of("engines.require")
    ci_runners: tuple[str, ...] = default_of("ci.runners")
    ci_install: str = default_of("ci.install")
    ci_verify: str = default_of("ci.verify")
    profiling_privileges: bool = default_of("profiling.privileges")
    profiling_allow_privileged: bool = default_of("profiling.allow_privileged")
    limit_pids: int = default_of("limits.pids")
    limit_memory: str = default_of("limits.memory")
    validate_runs: tuple[Run, ...] = default_of("validate.runs")
    validate_tolerance: float = default_of("validate.tolerance")
    bench_runs: int = default_of("bench.runs")
    bench_warmup: int = default_of("bench.warmup")
    signing_key: Path | None = default_of("signing.secret_key")  # noqa: RUF009 - None
    glibc_floor: str = default_of("release.glibc_floor")
    distro_check: str = default_of("release.distro_check")
    archive_formats: tuple[str, ...] = default_of("archive.formats")
    archive_include: tuple[str, ...] = default_of("archive.include")
    archive_generate: tuple[Run, ...] = default_of("archive.generate")
    member: str | None = default_of("package.package")
    source_exclude: tuple[str, ...] = default_of("package.exclude")
    run_env: tuple[str, ...] = default_of("train.env")
    run_stdin: str = default_of("train.stdin")
    train_inputs: tuple[Path, ...] = default_of("train.inputs")
    test_enabled: bool = default_of("test.enabled")
    test_reason: str = default_of("test.reason")
    test_args: tuple[str, ...] = default_of("test.args")
    sources: Mapping[str, str] = field(default_factory=dict)
    crate_cargo: CrateCargoConfig = field(default_factory=CrateCargoConfig)
    # reproduce: every input must come from the cache/vault; nothing may be downloaded
    offline: bool = False
    # reproduce: the variant the release's speed gate shipped (its lock says); "" decides
    gate_pinned: str = ""
    # reproduce: the binaries the release's speed gate shipped unBOLTed in its BOLT variant
    gate_pinned_unbolted: tuple[str, ...] = ()

    # The flavor whose overrides `for_flavor` put in the fields above ("": none).
    applied_flavor: str = ""

    def settings_for(self, flavor: str) -> FlavorSettings:
        return self.flavor_settings.get(flavor, FlavorSettings())

    def for_flavor(self, flavor: str) -> Options:
        """The options `flavor` is built, trained, validated, gated and tested with: its
        [flavors.<name>.train|validate|bench|gate|test] tables applied. Idempotent; options
        made for one flavor are never used for another."""
        if self.applied_flavor == flavor:
            return self
        if self.applied_flavor:
            raise ValueError(f"internal: options of flavor {self.applied_flavor} used for {flavor}")
        settings = self.settings_for(flavor)
        current = {spec.attr: getattr(self, spec.attr) for spec in SETTINGS}
        changed = effective_values(current, self.sources, settings.overrides, settings.args_append)
        return replace(self, applied_flavor=flavor, **changed)

    def describe(self) -> list[tuple[str, str, str]]:
        """(key, value, source) rows for `orchestrator config`."""
        rows: list[tuple[str, str, str]] = []
        for spec in SETTINGS:
            value = getattr(self, spec.attr)
            text = f"({spec.computed})" if value is None else str(toml_shape(value))
            rows.append((spec.key, text, self.sources.get(spec.key, "default")))
        for name, settings in sorted(self.flavor_settings.items()):
            for key in FLAVOR_SETTINGS:
                dotted = f"flavors.{name}.{key.name}"
                text = str(toml_shape(getattr(settings, key.name)))
                rows.append((dotted, text, self.sources.get(dotted, "default")))
            for dotted, value, source in override_rows(
                name, settings.overrides, settings.args_append, self.sources
            ):
                rows.append((dotted, str(toml_shape(value)), source))
        return rows


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


def lock_blocker(options: Options) -> str:
    """Why a release of this setup could not be pinned in release.lock, or "" if it can.

    The lock records the crate by its path relative to the config's folder, and a rebuilder
    lays both out in one fresh folder: a crate outside that folder has no such path.
    """
    if not options.crate_dir.is_relative_to(options.project_dir):
        return (
            f"the crate {options.crate_dir} is not inside {options.project_dir}, the folder "
            f"of {options.config_path.name}: release.lock could not record where it is"
        )
    return ""


LOCK_BLOCKER_HINT = (
    "Put orchestrator.toml in the crate's folder or a folder above it "
    "(package.crate is relative to the file), e.g. next to the workspace's Cargo.toml."
)


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


def find_config(start: Path) -> Path:
    for directory in (start, *start.parents):
        candidate = directory / CONFIG_FILENAME
        if candidate.is_file():
            return candidate
    raise ConfigError(
        f"no {CONFIG_FILENAME} in {start} or any parent folder",
        hint="Run from a project with orchestrator.toml, or pass --config PATH.",
    )


class _Layers:
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


def _load(
    config_path: Path | None, env: Mapping[str, str], cwd: Path
) -> tuple[Path, dict[str, object]]:
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


def _layer(
    path: Path, data: Mapping[str, object], env: Mapping[str, str], cli: Mapping[str, object]
) -> _Layers:
    layers = _Layers(path)
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


def _convert(kind: Kind, value: object, base: Path) -> object:
    """A layered (TOML-shaped) value as `Options` holds it; paths relative to `base`."""
    if kind == "path":
        return (base / Path(str(value)).expanduser()).resolve()
    if kind in ("list[str]", "list[path]", "list[run]", "list[generate]"):
        items = value if isinstance(value, list | tuple) else []
        if kind == "list[str]":
            return tuple(str(v) for v in items)
        if kind == "list[path]":
            return tuple((base / Path(str(v)).expanduser()).resolve() for v in items)
        return tuple(to_run(item) for item in items)
    if kind == "float" and isinstance(value, int | float):
        return float(value)
    return value


def _crate(layers: _Layers) -> tuple[Path, str, str]:
    """The crate folder, its package name and the release version."""
    path = layers.path
    crate = layers.text("package.crate")
    if crate is None:
        raise ConfigError(f"{path}: missing required key 'package.crate' (the crate's folder)")
    crate_dir = (path.parent / crate).resolve()
    if not (crate_dir / "Cargo.toml").is_file():
        raise ConfigError(f"{path}: package.crate = {crate!r}: {crate_dir} has no Cargo.toml")
    package_name, cargo_version = read_cargo_package(crate_dir, layers.text("package.package"))
    version = layers.text("package.version")
    if version is None:
        if cargo_version is None:
            raise ConfigError(
                f"{crate_dir / 'Cargo.toml'} has no literal version; "
                f"set package.version in {path.name}"
            )
        layers.set("package.version", cargo_version, "Cargo.toml")
        version = cargo_version
    return crate_dir, package_name, version


def _source_date_epoch(layers: _Layers, crate_dir: Path, commit_time_of: CommitTime | None) -> int:
    value = layers.values.get("build.source_date_epoch")
    if isinstance(value, int):
        return value
    # The crate's own repository: the config may live elsewhere (another repository, none).
    commit_time = commit_time_of(crate_dir) if commit_time_of else None
    if commit_time is not None:
        layers.set("build.source_date_epoch", commit_time, "the crate's git HEAD commit time")
        return commit_time
    layers.set("build.source_date_epoch", FALLBACK_SOURCE_DATE_EPOCH, "default (no git commit)")
    return FALLBACK_SOURCE_DATE_EPOCH


def resolve(
    config_path: Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    cli: Mapping[str, object] | None = None,
    cwd: Path | None = None,
    commit_time: CommitTime | None = None,
) -> Options:
    """Resolve every setting once. `cli` maps dotted keys to flag values (None = unset);
    `commit_time` gives the default SOURCE_DATE_EPOCH (none: the 1980 fallback)."""
    env = dict(os.environ) if env is None else dict(env)
    check_environment(env)  # a misspelt ORCHESTRATOR_* variable is an error, not ignored
    path, data = _load(config_path, env, cwd or Path.cwd())
    layers = _layer(path, data, env, cli or {})
    crate_dir, package_name, _version = _crate(layers)
    _source_date_epoch(layers, crate_dir, commit_time)

    values: dict[str, Any] = {
        spec.attr: _convert(spec.kind, layers.values[spec.key], path.parent)
        for spec in SETTINGS
        if spec.key in layers.values
    }
    values["crate_dir"] = crate_dir  # relative to the config file, never ~-expanded
    # Checked here, whatever set it (file, environment, flag, a lock's config text): the
    # name becomes a file path and an image tag.
    source = layers.sources.get("build.toolchain", "default").replace("flag", "flag --toolchain")
    check_toolchain_name(values["toolchain"], f"{path}: build.toolchain ({source})")
    resolve_binaries(path, values, package_name)
    check_run_settings(path, values, crate_dir)
    for flavor in values["flavors"]:
        if flavor not in KNOWN_FLAVORS:
            raise ConfigError(
                f"build.flavors: unknown flavor {flavor!r}; "
                + did_you_mean(flavor, KNOWN_FLAVORS)
                + "known: "
                + ", ".join(KNOWN_FLAVORS)
            )
    check_ci_runners(values.get("ci_runners", ()), KNOWN_FLAVORS, f"{path}: ")
    install_requirement(values.get("ci_install", PYPI), f"{path}: ci.install")
    flavor_settings: dict[str, FlavorSettings] = {}
    for name in KNOWN_FLAVORS:
        table: dict[str, Any] = {
            key.name: _convert(
                key.kind, layers.values.get(f"flavors.{name}.{key.name}", key.default), path.parent
            )
            for key in FLAVOR_SETTINGS
        }
        tables = flavor_tables(layers.values, name)  # its [flavors.<name>.train] and like
        check_flavor_values(
            path, name, tables, values, layers.sources, where=(package_name, crate_dir)
        )
        flavor_settings[name] = FlavorSettings(**table, overrides=tables[0], args_append=tables[1])
    return Options(
        config_path=path,
        project_dir=path.parent,
        crate_cargo=read_crate_cargo_config(crate_dir),
        package_name=package_name,
        flavor_settings=flavor_settings,
        sources=layers.sources,
        **values,
    )

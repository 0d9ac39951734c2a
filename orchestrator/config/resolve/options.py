"""Resolve orchestrator.toml, the environment and CLI flags into one frozen `Options`.

Precedence, lowest first: built-in defaults < config file < environment < CLI flags
(stacked by config/resolve/layering.py). Every resolved value remembers where it came from
(`Options.sources`), so `orchestrator config` can explain any setting. What the settings
are (kinds, defaults, environment variables, flags) is declared once, in
`orchestrator.config.declarations.settings`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from orchestrator.config.declarations.kinds import Kind, Run, to_run, toml_shape
from orchestrator.config.declarations.settings import (
    DEFAULT_BOLT_FLAGS,
    FLAVOR_SETTINGS,
    SETTINGS,
    default_of,
    flavor_default_of,
)
from orchestrator.config.resolve.cargo_profiles import check_profile
from orchestrator.config.resolve.checks import (
    check_ci_runners,
    check_run_settings,
    resolve_binaries,
)
from orchestrator.config.resolve.ci_install import PYPI, install_requirement
from orchestrator.config.resolve.crate_files import (
    CrateCargoConfig,
    read_cargo_package,
    read_crate_cargo_config,
    read_toml,
)
from orchestrator.config.resolve.flavor_overrides import (
    Appends,
    Overrides,
    check_flavor_values,
    effective_values,
    flavor_tables,
    override_rows,
)
from orchestrator.config.resolve.layering import (
    CONFIG_FILENAME,
    KNOWN_FLAVORS,
    Layers,
    default_cache_dir,
    find_config,
    layer_values,
    load_config,
    resolve_cache_dir,
)
from orchestrator.config.resolve.toolchains import check_toolchain_name
from orchestrator.config.resolve.typos import check_environment
from orchestrator.config.suggest import did_you_mean
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

# How the caller learns a folder's last commit time (config stays pure: it runs no git).
CommitTime = Callable[[Path], int | None]
# 1980-01-01: the earliest time zip and many archive formats can store.
FALLBACK_SOURCE_DATE_EPOCH = 315532800


@dataclass(frozen=True)
class FlavorSettings:
    features: tuple[str, ...] = flavor_default_of("features")
    default_features: bool = flavor_default_of("default_features")
    levels: tuple[str, ...] = flavor_default_of("levels")  # empty: just build.target_cpu
    gpu_targets: tuple[str, ...] = flavor_default_of("gpu_targets")  # empty: flavor's list
    kernels: str = flavor_default_of("kernels")  # embedded | runtime
    test_every_level: bool = flavor_default_of("test_every_level")  # off: first level's flags
    dispatch: bool = flavor_default_of("dispatch")  # on: compose <artifact>-auto from levels
    gpu: str = flavor_default_of("gpu")  # auto | require | off (cuda, rocm)
    gpu_args: tuple[str, ...] = flavor_default_of("gpu_args")  # the GPU run's extra arguments
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
    profile: str  # the Cargo profile of the shipped variants (config/resolve/cargo_profiles.py)
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
    validate_select: str = default_of("validate.select")
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


def lock_blocker(crate_dir: Path, project_dir: Path, config_name: str) -> str:
    """Why a release of this setup could not be pinned in release.lock, or "" if it can:
    the crate's folder, and the folder of the config file named `config_name`.

    The lock records the crate by its path relative to the config's folder, and a rebuilder
    lays both out in one fresh folder: a crate outside that folder has no such path.
    """
    if not crate_dir.is_relative_to(project_dir):
        return (
            f"the crate {crate_dir} is not inside {project_dir}, the folder "
            f"of {config_name}: release.lock could not record where it is"
        )
    return ""


LOCK_BLOCKER_HINT = (
    "Put orchestrator.toml in the crate's folder or a folder above it "
    "(package.crate is relative to the file), e.g. next to the workspace's Cargo.toml."
)


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


def _crate(layers: Layers) -> tuple[Path, str, str]:
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


def _source_date_epoch(layers: Layers, crate_dir: Path, commit_time_of: CommitTime | None) -> int:
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
    path, data = load_config(config_path, env, cwd or Path.cwd())
    layers = layer_values(path, data, env, cli or {})
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
    source = layers.sources.get("build.profile", "default")
    check_profile(values["profile"], crate_dir, f"{path}: build.profile ({source})")
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

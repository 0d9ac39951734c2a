"""Resolve orchestrator.toml, the environment and CLI flags into one frozen `Options`.

Precedence, lowest first: built-in defaults < config file < environment < CLI flags.
Every resolved value remembers where it came from (`Options.sources`), so
`orchestrator config` can explain any setting.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from orchestrator.errors import ConfigError

CONFIG_FILENAME = "orchestrator.toml"
# How the caller learns a folder's last commit time (config stays pure: it runs no git).
CommitTime = Callable[[Path], int | None]
# 1980-01-01: the earliest time zip and many archive formats can store.
FALLBACK_SOURCE_DATE_EPOCH = 315532800

Kind = Literal["str", "int", "float", "bool", "path", "list[str]", "list[argv]"]

_KIND_TEXT: dict[Kind, str] = {
    "str": "a string",
    "int": "a non-negative integer",
    "float": "a non-negative number",
    "bool": "true or false",
    "path": "a path (string)",
    "list[str]": "a list of strings",
    "list[argv]": 'a list of argument lists, e.g. [["generate", "--seed", "1"]]',
}


@dataclass(frozen=True)
class Field:
    key: str  # dotted: "build.target_cpu"
    kind: Kind
    help: str
    env: str | None = None
    choices: tuple[str, ...] = ()


# The fixed part of the schema. `flavors.<name>` tables are checked separately.
FIELDS: tuple[Field, ...] = (
    Field("package.crate", "path", "folder of the crate to release (has Cargo.toml)"),
    Field("package.binary", "str", "binary target to ship (default: the package name)"),
    Field("package.version", "str", "release version (default: from Cargo.toml)"),
    Field(
        "build.toolchain",
        "str",
        "pinned toolchain, a file in toolchains/",
        env="ORCHESTRATOR_TOOLCHAIN",
    ),
    Field(
        "build.target_cpu",
        "str",
        "rustc -Ctarget-cpu for x86_64 builds",
        env="ORCHESTRATOR_TARGET_CPU",
    ),
    Field("build.flavors", "list[str]", "flavors that `release` builds"),
    Field(
        "build.source_date_epoch",
        "int",
        "SOURCE_DATE_EPOCH (default: HEAD's commit time)",
        env="SOURCE_DATE_EPOCH",
    ),
    Field(
        "build.artifacts_dir",
        "path",
        "where releases are published",
        env="ORCHESTRATOR_ARTIFACTS_DIR",
    ),
    Field(
        "build.cache_dir",
        "path",
        "host cache: rootfs tarballs, .debs, vendored crates",
        env="ORCHESTRATOR_CACHE_DIR",
    ),
    Field("train.workloads", "list[argv]", "argument lists run to train PGO/BOLT profiles"),
    Field("pgo.enabled", "bool", "profile-guided optimization"),
    Field(
        "pgo.max_missing_ratio",
        "float",
        "fail when rustc's missing-profile warnings exceed this share of profiled functions",
    ),
    Field("bolt.enabled", "bool", "BOLT post-link optimization"),
    Field(
        "bolt.mode",
        "str",
        "profile mode: auto (best available), lbr, sample, instrument",
        env="ORCHESTRATOR_BOLT_MODE",
        choices=("auto", "lbr", "sample", "instrument"),
    ),
    Field(
        "bolt.policy",
        "str",
        "when BOLT fails: fallback (ship the PGO binary) or require",
        choices=("fallback", "require"),
    ),
    Field("bolt.flags", "list[str]", "llvm-bolt optimization flags"),
    Field(
        "profiling.privileges",
        "bool",
        "let the profiling container ask for perf access (false: BOLT instrumentation only)",
    ),
    Field("validate.command", "list[str]", "arguments whose output must not change"),
    Field("validate.tolerance", "float", "relative tolerance for numbers in that output"),
    Field("bench.command", "list[str]", "arguments that benchmark the binary"),
    Field("bench.runs", "int", "timed runs per variant"),
    Field("bench.warmup", "int", "untimed runs per variant first"),
    Field(
        "release.glibc_floor",
        "str",
        "warn when a release artifact needs a newer glibc than this (e.g. 2.34)",
    ),
    Field(
        "signing.secret_key",
        "path",
        "minisign secret key, outside any repository (default: a throwaway key)",
        env="ORCHESTRATOR_SIGNING_KEY",
    ),
)
# The seeds' BOLT recipe, spelled for LLVM 19-22.
DEFAULT_BOLT_FLAGS = (
    "-reorder-blocks=ext-tsp",
    "-reorder-functions=cdsort",
    "-split-functions",
    "-split-all-cold",
    "-icf=1",
    "-dyno-stats",
)
FIELDS_BY_KEY = {f.key: f for f in FIELDS}
FLAVOR_KEYS: dict[str, Kind] = {
    "features": "list[str]",
    "default_features": "bool",
    "levels": "list[str]",  # CPU levels `release` builds, e.g. ["x86-64-v2", "x86-64-v3"]
    "gpu_targets": "list[str]",  # cuda: ["sm_80", "sm_90"]; rocm: ["gfx90a", "gfx1100"]
}
# The flavor registry (orchestrator.flavors) imports this module, so the names live here;
# a unit test keeps the two in step.
KNOWN_FLAVORS = ("cpu", "cuda", "rocm", "aarch64")


@dataclass(frozen=True)
class FlavorSettings:
    features: tuple[str, ...] = ()
    default_features: bool = True
    levels: tuple[str, ...] = ()  # empty: just build.target_cpu
    gpu_targets: tuple[str, ...] = ()  # empty: the flavor's default list


@dataclass(frozen=True)
class Options:
    config_path: Path
    project_dir: Path
    crate_dir: Path
    package_name: str
    binary: str
    version: str
    toolchain: str
    target_cpu: str
    flavors: tuple[str, ...]
    flavor_settings: Mapping[str, FlavorSettings]
    source_date_epoch: int
    artifacts_dir: Path
    cache_dir: Path
    workloads: tuple[tuple[str, ...], ...]
    validate_command: tuple[str, ...]
    bench_command: tuple[str, ...]
    pgo: bool = True
    pgo_max_missing_ratio: float = 0.1
    bolt: bool = True
    bolt_mode: str = "auto"
    bolt_policy: str = "fallback"
    bolt_flags: tuple[str, ...] = DEFAULT_BOLT_FLAGS
    profiling_privileges: bool = True
    validate_tolerance: float = 0.0
    bench_runs: int = 10
    bench_warmup: int = 2
    signing_key: Path | None = None
    glibc_floor: str = "2.34"
    sources: Mapping[str, str] = field(default_factory=dict)
    # reproduce: every input must come from the cache/vault; nothing may be downloaded
    offline: bool = False

    def settings_for(self, flavor: str) -> FlavorSettings:
        return self.flavor_settings.get(flavor, FlavorSettings())

    def describe(self) -> list[tuple[str, str, str]]:
        """(key, value, source) rows for `orchestrator config`."""
        values: dict[str, object] = {
            "package.crate": self.crate_dir,
            "package.binary": self.binary,
            "package.version": self.version,
            "build.toolchain": self.toolchain,
            "build.target_cpu": self.target_cpu,
            "build.flavors": list(self.flavors),
            "build.source_date_epoch": self.source_date_epoch,
            "build.artifacts_dir": self.artifacts_dir,
            "build.cache_dir": self.cache_dir,
            "train.workloads": [list(w) for w in self.workloads],
            "pgo.enabled": self.pgo,
            "pgo.max_missing_ratio": self.pgo_max_missing_ratio,
            "bolt.enabled": self.bolt,
            "bolt.mode": self.bolt_mode,
            "bolt.policy": self.bolt_policy,
            "bolt.flags": list(self.bolt_flags),
            "profiling.privileges": self.profiling_privileges,
            "validate.command": list(self.validate_command),
            "validate.tolerance": self.validate_tolerance,
            "bench.command": list(self.bench_command),
            "bench.runs": self.bench_runs,
            "bench.warmup": self.bench_warmup,
            "release.glibc_floor": self.glibc_floor,
            "signing.secret_key": self.signing_key or "(throwaway key in the cache)",
        }
        for name, settings in sorted(self.flavor_settings.items()):
            values[f"flavors.{name}.features"] = list(settings.features)
            values[f"flavors.{name}.default_features"] = settings.default_features
            values[f"flavors.{name}.levels"] = list(settings.levels)
            values[f"flavors.{name}.gpu_targets"] = list(settings.gpu_targets)
        return [(k, str(v), self.sources.get(k, "default")) for k, v in values.items()]


def _check_kind(value: object, kind: Kind, where: str) -> object:
    """Return `value` if it has `kind`, else raise a ConfigError naming `where`."""
    ok: bool
    if kind in ("str", "path"):
        ok = isinstance(value, str) and value != ""
    elif kind == "int":
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    elif kind == "float":
        ok = isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
    elif kind == "bool":
        ok = isinstance(value, bool)
    elif kind == "list[str]":
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
    else:
        ok = isinstance(value, list) and all(
            isinstance(argv, list) and all(isinstance(a, str) for a in argv) for argv in value
        )
    if not ok:
        raise ConfigError(
            f"{where}: expected {_KIND_TEXT[kind]}, got {type(value).__name__} {value!r}"
        )
    return value


def _check_choice(value: object, spec: Field, where: str) -> object:
    if spec.choices and value not in spec.choices:
        raise ConfigError(f"{where}: expected one of {', '.join(spec.choices)}, got {value!r}")
    return value


def _parse_env(raw: str, kind: Kind, var: str) -> object:
    if kind == "int":
        try:
            return _check_kind(int(raw), kind, f"environment variable {var}")
        except ValueError:
            raise ConfigError(
                f"environment variable {var}: expected {_KIND_TEXT[kind]}, got {raw!r}"
            ) from None
    if kind == "list[str]":
        return [part for part in raw.split(",") if part]
    return _check_kind(raw, kind, f"environment variable {var}")


def _flatten_file(data: Mapping[str, object], path: Path) -> dict[str, object]:
    """Validate the parsed TOML against the schema and flatten it to dotted keys."""
    flat: dict[str, object] = {}
    sections = {key.split(".")[0] for key in FIELDS_BY_KEY} | {"flavors"}
    for section, body in data.items():
        if section not in sections:
            raise ConfigError(
                f"{path}: unknown section [{section}]; expected one of: "
                + ", ".join(sorted(sections))
            )
        if not isinstance(body, dict):
            raise ConfigError(f"{path}: [{section}] must be a table")
        if section == "flavors":
            flat.update(_flatten_flavors(body, path))
            continue
        for key, value in body.items():
            dotted = f"{section}.{key}"
            spec = FIELDS_BY_KEY.get(dotted)
            if spec is None:
                allowed = sorted(k.split(".", 1)[1] for k in FIELDS_BY_KEY if k.startswith(section))
                raise ConfigError(
                    f"{path}: unknown key '{dotted}'; [{section}] takes: " + ", ".join(allowed)
                )
            where = f"{path}: {dotted}"
            flat[dotted] = _check_choice(_check_kind(value, spec.kind, where), spec, where)
    return flat


def _flatten_flavors(body: Mapping[str, object], path: Path) -> dict[str, object]:
    flat: dict[str, object] = {}
    for name, table in body.items():
        if name not in KNOWN_FLAVORS:
            raise ConfigError(
                f"{path}: unknown flavor [flavors.{name}]; known flavors: "
                + ", ".join(KNOWN_FLAVORS)
            )
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: [flavors.{name}] must be a table")
        for key, value in table.items():
            kind = FLAVOR_KEYS.get(key)
            dotted = f"flavors.{name}.{key}"
            if kind is None:
                raise ConfigError(
                    f"{path}: unknown key '{dotted}'; a flavor takes: "
                    + ", ".join(sorted(FLAVOR_KEYS))
                )
            flat[dotted] = _check_kind(value, kind, f"{path}: {dotted}")
    return flat


def _read_cargo_package(crate_dir: Path) -> tuple[str, str | None]:
    manifest = crate_dir / "Cargo.toml"
    try:
        data = tomllib.loads(manifest.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{manifest}: cannot read: {exc}") from exc
    package = data.get("package")
    if not isinstance(package, dict) or not isinstance(package.get("name"), str):
        raise ConfigError(
            f"{manifest}: no [package] name; point package.crate at a crate, not a workspace root"
        )
    version = package.get("version")
    return package["name"], version if isinstance(version, str) else None


def default_cache_dir(env: Mapping[str, str]) -> Path:
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "orchestrator"


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
    """Values layered default < file < env < flag, with typed accessors."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.values: dict[str, object] = {}
        self.sources: dict[str, str] = {}

    def set(self, key: str, value: object, source: str) -> None:
        self.values[key] = value
        self.sources[key] = source

    def flag(self, key: str) -> bool:
        return self.values.get(key) is True

    def number(self, key: str) -> float:
        value = self.values.get(key, 0)
        return float(value) if isinstance(value, int | float) else 0.0

    def text(self, key: str) -> str | None:
        value = self.values.get(key)
        return value if isinstance(value, str) else None

    def strings(self, key: str) -> tuple[str, ...]:
        value = self.values.get(key, [])
        return tuple(str(v) for v in value) if isinstance(value, list) else ()

    def argvs(self, key: str) -> tuple[tuple[str, ...], ...]:
        value = self.values.get(key, [])
        if not isinstance(value, list):
            return ()
        return tuple(tuple(str(a) for a in argv) for argv in value if isinstance(argv, list))


def _load(
    config_path: Path | None, env: Mapping[str, str], cwd: Path
) -> tuple[Path, dict[str, object]]:
    if config_path is None and env.get("ORCHESTRATOR_CONFIG"):
        config_path = Path(env["ORCHESTRATOR_CONFIG"])
    path = (config_path if config_path is not None else find_config(cwd)).resolve()
    if not path.is_file():
        raise ConfigError(
            f"config file {path} does not exist",
            hint="Pass --config PATH to an existing orchestrator.toml.",
        )
    try:
        return path, tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc


def _layer(
    path: Path, data: Mapping[str, object], env: Mapping[str, str], cli: Mapping[str, object]
) -> _Layers:
    layers = _Layers(path)
    defaults: dict[str, object] = {
        "build.toolchain": "rustc-web-1.96",
        "build.target_cpu": "x86-64-v2",
        "build.flavors": ["cpu"],
        "build.artifacts_dir": "artifacts",
        "build.cache_dir": str(default_cache_dir(env)),
        "pgo.enabled": True,
        "pgo.max_missing_ratio": 0.1,
        "bolt.enabled": True,
        "bolt.mode": "auto",
        "bolt.policy": "fallback",
        "bolt.flags": list(DEFAULT_BOLT_FLAGS),
        "profiling.privileges": True,
        "validate.tolerance": 0.0,
        "bench.runs": 10,
        "bench.warmup": 2,
        "release.glibc_floor": "2.34",
    }
    for key, value in defaults.items():
        layers.set(key, value, "default")
    for key, value in _flatten_file(data, path).items():
        layers.set(key, value, f"file {path.name}")
    for spec in FIELDS:
        if spec.env and env.get(spec.env):
            value = _parse_env(env[spec.env], spec.kind, spec.env)
            _check_choice(value, spec, f"environment variable {spec.env}")
            layers.set(spec.key, value, f"env {spec.env}")
    for key, value in cli.items():
        if value is None:
            continue  # flag not given
        if key not in FIELDS_BY_KEY:
            raise ConfigError(f"internal: unknown CLI key {key}")
        spec = FIELDS_BY_KEY[key]
        checked = _check_choice(
            _check_kind(value, spec.kind, f"flag for {key}"), spec, f"flag for {key}"
        )
        layers.set(key, checked, "flag")
    return layers


def _crate(layers: _Layers) -> tuple[Path, str, str]:
    """The crate folder, its package name and the release version."""
    path = layers.path
    crate = layers.text("package.crate")
    if crate is None:
        raise ConfigError(f"{path}: missing required key 'package.crate' (the crate's folder)")
    crate_dir = (path.parent / crate).resolve()
    if not (crate_dir / "Cargo.toml").is_file():
        raise ConfigError(f"{path}: package.crate = {crate!r}: {crate_dir} has no Cargo.toml")
    package_name, cargo_version = _read_cargo_package(crate_dir)
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


def _source_date_epoch(layers: _Layers, commit_time_of: CommitTime | None) -> int:
    value = layers.values.get("build.source_date_epoch")
    if isinstance(value, int):
        return value
    commit_time = commit_time_of(layers.path.parent) if commit_time_of else None
    if commit_time is not None:
        layers.set("build.source_date_epoch", commit_time, "git HEAD commit time")
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
    path, data = _load(config_path, env, cwd or Path.cwd())
    layers = _layer(path, data, env, cli or {})
    crate_dir, package_name, version = _crate(layers)

    flavors = layers.strings("build.flavors")
    for flavor in flavors:
        if flavor not in KNOWN_FLAVORS:
            raise ConfigError(
                f"build.flavors: unknown flavor {flavor!r}; known: " + ", ".join(KNOWN_FLAVORS)
            )
    flavor_settings = {
        name: FlavorSettings(
            features=layers.strings(f"flavors.{name}.features"),
            default_features=layers.values.get(f"flavors.{name}.default_features", True) is True,
            levels=layers.strings(f"flavors.{name}.levels"),
            gpu_targets=layers.strings(f"flavors.{name}.gpu_targets"),
        )
        for name in KNOWN_FLAVORS
    }

    def as_path(key: str) -> Path:
        return (path.parent / Path(str(layers.values[key])).expanduser()).resolve()

    return Options(
        config_path=path,
        project_dir=path.parent,
        crate_dir=crate_dir,
        package_name=package_name,
        binary=layers.text("package.binary") or package_name,
        version=version,
        toolchain=str(layers.values["build.toolchain"]),
        target_cpu=str(layers.values["build.target_cpu"]),
        flavors=flavors,
        flavor_settings=flavor_settings,
        source_date_epoch=_source_date_epoch(layers, commit_time),
        artifacts_dir=as_path("build.artifacts_dir"),
        cache_dir=as_path("build.cache_dir"),
        workloads=layers.argvs("train.workloads"),
        validate_command=layers.strings("validate.command"),
        bench_command=layers.strings("bench.command"),
        pgo=layers.flag("pgo.enabled"),
        pgo_max_missing_ratio=layers.number("pgo.max_missing_ratio"),
        bolt=layers.flag("bolt.enabled"),
        bolt_mode=str(layers.values["bolt.mode"]),
        bolt_policy=str(layers.values["bolt.policy"]),
        bolt_flags=layers.strings("bolt.flags"),
        profiling_privileges=layers.flag("profiling.privileges"),
        validate_tolerance=layers.number("validate.tolerance"),
        bench_runs=int(layers.number("bench.runs")),
        bench_warmup=int(layers.number("bench.warmup")),
        glibc_floor=str(layers.values["release.glibc_floor"]),
        signing_key=as_path("signing.secret_key")
        if "signing.secret_key" in layers.values
        else None,
        sources=layers.sources,
    )

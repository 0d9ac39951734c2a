"""Every setting of orchestrator.toml, declared once: kind, default, help, choices,
environment variables, the `Options` attribute it fills and its CLI flag. options.py's
layers and `describe()`, the CLI's flags and the README's table all derive from `SETTINGS`.
"""

from __future__ import annotations

from typing import Any

from orchestrator.config.declarations.flavor_settings import FLAVOR_KEYS, FLAVOR_SETTINGS
from orchestrator.config.declarations.kinds import parse_text
from orchestrator.config.declarations.optimization_settings import (
    DEFAULT_BOLT_FLAGS,
    OPTIMIZATION_SETTINGS,
)
from orchestrator.config.declarations.setting import FlavorKey, Setting
from orchestrator.errors import ConfigError

# Declared in their own modules; taken from here by the rest of the code.
__all__ = [
    "DEFAULT_BOLT_FLAGS",
    "FLAVOR_KEYS",
    "FLAVOR_SETTINGS",
    "SECTIONS",
    "SETTINGS",
    "SETTINGS_BY_KEY",
    "FlavorKey",
    "Setting",
    "check_choice",
    "default_of",
    "flavor_default_of",
    "parse_setting_text",
]

SETTINGS: tuple[Setting, ...] = (
    Setting(
        "package.crate",
        "path",
        None,
        "folder of the crate to release (has Cargo.toml and Cargo.lock)",
        attr="crate_dir",
        computed="required",
    ),
    Setting(
        "package.package",
        "str",
        None,
        "the workspace member to release, when package.crate is a workspace root",
        attr="member",
        computed="the crate's own [package]",
    ),
    Setting(
        "package.binary",
        "str",
        None,
        "binary target to ship",
        attr="binary",
        computed="the package name",
    ),
    Setting(
        "package.binaries",
        "list[str]",
        None,
        "every binary the artifact ships, package.binary first (each built, validated, "
        "signed and in the SBOM); workloads and validate.runs name the others",
        attr="binaries",
        computed="[package.binary]",
    ),
    Setting(
        "package.version",
        "str",
        None,
        "release version",
        attr="version",
        computed="the version in the crate's Cargo.toml",
    ),
    Setting(
        "package.exclude",
        "list[str]",
        (),
        "paths left out of the source tarball: globs relative to the crate "
        '(a name without "/" matches at any depth), e.g. ["docs", "*.mp4"]',
        attr="source_exclude",
    ),
    Setting(
        "build.toolchain",
        "str",
        "rustc-web-1.96",
        "pinned toolchain: the name of a file in toolchains/ (lower-case letters, digits, "
        "'.' and '-'; never a path)",
        attr="toolchain",
        flag="--toolchain",
        aliases=("ORCHESTRATOR_TOOLCHAIN",),
    ),
    Setting(
        "build.target_cpu",
        "str",
        "x86-64-v2",
        "rustc -Ctarget-cpu for x86_64 builds",
        attr="target_cpu",
        flag="--target-cpu",
        aliases=("ORCHESTRATOR_TARGET_CPU",),
    ),
    Setting(
        "build.profile",
        "str",
        "release",
        "the Cargo profile every shipped variant builds with (`cargo build --profile`), "
        "e.g. the crate's own `dist`: its debug and strip settings hold, orchestrator's "
        "overrides (fat LTO, one codegen unit, ...) apply on top; it must be, or inherit "
        "from, release. The yardstick stays plain `cargo build --release`",
        attr="profile",
    ),
    Setting(
        "build.flavors",
        "list[str]",
        ("cpu",),
        "flavors that `release` builds",
        attr="flavors",
        flag="--flavors",
    ),
    Setting(
        "build.source_date_epoch",
        "int",
        None,
        "SOURCE_DATE_EPOCH of every build",
        attr="source_date_epoch",
        aliases=("SOURCE_DATE_EPOCH",),
        computed="HEAD's commit time (1980-01-01 outside git)",
    ),
    Setting(
        "build.artifacts_dir",
        "path",
        "artifacts",
        "where releases are published",
        attr="artifacts_dir",
        flag="--artifacts-dir",
        aliases=("ORCHESTRATOR_ARTIFACTS_DIR",),
    ),
    Setting(
        "build.cache_dir",
        "path",
        None,
        "host cache: rootfs tarballs, .debs, vendored crates",
        attr="cache_dir",
        flag="--cache-dir",
        aliases=("ORCHESTRATOR_CACHE_DIR",),
        computed="$XDG_CACHE_HOME/orchestrator, else ~/.cache/orchestrator",
    ),
    Setting(
        "train.workloads",
        "list[run]",
        (),
        "runs that train the PGO/BOLT profiles: argument lists for package.binary, or "
        '{binary = "name", args = [...]} for another of package.binaries',
        attr="workloads",
    ),
    Setting(
        "train.env",
        "list[str]",
        (),
        'KEY=VALUE pairs set for every workload, validation and bench run, e.g. ["MODE=fast"]',
        attr="run_env",
    ),
    Setting(
        "train.stdin",
        "str",
        "",
        "a file of the crate (relative to its root) fed to every workload on stdin",
        attr="run_stdin",
    ),
    Setting(
        "train.inputs",
        "list[path]",
        (),
        "files or folders outside the crate that workloads, validation and bench read, "
        "relative to this file; each is at /build/inputs/<its name>, read-only, and its "
        "digest is part of the PGO profile key and the lock",
        attr="train_inputs",
    ),
    Setting(
        "test.enabled",
        "bool",
        True,
        "run `cargo test` with the shipped flags before publishing",
        attr="test_enabled",
    ),
    Setting(
        "test.reason",
        "str",
        "",
        "why the tests are off (required with test.enabled = false; shown in build.json)",
        attr="test_reason",
    ),
    Setting(
        "test.args",
        "list[str]",
        (),
        'extra `cargo test` arguments, e.g. ["--workspace", "--", "--skip", "slow_case"]',
        attr="test_args",
    ),
    *OPTIMIZATION_SETTINGS,
    Setting(
        "engines.contexts",
        "list[str]",
        (),
        "Docker contexts whose Engines `release` spreads targets over (empty: the engine "
        "DOCKER_HOST or the current context names)",
        attr="engine_contexts",
        flag="--engines",
    ),
    Setting(
        "engines.jobs",
        "int or auto",
        "auto",
        "how many targets one engine builds at a time; auto: one per 4 cores and per 6 GiB "
        "of the engine's memory, at most the number of targets, at least 1",
        attr="engine_jobs",
    ),
    Setting(
        "engines.prefetch",
        "bool",
        True,
        "while one target compiles, make the next target's images ready, where an engine "
        "builds one target at a time, runs on this host and has room (2 cores, 8 GiB)",
        attr="engine_prefetch",
    ),
    Setting(
        "engines.require",
        "list[str]",
        (),
        "engine labels a flavor needs, as FLAVOR:KEY=VALUE (cuda:gpu=nvidia: only engines "
        "started with `dockerd --label gpu=nvidia` build cuda)",
        attr="engine_require",
    ),
    Setting(
        "ci.runners",
        "list[str]",
        (),
        "runner labels (GitHub) or tags (GitLab) of a flavor's build job in the file `orchestrator "
        'ci` writes, as FLAVOR=LABEL, one entry per label: ["cuda=self-hosted", "cuda=gpu"] '
        "(a flavor named nowhere: ubuntu-latest on GitHub, any runner on GitLab); "
        "FLAVOR@b=LABEL: where ci.verify's second builder runs instead",
        attr="ci_runners",
    ),
    Setting(
        "ci.install",
        "str",
        "pypi",
        "where the CI runners get orchestrator: pypi (this version), a wheel URL with its "
        'sha256 ("https://.../rust_release_orchestrator-0.1.0-py3-none-any.whl#sha256=HEX", '
        'file:// too) or a git URL at a commit ("git+https://.../orchestrator.git@SHA")',
        attr="ci_install",
    ),
    Setting(
        "ci.verify",
        "str",
        "off",
        "two builders before a signature: rebuild builds every target twice in CI (builders "
        "a and b, caches apart) and assemble signs only byte-identical pairs; rebuild-one "
        "builds one target twice, chosen from the tag's hash",
        attr="ci_verify",
        choices=("off", "rebuild", "rebuild-one"),
    ),
    Setting(
        "profiling.privileges",
        "bool",
        True,
        "let the profiling container ask for perf access (off: BOLT instrumentation only)",
        attr="profiling_privileges",
        flag="--privileged/--no-privileged",
    ),
    Setting(
        "profiling.allow_privileged",
        "bool",
        False,
        "let the perf probe try a --privileged container as its last resort (never by default)",
        attr="profiling_allow_privileged",
        flag="--allow-privileged/--no-allow-privileged",
    ),
    # Limits of the build and profiling containers, so that a fork bomb or a runaway build
    # script stops at its container. Fixed numbers, not shares of this host's memory: the
    # lock records them and a reproduction on another machine uses the same ones.
    Setting(
        "limits.pids",
        "int",
        4096,
        "processes and threads a build or profiling container may hold at once (0: no "
        "limit); cargo -jN with rustc's codegen threads needs about 20 per core",
        attr="limit_pids",
    ),
    Setting(
        "limits.memory",
        "str",
        "8GiB",
        "memory of a build or profiling container, swap included, e.g. 8GiB, 512MiB (0: no "
        "limit); a fat-LTO link of a big crate needs several GiB",
        attr="limit_memory",
    ),
    Setting(
        "validate.command",
        "list[str]",
        (),
        "arguments whose output must not change",
        attr="validate_command",
    ),
    Setting(
        "validate.runs",
        "list[run]",
        (),
        "more runs whose output must not change, e.g. for the other binaries: "
        '[{binary = "name", args = [...]}]',
        attr="validate_runs",
    ),
    Setting(
        "validate.tolerance",
        "float",
        0.0,
        "relative tolerance for numbers in that output (0: byte-identical)",
        attr="validate_tolerance",
    ),
    Setting(
        "validate.select",
        "str",
        "",
        "a regular expression: compare only the output lines it matches (per flavor in "
        "[flavors.<name>.validate], e.g. a GPU run's token lines); empty: every line",
        attr="validate_select",
    ),
    Setting(
        "bench.command",
        "list[str]",
        (),
        "arguments that benchmark the binary",
        attr="bench_command",
    ),
    Setting("bench.runs", "int", 10, "timed runs per variant", attr="bench_runs", flag="--runs"),
    Setting(
        "bench.warmup",
        "int",
        2,
        "untimed runs per variant first",
        attr="bench_warmup",
        flag="--warmup",
    ),
    Setting(
        "release.glibc_floor",
        "str",
        "2.28",
        "the oldest glibc the binaries must start on (2.28: RHEL 8, Debian 10, Ubuntu 20.04 "
        "and later); they link against it, and a binary needing a newer symbol version "
        "fails the build",
        attr="glibc_floor",
        flag="--glibc-floor",
    ),
    Setting(
        "release.distro_check",
        "str",
        "validate",
        "in bare Debian 11 and 13 containers: `validate` (load, then validate.command), `load` "
        "(the loader's check only, for a command needing what a bare system lacks), `off`",
        attr="distro_check",
        flag="--distro-check",
        choices=("validate", "load", "off"),
    ),
    Setting(
        "archive.formats",
        "list[str]",
        ("tar.xz",),
        'archive formats of each target: "tar.xz" (always; install.sh uses it) and "zip" '
        "(deterministic too: sorted, fixed times and modes, deflate at a fixed level)",
        attr="archive_formats",
    ),
    Setting(
        "archive.include",
        "list[str]",
        (),
        "more files of the crate for the archives, as globs relative to its root, e.g. "
        '["doc/tool.1", "completions/*.bash"]; each at the same path under the top folder; '
        "a pattern matching no file is an error",
        attr="archive_include",
    ),
    Setting(
        "archive.generate",
        "list[generate]",
        (),
        "more files for the archives, printed by a shipped binary after validation: "
        '[[archive.generate]] tables {path = "completions/tool.bash", args = ["completions", '
        '"bash"]} (binary = "name" for another of package.binaries); run twice, and output '
        "that differs is an error",
        attr="archive_generate",
    ),
    Setting(
        "signing.secret_key",
        "path",
        None,
        "minisign secret key, outside any repository",
        attr="signing_key",
        aliases=("ORCHESTRATOR_SIGNING_KEY",),
        computed="a throwaway key in the cache",
    ),
)
SETTINGS_BY_KEY: dict[str, Setting] = {s.key: s for s in SETTINGS}
SECTIONS: tuple[str, ...] = tuple(dict.fromkeys(s.section for s in SETTINGS))


def default_of(key: str) -> Any:  # noqa: ANN401 - typed by the dataclass field it fills
    """A setting's declared default, for dataclass field defaults."""
    return SETTINGS_BY_KEY[key].default


def flavor_default_of(name: str) -> Any:  # noqa: ANN401 - typed by the field it fills
    return next(f.default for f in FLAVOR_SETTINGS if f.name == name)


def check_choice(value: object, spec: Setting, where: str) -> object:
    if spec.choices and value not in spec.choices:
        raise ConfigError(f"{where}: expected one of {', '.join(spec.choices)}, got {value!r}")
    return value


def parse_setting_text(spec: Setting, raw: str, where: str) -> object:
    """A setting's value from text (an environment variable, a comma-separated flag)."""
    return check_choice(parse_text(spec.kind, raw, where), spec, where)

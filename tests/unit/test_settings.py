"""The declarations in orchestrator.config.declarations.settings and what is derived from them."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from orchestrator.config.declarations.flags import flag_specs, settings_table_markdown
from orchestrator.config.declarations.kinds import Run
from orchestrator.config.declarations.settings import (
    FLAVOR_SETTINGS,
    SETTINGS,
    SETTINGS_BY_KEY,
    Setting,
)
from orchestrator.config.resolve.options import Options, resolve
from orchestrator.errors import ConfigError
from tests.unit.conftest import write_config

# Options fields that are not settings of orchestrator.toml.
NOT_SETTINGS = {"config_path", "project_dir", "package_name", "flavor_settings", "sources"}
NOT_SETTINGS |= {"offline", "crate_cargo"}  # crate_cargo: read from the crate's .cargo/
NOT_SETTINGS |= {"gate_pinned", "gate_pinned_unbolted"}  # reproduce: the lock's gate picks
NOT_SETTINGS |= {"applied_flavor"}  # for_flavor: whose [flavors.<name>.*] tables apply


def _text_and_expected(spec: Setting, project: Path) -> tuple[str, object]:
    """A representative environment value for `spec` (never its default) and what it gives."""
    if spec.key == "package.crate":
        return "crate", (project / "crate").resolve()
    if spec.key == "build.flavors":
        return "cpu, cuda", ("cpu", "cuda")
    if spec.choices:
        return spec.choices[-1], spec.choices[-1]
    # Settings whose values are checked against the crate or each other.
    (project / "crate" / "input.txt").write_text("stdin\n")
    checked: dict[str, tuple[str, object]] = {
        "train.env": ("A=1, B=x y", ("A=1", "B=x y")),
        "train.stdin": ("input.txt", "input.txt"),
        "test.enabled": ("off", False),
        "package.package": ("demo", "demo"),  # the crate's own package, named
        "release.glibc_floor": ("2.31", "2.31"),
        "engines.require": ("cuda:gpu=nvidia, rocm:gpu=amd", ("cuda:gpu=nvidia", "rocm:gpu=amd")),
        "ci.runners": ("cuda=self-hosted, cuda=gpu", ("cuda=self-hosted", "cuda=gpu")),
        "ci.install": (
            f"git+https://example.com/o.git@{'a' * 40}",
            f"git+https://example.com/o.git@{'a' * 40}",
        ),
        "build.toolchain": ("rustc-1.85", "rustc-1.85"),  # a file in toolchains/
        "build.profile": ("bench", "bench"),  # a profile of the crate, from release
        "limits.pids": ("256", 256),
        "limits.memory": ("512MiB", "512MiB"),
    }
    if spec.key in checked:
        return checked[spec.key]
    by_kind: dict[str, tuple[str, object]] = {
        "str": ("9.9.9", "9.9.9"),
        "int": ("7", 7),
        "int or auto": ("7", 7),  # "auto" is the default, so a count shows the env var won
        "float": ("0.5", 0.5),
        "bool": ("off", False),
        "path": ("elsewhere/dir", (project / "elsewhere" / "dir").resolve()),
        "list[str]": ("a, b,,c", ("a", "b", "c")),
        "list[path]": (
            "data, ../corpus.txt",
            ((project / "data").resolve(), project.parent.resolve() / "corpus.txt"),
        ),
        "list[run]": (
            '[["--help"], {"binary": "demo", "args": ["x"]}]',
            (Run(("--help",)), Run(("x",))),  # naming the main binary: a plain run
        ),
        "list[generate]": (
            '[{"path": "completions/demo.bash", "args": ["completions", "bash"]}]',
            (Run(("completions", "bash"), path="completions/demo.bash"),),
        ),
    }
    if spec.kind == "bool" and spec.default is False:
        return "on", True
    return by_kind[spec.kind]


def test_every_setting_has_a_unique_canonical_env_var() -> None:
    seen: list[str] = []
    for spec in SETTINGS:
        section, name = spec.key.split(".")
        assert spec.env == f"ORCHESTRATOR_{section.upper()}_{name.upper()}"
        assert re.fullmatch(r"ORCHESTRATOR_[A-Z]+_[A-Z_]+", spec.env)
        assert spec.env_names[0] == spec.env  # the canonical one is read first
        seen.extend(spec.env_names)
    assert len(seen) == len(set(seen)), "an environment variable is read by two settings"


@pytest.mark.parametrize("spec", SETTINGS, ids=lambda s: s.key)
def test_every_setting_resolves_from_its_env_var(project: Path, spec: Setting) -> None:
    text, expected = _text_and_expected(spec, project)
    reason = {"ORCHESTRATOR_TEST_REASON": "needs a GPU"} if spec.key == "test.enabled" else {}
    options = resolve(project / "orchestrator.toml", env={spec.env: text, **reason})
    assert getattr(options, spec.attr) == expected
    assert getattr(options, spec.attr) != spec.default
    rows = {key: source for key, _value, source in options.describe()}
    assert rows[spec.key] == f"env {spec.env}"


@pytest.mark.parametrize("spec", [s for s in SETTINGS if s.aliases], ids=lambda s: s.key)
def test_legacy_env_alias_works_and_the_canonical_name_wins(project: Path, spec: Setting) -> None:
    text, expected = _text_and_expected(spec, project)
    config = project / "orchestrator.toml"
    for alias in spec.aliases:
        from_alias = resolve(config, env={alias: text})
        assert getattr(from_alias, spec.attr) == expected
        assert from_alias.sources[spec.key] == f"env {alias}"

    other = "1000" if spec.kind == "int" else "canonical-wins"
    if spec.key == "build.toolchain":
        other = "rustc-web-1.96"  # a name must be a file in toolchains/; text is another
    both = resolve(config, env={spec.aliases[0]: text, spec.env: other})
    assert both.sources[spec.key] == f"env {spec.env}"
    assert str(getattr(both, spec.attr)).endswith(other)


def test_legacy_names_users_already_use_are_still_read() -> None:
    aliases = {alias for spec in SETTINGS for alias in spec.aliases}
    assert aliases == {
        "ORCHESTRATOR_TOOLCHAIN",
        "ORCHESTRATOR_TARGET_CPU",
        "SOURCE_DATE_EPOCH",
        "ORCHESTRATOR_ARTIFACTS_DIR",
        "ORCHESTRATOR_CACHE_DIR",
        "ORCHESTRATOR_SIGNING_KEY",
    }
    # ORCHESTRATOR_BOLT_MODE is the canonical name of bolt.mode already.
    assert SETTINGS_BY_KEY["bolt.mode"].env == "ORCHESTRATOR_BOLT_MODE"


def test_precedence_default_file_env_flag_for_one_setting(project: Path) -> None:
    config = project / "orchestrator.toml"
    default = resolve(config, env={})
    assert (default.bench_runs, default.sources.get("bench.runs")) == (10, "default")

    write_config(project, '[package]\ncrate = "crate"\n[bench]\nruns = 3\n')
    from_file = resolve(config, env={})
    assert (from_file.bench_runs, from_file.sources["bench.runs"]) == (3, "file orchestrator.toml")

    env = {"ORCHESTRATOR_BENCH_RUNS": "4"}
    from_env = resolve(config, env=env)
    assert (from_env.bench_runs, from_env.sources["bench.runs"]) == (
        4,
        "env ORCHESTRATOR_BENCH_RUNS",
    )

    from_flag = resolve(config, env=env, cli={"bench.runs": 5})
    assert (from_flag.bench_runs, from_flag.sources["bench.runs"]) == (5, "flag")
    unset_flag = resolve(config, env=env, cli={"bench.runs": None})
    assert unset_flag.bench_runs == 4


@pytest.mark.parametrize(
    ("word", "expected"),
    [
        *[("1", True), ("TRUE", True), ("Yes", True), ("on", True)],
        *[("0", False), ("false", False), ("NO", False), ("Off", False)],
    ],
)
def test_bool_env_spellings(project: Path, word: str, expected: bool) -> None:
    options = resolve(project / "orchestrator.toml", env={"ORCHESTRATOR_BOLT_ENABLED": word})
    assert options.bolt is expected


@pytest.mark.parametrize(
    ("var", "raw", "fragment"),
    [
        ("ORCHESTRATOR_BENCH_RUNS", "abc", "expected a non-negative integer, got 'abc'"),
        ("ORCHESTRATOR_BENCH_RUNS", "-1", "expected a non-negative integer"),
        ("ORCHESTRATOR_PGO_MAX_MISSING_RATIO", "lots", "expected a non-negative number"),
        ("ORCHESTRATOR_PGO_ENABLED", "maybe", "expected true or false"),
        ("ORCHESTRATOR_TRAIN_WORKLOADS", '[["--help"', "expected JSON"),
        ("ORCHESTRATOR_TRAIN_WORKLOADS", '["--help"]', "expected a list of argument lists"),
        ("ORCHESTRATOR_TRAIN_WORKLOADS", '{"a": 1}', "expected a list of argument lists"),
        ("ORCHESTRATOR_BOLT_POLICY", "sometimes", "expected one of fallback, require"),
        ("ORCHESTRATOR_TARGET_CPU", " ", None),  # whitespace is a value: not an error
    ],
)
def test_bad_env_value_names_the_variable(
    project: Path, var: str, raw: str, fragment: str | None
) -> None:
    config = project / "orchestrator.toml"
    if fragment is None:
        assert resolve(config, env={var: raw}).target_cpu == raw
        return
    with pytest.raises(ConfigError) as caught:
        resolve(config, env={var: raw})
    assert caught.value.message.startswith(f"environment variable {var}: ")
    assert fragment in caught.value.message


def test_empty_env_var_counts_as_unset(project: Path) -> None:
    options = resolve(project / "orchestrator.toml", env={"ORCHESTRATOR_BENCH_RUNS": ""})
    assert (options.bench_runs, options.sources["bench.runs"]) == (10, "default")


def test_flag_text_for_a_list_is_comma_separated(project: Path) -> None:
    options = resolve(project / "orchestrator.toml", env={}, cli={"build.flavors": "cpu,rocm"})
    assert options.flavors == ("cpu", "rocm")
    with pytest.raises(ConfigError, match=r"flag for bench\.runs: expected a non-negative integer"):
        resolve(project / "orchestrator.toml", env={}, cli={"bench.runs": "many"})


def test_settings_fill_every_options_field_once() -> None:
    attrs = [spec.attr for spec in SETTINGS]
    assert len(attrs) == len(set(attrs))
    fields = {f.name for f in dataclasses.fields(Options)}
    assert set(attrs) == fields - NOT_SETTINGS


def test_options_field_defaults_are_the_declared_ones() -> None:
    for f in dataclasses.fields(Options):
        spec = next((s for s in SETTINGS if s.attr == f.name), None)
        if spec is not None and f.default is not dataclasses.MISSING:
            assert f.default == spec.default, spec.key


def test_describe_lists_every_setting_in_declaration_order(project: Path) -> None:
    options = resolve(project / "orchestrator.toml", env={})
    keys = [key for key, _value, _source in options.describe()]
    assert keys[: len(SETTINGS)] == [spec.key for spec in SETTINGS]
    flavor_keys = keys[len(SETTINGS) :]
    assert f"flavors.cpu.{FLAVOR_SETTINGS[0].name}" in flavor_keys
    assert len(flavor_keys) == len(options.flavor_settings) * len(FLAVOR_SETTINGS)


def test_flag_specs_spell_flags_and_append_default_and_env() -> None:
    specs = flag_specs()
    assert set(specs) == {s.key for s in SETTINGS if s.flag}
    cpu = specs["build.target_cpu"]
    assert cpu.decls == ("--target-cpu",)
    assert cpu.help.endswith(
        "(default x86-64-v2; env ORCHESTRATOR_BUILD_TARGET_CPU or ORCHESTRATOR_TARGET_CPU)."
    )
    # Every variable the declaration reads is in the help, the older name too.
    assert "env ORCHESTRATOR_BUILD_CACHE_DIR or ORCHESTRATOR_CACHE_DIR" in (
        specs["build.cache_dir"].help
    )
    pgo = specs["pgo.enabled"]
    assert (pgo.decls, pgo.names) == (("--pgo/--no-pgo",), ("--pgo", "--no-pgo"))
    assert "(default on; env ORCHESTRATOR_PGO_ENABLED)" in pgo.help
    assert "(default the package name" not in specs["build.cache_dir"].help
    assert "~/.cache/orchestrator" in specs["build.cache_dir"].help
    for key, spec in specs.items():
        assert all(name.startswith("--") for name in spec.names)
        assert (len(spec.names) == 2) == (spec.kind == "bool"), key
        assert SETTINGS_BY_KEY[key].env in spec.help


def test_markdown_table_lists_every_setting() -> None:
    table = settings_table_markdown()
    lines = table.strip().splitlines()
    assert lines[0] == "| key | type | default | env var | flag | meaning |"
    rows = lines[2:]
    assert len(rows) == len(SETTINGS) + len(FLAVOR_SETTINGS)
    for row in rows:
        assert len(re.split(r"(?<!\\)\|", row)) == 8, row  # six cells between the bars
    by_key = {row.split("|")[1].strip().strip("`"): row for row in rows}
    for spec in SETTINGS:
        row = by_key[spec.key]
        for name in spec.env_names:
            assert f"`{name}`" in row
        if spec.flag:
            assert f"`{spec.flag}`" in row
        assert spec.help.split(" (")[0] in row
    for key in FLAVOR_SETTINGS:
        assert f"flavors.<name>.{key.name}" in by_key
    assert "| `build.target_cpu` | str | `x86-64-v2` |" in table

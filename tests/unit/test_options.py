from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config.resolve.options import FALLBACK_SOURCE_DATE_EPOCH, resolve
from orchestrator.errors import ConfigError
from tests.unit.conftest import write_config


def test_defaults_and_version_from_cargo(project: Path) -> None:
    options = resolve(project / "orchestrator.toml", env={}, cwd=project)
    assert options.binary == "demo"
    assert options.version == "1.2.3"
    assert options.sources["package.version"] == "Cargo.toml"
    assert options.target_cpu == "x86-64-v2"
    assert options.sources["build.target_cpu"] == "default"
    assert options.toolchain == "rustc-web-1.96"
    assert options.artifacts_dir == (project / "artifacts").resolve()
    assert options.source_date_epoch == FALLBACK_SOURCE_DATE_EPOCH


def test_precedence_default_file_env_cli(project: Path) -> None:
    config = write_config(
        project, '[package]\ncrate = "crate"\n[build]\ntarget_cpu = "x86-64-v3"\n'
    )
    from_file = resolve(config, env={})
    assert (from_file.target_cpu, from_file.sources["build.target_cpu"]) == (
        "x86-64-v3",
        "file orchestrator.toml",
    )

    env = {"ORCHESTRATOR_TARGET_CPU": "x86-64-v4", "SOURCE_DATE_EPOCH": "1234"}
    from_env = resolve(config, env=env)
    assert from_env.target_cpu == "x86-64-v4"
    assert from_env.sources["build.target_cpu"] == "env ORCHESTRATOR_TARGET_CPU"
    assert from_env.source_date_epoch == 1234

    from_cli = resolve(config, env=env, cli={"build.target_cpu": "znver4", "build.toolchain": None})
    assert from_cli.target_cpu == "znver4"
    assert from_cli.sources["build.target_cpu"] == "flag"
    assert from_cli.toolchain == "rustc-web-1.96"  # None means "flag not given"


def test_config_found_by_searching_upwards(project: Path) -> None:
    options = resolve(None, env={}, cwd=project / "crate" / "src")
    assert options.config_path == (project / "orchestrator.toml").resolve()


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('[package]\ncrate = "crate"\ncolour = "red"\n', "unknown key 'package.colour'"),
        ('[package]\ncrate = "crate"\n[bulid]\n', "unknown section [bulid]"),
        ("[package]\ncrate = 3\n", "package.crate: expected a path (string), got int 3"),
        (
            '[package]\ncrate = "crate"\n[build]\nsource_date_epoch = "soon"\n',
            "build.source_date_epoch: expected a non-negative integer",
        ),
        (
            '[package]\ncrate = "crate"\n[train]\nworkloads = ["generate"]\n',
            "train.workloads: expected a list of argument lists",
        ),
        ('[package]\ncrate = "crate"\n[flavors.gpu]\n', "unknown flavor [flavors.gpu]"),
        (
            '[package]\ncrate = "crate"\n[flavors.cpu]\nfeatures = "simd"\n',
            "flavors.cpu.features: expected a list of strings",
        ),
        (
            '[package]\ncrate = "crate"\n[flavors.cpu]\nlto = true\n',
            "unknown key 'flavors.cpu.lto'",
        ),
        ('[package]\ncrate = "nowhere"\n', "has no Cargo.toml"),
        ("[build]\n", "missing required key 'package.crate'"),
        ("[package\n", "not valid TOML"),
    ],
)
def test_bad_config_names_file_key_and_expectation(project: Path, text: str, fragment: str) -> None:
    config = write_config(project, text)
    with pytest.raises(ConfigError) as caught:
        resolve(config, env={})
    assert fragment in caught.value.message
    assert str(config) in caught.value.message or "nowhere" in caught.value.message
    assert caught.value.exit_code == 10


def test_bad_environment_value_is_named(project: Path) -> None:
    with pytest.raises(ConfigError, match="environment variable SOURCE_DATE_EPOCH"):
        resolve(project / "orchestrator.toml", env={"SOURCE_DATE_EPOCH": "yesterday"})


def test_missing_config_file_has_hint(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve(None, env={}, cwd=tmp_path)
    assert "--config" in caught.value.hint


def test_flavor_settings_and_describe(project: Path) -> None:
    config = write_config(
        project,
        '[package]\ncrate = "crate"\n[flavors.cpu]\nfeatures = ["simd", "parallel"]\n'
        "default_features = false\n",
    )
    options = resolve(config, env={})
    settings = options.settings_for("cpu")
    assert settings.features == ("simd", "parallel")
    assert settings.default_features is False
    rows = {key: (value, source) for key, value, source in options.describe()}
    assert rows["flavors.cpu.features"] == ("['simd', 'parallel']", "file orchestrator.toml")


BUILD_KEYS = "artifacts_dir, cache_dir, flavors, profile, source_date_epoch, target_cpu, toolchain"
SECTIONS = (
    "archive, bench, bolt, build, c_code, ci, engines, flavors, gate, limits, package, pgo, "
    "profiling, release, signing, test, train, validate"
)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[package]\ncrate = "crate"\n[build]\ntarget_pcu = "x"\n',
            "unknown key 'build.target_pcu'; did you mean 'build.target_cpu'? "
            f"[build] takes: {BUILD_KEYS}",
        ),
        (
            '[package]\ncrate = "crate"\n[build]\nruns = 3\n',
            "unknown key 'build.runs'; did you mean 'validate.runs' or 'bench.runs'? "
            f"[build] takes: {BUILD_KEYS}",
        ),
        (
            '[package]\ncrate = "crate"\n[bulid]\n',
            f"unknown section [bulid]; did you mean [build]? expected one of: {SECTIONS}",
        ),
        (
            '[package]\ncrate = "crate"\n[flavors.cdua]\n',
            "unknown flavor [flavors.cdua]; did you mean [flavors.cuda]? "
            "known flavors: cpu, cuda, rocm, aarch64",
        ),
        (
            '[package]\ncrate = "crate"\n[flavors.cpu]\nfeature = ["simd"]\n',
            "unknown key 'flavors.cpu.feature'; did you mean 'flavors.cpu.features'? "
            "a flavor takes: default_features, dispatch, features, gpu, gpu_args, gpu_targets, "
            "kernels, levels, test_every_level; and the tables [flavors.cpu.<section>] for train, "
            "validate, bench, gate, test",
        ),
        (  # nothing close: no guess, only the list
            '[package]\ncrate = "crate"\ncolour = "red"\n',
            "unknown key 'package.colour'; "
            "[package] takes: binaries, binary, crate, exclude, package, version",
        ),
        (
            '[package]\ncrate = "crate"\n[zzz]\n',
            f"unknown section [zzz]; expected one of: {SECTIONS}",
        ),
    ],
)
def test_unknown_names_suggest_the_closest_known_one(
    project: Path, text: str, message: str
) -> None:
    config = write_config(project, text)
    with pytest.raises(ConfigError) as caught:
        resolve(config, env={})
    assert caught.value.message == f"{config}: {message}"


def test_unknown_flavor_in_build_flavors_suggests_one(project: Path) -> None:
    config = write_config(project, '[package]\ncrate = "crate"\n[build]\nflavors = ["cdua"]\n')
    with pytest.raises(ConfigError) as caught:
        resolve(config, env={})
    assert caught.value.message == (
        "build.flavors: unknown flavor 'cdua'; did you mean 'cuda'? known: cpu, cuda, rocm, aarch64"
    )

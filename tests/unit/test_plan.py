from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.config.kinds import Run
from orchestrator.config.options import Options, resolve
from orchestrator.config.toolchains import BaseSpec, ToolchainSpec, load_base_spec, load_toolchain
from orchestrator.errors import ConfigError
from orchestrator.plan.build_plan import BuildPlan

from .conftest import plan_for


def _flags(plan: BuildPlan, variant: str) -> list[str]:
    return plan.variants[variant].build.environment["CARGO_ENCODED_RUSTFLAGS"].split("\x1f")


def _plan(
    options: Options, toolchain: ToolchainSpec | None = None, base: BaseSpec | None = None
) -> BuildPlan:
    return plan_for(options, toolchain=toolchain, base=base)


@pytest.fixture
def options(project: Path) -> Options:
    return resolve(project / "orchestrator.toml", env={"SOURCE_DATE_EPOCH": "1700000000"})


def test_steps_in_order_and_only_fetch_has_network(options: Options) -> None:
    plan = _plan(options)
    assert [s.name for s in plan.steps] == [
        "base-image",
        "toolchain-image",
        "toolchain-check",
        "glibc-view",
        "fetch-crates",
        "build-baseline",
        "build-release",
        "pgo-instrument",
        "pgo-train",
        "pgo-merge",
        "build-optimized",
        "test",
        "bolt-profile",
        "bolt-optimize",
        "validate",
        "speed-gate",
        "portability",
        "distros",
        "sbom",
        "extract",
        "publish",
    ]
    assert [s.name for s in plan.steps if s.network] == ["fetch-crates"]
    assert list(plan.variants) == ["baseline", "release", "pgo-generate", "optimized"]


def test_without_pgo_and_bolt_the_release_variant_ships(options: Options) -> None:
    plan = _plan(replace(options, pgo=False, bolt=False))
    assert plan.final.name == "release"
    assert "pgo-train" not in [s.name for s in plan.steps]
    assert "build-optimized" not in [s.name for s in plan.steps]
    assert plan.pgo is None and plan.bolt is None


def test_pgo_and_bolt_flags(options: Options) -> None:
    plan = _plan(options)
    generate = _flags(plan, "pgo-generate")
    assert "-Cprofile-generate=/build/out/pgo/raw" in generate
    optimized = _flags(plan, "optimized")
    assert "-Cprofile-use=/build/out/pgo/merged.profdata" in optimized
    assert "-Cllvm-args=-pgo-warn-missing-function" in optimized
    assert "-Clink-arg=-Wl,--emit-relocs" in optimized
    assert plan.pgo is not None and plan.pgo.profile_file_pattern.endswith("%m_%p.profraw")
    # The tests exercise the code generation that ships.
    assert (
        plan.test.environment["CARGO_ENCODED_RUSTFLAGS"]
        == (plan.final.build.environment["CARGO_ENCODED_RUSTFLAGS"])
    )
    # BOLT alone still needs relocations, PGO alone does not.
    assert "-Clink-arg=-Wl,--emit-relocs" in _flags(_plan(replace(options, pgo=False)), "optimized")
    assert "-Clink-arg=-Wl,--emit-relocs" not in _flags(
        _plan(replace(options, bolt=False)), "optimized"
    )


def test_baseline_is_plain_cargo(options: Options) -> None:
    plan = _plan(options)
    argv = plan.variants["baseline"].build.argv
    assert "--config" not in argv
    assert not any(f.startswith("-Ctarget-cpu") for f in _flags(plan, "baseline"))


def test_profile_key_follows_sources_and_workloads(options: Options) -> None:
    plan = _plan(options)
    assert plan.pgo is not None
    more = _plan(replace(options, workloads=(*options.workloads, Run(("generate",)))))
    assert more.pgo is not None and more.pgo.profile_key != plan.pgo.profile_key
    other_epoch = _plan(replace(options, source_date_epoch=1))
    assert other_epoch.pgo is not None and other_epoch.pgo.profile_key != plan.pgo.profile_key
    assert _plan(options).pgo == plan.pgo  # deterministic


def test_pgo_without_workloads_is_refused(options: Options) -> None:
    with pytest.raises(ConfigError, match=r"\[train\] workloads"):
        _plan(replace(options, workloads=()))
    assert _plan(replace(options, workloads=(), pgo=False, bolt=False)).final.name == "release"


def test_release_settings_are_injected_not_edited(options: Options) -> None:
    argv = list(plan_argv := _plan(options).variants["release"].build.argv)
    assert argv[:4] == ["cargo", "build", "--bin", "demo"]
    for flag in ("--release", "--offline", "--locked"):
        assert flag in argv
    configs = [argv[i + 1] for i, a in enumerate(argv) if a == "--config"]
    assert configs == [
        'profile.release.lto="fat"',
        "profile.release.codegen-units=1",
        'profile.release.panic="abort"',
        "profile.release.opt-level=3",
        "profile.release.incremental=false",
    ]
    assert "--target" in plan_argv
    assert argv[argv.index("--target") + 1] == "x86_64-unknown-linux-gnu"


def test_environment_and_rustflags(options: Options) -> None:
    plan = _plan(options)
    env = plan.variants["release"].build.environment
    assert env["SOURCE_DATE_EPOCH"] == "1700000000"
    flags = _flags(plan, "release")
    assert flags[0] == "-Ctarget-cpu=x86-64-v2"
    assert "--remap-path-prefix=/build/src=demo-1.2.3" in flags
    assert plan.test.argv[1] == "test"


def test_artifact_naming(options: Options) -> None:
    plan = _plan(options)
    assert plan.release_dir == "demo-1.2.3"
    assert plan.artifact_dir == "demo-1.2.3-linux-x86_64-cpu"
    assert plan.final.binary == ("/build/target/optimized/x86_64-unknown-linux-gnu/release/demo")


def test_features_reach_cargo(project: Path) -> None:
    (project / "orchestrator.toml").write_text(
        '[package]\ncrate = "crate"\n[flavors.cpu]\nfeatures = ["a", "b"]\n'
        "default_features = false\n"
    )
    argv = _plan(
        resolve(
            project / "orchestrator.toml", env={}, cli={"pgo.enabled": False, "bolt.enabled": False}
        )
    ).build.argv
    assert "--no-default-features" in argv
    assert argv[argv.index("--features") + 1] == "a,b"


def test_image_tags_follow_their_inputs_only(options: Options) -> None:
    plan = _plan(options)
    assert plan.image.reference.startswith("orchestrator/cpu:rustc-web-1.96-")
    # Build flags are not image inputs: no rebuild for another target-cpu.
    other_cpu = _plan(replace(options, target_cpu="x86-64-v3"))
    assert other_cpu.image == plan.image
    assert _flags(other_cpu, "release") != _flags(plan, "release")
    # A changed pin or base changes the image.
    toolchain = load_toolchain("rustc-web-1.96")
    bumped = replace(toolchain, packages={**toolchain.packages, "gcc": "4:14.2.0-2"})
    assert _plan(options, toolchain=bumped).image != plan.image
    newer_base = replace(load_base_spec(), source_date_epoch=1800000000)
    rebased = _plan(options, base=newer_base)
    assert rebased.base_image != plan.base_image
    assert rebased.image != plan.image  # the toolchain image sits on the base
    assert _plan(options, toolchain=load_toolchain("rustc-1.85")).image != plan.image


def test_bad_target_cpu_is_refused(options: Options) -> None:
    with pytest.raises(ConfigError, match=r"target-cpu .* is not a CPU name"):
        _plan(replace(options, target_cpu="x86-64 v3; rm -rf"))


def test_test_args_go_last_and_disabled_tests_leave_the_plan_with_their_reason(
    project: Path,
) -> None:
    options = resolve(project / "orchestrator.toml", env={})
    with_args = plan_for(replace(options, test_args=("--workspace", "--", "--skip", "slow")))
    assert with_args.test.argv[-4:] == ("--workspace", "--", "--skip", "slow")
    assert "test" in [s.name for s in with_args.steps]
    assert with_args.test_skipped == ""
    off = plan_for(replace(options, test_enabled=False, test_reason=" needs a GPU "))
    assert "test" not in [s.name for s in off.steps]
    assert off.test_skipped == "needs a GPU"


def test_disabling_tests_without_a_reason_is_refused(project: Path) -> None:
    config = project / "orchestrator.toml"
    config.write_text(config.read_text() + "\n[test]\nenabled = false\n")
    with pytest.raises(ConfigError, match="needs a reason"):
        resolve(config, env={})
    config.write_text(config.read_text() + 'reason = "flaky on this toolchain"\n')
    assert resolve(config, env={}).test_reason == "flaky on this toolchain"


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ('[train]\nenv = ["NOEQUALS"]\n', "is not KEY=VALUE"),
        ('[train]\nstdin = "../outside.txt"\n', "must be a path inside the crate"),
        ('[train]\nstdin = "missing.txt"\n', "no such file"),
    ],
)
def test_bad_run_settings_are_refused_at_resolve(project: Path, setting: str, message: str) -> None:
    config = project / "orchestrator.toml"
    config.write_text(config.read_text().replace("[train]\n", setting, 1))
    with pytest.raises(ConfigError, match=message):
        resolve(config, env={})


def test_the_crates_cargo_config_rustflags_come_first_in_every_variant(project: Path) -> None:
    cargo = project / "crate" / ".cargo"
    cargo.mkdir()
    (cargo / "config.toml").write_text(
        '[env]\nGREETING = "hi"\n'
        '[build]\nrustflags = "--cfg from_build"\n'
        '[target.aarch64-unknown-linux-gnu]\nrustflags = ["--cfg", "from_aarch64"]\n'
        '[target.\'cfg(windows)\']\nrustflags = ["--cfg", "inert"]\n'
    )
    options = resolve(project / "orchestrator.toml", env={})
    cpu = plan_for(options)
    for variant in cpu.variants.values():
        assert variant.rustflags[:2] == ["--cfg", "from_build"], variant.name
    assert cpu.rustflags[2].startswith("-Ctarget-cpu=")  # ours after: they win a clash
    aarch64 = plan_for(options, "aarch64")
    assert aarch64.variants["baseline"].rustflags[:2] == ["--cfg", "from_aarch64"]
    assert not any("inert" in flag for flag in aarch64.rustflags + cpu.rustflags)


def test_a_malformed_crate_cargo_config_names_the_file(project: Path) -> None:
    cargo = project / "crate" / ".cargo"
    cargo.mkdir()
    (cargo / "config.toml").write_text("[build]\nrustflags = 3\n")
    with pytest.raises(ConfigError, match=r"config\.toml: build\.rustflags"):
        resolve(project / "orchestrator.toml", env={})

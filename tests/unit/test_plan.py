from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.config.declarations.kinds import Run
from orchestrator.config.resolve.options import FlavorSettings, Options, resolve
from orchestrator.config.resolve.toolchains import (
    BaseSpec,
    ToolchainSpec,
    load_base_spec,
    load_toolchain,
)
from orchestrator.errors import ConfigError
from orchestrator.model.documents.lockfile import LockInputs
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.plan.serialize import (
    TEST_FLAGS,
    action_key,
    cargo_test_record,
    plan_inputs,
    plan_summary,
)
from orchestrator.release.targets.target import targets

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
        "test-build",
        "test",
        "bolt-profile",
        "bolt-optimize",
        "validate",
        "speed-gate",
        "strip-relocations",
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


# -- one `cargo test` per flavor, and only the builds something reads -----------------
def _levels(options: Options, flavor: str, *levels: str, every: bool = False) -> Options:
    settings = FlavorSettings(levels=levels, test_every_level=every)
    return replace(options, flavor_settings={**options.flavor_settings, flavor: settings})


def _level_plans(options: Options, flavor: str = "cpu") -> list[BuildPlan]:
    """The plans of every level `release` builds for `flavor`, in order."""
    return [plan_for(target.options, flavor) for target in targets(options, [flavor])]


def _test_flags(plan: BuildPlan) -> list[str]:
    return plan.test.environment["CARGO_ENCODED_RUSTFLAGS"].split("\x1f")


def test_every_level_runs_the_first_levels_test_command(options: Options) -> None:
    v2, v3 = _level_plans(_levels(options, "cpu", "x86-64-v2", "x86-64-v3"))
    # What the step cache keys the test on is the same for both levels...
    assert v3.test == v2.test
    assert v3.test_cpu == v2.test_cpu == "x86-64-v2"
    # ...while what ships differs by its level.
    assert "-Ctarget-cpu=x86-64-v3" in _flags(v3, "optimized")
    flags = _test_flags(v3)
    assert "-Ctarget-cpu=x86-64-v2" in flags and "-Ctarget-cpu=x86-64-v3" not in flags
    # The first level's release-profile flags: not its PGO profile (each level trains its
    # own), nor BOLT's relocations; built where that release build left its dependencies.
    assert flags == _flags(v2, "release")
    assert not any(f.startswith("-Cprofile-use") for f in flags)
    assert "-Clink-arg=-Wl,--emit-relocs" not in flags
    argv = list(v3.test.argv)
    assert argv[argv.index("--target-dir") + 1] == "/build/target/release"
    assert v2.variants["release"].build.environment == v3.test.environment
    assert "first level x86-64-v2" in v3.test_shared and "test_every_level" in v3.test_shared
    step = next(s for s in v3.steps if s.name == "test")
    assert (
        step.title
        == "run the tests: cargo test --release with target-cpu x86-64-v2, shared by the levels"
    )


def test_test_every_level_tests_each_level_with_its_shipped_flags(options: Options) -> None:
    v2, v3 = _level_plans(_levels(options, "cpu", "x86-64-v2", "x86-64-v3", every=True))
    assert v2.test != v3.test
    for plan, cpu in ((v2, "x86-64-v2"), (v3, "x86-64-v3")):
        assert _test_flags(plan) == _flags(plan, "optimized")
        assert plan.test_cpu == cpu and plan.test_shared == ""
        argv = list(plan.test.argv)
        assert argv[argv.index("--target-dir") + 1] == "/build/target/optimized"


def test_one_level_or_a_cpu_outside_the_levels_tests_with_the_shipped_flags(
    options: Options,
) -> None:
    (single,) = _level_plans(_levels(options, "cpu", "x86-64-v3"))
    assert _test_flags(single) == _flags(single, "optimized") and single.test_shared == ""
    # `build --target-cpu x86-64-v4` with levels v2 and v3: no level shares its tests.
    other = plan_for(
        replace(_levels(options, "cpu", "x86-64-v2", "x86-64-v3"), target_cpu="x86-64-v4")
    )
    assert other.test_cpu == "x86-64-v4"
    assert "-Ctarget-cpu=x86-64-v4" in _test_flags(other)
    # The first level's tests: its release flags, not the profile; what ships is unchanged.
    first = _level_plans(_levels(options, "cpu", "x86-64-v2", "x86-64-v3"))[0]
    plain = plan_for(options)
    assert _flags(first, "optimized") == _flags(plain, "optimized")
    assert _test_flags(first) == _flags(plain, "release")


def test_aarch64_levels_share_the_first_ones_tests(options: Options) -> None:
    generic, n1 = _level_plans(_levels(options, "aarch64", "generic", "neoverse-n1"), "aarch64")
    assert n1.test == generic.test and n1.test_cpu == "generic"
    assert "-Ctarget-cpu=neoverse-n1" in _flags(n1, "optimized")


def test_shared_test_flags_are_pinned_in_the_lock_and_build_json(options: Options) -> None:
    v3 = _level_plans(_levels(options, "cpu", "x86-64-v2", "x86-64-v3"))[1]
    alone = plan_for(options)
    assert TEST_FLAGS not in plan_inputs(alone)["encoded_rustflags"]  # locks stay as they were
    inputs = plan_inputs(v3)
    assert inputs["encoded_rustflags"][TEST_FLAGS] == _test_flags(v3)
    LockInputs.model_validate(inputs)  # the lock's record takes it as it is
    record = cargo_test_record(v3)
    assert record["target_cpu"] == "x86-64-v2" and record["shared"] == v3.test_shared
    assert record["rustflags"] == _test_flags(v3)
    assert cargo_test_record(alone) == {
        "ran": True,
        "cargo": list(alone.test.argv),
        "target_cpu": "x86-64-v2",
    }
    off = plan_for(replace(options, test_enabled=False, test_reason="needs a GPU"))
    assert cargo_test_record(off) == {"ran": False, "reason": "needs a GPU"}
    summary = plan_summary(v3)
    assert summary["test_target_cpu"] == "x86-64-v2" and summary["test_shared"]
    # Asking for tests at every level changes the key of the levels it changes.
    every = _levels(options, "cpu", "x86-64-v2", "x86-64-v3", every=True)
    shared = _levels(options, "cpu", "x86-64-v2", "x86-64-v3")
    v3_every = _level_plans(every)[1]
    assert plan_inputs(v3_every) != inputs
    assert action_key(v3_every, targets(every, ["cpu"])[1].options) != action_key(
        v3, targets(shared, ["cpu"])[1].options
    )


def _release_planned(plan: BuildPlan) -> bool:
    steps = [s.name for s in plan.steps]
    assert ("build-release" in steps) == ("release" in plan.variants)
    return "release" in plan.variants


@pytest.mark.parametrize(
    ("change", "flavor", "planned"),
    [
        ({}, "cpu", True),  # gate best: release is a candidate that may ship
        ({"gate_policy": "require-all"}, "cpu", True),  # every candidate checked vs baseline
        ({"gate_policy": "off"}, "cpu", False),  # the most optimized ships unmeasured
        ({"gate_policy": "off", "pgo": False}, "cpu", False),  # BOLT alone: the same
        ({"gate_policy": "off", "pgo": False, "bolt": False}, "cpu", True),  # it ships
        ({"pgo": False, "bolt": False}, "cpu", True),
        ({}, "aarch64", False),  # under qemu callgrind counts nothing: no gate
        ({"pgo": False, "bolt": False}, "aarch64", True),
    ],
)
def test_the_release_profile_build_is_planned_only_where_something_reads_it(
    options: Options, change: dict[str, object], flavor: str, planned: bool
) -> None:
    plan = plan_for(replace(options, **change), flavor)  # type: ignore[arg-type]
    assert _release_planned(plan) is planned
    assert (plan.gate is not None) or plan.final.name != "release" or planned
    if not planned:  # what ships is the optimized build, and the baseline still is built
        assert plan.final.name == "optimized"
        assert next(iter(plan.variants)) == "baseline"
        assert "release" not in plan_inputs(plan)["encoded_rustflags"]


def test_the_gate_plans_the_release_build_with_pinned_reproductions_too(options: Options) -> None:
    # A reproduction ships what its lock names; the gate's candidates include release.
    plan = plan_for(replace(options, gate_pinned="pgo"))
    assert plan.gate is not None and _release_planned(plan)

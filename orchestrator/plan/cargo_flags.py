"""What each cargo command of a plan is given (plan/build_plan.py assembles them): the
seeds' release profile as `--config` arguments, the rustflags of the baseline and of every
other variant, the feature arguments, and the flags `cargo test` runs with (the shipped
ones, or those of the flavor's first level, so that the step cache runs it once).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace

from orchestrator.config.resolve.crate_files import CrateCargoConfig
from orchestrator.config.resolve.options import Options
from orchestrator.flavors import Flavor, FlavorView
from orchestrator.model.layout import PATHS
from orchestrator.plan.c_code import CCodePlan
from orchestrator.plan.gate import GatePlan
from orchestrator.plan.portable import SysrootPlan

# BOLT rewrites the layout and needs the linker's relocations to do it.
RELOCATIONS = "-Clink-arg=-Wl,--emit-relocs"

# The seeds' release profile, injected with `cargo --config` so the user's Cargo.toml
# is never edited.
RELEASE_PROFILE: dict[str, str | int | bool] = {
    "lto": "fat",
    "codegen-units": 1,
    "panic": "abort",
    "opt-level": 3,
    "incremental": False,
}


@dataclass(frozen=True)
class CargoSettings:
    """What a target's cargo commands read of the settings besides the flavor's (its
    `FlavorView`): the package and binaries, [build] profile, the timestamp, `[test] args`
    and the crate's own .cargo/config.toml. Built once from a target's options by the plan."""

    member: str | None  # a workspace member: its binaries, its tests
    binaries: tuple[str, ...]  # the main binary first
    profile: str
    source_date_epoch: int
    test_args: tuple[str, ...]
    crate_cargo: CrateCargoConfig

    @classmethod
    def from_options(cls, options: Options) -> CargoSettings:
        return cls(
            member=options.member,
            binaries=options.binaries,
            profile=options.profile,
            source_date_epoch=options.source_date_epoch,
            test_args=options.test_args,
            crate_cargo=options.crate_cargo,
        )


def profile_args(
    changes: Mapping[str, str | int | bool] | None = None, profile: str = "release"
) -> list[str]:
    """Our overrides of `profile` ([build] profile) as `--config` arguments, with `changes`
    ([c_code] mode's). Its debug and strip settings stay the crate's."""
    args: list[str] = []
    for key, value in {**RELEASE_PROFILE, **(changes or {})}.items():
        rendered = json.dumps(value)  # TOML and JSON agree on strings, ints and booleans
        args += ["--config", f"profile.{profile}.{key}={rendered}"]
    return args


def variant_rustflags(
    cargo: CargoSettings,
    view: FlavorView,
    flavor: Flavor,
    *,
    release_dir: str,
    sysroot: SysrootPlan | None,
    c_code: CCodePlan | None = None,
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the baseline's rustflags, every other variant's)."""
    # Paths in panic messages and debug info must not depend on where we built.
    remap = (
        f"--remap-path-prefix={PATHS.src}={release_dir}",
        f"--remap-path-prefix={PATHS.vendor}=crates",
        f"--remap-path-prefix={PATHS.cargo_home}=cargo-home",
    )
    # The crate's own .cargo/config.toml rustflags come first (ours win where they clash:
    # later -C flags override earlier ones), in every variant, the baseline included.
    crate_flags = cargo.crate_cargo.rustflags_for(flavor.rust_target)
    # The baseline is plain `cargo build --release`: the image's own glibc, no sysroot.
    linking = sysroot.link_args if sysroot else ()
    # [c_code] mode: clang and lld link, with the C code's bitcode (plan/c_code.py)
    c_linking = c_code.rustflags if c_code else ()
    return (*crate_flags, *remap), (
        *crate_flags,
        *flavor.rustflags(view),
        *c_linking,
        *linking,
        *remap,
    )


def feature_args(default_features: bool, features: tuple[str, ...]) -> list[str]:
    args = [] if default_features else ["--no-default-features"]
    return [*args, "--features", ",".join(features)] if features else args


def shared_test_level(view: FlavorView, flavor: Flavor, target_cpu: str) -> str:
    """The level whose flags `cargo test` uses instead of `target_cpu`'s, or "" for its own.

    The tests of one flavor's levels read the same sources, features and toolchain; only
    -Ctarget-cpu tells them apart. Every level but the first runs the first level's test
    command, so the step cache runs it once per flavor: unless the flavor asks for tests at
    every level, or has one level, or this build's CPU is not one of its levels.
    """
    if view.settings_for(flavor.name).test_every_level:
        return ""
    levels = flavor.levels(view)
    if len(levels) < 2 or target_cpu not in levels:
        return ""
    return levels[0]


@dataclass(frozen=True)
class TestFlags:
    cpu: str  # the target-cpu the tests are compiled for
    flags: tuple[str, ...]
    target_dir: str  # below PATHS.target, where a build with the same flags left its deps
    shared: str  # "" for the shipped flags; else whose flags, and why


def test_flags(
    cargo: CargoSettings,
    view: FlavorView,
    flavor: Flavor,
    target_cpu: str,
    *,
    shipped: tuple[str, tuple[str, ...]],  # the shipped variant's name and rustflags
    release_dir: str,
    sysroot: SysrootPlan | None,
    c_code: CCodePlan | None = None,
) -> TestFlags:
    """The flags `cargo test` runs with: the shipped ones, or the flavor's first level's
    release-profile flags. Those leave out the PGO profile (each level trains its own:
    reading it would make the levels' test commands differ again) and BOLT's relocations
    (they change nothing a test sees), and build where the first level's release build
    left its dependencies."""
    level = shared_test_level(view, flavor, target_cpu)
    shipped_variant, shipped_flags = shipped
    if not level:
        return TestFlags(target_cpu, shipped_flags, shipped_variant, "")
    first = replace(view, target_cpu=level)
    cpu = flavor.target_cpu(first)
    return TestFlags(
        cpu,
        variant_rustflags(
            cargo, first, flavor, release_dir=release_dir, sysroot=sysroot, c_code=c_code
        )[1],
        "release",
        f"the release-profile flags of {flavor.name}'s first level {cpu}: every "
        f"level of {flavor.name} runs this one command, so the step cache runs it once "
        f"(flavors.{flavor.name}.test_every_level = true tests each level)",
    )


def release_needed(gate: GatePlan | None, *, optimized: bool) -> bool:
    """Whether the release-profile build has a reader: it ships when nothing is
    `optimized` (no PGO, no BOLT), and the speed gate counts it as a candidate (`best` may
    ship it, `require-all` checks it against the baseline). Without a gate (policy off, an
    emulated target, no workloads) the most optimized variant ships unmeasured and nothing
    reads it."""
    return gate is not None or not optimized

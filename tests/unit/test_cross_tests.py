"""`cargo test` of a foreign-architecture flavor: the runner cargo uses for the test binaries,
and what tests that start the crate's own binary read (cross-rs's CROSS_RUNNER, qemu's
loader prefix), in the test step's command and key only, and in build.json."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.config.resolve.options import FlavorSettings, Options, resolve
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.plan.cargo_commands import CargoCommand
from orchestrator.plan.serialize import action_key, cargo_test_record, plan_inputs
from orchestrator.plan.step_keys import baseline_key, cargo_test_key
from orchestrator.release.targets.target import targets

from .conftest import plan_for

RUNNER = "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER"
CROSS = {"CROSS_RUNNER": "qemu-user", "QEMU_LD_PREFIX": "/usr/aarch64-linux-gnu"}


@pytest.fixture
def options(project: Path) -> Options:
    return resolve(project / "orchestrator.toml", env={"SOURCE_DATE_EPOCH": "1700000000"})


def _without(plan: BuildPlan, *names: str) -> BuildPlan:
    env = {k: v for k, v in plan.test.environment.items() if k not in names}
    return replace(plan, test=CargoCommand(plan.test.argv, env))


def test_aarch64_tests_see_cross_runner_and_the_loader_prefix(options: Options) -> None:
    plan = plan_for(options, "aarch64")
    env = plan.test.environment
    assert {k: env[k] for k in CROSS} == CROSS
    # cargo itself still runs the test binaries under qemu with the same sysroot
    assert env[RUNNER] == "qemu-aarch64 -L /usr/aarch64-linux-gnu"
    assert env[RUNNER].split()[-1] == env["QEMU_LD_PREFIX"]
    # The builds do not see them: their commands (and step keys) stay as they were.
    for variant in plan.variants.values():
        assert not set(CROSS) & set(variant.build.environment)
    assert "CROSS_RUNNER" not in plan_inputs(plan)["environment"]


def test_native_flavors_test_without_a_runner(options: Options) -> None:
    for flavor in ("cpu", "cuda", "rocm"):
        plan = plan_for(options, flavor)
        assert not set(CROSS) & set(plan.test.environment), flavor
        assert not any(k.endswith("_RUNNER") for k in plan.test.environment), flavor
        assert "runner" not in cargo_test_record(plan), flavor


def test_the_test_key_covers_the_runner_environment(options: Options) -> None:
    plan = plan_for(options, "aarch64")
    key = cargo_test_key(plan, None)
    assert cargo_test_key(_without(plan, "CROSS_RUNNER"), None) != key
    assert cargo_test_key(_without(plan, "QEMU_LD_PREFIX"), None) != key
    assert cargo_test_key(plan_for(options, "aarch64"), None) == key  # and is stable
    # The build steps' keys read the container's (final build's) environment, not the tests'.
    assert baseline_key(_without(plan, *CROSS)) == baseline_key(plan)


def test_build_json_records_what_ran_the_tests(options: Options) -> None:
    plan = plan_for(options, "aarch64")
    record = cargo_test_record(plan)
    assert record["ran"] is True
    assert record["runner"] == {
        "cargo_runner": "qemu-aarch64 -L /usr/aarch64-linux-gnu",
        "environment": CROSS,
    }
    skipped = plan_for(replace(options, test_enabled=False, test_reason="slow"), "aarch64")
    assert cargo_test_record(skipped) == {"ran": False, "reason": "slow"}


def test_aarch64_levels_still_share_one_test_command(options: Options) -> None:
    settings = FlavorSettings(levels=("generic", "neoverse-n1"))
    leveled = replace(options, flavor_settings={**options.flavor_settings, "aarch64": settings})
    generic, n1 = (plan_for(t.options, "aarch64") for t in targets(leveled, ["aarch64"]))
    assert n1.test == generic.test
    assert n1.test.environment["CROSS_RUNNER"] == "qemu-user"
    assert cargo_test_key(n1, None) == cargo_test_key(generic, None)


def test_the_action_key_covers_the_runner_environment(options: Options) -> None:
    # A published aarch64 target whose tests ran without CROSS_RUNNER is not reused as is.
    plan = plan_for(options, "aarch64")
    assert action_key(_without(plan, "CROSS_RUNNER"), options) != action_key(plan, options)

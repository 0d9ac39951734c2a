"""The plan as data: the one place where a BuildPlan becomes JSON-ready dictionaries.

`plan_inputs` is what release.lock pins per target (and `lock --check` recomputes);
`plan_summary` is what `build --dry-run` prints and build.json records; `action_key`
names everything a target's build reads or checks (the action cache's key).
"""

from __future__ import annotations

from typing import Any

from orchestrator import __version__
from orchestrator.config.declarations.kinds import toml_shape
from orchestrator.config.declarations.settings import FLAVOR_SETTINGS, SETTINGS
from orchestrator.config.resolve.options import Options
from orchestrator.model.hashing import content_hash
from orchestrator.model.verdict.callgrind import CALLGRIND_ARGS
from orchestrator.plan.build_plan import BuildPlan

# The `encoded_rustflags` entry of `cargo test`, where its flags are not the shipped ones.
TEST_FLAGS = "cargo-test"

# Settings that say where things go or how a release is reported, never what a target's
# build reads or checks: changing one keeps a published artifact current.
_NOT_ACTION_INPUTS = frozenset(
    {
        "package.crate",  # a path: the sources' digest stands for what it holds
        "train.inputs",  # paths: their digests are in the plan (run.inputs)
        "build.flavors",  # which targets a release builds, not how one is built
        "build.artifacts_dir",
        "build.cache_dir",
        "bench.runs",
        "bench.warmup",
        "bench.command",
        "signing.secret_key",  # instead, a cached artifact must verify under the key
        "limits.pids",  # a build either fits its limits or fails: they change no bytes
        "limits.memory",
        # How many targets build at once and cargo's share of cores: codegen-units is fixed
        # by the release profile, so the bytes do not depend on it (release/targets/engine_jobs.py).
        "engines.jobs",
        "ci.runners",  # where `orchestrator ci`'s generated jobs run, not what they build
    }
)


def action_key(plan: BuildPlan, options: Options) -> str:
    """Everything one target's build reads or checks: the plan's inputs (sources, Cargo.lock,
    toolchain image, flags, workloads, profile key), every setting that can change what is
    built or checked, this target's flavor settings, and orchestrator's version. A setting
    added later is part of the key unless listed in _NOT_ACTION_INPUTS: when in doubt,
    rebuild."""
    options = options.for_flavor(plan.flavor)  # the settings this target was planned with
    flavor = options.settings_for(plan.flavor)
    return content_hash(
        {
            "kind": "target-action",
            "orchestrator": __version__,
            "plan": plan_inputs(plan),
            # How a foreign target's tests ran (absent for native ones: their keys stay).
            **({"cargo_test_runner": cargo_test_runner(plan)} if plan.runner else {}),
            # The simulated caches decide the gate's counts, and so what ships.
            "callgrind": list(CALLGRIND_ARGS) if plan.gate is not None else None,
            # Where BOLT is planned, what ships has no static relocations unless BOLT's
            # output ships (execute/optimize/relocations.py): artifacts made before that keep them.
            **({"static_relocations": "stripped"} if plan.bolt is not None else {}),
            "settings": {
                spec.key: toml_shape(getattr(options, spec.attr))
                for spec in SETTINGS
                if spec.key not in _NOT_ACTION_INPUTS
            },
            "flavor": {key.name: toml_shape(getattr(flavor, key.name)) for key in FLAVOR_SETTINGS},
        }
    )


def plan_inputs(plan: BuildPlan) -> dict[str, Any]:
    """What the plan fixes before anything runs: recomputable from the config alone."""
    final = plan.final.build
    return {
        "artifact": plan.artifact_dir,
        "flavor": plan.flavor,
        "rust_target": plan.rust_target,
        "target_cpu": plan.target_cpu,
        "toolchain": plan.toolchain.name,
        "base_image_input_hash": plan.base_image.input_hash,
        "image_input_hash": plan.image.input_hash,
        "apt": plan.apt_sources.as_dict(),
        "packages": dict(plan.packages),
        "unpack": dict(plan.unpack),
        "source_archive_sha256": plan.source.archive_sha256,
        "cargo_lock_sha256": plan.source.cargo_lock_sha256,
        # What build scripts' `git` answers; None: no repository, build scripts saw no git
        "git": plan.source.git.dump() if plan.source.git is not None else None,
        "rustflags": list(plan.rustflags),
        "cargo": list(final.argv),
        "environment": {
            k: v for k, v in sorted(final.environment.items()) if k != "CARGO_ENCODED_RUSTFLAGS"
        },
        "encoded_rustflags": {
            **{name: variant.rustflags for name, variant in plan.variants.items()},
            # Only where the tests run another level's flags than the shipped (absent
            # otherwise, as in locks written before the levels shared one test command).
            **({TEST_FLAGS: cargo_test_rustflags(plan)} if plan.test_shared else {}),
        },
        "cargo_test": list(plan.test.argv),
        "gpu_targets": list(plan.device_code.targets) if plan.device_code else [],
        "workloads": [w.shape() for w in plan.workloads],
        "validate": list(plan.validate_command),
        "validate_runs": [r.shape() for r in plan.validate_runs],
        "pgo_profile_key": plan.pgo.profile_key if plan.pgo else None,
        "bolt": {"mode": plan.bolt.mode, "flags": list(plan.bolt.flags)} if plan.bolt else None,
        "run": plan.run.as_dict() if plan.run.configured else None,
        "test_skipped": plan.test_skipped,
        "glibc_floor": plan.glibc_floor,
    }


def cargo_test_rustflags(plan: BuildPlan) -> list[str]:
    return plan.test.environment["CARGO_ENCODED_RUSTFLAGS"].split("\x1f")


def cargo_test_record(plan: BuildPlan) -> dict[str, object]:
    """build.json's `tests`: the command as run and the target-cpu it compiled for (with
    why, when that is the flavor's first level rather than the shipped one), or why the
    tests did not run."""
    if plan.test_skipped:
        return {"ran": False, "reason": plan.test_skipped}
    record: dict[str, object] = {
        "ran": True,
        "cargo": list(plan.test.argv),
        "target_cpu": plan.test_cpu,
    }
    if plan.test_shared:
        record |= {"rustflags": cargo_test_rustflags(plan), "shared": plan.test_shared}
    if plan.runner:  # what ran the foreign test binaries, and what tests that spawn one see
        record["runner"] = cargo_test_runner(plan)
    return record


def cargo_test_runner(plan: BuildPlan) -> dict[str, object]:
    """How `cargo test` ran a foreign-architecture target: cargo's runner for the test
    binaries, and the environment that tests starting the crate's binary read."""
    build = plan.final.build.environment
    runner = f"CARGO_TARGET_{plan.rust_target.upper().replace('-', '_')}_RUNNER"
    return {
        "cargo_runner": plan.test.environment.get(runner, ""),
        # What only the tests see (the flavor's test environment), not the builds
        "environment": {k: v for k, v in sorted(plan.test.environment.items()) if k not in build},
    }


def plan_summary(plan: BuildPlan) -> dict[str, object]:
    """What `build --dry-run` prints about the plan."""
    return {
        "flavor": plan.flavor,
        "arch": plan.arch,
        "rust_target": plan.rust_target,
        "target_cpu": plan.target_cpu,
        "toolchain": plan.toolchain.name,
        "base_image": {
            "reference": plan.base_image.reference,
            "input_hash": plan.base_image.input_hash,
        },
        "image": {"reference": plan.image.reference, "input_hash": plan.image.input_hash},
        "source_archive_sha256": plan.source.archive_sha256,
        "cargo_lock_sha256": plan.source.cargo_lock_sha256,
        "rustflags": list(plan.rustflags),
        "variants": {
            name: {"argv": list(v.build.argv), "rustflags": v.rustflags}
            for name, v in plan.variants.items()
        },
        "test": list(plan.test.argv),
        "test_build": list(plan.test_build.argv),
        "test_skipped": plan.test_skipped or None,
        "test_target_cpu": plan.test_cpu,
        "test_shared": plan.test_shared or None,
        "run": plan.run.as_dict(),
        "pgo": {"profile_key": plan.pgo.profile_key} if plan.pgo else None,
        "bolt": {
            "mode": plan.bolt.mode,
            "policy": plan.bolt.policy,
            "flags": list(plan.bolt.flags),
        }
        if plan.bolt
        else None,
        "binaries": list(plan.binaries),
        "workloads": [w.shape() for w in plan.workloads],
        "runner": list(plan.runner),
        "gpu_targets": list(plan.device_code.targets) if plan.device_code else [],
        "validate": list(plan.validate_command),
        "validate_runs": [r.shape() for r in plan.validate_runs],
        "artifact": f"{plan.release_dir}/{plan.artifact_dir}",
        "steps": [s.name for s in plan.steps],
    }

"""Content keys of the steps the step cache may skip: a hash of exactly what a step reads.

Two targets whose step reads the same inputs get the same key and share one run of it:
the plain `cargo build --release` baseline of `cpu` and `cpu-v3` (same features) reads
no target-cpu, so it is built once per release and reused across runs. What only the
running step knows (the vendored crates' digest) is checked against the entry when it
is used (host/step_cache.py). Pure: no I/O.

Which step reads what:
- the cargo builds (baseline, release, optimized) and `cargo test --no-run`: the sources,
  Cargo.lock, the toolchain image and what is unpacked into it, the cargo command line
  and environment (features, rustflags with target-cpu and remap prefixes,
  SOURCE_DATE_EPOCH), the build container's environment; the optimized build and the
  tests with -Cprofile-use also read the merged PGO profile (by its sha256);
- the test run: the compiled tests (by their compile's key) and its own command line, so
  arguments after `--` (a skip list) key the run and not the compile;
- llvm-bolt (bolt-optimize): the binary it rewrites, the BOLT profile, its flags, the tool;
- llvm-objcopy (strip-relocations): the binary it strips, the sections named, the tool;
- a callgrind count (speed gate): the binaries of the variant, the workload, what the
  workloads see (env, stdin, workdir, inputs), callgrind's arguments, the image's valgrind.

The sources are keyed without orchestrator's own config file where it lies in the crate
(`config_member`): it travels with the sources (reproduce puts it back there), but cargo
and rustc never read it, and a change of a setting no build reads (bench.runs, the gate's
policy) must not rebuild anything. The merged PGO profile has its own store keyed by
PgoPlan.profile_key, which hashes the whole snapshot; `pgo_key` keys the same profile
without the config, so a config-only change skips the instrumented build, training and
merge too.
"""

from __future__ import annotations

import functools
import hashlib
import io
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from orchestrator.config.declarations.kinds import Run
from orchestrator.model.hashing import content_hash
from orchestrator.model.verdict.callgrind import CALLGRIND_ARGS
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.plan.c_code import C_OFF, C_OFF_GENERATE
from orchestrator.plan.cargo_commands import CargoCommand
from orchestrator.plan.gate import COUNT_SCRIPT

# Bumped when what a cached step leaves behind, or how it is keyed, changes: old entries
# are then never looked up again.
STEP_CACHE_VERSION = 1


def config_member(config_path: Path, crate_dir: Path) -> str:
    """The config file's path inside the source snapshot ("src/<relative>"), or "" when
    it does not lie inside the crate."""
    if not config_path.is_relative_to(crate_dir):
        return ""
    return f"src/{config_path.relative_to(crate_dir).as_posix()}"


@functools.lru_cache(maxsize=8)
def sources_digest(archive: bytes, config: str) -> str:
    """sha256 over the snapshot's members (name, kind, mode, link, bytes) but `config`."""
    digest = hashlib.sha256()
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar:
            if member.name == config:
                continue
            header = f"{member.name}\0{member.type!r}\0{member.mode}\0{member.linkname}\0"
            digest.update(header.encode())
            handle = tar.extractfile(member) if member.isfile() else None
            data = handle.read() if handle is not None else b""
            digest.update(f"{len(data)}\0".encode())
            digest.update(data)
    return digest.hexdigest()


def _cargo_inputs(plan: BuildPlan, command: CargoCommand, config: str) -> dict[str, Any]:
    """What any cargo command of the plan reads, besides its own outputs' names."""
    # The build container's own environment is the final variant's; a command sets the
    # same names, but whatever it does not override is read too.
    container = {k: v for k, v in plan.build.environment.items() if k not in command.environment}
    return {
        "version": STEP_CACHE_VERSION,
        "sources": sources_digest(plan.source.archive, config),
        "cargo_lock_sha256": plan.source.cargo_lock_sha256,
        "toolchain": plan.toolchain.flavor_view(plan.flavor, plan.arch),
        "base_image_input_hash": plan.base_image.input_hash,
        "image_input_hash": plan.image.input_hash,
        "packages": dict(plan.packages),
        "unpack": dict(plan.unpack),
        "rust_target": plan.rust_target,
        "cargo": list(command.argv),
        "environment": dict(command.environment),
        "container_environment": container,
        # What build scripts' `git` answers; absent without a repository, as keys were
        **({"git": plan.source.git.dump()} if plan.source.git is not None else {}),
    }


def baseline_key(plan: BuildPlan, config: str = "") -> str:
    """What the baseline build reads: sources, Cargo.lock, the toolchain image and what
    is unpacked into it, its cargo command line and environment (rust target, features,
    rustflags with the remap prefixes, SOURCE_DATE_EPOCH), and the binaries it keeps."""
    baseline = plan.variants["baseline"]
    return content_hash(
        {
            "kind": "step/build-baseline",
            **_cargo_inputs(plan, baseline.build, config),
            "binaries": dict(baseline.binaries),
        }
    )


def release_key(plan: BuildPlan, config: str = "") -> str:
    """The release-profile build: as the baseline, with its own flags (target-cpu)."""
    release = plan.variants["release"]
    return content_hash(
        {
            "kind": "step/build-release",
            **_cargo_inputs(plan, release.build, config),
            "binaries": dict(release.binaries),
        }
    )


def optimized_key(plan: BuildPlan, profile_sha256: str | None, config: str = "") -> str:
    """The optimized build: its cargo command (the relocation flags for BOLT and
    -Cprofile-use are in its rustflags) and the merged PGO profile it reads, by content
    (None without PGO)."""
    optimized = plan.variants["optimized"]
    return content_hash(
        {
            "kind": "step/build-optimized",
            **_cargo_inputs(plan, optimized.build, config),
            "binaries": dict(optimized.binaries),
            "pgo_profile_sha256": profile_sha256 if plan.pgo is not None else None,
        }
    )


def c_off_key(plan: BuildPlan, profile_sha256: str | None, config: str = "") -> str:
    """The build with [c_code] mode off: its cargo command and, with PGO, the merged
    profile it reads, by content."""
    c_off = plan.variants[C_OFF]
    return content_hash(
        {
            "kind": "step/build-c-off",
            **_cargo_inputs(plan, c_off.build, config),
            "binaries": dict(c_off.binaries),
            "pgo_profile_sha256": profile_sha256 if reads_profile(plan, c_off.build) else None,
        }
    )


def pgo_key(plan: BuildPlan, config: str = "") -> str:
    """The merged PGO profile: the instrumented build's inputs, the workloads and what they
    see (env, stdin, workdir, inputs), the profiling container's image, and the merge."""
    if plan.pgo is None:
        raise ValueError("internal: a PGO key for a plan without PGO")
    generate = plan.variants["pgo-generate"]
    off = plan.variants.get(C_OFF_GENERATE)  # trained beside it ([c_code] mode judged)
    return content_hash(
        {
            "kind": "step/pgo-merge",
            **_cargo_inputs(plan, generate.build, config),
            "binaries": dict(generate.binaries),
            **(
                {"c_off": [list(off.build.argv), dict(off.build.environment), dict(off.binaries)]}
                if off is not None
                else {}
            ),
            "workloads": [w.shape() for w in plan.workloads],
            "runner": list(plan.runner),
            "run": plan.run.as_dict(),
            "merge": list(plan.pgo.merge_argv),
            "profile_file_pattern": plan.pgo.profile_file_pattern,
        }
    )


def reads_profile(plan: BuildPlan, command: CargoCommand) -> bool:
    """Whether `command` reads the merged PGO profile (-Cprofile-use in its rustflags)."""
    if plan.pgo is None:
        return False
    flags = command.environment.get("CARGO_ENCODED_RUSTFLAGS", "")
    return f"-Cprofile-use={plan.pgo.merged}" in flags.split("\x1f")


def cargo_test_build_key(plan: BuildPlan, profile_sha256: str | None, config: str = "") -> str:
    """`cargo test --no-run`: its command line (the test args before "--" only) and
    environment with everything a build reads; the merged PGO profile's sha256 only where
    its rustflags read it. No target-cpu unless the command has one: levels whose test
    command is the same share one compile."""
    command = plan.test_build
    return content_hash(
        {
            "kind": "step/test-build",
            **_cargo_inputs(plan, command, config),
            "pgo_profile_sha256": profile_sha256 if reads_profile(plan, command) else None,
        }
    )


def cargo_test_key(plan: BuildPlan, profile_sha256: str | None, config: str = "") -> str:
    """The test run: the compiled tests (by the key of the compile that made them) and the
    whole `cargo test` command line, harness args (a skip list) included, and environment."""
    command = plan.test
    return content_hash(
        {
            "kind": "step/test",
            "version": STEP_CACHE_VERSION,
            "test_build": cargo_test_build_key(plan, profile_sha256, config),
            "cargo": list(command.argv),
            "environment": dict(command.environment),
        }
    )


def bolt_optimize_key(
    plan: BuildPlan, *, binary_sha256: str, profile_sha256: str, argv: Sequence[str]
) -> str:
    """One llvm-bolt rewrite: the binary and profile it reads, by content, its whole
    command line (flags, debug-info flag, paths), and the toolchain and image it runs in."""
    return content_hash(
        {
            "kind": "step/bolt-optimize",
            "version": STEP_CACHE_VERSION,
            "binary_sha256": binary_sha256,
            "profile_sha256": profile_sha256,
            "argv": list(argv),
            "toolchain": plan.toolchain.flavor_view(plan.flavor, plan.arch),
            "image_input_hash": plan.image.input_hash,
            "packages": dict(plan.packages),
            "unpack": dict(plan.unpack),
        }
    )


def strip_key(plan: BuildPlan, *, binary_sha256: str, argv: Sequence[str]) -> str:
    """One llvm-objcopy run removing a binary's static relocations: the binary by content,
    the whole command line (the sections, paths), and the toolchain and image it runs in."""
    return content_hash(
        {
            "kind": "step/strip-relocations",
            "version": STEP_CACHE_VERSION,
            "binary_sha256": binary_sha256,
            "argv": list(argv),
            "toolchain": plan.toolchain.flavor_view(plan.flavor, plan.arch),
            "image_input_hash": plan.image.input_hash,
            "packages": dict(plan.packages),
            "unpack": dict(plan.unpack),
        }
    )


def bolt_profile_inputs(plan: BuildPlan, mode: str, binary: str = "") -> str:
    """What a BOLT profile of a binary (stored per binary sha256 and mode) was collected
    from: the workloads of that binary (the main one unless named) and what they see, how
    it was profiled (the runner, instrumentation arguments, sampling repeats), the tools
    and the image."""
    bolt = plan.bolt
    binary = binary or plan.binary
    return content_hash(
        {
            "kind": "bolt-profile-inputs",
            "version": STEP_CACHE_VERSION,
            "mode": mode,
            "workloads": [w.shape() for w in plan.workloads if w.binary_or(plan.binary) == binary],
            "run": plan.run.as_dict(),
            "runner": list(plan.runner),
            "instrument_args": list(bolt.instrument_args) if bolt else [],
            "sample_repeat": bolt.sample_repeat if bolt else 0,
            "tools": dict(bolt.tools) if bolt else {},
            "image_input_hash": plan.image.input_hash,
        }
    )


def count_key(
    plan: BuildPlan, *, binaries: Mapping[str, str], workload: Run, container: Mapping[str, str]
) -> str:
    """One callgrind count of one workload: the sha256 of every binary of the variant (a
    workload may start another), the workload, what it sees (the run's env, stdin, workdir,
    inputs; the container's environment), callgrind's arguments and the image (valgrind)."""
    return content_hash(
        {
            "kind": "step/callgrind-count",
            "version": STEP_CACHE_VERSION,
            "binaries_sha256": dict(binaries),
            "workload": workload.shape(),
            "run": plan.run.as_dict(),
            "container_environment": dict(container),
            "callgrind": [COUNT_SCRIPT, *CALLGRIND_ARGS],
            "image_input_hash": plan.image.input_hash,
            "packages": dict(plan.packages),
        }
    )

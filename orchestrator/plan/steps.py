"""The names of the steps a build can have, in the order they can run.

A plan is an ordered tuple of `Step`s; the executor runs exactly those, looking each
one up by its `StepName` (execute/build.py's table). A unit test keeps the two in step:
every name has an executor and every executor a name.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from orchestrator.flavors import DeviceCode
from orchestrator.plan.gate import GatePlan


class StepName(StrEnum):
    BASE_IMAGE = "base-image"
    TOOLCHAIN_IMAGE = "toolchain-image"
    TOOLCHAIN_CHECK = "toolchain-check"
    GLIBC_VIEW = "glibc-view"
    GPU_TARGETS = "gpu-targets"
    FETCH_CRATES = "fetch-crates"
    BUILD_BASELINE = "build-baseline"
    BUILD_RELEASE = "build-release"
    PGO_INSTRUMENT = "pgo-instrument"
    PGO_TRAIN = "pgo-train"
    PGO_MERGE = "pgo-merge"
    BUILD_OPTIMIZED = "build-optimized"
    BUILD_C_OFF = "build-c-off"
    TEST_BUILD = "test-build"
    TEST = "test"
    BOLT_PROFILE = "bolt-profile"
    BOLT_OPTIMIZE = "bolt-optimize"
    DEVICE_CODE = "device-code"
    VALIDATE = "validate"
    SPEED_GATE = "speed-gate"
    STRIP_RELOCATIONS = "strip-relocations"
    PORTABILITY = "portability"
    DISTROS = "distros"
    SBOM = "sbom"
    EXTRACT = "extract"
    PUBLISH = "publish"


# BOLT may fail without failing the build (bolt.policy = "fallback"): these steps then
# give way to the unBOLTed binary.
BOLT_STEPS = frozenset({StepName.BOLT_PROFILE, StepName.BOLT_OPTIMIZE})


@dataclass(frozen=True)
class Step:
    name: StepName
    title: str
    network: bool = False


def steps_of(
    *,
    binary: str,  # the main binary, copied out
    glibc_floor: str,
    workloads: int,  # how many [train] workloads PGO trains on
    tests: bool,  # whether `cargo test` runs ([test] enabled)
    base_reference: str,
    image_reference: str,
    target_cpu: str,
    device_code: DeviceCode | None,
    pgo: bool,
    bolt: tuple[str, tuple[str, ...]] | None,  # (mode, llvm-bolt flags) when BOLT runs
    optimized: bool,
    release: bool = True,  # the release-profile build has a reader (cargo_flags.release_needed)
    test_cpu: str = "",  # set when `cargo test` runs another level's flags than the shipped
    gate: GatePlan | None = None,
    c_off: str = "",  # the gate's name for the build with [c_code] mode off, when it has one
    distros: tuple[str, ...] = (),  # the Debian releases the binary runs in after validation
    glibc_view: str = "",  # the sysroot's glibc, when the floor is older and needs a view
) -> tuple[Step, ...]:
    """The steps of one build, in the order they run, each titled for the log."""
    steps = [
        Step(StepName.BASE_IMAGE, f"base rootfs image {base_reference}"),
        Step(StepName.TOOLCHAIN_IMAGE, f"toolchain image {image_reference}"),
        Step(
            StepName.TOOLCHAIN_CHECK,
            f"rustc, llvm-profdata and llvm-bolt share one LLVM major; rustc knows {target_cpu}",
        ),
    ]
    if glibc_view:
        steps.append(
            Step(
                StepName.GLIBC_VIEW,
                f"glibc {glibc_view} libraries as glibc {glibc_floor} (newer symbol "
                "versions hidden from the linker)",
            )
        )
    if device_code:
        targets = ", ".join(device_code.targets)
        steps.append(Step(StepName.GPU_TARGETS, f"{device_code.kind} compiler supports {targets}"))
    steps += [
        Step(StepName.FETCH_CRATES, "vendor crates listed in Cargo.lock", network=True),
        Step(StepName.BUILD_BASELINE, "plain cargo build --release (the yardstick)"),
    ]
    if release:
        steps.append(Step(StepName.BUILD_RELEASE, f"release profile, target-cpu {target_cpu}"))
    if pgo:
        # With [c_code] mode judged, its mode-off build is instrumented and trained too
        both = ", and the one with [c_code] mode off" if c_off else ""
        steps += [
            Step(StepName.PGO_INSTRUMENT, f"instrumented build (-Cprofile-generate){both}"),
            Step(
                StepName.PGO_TRAIN,
                f"run {workloads} workloads in the profiling container"
                + (" on each instrumented build" if c_off else ""),
            ),
            Step(StepName.PGO_MERGE, "merge .profraw files with llvm-profdata"),
        ]
    if optimized:
        what = " + ".join(
            x for x, on in (("PGO", pgo), ("relocations for BOLT", bolt is not None)) if on
        )
        steps.append(Step(StepName.BUILD_OPTIMIZED, f"release profile + {what}"))
    if c_off:
        steps.append(
            Step(
                StepName.BUILD_C_OFF,
                f"{c_off}: [c_code] mode off (rustc's fat LTO, the C compiled by gcc"
                f"{', the merged PGO profile' if pgo else ''}), for the speed gate to judge",
            )
        )
    if tests:  # off only with a reason, which build.json records
        what = f"target-cpu {test_cpu}, shared by the levels" if test_cpu else "the shipped flags"
        # Two steps, each cached by its own inputs: arguments after `--` reach only the run,
        # so a changed skip list runs the tests again without compiling them again.
        steps += [
            Step(
                StepName.TEST_BUILD, f"compile the tests: cargo test --no-run --release with {what}"
            ),
            Step(StepName.TEST, f"run the tests: cargo test --release with {what}"),
        ]
    if bolt:
        mode, flags = bolt
        steps += [
            Step(StepName.BOLT_PROFILE, f"profile the binary for BOLT (mode {mode})"),
            Step(StepName.BOLT_OPTIMIZE, "llvm-bolt " + " ".join(flags)),
        ]
    if device_code:
        targets = ", ".join(device_code.targets)
        steps.append(Step(StepName.DEVICE_CODE, f"the binary embeds device code for {targets}"))
    steps += [
        Step(StepName.VALIDATE, "outputs of the shipped binary equal the baseline's"),
    ]
    if gate:
        steps.append(
            Step(
                StepName.SPEED_GATE,
                f"count {len(gate.workloads)} workloads of each variant under callgrind; "
                f"ship the best (policy {gate.policy}, min_gain {gate.min_gain:.1%})",
            )
        )
    if bolt:  # the optimized build linked with --emit-relocs, which only BOLT reads
        steps.append(
            Step(
                StepName.STRIP_RELOCATIONS,
                "static relocations that --emit-relocs kept for BOLT removed from every "
                "shipped binary that still has them; validated again",
            )
        )
    steps += [
        Step(
            StepName.PORTABILITY,
            f"glibc symbol versions (floor {glibc_floor}), shared libraries, CPU features",
        ),
    ]
    if distros:
        steps.append(Step(StepName.DISTROS, "load and validate on " + ", ".join(distros)))
    steps += [
        Step(StepName.SBOM, "crate graph (cargo metadata) and toolchain packages"),
        Step(StepName.EXTRACT, f"copy {binary} out of the container"),
        Step(StepName.PUBLISH, "sign, checksums, build.json, atomic move; release provenance"),
    ]
    return tuple(steps)

"""The names of the steps a build can have, in the order they can run.

A plan is an ordered tuple of `Step`s; the executor runs exactly those, looking each
one up by its `StepName` (execute/build.py's table). A unit test keeps the two in step:
every name has an executor and every executor a name.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class StepName(StrEnum):
    BASE_IMAGE = "base-image"
    TOOLCHAIN_IMAGE = "toolchain-image"
    TOOLCHAIN_CHECK = "toolchain-check"
    GPU_TARGETS = "gpu-targets"
    FETCH_CRATES = "fetch-crates"
    BUILD_BASELINE = "build-baseline"
    BUILD_RELEASE = "build-release"
    PGO_INSTRUMENT = "pgo-instrument"
    PGO_TRAIN = "pgo-train"
    PGO_MERGE = "pgo-merge"
    BUILD_OPTIMIZED = "build-optimized"
    TEST = "test"
    BOLT_PROFILE = "bolt-profile"
    BOLT_OPTIMIZE = "bolt-optimize"
    DEVICE_CODE = "device-code"
    VALIDATE = "validate"
    PORTABILITY = "portability"
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

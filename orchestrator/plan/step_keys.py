"""Content keys of the steps the step cache may skip: a hash of exactly what a step reads.

Two targets whose step reads the same inputs get the same key and share one run of it:
the plain `cargo build --release` baseline of `cpu` and `cpu-v3` (same features) reads
no target-cpu, so it is built once per release and reused across runs. What only the
running step knows (the vendored crates' digest) is checked against the entry when it
is used (host/step_cache.py). Pure: no I/O.
"""

from __future__ import annotations

from orchestrator.model.hashing import content_hash
from orchestrator.plan.build_plan import BuildPlan

# Bumped when what a cached step leaves behind, or how it is keyed, changes: old entries
# are then never looked up again.
STEP_CACHE_VERSION = 1


def baseline_key(plan: BuildPlan) -> str:
    """What the baseline build reads: sources, Cargo.lock, the toolchain image and what
    is unpacked into it, its cargo command line and environment (rust target, features,
    rustflags with the remap prefixes, SOURCE_DATE_EPOCH), and the binaries it keeps."""
    baseline = plan.variants["baseline"]
    command = baseline.build
    # The build container's own environment is the final variant's; the baseline's
    # command sets the same names, but whatever it does not override is read too.
    container = {k: v for k, v in plan.build.environment.items() if k not in command.environment}
    return content_hash(
        {
            "kind": "step/build-baseline",
            "version": STEP_CACHE_VERSION,
            "source_archive_sha256": plan.source.archive_sha256,
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
            "binaries": dict(baseline.binaries),
        }
    )

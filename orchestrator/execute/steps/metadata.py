"""cargo metadata of the crate as this build resolves it (features, target), read once."""

from __future__ import annotations

import json
from typing import Any

from orchestrator.execute.steps.commands import fetch_file, run
from orchestrator.execute.steps.pipeline import Pipeline
from orchestrator.model.layout import PATHS
from orchestrator.progress.reporter import StepLog


def cargo_metadata(pipeline: Pipeline, log: StepLog, step: str) -> dict[str, Any]:
    """The resolved graph for the flavor's features and target; later steps reuse it."""
    if pipeline.state.metadata is not None:
        return pipeline.state.metadata
    plan, options = pipeline.plan, pipeline.options
    settings = options.settings_for(plan.flavor)
    features = ["--features", ",".join(settings.features)] if settings.features else []
    if not settings.default_features:
        features.append("--no-default-features")
    metadata_path = f"{PATHS.out}/cargo-metadata.json"
    # stdout to a file: cargo's warnings go to stderr and must not corrupt the JSON.
    cargo = [
        plan.toolchain.tool("cargo"),
        "metadata",
        "--format-version",
        "1",
        "--offline",
        "--locked",
        "--manifest-path",
        f"{PATHS.src}/Cargo.toml",
        "--filter-platform",
        plan.rust_target,
        *features,
    ]
    run(
        pipeline.box,
        ["sh", "-c", 'exec "$@" > ' + metadata_path, "sh", *cargo],
        log,
        step,
        environment={"CARGO_HOME": PATHS.cargo_home},
    )
    local = fetch_file(pipeline.box, metadata_path, pipeline.scratch / step)
    metadata: dict[str, Any] = json.loads(local.read_text())
    local.unlink()
    pipeline.state.metadata = metadata
    return metadata

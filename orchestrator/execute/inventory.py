"""What went into an artifact and what it needs: source commit, crates, packages, glibc."""

from __future__ import annotations

import json

from orchestrator.execute.device import check_cudarc
from orchestrator.execute.pipeline import Pipeline, fetch_file, run
from orchestrator.host.bootstrap import deb_identity, read_manifest
from orchestrator.host.source import registry_crates
from orchestrator.model.layout import PATHS
from orchestrator.progress.reporter import StepLog
from orchestrator.runtime.images import (
    package_set_dir,
)
from orchestrator.supply.sbom import Crate, DebPackage, crates_from_metadata


def inventory(pipeline: Pipeline, log: StepLog) -> tuple[list[Crate], list[DebPackage]]:
    """What went into the binary (crates) and what built it (Debian packages)."""
    plan, box, options = pipeline.plan, pipeline.box, pipeline.options
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
        box,
        ["sh", "-c", 'exec "$@" > ' + metadata_path, "sh", *cargo],
        log,
        "sbom",
        environment={"CARGO_HOME": PATHS.cargo_home},
    )
    metadata = json.loads(fetch_file(box, metadata_path, pipeline.scratch).read_text())
    check_cudarc(pipeline, metadata, log)
    lock = (options.crate_dir / "Cargo.lock").read_text()
    checksums = {(c.name, c.version): c.checksum for c in registry_crates(lock)}
    crates = crates_from_metadata(metadata, checksums, options.package_name)
    listing = run(
        box,
        ["dpkg-query", "--show", "--showformat", "${Package} ${Version} ${Architecture}\n"],
        log,
        "sbom",
        keep_output=True,
    )
    hashes: dict[tuple[str, str, str], str] = {}
    recorded = read_manifest(
        package_set_dir(plan.base, plan.packages, options.cache_dir, plan.apt_sources, plan.unpack)
    )
    for entry in recorded or ():
        hashes[deb_identity(entry.file)] = entry.sha256
    packages = [
        DebPackage(name, version, arch, hashes.get((name, version, arch)))
        for name, version, arch in (line.split() for line in listing.splitlines() if line)
    ]
    return crates, packages


def sbom(pipeline: Pipeline, log: StepLog) -> None:
    crates, packages = inventory(pipeline, log)
    pipeline.state.crates, pipeline.state.packages = crates, packages
    log.detail = f"{len(crates)} crates, {len(packages)} toolchain packages"

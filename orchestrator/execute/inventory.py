"""What went into an artifact and what it needs: source commit, crates, packages, glibc."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.execute.pipeline import Pipeline, fetch_file, run
from orchestrator.host.bootstrap import deb_identity, read_manifest
from orchestrator.host.source import registry_crates
from orchestrator.host.system import git
from orchestrator.model.layout import PATHS
from orchestrator.model.portability import Portability
from orchestrator.model.portability import parse as parse_portability
from orchestrator.progress import StepLog
from orchestrator.runtime.images import (
    package_set_dir,
)
from orchestrator.supply.sbom import Crate, DebPackage, crates_from_metadata


def source_identity(crate_dir: Path) -> dict[str, object]:
    """The git commit the sources come from, and whether the tree had local changes."""

    commit = git(crate_dir, "rev-parse", "HEAD")
    status = git(crate_dir, "status", "--porcelain", "--", ".")
    return {"git_commit": commit, "dirty": bool(status) if status is not None else None}


def portability_report(pipeline: Pipeline, binary: str, log: StepLog) -> Portability:
    plan, box = pipeline.plan, pipeline.box
    codegen = [f for f in plan.rustflags if f.startswith(("-Ctarget-cpu", "-Ctarget-feature"))]
    return parse_portability(
        target=plan.rust_target,
        target_cpu=plan.target_cpu,
        version_info=run(
            box,
            ["readelf", "--version-info", "--wide", binary],
            log,
            "portability",
            keep_output=True,
        ),
        dynamic=run(
            box, ["readelf", "--dynamic", "--wide", binary], log, "portability", keep_output=True
        ),
        rustc_cfg=run(
            box,
            [
                plan.toolchain.tool("rustc"),
                "--print",
                "cfg",
                "--target",
                plan.rust_target,
                *codegen,
            ],
            log,
            "portability",
            keep_output=True,
        ),
    )


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

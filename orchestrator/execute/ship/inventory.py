"""What went into an artifact and what it needs: source commit, crates, packages, glibc."""

from __future__ import annotations

from orchestrator.execute.steps.commands import run
from orchestrator.execute.steps.metadata import cargo_metadata
from orchestrator.execute.steps.pipeline import Pipeline
from orchestrator.host.bootstrap import deb_identity, read_manifest
from orchestrator.host.source import registry_crates
from orchestrator.progress.reporter import StepLog
from orchestrator.runtime.images import (
    package_set_dir,
)
from orchestrator.supply.sbom import Crate, DebPackage, crates_from_metadata


def inventory(pipeline: Pipeline, log: StepLog) -> tuple[list[Crate], list[DebPackage]]:
    """What went into the binary (crates) and what built it (Debian packages)."""
    plan, box, options = pipeline.plan, pipeline.box, pipeline.options
    metadata = cargo_metadata(pipeline, log, "sbom")
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

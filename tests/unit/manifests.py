"""A build.json made by the code that makes it (execute.publish), from a hand-set
BuildState: tests of readers (provenance, lock, verify) read what the writer writes."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Any, cast

from rich.console import Console

from orchestrator.config.resolve.options import Options
from orchestrator.config.resolve.toolchains import ToolchainReport
from orchestrator.execute.ship.publish import _manifest
from orchestrator.execute.steps.pipeline import Pipeline
from orchestrator.execute.steps.profiles import ProfileRecord
from orchestrator.model.documents.records import BuildManifest, FileDigest
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.progress.reporter import Reporter
from orchestrator.runtime.images import ImageOutcome
from orchestrator.supply.sbom import Crate, DebPackage


def produced_manifest(options: Options, plan: BuildPlan, tmp_path: Path) -> BuildManifest:
    binary = tmp_path / plan.binary
    binary.write_bytes(b"\x7fELF demo binary")
    vendor = tmp_path / "vendor.tar"
    vendor.write_bytes(b"vendored crates")
    profile = tmp_path / "merged.profdata"
    profile.write_bytes(b"profile")
    with ExitStack() as stack:
        pipeline = Pipeline(
            options=options,
            plan=plan,
            engine=cast(Any, None),
            reporter=Reporter(
                Console(file=stack.enter_context((tmp_path / "o").open("w"))), tmp_path / "logs"
            ),
            signer=cast(Any, None),
            stack=stack,
            scratch=tmp_path,
            staging=tmp_path,
            started="2026-11-21T10:00:00+00:00",
        )
        state = pipeline.state
        labels = {"org.orchestrator.rootfs-sha256": "23" * 32}
        state.base = ImageOutcome(plan.base_image.reference, "sha256:b", "b" * 64, False, labels)
        state.image = ImageOutcome(
            plan.image.reference, "sha256:t", plan.image.input_hash, True, {}
        )
        state.toolchain = ToolchainReport(
            {"release": "1.96.0"}, "cargo 1.96.0", "LLVM 22", "BOLT 22", 22
        )
        state.vendor = vendor
        state.pgo = ProfileRecord(profile, "89" * 32, 7, False, {"functions": 12})
        state.packages = [DebPackage("gcc", "4:14.2.0-1", "amd64", "45" * 32)]
        state.crates = [Crate("either", "1.15.0", "MIT", "67" * 32, "registry")]
        state.variants = {"baseline": FileDigest(sha256="aa" * 32, size=3)}
        state.validation = {"command": [], "compared": False}
        state.bolt_report = {"policy": "fallback", "flags": [], "applied": False}
        return _manifest(pipeline, binary)

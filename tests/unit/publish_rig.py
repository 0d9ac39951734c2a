"""A pipeline at its last two steps (extract, publish), with every earlier step's result in
place: what the publish tests and the disk-full test drive."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

from orchestrator.config.resolve.options import Options
from orchestrator.config.resolve.toolchains import ToolchainReport
from orchestrator.execute.ship import publish
from orchestrator.execute.steps.pipeline import BIN_DIR
from orchestrator.execute.steps.profiles import ProfileRecord
from orchestrator.host.source import CRATES_IO
from orchestrator.host.staging import staging_area
from orchestrator.model.hashing import sha256_bytes
from orchestrator.runtime.images import ImageOutcome
from orchestrator.supply.attest import Signer
from orchestrator.supply.sbom import Crate, DebPackage

from .execute_rig import EITHER_SUM, Rig, make_rig
from .fakes import FakeEngine


def ready_to_publish(options: Options, stack: ExitStack, tmp_path: Path, signer: Signer) -> Rig:
    """A rig whose pipeline state holds what the steps before `extract` leave behind."""
    engine = FakeEngine(missing=lambda path: f"binary {path}".encode())
    staging = stack.enter_context(staging_area(options.artifacts_dir, engine.session))
    rig = make_rig(options, stack, tmp_path, engine=engine, staging=staging, signer=signer)
    plan, state = rig.pipeline.plan, rig.pipeline.state
    vendor, profile = tmp_path / "vendor.tar", tmp_path / "merged.profdata"
    vendor.write_bytes(b"vendored")
    profile.write_bytes(b"pgo profile")
    state.base = ImageOutcome(plan.base_image.reference, "sha256:b", "b" * 64, False, {})
    state.toolchain = ToolchainReport(
        {"release": "1.96.0"}, "cargo 1.96.0", "LLVM 22", "BOLT 22", 22
    )
    state.vendor = vendor
    state.unbolted = f"{BIN_DIR}/optimized"
    state.shipped = state.bolted = f"{BIN_DIR}/optimized.bolt"
    state.pgo = ProfileRecord(profile, sha256_bytes(b"pgo profile"), 11, False, {"functions": 3})
    state.bolt_report = {  # every key the BOLT steps write must fit build.json's record
        "policy": "fallback",
        "flags": [],
        "mode": "lbr",
        "applied": True,
        "sample_gate": {"samples": 4391, "min_samples": 20000},
        "size": {"before": 100, "after": 90, "growth": 0.9},
    }
    state.crates = [Crate("either", "1.15.0", "MIT", EITHER_SUM, CRATES_IO)]
    state.packages = [DebPackage("gcc", "4:14.2.0-1", "amd64", "45" * 32)]
    return rig


def extract_and_publish(rig: Rig) -> None:
    reporter = rig.pipeline.reporter
    with reporter.step("extract", "extract") as log:
        publish.extract(rig.pipeline, log)
    with reporter.step("publish", "publish") as log:
        publish.publish(rig.pipeline, log)

"""build.json says what the published binary carries: when the speed gate ships the
release profile, PGO and BOLT were candidates (BOLT's binary validated: `applied`) but
neither is `shipped`, and the optimizations list only what the binary has."""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path

import pytest

from orchestrator.model.documents.records import GateInfo
from orchestrator.supply.attest import Signer
from orchestrator.supply.minisign import SecretKey

from .execute_rig import make_options
from .publish_rig import extract_and_publish, ready_to_publish


@pytest.mark.parametrize(
    ("shipped", "pgo", "bolt", "optimizations"),
    [
        ("release", False, False, ["lto-fat"]),
        ("pgo", True, False, ["lto-fat", "pgo"]),
        ("pgo-bolt", True, True, ["lto-fat", "pgo", "bolt"]),
    ],
)
def test_the_records_say_what_the_shipped_binary_carries(
    project: Path,
    tmp_path: Path,
    shipped: str,
    pgo: bool,
    bolt: bool,
    optimizations: list[str],
) -> None:
    options = make_options(project)
    with ExitStack() as stack:
        rig = ready_to_publish(options, stack, tmp_path, Signer(SecretKey.generate(), True, "t"))
        rig.pipeline.state.gate = GateInfo(
            policy="best", min_gain=0.01, metric="cycles", shipped=shipped
        )
        extract_and_publish(rig)
    plan = rig.pipeline.plan
    manifest = json.loads(
        (options.artifacts_dir / plan.release_dir / plan.artifact_dir / "build.json").read_text()
    )
    assert manifest["bolt"]["applied"] is True  # BOLT's binary validated: a candidate
    assert manifest["bolt"]["shipped"] is bolt
    assert manifest["pgo"]["shipped"] is pgo
    assert manifest["artifact"]["optimizations"] == optimizations

"""What a plan without the release-profile build leaves for `orchestrator bench`: the
variants that were built, never a binary of a build that did not run."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

from orchestrator.model.documents.records import BuildManifest, read_record
from orchestrator.supply.attest import Signer
from orchestrator.supply.minisign import SecretKey

from .execute_rig import make_options
from .publish_rig import extract_and_publish, ready_to_publish


def _published_variants(options_change: dict[str, str], project: Path, tmp_path: Path) -> set[str]:
    options = replace(make_options(project), **options_change)  # type: ignore[arg-type]
    with ExitStack() as stack:
        rig = ready_to_publish(options, stack, tmp_path, Signer(SecretKey.generate(), True, "t"))
        extract_and_publish(rig)
        published = rig.pipeline.state.published
    assert published is not None
    return set(read_record(published / "build.json", BuildManifest).variants)


def test_without_a_gate_the_release_build_is_neither_planned_nor_kept(
    project: Path, tmp_path: Path
) -> None:
    assert _published_variants({"gate_policy": "off"}, project, tmp_path) == {
        "baseline",
        "pgo",
        "pgo-bolt",
    }


def test_with_the_gate_the_release_build_is_kept_for_bench(project: Path, tmp_path: Path) -> None:
    assert _published_variants({}, project, tmp_path) == {"baseline", "release", "pgo", "pgo-bolt"}

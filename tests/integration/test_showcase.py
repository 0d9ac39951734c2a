"""examples/minilang, the branchy showcase: built with the speed gate, whose decision must
follow from the counts it recorded, and counted by `bench --metric callgrind` twice, with
identical counts (a single-threaded program with no clock)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import pytest

from orchestrator.model.verdict.callgrind import Counts
from orchestrator.model.verdict.gate import decide
from tests.integration.conftest import REPO, Run, managed_containers, orchestrator

pytestmark = [pytest.mark.integration, pytest.mark.extended]

CONFIG = REPO / "examples" / "minilang" / "orchestrator.toml"
RELEASE = "minilang-0.1.0"
ARTIFACT = f"{RELEASE}-linux-x86_64-cpu"


@dataclass(frozen=True)
class Showcase:
    run: Run
    artifacts: Path

    @property
    def directory(self) -> Path:
        return self.artifacts / RELEASE / ARTIFACT

    def manifest(self) -> dict[str, Any]:
        return dict(json.loads((self.directory / "build.json").read_text()))


@pytest.fixture(scope="module")
def showcase(
    docker_client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory
) -> Showcase:
    artifacts = tmp_path_factory.mktemp("minilang")
    run = orchestrator(["build", "--config", str(CONFIG), "--artifacts-dir", str(artifacts)])
    assert run.returncode == 0, run.output
    assert managed_containers(docker_client) == []
    return Showcase(run, artifacts)


def test_the_gate_ships_what_its_own_counts_pick(showcase: Showcase) -> None:
    manifest = showcase.manifest()
    gate = manifest["gate"]
    assert gate["workloads"] == 4 and gate["policy"] == "best"
    counts = {
        name: [Counts(cycles) for cycles in variant["per_workload"]]
        for name, variant in gate["variants"].items()
    }
    bolt = manifest["bolt"]
    # BOLT may have failed without failing the build (bolt.policy fallback), e.g. past
    # bolt.max_growth; then only release and pgo were candidates.
    candidates = ["release", "pgo", "pgo-bolt"] if bolt["applied"] else ["release", "pgo"]
    assert set(gate["variants"]) == {"baseline", *candidates}  # build.json sorts keys
    again = decide(counts, candidates, policy="best", min_gain=gate["min_gain"])
    assert gate["shipped"] == again.shipped
    assert gate["reasons"] == list(again.reasons)
    assert manifest["variants"][gate["shipped"]]["sha256"] == manifest["artifact"]["sha256"]
    assert manifest["validation"]["identical"] is True
    # A BOLTed binary stayed within bolt.max_growth, or BOLT "failed" and did not ship.
    if bolt["applied"]:
        assert bolt["size"]["growth"] <= 1.5
    else:
        assert bolt["fallback_reason"]
    # A sampled profile with fewer samples than bolt.min_samples: instrumented instead.
    run_log = json.loads((showcase.directory / "logs" / "run.json").read_text())
    if run_log["bolt_sample_gate"] is not None:
        samples = run_log["bolt_sample_gate"]["samples"]
        assert bolt["mode"] == "instrument" or samples >= 20000


def test_callgrind_counts_are_identical_on_a_second_run(showcase: Showcase) -> None:
    env = {"ORCHESTRATOR_BENCH_COMMAND": "run,programs/fib.mini"}
    report = showcase.artifacts / RELEASE / "bench" / ARTIFACT / "bench.json"
    counted = []
    for _ in range(2):
        run = orchestrator(
            [
                "bench",
                "--config",
                str(CONFIG),
                "--metric",
                "callgrind",
                "--artifacts-dir",
                str(showcase.artifacts),
            ],
            env=env,
        )
        assert run.returncode == 0, run.output
        counted.append(json.loads(report.read_text())["counts"])
    assert counted[0] == counted[1]
    names = [variant["name"] for variant in counted[0]]
    bolted = ["pgo-bolt"] if showcase.manifest()["bolt"]["applied"] else []
    assert names == ["baseline", "release", "pgo", *bolted]
    assert all(len(variant["runs"]) == 5 for variant in counted[0])  # bench + 4 gate runs


def test_c_code_mode_ships_itself_off_where_rust_is_the_hot_code(
    docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    """minilang has no C: [c_code] lto-pgo only costs its Rust rustc's fat LTO. The build
    with the mode off, trained beside the mode's into one profile, counts fewer cycles
    (2.4% here when this was written) and ships, validated; build.json says so."""
    run = orchestrator(
        [
            "build",
            "--config",
            str(CONFIG),
            "--artifacts-dir",
            str(tmp_path),
            "--c-code",
            "lto-pgo",
            "--no-bolt",
        ]
    )
    assert run.returncode == 0, run.output
    manifest = json.loads((tmp_path / RELEASE / ARTIFACT / "build.json").read_text())
    gate, c_code = manifest["gate"], manifest["c_code"]
    assert set(gate["variants"]) == {"baseline", "release", "pgo", "pgo-c-off"}
    counts = {
        name: [Counts(cycles) for cycles in variant["per_workload"]]
        for name, variant in gate["variants"].items()
    }
    again = decide(
        counts,
        ["release", "pgo"],
        policy="best",
        min_gain=gate["min_gain"],
        alternative="pgo-c-off",
    )
    assert (gate["shipped"], gate["reasons"]) == (again.shipped, list(again.reasons))
    assert gate["shipped"] == "pgo-c-off", gate["reasons"]
    assert manifest["variants"]["pgo-c-off"]["sha256"] == manifest["artifact"]["sha256"]
    assert manifest["validation"]["identical"] is True
    assert c_code["shipped"] is False and c_code["compiled_with_clang"] is False
    assert "lto-fat" in manifest["artifact"]["optimizations"]
    assert "lto-cross-language" not in manifest["artifact"]["optimizations"]
    # Trained, not borrowed: the merged profile covers the mode-off build
    functions = manifest["pgo"]["profile"]["functions"]
    assert c_code["off_functions_without_profile"] <= 0.05 * functions
    assert managed_containers(docker_client) == []

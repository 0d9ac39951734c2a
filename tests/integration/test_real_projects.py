"""A workspace shaped like the crates users bring (tests/fixtures/workspace-project),
released with PGO and BOLT and reproduced bit for bit. What each part exercises:

- a committed relative symlink (HomebrewFormula -> pkg/brew): packed as a symlink;
- a workspace root as the crate, the member `wordfreq-cli` released, its binary `wordfreq`
  named differently from the package, the version inherited from the workspace;
- a second binary of the member (`wordgrep`) shipped in the same artifact: trained by a
  workload that names it, validated by a `validate.runs` entry, signed, in the SBOM, the
  lock and the provenance, reproduced bit for bit;
- a data file (data/corpus.txt) that training, validation and bench read by a path relative
  to the crate's root, `[train] env` and `[train] stdin`;
- data outside the crate (`[train] inputs`, tests/fixtures/workspace-data beside it) that a
  workload and a validation run read at /build/inputs, pinned in the lock and the vault,
  and taken from the vault by `reproduce` (the folder is moved away while it runs);
- the crate's .cargo/config.toml: an `[env]` value the binary prints and a `[build]
  rustflags` cfg it reports;
- a crate test that fails, skipped by `[test] args`;
- process spawning (the binary runs itself as a child) and non-UTF-8 output.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import pytest

from tests.integration.conftest import REPO, Run, managed_containers, orchestrator, release_copy

pytestmark = pytest.mark.integration

FIXTURE = REPO / "tests" / "fixtures" / "workspace-project"
DATA = REPO / "tests" / "fixtures" / "workspace-data"  # its [train] inputs, outside it
RELEASE = "wordfreq-0.4.0"
ARTIFACT = f"{RELEASE}-linux-x86_64-cpu"


@dataclass(frozen=True)
class WorkspaceRelease:
    run: Run
    project: Path  # a copy of the fixture outside git
    directory: Path  # the release folder

    @property
    def artifact(self) -> Path:
        return self.directory / ARTIFACT

    def manifest(self) -> dict[str, Any]:
        return dict(json.loads((self.artifact / "build.json").read_text()))


@pytest.fixture(scope="module")
def workspace_release(
    docker_client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory
) -> WorkspaceRelease:
    project = tmp_path_factory.mktemp("workspace") / "wordfreq"
    shutil.copytree(DATA, project.parent / DATA.name)  # where ../workspace-data points
    run, artifacts = release_copy(FIXTURE, project, docker_client)
    assert (project / "HomebrewFormula").is_symlink()  # copied as the link it is
    return WorkspaceRelease(run, project, artifacts / RELEASE)


def test_the_member_is_built_trained_on_repository_files_and_optimized(
    workspace_release: WorkspaceRelease,
) -> None:
    manifest = workspace_release.manifest()
    assert manifest["artifact"]["file"] == "wordfreq"
    cargo = manifest["flags"]["variants"]["optimized"]["cargo"]
    assert cargo[cargo.index("--package") + 1] == "wordfreq-cli"
    # Five workloads at the crate root (one reading stdin, one running wordgrep, one
    # reading an input) and two child processes: a .profraw from each process, none
    # overwritten.
    assert manifest["pgo"]["profile"]["raw_files"] == 7
    inputs = manifest["run"].pop("inputs")
    assert manifest["run"] == {
        "workdir": "/build/src",
        "env": {"WORDFREQ_TOP": "12"},
        "stdin": "/build/src/data/corpus.txt",
    }
    lock = json.loads((workspace_release.directory / "release.lock").read_text())
    (locked,) = lock["source"]["inputs"]
    assert inputs == {"corpus": locked["sha256"]}
    # The validation run that reads the input by ../inputs/... matched its baseline.
    reading = manifest["validation"]["runs"][2]
    assert reading["run"] == ["count", "../inputs/corpus/harbor.txt"]
    assert reading["identical"] and reading["stdout_bytes"] > 100
    assert manifest["bolt"]["applied"] is True
    validation = manifest["validation"]
    assert validation["compared"] and validation["identical"]
    assert validation["stdout_bytes"] > 100


def test_the_crates_cargo_config_reached_every_build(workspace_release: WorkspaceRelease) -> None:
    manifest = workspace_release.manifest()
    for name, variant in manifest["flags"]["variants"].items():
        assert variant["rustflags"][:2] == ["--cfg", "wordfreq_config_flags"], name
    # What the baseline and the shipped binary printed in validation, as logged.
    [log_file] = (workspace_release.artifact / "logs").glob("*-validate.log")
    log = log_file.read_text()
    for who in ("baseline-0", "optimized-0"):
        assert f"{who}> built with the crate's own .cargo/config.toml" in log
        assert f"{who}> config flags true" in log
        assert f"{who}> fingerprint \\x" in log  # raw bytes, shown escaped


def test_the_second_binary_ships_validated_signed_and_described(
    workspace_release: WorkspaceRelease,
) -> None:
    manifest = workspace_release.manifest()
    artifact = workspace_release.artifact
    [other] = manifest["artifact"]["other_binaries"]
    assert other["file"] == "wordgrep"
    assert (artifact / "wordgrep").is_file() and (artifact / "wordgrep.minisig").is_file()
    cargo = manifest["flags"]["variants"]["optimized"]["cargo"]
    assert [cargo[i + 1] for i, a in enumerate(cargo) if a == "--bin"] == ["wordfreq", "wordgrep"]
    # Its own validation run, against its own baseline build, byte for byte.
    first, second, _reading_an_input = manifest["validation"]["runs"]
    assert first["run"] == ["count", "data/corpus.txt"]
    assert second["run"] == {"binary": "wordgrep", "args": ["fox", "data/corpus.txt"]}
    assert second["identical"] is True and second["stdout_bytes"] > 1000
    assert manifest["inputs"]["workloads"][3]["binary"] == "wordgrep"
    assert manifest["portability"]["other_binaries"]["wordgrep"] is not None
    sbom = json.loads((artifact / "sbom.cdx.json").read_text())
    shipped = [c for c in sbom["components"] if c["bom-ref"] == "binary:wordgrep"]
    assert shipped and shipped[0]["hashes"][0]["content"] == other["sha256"]
    lock = json.loads((workspace_release.directory / "release.lock").read_text())
    assert lock["targets"][0]["other_outputs"] == [other]
    # It runs, from the artifact, on this host.
    ran = subprocess.run(
        [str(artifact / "wordgrep"), "fox", "data/corpus.txt"],
        cwd=workspace_release.project,
        capture_output=True,
        check=True,
    )
    assert ran.stdout.endswith(b" matching lines\n")


def test_the_failing_crate_test_was_skipped_by_config(workspace_release: WorkspaceRelease) -> None:
    tests = workspace_release.manifest()["tests"]
    assert tests["ran"] is True
    assert tests["cargo"][-3:] == ["--", "--skip", "known_failure_on_this_toolchain"]
    [log_file] = (workspace_release.artifact / "logs").glob("*-test.log")
    log = log_file.read_text()
    assert "1 filtered out" in log


def test_the_lock_and_sbom_describe_the_member(workspace_release: WorkspaceRelease) -> None:
    lock = json.loads((workspace_release.directory / "release.lock").read_text())
    assert lock["source"]["crate"] == "."
    assert lock["source"]["exclude"] == ["target-local", "*.orig"]
    sbom = json.loads((workspace_release.artifact / "sbom.cdx.json").read_text())
    crates = {c["name"] for c in sbom["components"] if c["bom-ref"].startswith("crate:")}
    assert crates == {"memchr", "wordfreq-core"}
    verified = orchestrator(["verify", str(workspace_release.directory)])
    assert verified.returncode == 0, verified.output


def test_the_workspace_release_reproduces_bit_for_bit(
    workspace_release: WorkspaceRelease, tmp_path: Path
) -> None:
    # The inputs come from the vault: the folder the config names is gone meanwhile.
    data = workspace_release.project.parent / DATA.name
    data.rename(tmp_path / "moved-away")
    try:
        run = orchestrator(
            [
                "reproduce",
                str(workspace_release.directory),
                "--source",
                str(workspace_release.project),
                "--workdir",
                str(tmp_path / "rebuild"),
                "--reuse-images",
            ]
        )
    finally:
        (tmp_path / "moved-away").rename(data)
    assert run.returncode == 0, run.output
    unpacked = tmp_path / "rebuild" / "inputs" / "corpus" / "inputs" / "corpus" / "harbor.txt"
    assert unpacked.read_bytes() == (DATA / "corpus" / "harbor.txt").read_bytes()
    assert "the artifact is bit-identical" in run.output
    # The symlink came along as a symlink: the source tree hashed the same.
    assert (tmp_path / "rebuild" / "src" / "HomebrewFormula").is_symlink()
    # The gate's pick is pinned by the lock: the rebuild ships it without counting again.
    [locked] = json.loads((workspace_release.directory / "release.lock").read_text())["targets"]
    shipped = json.loads((workspace_release.artifact / "build.json").read_text())["gate"]
    bolted = json.loads((workspace_release.artifact / "build.json").read_text())["bolt"]
    unbolted = [n for n, b in bolted["binaries"].items() if b["applied"] and b["kept"] is False]
    assert locked["resolved"]["gate"] == {
        "shipped": shipped["shipped"],
        "policy": "best",
        "unbolted": unbolted,  # the binaries the gate shipped unBOLTed, pinned too
    }
    rebuilt = json.loads(next((tmp_path / "rebuild").rglob(f"{ARTIFACT}/build.json")).read_text())
    assert rebuilt["gate"]["shipped"] == shipped["shipped"]
    assert "pinned by the lock" in rebuilt["gate"]["skipped"] and not rebuilt["gate"]["variants"]


def test_the_speed_gate_ships_the_release_profile_when_no_optimization_pays(
    workspace_release: WorkspaceRelease, tmp_path: Path
) -> None:
    """An unreachable margin (95% of estimated cycles): neither PGO nor BOLT earns its
    place, so the release profile ships, validated, and build.json says why."""
    run = orchestrator(
        [
            "build",
            "--config",
            str(workspace_release.project / "orchestrator.toml"),
            "--artifacts-dir",
            str(tmp_path),
        ],
        env={"ORCHESTRATOR_GATE_MIN_GAIN": "0.95"},
    )
    assert run.returncode == 0, run.output
    manifest = json.loads((tmp_path / RELEASE / ARTIFACT / "build.json").read_text())
    gate = manifest["gate"]
    assert gate["shipped"] == "release" and gate["min_gain"] == 0.95
    assert [r.split(":")[0] for r in gate["reasons"]] == ["pgo", "pgo-bolt"]
    assert all("short of gate.min_gain 95.0%: keeps release" in r for r in gate["reasons"])
    assert manifest["artifact"]["optimizations"] == ["lto-fat"]
    assert manifest["variants"]["release"]["sha256"] == manifest["artifact"]["sha256"]
    assert manifest["bolt"]["applied"] is True  # BOLT ran; the gate did not ship it
    # The child process of the `--spawn` workload was counted too (a second process).
    assert all(v["instructions"] > 0 for v in gate["variants"].values())
    assert "speed gate ships release, not pgo-bolt" in run.output


def _tamper(folder: Path, how: str) -> None:
    """Issue 28's laundering recipe: change a published folder, then hide the change by
    computing the folder's SHA256SUMS again with the real `sha256sum`."""
    if how == "extra-file":
        (folder / "extra.sh").write_text("#!/bin/sh\necho owned\n")
    else:
        record = json.loads((folder / "build.json").read_text())
        record["finished_at"] = "2020-01-01T00:00:00+00:00"
        (folder / "build.json").write_text(json.dumps(record, indent=2) + "\n")
    files = sorted(
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*")
        if p.is_file() and p.name != "SHA256SUMS"
    )
    sums = subprocess.run(
        ["sha256sum", "--", *files], cwd=folder, capture_output=True, text=True, check=True
    )
    (folder / "SHA256SUMS").write_text(sums.stdout)


def test_a_tampered_folder_is_rebuilt_and_nothing_unsigned_is_signed_again(
    workspace_release: WorkspaceRelease, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    """An edited build.json, then an added file, each with the folder's SHA256SUMS
    recomputed: each alone makes the target a miss (the dry run says why), and the next
    release does not take the folder as cached (which would sign it again under the
    publisher's key) but builds it afresh; the result verifies under the publisher's key
    with nothing that no signature covers. (One rebuild for both keeps CI short; the unit
    tests run the release decision for each tamper alone.)"""
    artifacts = tmp_path / "artifacts"
    shutil.copytree(workspace_release.directory.parent, artifacts, symlinks=True)
    release, folder = artifacts / RELEASE, artifacts / RELEASE / ARTIFACT
    publisher = tmp_path / "publisher.pub"
    shutil.copyfile(release / "minisign.pub", publisher)
    where = [
        "--config",
        str(workspace_release.project / "orchestrator.toml"),
        "--artifacts-dir",
        str(artifacts),
    ]
    for how in ("edited-build-json", "extra-file"):
        _tamper(folder, how)
        dry = orchestrator(["release", "--dry-run", "--json", *where])
        assert dry.returncode == 0, dry.output
        report, _end = json.JSONDecoder().raw_decode(dry.output[dry.output.index("{") :])
        [planned] = report["targets"]
        assert planned["cached"]["artifact"] is False, (how, planned)
        assert "SHA256SUMS is not the one that was signed" in planned["cached"]["artifact_reason"]
    again = orchestrator(["release", *where, "--bench-runs", "0", "--allow-dirty"])
    assert again.returncode == 0, again.output
    assert f"{ARTIFACT}: cached" not in again.output
    assert "building: it does not match the signed release" in again.output
    assert not (folder / "extra.sh").exists()
    assert json.loads((folder / "build.json").read_text())["finished_at"] != (
        "2020-01-01T00:00:00+00:00"
    )
    verified = orchestrator(["verify", str(release), "--key", str(publisher)])
    assert verified.returncode == 0, verified.output
    assert "no signed checksum lists" not in verified.output
    assert managed_containers(docker_client) == []


def test_a_second_release_with_nothing_changed_builds_nothing(
    workspace_release: WorkspaceRelease, docker_client: docker.DockerClient
) -> None:
    """The action cache: the published artifact is current, so no step runs again."""
    build_json = (workspace_release.artifact / "build.json").read_bytes()
    binary = (workspace_release.artifact / "wordfreq").read_bytes()
    listing = (workspace_release.directory / "release.json").read_bytes()
    where = [
        "--config",
        str(workspace_release.project / "orchestrator.toml"),
        "--artifacts-dir",
        str(workspace_release.directory.parent),
    ]
    dry = orchestrator(["release", "--dry-run", "--json", *where])
    assert dry.returncode == 0, dry.output
    report, _end = json.JSONDecoder().raw_decode(dry.output[dry.output.index("{") :])
    [planned] = report["targets"]
    assert planned["steps"] == [] and planned["cached"]["artifact"] is True
    again = orchestrator(["release", *where, "--bench-runs", "0", "--allow-dirty"])
    assert again.returncode == 0, again.output
    assert f"{ARTIFACT}: cached, inputs unchanged since" in again.output
    for step in ("toolchain-image", "build-baseline", "pgo-train", "bolt-optimize", "publish"):
        assert step not in again.output, step
    assert (workspace_release.artifact / "build.json").read_bytes() == build_json
    assert (workspace_release.artifact / "wordfreq").read_bytes() == binary
    # a no-op: release.json as it was, and logs/targets.json keeps the build that made it
    assert (workspace_release.directory / "release.json").read_bytes() == listing
    assert "is current: every target cached, nothing written" in again.output
    runs = json.loads((workspace_release.directory / "logs" / "targets.json").read_text())
    assert [a["status"] for a in runs["targets"]] == ["ok"]
    assert managed_containers(docker_client) == []
    verified = orchestrator(["verify", str(workspace_release.directory)])
    assert verified.returncode == 0, verified.output

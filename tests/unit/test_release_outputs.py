"""What a release tells its reader: the summary's last lines, logs/targets.json's order
and triples, release.json made of the published build.json files, why a target has no
speed figure, and where keygen puts the public key."""

from __future__ import annotations

import io
import json
import os
import re
import shlex
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

import orchestrator.release.run as release_run
import orchestrator.release.targets.target as release_target
from orchestrator.cli import app
from orchestrator.config.resolve.options import FlavorSettings, Options, resolve
from orchestrator.model.documents.record_io import record_text
from orchestrator.model.documents.records import read_record, write_record
from orchestrator.model.documents.release_summary import (
    PublishedTarget,
    ReleaseSummary,
    TargetFacts,
    TargetRuns,
    TargetSummary,
)
from orchestrator.model.documents.run_logs import TARGET_RUNS
from orchestrator.release.run import RELEASE_JSON, public_key_for, run_release
from orchestrator.release.targets.release_json import write_release_json
from orchestrator.release.targets.release_view import ReleaseView
from orchestrator.release.targets.target import no_speedup_reason, targets
from orchestrator.supply.attest import ReleaseIndex, Signer, resolve_signer
from orchestrator.supply.minisign import SecretKey, write_key_pair

from .conftest import plan_for
from .fakes import FakeEngine
from .manifests import produced_manifest
from .test_cli_commands import configure
from .test_cli_json import _stand_in_build, stand_in_release  # noqa: F401 - a fixture

runner = CliRunner()
# Where keygen and verify are documented (docs/trust.md, "Signing and verifying").
README = Path(__file__).resolve().parents[2] / "docs" / "trust.md"


@pytest.fixture
def options(project: Path, tmp_path: Path) -> Options:
    resolved = resolve(project / "orchestrator.toml", env={})
    return replace(
        resolved,
        cache_dir=tmp_path / "cache",
        artifacts_dir=tmp_path / "artifacts",
        flavor_settings={"cpu": FlavorSettings(levels=("x86-64-v3", "x86-64-v2"))},
    )


# -- the text summary ------------------------------------------------------------------
@pytest.mark.usefixtures("stand_in_release")
def test_the_summary_ends_with_path_time_verify_and_the_key_warning(project: Path) -> None:
    config = configure(project)
    argv = ["release", "--flavors", "cpu,aarch64", "--bench-runs", "1", "-c", str(config)]
    result = runner.invoke(app, argv)
    assert result.exit_code == 0, result.output
    release_dir = project / "out" / "demo-1.2.3"
    public = project / "cache" / "keys" / "throwaway-signing.pub"
    stdout = result.stdout.splitlines()
    assert re.fullmatch(
        rf"release: {re.escape(str(release_dir))} \(2 of 2 targets ok, \d+s\)", stdout[-2]
    )
    assert stdout[-1] == f"verify:  orchestrator verify {release_dir} --key {public}"
    assert shlex.split(stdout[-1].removeprefix("verify:  "))[-2:] == ["--key", str(public)]
    assert public.is_file()
    # The throwaway-key warning is said at the start and again as the very last line.
    stderr = result.stderr.strip().splitlines()
    assert stderr[-1].startswith("WARNING: signed with a THROWAWAY key")
    assert sum("THROWAWAY" in line for line in stderr) == 2
    # The aarch64 row says why it has no speed figure; the cpu row too.
    rows = [line for line in stdout if line.startswith("│")]
    aarch64_row = next(line for line in rows if "linux-aarch64-cpu" in line)
    assert "n/a: emulated (qemu-aarch64)" in aarch64_row
    cpu_row = next(line for line in rows if "linux-x86_64-cpu " in line)
    assert "skipped: no bench.command" in cpu_row


def test_no_speedup_reason(options: Options) -> None:
    [cpu] = targets(replace(options, flavor_settings={}), ["cpu"])
    [aarch64] = targets(options, ["aarch64"])
    assert no_speedup_reason(aarch64, 3) == "n/a: emulated (qemu-aarch64)"
    assert no_speedup_reason(cpu, 0) == "skipped: --bench-runs 0"
    assert no_speedup_reason(cpu, 3) == "skipped: no bench.command"
    assert (
        no_speedup_reason(replace(cpu, options=replace(cpu.options, bench_command=("b",))), 3) == ""
    )


# -- release.json ------------------------------------------------------------------------
SIGNER = Signer(SecretKey.generate(), throwaway=True, source="test")


def _release(options: Options, flavors: list[str]) -> None:
    run_release(
        ReleaseView.from_options(options),
        release_run.plan_targets(targets(options, flavors)),
        FakeEngine(),  # type: ignore[arg-type]
        Console(file=io.StringIO()),
        signer=SIGNER,
        retrain=False,
        bench_runs=0,
        announce=lambda _line: None,
    )


def test_the_target_runs_list_targets_in_build_order_with_triples(
    options: Options, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(release_run, "prepare_plan", plan_for)
    monkeypatch.setattr(release_run, "update_release_index", lambda *_a, **_k: ReleaseIndex([], []))
    monkeypatch.setattr(release_target, "run_build", _stand_in_build)
    _release(options, ["cpu", "aarch64"])
    path = tmp_path / "artifacts" / "demo-1.2.3" / TARGET_RUNS
    first = read_record(path, TargetRuns).targets
    assert [(a.artifact, a.rust_target) for a in first] == [
        ("demo-1.2.3-linux-x86_64-cpu-v3", "x86_64-unknown-linux-gnu"),
        ("demo-1.2.3-linux-x86_64-cpu", "x86_64-unknown-linux-gnu"),
        ("demo-1.2.3-linux-aarch64-cpu", "aarch64-unknown-linux-gnu"),
    ]
    assert [a.speedup_note for a in first] == [
        "skipped: --bench-runs 0",
        "skipped: --bench-runs 0",
        "n/a: emulated (qemu-aarch64)",
    ]
    # An entry written before triples were recorded gets its flavor's when merged.
    document = json.loads(path.read_text())
    del document["targets"][2]["rust_target"]
    path.write_text(json.dumps(document))
    # Rebuilding one target: the others keep their order, the rebuilt one comes last.
    _release(
        replace(options, flavor_settings={"cpu": FlavorSettings(levels=("x86-64-v3",))}), ["cpu"]
    )
    again = read_record(path, TargetRuns).targets
    assert [(a.artifact, a.rust_target) for a in again] == [
        ("demo-1.2.3-linux-x86_64-cpu", "x86_64-unknown-linux-gnu"),
        ("demo-1.2.3-linux-aarch64-cpu", "aarch64-unknown-linux-gnu"),
        ("demo-1.2.3-linux-x86_64-cpu-v3", "x86_64-unknown-linux-gnu"),
    ]


def test_release_json_is_what_the_published_build_json_files_say(
    options: Options, tmp_path: Path
) -> None:
    """Sorted by folder and made of build.json alone: the same bytes whichever machine or
    run wrote it, and no file written when they are the same."""
    release = tmp_path / "artifacts" / "demo-1.2.3"
    manifests = {}
    for level in ("x86-64-v3", "x86-64-v2"):
        level_options = replace(options, target_cpu=level)
        plan = plan_for(level_options)
        (release / plan.artifact_dir).mkdir(parents=True)
        (tmp_path / level).mkdir()
        manifest = produced_manifest(level_options, plan, tmp_path / level)
        write_record(release / plan.artifact_dir / "build.json", manifest)
        manifests[plan.artifact_dir] = manifest
    assert write_release_json(release, ReleaseView.from_options(options))
    listing = read_record(release / RELEASE_JSON, ReleaseSummary)
    assert [a.artifact for a in listing.artifacts] == sorted(manifests)
    for entry in listing.artifacts:
        manifest = manifests[entry.artifact]
        assert (entry.level, entry.sha256) == (manifest.flags.target_cpu, manifest.artifact.sha256)
        assert entry.rust_target == "x86_64-unknown-linux-gnu"
    os.utime(release / RELEASE_JSON, ns=(1, 1))
    assert not write_release_json(release, ReleaseView.from_options(options))
    assert (release / RELEASE_JSON).stat().st_mtime_ns == 1
    # a folder whose build.json does not read is left out, and said so
    (release / "demo-1.2.3-linux-x86_64-cpu-v4").mkdir()
    (release / "demo-1.2.3-linux-x86_64-cpu-v4" / "build.json").write_text("{}")
    said: list[str] = []
    assert not write_release_json(release, ReleaseView.from_options(options), said.append)
    assert len(said) == 1 and said[0].startswith("demo-1.2.3-linux-x86_64-cpu-v4 is left out")


# release.json is signed: an old release rebuilt must give it byte for byte, whatever order
# the models declare their fields in (TargetFacts puts the shared ones first).
RELEASE_JSON_BYTES = """{
  "artifacts": [
    {
      "artifact": "demo-1.2.3-linux-x86_64-cuda-v3",
      "bolt": "instrument, 42/619 functions profiled, not shipped (speed gate)",
      "cuda_runtime": "12.4",
      "cycles_saved_vs_baseline": 0.25,
      "cycles_saved_vs_release": 0.125,
      "flavor": "cuda",
      "glibc": "GLIBC_2.17",
      "gpu_path": "not exercised: no GPU on this machine",
      "level": "x86-64-v3",
      "oldest_distribution": "bullseye",
      "rust_target": "x86_64-unknown-linux-gnu",
      "sha256": "abababababababababababababababababababababababababababababababab",
      "shipped_variant": "pgo",
      "size": 1024
    }
  ],
  "name": "demo",
  "schema": "orchestrator/release",
  "schema_version": 3,
  "version": "1.2.3"
}
"""


def test_release_json_and_target_runs_entries_keep_their_bytes() -> None:
    facts = {
        "flavor": "cuda",
        "level": "x86-64-v3",
        "artifact": "demo-1.2.3-linux-x86_64-cuda-v3",
        "rust_target": "x86_64-unknown-linux-gnu",
        "size": 1024,
        "sha256": "ab" * 32,
        "glibc": "GLIBC_2.17",
        "oldest_distribution": "bullseye",
        "shipped_variant": "pgo",
        "cycles_saved_vs_baseline": 0.25,
        "cycles_saved_vs_release": 0.125,
        "bolt": "instrument, 42/619 functions profiled, not shipped (speed gate)",
        "cuda_runtime": "12.4",
        "gpu_path": "not exercised: no GPU on this machine",
    }
    published = PublishedTarget.model_validate(facts)
    listing = ReleaseSummary(name="demo", version="1.2.3", artifacts=[published])
    assert record_text(listing) == RELEASE_JSON_BYTES
    # A run's entry says the same of the shared fields, and logs/targets.json (like
    # release.json) lists each entry's keys sorted, not in declaration order.
    run = {"status": "ok", "seconds": 1.5, "speedup_vs_baseline": None, "error": None}
    entry = TargetSummary.model_validate({**facts, **run, "warnings": []})
    assert {key: entry.dump()[key] for key in TargetFacts.model_fields} == {
        key: published.dump()[key] for key in TargetFacts.model_fields
    }
    written = json.loads(record_text(TargetRuns(name="demo", version="1.2.3", targets=[entry])))
    assert list(written["targets"][0]) == sorted(TargetSummary.model_fields)


# -- keys ---------------------------------------------------------------------------------
def test_keygen_writes_the_public_key_where_the_readme_says(tmp_path: Path) -> None:
    text = README.read_text()
    secret = re.search(r"^orchestrator keygen (\S+)\s", text, re.MULTILINE)
    public = re.search(r"^orchestrator verify \S+ --key (\S+)", text, re.MULTILINE)
    assert secret and public
    # The README's pair, moved under tmp_path: keygen SECRET must write README's PUBLIC.
    home = Path(secret.group(1)).parent
    assert Path(public.group(1)).parent == home
    key = tmp_path / Path(secret.group(1)).name
    result = runner.invoke(app, ["keygen", str(key), "--unencrypted"])
    assert result.exit_code == 0, result.output
    written = tmp_path / Path(public.group(1)).name
    assert written.is_file()
    assert f"public key: {written}" in result.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([key.name, written.name])
    assert "`.pub` in place of KEY's suffix (`signing.key` -> `signing.pub`" in text


def test_keygen_refuses_a_key_named_like_its_public_key(tmp_path: Path) -> None:
    result = runner.invoke(app, ["keygen", str(tmp_path / "signing.pub"), "--unencrypted"])
    assert result.exit_code == 10
    assert "ends in .pub" in result.stderr
    assert not (tmp_path / "signing.pub").exists()


def test_public_key_for_finds_keygens_pair_and_only_a_matching_one(tmp_path: Path) -> None:
    key = tmp_path / "keys" / "signing.key"
    write_key_pair(SecretKey.generate(), key, passphrase=None)
    signer = resolve_signer(key, project_dir=tmp_path / "project", cache_dir=tmp_path, env={})
    assert public_key_for(signer) == tmp_path / "keys" / "signing.pub"
    other = tmp_path / "other" / "signing.key"
    write_key_pair(SecretKey.generate(), other, passphrase=None)
    (tmp_path / "keys" / "signing.pub").write_text((other.parent / "signing.pub").read_text())
    assert public_key_for(signer) is None  # a .pub of another key is not this one's

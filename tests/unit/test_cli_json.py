"""`--json`: each command's stdout is one document that validates against its published
JSON Schema (schemas/), and schemas/ is what the records generate.

The documents come from real runs through typer's CliRunner; Docker is FakeEngine or an
unreachable Engine, and the release build itself is a stand-in.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from jsonschema import Draft202012Validator
from typer.testing import CliRunner

import orchestrator.release.lock.reproduce as release_reproduce
import orchestrator.release.targets.target as release_target
from orchestrator.cli import app
from orchestrator.config.resolve.options import resolve
from orchestrator.errors import StepFailedError
from orchestrator.execute.build import BuildOutcome
from orchestrator.execute.verdict import bench as bench_module
from orchestrator.execute.verdict.bench import TIMER, BenchSetup
from orchestrator.model.documents.lockfile import LockDocument, dumps
from orchestrator.model.documents.records import BuildManifest, Record, read_record
from orchestrator.model.documents.release_summary import ReleaseSummary, TargetRuns
from orchestrator.model.documents.reports import (
    BenchReport,
    BuildPlanReport,
    ConfigReport,
    DoctorReport,
    ReleasePlanReport,
    ReleaseRunReport,
    VerifyReport,
)
from orchestrator.model.documents.run_logs import TARGET_RUNS
from orchestrator.plan.steps import StepName
from orchestrator.tools import schemas
from orchestrator.tools.schemas import DEFAULT_DIR, PUBLISHED, schema_file_name, sync

from .conftest import plan_for
from .fakes import FakeEngine
from .manifests import produced_manifest
from .test_cli_commands import configure, use_engine
from .test_lockfile import lock_for
from .test_supply_release_files import make_release

runner = CliRunner()


def validate(document: object, model: type[Record]) -> None:
    """The document against the committed schema of `model` (not one made on the fly)."""
    schema = json.loads((DEFAULT_DIR / schema_file_name(model)).read_text())
    Draft202012Validator.check_schema(schema)
    errors = sorted(Draft202012Validator(schema).iter_errors(document), key=str)
    assert not errors, [f"{list(e.absolute_path)}: {e.message}" for e in errors]


def one_document(stdout: str) -> Any:
    """stdout must be exactly one JSON document: json.loads refuses anything around it."""
    return json.loads(stdout)


# -- schemas/ ---------------------------------------------------------------------------
def test_committed_schemas_are_the_generated_ones() -> None:
    assert schemas.main(["--check"]) == 0
    names = sorted(p.name for p in DEFAULT_DIR.glob("*.schema.json"))
    assert names == sorted(schema_file_name(model) for model in PUBLISHED)
    assert "verify-1.schema.json" in names
    assert "release-3.schema.json" in names
    assert "lock-1.schema.json" in names


def test_check_names_stale_missing_and_foreign_files(tmp_path: Path) -> None:
    assert schemas.main(["--dir", str(tmp_path)]) == 0
    assert schemas.main(["--check", "--dir", str(tmp_path)]) == 0
    verify = tmp_path / "verify-1.schema.json"
    verify.write_text(verify.read_text().replace('"boolean"', '"string"'))
    (tmp_path / "doctor-1.schema.json").unlink()
    (tmp_path / "old-0.schema.json").write_text("{}")
    states = {r.path.name: r.state for r in sync(tmp_path, check=True)}
    assert states["verify-1.schema.json"] == "stale"
    assert states["doctor-1.schema.json"] == "missing"
    assert states["old-0.schema.json"] == "not generated"
    assert schemas.main(["--check", "--dir", str(tmp_path)]) == 1
    assert not (tmp_path / "doctor-1.schema.json").exists()  # --check wrote nothing
    assert schemas.main(["--dir", str(tmp_path)]) == 0  # and a write repairs all of it
    assert not (tmp_path / "old-0.schema.json").exists()
    assert schemas.main(["--check", "--dir", str(tmp_path)]) == 0


def test_a_schema_refuses_what_the_record_refuses() -> None:
    document = {"schema": "orchestrator/doctor", "schema_version": 1, "ok": True}
    schema = json.loads((DEFAULT_DIR / "doctor-1.schema.json").read_text())
    assert not Draft202012Validator(schema).is_valid(document)  # blockers, checks missing
    full = document | {"blockers": [], "checks": []}
    assert Draft202012Validator(schema).is_valid(full)
    assert not Draft202012Validator(schema).is_valid(full | {"colour": "blue"})
    assert not Draft202012Validator(schema).is_valid(full | {"schema_version": 2})


# -- config ----------------------------------------------------------------------------
def test_config_json(project: Path) -> None:
    result = runner.invoke(
        app,
        ["config", "--json", "--config", str(configure(project))],
        env={"ORCHESTRATOR_TARGET_CPU": "x86-64-v3"},
    )
    assert result.exit_code == 0, result.output
    document = one_document(result.stdout)
    validate(document, ConfigReport)
    assert (document["schema"], document["schema_version"]) == ("orchestrator/config", 1)
    rows = {row["key"]: row for row in document["settings"]}
    assert rows["build.target_cpu"] == {
        "key": "build.target_cpu",
        "value": "x86-64-v3",
        "shown": "x86-64-v3",
        "source": "env ORCHESTRATOR_TARGET_CPU",
    }
    assert rows["build.flavors"]["value"] == ["cpu"]  # a list, not its text
    assert rows["train.workloads"]["value"] == [["--help"]]
    assert rows["pgo.enabled"]["value"] is True
    assert rows["build.cache_dir"]["value"] == str(project / "cache")


# -- doctor ----------------------------------------------------------------------------
def test_doctor_json_with_docker_down_is_a_document_and_exit_60(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    use_engine(monkeypatch, None)
    monkeypatch.setenv("ORCHESTRATOR_CACHE_DIR", str(tmp_path / "cache"))
    result = runner.invoke(app, ["doctor", "--json"])
    assert result.exit_code == 60, result.output
    document = one_document(result.stdout)
    validate(document, DoctorReport)
    assert document["ok"] is False
    assert "docker" in document["blockers"]
    docker = next(c for c in document["checks"] if c["name"] == "docker")
    assert docker["status"] == "fail"
    assert "blocked by" in result.stderr  # the error goes to stderr only


def test_doctor_json_on_a_working_host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    use_engine(monkeypatch, FakeEngine(info={"Driver": "overlay2", "DockerRootDir": str(tmp_path)}))
    monkeypatch.setattr(
        "orchestrator.runtime.doctor.shutil.which", {"mmdebstrap": "/usr/bin/mmdebstrap"}.get
    )
    monkeypatch.setattr(
        "orchestrator.runtime.doctor.shutil.disk_usage",
        lambda _path: SimpleNamespace(free=100 * 10**9),
    )
    monkeypatch.setenv("ORCHESTRATOR_CACHE_DIR", str(tmp_path / "cache"))
    result = runner.invoke(app, ["doctor", "--json"])
    assert result.exit_code == 0, result.output
    document = one_document(result.stdout)
    validate(document, DoctorReport)
    assert (document["ok"], document["blockers"]) == (True, [])
    assert {c["name"] for c in document["checks"]} >= {"docker", "mmdebstrap", "disk (cache)"}


# -- verify ----------------------------------------------------------------------------
def test_verify_json_passes_and_fails_as_a_document(tmp_path: Path) -> None:
    release = make_release(tmp_path)
    result = runner.invoke(
        app, ["verify", str(release.root), "--key", str(release.public), "--json"]
    )
    assert result.exit_code == 0, result.output
    document = one_document(result.stdout)
    validate(document, VerifyReport)
    assert document["passed"] is True
    assert (document["key"], document["integrity_only"]) == (str(release.public), False)
    assert {c["check"] for c in document["checks"]} == {
        "signature",
        "checksums",
        "sbom",
        "provenance",
        "coverage",
    }

    binary = release.root / release.folder / release.binary
    binary.write_bytes(binary.read_bytes() + b"\0")
    failed = runner.invoke(app, ["verify", str(release.root), "--json"])
    assert failed.exit_code == 48, failed.output
    document = one_document(failed.stdout)
    validate(document, VerifyReport)
    assert document["passed"] is False
    assert document["integrity_only"] is True
    assert document["failed"] == sum(not c["ok"] for c in document["checks"]) > 0
    assert "check(s) failed" in failed.stderr


# -- release --dry-run -----------------------------------------------------------------
@pytest.mark.parametrize("flavor", ["cpu", "aarch64"])
def test_build_dry_run_json(project: Path, flavor: str) -> None:
    """`build --dry-run --json` (and `--dry-run` alone) is one orchestrator/build-plan
    document; `--json` without `--dry-run` is refused (a build prints steps)."""
    config = str(configure(project))
    result = runner.invoke(app, ["build", "--dry-run", "--json", "--flavor", flavor, "-c", config])
    assert result.exit_code == 0, result.output
    document = one_document(result.stdout)
    validate(document, BuildPlanReport)
    assert document["schema"] == "orchestrator/build-plan"
    assert document["flavor"] == flavor and "publish" in document["steps"]
    assert "validate" in document  # spelled as in JSON, not as the Python field
    plain = runner.invoke(app, ["build", "--dry-run", "--flavor", flavor, "-c", config])
    assert one_document(plain.stdout) == document
    refused = runner.invoke(app, ["build", "--json", "-c", config])
    assert refused.exit_code == 10
    assert "--json goes with --dry-run" in refused.output


def test_release_dry_run_json(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    use_engine(monkeypatch, None)
    config = configure(project, '[flavors.cpu]\nlevels = ["x86-64-v2", "x86-64-v3"]\n')
    result = runner.invoke(
        app, ["release", "--dry-run", "--json", "--flavors", "cpu,aarch64", "-c", str(config)]
    )
    assert result.exit_code == 0, result.output
    document = one_document(result.stdout)
    validate(document, ReleasePlanReport)
    assert document["docker_reachable"] is False
    targets = document["targets"]
    assert [(t["flavor"], t["level"]) for t in targets] == [
        ("cpu", "x86-64-v2"),
        ("cpu", "x86-64-v3"),
        ("aarch64", "generic"),
    ]
    assert [t["rust_target"] for t in targets] == [
        "x86_64-unknown-linux-gnu",
        "x86_64-unknown-linux-gnu",
        "aarch64-unknown-linux-gnu",
    ]
    assert targets[0]["cached"]["base_image"] is None  # unknown without Docker
    assert targets[0]["steps"][:2] == ["base-image", "toolchain-image"]
    assert not (project / "out").exists()


# -- release ----------------------------------------------------------------------------
def _stand_in_build(options: Any, plan: Any, *_args: Any, **_kwargs: Any) -> BuildOutcome:
    """What run_build returns, for a binary written where the artifact would be."""
    folder = options.artifacts_dir / plan.release_dir / plan.artifact_dir
    folder.mkdir(parents=True, exist_ok=True)
    binary = folder / plan.binary
    binary.write_bytes(plan.artifact_dir.encode())
    return BuildOutcome(
        folder,
        binary,
        cast(
            Any,
            SimpleNamespace(
                portability=None, tests=None, gate=None, bolt=None, cuda_runtime=None, gpu_path=None
            ),
        ),
    )


@pytest.fixture
def stand_in_release(monkeypatch: pytest.MonkeyPatch) -> None:
    """Everything of `release` but the container builds and the lockfile."""
    use_engine(monkeypatch, FakeEngine())
    monkeypatch.setattr(release_target, "run_build", _stand_in_build)

    def record_release(
        _release: Any, _chosen: Any, release_dir: Path, _vault: Any, **_given: Any
    ) -> Path:
        return release_dir / "release.lock"

    monkeypatch.setattr(release_reproduce, "record_release", record_release)


def test_release_json(project: Path, stand_in_release: None) -> None:
    del stand_in_release
    config = configure(project, '[flavors.cpu]\nlevels = ["x86-64-v3", "x86-64-v2"]\n')
    result = runner.invoke(
        app,
        ["release", "--json", "--flavors", "cpu,aarch64", "--bench-runs", "1", "-c", str(config)],
    )
    assert result.exit_code == 0, result.output
    document = one_document(result.stdout)
    validate(document, ReleaseRunReport)
    release_dir = project / "out" / "demo-1.2.3"
    assert document["release_dir"] == str(release_dir)
    assert document["published"] is True
    artifacts = [t["artifact"] for t in document["targets"]]
    assert artifacts == [
        "demo-1.2.3-linux-x86_64-cpu-v3",
        "demo-1.2.3-linux-x86_64-cpu",
        "demo-1.2.3-linux-aarch64-cpu",
    ]
    notes = {t["artifact"]: t["speedup_note"] for t in document["targets"]}
    assert notes["demo-1.2.3-linux-aarch64-cpu"] == "n/a: emulated (qemu-aarch64)"
    assert notes["demo-1.2.3-linux-x86_64-cpu"] == "skipped: no bench.command"
    signing = document["signing"]
    assert signing["throwaway"] is True
    public = project / "cache" / "keys" / "throwaway-signing.pub"
    assert signing["public_key"] == str(public)
    assert document["verify_command"] == f"orchestrator verify {release_dir} --key {public}"
    # The progress and the human summary went to stderr, the document alone to stdout.
    assert "[1/3] demo-1.2.3-linux-x86_64-cpu-v3" in result.stderr
    assert "THROWAWAY" in result.stderr
    # logs/targets.json on disk: the same targets, in build order, with their triples;
    # release.json, what is published (the stand-in builds write no build.json: nothing)
    runs = read_record(release_dir / TARGET_RUNS, TargetRuns).dump()
    assert [a["artifact"] for a in runs["targets"]] == artifacts
    assert all(a["rust_target"] for a in runs["targets"])
    listing = read_record(release_dir / "release.json", ReleaseSummary).dump()
    validate(listing, ReleaseSummary)
    assert listing["artifacts"] == []


def test_release_json_with_a_failed_target_still_prints_its_document(
    project: Path, stand_in_release: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    del stand_in_release

    def build_or_fail(options: Any, plan: Any, *args: Any, **kwargs: Any) -> BuildOutcome:
        if plan.flavor == "aarch64":
            raise StepFailedError(
                "step test: `cargo test` exited with 101",
                step=StepName.TEST,
                failed_tests=("engine::tests::loads_a_model",),
            )
        return _stand_in_build(options, plan, *args, **kwargs)

    monkeypatch.setattr(release_target, "run_build", build_or_fail)
    argv = ["release", "--json", "--flavors", "cpu,aarch64", "-c", str(configure(project))]
    result = runner.invoke(app, argv)
    assert result.exit_code == 49, result.output
    document = one_document(result.stdout)
    validate(document, ReleaseRunReport)
    assert document["failed"] == ["demo-1.2.3-linux-aarch64-cpu"]
    failed = document["targets"][1]
    assert (failed["status"], failed["error_class"], failed["exit_code"]) == (
        "failed",
        "StepFailedError",
        40,
    )
    assert failed["speedup_note"] is None
    assert "1 of 2 targets failed" in result.stderr
    # the closing hint spells the flavor's table that skips the test its output named
    assert (
        "demo-1.2.3-linux-aarch64-cpu: the crate's own tests failed: "
        "engine::tests::loads_a_model. To release without it, set "
        "[flavors.aarch64.test] args in orchestrator.toml" in result.stderr
    )
    assert (
        '    [flavors.aarch64.test]\n    args = ["--", "--skip", "engine::tests::loads_a_model"]'
        in result.stderr
    )


# -- bench -----------------------------------------------------------------------------
def test_bench_json_is_bench_json(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    variants = tmp_path / "variants"
    variants.mkdir()
    for name in ("baseline", "pgo"):
        (variants / name).write_bytes(name.encode())
    setup = BenchSetup(
        artifact=tmp_path / "demo-1.2.3-linux-x86_64-cpu",
        variants_dir=variants,
        image="orchestrator/cpu:test",
        sizes={"baseline": 10, "pgo": 9},
        output_dir=tmp_path / "bench" / "demo-1.2.3-linux-x86_64-cpu",
    )
    monkeypatch.setattr(bench_module, "locate", lambda _options, _flavor: setup)
    nanoseconds = {"baseline": 200_000_000, "pgo": 100_000_000}

    def timer(argv: Any) -> tuple[int, list[str]]:
        assert argv[2] == TIMER
        return 0, [f"0 {nanoseconds[Path(argv[4]).name]} 1000 0.09 0.01"]

    engine = FakeEngine(responder=timer, info={"NCPU": 2})
    engine.add_image(setup.image)
    use_engine(monkeypatch, engine)
    config = configure(project, '[bench]\ncommand = ["bench"]\n')
    result = runner.invoke(
        app, ["bench", "--json", "--runs", "2", "--warmup", "0", "-c", str(config)]
    )
    assert result.exit_code == 0, result.output
    document = one_document(result.stdout)
    validate(document, BenchReport)
    assert document == json.loads((setup.output_dir / "bench.json").read_text())
    assert [v["name"] for v in document["variants"]] == ["baseline", "pgo"]
    assert document["variants"][1]["speedup_vs_baseline"] == 2.0
    assert "round 2/2" in result.stderr
    # The report is inside the release folder, so the signed index now lists it.
    signed = (tmp_path / "SHA256SUMS").read_text()
    assert "  bench/demo-1.2.3-linux-x86_64-cpu/bench.json\n" in signed
    assert (tmp_path / "SHA256SUMS.minisig").is_file()


# -- build.json, release.lock ----------------------------------------------------------
def test_build_json_and_release_lock_validate_against_their_schemas(
    project: Path, tmp_path: Path
) -> None:
    options = resolve(project / "orchestrator.toml", env={"SOURCE_DATE_EPOCH": "1700000000"})
    plan = plan_for(options)
    work = tmp_path / "work"
    work.mkdir()
    manifest = produced_manifest(options, plan, work).dump()
    validate(manifest, BuildManifest)
    lock = json.loads(dumps(lock_for(plan)))
    validate(lock, LockDocument)
    # and the schemas are strict where the records are
    schema = json.loads((DEFAULT_DIR / schema_file_name(BuildManifest)).read_text())
    assert not Draft202012Validator(schema).is_valid(manifest | {"schema_version": 1})

"""`[package] binaries`: an artifact that ships several binaries. Each is built by every
variant, trained by the workloads that name it, compared with its own baseline build,
checked for its glibc, signed, in the SBOM, the provenance and the lock; BOLT rewrites the
main one. Also: orchestrator's own folders inside the crate are not its sources."""

from __future__ import annotations

import json
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.config.declarations.kinds import Run
from orchestrator.config.resolve.options import Options, resolve
from orchestrator.errors import ConfigError, ValidationError
from orchestrator.execute.ship import publish
from orchestrator.execute.steps.pipeline import BIN_DIR, run_workloads
from orchestrator.execute.verdict import validate
from orchestrator.host.source import CrateView, crate_snapshot
from orchestrator.host.staging import staging_root
from orchestrator.model.documents.records import BuildManifest, RecordError, read_record
from orchestrator.release.lock.reproduce import Reproduced
from orchestrator.supply.attest import Signer
from orchestrator.supply.minisign import SecretKey, verify_file, write_key_pair
from orchestrator.supply.sbom import SBOM_FILE, sbom_binaries
from orchestrator.supply.verify import verify_release

from .conftest import plan_for
from .execute_rig import make_options, make_rig
from .fakes import FakeEngine
from .publish_rig import ready_to_publish

TWO = """\
[package]
crate = "crate"
binaries = ["demo", "democtl"]
[train]
workloads = [["--help"], {binary = "democtl", args = ["status"]}]
[validate]
command = ["--version"]
runs = [{binary = "democtl", args = ["check", "data.txt"]}]
"""


def _two(project: Path, text: str = TWO) -> Options:
    (project / "orchestrator.toml").write_text(text)
    return resolve(project / "orchestrator.toml", env={"SOURCE_DATE_EPOCH": "1700000000"})


# -- configuration -----------------------------------------------------------------------
def test_binaries_resolve_with_the_main_one_first_and_runs_naming_theirs(project: Path) -> None:
    options = _two(project)
    assert (options.binary, options.binaries) == ("demo", ("demo", "democtl"))
    assert options.workloads == (Run(("--help",)), Run(("status",), "democtl"))
    assert options.validate_runs == (Run(("check", "data.txt"), "democtl"),)
    # package.binary picks the main one from the list; a run naming it is a plain run.
    options = _two(
        project,
        TWO.replace(
            'binaries = ["demo", "democtl"]', 'binary = "democtl"\nbinaries = ["demo", "democtl"]'
        ).replace('runs = [{binary = "democtl"', 'runs = [{binary = "demo"'),
    )
    assert options.binaries == ("democtl", "demo")
    # A plain list runs the main binary, now democtl; naming it is the same as not.
    assert options.workloads == (Run(("--help",)), Run(("status",)))
    assert options.validate_runs == (Run(("check", "data.txt"), "demo"),)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            ('binaries = ["demo", "democtl"]', 'binary = "other"\nbinaries = ["demo", "democtl"]'),
            "package.binary 'other' is not one of package.binaries",
        ),
        (('"democtl"]\n[train]', '"democtl", "demo"]\n[train]'), "names demo twice"),
        (
            ('{binary = "democtl", args = ["status"]}', '{binary = "democtrl", args = []}'),
            "train.workloads: {binary = 'democtrl', ...} is not a binary the artifact ships; "
            "did you mean 'democtl'?",
        ),
        (
            ('runs = [{binary = "democtl", args = ["check", "data.txt"]}]', ""),
            "validate.command checks demo, but no validate.runs entry runs democtl",
        ),
        (
            ('{binary = "democtl", args = ["status"]}', '{binary = "democtl", argv = []}'),
            "train.workloads: expected a list of argument lists, or {binary",
        ),
    ],
)
def test_binaries_that_do_not_add_up_are_config_errors(
    project: Path, change: tuple[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        _two(project, TWO.replace(*change))
    assert message in caught.value.message


def test_every_variant_builds_every_binary_and_bolt_needs_a_main_workload(
    project: Path,
) -> None:
    options = _two(project)
    plan = plan_for(options)
    for variant in plan.variants.values():
        argv = list(variant.build.argv)
        assert argv[argv.index("--bin") :][:4] == ["--bin", "demo", "--bin", "democtl"]
        assert list(variant.binaries) == ["demo", "democtl"]
        assert variant.binary.endswith("/release/demo")
    assert plan.validation_runs == (Run(("--version",)), Run(("check", "data.txt"), "democtl"))
    only_other = replace(options, workloads=(Run(("status",), "democtl"),))
    with pytest.raises(ConfigError, match="BOLT rewrites demo, but every"):
        plan_for(only_other)
    assert plan_for(replace(only_other, bolt=False)).bolt is None


# -- steps -------------------------------------------------------------------------------
def test_workloads_run_the_binary_they_name_and_bolt_trains_on_the_main_ones(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig = make_rig(_two(project), stack, tmp_path)
    generate = {"demo": "/g/demo", "democtl": "/g/democtl"}
    assert run_workloads(rig.pipeline, generate, rig.log, "pgo-train") == [0, 1]
    profiler = rig.engine.containers[-1]
    assert profiler.argvs == [("/g/demo", "--help"), ("/g/democtl", "status")]
    assert run_workloads(rig.pipeline, {"demo": "/i/demo"}, rig.log, "bolt-profile") == [0]
    assert profiler.argvs[-1] == ("/i/demo", "--help")


def test_validation_compares_each_binary_with_its_own_baseline(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    outputs = {
        "baseline-1.stdout": b"ok\n",
        "baseline-1-again.stdout": b"ok\n",
        "optimized-1.stdout": b"ok\n",
    }
    engine = FakeEngine(missing=lambda path: outputs.get(Path(path).name, b"same\n"))
    rig = make_rig(_two(project), stack, tmp_path, engine=engine)
    rig.pipeline.ship("optimized", rig.log)
    validate.validate(rig.pipeline, rig.log)
    runs = [e.argv[6:] for e in rig.box.execs if e.argv[0] == "/bin/sh"]
    assert runs == [
        (f"{BIN_DIR}/baseline/demo", "--version"),
        (f"{BIN_DIR}/baseline/demo", "--version"),  # twice: does it print the same?
        (f"{BIN_DIR}/optimized/demo", "--version"),
        (f"{BIN_DIR}/baseline/democtl", "check", "data.txt"),
        (f"{BIN_DIR}/baseline/democtl", "check", "data.txt"),
        (f"{BIN_DIR}/optimized/democtl", "check", "data.txt"),
    ]
    record = rig.pipeline.state.validation
    assert record["identical"] is True
    assert record["runs"] == [
        {"run": ["--version"], "identical": True, "stdout_bytes": 5, "stderr_bytes": 5},
        {
            "run": {"binary": "democtl", "args": ["check", "data.txt"]},
            "identical": True,
            "stdout_bytes": 3,
            "stderr_bytes": 5,
        },
    ]
    assert len(rig.pipeline.state.expected) == 2  # what the distros step compares with
    # The second binary printing something else fails the build, naming it.
    outputs["optimized-1.stdout"] = b"not ok\n"
    with pytest.raises(ValidationError, match=r"`democtl check data\.txt`"):
        validate.validate(rig.pipeline, rig.log)


def test_every_binary_is_published_signed_in_the_sbom_and_verified(
    project: Path, tmp_path: Path
) -> None:
    options = make_options(project, binaries=("demo", "democtl"))
    key = SecretKey.generate()
    public = write_key_pair(key, tmp_path / "keys" / "signing.key", None)
    with ExitStack() as stack:
        rig = ready_to_publish(options, stack, tmp_path, Signer(key, False, "test key"))
        rig.pipeline.state.others = {"democtl": f"{BIN_DIR}/optimized/democtl"}
        for step in ("extract", "publish"):
            with rig.pipeline.reporter.step(step, step) as log:
                getattr(publish, step)(rig.pipeline, log)
    plan = rig.pipeline.plan
    published = options.artifacts_dir / plan.release_dir / plan.artifact_dir
    other = published / "democtl"
    assert other.read_bytes() == f"binary {BIN_DIR}/optimized/democtl".encode()
    verify_file(other, (published / "democtl.minisig").read_text(), key.public)
    manifest = read_record(published / "build.json", BuildManifest)
    assert [b.file for b in manifest.artifact.binaries] == ["demo", "democtl"]
    recorded = sbom_binaries((published / SBOM_FILE).read_text())
    assert recorded == {b.file: b.sha256 for b in manifest.artifact.binaries}
    release = published.parent
    provenance = json.loads((release / "provenance.intoto.jsonl").read_text())
    assert provenance["payloadType"]
    checks, _ = verify_release(release, public)
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    assert {c.file for c in checks if c.check == "signature"} >= {
        f"{plan.artifact_dir}/demo",
        f"{plan.artifact_dir}/democtl",
    }
    # One changed byte in the second binary: its signature, checksums, SBOM and provenance.
    other.write_bytes(b"tampered")
    checks, _ = verify_release(release, public)
    failed = {(c.file, c.check) for c in checks if not c.ok}
    assert (f"{plan.artifact_dir}/democtl", "signature") in failed
    assert (f"{plan.artifact_dir}/{SBOM_FILE}", "sbom") in failed
    assert ("provenance.intoto.jsonl", "provenance") in failed
    # build.json is someone else's file to verify: a binary named by a path is refused
    # before anything is read through it.
    document = json.loads((published / "build.json").read_text())
    document["artifact"]["other_binaries"][0]["file"] = "../../../outside"
    (published / "build.json").write_text(json.dumps(document))
    with pytest.raises(RecordError, match="other_binaries"):
        verify_release(release, public)


def test_a_reproduction_is_identical_only_when_every_binary_is() -> None:
    same = Reproduced("demo-1.2.3-linux-x86_64-cpu", expected="ab" * 32, got="ab" * 32)
    assert same.identical
    other = replace(same, others_differing=["democtl"])
    assert not other.identical
    assert other.as_dict()["other_binaries_differing"] == ["democtl"]


# -- sources -----------------------------------------------------------------------------
def test_artifacts_and_staging_inside_the_crate_are_not_sources(project: Path) -> None:
    """A config at the crate's root (what `orchestrator init` writes) puts artifacts/ and its
    staging folder inside the crate: a build writing there must not change its own sources."""
    crate = project / "crate"
    (crate / "orchestrator.toml").write_text('[package]\ncrate = "."\n')
    options = resolve(crate / "orchestrator.toml", env={"SOURCE_DATE_EPOCH": "1700000000"})
    assert options.artifacts_dir == crate / "artifacts"
    before = crate_snapshot(CrateView.from_options(options)).archive_sha256
    (crate / "artifacts" / "demo-1.2.3").mkdir(parents=True)
    (crate / "artifacts" / "demo-1.2.3" / "SHA256SUMS").write_text("x\n")
    staging_root(options.artifacts_dir).mkdir()
    (staging_root(options.artifacts_dir) / "half").write_text("y\n")
    assert crate_snapshot(CrateView.from_options(options)).archive_sha256 == before
    (crate / "src" / "lib.rs").write_text("// a real source change\n")
    assert crate_snapshot(CrateView.from_options(options)).archive_sha256 != before

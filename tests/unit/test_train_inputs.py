"""`[train] inputs`: data outside the crate that workloads, validation and bench read.

Each input is packed deterministically, unpacked read-only at /build/inputs/<name> for runs
of the binary, hashed into the PGO profile key and the lock, kept in the vault, and taken
from there (every entry checked) by `reproduce`, never from the paths the config names.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config.resolve.options import Options, resolve
from orchestrator.errors import ConfigError, SourceError, UnsafeArchiveError
from orchestrator.execute.optimize import variants
from orchestrator.execute.steps.pipeline import run_workloads
from orchestrator.execute.verdict.bench import BenchSetup, measure
from orchestrator.host.inputs import pack_input, pack_inputs, unpack_locked_inputs
from orchestrator.host.source import snapshot
from orchestrator.host.vault import Vault
from orchestrator.model.documents.lockfile import LockfileError, blobs, dumps, read_lock
from orchestrator.model.layout import PATHS
from orchestrator.plan.runs import INPUTS_DIR
from orchestrator.plan.serialize import plan_inputs, plan_summary

from .conftest import plan_for
from .execute_rig import make_rig
from .fakes import FakeEngine, as_engine
from .test_lockfile import lock_for

CONFIG = """\
[package]
crate = "crate"
[train]
workloads = [["--corpus", "/build/inputs/corpus"]]
inputs = ["data/corpus", "data/words.txt"]
"""


@pytest.fixture
def data(project: Path) -> Path:
    """A folder of training data beside the crate, outside it."""
    corpus = project / "data" / "corpus"
    (corpus / "deep").mkdir(parents=True)
    (corpus / "a.txt").write_bytes(b"alpha beta\n")
    (corpus / "deep" / "b.bin").write_bytes(b"\xff\xfe raw bytes\n")
    (corpus.parent / "words.txt").write_text("gamma\n")
    return corpus.parent


def _options(project: Path, text: str = CONFIG) -> Options:
    (project / "orchestrator.toml").write_text(text)
    return resolve(project / "orchestrator.toml", env={"SOURCE_DATE_EPOCH": "1700000000"})


def _members(archive: bytes) -> list[tuple[str, int, int, int]]:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return [(m.name, m.mode, m.uid, int(m.mtime)) for m in tar.getmembers()]


# -- configuration -----------------------------------------------------------------------
def test_inputs_are_paths_relative_to_the_config(project: Path, data: Path) -> None:
    options = _options(project)
    assert options.train_inputs == (data / "corpus", data / "words.txt")
    rows = {key: value for key, value, _ in options.describe()}
    assert rows["train.inputs"] == str([str(data / "corpus"), str(data / "words.txt")])


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ('["data/corpus", "../other/corpus"]', "two inputs are named 'corpus'"),
        ('["data/.hidden"]', "cannot be named in the container"),
        ('["data/corpus", ""]', "expected a list of paths"),
    ],
)
def test_inputs_that_cannot_be_mounted_are_config_errors(
    project: Path, inputs: str, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        _options(project, CONFIG.replace('["data/corpus", "data/words.txt"]', inputs))
    assert message in caught.value.message
    assert caught.value.exit_code == ConfigError.exit_code


def test_a_missing_input_stops_planning_with_its_path(project: Path) -> None:
    options = _options(project)  # no data folder: resolving does not look, planning does
    with pytest.raises(SourceError, match=r"train\.inputs: .*corpus does not exist"):
        plan_for(options)


# -- packing -----------------------------------------------------------------------------
def test_an_input_packs_to_the_same_bytes_whatever_its_times(project: Path, data: Path) -> None:
    first = pack_input(data / "corpus", "corpus")
    os.utime(data / "corpus" / "a.txt", (1, 1))
    (data / "corpus" / "deep" / "b.bin").chmod(0o600)
    again = pack_input(data / "corpus", "corpus")
    assert again.sha256 == first.sha256
    assert [m[0] for m in _members(first.archive)] == [
        "inputs/corpus",
        "inputs/corpus/a.txt",
        "inputs/corpus/deep",
        "inputs/corpus/deep/b.bin",
    ]
    assert {m[2] for m in _members(first.archive)} == {1000}
    single = pack_input(data / "words.txt", "words.txt")
    assert _members(single.archive) == [("inputs/words.txt", 0o644, 1000, 315532800)]
    (data / "corpus" / "a.txt").write_bytes(b"alpha beta!\n")
    assert pack_input(data / "corpus", "corpus").sha256 != first.sha256


def test_a_symlink_inside_an_input_is_refused(data: Path) -> None:
    (data / "corpus" / "link").symlink_to("a.txt")
    with pytest.raises(UnsafeArchiveError, match="not a plain file or folder"):
        pack_input(data / "corpus", "corpus")


# -- the plan ----------------------------------------------------------------------------
def test_input_digests_are_in_the_profile_key_the_lock_and_the_dry_run(
    project: Path, data: Path
) -> None:
    plan = plan_for(_options(project))
    digests = {item.name: item.sha256 for item in plan.run.inputs}
    assert list(digests) == ["corpus", "words.txt"]
    assert plan.run.inputs[0].path == f"{INPUTS_DIR}/corpus"
    assert plan_inputs(plan)["run"]["inputs"] == digests
    assert plan_summary(plan)["run"]["inputs"] == digests  # type: ignore[index]
    (data / "words.txt").write_text("delta\n")
    changed = plan_for(_options(project))
    assert changed.pgo is not None and plan.pgo is not None
    assert changed.pgo.profile_key != plan.pgo.profile_key
    # Without inputs, a key is what it was before inputs existed: no "run" in it at all.
    plain = plan_for(_options(project, CONFIG.replace("inputs = [", "# [")))
    assert plain.run.inputs == ()
    assert plan_inputs(plain)["run"] is None


# -- the steps ---------------------------------------------------------------------------
def test_runs_see_the_inputs_read_only_and_the_build_box_unpacks_them(
    project: Path, data: Path, stack: ExitStack, tmp_path: Path
) -> None:
    options = _options(project)
    plan = replace(
        plan_for(options),
        source=snapshot(options.crate_dir, options.source_date_epoch),
    )
    rig = make_rig(options, stack, tmp_path, plan=plan)
    vendor = tmp_path / "vendor.tar"
    vendor.write_bytes(b"vendored")
    rig.pipeline.state.vendor = vendor
    variants.build_baseline(rig.pipeline, rig.log)
    corpus, words = plan.run.inputs
    assert rig.box.puts == [
        (PATHS.root, corpus.archive),
        (PATHS.root, words.archive),
        (PATHS.root, b"vendored"),
    ]
    inputs_volume = f"orchestrator-inputs-{rig.engine.session}"
    assert rig.box.spec.volumes[inputs_volume] == INPUTS_DIR  # written once, by the box
    run_workloads(rig.pipeline, {"demo": "/g/demo"}, rig.log, "pgo-train")
    profiler = rig.engine.containers[-1]
    assert profiler.spec.purpose == "profile"
    assert profiler.spec.read_only_volumes[inputs_volume] == INPUTS_DIR
    assert inputs_volume not in profiler.spec.volumes
    assert profiler.argvs == [("/g/demo", "--corpus", "/build/inputs/corpus")]
    assert "<input corpus" in rig.text


def test_inputs_changed_after_planning_stop_the_baseline(
    project: Path, data: Path, stack: ExitStack, tmp_path: Path
) -> None:
    options = _options(project)
    plan = replace(plan_for(options), source=snapshot(options.crate_dir, 1700000000))
    rig = make_rig(options, stack, tmp_path, plan=plan)
    rig.pipeline.state.vendor = tmp_path / "vendor.tar"
    (data / "corpus" / "a.txt").write_text("edited\n")
    with pytest.raises(SourceError, match="training inputs"):
        variants.build_baseline(rig.pipeline, rig.log)
    assert rig.box.puts == []  # neither the sources nor any input went in


def test_bench_unpacks_the_inputs_beside_the_sources(tmp_path: Path) -> None:
    variants_dir = tmp_path / "variants"
    variants_dir.mkdir()
    (variants_dir / "baseline").write_bytes(b"\x7fELF")
    setup = BenchSetup(
        artifact=tmp_path / "demo-1.2.3-x86_64",
        variants_dir=variants_dir,
        image="orchestrator/cpu:x",
        sizes={"baseline": 4},
        output_dir=tmp_path / "bench",
        sources=b"sources",
        inputs=(b"input one", b"input two"),
    )
    fake = FakeEngine(responder=lambda _argv: (0, ["0 1000 10 0.01 0.00"]))
    fake.add_image(setup.image)
    measure(as_engine(fake), setup, [], runs=1, warmup=0, cpu="0", progress=lambda _l: None)
    (box,) = fake.containers
    assert [data for _path, data in box.puts[1:]] == [b"sources", b"input one", b"input two"]
    assert {path for path, _data in box.puts} == {PATHS.root}


# -- the lock, the vault and reproduce ----------------------------------------------------
def _locked(project: Path, tmp_path: Path) -> tuple[dict[str, Any], Vault, Options]:
    options = _options(project)
    plan = plan_for(options)
    vault = Vault(tmp_path / "cache" / "vault")
    raw = json.loads(dumps(lock_for(plan)))
    raw["source"]["inputs"] = [
        {"name": i.name, "sha256": vault.put_bytes(i.archive, i.name), "size": len(i.archive)}
        for i in plan.run.inputs
    ]
    return raw, vault, options


def test_the_lock_pins_each_input_and_the_vault_keeps_it(
    project: Path, data: Path, tmp_path: Path
) -> None:
    raw, vault, _options = _locked(project, tmp_path)
    path = tmp_path / "release.lock"
    path.write_text(json.dumps(raw))
    document = read_lock(path)
    found = blobs(document)
    for item in document.source.inputs:
        assert found[item.sha256] == f"input {item.name}"
        assert vault.verify(item.sha256).stat().st_size == item.size
    raw["source"]["inputs"][0]["name"] = "../../etc"
    path.write_text(json.dumps(raw))
    with pytest.raises(LockfileError, match=r"source\.inputs\.0\.name"):
        read_lock(path)


def test_reproduce_unpacks_locked_inputs_that_pack_to_the_locked_digests(
    project: Path, data: Path, tmp_path: Path
) -> None:
    raw, vault, options = _locked(project, tmp_path)
    archives = {i["name"]: vault.verify(i["sha256"]) for i in raw["source"]["inputs"]}
    # The config's paths are not read: reproduce works where they do not exist.
    elsewhere = tuple(Path("/nonexistent") / p.name for p in options.train_inputs)
    unpacked = unpack_locked_inputs(archives, elsewhere, tmp_path / "work" / "inputs")
    assert [p.name for p in unpacked] == ["corpus", "words.txt"]
    assert all(p.is_relative_to(tmp_path / "work" / "inputs") for p in unpacked)
    repacked = pack_inputs(unpacked)
    assert [i["sha256"] for i in raw["source"]["inputs"]] == [i.sha256 for i in repacked]
    with pytest.raises(SourceError, match="pins no such input"):
        unpack_locked_inputs(archives, (Path("/x/missing"),), tmp_path / "other")


def _tar(*entries: tuple[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, body in entries:
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("archive", "error", "message"),
    [
        (_tar(("inputs/other/x", b"1")), SourceError, "outside inputs/corpus"),
        (_tar(("../../escape", b"1")), UnsafeArchiveError, "climbs out"),
        (_tar(("/etc/passwd", b"1")), UnsafeArchiveError, "absolute"),
    ],
)
def test_a_hostile_locked_input_is_refused(
    tmp_path: Path, archive: bytes, error: type[Exception], message: str
) -> None:
    blob = tmp_path / "blob"
    blob.write_bytes(archive)
    dest = tmp_path / "work"
    with pytest.raises(error, match=message):
        unpack_locked_inputs({"corpus": blob}, (Path("/data/corpus"),), dest)
    assert not (tmp_path / "escape").exists()

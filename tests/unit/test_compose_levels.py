"""The -auto folder leaves out a level the gate counted no faster than the one below it
(model/verdict/level_map.py): two level targets published by the real publish step with the
gate's counts in their build.json, composed, verified, and the dispatcher (where this
host's gcc compiles it) run in the composed folder."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.config.resolve.options import FlavorSettings, Options
from orchestrator.execute.ship.dispatcher import COMPILE_FLAGS, SOURCE, dispatcher_source
from orchestrator.execute.ship.release_index import update_release_index
from orchestrator.host.cache_seal import seal
from orchestrator.model.binaries import dispatch
from orchestrator.model.binaries.dispatch import parse_show
from orchestrator.model.documents.cache_records import DispatcherCacheEntry
from orchestrator.model.documents.compose_record import COMPOSE_JSON, ComposeRecord, DispatcherInfo
from orchestrator.model.documents.records import GateInfo, GateWorkload, read_record, write_record
from orchestrator.model.hashing import sha256_bytes
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.release.assemble import compose, dispatcher_cache
from orchestrator.release.assemble.shard import compose_where_possible
from orchestrator.release.targets.release_view import ReleaseView
from orchestrator.release.targets.target import Target, TargetResult
from orchestrator.supply.archives import archived_files
from orchestrator.supply.attest import Signer
from orchestrator.supply.minisign import SecretKey, write_key_pair
from orchestrator.supply.verify import verify_release

from .conftest import plan_for
from .execute_rig import make_options
from .fakes import FakeEngine
from .publish_rig import extract_and_publish, ready_to_publish
from .test_compose import DISPATCHER

LEVELS = ("x86-64-v2", "x86-64-v3")
FOLDER = "demo-1.2.3-linux-x86_64-cpu-auto"
# minilang's shape: v3 counts more on most workloads than v2, and more on the mean
COUNTS = {
    "x86-64-v2": {"lex big.ml": 1_000_000, "run fib.ml": 2_000_000, "run sort.ml": 500_000},
    "x86-64-v3": {"lex big.ml": 1_009_000, "run fib.ml": 2_004_000, "run sort.ml": 499_000},
}


def _gate(cycles: Mapping[str, int]) -> GateInfo:
    return GateInfo(
        policy="best",
        min_gain=0.01,
        metric="estimated cycles",
        workloads=len(cycles),
        shipped="pgo-bolt",  # what the rig's pipeline ships
        per_workload=[
            GateWorkload(
                workload=name,
                cycles={"baseline": value * 2, "pgo-bolt": value},
                vs_baseline={"pgo-bolt": 0.5},
                vs_release={},
            )
            for name, value in cycles.items()
        ],
    )


def _publish(project: Path, tmp_path: Path, signer: Signer, counts: bool) -> Options:
    options = replace(make_options(project), flavor_settings={"cpu": FlavorSettings(levels=LEVELS)})
    for level in LEVELS:
        with ExitStack() as stack:
            (tmp_path / level).mkdir()
            rig = ready_to_publish(
                replace(options, target_cpu=level), stack, tmp_path / level, signer
            )
            rig.pipeline.state.gate = _gate(COUNTS[level]) if counts else None
            extract_and_publish(rig)
    return options


def _built(options: Options) -> list[tuple[TargetResult, BuildPlan]]:
    built = []
    for level in LEVELS:
        level_options = replace(options, target_cpu=level)
        plan = plan_for(level_options, "cpu")
        result = TargetResult(Target("cpu", level, level_options), plan.artifact_dir)
        result.status = "ok"
        built.append((result, plan))
    return built


def _seed_dispatcher(options: Options, image: str, data: bytes) -> None:
    """The cache entry `cached_dispatcher` reads, as a compile would have left it."""
    folder = dispatcher_cache.cache_folder(options.cache_dir, image)
    folder.mkdir(parents=True)
    (folder / "dispatcher").write_bytes(data)
    info = DispatcherInfo(
        sha256=sha256_bytes(data),
        size=len(data),
        image=image,
        source_sha256=sha256_bytes(dispatcher_source()),
        command=["gcc", "-o", "dispatcher", "dispatcher.c"],
    )
    entry = DispatcherCacheEntry(info=info, seal=seal(f"dispatcher/{folder.name}", info.dump()))
    write_record(folder / "dispatcher.json", entry)


def _compose(
    project: Path, tmp_path: Path, *, counts: bool = True, dispatcher: bytes = DISPATCHER
) -> tuple[Path, list[str], str, Path]:
    key = SecretKey.generate()
    public = write_key_pair(key, tmp_path / "keys" / "signing.key", None)
    signer = Signer(key, False, "test key")
    options = _publish(project, tmp_path, signer, counts)
    built = _built(options)
    release = options.artifacts_dir / built[0][1].release_dir
    _seed_dispatcher(options, built[0][1].image.reference, dispatcher)
    said: list[str] = []
    written = compose.compose_release(
        ReleaseView.from_options(options),
        release,
        built,
        FakeEngine(),
        signer=signer,
        announce=said.append,
    )
    update_release_index(release, signer, vouched=tuple(written))
    checks, _ = verify_release(release, public)
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    composed = next(c for c in checks if c.check == "composed")
    return release, said, composed.detail, public


def test_a_level_counting_more_cycles_is_left_out_of_the_auto_folder(
    project: Path, tmp_path: Path
) -> None:
    release, said, detail, public = _compose(project, tmp_path)
    record = read_record(release / FOLDER / COMPOSE_JSON, ComposeRecord)
    assert list(record.levels) == ["x86-64-v2"]  # only the kept level ships
    v3 = record.decisions["x86-64-v3"]
    assert not v3.kept and v3.target.endswith("-cpu-v3") and v3.workloads == 3
    assert (v3.cycles, v3.against_cycles) == (3_512_000, 3_500_000)
    assert v3.reason.startswith("left out: 0.3% more estimated cycles than x86-64-v2")
    assert record.decisions["x86-64-v2"].kept
    archived = archived_files(release / f"{FOLDER}.tar.xz")
    assert {name for name in archived if name.startswith("libexec/")} == {
        "libexec/demo/demo-x86-64-v2"
    }
    assert not (release / FOLDER / "libexec" / "demo" / "demo-x86-64-v3").exists()
    assert (release / v3.target / "demo").is_file()  # the level's own folder still ships
    assert detail.endswith("left out: x86-64-v3"), detail
    assert any("x86-64-v3 left out: 0.3% more" in line for line in said), said
    # compose.json's decision is checked against the level folders' signed counts
    document = json.loads((release / FOLDER / COMPOSE_JSON).read_text())
    document["decisions"]["x86-64-v3"]["kept"] = True
    (release / FOLDER / COMPOSE_JSON).write_text(json.dumps(document))
    checks, _ = verify_release(release, public)
    failed = {c.check: c.detail for c in checks if not c.ok}
    assert "gate counts give" in failed["composed"]


def test_assemble_from_copied_level_folders_composes_the_same_bytes(
    project: Path, tmp_path: Path
) -> None:
    """`release assemble` composes from level folders built elsewhere and copied in, with
    the dispatcher they carried: the decision reads only their signed build.json, so
    compose.json and the archive come out byte for byte as on one machine."""
    release, _said, _detail, _public = _compose(project, tmp_path)
    options = replace(make_options(project), flavor_settings={"cpu": FlavorSettings(levels=LEVELS)})
    built = _built(options)
    elsewhere = tmp_path / "assembled" / release.name
    for _result, plan in built:
        shutil.copytree(release / plan.artifact_dir, elsewhere / plan.artifact_dir)
    record = read_record(release / FOLDER / COMPOSE_JSON, ComposeRecord)
    carried = {built[0][1].image.reference: (record.dispatcher, DISPATCHER)}
    written = compose_where_possible(
        ReleaseView.from_options(options),
        elsewhere,
        built,
        Signer(SecretKey.generate(), False, "another key"),
        announce=print,
        warn=print,
        carried=carried,
    )
    assert FOLDER in written
    for name in (f"{FOLDER}/{COMPOSE_JSON}", f"{FOLDER}.tar.xz"):
        assert (elsewhere / name).read_bytes() == (release / name).read_bytes()


def test_without_gate_counts_every_level_ships_as_before(project: Path, tmp_path: Path) -> None:
    release, _said, detail, _ = _compose(project, tmp_path, counts=False)
    record = read_record(release / FOLDER / COMPOSE_JSON, ComposeRecord)
    assert list(record.levels) == list(LEVELS)
    assert record.decisions["x86-64-v3"].kept
    assert "its gate recorded no counts" in record.decisions["x86-64-v3"].reason
    assert "left out" not in detail


_HOST_GCC = shutil.which("gcc") if platform.machine() == "x86_64" else None


@pytest.mark.skipif(_HOST_GCC is None, reason="needs gcc on an x86_64 host")
def test_the_dispatcher_runs_the_kept_lower_level_on_a_higher_cpu(
    project: Path, tmp_path: Path
) -> None:
    compiled = tmp_path / "dispatcher"
    subprocess.run(
        ["gcc", *COMPILE_FLAGS, "-o", str(compiled), str(SOURCE)], check=True, capture_output=True
    )
    release, _said, _, _ = _compose(project, tmp_path, dispatcher=compiled.read_bytes())
    tool = release / FOLDER / "bin" / "demo"
    env = {k: v for k, v in os.environ.items() if k != dispatch.LEVEL_VARIABLE}

    def run(level: str) -> subprocess.CompletedProcess[str]:
        wanted = {**env, dispatch.LEVEL_VARIABLE: level}
        return subprocess.run([tool], env=wanted, capture_output=True, text=True, check=False)

    shown = run(dispatch.SHOW)
    assert shown.returncode == 0, shown.stderr
    choice = parse_show(shown.stdout)
    assert choice.cpu != "x86-64"  # below v2 nothing of this folder runs
    assert choice.level == "x86-64-v2"
    assert choice.path.endswith("libexec/demo/demo-x86-64-v2")
    if choice.cpu in ("x86-64-v3", "x86-64-v4"):  # the CPU of the level left out runs v2
        assert run("v3").returncode == dispatch.EXIT_MISSING

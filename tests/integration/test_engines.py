"""A release spread over two real Docker Engines: the host's and a second dockerd started
for these tests (second_engine.py), reached by its own Docker context.

A three-target release (the mixed-language crate at three CPU levels) over both engines
gives the same bytes as the same release where one engine built everything, `reproduce
--engine` on the second engine (over tcp:// with mutual TLS) rebuilds a target the host
built, bit for bit, and when the second engine dies mid-release its target finishes on the
host and the summary says so.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import certifi
import docker
import pytest

from orchestrator.config.resolve.options import resolve_cache_dir
from tests.integration.conftest import REPO, STARTED_PIDS, Run, managed_containers, orchestrator
from tests.integration.second_engine import SecondEngine, second_engine

pytestmark = pytest.mark.integration

CONTEXT = "orchestrator-test-second"
FIXTURE = REPO / "tests" / "fixtures" / "mixed-language"
RELEASE = "mixed-language-0.1.0"
LEVELS = ("x86-64", "x86-64-v2", "x86-64-v3")
# build.target_cpu (x86-64-v2) names the plain artifact; other levels add a suffix
ARTIFACTS = [f"{RELEASE}-linux-x86_64-cpu{suffix}" for suffix in ("-x86-64", "", "-v3")]
# Just what these tests are about: the same bytes wherever a target is built.
CONFIG = f"""
[package]
crate = "."

[build]
source_date_epoch = 1700000000

[flavors.cpu]
levels = {json.dumps(list(LEVELS))}

[pgo]
enabled = false

[bolt]
enabled = false

[gate]
policy = "off"

[test]
enabled = false
reason = "the engines tests are about where a target is built"

[release]
distro_check = "off"

[validate]
command = ["3000"]

[engines]
contexts = ["default", "{CONTEXT}"]
"""


@pytest.fixture(scope="module")
def second() -> Iterator[SecondEngine]:
    with second_engine(CONTEXT) as engine:
        yield engine


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    project = tmp_path_factory.mktemp("engines") / "mixed-language"
    shutil.copytree(FIXTURE, project, ignore=shutil.ignore_patterns("target"))
    (project / "orchestrator.toml").write_text(CONFIG)
    return project


def release(project: Path, artifacts: Path, *extra: str, env: dict[str, str] | None = None) -> Run:
    config = ["--config", str(project / "orchestrator.toml"), "--artifacts-dir", str(artifacts)]
    argv = ["release", *config, "--bench-runs", "0", "--allow-dirty", *extra]
    return orchestrator(argv, env=env)


def summary(artifacts: Path) -> dict[str, dict[str, Any]]:
    """Each target's last build, as the release's unsigned logs/targets.json has it."""
    document = json.loads((artifacts / RELEASE / "logs" / "targets.json").read_text())
    return {entry["artifact"]: entry for entry in document["targets"]}


def binaries(artifacts: Path) -> dict[str, str]:
    return {name: entry["sha256"] for name, entry in summary(artifacts).items()}


@pytest.fixture(scope="module")
def spread(project: Path, second: SecondEngine, docker_client: docker.DockerClient) -> Path:
    """The release over both engines; the second one starts with no image at all."""
    artifacts = project.parent / "spread"
    run = release(project, artifacts)
    assert run.returncode == 0, run.output
    assert managed_containers(docker_client) == []
    assert [c.id for c in second.client().containers.list(all=True)] == []
    return artifacts


def test_both_engines_build_and_every_record_says_which(spread: Path) -> None:
    entries = summary(spread)
    assert sorted(entries) == sorted(ARTIFACTS)
    assert {entry["status"] for entry in entries.values()} == {"ok"}
    engines = {entry["engine"] for entry in entries.values()}
    assert engines == {"default", CONTEXT}  # each engine built at least one target
    # Where a target was built is in its unsigned logs/run.json; nothing signed says it
    # (two honest engines sign the same bytes): not build.json, the lock or the provenance
    lock = json.loads((spread / RELEASE / "release.lock").read_text())
    assert [target["built_on"] for target in lock["targets"]] == [None] * len(ARTIFACTS)
    for name, entry in entries.items():
        run = json.loads((spread / RELEASE / name / "logs" / "run.json").read_text())
        assert run["engine"]["context"] == entry["engine"]
        assert run["engine"]["storage_driver"] and run["engine"]["kernel"]
        manifest = json.loads((spread / RELEASE / name / "build.json").read_text())
        assert manifest["engine"] is None
    envelope = json.loads((spread / RELEASE / "provenance.intoto.jsonl").read_text())
    provenance = json.loads(base64.b64decode(envelope["payload"]))
    byproducts = provenance["predicate"]["runDetails"]["byproducts"]
    assert not [item for item in byproducts if "annotations" in item]


def test_reproduce_on_the_other_engine_over_tls_gives_the_same_bytes(
    spread: Path, project: Path, second: SecondEngine
) -> None:
    """A target the host built, rebuilt from the lock on the second engine, reached this
    time over tcp:// with mutual TLS by its other context. REQUESTS_CA_BUNDLE is set as a
    company machine sets it: the context's own CA must still be the one that verifies the
    engine. (The project is outside git: its sources come from --source.)"""
    on_host = next(n for n, e in summary(spread).items() if e["engine"] == "default")
    run = orchestrator(
        [
            "reproduce",
            str(spread / RELEASE),
            "--engine",
            second.tls_context,
            "--artifact",
            on_host,
            "--reuse-images",
            "--source",
            str(project),
            "--workdir",
            str(spread.parent / "reproduced"),
        ],
        env={"REQUESTS_CA_BUNDLE": certifi.where()},
    )
    assert run.returncode == 0, run.output
    assert "bit-identical" in run.output
    said = " ".join(run.output.split())  # the console wraps long lines
    assert f"on {second.tls_context} (Docker " in said  # where it rebuilt
    assert "the release built it on default (Docker " in said


def _restored_cache(main: Path, where: Path, *, steps: bool) -> Path:
    """A cache of its own holding what a CI runner's actions/cache would restore (rootfs,
    .debs, vendored crates, and with `steps` the step cache), hard-linked from `main`: no
    vault, stored profile or key."""
    for part in ("rootfs", "packages", "crates", *(["steps"] if steps else [])):
        if (main / part).is_dir():
            shutil.copytree(main / part, where / part, copy_function=os.link)
    return where


def _published_bytes(release: Path) -> dict[str, bytes]:
    """Every file of a release whose bytes do not record when or where it was built:
    binaries, their signatures and SBOMs, archives, install.sh and their signatures."""
    timed = {"build.json", "SHA256SUMS", "SHA256SUMS.minisig", "release.json", "release.lock"}
    found = {}
    for path in sorted(release.rglob("*")):
        relative = path.relative_to(release).as_posix()
        recorded_times = path.name in timed or path.name.startswith("provenance")
        if path.is_file() and not recorded_times and "/logs/" not in f"/{relative}":
            found[relative] = path.read_bytes()
    return found


def _lock_without_hosts(release: Path) -> dict[str, Any]:
    lock: dict[str, Any] = json.loads((release / "release.lock").read_text())
    for target in lock["targets"]:
        target.pop("built_on")
    return lock


@pytest.fixture(scope="module")
def shards(
    project: Path, spread: Path, second: SecondEngine, tmp_path_factory: pytest.TempPathFactory
) -> list[Path]:
    """The CI path: each target built by `build --target` in a process of its own, with a
    cache and output folder of its own (the second target on the second engine), no key
    anywhere. `spread` first: its release signs with the cache's key, which assemble uses."""
    tmp_path = tmp_path_factory.mktemp("shards")
    config = ["--config", str(project / "orchestrator.toml")]
    main_cache = resolve_cache_dir(os.environ, None)
    folders = []
    for index, artifact in enumerate(ARTIFACTS):
        on_second = index == 1
        # The shard on the second engine builds every step afresh, the others take them
        # from a restored step cache (as a runner's actions/cache could): CI minutes.
        cache = _restored_cache(main_cache, tmp_path / f"cache-{index}", steps=not on_second)
        run = orchestrator(
            [
                "build",
                *config,
                "--target",
                artifact.removeprefix(f"{RELEASE}-"),
                "--out",
                str(tmp_path / f"out-{index}"),
                "--artifacts-dir",
                str(tmp_path / f"artifacts-{index}"),
                "--cache-dir",
                str(cache),
                "--bench-runs",
                "0",
            ],
            env={"DOCKER_HOST": f"unix://{second.socket}"} if on_second else None,
        )
        assert run.returncode == 0, run.output
        folder = tmp_path / f"out-{index}" / artifact
        assert not list(folder.rglob("*.minisig")), "a runner signs nothing"
        record = json.loads((folder / "target.json").read_text())
        assert record["artifact"] == artifact
        assert record["summary"]["engine"] == "current"
        folders.append(folder)
    assert not (tmp_path / "cache-0" / "keys").exists()
    return folders


def test_targets_built_apart_then_assembled_give_the_bytes_of_one_release(
    project: Path, spread: Path, shards: list[Path], tmp_path: Path
) -> None:
    """`release assemble` signs the shards where the key is: the release is the spread
    one, byte for byte, and its lock reproduces bit for bit from a shard's vault."""
    config = ["--config", str(project / "orchestrator.toml")]
    folders = shards
    assembled = tmp_path / "assembled"
    assemble = ["release", "assemble", *map(str, folders), *config]
    assemble += ["--artifacts-dir", str(assembled), "--allow-dirty"]
    run = orchestrator(assemble)
    assert run.returncode == 0, run.output
    ours, theirs = _published_bytes(assembled / RELEASE), _published_bytes(spread / RELEASE)
    assert sorted(ours) == sorted(theirs)
    assert [name for name in ours if ours[name] != theirs[name]] == []
    assert any(name.endswith(".tar.xz") for name in ours)
    assert _lock_without_hosts(assembled / RELEASE) == _lock_without_hosts(spread / RELEASE)
    verify = orchestrator(["verify", str(assembled / RELEASE)])
    assert verify.returncode == 0, verify.output

    reproduced = orchestrator(
        [
            "reproduce",
            str(assembled / RELEASE),
            "--artifact",
            ARTIFACTS[1],
            "--reuse-images",
            "--source",
            str(project),
            "--cache-dir",
            str(shards[1].parent.parent / "cache-1"),
            "--workdir",
            str(tmp_path / "reproduced"),
        ]
    )
    assert reproduced.returncode == 0, reproduced.output
    assert "bit-identical" in reproduced.output


def test_assemble_refuses_a_changed_folder_a_missing_target_and_another_checkout(
    project: Path, shards: list[Path], tmp_path: Path
) -> None:
    """Refused before anything is written: a changed folder (69), a missing target, and
    folders built from other sources than the checkout's (70)."""
    config = ["--config", str(project / "orchestrator.toml")]
    folders = shards
    refused = tmp_path / "refused"
    tampered = tmp_path / "tampered" / ARTIFACTS[0]
    shutil.copytree(folders[0], tampered)
    binary = next(p for p in tampered.iterdir() if p.name == "mixed-language")
    binary.write_bytes(binary.read_bytes() + b"\0")
    argv = [*config, "--artifacts-dir", str(refused), "--allow-dirty"]
    run = orchestrator(["release", "assemble", str(tampered), *map(str, folders[1:]), *argv])
    assert run.returncode == 69, run.output
    assert "mixed-language changed" in run.output
    run = orchestrator(["release", "assemble", *map(str, folders[1:]), *argv])
    assert run.returncode == 70, run.output
    assert f"no folder for 1 target(s): {ARTIFACTS[0]}" in run.output
    changed = tmp_path / "changed"
    shutil.copytree(project, changed)
    with (changed / "src" / "main.rs").open("a") as source:
        source.write("// another commit\n")
    other = ["--config", str(changed / "orchestrator.toml"), "--artifacts-dir", str(refused)]
    run = orchestrator(["release", "assemble", *map(str, folders), *other, "--allow-dirty"])
    assert run.returncode == 70, run.output
    assert "built from another plan" in run.output
    assert not refused.exists()


def _edited_to_match(folder: Path, name: str, data: bytes, *, main: bool) -> None:
    """What a runner that lies does after its build: put `data` in the folder as `name`
    and rewrite build.json, the SBOM and target.json so that every hash agrees with it."""
    path = folder / name
    old = hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None
    path.write_bytes(data)
    path.chmod(0o755)
    digest, size = hashlib.sha256(data).hexdigest(), len(data)
    manifest = json.loads((folder / "build.json").read_text())
    entry = {"file": name, "sha256": digest, "size": size}
    if main:
        manifest["artifact"].update(sha256=digest, size=size)
    else:
        manifest["artifact"]["other_binaries"].append(entry)
    (folder / "build.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    sbom = (folder / "sbom.cdx.json").read_text()
    (folder / "sbom.cdx.json").write_text(sbom.replace(old, digest) if old else sbom)
    record = json.loads((folder / "target.json").read_text())
    for listed in ("build.json", "sbom.cdx.json", name):
        record["files"][listed] = hashlib.sha256((folder / listed).read_bytes()).hexdigest()
    if main:
        record["lock"]["output"].update(sha256=digest, size=size)
        record["summary"].update(sha256=digest, size=size)
    else:
        record["lock"]["other_outputs"].append(entry)
    (folder / "target.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")


def test_assemble_refuses_a_swapped_binary_and_an_extra_binary(
    project: Path, shards: list[Path], tmp_path: Path
) -> None:
    """Issue 38's recipes on real folders, every record edited to match: the x86-64-v3
    binary in the x86-64-v2 folder is refused by its instructions (71), an extra binary
    listed in build.json and target.json by the plan's binaries (69). Nothing is written."""
    config = ["--config", str(project / "orchestrator.toml")]
    refused = tmp_path / "refused"
    argv = [*config, "--artifacts-dir", str(refused), "--allow-dirty"]
    swapped = tmp_path / "swapped" / ARTIFACTS[1]
    shutil.copytree(shards[1], swapped)
    v3 = (shards[2] / "mixed-language").read_bytes()
    _edited_to_match(swapped, "mixed-language", v3, main=True)
    run = orchestrator(["release", "assemble", str(shards[0]), str(swapped), str(shards[2]), *argv])
    assert run.returncode == 71, run.output
    said = " ".join(run.output.split())
    assert f"{ARTIFACTS[1]}/mixed-language is not an x86-64-v2 binary" in said
    assert "it was built for x86-64-v3" in said
    extra = tmp_path / "extra" / ARTIFACTS[0]
    shutil.copytree(shards[0], extra)
    _edited_to_match(extra, "sudo", (shards[0] / "mixed-language").read_bytes(), main=False)
    run = orchestrator(["release", "assemble", str(extra), *map(str, shards[1:]), *argv])
    assert run.returncode == 69, run.output
    assert "sudo is not a file that the plan of" in " ".join(run.output.split())
    assert not refused.exists()


@pytest.fixture(scope="module")
def second_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The second builder's own cache, shared by the two-builder tests (it starts empty:
    the second build reads nothing the first one cached)."""
    return tmp_path_factory.mktemp("second-builder") / "cache"


def _one_level_copy(source: Path, destination: Path, config: str) -> Path:
    """A copy of `source` released at x86-64-v2 only, on the current engine alone."""
    shutil.copytree(source, destination, ignore=shutil.ignore_patterns("target"))
    text = config.replace(f"levels = {json.dumps(list(LEVELS))}", 'levels = ["x86-64-v2"]')
    text = text.replace(f'contexts = ["default", "{CONTEXT}"]', "")
    (destination / "orchestrator.toml").write_text(text)
    return destination


def test_two_builders_on_two_engines_agree_and_the_release_is_signed(
    project: Path, spread: Path, second: SecondEngine, second_cache: Path, tmp_path: Path
) -> None:
    """`release --rebuild-on`: the target built on this engine and again on the second one
    with an empty cache of its own; both shipped the same bytes, so the release is signed,
    and it holds the bytes of the release spread over both engines."""
    del second  # running, with its context
    single = _one_level_copy(project, tmp_path / "mixed-language", CONFIG)
    artifacts = tmp_path / "artifacts"
    rebuild = ["--rebuild-on", CONTEXT, "--rebuild-cache-dir", str(second_cache)]
    run = release(single, artifacts, *rebuild)
    assert run.returncode == 0, run.output
    assert f"agreed: {ARTIFACTS[1]}: 1 shipped file(s) byte-identical" in run.output
    assert f"(second builder, cache {second_cache.resolve()})" in run.output
    assert list((second_cache / "steps").iterdir())  # the second build cached its own steps
    ours = artifacts / RELEASE / ARTIFACTS[1]
    theirs = spread / RELEASE / ARTIFACTS[1]
    assert (ours / "mixed-language").read_bytes() == (theirs / "mixed-language").read_bytes()
    archive = f"{ARTIFACTS[1]}.tar.xz"
    assert (artifacts / RELEASE / archive).read_bytes() == (spread / RELEASE / archive).read_bytes()
    verify = orchestrator(["verify", str(artifacts / RELEASE)])
    assert verify.returncode == 0, verify.output


def test_a_build_that_is_not_reproducible_is_refused_by_the_two_builder_rule(
    second: SecondEngine, second_cache: Path, tmp_path: Path
) -> None:
    """A build script that bakes a random byte into the binary: the two builds differ, the
    release refuses to sign (77), names the first differing file, offset and ELF section,
    and publishes nothing."""
    del second
    project = tmp_path / "random-byte"
    shutil.copytree(REPO / "tests" / "fixtures" / "random-byte", project)
    artifacts = tmp_path / "artifacts"
    rebuild = ["--rebuild-on", CONTEXT, "--rebuild-cache-dir", str(second_cache)]
    config = ["--config", str(project / "orchestrator.toml"), "--artifacts-dir", str(artifacts)]
    run = orchestrator(["release", *config, "--bench-runs", "0", "--allow-dirty", *rebuild])
    assert run.returncode == 77, run.output
    artifact = "random-byte-0.1.0-linux-x86_64-cpu"
    assert f"{artifact}: the two builds differ, so neither is signed: random-byte:" in run.output
    assert re.search(
        r"first differing byte at offset \d+ \(0x[0-9a-f]+\), in ELF section \S+", run.output
    )
    assert not (artifacts / "random-byte-0.1.0").exists()


def test_a_dead_engine_moves_its_target_and_the_bytes_equal_the_spread_release(
    project: Path, spread: Path, second: SecondEngine, docker_client: docker.DockerClient
) -> None:
    artifacts = project.parent / "killed"
    config = ["--config", str(project / "orchestrator.toml"), "--artifacts-dir", str(artifacts)]
    argv = ["release", *config, "--bench-runs", "0", "--allow-dirty"]
    process = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", *argv],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    STARTED_PIDS.add(process.pid)
    client = second.client()
    deadline = time.monotonic() + 600
    while not client.containers.list(filters={"label": "org.orchestrator.managed=1"}):
        assert process.poll() is None and time.monotonic() < deadline, "no build reached it"
        time.sleep(0.2)
    second.kill()  # in the middle of a build
    output, _ = process.communicate(timeout=1800)
    sys.stdout.write(output)
    assert process.returncode == 0, output
    entries = summary(artifacts)
    assert {entry["status"] for entry in entries.values()} == {"ok"}
    assert {entry["engine"] for entry in entries.values()} == {"default"}
    moved = [entry for entry in entries.values() if entry["moved_from"]]
    assert len(moved) == 1
    assert moved[0]["moved_from"][0].startswith(f"{CONTEXT}: ")
    assert f"engine {CONTEXT}: the engine stopped answering" in output
    # nothing lost, nothing different: the bytes of the release spread over both engines
    assert binaries(artifacts) == binaries(spread)
    assert managed_containers(docker_client) == []


def test_several_builds_side_by_side_on_one_engine_give_the_same_bytes(
    project: Path, spread: Path, docker_client: docker.DockerClient
) -> None:
    """engines.jobs 3 on the host's engine alone: the three builds run at once in one
    process (each with a session of its own: staging, volumes, crate downloads) and give
    the bytes of the release spread over two engines."""
    artifacts = project.parent / "side-by-side"
    run = release(
        project, artifacts, "--engines", "default", env={"ORCHESTRATOR_ENGINES_JOBS": "3"}
    )
    assert run.returncode == 0, run.output
    assert "at most 3 at a time" in run.output
    assert {entry["engine"] for entry in summary(artifacts).values()} == {"default"}
    assert binaries(artifacts) == binaries(spread)
    assert managed_containers(docker_client) == []
    assert not (project.parent / ".side-by-side.staging").exists()

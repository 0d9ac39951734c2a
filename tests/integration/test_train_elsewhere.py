"""`build --train-elsewhere` and `build --profiles` for real, on portable-cli's cpu and
aarch64 flavors: the bundle's train.sh runs in a bare Debian container (orchestrator's
base image: no orchestrator, no toolchain, no network, PATH=/usr/bin:/bin; for aarch64 an
arm64 Debian root filesystem in it, run through qemu by binfmt_misc: arm_machine.py), the
profile merged from what it brings back is the very profile that training in place makes,
and the release locked from that build reproduces bit for bit from its lock."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import docker
import pytest

from orchestrator.config.resolve.toolchains import load_base_spec
from tests.integration.arm_machine import arm64_rootfs, emulator_from, run_on_arm
from tests.integration.conftest import REPO, managed_containers, orchestrator

pytestmark = pytest.mark.integration
FIXTURE = REPO / "tests" / "fixtures" / "portable-cli"
CONFIG = """[package]
crate = "."
binary = "sumtool"

[build]
source_date_epoch = 1700000000
flavors = ["{flavor}"]

[release]
glibc_floor = "2.28"
distro_check = "off"

[train]
workloads = [["data/numbers.txt", "40"], ["data/numbers.txt", "3"]]

[validate]
command = ["data/numbers.txt", "2"]

[bench]
command = ["data/numbers.txt", "200"]

[bolt]
enabled = false

[gate]
policy = "off"
"""


def _images(config: list[str]) -> tuple[str, str]:
    """The plan's base image (a bare Debian) and toolchain image references."""
    plan = orchestrator(["build", *config, "--dry-run"])
    assert plan.returncode == 0, plan.output
    data, _ = json.JSONDecoder().raw_decode(plan.output[plan.output.index("{") :])
    return str(data["base_image"]["reference"]), str(data["image"]["reference"])


def _build_json(artifacts: Path, flavor: str = "cpu") -> dict[str, Any]:
    arch = "aarch64" if flavor == "aarch64" else "x86_64"
    (found,) = artifacts.glob(f"*/sumtool-*-linux-{arch}-cpu/build.json")
    data: dict[str, Any] = json.loads(found.read_text())
    return data


def _project(tmp_path: Path, flavor: str) -> tuple[Path, list[str]]:
    project = tmp_path / "project"
    shutil.copytree(FIXTURE, project, ignore=shutil.ignore_patterns("target"))
    (project / "orchestrator.toml").write_text(CONFIG.replace("{flavor}", flavor))
    return project, ["--flavor", flavor, "--config", str(project / "orchestrator.toml")]


def _export(config: list[str], artifacts: Path, bundle: Path) -> None:
    export = orchestrator(
        ["build", *config, "--artifacts-dir", str(artifacts), "--train-elsewhere", str(bundle)]
    )
    assert export.returncode == 0, export.output
    assert {"train.sh", "manifest.json", "manifest.json.minisig"} <= {
        p.name for p in bundle.iterdir()
    }
    assert (bundle / "src" / "data" / "numbers.txt").is_file()


def _locked_and_reproduced(config: list[str], artifacts: Path, project: Path) -> dict[str, Any]:
    """`lock` of the build's release, then `reproduce` from that lock alone: bit for bit.
    Returns the lock's profile entry."""
    lock = orchestrator(["lock", *config[2:], "--artifacts-dir", str(artifacts), "--allow-dirty"])
    assert lock.returncode == 0, lock.output
    (release,) = artifacts.glob("sumtool-*")
    (target,) = json.loads((release / "release.lock").read_text())["targets"]
    rebuild = project.parent / "rebuild"
    argv = ["reproduce", str(release), "--source", str(project), "--workdir", str(rebuild)]
    run = orchestrator([*argv, "--reuse-images"])
    assert run.returncode == 0, run.output
    assert "the artifact is bit-identical" in run.output, run.output
    profile: dict[str, Any] = target["resolved"]["profiles"]["pgo.profdata"]
    return profile


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_profiles_trained_in_a_bare_container_equal_training_here(
    tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    started = time.monotonic()
    project, config = _project(tmp_path, "cpu")
    base_image, _ = _images(config)

    here = orchestrator(["build", *config, "--retrain", "--artifacts-dir", str(tmp_path / "a1")])
    assert here.returncode == 0, here.output
    trained_here = _build_json(tmp_path / "a1")["pgo"]
    assert trained_here["profile_source"] == "trained here"

    bundle = tmp_path / "bundle"
    _export(config, tmp_path / "a2", bundle)
    copy = tmp_path / "elsewhere"
    shutil.copytree(bundle, copy)
    trained = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "-v", f"{copy}:/bundle",
         base_image, "env", "-i", "PATH=/usr/bin:/bin", "sh", "/bundle/train.sh"],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr

    tar = copy / "profiles.tar"
    back = orchestrator(
        ["build", *config, "--artifacts-dir", str(tmp_path / "a3"), "--profiles", str(tar)]
    )
    assert back.returncode == 0, back.output
    elsewhere = _build_json(tmp_path / "a3")["pgo"]
    source = str(elsewhere["profile_source"])
    assert source.startswith("trained elsewhere: arch x86_64, cpu ")
    assert source.endswith(f"bundle {_sha(bundle / 'manifest.json')}, profiles {_sha(tar)}")
    assert elsewhere["profile"]["sha256"] == trained_here["profile"]["sha256"]
    locked = _locked_and_reproduced(config, tmp_path / "a3", project)
    assert locked["sha256"] == elsewhere["profile"]["sha256"]
    assert locked["details"]["profile_source"] == source
    assert managed_containers(docker_client) == []
    print(f"train-elsewhere round trip, cpu: {time.monotonic() - started:.0f} s")


@pytest.mark.extended
def test_aarch64_profiles_trained_on_an_emulated_arm_machine_reproduce_from_the_lock(
    tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    """train.sh in an arm64 Debian root filesystem, every binary run by binfmt_misc's
    qemu-aarch64 (arm_machine.py): the Arm machine the bundle is for, emulated."""
    started = time.monotonic()
    binfmt_before = _binfmt_entries()
    project, config = _project(tmp_path, "aarch64")
    base_image, toolchain_image = _images(config)

    here = orchestrator(["build", *config, "--retrain", "--artifacts-dir", str(tmp_path / "a1")])
    assert here.returncode == 0, here.output
    trained_here = _build_json(tmp_path / "a1", "aarch64")["pgo"]
    assert trained_here["profile_source"] == "trained here"

    bundle = tmp_path / "bundle"
    _export(config, tmp_path / "a2", bundle)
    built = time.monotonic()
    machine = arm64_rootfs(tmp_path / "arm64", load_base_spec().mirror)
    emulator = emulator_from(toolchain_image, tmp_path / "qemu-aarch64")
    shutil.copytree(bundle, machine / "bundle")
    # The bundle refuses a machine of another architecture: the x86_64 container itself.
    wrong = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "-v", f"{machine / 'bundle'}:/bundle",
         base_image, "env", "-i", "PATH=/usr/bin:/bin", "sh", "/bundle/train.sh"],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert wrong.returncode == 3, wrong.stderr
    assert "this bundle is for aarch64 machines; this one is x86_64" in wrong.stderr
    uname = run_on_arm(base_image, machine, emulator, ["uname", "-m"])
    assert (uname.returncode, uname.stdout) == (0, "aarch64\n"), uname.stderr
    trained = run_on_arm(base_image, machine, emulator, ["sh", "/bundle/train.sh"])
    assert trained.returncode == 0, trained.stderr
    on_arm = time.monotonic() - built

    tar = machine / "bundle" / "profiles.tar"
    back = orchestrator(
        ["build", *config, "--artifacts-dir", str(tmp_path / "a3"), "--profiles", str(tar)]
    )
    assert back.returncode == 0, back.output
    manifest = _build_json(tmp_path / "a3", "aarch64")
    elsewhere = manifest["pgo"]
    source = str(elsewhere["profile_source"])
    assert source.startswith("trained elsewhere: arch aarch64, cpu ")
    assert source.endswith(f"bundle {_sha(bundle / 'manifest.json')}, profiles {_sha(tar)}")
    # The same instrumented binary on the same workloads counts the same, whether qemu ran
    # it in the build container (`qemu-aarch64 -L`) or binfmt_misc did on the Arm rootfs.
    assert elsewhere["profile"]["sha256"] == trained_here["profile"]["sha256"]
    assert manifest["artifact"]["target"] == "aarch64-unknown-linux-gnu"
    locked = _locked_and_reproduced(config, tmp_path / "a3", project)
    assert locked["sha256"] == elsewhere["profile"]["sha256"]
    assert locked["details"]["profile_source"] == source
    assert _binfmt_entries() == binfmt_before  # nothing was registered on the host
    assert managed_containers(docker_client) == []
    print(
        f"train-elsewhere round trip, aarch64: {time.monotonic() - started:.0f} s "
        f"(the Arm machine made and train.sh run on it: {on_arm:.0f} s)"
    )


BINFMT = Path("/proc/sys/fs/binfmt_misc")


def _binfmt_entries() -> set[str]:
    return {entry.name for entry in BINFMT.iterdir()} if BINFMT.is_dir() else set()

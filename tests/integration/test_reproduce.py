"""release.lock and the vault, then `orchestrator reproduce`: offline, fresh images,
bit-identical; a tampered vault file refused; a changed source byte reported."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import docker
import pytest

from orchestrator.config.resolve.options import resolve_cache_dir
from orchestrator.host.vault import Vault
from tests.integration.conftest import (
    AARCH64_ARTIFACT,
    CPU_ARTIFACT,
    CrossRelease,
    managed_containers,
    managed_images,
    orchestrator,
    profile_names,
)

pytestmark = pytest.mark.integration


def _vault() -> Vault:
    return Vault(resolve_cache_dir(os.environ) / "vault")


def _vault_copy(cache: Path, tampered: str) -> Path:
    """A cache whose vault links every blob of the real one, but holds its own altered
    copy of `tampered`: the test never writes into the developer's cache."""
    real = _vault()
    for blob in (real.root / "sha256").rglob("*"):
        if not blob.is_file():
            continue
        target = cache / "vault" / blob.relative_to(real.root)
        target.parent.mkdir(parents=True, exist_ok=True)
        if blob.name == tampered:
            data = blob.read_bytes()
            target.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
        else:
            os.link(blob, target)
    return cache


def test_lock_pins_every_input_and_checks_drift(cross_release: CrossRelease) -> None:
    lock = cross_release.lock
    assert lock["schema"] == "orchestrator/lock" and lock["schema_version"] == 1
    assert lock["base"]["rootfs_sha256"] and lock["source"]["vendor_sha256"]
    made_with = lock["base"]["mmdebstrap"]["command"]
    assert made_with[0] == "mmdebstrap" and lock["base"]["suite"] in made_with
    assert {c["name"] for c in lock["source"]["crates"]} >= {"rayon", "rayon-core"}
    targets = {t["inputs"]["artifact"]: t for t in lock["targets"]}
    assert set(targets) == {CPU_ARTIFACT, AARCH64_ARTIFACT}
    aarch64 = targets[AARCH64_ARTIFACT]
    closure = {(p["name"], p["arch"]) for p in aarch64["resolved"]["packages"]}
    assert ("libstd-rust-web-dev", "arm64") in closure  # the foreign-arch std
    assert ("libllvm22", "amd64") in closure  # the whole closure, not only the pins
    assert len(closure) > 150  # 181 packages beyond the base rootfs, seen here
    assert aarch64["resolved"]["toolchain_reported"]["rustc"]["LLVM version"].startswith("22.")
    assert set(aarch64["resolved"]["profiles"]) == profile_names(
        cross_release.manifest(AARCH64_ARTIFACT)
    )
    for target in targets.values():
        assert (
            target["output"]["sha256"]
            == cross_release.manifest(target["inputs"]["artifact"])["artifact"]["sha256"]
        )
    vault = _vault()
    for package in aarch64["resolved"]["packages"]:
        assert vault.has(package["sha256"]), package["file"]
    sums = (cross_release.directory / "SHA256SUMS").read_text()
    assert "release.lock" in sums

    check = ["lock", "--check", "--config", str(cross_release.config)]
    ok = orchestrator(check, env={"SOURCE_DATE_EPOCH": "1700000000"})
    assert ok.returncode == 0, ok.output
    drifted = orchestrator(check, env={"SOURCE_DATE_EPOCH": "1700000001"})
    assert drifted.returncode == 54, drifted.output
    assert "SOURCE_DATE_EPOCH" in drifted.output


def test_an_edited_lock_is_refused_before_anything_is_built(
    cross_release: CrossRelease, tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    # The release as a rebuilder downloads it, with one pinned package version changed.
    release = tmp_path / cross_release.directory.name
    shutil.copytree(cross_release.directory, release)
    lock = json.loads((release / "release.lock").read_text())
    packages = lock["targets"][0]["inputs"]["packages"]
    packages[next(iter(packages))] = "9.99-evil"
    (release / "release.lock").write_text(json.dumps(lock, indent=1) + "\n")
    before = len(docker_client.containers.list(all=True))
    for extra in ([], ["--trust-unsigned"]):  # a signed lock must match, whatever the flags
        run = orchestrator(
            ["reproduce", str(release), "--source", str(cross_release.crate), *extra]
        )
        assert run.returncode == 48, run.output
        assert "is not the lockfile that was signed" in run.output
        assert "reproducing" not in run.output
    assert not (tmp_path / f"{release.name}.reproduce").exists()
    assert len(docker_client.containers.list(all=True)) == before


@pytest.mark.extended
def test_reproduce_offline_in_fresh_images_is_bit_identical(
    cross_release: CrossRelease, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    workdir = cross_release.project / "reproduction"
    publisher_key = tmp_path / "publisher.pub"  # as a rebuilder would have it, from elsewhere
    shutil.copyfile(cross_release.directory / "minisign.pub", publisher_key)
    shared_before = managed_images(docker_client)
    run = orchestrator(
        [
            "reproduce",
            str(cross_release.directory),
            "--source",
            str(cross_release.crate),
            "--workdir",
            str(workdir),
            "--key",
            str(publisher_key),
            # The cross target alone: its image holds the most vaulted packages (the
            # cross toolchain, qemu); the cpu target's image is made the same way, and
            # rebuilding it too would cost CI minutes for no new path.
            "--artifact",
            AARCH64_ARTIFACT,
        ]
    )
    assert run.returncode == 0, run.output
    assert f"release.lock is signed by the key {publisher_key}" in run.output
    assert "the artifact is bit-identical" in run.output
    # the images were rebuilt from the vault under this run's own references; nothing
    # was downloaded
    assert run.output.count("✓ toolchain-image") == 1, run.output
    assert run.output.count("✓ base-image") == 1  # imported from the vaulted rootfs
    assert run.output.count("= fetch-crates") == 1  # the vaulted crates, no download
    assert "mmdebstrap" not in run.output
    # Built under references of its own and removed at the end: the shared images, which
    # other runs may use, were neither removed nor re-tagged.
    shared_after = managed_images(docker_client)
    assert {t: i for t, i in shared_after.items() if t in shared_before} == shared_before
    # (A run killed earlier, say with the machine, may have left images of its own session.)
    assert [tag for tag in shared_after if ":repro-" in tag and tag not in shared_before] == []
    report = json.loads((workdir / "reproduce.json").read_text())
    assert [(r["artifact"], r["identical"]) for r in report] == [(AARCH64_ARTIFACT, True)]
    # built somewhere else, from the copy laid out by reproduce
    assert (workdir / "src" / "examples" / "tinyllm" / "Cargo.toml").is_file()
    assert managed_containers(docker_client) == []


def test_tampered_vault_file_is_refused(cross_release: CrossRelease, tmp_path: Path) -> None:
    aarch64 = next(
        t for t in cross_release.lock["targets"] if t["inputs"]["artifact"] == AARCH64_ARTIFACT
    )
    package = next(p for p in aarch64["resolved"]["packages"] if p["name"] == "qemu-user")
    cache = _vault_copy(tmp_path / "cache", package["sha256"])
    run = orchestrator(
        [
            "reproduce",
            str(cross_release.directory),
            "--source",
            str(cross_release.crate),
            "--workdir",
            str(tmp_path / "w"),
            "--cache-dir",
            str(cache),
            "--reuse-images",
            "--artifact",
            AARCH64_ARTIFACT,
        ]
    )
    _vault().verify(package["sha256"])  # the real vault's copy is untouched
    assert run.returncode == 52, run.output
    assert "refusing to use it" in run.output
    assert "reproducing" not in run.output  # refused before any build started


@pytest.mark.extended
def test_changed_source_byte_is_reported_with_diffoscope(
    cross_release: CrossRelease, tmp_path: Path
) -> None:
    source = tmp_path / "tinyllm"
    shutil.copytree(cross_release.crate, source)
    # One byte of the --help text: the crate's tests still pass, the binary changes.
    cli = source / "src" / "cli.rs"
    text = cli.read_text()
    assert "a tiny deterministic" in text
    cli.write_text(text.replace("a tiny deterministic", "a tiny Deterministic", 1))
    workdir = tmp_path / "w"
    run = orchestrator(
        [
            "reproduce",
            str(cross_release.directory),
            "--source",
            str(source),
            "--workdir",
            str(workdir),
            "--reuse-images",
            "--artifact",
            CPU_ARTIFACT,
        ],
        timeout=2400,
    )
    assert run.returncode == 55, run.output
    assert "1 of 1 artifacts differ" in run.output
    assert "the source tree differs from the locked one" in run.output
    assert "source_archive_sha256 changed" in run.output
    report = workdir / "artifacts" / f"{CPU_ARTIFACT}.diffoscope.txt"
    assert report.is_file(), run.output
    assert report.stat().st_size > 0

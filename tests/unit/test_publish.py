from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from orchestrator.host.staging import publish, staging_area, staging_root, write_checksums


def test_checksums_pass_sha256sum_check(tmp_path: Path) -> None:
    (tmp_path / "tool").write_bytes(b"\x7fELF binary")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "01-build.log").write_text("+ cargo build\n")
    write_checksums(tmp_path)
    lines = (tmp_path / "SHA256SUMS").read_text().splitlines()
    # the step log says how the build went: not signed (model/documents/run_logs.py)
    assert [line.split("  ")[1] for line in lines] == ["tool"]
    if shutil.which("sha256sum"):
        subprocess.run(["sha256sum", "--quiet", "-c", "SHA256SUMS"], cwd=tmp_path, check=True)
        (tmp_path / "tool").write_bytes(b"tampered")
        result = subprocess.run(
            ["sha256sum", "--quiet", "-c", "SHA256SUMS"],
            cwd=tmp_path,
            capture_output=True,
            check=False,
        )
        assert result.returncode != 0


def test_publish_replaces_previous_artifact(tmp_path: Path) -> None:
    artifacts = tmp_path / "artifacts"
    destination = artifacts / "demo-1.0" / "demo-1.0-linux-x86_64-cpu"
    for generation in ("old", "new"):
        with staging_area(artifacts, "s1") as staging:
            staged = staging / "artifact"
            staged.mkdir()
            (staged / "demo").write_text(generation)
            publish(staged, destination)
    assert (destination / "demo").read_text() == "new"
    assert sorted(p.name for p in (artifacts / "demo-1.0").iterdir()) == [destination.name]
    assert not staging_root(artifacts).exists()


def test_failure_inside_staging_leaves_nothing(tmp_path: Path) -> None:
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    with pytest.raises(RuntimeError), staging_area(artifacts, "s2") as staging:
        (staging / "half-written").write_text("x")
        raise RuntimeError("build step failed")
    assert list(artifacts.iterdir()) == []
    assert not staging_root(artifacts).exists()


def test_abandoned_staging_of_dead_process_is_removed(tmp_path: Path) -> None:
    artifacts = tmp_path / "artifacts"
    dead = staging_root(artifacts) / "999999999-deadbeef"
    dead.mkdir(parents=True)
    alive = staging_root(artifacts) / f"{os.getpid()}-other"
    alive.mkdir()
    with staging_area(artifacts, "s3"):
        assert not dead.exists()
        assert alive.exists()

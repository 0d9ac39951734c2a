"""Scratch folders live under <cache>/tmp/, named by their owner's pid, and the next run (or
`clean`) removes those of runs that were killed; a live run's scratch is never touched."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import orchestrator.host.vault as vault_module
from orchestrator.host.scratch import remove_abandoned, scratch_dir, scratch_root
from orchestrator.host.vault import Vault


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_scratch_is_under_the_cache_named_by_pid_and_removed(tmp_path: Path) -> None:
    with scratch_dir(tmp_path, "build") as scratch:
        assert scratch.parent == scratch_root(tmp_path) == tmp_path / "tmp"
        assert scratch.name.startswith(f"{os.getpid()}-build-")
        (scratch / "fetched").write_bytes(b"x")
    assert not scratch.exists()


def test_a_killed_runs_scratch_goes_and_a_live_ones_stays(tmp_path: Path) -> None:
    root = scratch_root(tmp_path)
    killed = root / f"{_dead_pid()}-build-abc"
    live = root / f"{os.getppid()}-build-def"  # our parent process is alive
    foreign = root / "notes"  # no pid: not ours to judge
    for folder in (killed, live, foreign):
        (folder / "sub").mkdir(parents=True)
    with scratch_dir(tmp_path, "build"):
        assert not killed.exists()
        assert live.is_dir()
        assert foreign.is_dir()
    assert remove_abandoned(root) == []


def test_vault_temporaries_never_land_in_the_vault(tmp_path: Path) -> None:
    blob = tmp_path / "blob"
    blob.write_bytes(b"a .deb")
    vault = Vault(tmp_path / "cache" / "vault")
    abandoned = tmp_path / "cache" / "tmp" / f"{_dead_pid()}-vault-in-xyz"
    abandoned.mkdir(parents=True)
    digest = vault.put(blob)
    assert sorted(p.name for p in vault.root.rglob("*")) == sorted(["sha256", digest[:2], digest])
    assert list((tmp_path / "cache" / "tmp").iterdir()) == []  # the killed run's, too


def test_vault_materialize_leaves_no_temporary_beside_its_destination(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vault = Vault(tmp_path / "cache" / "vault")
    blob = tmp_path / "blob"
    blob.write_bytes(b"rootfs")
    digest = vault.put(blob)
    seen: list[Path] = []
    real_clone = vault_module.clone_file

    def clone(source: Path, partial: Path) -> None:
        seen.append(partial)
        real_clone(source, partial)

    monkeypatch.setattr(vault_module, "clone_file", clone)
    dest = tmp_path / "cache" / "rootfs" / "base.tar"
    vault.materialize(digest, dest)
    assert dest.read_bytes() == b"rootfs"
    assert seen[0].is_relative_to(tmp_path / "cache" / "tmp")  # swept if we are killed
    assert sorted(p.name for p in dest.parent.iterdir()) == ["base.tar"]

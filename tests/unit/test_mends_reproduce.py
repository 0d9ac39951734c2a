"""`reproduce`: exit codes from the real error, no foreign workdir removed, no sudo."""

from __future__ import annotations

import io
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

import orchestrator.release.lock.reproduce as repro
from orchestrator.cli import app
from orchestrator.config.resolve.options import resolve
from orchestrator.errors import ForeignFolderError, SourceError
from orchestrator.host.cachedir import WORKDIR_MARKER, prepare_workdir
from orchestrator.host.vault import Vault, VaultError
from orchestrator.release.lock.locked_sources import lay_out_sources
from orchestrator.release.lock.reproduce import Reproduced, ReproduceRun, diffoscope_report
from orchestrator.release.targets.target import Target
from orchestrator.runtime.engine import Engine
from tests.unit.conftest import plan_for
from tests.unit.fakes import FakeEngine
from tests.unit.test_lockfile import lock_for

runner = CliRunner()


def _connect(monkeypatch: pytest.MonkeyPatch, *, allowed: bool) -> None:
    def connect() -> FakeEngine:
        if not allowed:
            raise AssertionError("must not reach the Engine")
        return FakeEngine()

    monkeypatch.setattr(Engine, "connect", staticmethod(connect))
    monkeypatch.setattr("orchestrator.supply.attest.resolve_signer", lambda *_a, **_k: object())
    # These tests are about the CLI around the reproduction: no lockfile to read.
    monkeypatch.setattr(repro, "read_locked", lambda *_a, **_k: None)


def test_a_target_error_keeps_its_class(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def run_build(*_a: Any, **_k: Any) -> None:
        raise VaultError("the vault has no blob 00ff\nmore detail")

    monkeypatch.setattr(repro, "run_build", run_build)
    monkeypatch.setattr(repro, "seed_cache", lambda *_a: None)
    monkeypatch.setattr(repro, "differing_inputs", lambda *_a: [])
    options = resolve(project / "orchestrator.toml", env={})
    plan = plan_for(options)
    document = lock_for(plan)
    locked = document.targets[0]
    entry = locked.model_copy(
        update={"resolved": locked.resolved.model_copy(update={"bolt": None})}
    )
    run = ReproduceRun(
        document,
        tmp_path,
        FakeEngine(),  # type: ignore[arg-type]
        Vault(tmp_path / "vault"),
        Console(file=io.StringIO()),
        None,  # type: ignore[arg-type]
        tmp_path / "cache",
        False,
        lambda _line: None,
    )
    result = Reproduced("demo-1.2.3-linux-x86_64-cpu", "e" * 64)
    repro._reproduce_one(run, entry, Target("cpu", "x86-64-v2", options), plan, result)
    assert isinstance(result.exception, VaultError)
    assert result.error == "the vault has no blob 00ff"
    assert result.as_dict()["error_class"] == "VaultError"
    assert result.as_dict()["exit_code"] == 51


def _cli_with(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, results: list[Reproduced]) -> Any:
    _connect(monkeypatch, allowed=True)
    monkeypatch.setattr(repro, "reproduce", lambda *_a, **_k: results)
    release = tmp_path / "demo-1.2.3"
    release.mkdir()
    return runner.invoke(app, ["reproduce", str(release), "--cache-dir", str(tmp_path / "cache")])


def test_reproduce_exits_with_the_code_of_a_target_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    failed = Reproduced("a", "e" * 64, error="no blob", exception=VaultError("no blob"))
    same = Reproduced("b", "f" * 64, got="f" * 64)
    result = _cli_with(monkeypatch, tmp_path, [failed, same])
    assert result.exit_code == 51, result.output
    assert "VaultError" in result.output


def test_reproduce_exits_55_only_when_bytes_differ(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    differs = Reproduced("a", "e" * 64, got="d" * 64)
    result = _cli_with(monkeypatch, tmp_path, [differs])
    assert result.exit_code == 55, result.output


def test_reproduce_refuses_a_workdir_it_did_not_make(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _connect(monkeypatch, allowed=False)
    release = tmp_path / "demo-1.2.3"
    release.mkdir()
    workdir = tmp_path / "home"
    workdir.mkdir()
    (workdir / "thesis.tex").write_text("years of work")
    result = runner.invoke(
        app,
        ["reproduce", str(release), "--workdir", str(workdir), "--cache-dir", str(tmp_path / "c")],
    )
    assert result.exit_code == 12, result.output
    assert str(workdir) in result.output
    assert (workdir / "thesis.tex").read_text() == "years of work"


def test_reproduce_reuses_a_workdir_it_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workdir = tmp_path / "w"
    workdir.mkdir()
    (workdir / WORKDIR_MARKER).write_text("made by orchestrator\n")
    (workdir / "old-run").write_text("stale")
    seen: list[bool] = []

    def fake(*_a: Any, workdir: Path, **_k: Any) -> list[Reproduced]:
        seen.append((workdir / "old-run").exists())
        return [Reproduced("a", "e" * 64, got="e" * 64)]

    _connect(monkeypatch, allowed=True)
    monkeypatch.setattr(repro, "reproduce", fake)
    release = tmp_path / "demo-1.2.3"
    release.mkdir()
    result = runner.invoke(
        app,
        ["reproduce", str(release), "--workdir", str(workdir), "--cache-dir", str(tmp_path / "c")],
    )
    assert result.exit_code == 0, result.output
    assert seen == [False]
    assert (workdir / WORKDIR_MARKER).is_file()


def test_missing_diffoscope_is_reported_never_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def which(name: str) -> str | None:
        return None if name == "diffoscope" else f"/usr/bin/{name}"

    def run(*_a: Any, **_k: Any) -> None:
        raise AssertionError("library code must not run commands to install tools")

    monkeypatch.setattr(shutil, "which", which)
    monkeypatch.setattr(subprocess, "run", run)
    expected, got = tmp_path / "expected", tmp_path / "got"
    expected.write_bytes(b"abcdef")
    got.write_bytes(b"abXdeY")
    report = diffoscope_report(expected, got, tmp_path / "report.txt", lambda _line: None)
    text = report.read_text()
    assert "apt-get install diffoscope-minimal" in text
    assert "pip install diffoscope" in text
    assert "2 differing bytes" in text


# -- a work folder is never reached through a symlink (issue 28) ------------------------
@pytest.mark.parametrize("marked", [False, True])
def test_prepare_workdir_refuses_a_symlink_and_leaves_its_target_alone(
    tmp_path: Path, marked: bool
) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    if marked:  # an earlier run's marker there would have made the target removable
        (target / WORKDIR_MARKER).write_text("made by orchestrator\n")
        (target / "keep").write_text("kept")
    link = tmp_path / "demo.reproduce"
    link.symlink_to(target)
    with pytest.raises(ForeignFolderError, match="is a symlink"):
        prepare_workdir(link)
    assert sorted(p.name for p in target.iterdir()) == ([WORKDIR_MARKER, "keep"] if marked else [])
    assert link.is_symlink()


def _crate_at_root(project: Path, tmp_path: Path, config_file: str) -> Any:
    """A lock whose crate is the config's own folder, as `crate = "."` records it."""
    document = lock_for(plan_for(resolve(project / "orchestrator.toml", env={})))
    source = document.source.model_copy(update={"crate": "."})
    config = document.config.model_copy(update={"file": config_file, "text": "# locked\n"})
    return document.model_copy(update={"source": source, "config": config})


def test_the_locked_config_replaces_a_symlink_the_sources_brought(
    project: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("not yours\n")
    tree = tmp_path / "tree"
    shutil.copytree(project / "crate", tree)
    (tree / "orchestrator.toml").symlink_to(outside)
    document = _crate_at_root(project, tmp_path, "orchestrator.toml")
    config = lay_out_sources(document, tmp_path / "w" / "src", tree)
    assert not config.is_symlink() and config.read_text() == "# locked\n"
    assert outside.read_text() == "not yours\n"


def test_the_locked_config_is_not_written_through_a_symlinked_folder(
    project: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    tree = tmp_path / "tree"
    shutil.copytree(project / "crate", tree)
    (tree / "ci").symlink_to(outside)
    document = _crate_at_root(project, tmp_path, "ci/orchestrator.toml")
    with pytest.raises(SourceError, match="is a symlink"):
        lay_out_sources(document, tmp_path / "w" / "src", tree)
    assert list(outside.iterdir()) == []

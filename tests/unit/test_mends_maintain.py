"""`clean` spares running builds (unless --all) and refuses a cache folder it did not make."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.host.cachedir import CACHE_MARKER
from orchestrator.runtime.engine import Engine
from tests.unit.fakes import FakeEngine, Managed, labels_of

runner = CliRunner()


def _config(project: Path, cache: Path) -> str:
    path = project / "orchestrator.toml"
    path.write_text(path.read_text() + f'[build]\ncache_dir = "{cache}"\n')
    return str(path)


def _engine_with_a_running_and_a_dead_build() -> FakeEngine:
    engine = FakeEngine(session="clean-session")
    running = labels_of("container", session="running", pid=os.getpid())
    dead = labels_of("container", session="dead", pid=999_999_999)
    engine.managed = [Managed("running", running), Managed("dead", dead)]
    engine.volumes = [
        Managed("running-vol", {**running, "org.orchestrator.kind": "volume"}),
        Managed("dead-vol", {**dead, "org.orchestrator.kind": "volume"}),
    ]
    return engine


def _connect(monkeypatch: pytest.MonkeyPatch, engine: FakeEngine | None) -> None:
    def connect() -> FakeEngine:
        if engine is None:
            raise AssertionError("must not reach the Engine")
        return engine

    monkeypatch.setattr(Engine, "connect", staticmethod(connect))


def test_clean_spares_a_running_build(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = _engine_with_a_running_and_a_dead_build()
    _connect(monkeypatch, engine)
    result = runner.invoke(app, ["clean", "--config", _config(project, tmp_path / "cache")])
    assert result.exit_code == 0, result.output
    assert {m.name: m.removed for m in engine.managed} == {"running": False, "dead": True}
    assert {v.name: v.removed for v in engine.volumes} == {
        "running-vol": False,
        "dead-vol": True,
    }


def test_clean_all_removes_running_builds_too(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = _engine_with_a_running_and_a_dead_build()
    _connect(monkeypatch, engine)
    result = runner.invoke(
        app, ["clean", "--all", "--config", _config(project, tmp_path / "cache")]
    )
    assert result.exit_code == 0, result.output
    assert all(m.removed for m in [*engine.managed, *engine.volumes])
    help_text = runner.invoke(app, ["clean", "--help"]).output
    assert "running" in help_text


def test_clean_cache_refuses_a_folder_it_did_not_make(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _connect(monkeypatch, None)
    foreign = tmp_path / "my-project"
    (foreign / "src").mkdir(parents=True)
    (foreign / "notes.txt").write_text("precious")
    (foreign / "src" / "main.rs").write_text("fn main() {}")
    result = runner.invoke(app, ["clean", "--cache", "--config", _config(project, foreign)])
    assert result.exit_code == 12, result.output
    assert str(foreign) in result.output
    assert (foreign / "notes.txt").read_text() == "precious"
    assert (foreign / "src" / "main.rs").is_file()


def test_clean_cache_empties_a_marked_cache_but_keeps_vault_and_marker(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _connect(monkeypatch, FakeEngine())
    cache = tmp_path / "cache"
    for sub in ("crates", "vault", "runs"):
        (cache / sub).mkdir(parents=True)
    (cache / "crates" / "x.tar").write_text("x")
    result = runner.invoke(app, ["clean", "--cache", "--config", _config(project, cache)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in cache.iterdir()) == sorted([CACHE_MARKER, "vault"])

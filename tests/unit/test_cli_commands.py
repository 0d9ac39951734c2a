"""The CLI commands end to end through typer's runner, with exact exit codes.

Nothing here reaches Docker: commands that connect get FakeEngine through a patched
`Engine.connect`, or a connect that raises DockerUnavailableError.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections import namedtuple
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator import __version__, cli
from orchestrator.cli import app
from orchestrator.errors import DockerUnavailableError
from orchestrator.host.cachedir import CACHE_MARKER
from orchestrator.host.staging import staging_root
from orchestrator.runtime import doctor
from orchestrator.runtime.contexts import EngineEndpoint
from orchestrator.runtime.engine import Engine
from orchestrator.supply import minisign
from orchestrator.supply.attest import CHECKSUMS
from orchestrator.supply.minisign import PublicKey, SecretKey

from .fakes import FakeEngine, Managed, labels_of
from .test_supply_release_files import make_release

runner = CliRunner()


def use_engine(monkeypatch: pytest.MonkeyPatch, engine: FakeEngine | None) -> None:
    """Engine.connect returns `engine`; None: Docker is not reachable."""

    def connect() -> FakeEngine:
        if engine is None:
            raise DockerUnavailableError("cannot reach the Docker Engine: test")
        return engine

    monkeypatch.setattr(Engine, "connect", staticmethod(connect))


def configure(project: Path, extra: str = "") -> Path:
    config = project / "orchestrator.toml"
    config.write_text(
        '[package]\ncrate = "crate"\n[train]\nworkloads = [["--help"]]\n'
        f'[build]\nartifacts_dir = "{project / "out"}"\ncache_dir = "{project / "cache"}"\n' + extra
    )
    return config


def test_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output == f"orchestrator {__version__}\n"


def test_build_dry_run_prints_the_plan(project: Path) -> None:
    result = runner.invoke(
        app, ["build", "--dry-run", "--no-bolt", "--config", str(configure(project))]
    )
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    steps = plan["steps"]
    assert steps[:2] == ["base-image", "toolchain-image"]
    assert steps[-2:] == ["extract", "publish"]
    assert {"pgo-instrument", "pgo-train", "pgo-merge"} <= set(steps)
    assert not {"bolt-profile", "bolt-optimize"} & set(steps)
    assert plan["bolt"] is None
    assert plan["workloads"] == [["--help"]]
    assert not (project / "cache").exists()  # a dry run makes no cache


def test_build_dry_run_without_pgo_has_no_pgo_steps(project: Path) -> None:
    result = runner.invoke(
        app, ["build", "--dry-run", "--no-pgo", "--no-bolt", "-c", str(configure(project))]
    )
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    assert not any(step.startswith(("pgo-", "bolt-")) for step in plan["steps"])
    assert plan["pgo"] is None


def test_release_dry_run_without_docker(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    use_engine(monkeypatch, None)
    config = configure(project, '[flavors.cpu]\nlevels = ["x86-64-v2", "x86-64-v3"]\n')
    result = runner.invoke(app, ["release", "--dry-run", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert "release plan (nothing is built)" in result.output
    assert "cpu x86-64-v2" in result.output
    assert "cpu x86-64-v3" in result.output
    assert result.output.count("(Docker not") == 2  # "reachable)" may wrap to the next line
    assert "base-image toolchain-image" in result.output
    assert not (project / "out").exists()


def test_release_dry_run_shows_cache_hits(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = configure(project)
    dry = runner.invoke(app, ["build", "--dry-run", "--config", str(config)])
    base_image = json.loads(dry.output)["base_image"]["reference"]
    engine = FakeEngine()
    engine.add_image(base_image)
    use_engine(monkeypatch, engine)
    result = runner.invoke(app, ["release", "--dry-run", "--flavors", "cpu", "-c", str(config)])
    assert result.exit_code == 0, result.output
    assert "base image" in result.output
    assert "Docker not reachable" not in result.output


def test_release_dry_run_over_several_engines_says_which_can_build_each_target(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each named engine is asked (not the current one); one holds the cpu toolchain image,
    one lacks the label cuda needs, one does not answer: the plan shows all of that."""
    config = configure(project)
    config.write_text(
        config.read_text().replace("[build]\n", '[build]\nflavors = ["cpu", "cuda"]\n', 1)
        + '[engines]\ncontexts = ["box", "gpu", "gone"]\nrequire = ["cuda:gpu=nvidia"]\n'
    )
    dry = runner.invoke(app, ["build", "--dry-run", "--flavor", "cpu", "--config", str(config)])
    cpu_image = json.loads(dry.output)["image"]["reference"]
    box, gpu = (
        FakeEngine(info={"Architecture": "x86_64"}),
        FakeEngine(info={"Architecture": "x86_64", "Labels": ["gpu=nvidia"]}),
    )
    box.name, gpu.name = "box", "gpu"
    box.add_image(cpu_image)
    engines = {"box": box, "gpu": gpu}

    def connect(endpoint: EngineEndpoint | None = None) -> FakeEngine:
        assert endpoint is not None, "the dry run asked the current engine, not the named ones"
        if endpoint.context not in engines:
            raise DockerUnavailableError(f"cannot reach the Docker Engine at {endpoint.host}")
        return engines[endpoint.context]

    monkeypatch.setattr(Engine, "connect", staticmethod(connect))
    monkeypatch.setattr(
        "orchestrator.runtime.contexts.resolve_contexts",
        lambda names: [EngineEndpoint(name, f"tcp://{name}:2376") for name in names],
    )
    result = runner.invoke(app, ["release", "--dry-run", "--json", "-c", str(config)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)  # the unreachable engine's warning is on stderr
    assert report["docker_reachable"] is True
    fits = {
        target["flavor"]: {fit["engine"]: fit for fit in target["engines"]}
        for target in report["targets"]
    }
    assert fits["cpu"]["box"] == {
        "engine": "box",
        "fits": True,
        "holds": "toolchain image",
        "note": "",
    }
    assert fits["cpu"]["gpu"]["fits"] and fits["cpu"]["gpu"]["holds"] == ""
    assert not fits["cuda"]["box"]["fits"]
    assert fits["cuda"]["box"]["note"] == "box lacks the label gpu=nvidia"
    assert fits["cuda"]["gpu"]["fits"]
    for flavor in ("cpu", "cuda"):
        assert not fits[flavor]["gone"]["fits"]
        assert fits[flavor]["gone"]["note"].startswith("unreachable: cannot reach")
    cpu = next(t for t in report["targets"] if t["flavor"] == "cpu")
    assert cpu["cached"]["toolchain_image"] is True  # one engine holding it is enough
    table = runner.invoke(app, ["release", "--dry-run", "-c", str(config)], terminal_width=300)
    assert table.exit_code == 0, table.output
    assert "box (holds toolchain image), gpu" in table.output
    assert "which one does is decided as the release runs" in table.output
    assert "a release would fail: engine gone: cannot reach the Docker Engine" in table.output


def test_release_refuses_native_cpu(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    use_engine(monkeypatch, None)
    config = configure(project, '[flavors.cpu]\nlevels = ["native"]\n')
    result = runner.invoke(app, ["release", "--dry-run", "--config", str(config)])
    assert result.exit_code == 10
    assert "'native' is refused for releases" in result.output


def test_config_shows_where_each_setting_comes_from(project: Path) -> None:
    result = runner.invoke(
        app,
        ["config", "--config", str(configure(project))],
        env={"ORCHESTRATOR_TARGET_CPU": "x86-64-v3"},
    )
    assert result.exit_code == 0, result.output
    rows = {
        cells[0]: cells[1:]
        for line in result.output.splitlines()
        if len(cells := [c.strip() for c in line.split("│")[1:-1]]) == 3
    }
    assert rows["build.target_cpu"] == ["x86-64-v3", "env ORCHESTRATOR_TARGET_CPU"]
    assert rows["build.cache_dir"] == [str(project / "cache"), "file orchestrator.toml"]
    assert rows["package.version"] == ["1.2.3", "Cargo.toml"]
    assert rows["build.flavors"] == ["['cpu']", "default"]
    assert rows["flavors.cpu.levels"][1] == "default"


def test_keygen_unencrypted(tmp_path: Path) -> None:
    key = tmp_path / "keys" / "ci.key"
    result = runner.invoke(app, ["keygen", str(key), "--unencrypted"])
    assert result.exit_code == 0, result.output
    assert f"secret key: {key} (unencrypted)" in result.output
    assert f"public key: {tmp_path / 'keys' / 'ci.pub'}" in result.output
    secret = SecretKey.from_text(key.read_text(), None)
    assert PublicKey.load(tmp_path / "keys" / "ci.pub").raw == secret.public.raw
    again = runner.invoke(app, ["keygen", str(key), "--unencrypted"])
    assert again.exit_code == 47
    assert "refusing to overwrite a key" in again.output


def test_keygen_refuses_a_path_inside_the_repository(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "sub").mkdir()
    monkeypatch.chdir(repo / "sub")
    result = runner.invoke(app, ["keygen", str(repo / "signing.key"), "--unencrypted"])
    assert result.exit_code == 47
    assert "inside the repository" in result.output
    assert not (repo / "signing.key").exists()


def test_keygen_needs_a_passphrase_without_a_terminal(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["keygen", str(tmp_path / "k.key")], env={"ORCHESTRATOR_SIGNING_PASSPHRASE": None}
    )
    assert result.exit_code == 10
    assert "no passphrase" in result.output
    assert not (tmp_path / "k.key").exists()


def test_keygen_encrypts_with_the_environment_passphrase(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        minisign,
        "_scrypt",
        lambda p, s: ((p.encode() + s) * 8)[: minisign.KEYNUM_SK_LEN],
    )
    key = tmp_path / "k.key"
    result = runner.invoke(
        app, ["keygen", str(key)], env={"ORCHESTRATOR_SIGNING_PASSPHRASE": "hunter2"}
    )
    assert result.exit_code == 0, result.output
    assert "(encrypted)" in result.output
    with pytest.raises(minisign.SigningError, match="no passphrase"):
        SecretKey.from_text(key.read_text(), None)
    assert SecretKey.from_text(key.read_text(), "hunter2").public.raw == (
        PublicKey.load(tmp_path / "k.pub").raw
    )


def test_verify_a_good_and_a_tampered_release(tmp_path: Path) -> None:
    release = make_release(tmp_path)
    result = runner.invoke(app, ["verify", str(release.root), "--key", str(release.public)])
    assert result.exit_code == 0, result.output
    assert "all 8 checks passed" in result.output
    assert "FAILED" not in result.output
    binary = release.artifact / release.binary
    binary.write_bytes(binary.read_bytes() + b"\0")
    result = runner.invoke(app, ["verify", str(release.root)])
    assert result.exit_code == 48
    assert "5 check(s) failed" in result.output
    assert "Do not use these files" in result.output
    assert result.output.count("FAILED") == 5


def test_verify_a_folder_that_is_not_a_release(tmp_path: Path) -> None:
    result = runner.invoke(app, ["verify", str(tmp_path)])
    assert result.exit_code == 56
    assert f"has no {CHECKSUMS}" in result.output


def test_render_check() -> None:
    result = runner.invoke(app, ["render", "--check"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines
    assert all(line.endswith(".Dockerfile: up to date") for line in lines)


Usage = namedtuple("Usage", "total used free")


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch) -> dict[str, str | None]:
    """The host tools doctor finds (no docker CLI: nothing runs), and plenty of disk."""
    tools: dict[str, str | None] = {"mmdebstrap": "/usr/bin/mmdebstrap"}
    monkeypatch.setattr(doctor, "_host_tool", tools.get)
    monkeypatch.setattr(shutil, "disk_usage", lambda _p: Usage(10**12, 0, 10**12))
    return tools


def test_doctor_with_a_fake_engine(
    project: Path, monkeypatch: pytest.MonkeyPatch, host: dict[str, str | None]
) -> None:
    engine = FakeEngine(info={"NCPU": 4, "Driver": "overlay2", "DockerRootDir": str(project)})
    engine.add_image("orchestrator/base:abc")
    use_engine(monkeypatch, engine)
    result = runner.invoke(app, ["doctor", "--config", str(configure(project))])
    assert result.exit_code == 0, result.output
    assert "Docker Engine 27.0.0 (rootful), API 1.46, storage overlay2" in result.output
    assert "disk (docker)" in result.output
    assert "disk (cache)" in result.output
    assert "/usr/bin/mmdebstrap" in result.output
    assert "granted" in result.output  # the privileged probe answered 0
    assert "no toolchain image yet" in result.output
    # init, our seccomp profile, --privileged: each a `true` in the base image
    assert [p[1] for p in engine.probes] == [("true",)] * 3


def test_doctor_blocks_without_mmdebstrap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, host: dict[str, str | None]
) -> None:
    host["mmdebstrap"] = None
    use_engine(monkeypatch, FakeEngine())
    monkeypatch.chdir(tmp_path)  # no project: doctor still runs
    result = runner.invoke(app, ["doctor"], env={"ORCHESTRATOR_CONFIG": None})
    assert result.exit_code == 60
    assert "blocked by: mmdebstrap" in result.output


def test_doctor_without_docker(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    use_engine(monkeypatch, None)
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["doctor"])
    assert result.exit_code == 60
    assert "blocked by: docker" in result.output


def dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


@pytest.fixture
def leftovers(project: Path) -> tuple[FakeEngine, list[Managed], Path]:
    engine = FakeEngine()
    dead = dead_pid()
    engine.managed += [
        Managed("dead-run", labels_of("container", session="old", pid=dead)),
        Managed("live-run", labels_of("container", session="other", pid=os.getpid())),
        Managed("other-host", labels_of("container", session="far", pid=dead, host="elsewhere")),
    ]
    engine.volumes += [Managed("dead-volume", labels_of("volume", session="old", pid=dead))]
    engine.add_image("orchestrator/cpu:abc", size=2 * 10**9)
    staging = staging_root(project / "out")
    (staging / f"{dead}-old").mkdir(parents=True)
    (staging / f"{os.getpid()}-mine").mkdir()
    return engine, engine.managed[:3], staging


def test_clean_removes_only_leftovers(
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    leftovers: tuple[FakeEngine, list[Managed], Path],
) -> None:
    engine, (dead, live, far), staging = leftovers
    use_engine(monkeypatch, engine)
    result = runner.invoke(app, ["clean", "--config", str(configure(project))])
    assert result.exit_code == 0, result.output
    assert "removed 1 container(s) and 1 volume(s)" in result.output
    assert (dead.removed, live.removed, far.removed) == (True, False, False)
    assert [p.name for p in staging.iterdir()] == [f"{os.getpid()}-mine"]
    assert engine.images  # images stay without --images


def test_clean_all_images_and_cache(
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    leftovers: tuple[FakeEngine, list[Managed], Path],
) -> None:
    engine, managed, staging = leftovers
    use_engine(monkeypatch, engine)
    cache = project / "cache"
    (cache / "rootfs").mkdir(parents=True)
    (cache / "vault").mkdir()
    (cache / "stray.txt").write_text("x")
    result = runner.invoke(
        app, ["clean", "--all", "--images", "--cache", "--config", str(configure(project))]
    )
    assert result.exit_code == 0, result.output
    assert "removed 3 container(s) and 1 volume(s)" in result.output
    assert all(m.removed for m in managed)
    assert not staging.exists()
    assert "removed 1 image(s), 2.0 GB" in result.output
    assert engine.images == {}
    assert sorted(p.name for p in cache.iterdir()) == [CACHE_MARKER, "vault"]


def test_clean_refuses_a_foreign_cache_before_connecting(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def must_not_connect() -> None:
        raise AssertionError("clean connected before checking the cache folder")

    monkeypatch.setattr(Engine, "connect", staticmethod(must_not_connect))
    (project / "cache").mkdir()
    (project / "cache" / "thesis.tex").write_text("precious")
    result = runner.invoke(app, ["clean", "--cache", "--config", str(configure(project))])
    assert result.exit_code == 12
    assert "does not look like orchestrator's cache" in result.output
    assert (project / "cache" / "thesis.tex").read_text() == "precious"


def test_bench_without_a_command_is_refused_before_connecting(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_engine(monkeypatch, None)
    result = runner.invoke(app, ["bench", "--config", str(configure(project))])
    assert result.exit_code == 10
    assert "bench.command is empty" in result.output


def test_build_without_docker_makes_only_the_cache(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_engine(monkeypatch, None)
    result = runner.invoke(app, ["build", "--config", str(configure(project))])
    assert result.exit_code == 20
    assert "cannot reach the Docker Engine: test" in result.output
    assert (project / "cache" / CACHE_MARKER).is_file()
    assert not (project / "out").exists()


def test_main_turns_ctrl_c_into_exit_130(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "app", interrupted)
    with pytest.raises(SystemExit) as caught:
        cli.main()
    assert caught.value.code == 130

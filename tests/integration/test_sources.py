"""Every variant builds from the same pristine, read-only sources; a build script that
writes into them is refused by name; and a run whose parent ignored SIGINT still stops on
it. On tests/fixtures/writes-source, without PGO or BOLT (the point needs two builds, the
baseline and the release profile, and validation comparing them)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import docker
import pytest

from tests.integration.conftest import (
    REPO,
    STARTED_PIDS,
    Run,
    managed_containers,
    managed_volumes,
    orchestrator,
)

pytestmark = pytest.mark.integration
FIXTURE = REPO / "tests" / "fixtures" / "writes-source"
ARTIFACT = Path("writes-source-0.1.0") / "writes-source-0.1.0-linux-x86_64-cpu"


def test_a_build_script_writing_into_its_sources_is_refused_by_name(
    docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    artifacts = tmp_path / "artifacts"
    config = FIXTURE / "strict.toml"
    run = orchestrator(["build", "--config", str(config), "--artifacts-dir", str(artifacts)])
    assert run.returncode == 11, run.output  # SourceError
    assert "✗ build-baseline" in run.output
    assert (
        "error: step build-baseline: the build script of `writes-source v0.1.0 (/build/src)` "
        "tried to write into the crate's sources (/build/src), which are read-only"
    ) in run.output
    assert "ReadOnlyFilesystem" in run.output  # the build script's own failure, quoted
    assert "hint: Build scripts may write only into OUT_DIR" in run.output
    assert not artifacts.exists() or list(artifacts.iterdir()) == []
    assert managed_containers(docker_client) == []
    assert managed_volumes(docker_client) == []


def test_each_variant_builds_from_pristine_sources(
    docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    artifacts = tmp_path / "artifacts"
    # Sources no earlier run built (test_endings.py releases this crate too): every build
    # step runs here, none is taken from the step cache, so each build script really runs.
    project = tmp_path / "writes-source"
    shutil.copytree(FIXTURE, project, ignore=shutil.ignore_patterns("target"))
    with (project / "src" / "main.rs").open("a") as source:
        source.write(f"// {uuid.uuid4().hex}\n")
    config = project / "orchestrator.toml"
    run = orchestrator(["build", "--config", str(config), "--artifacts-dir", str(artifacts)])
    # The build script's write into the sources failed in every build (it goes on without
    # it), so the release build saw what the baseline saw and validation found them equal:
    # with a writable source tree, the release build found the baseline's src/generated.rs.
    assert run.returncode == 0, run.output
    assert "✓ validate" in run.output and "(outputs identical)" in run.output
    assert "could not write into the read-only sources (/build/src) and went on" in run.output
    directory = artifacts / ARTIFACT
    shipped = subprocess.run(
        [str(directory / "writes-source"), "--check"], capture_output=True, text=True, check=True
    )
    assert shipped.stdout == "saw src/generated.rs at build time: false\n"
    assert managed_containers(docker_client) == []


def _ignore_sigint() -> None:
    # What bash does for `orchestrator release &` in a script: SIGINT ignored, inherited.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_sigint_stops_a_run_whose_parent_ignored_it(
    docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    artifacts = tmp_path / "artifacts"
    config = FIXTURE / "orchestrator.toml"
    output = ["--artifacts-dir", str(artifacts)]
    process = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "build", "--config", str(config), *output],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=_ignore_sigint,  # noqa: PLW1509 - no threads run before the exec
    )
    STARTED_PIDS.add(process.pid)
    lines: list[str] = []
    assert process.stdout is not None
    for line in process.stdout:
        lines.append(line)
        if "▶ build-baseline" in line:  # containers and volumes exist by now
            process.send_signal(signal.SIGINT)
            break
    rest, _ = process.communicate(timeout=600)
    run = Run(process.returncode, "".join(lines) + rest)
    sys.stdout.write(run.output)
    assert run.returncode == 130, run.output  # README: interrupted
    assert "stopping: removing containers" in run.output
    assert managed_containers(docker_client) == []
    assert managed_volumes(docker_client) == []
    assert not artifacts.exists() or list(artifacts.iterdir()) == []
    assert list(tmp_path.iterdir()) in ([], [artifacts])  # no staging folder left either


GIT_VERSION = REPO / "tests" / "fixtures" / "git-version"


def test_build_scripts_git_names_the_checkouts_commit(
    docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    """A build script's `git rev-parse --short HEAD` and `git describe --always --dirty`
    answer, in the build container, what they answer in the checkout (issue 32.1), and the
    release reproduces bit for bit from sources without a repository."""
    project = tmp_path / "git-version"
    shutil.copytree(GIT_VERSION, project, ignore=shutil.ignore_patterns("target"))
    identity = {
        "GIT_AUTHOR_NAME": "Test",
        "GIT_AUTHOR_EMAIL": "test@example.org",
        "GIT_COMMITTER_NAME": "Test",
        "GIT_COMMITTER_EMAIL": "test@example.org",
        "GIT_CONFIG_GLOBAL": "/dev/null",
    }

    def git(*args: str) -> str:
        env = {"PATH": "/usr/bin:/bin", **identity}
        done = subprocess.run(
            ["git", "-C", str(project), *args], capture_output=True, text=True, env=env, check=True
        )
        return done.stdout.strip()

    git("init", "-q", "-b", "main")
    git("add", "-A")
    git("commit", "-q", "-m", f"fixture {uuid.uuid4().hex}")  # a commit no earlier run saw
    artifacts = tmp_path / "artifacts"
    config = project / "orchestrator.toml"
    run = orchestrator(["release", "--config", str(config), "--artifacts-dir", str(artifacts)])
    assert run.returncode == 0, run.output
    release = artifacts / "git-version-0.1.0"
    directory = release / "git-version-0.1.0-linux-x86_64-cpu"
    shipped = subprocess.run(
        [str(directory / "git-version"), "--version"], capture_output=True, text=True, check=True
    )
    short, described = git("rev-parse", "--short", "HEAD"), git("describe", "--always", "--dirty")
    assert shipped.stdout == f"git-version 0.1.0 (rev {short}, {described})\n"
    recorded = json.loads((directory / "build.json").read_text())["source"]["git"]
    assert recorded["commit"] == git("rev-parse", "HEAD")
    assert recorded["dirty"] is False
    # The lock pins the facts: a copy of the sources without any repository rebuilds the
    # same bytes, `--version` included.
    plain = tmp_path / "plain"
    shutil.copytree(project, plain, ignore=shutil.ignore_patterns(".git"))
    reproduced = orchestrator(
        [
            "reproduce",
            str(release),
            "--source",
            str(plain),
            "--workdir",
            str(tmp_path / "rebuild"),
            "--reuse-images",
        ]
    )
    assert reproduced.returncode == 0, reproduced.output
    assert "the artifact is bit-identical" in reproduced.output
    assert managed_containers(docker_client) == []

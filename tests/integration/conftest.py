"""Integration tests drive the real Docker Engine through the real CLI.

They share the host cache (~/.cache/orchestrator or ORCHESTRATOR_CACHE_DIR) and the
content-addressed images, so only the first run on a machine pays for bootstrapping.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import pytest

REPO = Path(__file__).resolve().parents[2]
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")  # Ryuk's image can't be pulled


@dataclass(frozen=True)
class Run:
    returncode: int
    output: str


# Process ids of the orchestrator runs this test session started: containers carry their
# starter's pid as a label, so checks for leftovers look at this session's runs only and
# a concurrent build on the same Engine cannot break them.
STARTED_PIDS: set[int] = set()


def orchestrator(
    args: Sequence[str], *, env: dict[str, str] | None = None, timeout: float = 1800
) -> Run:
    """Run the real CLI as a user would, output captured (so: plain, non-terminal mode)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", *args],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    STARTED_PIDS.add(process.pid)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
    output = stdout + stderr
    sys.stdout.write(output)  # shown by pytest when a test fails
    return Run(process.returncode, output)


def release_copy(fixture: Path, project: Path, client: docker.DockerClient) -> tuple[Run, Path]:
    """`orchestrator release` of a copy of `fixture` (outside git, so --allow-dirty) at
    `project`; the run must succeed and leave no container. Returns it and artifacts/."""
    shutil.copytree(fixture, project, symlinks=True, ignore=shutil.ignore_patterns("target"))
    artifacts = project.parent / "artifacts"
    config = ["--config", str(project / "orchestrator.toml"), "--artifacts-dir", str(artifacts)]
    run = orchestrator(["release", *config, "--bench-runs", "0", "--allow-dirty"])
    assert run.returncode == 0, run.output
    assert managed_containers(client) == []
    return run, artifacts


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interrupt_when(
    args: Sequence[str],
    marker: str,
    *,
    env: dict[str, str],
    signals: Sequence[signal.Signals] = (signal.SIGINT,),
) -> Run:
    """Start the CLI, send `signals` (default: one Ctrl-C) once `marker` appears in its output.

    Each later signal goes out once the CLI said it is stopping (cleanup is under way)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", *args],
        cwd=REPO,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # A test run started in the background (`cmd &`, CI runners) inherits an ignored
        # SIGINT, and Python then never raises KeyboardInterrupt: give the child the
        # terminal's default, as a user pressing Ctrl-C in a shell has it.
        preexec_fn=_default_sigint,  # noqa: PLW1509 - no threads run before the exec
    )
    STARTED_PIDS.add(process.pid)
    lines: list[str] = []
    assert process.stdout is not None
    for line in process.stdout:
        lines.append(line)
        if marker in line:
            process.send_signal(signals[0])
            break
    for later in signals[1:]:
        for line in process.stdout:
            lines.append(line)
            if "stopping:" in line or "still removing" in line:
                break
        if process.poll() is None:
            process.send_signal(later)
    rest, _ = process.communicate(timeout=600)
    return Run(process.returncode, "".join(lines) + rest)


@pytest.fixture(scope="session")
def docker_client() -> Iterator[docker.DockerClient]:
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        pytest.fail(f"integration tests need a Docker Engine: {exc}")
    yield client
    client.close()


def managed_containers(client: docker.DockerClient) -> list[str]:
    """Containers that orchestrator runs of this test session started and left behind."""
    labels = ["org.orchestrator.managed=1", "org.orchestrator.kind=container"]
    return [
        str(c.name)
        for c in client.containers.list(all=True, filters={"label": labels})
        if (c.labels or {}).get("org.orchestrator.host") == socket.gethostname()
        and (c.labels or {}).get("org.orchestrator.pid", "").isdigit()
        and int((c.labels or {})["org.orchestrator.pid"]) in STARTED_PIDS
    ]


def managed_volumes(client: docker.DockerClient) -> list[str]:
    """Volumes that orchestrator runs of this test session made and left behind."""
    labels = ["org.orchestrator.managed=1", "org.orchestrator.kind=volume"]
    return [
        str(v.name)
        for v in client.volumes.list(filters={"label": labels})
        if (v.attrs.get("Labels") or {}).get("org.orchestrator.host") == socket.gethostname()
        and (v.attrs.get("Labels") or {}).get("org.orchestrator.pid", "").isdigit()
        and int((v.attrs.get("Labels") or {})["org.orchestrator.pid"]) in STARTED_PIDS
    ]


ARTIFACT = Path("tinyllm-0.1.0") / "tinyllm-0.1.0-linux-x86_64-cpu"


@dataclass(frozen=True)
class Release:
    run: Run
    artifacts: Path
    directory: Path
    manifest: dict[str, Any]
    images_before: frozenset[str]  # tags of orchestrator images before the build


def managed_images(client: docker.DockerClient) -> dict[str, str]:
    return {
        tag: str(image.id)
        for image in client.images.list(filters={"label": "org.orchestrator.managed=1"})
        for tag in image.tags
    }


@pytest.fixture(scope="session")
def release(
    docker_client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory
) -> Release:
    images_before = frozenset(managed_images(docker_client))
    artifacts = tmp_path_factory.mktemp("artifacts")
    run = orchestrator(["build", "--flavor", "cpu", "--artifacts-dir", str(artifacts)])
    assert run.returncode == 0, run.output
    directory = artifacts / ARTIFACT
    manifest = json.loads((directory / "build.json").read_text())
    return Release(run, artifacts, directory, manifest, images_before)


@dataclass(frozen=True)
class CrossRelease:
    """`orchestrator release` of tinyllm for cpu (x86-64-v2) and aarch64, in a copy of
    the project outside git (so it is released with --allow-dirty and reproduced with
    --source)."""

    run: Run
    project: Path
    crate: Path
    config: Path
    artifacts: Path
    directory: Path  # the release folder
    lock: dict[str, Any]

    def manifest(self, artifact: str) -> dict[str, Any]:
        return dict(json.loads((self.directory / artifact / "build.json").read_text()))


CPU_ARTIFACT = "tinyllm-0.1.0-linux-x86_64-cpu"
AARCH64_ARTIFACT = "tinyllm-0.1.0-linux-aarch64-cpu"


def copy_project(destination: Path) -> tuple[Path, Path]:
    """orchestrator.toml and examples/tinyllm (without target/) under `destination`."""
    crate = destination / "examples" / "tinyllm"
    shutil.copytree(REPO / "examples" / "tinyllm", crate, ignore=shutil.ignore_patterns("target"))
    text = (REPO / "orchestrator.toml").read_text()
    text = text.replace(
        'flavors = ["cpu", "cuda", "rocm", "aarch64"]', 'flavors = ["cpu", "aarch64"]'
    )
    text = text.replace('levels = ["x86-64-v2", "x86-64-v3"]', 'levels = ["x86-64-v2"]')
    config = destination / "orchestrator.toml"
    config.write_text(text)
    return config, crate


@pytest.fixture(scope="session")
def cross_release(
    docker_client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory
) -> CrossRelease:
    project = tmp_path_factory.mktemp("project")
    config, crate = copy_project(project)
    artifacts = project / "artifacts"
    run = orchestrator(
        ["release", "--config", str(config), "--bench-runs", "0", "--allow-dirty"],
        env={"SOURCE_DATE_EPOCH": "1700000000"},
    )
    assert run.returncode == 0, run.output
    directory = artifacts / "tinyllm-0.1.0"
    lock = json.loads((directory / "release.lock").read_text())
    return CrossRelease(run, project, crate, config, artifacts, directory, lock)


def profile_names(manifest: dict[str, Any]) -> set[str]:
    """The names the artifact's profiles/ holds: plain for what the shipped binary was
    optimized with, `*.unshipped.*` for the variants the gate did not ship."""
    pgo, bolt = manifest["pgo"] or {}, manifest["bolt"] or {}
    return {
        "pgo.profdata" if pgo.get("shipped") else "pgo.unshipped.profdata",
        "bolt.fdata" if bolt.get("shipped") else "bolt.unshipped.fdata",
    }

"""Concurrent runs on one engine (issue 28): an image is built once while another run
waits for it, and a fork bomb in a build script stops at its container's pids limit
while the engine goes on serving other work."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
import threading
import time
import uuid
from pathlib import Path

import docker

from orchestrator.runtime.engine import Engine
from orchestrator.runtime.imagelock import lock_name

from .conftest import REPO, STARTED_PIDS, managed_containers

FORK_BOMB = REPO / "tests" / "fixtures" / "fork-bomb" / "orchestrator.toml"
RACE = [sys.executable, "-m", "tests.integration.image_race"]
CLI = [sys.executable, "-m", "orchestrator"]


def _tiny_rootfs(path: Path) -> None:
    """A root filesystem of one file: `docker import` takes it in a moment."""
    path.parent.mkdir(parents=True)
    data = b"not a real system\n"
    with tarfile.open(path, "w") as tar:
        entry = tarfile.TarInfo("etc/marker")
        entry.size = len(data)
        tar.addfile(entry, io.BytesIO(data))


class Reader(threading.Thread):
    """Collects a process's output lines; `seen` is set once a line holds `marker`."""

    def __init__(self, process: subprocess.Popen[str], marker: str) -> None:
        super().__init__(daemon=True)
        self.process, self.marker = process, marker
        self.lines: list[str] = []
        self.seen = threading.Event()

    def run(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)
            if self.marker in line:
                self.seen.set()

    @property
    def output(self) -> str:
        return "".join(self.lines)


def test_two_runs_needing_one_missing_image_build_it_once(
    docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    # A fresh image key that no other test or run uses, for a base image (the image kind
    # that is quickest to make: a `docker import` of a cached rootfs).
    input_hash = hashlib.sha256(f"itest-{uuid.uuid4()}".encode()).hexdigest()
    reference = f"orchestrator/base:itest-{input_hash[:16]}"
    cache = tmp_path / "cache"
    _tiny_rootfs(cache / "rootfs" / f"{input_hash}.tar")
    since = int(time.time()) - 1
    readers: list[Reader] = []
    try:
        # This test holds the engine's lock first, so that both runs must find it taken
        # (no timing decides whether they meet), then lets go without building anything.
        with Engine.connect().image_lock(reference, on_wait=print):
            for _ in range(2):
                process = subprocess.Popen(
                    [*RACE, reference, input_hash, str(cache)],
                    cwd=REPO,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
                STARTED_PIDS.add(process.pid)
                readers.append(Reader(process, f"waiting for another run's build of {reference}"))
                readers[-1].start()
            for reader in readers:
                assert reader.seen.wait(timeout=120), reader.output
        for reader in readers:
            assert reader.process.wait(timeout=300) == 0, reader.output
            reader.join(timeout=10)
        until = int(time.time()) + 1
        # What makes an image here is one `import` event carrying its input-hash label.
        events = docker_client.events(
            since=since,
            until=until,
            decode=True,
            filters={
                "type": "image",
                "event": "import",
                "label": f"org.orchestrator.input-hash={input_hash}",
            },
        )
        imports = [e for e in events if e.get("Action") == "import"]
        assert len(imports) == 1, imports
        outcomes = sorted(
            line.split("built=")[1].strip()
            for reader in readers
            for line in reader.lines
            if line.startswith("outcome ")
        )
        assert outcomes == ["False", "True"]  # one built it, the other used it
        ids = {line.split()[1] for r in readers for line in r.lines if line.startswith("outcome")}
        assert len(ids) == 1  # the very same image
        assert any("made by another run meanwhile" in r.output for r in readers)
        assert docker_client.containers.list(all=True, filters={"name": lock_name(reference)}) == []
    finally:
        for reader in readers:
            if reader.process.poll() is None:
                reader.process.kill()
        for image in docker_client.images.list(
            filters={"label": f"org.orchestrator.input-hash={input_hash}"}
        ):
            docker_client.images.remove(str(image.id), force=True)


def test_a_fork_bomb_build_script_stops_at_its_pids_limit_while_the_engine_goes_on(
    docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    artifacts = tmp_path / "artifacts"
    process = subprocess.Popen(
        [*CLI, "build", "--config", str(FORK_BOMB), "--artifacts-dir", str(artifacts)],
        cwd=REPO,
        env={**os.environ, "ORCHESTRATOR_LIMITS_PIDS": "256"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    STARTED_PIDS.add(process.pid)
    reader = Reader(process, "▶ build-baseline")
    reader.start()
    bystander = None
    try:
        assert reader.seen.wait(timeout=1500), reader.output
        # The build container runs under the limits asked for, as the Engine applied them.
        (box,) = docker_client.containers.list(
            filters={
                "label": [
                    f"org.orchestrator.pid={process.pid}",
                    "org.orchestrator.purpose=build",
                ]
            }
        )
        host_config = box.attrs["HostConfig"]
        assert host_config["PidsLimit"] == 256
        assert host_config["Memory"] == host_config["MemorySwap"] == 8 << 30
        # Meanwhile, other work on the same engine goes on: a container that starts
        # processes again and again while the bomb goes off.
        bystander = docker_client.containers.run(
            box.attrs["Image"], ["sleep", "infinity"], detach=True, network_mode="none"
        )
        codes: list[int | None] = []
        while process.poll() is None or not codes:
            result = bystander.exec_run(["sh", "-c", "for i in 1 2 3 4 5; do true; done"])
            codes.append(result.exit_code)
            time.sleep(0.5)
        assert set(codes) == {0}, codes
        process.wait(timeout=60)
        reader.join(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
        if bystander is not None:
            bystander.remove(force=True)
    output = reader.output
    assert process.returncode == 25, output  # ResourceLimitError
    assert "its process limit (limits.pids = 256)" in output
    assert "ORCHESTRATOR_LIMITS_PIDS" in output  # the hint names the setting
    assert "fork bomb: started" in output  # the build script's own words, from the step log
    assert managed_containers(docker_client) == []

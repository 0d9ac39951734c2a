"""A second Docker Engine on this machine, for the several-engines tests.

It gets its own everything: config file, data-root, exec-root, pid file, socket, and its
own bridge with an unused private address. Never `--bridge none`: that dockerd deletes
the host engine's docker0 at start-up. It is reached by its own Docker context, as a
remote engine would be, and removed with everything it made at the end.

It also listens on a loopback TCP port with mutual TLS (`--tlsverify`, certificates made
here with openssl), named by a second context (`<context>-tls`) that carries the CA and
client certificate: the way a build box on the network is reached.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker

BRIDGE = "orchtest0"
BRIDGE_ADDRESS = "172.31.250.1/24"
START_TIMEOUT_S = 90


@dataclass
class SecondEngine:
    context: str  # its unix socket
    tls_context: str  # its tcp:// port, mutual TLS
    root: Path
    process: subprocess.Popen[bytes]

    @property
    def socket(self) -> Path:
        return self.root / "docker.sock"

    def client(self) -> docker.DockerClient:
        return docker.DockerClient(base_url=f"unix://{self.socket}", timeout=30)

    def kill(self) -> None:
        """What a crashed build box looks like: the Engine is gone at once."""
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)


def _ip(*args: str, check: bool = True) -> None:
    subprocess.run(["ip", *args], check=check, capture_output=True)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _make_certificates(directory: Path) -> None:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, as Docker's
    "Protect the Docker daemon socket" page lays them out."""
    directory.mkdir()

    def openssl(command: str, *args: str) -> None:
        argv = ["openssl", *command.split(), *args]
        subprocess.run(argv, cwd=directory, check=True, capture_output=True)

    rsa = "-newkey rsa:2048 -nodes"
    openssl(f"req -x509 {rsa} -days 2 -keyout ca-key.pem -out ca.pem", "-subj", "/CN=test CA")
    for name, extension in (
        ("server", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"),
        ("client", "extendedKeyUsage=clientAuth\n"),
    ):
        (directory / f"{name}.ext").write_text(extension)
        openssl(f"req {rsa} -keyout {name}-key.pem -out {name}.csr", "-subj", f"/CN={name}")
        openssl(
            f"x509 -req -days 2 -in {name}.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial "
            f"-extfile {name}.ext -out {name}-cert.pem"
        )


def _stop_everything_under(root: Path) -> None:
    """Processes (the engine's own containerd, shims) and mounts left under `root`."""
    mine = str(root)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if mine in (entry / "cmdline").read_bytes().decode(errors="replace"):
                os.kill(int(entry.name), signal.SIGKILL)
    time.sleep(1)
    mounts = [
        line.split()[1]
        for line in Path("/proc/mounts").read_text().splitlines()
        if line.split()[1].startswith(mine)
    ]
    for mount in sorted(mounts, key=len, reverse=True):
        subprocess.run(["umount", "-l", mount], check=False, capture_output=True)


@contextlib.contextmanager
def second_engine(context: str) -> Iterator[SecondEngine]:
    """Start the engine, make `context` point at it; stop and remove both afterwards."""
    root = Path(tempfile.mkdtemp(prefix="orch-e2-", dir="/var/tmp"))  # short: socket paths
    (root / "daemon.json").write_text(json.dumps({}))  # not the host's /etc/docker/daemon.json
    _ip("link", "del", BRIDGE, check=False)  # a leftover of a run that was killed
    _ip("link", "add", BRIDGE, "type", "bridge")
    _ip("addr", "add", BRIDGE_ADDRESS, "dev", BRIDGE)
    _ip("link", "set", BRIDGE, "up")
    tls = root / "tls"
    _make_certificates(tls)
    port = _free_port()
    log = (root / "dockerd.log").open("wb")
    process = subprocess.Popen(
        [
            "dockerd",
            "--config-file", str(root / "daemon.json"),
            "--data-root", str(root / "data"),
            "--exec-root", str(root / "exec"),
            "--pidfile", str(root / "docker.pid"),
            "--host", f"unix://{root / 'docker.sock'}",
            "--host", f"tcp://127.0.0.1:{port}",
            "--tlsverify",
            "--tlscacert", str(tls / "ca.pem"),
            "--tlscert", str(tls / "server-cert.pem"),
            "--tlskey", str(tls / "server-key.pem"),
            "--storage-driver", "fuse-overlayfs",
            "--bridge", BRIDGE,
            "--iptables=false",
            "--ip-masq=false",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    engine = SecondEngine(context, f"{context}-tls", root, process)
    endpoints = {
        engine.context: f"host=unix://{engine.socket}",
        engine.tls_context: f"host=tcp://127.0.0.1:{port},ca={tls / 'ca.pem'},"
        f"cert={tls / 'client-cert.pem'},key={tls / 'client-key.pem'}",
    }
    try:
        _wait_until_it_answers(engine)
        for name, endpoint in endpoints.items():
            _remove_context(name)
            subprocess.run(
                ["docker", "context", "create", name, "--docker", endpoint],
                check=True,
                capture_output=True,
            )
        yield engine
    finally:
        for name in endpoints:
            _remove_context(name)
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        log.close()
        _stop_everything_under(root)
        _ip("link", "del", BRIDGE, check=False)
        subprocess.run(["rm", "-rf", "--one-file-system", str(root)], check=False)


def _remove_context(name: str) -> None:
    subprocess.run(["docker", "context", "rm", "-f", name], check=False, capture_output=True)


def _wait_until_it_answers(engine: SecondEngine) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if engine.process.poll() is not None:
            break
        with contextlib.suppress(Exception):
            if engine.socket.exists() and engine.client().ping():
                return
        time.sleep(0.5)
    tail = (engine.root / "dockerd.log").read_text(errors="replace")[-3000:]
    raise RuntimeError(f"the second dockerd did not start:\n{tail}")

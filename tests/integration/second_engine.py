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
import signal
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker

from tests.integration.engine_service import (
    remove_root,
    service_root,
    start_service,
    stop_everything_under,
    stop_service,
    wait_until_it_answers,
)

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


@contextlib.contextmanager
def second_engine(context: str) -> Iterator[SecondEngine]:
    """Start the engine, make `context` point at it; stop and remove both afterwards."""
    root = service_root("orch-e2-")
    (root / "daemon.json").write_text(json.dumps({}))  # not the host's /etc/docker/daemon.json
    _ip("link", "del", BRIDGE, check=False)  # a leftover of a run that was killed
    _ip("link", "add", BRIDGE, "type", "bridge")
    _ip("addr", "add", BRIDGE_ADDRESS, "dev", BRIDGE)
    _ip("link", "set", BRIDGE, "up")
    tls = root / "tls"
    _make_certificates(tls)
    port = _free_port()
    service = start_service(
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
        root / "dockerd.log",
    )  # fmt: skip
    engine = SecondEngine(context, f"{context}-tls", root, service.process)
    endpoints = {
        engine.context: f"host=unix://{engine.socket}",
        engine.tls_context: f"host=tcp://127.0.0.1:{port},ca={tls / 'ca.pem'},"
        f"cert={tls / 'client-cert.pem'},key={tls / 'client-key.pem'}",
    }
    try:
        wait_until_it_answers(
            service,
            engine.socket,
            engine.client,
            what="the second dockerd",
            timeout_s=START_TIMEOUT_S,
        )
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
        stop_service(service)
        # Processes (the engine's own containerd, shims) and mounts left under `root`
        stop_everything_under(root, settle_s=1)
        _ip("link", "del", BRIDGE, check=False)
        remove_root(root)


def _remove_context(name: str) -> None:
    subprocess.run(["docker", "context", "rm", "-f", name], check=False, capture_output=True)

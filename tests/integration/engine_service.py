"""Start and stop an engine service the tests run beside the host's (a second dockerd,
rootful Podman): a temporary folder of its own, the service's output in a log there, a
wait until it answers, and afterwards nothing left behind (processes, mounts, files).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import docker

STOP_TIMEOUT_S = 60


def service_root(prefix: str) -> Path:
    """A fresh folder under /var/tmp: short, so that socket paths in it stay under the
    108 bytes of a unix socket's name."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/var/tmp"))


@dataclass(frozen=True)
class Service:
    """A running service, its output going to `log_path`."""

    process: subprocess.Popen[bytes]
    log_path: Path
    log: BinaryIO


def start_service(
    argv: Sequence[str], log_path: Path, *, environment: Mapping[str, str] | None = None
) -> Service:
    log = log_path.open("wb")
    env = {**os.environ, **environment} if environment is not None else None
    process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    return Service(process, log_path, log)


def wait_until_it_answers(
    service: Service,
    socket: Path,
    client: Callable[[], docker.DockerClient],
    *,
    what: str,
    timeout_s: float,
) -> None:
    """Until the engine answers a ping on `socket`; RuntimeError with the log's tail when
    the service exits or `timeout_s` passes first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if service.process.poll() is not None:
            break
        with contextlib.suppress(Exception):
            if socket.exists() and client().ping():
                return
        time.sleep(0.5)
    tail = service.log_path.read_text(errors="replace")[-3000:]
    raise RuntimeError(f"{what} did not start:\n{tail}")


def stop_service(service: Service) -> None:
    """SIGTERM, then SIGKILL after STOP_TIMEOUT_S; its log closed."""
    if service.process.poll() is None:
        service.process.send_signal(signal.SIGTERM)
        try:
            service.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            service.process.kill()
            service.process.wait()
    service.log.close()


def stop_everything_under(root: Path, *, settle_s: float = 0.0) -> None:
    """What the service left: processes told by `root` in their command line (a dockerd's
    own containerd and shims; Podman's conmon of each exec, up 300 s after it ended with
    `--exit-delay`), killed; then, after `settle_s`, every mount below `root` (overlay
    makes its graph folder a mount of its own), lazily unmounted, deepest first."""
    mine = str(root)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if mine in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    os.kill(int(entry.name), signal.SIGKILL)
    if settle_s:
        time.sleep(settle_s)
    mounts = [
        line.split()[1]
        for line in Path("/proc/mounts").read_text().splitlines()
        if line.split()[1].startswith(mine)
    ]
    for mount in sorted(mounts, key=len, reverse=True):
        subprocess.run(["umount", "-l", mount], check=False, capture_output=True)


def remove_root(root: Path) -> None:
    """The folder, without crossing into a mount left below it."""
    subprocess.run(["rm", "-rf", "--one-file-system", str(root)], check=False)

"""Rootful Podman on this machine, reached as a Docker Engine through its compat socket.

`podman system service --time=0 unix:///<dir>/podman.sock`, with a store of its own:
a storage.conf (CONTAINERS_STORAGE_CONF) puts graphroot and runroot under a temporary
folder, and a containers.conf (CONTAINERS_CONF) its libpod state, volumes and tmp dir.
On these VMs the service lacks CAP_SYS_RESOURCE, so containers.conf also gives every
container ulimits it may set (nofile, nproc: the defaults would raise the hard limits).
Images come from the host engine by `docker save | podman load`, never built again:
their names and labels (orchestrator/<family>:<tag>, org.orchestrator.input-hash) go
along, so the tool finds them as it would on the engine that made them.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator, Sequence
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

START_TIMEOUT_S = 60
ULIMITS = '["nofile=20000:20000", "nproc=32768:32768"]'
CDI_ETC = Path("/etc/cdi")


@dataclass(frozen=True)
class PodmanEngine:
    root: Path
    process: subprocess.Popen[bytes]

    @property
    def socket(self) -> Path:
        return self.root / "podman.sock"

    @property
    def docker_host(self) -> str:
        return f"unix://{self.socket}"

    @property
    def environment(self) -> dict[str, str]:
        return _environment(self.root)

    def client(self) -> docker.DockerClient:
        return docker.DockerClient(base_url=self.docker_host, timeout=60)

    def load(self, references: Sequence[str]) -> None:
        """The host engine's images, as `docker save | podman load` moves them."""
        save = subprocess.Popen(["docker", "save", *references], stdout=subprocess.PIPE)
        loaded = subprocess.run(
            ["podman", "load"],
            stdin=save.stdout,
            env={**os.environ, **self.environment},
            capture_output=True,
            text=True,
            check=False,
        )
        assert save.wait() == 0, "docker save failed"
        assert loaded.returncode == 0, loaded.stderr


def _environment(root: Path) -> dict[str, str]:
    """What podman (service or CLI) needs to work on this store, not the machine's."""
    return {
        "CONTAINERS_STORAGE_CONF": str(root / "storage.conf"),
        "CONTAINERS_CONF": str(root / "containers.conf"),
    }


def _write_config(root: Path) -> None:
    (root / "storage.conf").write_text(
        '[storage]\ndriver = "overlay"\n'
        f'graphroot = "{root / "graph"}"\nrunroot = "{root / "run"}"\n'
    )
    (root / "containers.conf").write_text(
        f"[containers]\ndefault_ulimits = {ULIMITS}\n\n"
        f'[engine]\ntmp_dir = "{root / "tmp"}"\nvolume_path = "{root / "volumes"}"\n'
    )


def _service_argv(root: Path, cdi_dir: Path | None) -> list[str]:
    """The service's command line; with `cdi_dir`, in a mount namespace of its own where
    that folder is /etc/cdi. Podman 4.3 reads CDI specs from /etc/cdi and /var/run/cdi
    only (no cdi_spec_dirs yet), and the machine's own stay untouched this way."""
    service = ["podman", "system", "service", "--time=0", f"unix://{root / 'podman.sock'}"]
    if cdi_dir is None:
        return service
    CDI_ETC.mkdir(parents=True, exist_ok=True)  # an empty mount point on the machine
    script = f'mount --bind "{cdi_dir}" {CDI_ETC} && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *service]


@contextlib.contextmanager
def podman_engine(*, cdi_dir: Path | None = None) -> Iterator[PodmanEngine]:
    """Start the service on a fresh store; stop it and remove everything it made. With
    `cdi_dir`, the service sees that folder's CDI specs as its /etc/cdi."""
    root = service_root("orch-pm-")
    _write_config(root)
    service = start_service(
        _service_argv(root, cdi_dir), root / "service.log", environment=_environment(root)
    )
    engine = PodmanEngine(root, service.process)
    try:
        wait_until_it_answers(
            service,
            engine.socket,
            engine.client,
            what="podman system service",
            timeout_s=START_TIMEOUT_S,
        )
        yield engine
    finally:
        with contextlib.suppress(Exception):
            subprocess.run(
                ["podman", "rm", "--all", "--force", "--time", "0"],
                env={**os.environ, **engine.environment},
                capture_output=True,
                timeout=120,
                check=False,
            )
        stop_service(service)
        # The service's leftovers: the conmon of each exec, the store's mounts
        stop_everything_under(root)
        remove_root(root)

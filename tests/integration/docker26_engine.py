"""A current Docker Engine beside the host's: Debian trixie's `docker.io` (26.x), for the
engine-kind tests.

The host runs Debian 12, whose glibc is older than trixie's binaries need, and this
host's engine refuses `--privileged` (dockerd-in-a-container is out). So the engine runs
from a trixie root filesystem made by mmdebstrap (cached as a tarball, made once per
machine), unpacked under a temporary folder, in a mount namespace of its own:

- The root is made that namespace's root by `pivot_root`, never by `chroot`: runc's exec
  joins the container's mount namespace and starts at that namespace's root, so under a
  chroot every `docker exec` ran on the host's root filesystem (seen with runc 1.1.15).
- Its mounts (overlay2 layers, netns files) stay in that namespace and go with it.
- Its own everything, as for the second dockerd (second_engine.py): an empty config
  file, data-root, exec-root, pid file, socket, cgroup parent, and its own bridge with an
  unused private address (never `--bridge none`: that deletes the host's docker0).

Images come from the host engine by `docker save | docker load`, never built again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import docker

SUITE = "trixie"
MIRROR = "http://deb.debian.org/debian"
# fuse-overlayfs: where overlay2 cannot run (a store on overlayfs); apparmor: on a host
# with AppArmor, dockerd loads its docker-default profile with apparmor_parser.
PACKAGES = ("docker.io", "fuse-overlayfs", "apparmor")
# Documentation and translations are a seventh of the tree and never read here.
EXCLUDED = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/locale/*")
BRIDGE = "orchd26br0"  # not orchtest*/orchestrator-test*: those are other tests'
BRIDGE_ADDRESS = "172.31.251.1/24"
CGROUP_PARENT = "orchd26"
INSIDE = "/run/orchd26"  # its socket, pid file and exec-root, as the engine sees them
START_TIMEOUT_S = 90
CGROUP_ROOT = Path("/sys/fs/cgroup")

# Runs as `sh -c SCRIPT sh ROOT` in a fresh mount namespace (mounts private to it).
_START = f"""set -e
root=$1
mount --bind "$root" "$root"
mount --rbind /dev "$root/dev"
mount --rbind /sys "$root/sys"
mount -t proc proc "$root/proc"
mkdir -p "$root{INSIDE}" "$root/var/lib/orchd26" "$root/.old-root"
cd "$root"
pivot_root . .old-root
umount -l /.old-root
exec dockerd --config-file /etc/orchd26.json --data-root /var/lib/orchd26 \\
  --exec-root {INSIDE}/exec --pidfile {INSIDE}/docker.pid -H unix://{INSIDE}/docker.sock \\
  --bridge {BRIDGE} --iptables=false --ip-masq=false --cgroup-parent /{CGROUP_PARENT}
"""


def tests_cache_dir() -> Path:
    """Where the tests keep what they make once per machine (ORCHTEST_CACHE, else
    ~/.cache/orchestrator-tests): never the tool's own cache, which `clean` empties."""
    configured = os.environ.get("ORCHTEST_CACHE")
    if configured:
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "orchestrator-tests"


def rootfs_tarball() -> Path:
    """trixie with docker.io, as a tarball made by mmdebstrap once (about a minute)."""
    recipe = json.dumps([SUITE, MIRROR, PACKAGES, EXCLUDED])
    key = hashlib.sha256(recipe.encode()).hexdigest()[:16]
    tarball = tests_cache_dir() / f"docker-{SUITE}-{key}.tar"
    if tarball.is_file():
        return tarball
    tarball.parent.mkdir(parents=True, exist_ok=True)
    partial = tarball.with_name(f".{tarball.stem}.{os.getpid()}.tar")  # not globbed below
    options = [f"--dpkgopt=path-exclude={path}" for path in EXCLUDED]
    argv = [
        "mmdebstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", *options,
        SUITE, str(partial), MIRROR,
    ]  # fmt: skip
    made = subprocess.run(argv, capture_output=True, text=True, check=False)
    if made.returncode != 0:
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"mmdebstrap failed:\n{made.stderr[-3000:]}")
    partial.replace(tarball)
    for older in tarball.parent.glob(f"docker-{SUITE}-*.tar"):  # another recipe's
        if older != tarball:
            older.unlink(missing_ok=True)
    return tarball


@dataclass(frozen=True)
class Docker26Engine:
    root: Path  # the temporary folder; the engine's root filesystem is root/"rootfs"
    process: subprocess.Popen[bytes]

    @property
    def socket(self) -> Path:
        return self.root / "rootfs" / INSIDE.lstrip("/") / "docker.sock"

    @property
    def docker_host(self) -> str:
        return f"unix://{self.socket}"

    def client(self) -> docker.DockerClient:
        return docker.DockerClient(base_url=self.docker_host, timeout=120)

    def load(self, references: Sequence[str]) -> None:
        """The host engine's images, as `docker save | docker load` moves them."""
        save = subprocess.Popen(["docker", "save", *references], stdout=subprocess.PIPE)
        loaded = subprocess.run(
            ["docker", "--host", self.docker_host, "load"],
            stdin=save.stdout,
            capture_output=True,
            text=True,
            check=False,
        )
        assert save.wait() == 0, "docker save failed"
        assert loaded.returncode == 0, loaded.stderr


def _ip(*args: str, check: bool = True) -> None:
    subprocess.run(["ip", *args], check=check, capture_output=True)


def _cgroups() -> list[Path]:
    """This engine's cgroup parent in every hierarchy (v1: one per controller)."""
    if (CGROUP_ROOT / "cgroup.controllers").exists():  # cgroup v2: one tree
        return [CGROUP_ROOT / CGROUP_PARENT]
    return [entry / CGROUP_PARENT for entry in CGROUP_ROOT.iterdir() if entry.is_dir()]


def _remove_cgroups() -> None:
    """Kill what is left in them (containers), then remove them, deepest first."""
    for parent in _cgroups():
        if not parent.is_dir():
            continue
        for procs in parent.rglob("cgroup.procs"):
            with contextlib.suppress(OSError):
                for pid in procs.read_text().split():
                    os.kill(int(pid), signal.SIGKILL)
    time.sleep(0.5)
    for parent in _cgroups():
        if parent.is_dir():
            for folder in sorted(parent.rglob("*/"), key=lambda p: len(p.parts), reverse=True):
                with contextlib.suppress(OSError):
                    folder.rmdir()
            with contextlib.suppress(OSError):
                parent.rmdir()


def _kill_leftovers(namespace: str) -> None:
    """Every process in the engine's mount namespace, or naming its folder (containerd and
    its shims, also where dockerd died first and the namespace is unknown)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                ours = INSIDE.encode() in (entry / "cmdline").read_bytes()
                if ours or str((entry / "ns" / "mnt").readlink()) == namespace:
                    os.kill(int(entry.name), signal.SIGKILL)


def _start(root: Path) -> subprocess.Popen[bytes]:
    rootfs = root / "rootfs"
    rootfs.mkdir()
    subprocess.run(["tar", "-C", str(rootfs), "-xf", str(rootfs_tarball())], check=True)
    (rootfs / "etc" / "orchd26.json").write_text("{}")  # not the host's daemon.json
    _ip("link", "del", BRIDGE, check=False)  # a leftover of a run that was killed
    _remove_cgroups()
    _ip("link", "add", BRIDGE, "type", "bridge")
    _ip("addr", "add", BRIDGE_ADDRESS, "dev", BRIDGE)
    _ip("link", "set", BRIDGE, "up")
    with (root / "dockerd.log").open("wb") as log:
        return subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", _START, "sh", rootfs],
            stdout=log,
            stderr=subprocess.STDOUT,
        )


@contextlib.contextmanager
def docker26_engine() -> Iterator[Docker26Engine]:
    """Start trixie's dockerd on an empty store; stop it and remove everything it made."""
    root = Path(tempfile.mkdtemp(prefix="orch-d26-", dir="/var/tmp"))  # short: socket path
    process: subprocess.Popen[bytes] | None = None
    try:
        process = _start(root)
        engine = Docker26Engine(root, process)
        _wait_until_it_answers(engine)
        yield engine
    finally:
        namespace = ""
        if process is not None and process.poll() is None:
            with contextlib.suppress(OSError):  # dockerd's, where containerd and shims run
                namespace = str(Path(f"/proc/{process.pid}/ns/mnt").readlink())
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        _kill_leftovers(namespace)
        _remove_cgroups()
        _ip("link", "del", BRIDGE, check=False)
        subprocess.run(["rm", "-rf", "--one-file-system", str(root)], check=False)


def _wait_until_it_answers(engine: Docker26Engine) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if engine.process.poll() is not None:
            break
        with contextlib.suppress(Exception):
            if engine.socket.exists() and engine.client().ping():
                return
        time.sleep(0.5)
    tail = (engine.root / "dockerd.log").read_text(errors="replace")[-3000:]
    raise RuntimeError(f"trixie's dockerd did not start:\n{tail}")

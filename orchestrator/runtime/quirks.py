"""Which engine answers on the socket, and how it differs from Docker Engine 20.10.

Docker Engine and Podman's Docker-compatible service take the same calls, but not always
with the same effect (seen on Podman 4.3.1 through its compat API, API version 1.41):

- `POST /images/create?fromSrc=-` ignores `tag`: the image lands as `<repo>:latest`, so
  an import goes out with no name and the image is tagged by id afterwards.
- RepoTags come back fully qualified (`docker.io/orchestrator/...`, or `localhost/...`
  for a `podman load`ed image): they are reported here without that prefix.
- `security_opt` `seccomp=<value>` is read as a file path, never as the profile itself.
- A container name that is taken is HTTP 500, not 409 Conflict.
- Removing an image with `force` also removes the containers made from it (Docker
  refuses, or leaves them with an untagged image), and the `ancestor` filter matches
  only the fully qualified name: in-use checks look at each container's image id, and
  removals never force.
- `stats()` reports no pids limit.
- Architecture is Go's name (`amd64`), where Docker says `x86_64`.
- Rootless, a container with a network fails to start where /dev/net/tun is root's
  alone (slirp4netns opens it): the start hint says so.

Everything here is pure: the Engine (engine.py) asks `EngineKind` what to do.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DOCKER = "docker"
PODMAN = "podman"
PODMAN_COMPONENT = "Podman Engine"  # /version's Components[].Name on Podman's service
# What Podman puts before the names it reports; Docker never does for local images.
_PODMAN_PREFIXES = ("docker.io/library/", "docker.io/", "localhost/")
# Go's architecture names (Podman) to the kernel's (Docker, and our flavors).
_ARCHITECTURES = {"amd64": "x86_64", "arm64": "aarch64"}
# A rootless Podman's container network is slirp4netns, which opens /dev/net/tun; where
# that is root's alone it fails, and Podman 4.3 then leaves a stale rootless netns file
# behind, so every later try fails on "mount runtime directory for rootless netns".
_ROOTLESS_NETWORK_FAILURES = re.compile(r"/dev/net/tun|slirp4netns|rootless netns")
ROOTLESS_NETWORK_HINT = (
    "a rootless Podman's network (slirp4netns) needs /dev/net/tun usable by its user: "
    "chmod 0666 /dev/net/tun (its usual mode), then remove any stale "
    "$XDG_RUNTIME_DIR/netns/rootless-netns-* file"
)


@dataclass(frozen=True)
class EngineKind:
    """The engine product behind a socket and the facts that change what we send it."""

    product: str  # DOCKER | PODMAN
    version: str  # the product's own version (Podman's, not its API's)
    api_version: str
    cgroup_version: int  # 1, 2, or 0 where the engine does not say
    selinux: bool  # SELinux is enforced on its containers: mounts need a label option
    rootless: bool

    @property
    def podman(self) -> bool:
        return self.product == PODMAN

    @property
    def title(self) -> str:
        """Its name in messages, e.g. "Podman 4.3.1 (rootful)"."""
        name = "Podman" if self.podman else "Docker Engine"
        return f"{name} {self.version} ({'rootless' if self.rootless else 'rootful'})"

    # -- what differs --------------------------------------------------------------
    @property
    def tags_on_import(self) -> bool:
        """Whether an import honours the tag it is given (else: tag it by id after)."""
        return not self.podman

    @property
    def seccomp_inline(self) -> bool:
        """Whether `seccomp=` takes the profile's JSON (else: a path to a file of it)."""
        return not self.podman

    @property
    def force_removes_containers(self) -> bool:
        """Whether removing an image with force also removes containers made from it."""
        return self.podman

    @property
    def stats_pids_limit(self) -> bool:
        """Whether the stats endpoint reports the pids limit."""
        return not self.podman

    def start_hint(self, reason: str) -> str:
        """What to do when a container cannot start for `reason` ("" if nothing known)."""
        if self.podman and "catatonit" in reason:
            return "Podman runs each container's init with catatonit: apt-get install catatonit."
        if self.podman and self.rootless and _ROOTLESS_NETWORK_FAILURES.search(reason):
            return ROOTLESS_NETWORK_HINT  # first: slirp4netns's output names seccomp
        if self.podman and "seccomp" in reason:
            return "Podman reads a seccomp profile from a file: run orchestrator on its host."
        return ""

    def plain_tag(self, tag: str) -> str:
        """A repository tag as the rest of the tool names images: `orchestrator/base:x`."""
        if self.podman:
            for prefix in _PODMAN_PREFIXES:
                if tag.startswith(prefix):
                    return tag[len(prefix) :]
        return tag

    def mount_mode(self, *, read_only: bool, shared: bool) -> str:
        """The mode of a volume or bind mount. Under SELinux the engine must relabel
        what it mounts or the container cannot read it: `z` for content several
        containers use (the shared label), `Z` for content only this one uses."""
        mode = "ro" if read_only else "rw"
        if self.selinux:
            mode += ",z" if shared else ",Z"
        return mode


def _security_options(info: Mapping[str, Any]) -> set[str]:
    """The `name=...` of each SecurityOptions entry ("name=seccomp,profile=default")."""
    names: set[str] = set()
    for entry in info.get("SecurityOptions") or []:
        for part in str(entry).split(","):
            key, _, value = part.partition("=")
            if key == "name":
                names.add(value)
    return names


def _cgroup_version(info: Mapping[str, Any]) -> int:
    value = str(info.get("CgroupVersion", "")).strip()
    return int(value) if value in ("1", "2") else 0


def detect(
    version: Mapping[str, Any], info: Mapping[str, Any], libpod: Mapping[str, Any] | None = None
) -> EngineKind:
    """The engine's kind from its /version and /info answers, and on Podman its own
    /libpod/info (`libpod`), whose `host.security` says SELinux and rootless where the
    compat /info may not (Podman 4.3's SecurityOptions name neither; it has `Rootless`)."""
    podman = None
    for component in version.get("Components") or []:
        if isinstance(component, Mapping) and component.get("Name") == PODMAN_COMPONENT:
            podman = component
    security = _security_options(info)
    host = (libpod or {}).get("host")
    libpod_security = host.get("security") if isinstance(host, Mapping) else None
    own = libpod_security if isinstance(libpod_security, Mapping) else {}
    return EngineKind(
        product=PODMAN if podman is not None else DOCKER,
        version=str((podman or version).get("Version", "")),
        api_version=str(version.get("ApiVersion", "")),
        cgroup_version=_cgroup_version(info),
        selinux="selinux" in security or own.get("selinuxEnabled") is True,
        rootless="rootless" in security
        or info.get("Rootless") is True
        or own.get("rootless") is True,
    )


def architecture(info: Mapping[str, Any]) -> str:
    """The engine's architecture by the kernel's name (x86_64, aarch64), whichever engine."""
    reported = str(info.get("Architecture", ""))
    return _ARCHITECTURES.get(reported, reported)


def binds(
    kind: EngineKind, volumes: Mapping[str, str], read_only: Mapping[str, str]
) -> dict[str, dict[str, str]]:
    """The SDK's `volumes` for a container: source (a volume name, or a host path for a
    bind mount) -> where and how it is mounted. Our named volumes are each shared by the
    containers of one build (sources loaded by one, read by the others; /build/out
    written by the build, read by the profiler), and a read-only source is for sharing:
    both get the shared label. Only a host folder mounted writable is this container's
    alone (the private label, which locks every other container out of it)."""
    mounts: dict[str, dict[str, str]] = {}
    for source, path in volumes.items():
        shared = not source.startswith("/")
        mounts[source] = {"bind": path, "mode": kind.mount_mode(read_only=False, shared=shared)}
    for source, path in read_only.items():
        mounts[source] = {"bind": path, "mode": kind.mount_mode(read_only=True, shared=True)}
    return mounts

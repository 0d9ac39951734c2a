"""What the rest of the code may know of the Engine: the records it returns, the labels
it puts on everything, and the Protocols (`EngineApi`, `ContainerApi`) that the real
Engine satisfies and tests/unit/fakes.py fakes. No Docker SDK here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from orchestrator.host.system import process_alive
from orchestrator.model.documents.records import ContainerGrant, EngineRecord
from orchestrator.runtime.gpu import GpuPassthrough
from orchestrator.runtime.quirks import EngineKind, architecture
from orchestrator.runtime.seccomp import added_syscalls, profile_json, profile_sha256

LABEL_MANAGED = "org.orchestrator.managed"
LABEL_SESSION = "org.orchestrator.session"
LABEL_PID = "org.orchestrator.pid"
LABEL_HOST = "org.orchestrator.host"
LABEL_INPUT_HASH = "org.orchestrator.input-hash"
LABEL_KIND = "org.orchestrator.kind"
LABEL_STAGE = "org.orchestrator.stage"
LABEL_BUILD_ID = "org.orchestrator.build-id"  # set on intermediate stages: <pid>-<session>
BUILD_ID_ARG = "ORCHESTRATOR_BUILD_ID"

OutputSink = Callable[[str], None]


@dataclass(frozen=True)
class ImageInfo:
    id: str
    tags: tuple[str, ...]
    labels: Mapping[str, str]
    size: int


@dataclass(frozen=True)
class EngineFacts:
    """What scheduling knows of one engine (`Engine.facts`)."""

    name: str  # its Docker context
    architecture: str  # as the Engine reports it: x86_64, aarch64
    labels: Mapping[str, str]  # the engine's own labels (dockerd --label gpu=nvidia)
    images: frozenset[str]  # tags of the managed images it already holds


@dataclass(frozen=True)
class Privileges:
    """Extra rights for a container; the default is none at all.

    Every container drops all capabilities and runs with no-new-privileges (unless
    `privileged`); `cap_add` names the few given back. `seccomp` names one of our own
    profiles (runtime/seccomp.py) to use instead of the Engine's default.
    """

    privileged: bool = False
    cap_add: tuple[str, ...] = ()
    security_opt: tuple[str, ...] = ()
    seccomp: str | None = None

    def describe(self) -> str:
        if self.privileged:
            return "privileged"
        parts = [f"cap-add {c}" for c in self.cap_add] + [
            f"security-opt {s}" for s in self.security_opt
        ]
        if self.seccomp is not None:
            added = " + ".join(added_syscalls(self.seccomp))
            parts.insert(0, f"seccomp {self.seccomp} (Docker's default + {added})")
        # Every container drops all capabilities: say so wherever something was granted.
        return ", ".join([parts[0], "cap-drop ALL", *parts[1:]]) if parts else "none"

    def engine_options(self, *, seccomp_file: str | None = None) -> dict[str, Any]:
        """The container-create options these rights come to (the SDK's names). The
        profile goes as its JSON, or as `seccomp_file`, a file holding it, for an engine
        that reads the option as a path (Podman)."""
        profile: tuple[str, ...] = ()
        if self.seccomp is not None:
            profile = (f"seccomp={seccomp_file or profile_json(self.seccomp)}",)
        return {
            "privileged": self.privileged,
            "cap_add": list(self.cap_add) or None,
            # Least privilege: no capabilities but those asked for by name.
            "cap_drop": None if self.privileged else ["ALL"],
            "security_opt": [*self.security_opt, *profile, "no-new-privileges"],
        }

    def record(self) -> ContainerGrant:
        """What build.json says the container was started with: exactly `engine_options`."""
        options = self.engine_options()
        unconfined = self.privileged or "seccomp=unconfined" in self.security_opt
        return ContainerGrant(
            privileged=self.privileged,
            cap_add=[f"CAP_{c}" for c in self.cap_add],
            cap_drop=["ALL"] if options["cap_drop"] else [],
            no_new_privileges="no-new-privileges" in options["security_opt"],
            seccomp="unconfined" if unconfined else self.seccomp or "docker-default",
            seccomp_sha256=profile_sha256(self.seccomp) if self.seccomp else None,
            seccomp_added=list(added_syscalls(self.seccomp)) if self.seccomp else [],
        )


@dataclass(frozen=True)
class Limits:
    """What one container may take of its engine's host (limits.pids, limits.memory);
    0: no limit. Memory and memory+swap get the same bound: it cannot swap past it."""

    pids: int = 0
    memory: int = 0  # bytes

    def engine_options(self) -> dict[str, Any]:
        """The container-create options (the SDK's names); unset ones are left out."""
        options: dict[str, Any] = {}
        if self.pids:
            options["pids_limit"] = self.pids
        if self.memory:
            options["mem_limit"] = options["memswap_limit"] = self.memory
        return options


@dataclass(frozen=True)
class ContainerSpec:
    image: str
    network: bool = False
    environment: Mapping[str, str] = field(default_factory=dict)
    privileges: Privileges = Privileges()
    user: str | None = None  # None: the image's USER (non-root in our images)
    purpose: str = "build"
    volumes: Mapping[str, str] = field(default_factory=dict)  # volume name -> mount path
    read_only_volumes: Mapping[str, str] = field(default_factory=dict)  # the same, mounted ro
    cpuset: str | None = None  # pin to these CPUs (benchmarks)
    limits: Limits = Limits()  # pids and memory (build and profiling containers)
    gpu: GpuPassthrough | None = None  # only containers that run the GPU path get one


def is_leftover(labels: Mapping[str, str], *, session: str, host: str) -> bool:
    """Whether a managed container or volume with these labels was left by a finished run.

    Never one of `session` (this process), one made on another host (its pid means
    nothing here), or one whose owning process is still alive (a concurrent build).
    """
    if labels.get(LABEL_HOST) != host or labels.get(LABEL_SESSION) == session:
        return False
    pid = str(labels.get(LABEL_PID, ""))
    return not (pid.isdigit() and process_alive(int(pid)))


class ContainerApi(Protocol):
    """What steps use of a running container (`Container`, or a fake in unit tests)."""

    @property
    def id(self) -> str: ...

    def exec(
        self,
        argv: Sequence[str],
        *,
        on_output: OutputSink,
        environment: Mapping[str, str] | None = None,
        workdir: str | None = None,
        user: str | None = None,
    ) -> int: ...

    def put_archive(self, path: str, data: bytes | BinaryIO) -> None:
        """Extract a tar into the container at `path`; a file is streamed, not read whole."""
        ...

    def get_archive(self, path: str) -> Iterator[bytes]: ...

    @property
    def limits(self) -> Limits: ...

    def limit_hits(self) -> tuple[str, ...]:
        """The limits ("pids", "memory") the container ran into since the last call."""
        ...


class LabelledContainer(Protocol):
    """An entry of `managed_containers()`: its labels, and a way to remove it."""

    @property
    def labels(self) -> dict[str, str]: ...

    def remove(self, *, force: bool = False) -> None: ...


class EngineApi(Protocol):
    """Everything the rest of the code uses of `Engine` (connect aside)."""

    session: str
    name: str  # the Docker context it was reached by

    def version(self) -> dict[str, Any]: ...

    def info(self) -> dict[str, Any]: ...

    def kind(self) -> EngineKind: ...

    def unapplied_limits(self) -> tuple[str, ...]: ...

    def image(self, reference: str) -> ImageInfo | None: ...

    def managed_images(self) -> list[ImageInfo]: ...

    def import_rootfs(self, tarball: Path, reference: str, labels: Mapping[str, str]) -> str: ...

    def build_image(
        self,
        context: Path,
        reference: str,
        *,
        buildargs: Mapping[str, str],
        labels: Mapping[str, str],
        on_output: OutputSink,
    ) -> str: ...

    def remove_image(self, reference: str, *, unused_only: bool = False) -> bool: ...

    def save_image(self, reference: str, into: Path) -> None: ...

    def load_image(self, archive: Path) -> None: ...

    def image_lock(
        self, reference: str, *, on_wait: OutputSink
    ) -> AbstractContextManager[bool]: ...

    def container(
        self, spec: ContainerSpec, *, keep: bool = False
    ) -> AbstractContextManager[ContainerApi]: ...

    def volume(self, purpose: str, *, keep: bool = False) -> AbstractContextManager[str]: ...

    def remove_managed_volumes(self) -> int: ...

    def remove_stale_volumes(self) -> int: ...

    def managed_containers(self) -> Sequence[LabelledContainer]: ...

    def remove_stale_containers(self) -> int: ...

    def remove_leftovers(self) -> tuple[int, int]: ...

    def probe(
        self,
        image: str,
        argv: Sequence[str],
        *,
        privileges: Privileges = Privileges(),
        user: str | None = None,
        gpu: GpuPassthrough | None = None,
    ) -> tuple[int, str]: ...


def engine_record(engine: EngineApi) -> EngineRecord:
    """Which engine built an artifact: build.json, the lock and provenance say it, with
    the limits it did not apply (a rootless engine under cgroup v1 applies none)."""
    info, kind = engine.info(), engine.kind()
    return EngineRecord(
        context=engine.name,
        name=str(info.get("Name", "")),
        version=kind.version,
        api_version=kind.api_version,
        os=str(info.get("OperatingSystem", "")),
        kernel=str(info.get("KernelVersion", "")),
        architecture=str(info.get("Architecture", "")),
        storage_driver=str(info.get("Driver", "")),
        kind=kind.product,
        rootless=kind.rootless,
        cgroup_version=kind.cgroup_version,
        unapplied_limits=list(engine.unapplied_limits()),
    )


def engine_facts(engine: EngineApi) -> EngineFacts:
    """What scheduling needs: architecture, labels and the images it holds."""
    info = engine.info()
    labels = {}
    for label in info.get("Labels") or []:
        key, _, value = str(label).partition("=")
        labels[key] = value
    return EngineFacts(
        name=engine.name,
        architecture=architecture(info),  # x86_64 on Docker and Podman (amd64) alike
        labels=labels,
        images=frozenset(tag for image in engine.managed_images() for tag in image.tags),
    )

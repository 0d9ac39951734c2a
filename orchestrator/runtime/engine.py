"""The Docker Engine: images, containers, volumes and facts, through the Engine API (the
Python SDK). runtime/ is the only package that talks to Docker; container.py runs steps
in one container.

Every container and image this tool makes carries `org.orchestrator.*` labels, so
leftovers of a crashed or interrupted run can always be found and removed.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

import docker
import docker.constants
import docker.errors
import docker.tls
import requests
from docker.models.containers import Container as SdkContainer

from orchestrator.errors import (
    ContainerError,
    ImageBuildError,
    OrchestratorError,
)
from orchestrator.runtime.api import (
    BUILD_ID_ARG,
    LABEL_BUILD_ID,
    LABEL_HOST,
    LABEL_INPUT_HASH,
    LABEL_KIND,
    LABEL_MANAGED,
    LABEL_PID,
    LABEL_SESSION,
    LABEL_STAGE,
    ContainerApi,
    ContainerSpec,
    EngineApi,
    EngineFacts,
    ImageInfo,
    LabelledContainer,
    Limits,
    OutputSink,
    Privileges,
    engine_facts,
    is_leftover,
)
from orchestrator.runtime.container import Container
from orchestrator.runtime.contexts import EngineEndpoint
from orchestrator.runtime.gpu import CDI, GpuPassthrough
from orchestrator.runtime.imagelock import LOCK_KIND, image_lock
from orchestrator.runtime.imageops import (
    image_info,
    import_tar,
    load_image,
    remove_image,
    remove_intermediate_stages,
    save_image,
)
from orchestrator.runtime.libpod import run_with_cdi
from orchestrator.runtime.lockstore import EngineLocks
from orchestrator.runtime.quirks import PODMAN_COMPONENT, EngineKind, binds, detect
from orchestrator.runtime.reach import open_client
from orchestrator.runtime.seccomp import profile_file

# Builds can stay silent for minutes (a fat-LTO link); the SDK's default 60 s read
# timeout would abort them. It bounds every call once the Engine has answered; image
# builds pass no timeout at all (the SDK's build call waits as long as the build runs).
API_TIMEOUT_S = 4 * 3600
# The first calls (version negotiation, ping) must be answered within this: a socket
# that accepts and never answers fails here instead of hanging for API_TIMEOUT_S.
CONNECT_TIMEOUT_S = 15


class Engine:
    def __init__(self, client: docker.DockerClient, *, name: str = "current") -> None:
        self._client = client
        self.name = name  # the Docker context it was reached by ("current": DOCKER_HOST)
        self.session = uuid.uuid4().hex[:12]
        self._twins: list[str] = []  # the sessions of its twins (builds beside this one)
        self._kind: EngineKind | None = None
        self._unapplied: dict[str, tuple[str, ...]] = {}  # "limits": as measured, once
        self._locks = EngineLocks(client, self.kind, self._labels)

    def twin(self) -> Engine:
        """The same Engine under a session of its own, for one of several builds running
        on it at once: volumes, staging folders and crate downloads are named by session."""
        twin = Engine(self._client, name=self.name)
        twin._kind = self._kind
        twin._unapplied = self._unapplied  # measured once for the engine, by either
        self._twins.append(twin.session)
        return twin

    @classmethod
    def connect(
        cls, endpoint: EngineEndpoint | None = None, *, timeout_s: int = CONNECT_TIMEOUT_S
    ) -> Engine:
        """The Engine `endpoint` (a Docker context) names, else the one DOCKER_HOST names
        (else the default socket), or DockerUnavailableError naming it, within `timeout_s`."""
        client = open_client(endpoint, timeout_s=timeout_s)
        client.api.timeout = API_TIMEOUT_S  # it answers: long calls may now take their time
        return cls(client, name=endpoint.label if endpoint else "current")

    def alive(self) -> bool:
        """Whether the Engine still answers (a failed target: its build, or its engine?)."""
        api = self._client.api
        try:  # a timeout for this call only: other threads' long calls keep theirs
            response = api.get(f"{api.base_url}/_ping", timeout=CONNECT_TIMEOUT_S)
        except (docker.errors.DockerException, requests.RequestException):
            return False
        return bool(response.status_code == requests.codes.ok)

    def facts(self) -> EngineFacts:
        """What scheduling needs: architecture, labels and the images it holds."""
        return engine_facts(self)

    def remove_session_containers(self) -> int:
        """Stop and remove this run's own containers and its twins' (an interrupted
        parallel release)."""
        removed = 0
        sessions = {self.session, *self._twins}
        for sdk in self.managed_containers():
            if sdk.labels.get(LABEL_SESSION) in sessions:
                self._force_remove(sdk)
                removed += 1
        return removed

    # -- facts ------------------------------------------------------------------
    def version(self) -> dict[str, Any]:
        return dict(self._client.version())

    def info(self) -> dict[str, Any]:
        return dict(self._client.info())

    def kind(self) -> EngineKind:
        """Docker or Podman, which version, cgroup version, SELinux, rootless: asked once."""
        if self._kind is None:
            version, info = self.version(), self.info()
            libpod = self._libpod_info() if PODMAN_COMPONENT in str(version) else None
            self._kind = detect(version, info, libpod)
        return self._kind

    def _libpod_info(self) -> dict[str, Any] | None:
        """Podman's own /info (SELinux, rootless), beside its Docker-compatible one."""
        api = self._client.api
        try:
            answer = api.get(f"{api.base_url}/v4.0.0/libpod/info", timeout=CONNECT_TIMEOUT_S)
            found = answer.json() if answer.status_code == requests.codes.ok else None
        except (requests.RequestException, ValueError):
            return None
        return found if isinstance(found, dict) else None

    def _labels(self, kind: str) -> dict[str, str]:
        return {
            LABEL_MANAGED: "1",
            LABEL_KIND: kind,
            LABEL_SESSION: self.session,
            LABEL_PID: str(os.getpid()),
            LABEL_HOST: socket.gethostname(),
        }

    # -- images -----------------------------------------------------------------
    def image(self, reference: str) -> ImageInfo | None:
        try:
            image = self._client.images.get(reference)
        except docker.errors.ImageNotFound:
            return None
        return image_info(image, self.kind())

    def managed_images(self) -> list[ImageInfo]:
        images = self._client.images.list(filters={"label": f"{LABEL_MANAGED}=1"})
        return [image_info(image, self.kind()) for image in images]

    def import_rootfs(self, tarball: Path, reference: str, labels: Mapping[str, str]) -> str:
        changes = [f'LABEL {k}="{v}"' for k, v in {**self._labels("image"), **labels}.items()]
        import_tar(self._client, self.kind(), str(tarball), reference, changes)
        info = self.image(reference)
        if info is None:
            raise ImageBuildError(f"docker import reported success but {reference} is missing")
        return info.id

    def build_image(
        self,
        context: Path,
        reference: str,
        *,
        buildargs: Mapping[str, str],
        labels: Mapping[str, str],
        on_output: OutputSink,
    ) -> str:
        """Classic-builder build over the Engine API, with no network for RUN steps."""
        image_id: str | None = None
        build_id = f"{os.getpid()}-{self.session}"
        try:
            stream = self._client.api.build(
                path=str(context),
                tag=reference,
                buildargs={**buildargs, BUILD_ID_ARG: build_id},
                labels={**self._labels("image"), **labels},
                network_mode="none",
                rm=True,
                forcerm=True,
                pull=False,
                decode=True,
            )
            for event in stream:
                if "stream" in event:
                    for line in str(event["stream"]).splitlines():
                        on_output(line)
                if "error" in event:
                    raise ImageBuildError(
                        f"building {reference} failed: {str(event['error']).strip()}",
                        hint="The full build output is in the step log.",
                    )
                aux = event.get("aux")
                if isinstance(aux, dict) and "ID" in aux:
                    image_id = str(aux["ID"])
        except docker.errors.APIError as exc:
            raise ImageBuildError(f"building {reference} failed: {exc}") from exc
        finally:
            remove_intermediate_stages(self._client, self.kind(), build_id)
        info = self.image(reference)
        if info is None or (image_id is not None and info.id != image_id):
            raise ImageBuildError(f"build of {reference} finished without the tagged image")
        return info.id

    def save_image(self, reference: str, into: Path) -> None:
        """`docker save` of `reference` into the file `into`."""
        save_image(self._client, reference, into)

    def load_image(self, archive: Path) -> None:
        """`docker load` of a `docker save` archive (what it names is checked beforehand)."""
        load_image(self._client, archive)

    def remove_image(self, reference: str, *, unused_only: bool = False) -> bool:
        """Remove an image (its tags, and its layers where nothing else needs them);
        whether it went. `unused_only`: keep it while any container, a concurrent run's
        included, was made from it."""
        return remove_image(self._client, self.kind(), reference, unused_only=unused_only)

    # -- image locks (runtime/imagelock.py) -----------------------------------------
    @contextmanager
    def image_lock(self, reference: str, *, on_wait: OutputSink) -> Iterator[bool]:
        """Hold this engine's lock for building `reference`; yields whether it waited."""
        labels = self._labels(LOCK_KIND)
        with image_lock(self._locks, reference, labels, on_wait=on_wait) as waited:
            yield waited

    # -- containers -------------------------------------------------------------
    @contextmanager
    def container(self, spec: ContainerSpec, *, keep: bool = False) -> Iterator[Container]:
        """A container that idles until removed; always removed unless `keep`."""
        kind = self.kind()
        # Named, so that one the engine made but could not start (a device it lacks, a
        # refused profile) is removed here rather than left behind until the next run.
        name = f"orchestrator-{self.session}-{uuid.uuid4().hex[:12]}"
        try:
            with profile_file(spec.privileges.seccomp, inline=kind.seccomp_inline) as profile:
                options = dict(
                    command=["sleep", "infinity"],
                    name=name,
                    detach=True,
                    init=True,
                    network_mode="bridge" if spec.network else "none",
                    environment=dict(spec.environment),
                    labels={**self._labels("container"), "org.orchestrator.purpose": spec.purpose},
                    # cap-drop ALL, no-new-privileges, and only the rights asked for by name
                    **spec.privileges.engine_options(seccomp_file=profile),
                    **spec.limits.engine_options(),  # pids and memory: a fork bomb stays inside
                    user=spec.user,
                    volumes=binds(kind, spec.volumes, spec.read_only_volumes),
                    cpuset_cpus=spec.cpuset,
                    # devices and groups only: a GPU adds no capability
                    **(spec.gpu.engine_options(kind) if spec.gpu else {}),
                )
                if kind.podman and spec.gpu is not None and spec.gpu.kind == CDI:
                    sdk = run_with_cdi(self._client, spec.image, options)  # its own API
                else:
                    sdk = self._client.containers.run(spec.image, **options)
        except docker.errors.APIError as exc:
            with suppress(docker.errors.APIError):
                self._client.api.remove_container(name, force=True)
            reason = str(exc.explanation or exc).strip()
            raise ContainerError(
                f"cannot start a {spec.purpose} container from {spec.image} on "
                f"{kind.title}: {reason}",
                hint=kind.start_hint(reason) or ContainerError.default_hint,
            ) from exc
        try:
            box = Container(self._client, sdk, spec.limits, cgroup_version=kind.cgroup_version)
            if (spec.limits.pids or spec.limits.memory) and "limits" not in self._unapplied:
                measured = box.unapplied_limits()  # build.json's engine record says it
                self._unapplied.update({} if measured is None else {"limits": measured})
            yield box
        finally:
            if not keep:
                self._force_remove(sdk)

    def unapplied_limits(self) -> tuple[str, ...]:
        """The limits ("pids", "memory") not in force in the first container given them."""
        return self._unapplied.get("limits", ())

    def _force_remove(self, sdk: SdkContainer) -> None:
        with suppress(docker.errors.NotFound):
            sdk.remove(force=True)

    @contextmanager
    def volume(self, purpose: str, *, keep: bool = False) -> Iterator[str]:
        """A named volume shared by a build's containers; removed afterwards."""
        name = f"orchestrator-{purpose}-{self.session}"
        self._client.volumes.create(name=name, labels=self._labels("volume"))
        try:
            yield name
        finally:
            if not keep:
                with suppress(docker.errors.NotFound, docker.errors.APIError):
                    self._client.volumes.get(name).remove(force=True)

    def remove_managed_volumes(self) -> int:
        removed = 0
        for volume in self._client.volumes.list(filters={"label": f"{LABEL_MANAGED}=1"}):
            with suppress(docker.errors.APIError):
                volume.remove(force=True)
                removed += 1
        return removed

    def remove_stale_volumes(self) -> int:
        """Remove volumes left by runs on this host whose process is gone."""
        removed = 0
        host = socket.gethostname()
        for volume in self._client.volumes.list(filters={"label": f"{LABEL_MANAGED}=1"}):
            labels = volume.attrs.get("Labels") or {}
            if not is_leftover(labels, session=self.session, host=host):
                continue
            with suppress(docker.errors.APIError):
                volume.remove(force=True)
                removed += 1
        return removed

    def managed_containers(self) -> list[SdkContainer]:
        # By kind, not just "managed": the builder's RUN containers inherit the labels of
        # the image they start from (ours), and belong to whichever build is running them.
        return list(
            self._client.containers.list(
                all=True, filters={"label": [f"{LABEL_MANAGED}=1", f"{LABEL_KIND}=container"]}
            )
        )

    def remove_stale_containers(self) -> int:
        """Remove containers left by runs on this host whose process is gone."""
        removed = 0
        host = socket.gethostname()
        for sdk in self.managed_containers():
            if not is_leftover(sdk.labels or {}, session=self.session, host=host):
                continue
            with suppress(docker.errors.APIError):  # e.g. its removal is already under way
                self._force_remove(sdk)
                removed += 1
        return removed

    @property
    def locks(self) -> EngineLocks:
        """Its image locks, as runtime/imagelock.py takes them (and doctor probes them)."""
        return self._locks

    @contextmanager
    def created(self, image: str) -> Iterator[str]:
        """A container made from `image` and never started (doctor: an image in use)."""
        try:
            sdk = self._client.containers.create(
                image, command=["none"], labels=self._labels("probe"), network_mode="none"
            )
        except docker.errors.APIError as exc:
            raise ContainerError(f"cannot create a container from {image}: {exc}") from exc
        try:
            yield str(sdk.id)
        finally:
            self._force_remove(sdk)

    def remove_stale_locks(self) -> int:
        """Remove image locks whose holder is gone (a later build would take them over
        anyway; `clean` should leave none behind)."""
        return self._locks.remove_stale()

    def remove_leftovers(self) -> tuple[int, int]:
        """(containers, volumes) removed: those of finished runs, never a running build's.

        Exactly `remove_stale_containers()` and `remove_stale_volumes()`: the same rule
        (`is_leftover`) for both, so `clean` can run while another build is under way.
        """
        self.remove_stale_locks()  # not counted: a lock is no container of a build
        return self.remove_stale_containers(), self.remove_stale_volumes()

    def probe(
        self,
        image: str,
        argv: Sequence[str],
        *,
        privileges: Privileges = Privileges(),
        user: str | None = None,
        gpu: GpuPassthrough | None = None,
    ) -> tuple[int, str]:
        """Run one short command in a throwaway container; (exit code, output)."""
        output: list[str] = []
        spec = ContainerSpec(image, privileges=privileges, user=user, purpose="probe", gpu=gpu)
        try:
            with self.container(spec) as box:
                code = box.exec(argv, on_output=output.append)
        except OrchestratorError as exc:
            return -1, str(exc)
        return code, "\n".join(output)


if TYPE_CHECKING:  # mypy checks that the real classes satisfy the Protocols

    def _satisfies_protocols(engine: Engine, box: Container) -> tuple[EngineApi, ContainerApi]:
        return engine, box


# The records and labels live in runtime/api.py; callers may take them from here too.
__all__ = [
    "API_TIMEOUT_S",
    "BUILD_ID_ARG",
    "CONNECT_TIMEOUT_S",
    "LABEL_BUILD_ID",
    "LABEL_HOST",
    "LABEL_INPUT_HASH",
    "LABEL_KIND",
    "LABEL_MANAGED",
    "LABEL_PID",
    "LABEL_SESSION",
    "LABEL_STAGE",
    "Container",
    "ContainerApi",
    "ContainerSpec",
    "Engine",
    "EngineApi",
    "ImageInfo",
    "LabelledContainer",
    "Limits",
    "OutputSink",
    "Privileges",
    "is_leftover",
]

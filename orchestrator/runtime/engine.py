"""The Docker Engine: images, containers, volumes and facts, through the Engine API (the
Python SDK). runtime/ is the only package that talks to Docker; container.py runs steps
in one container.

Every container and image this tool makes carries `org.orchestrator.*` labels, so
leftovers of a crashed or interrupted run can always be found and removed.
"""

from __future__ import annotations

import io
import json
import os
import socket
import tarfile
import time
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
from docker.models.images import Image as SdkImage

from orchestrator.errors import (
    ContainerError,
    ImageBuildError,
    OrchestratorError,
)
from orchestrator.host.system import process_alive
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
from orchestrator.runtime.imagelock import LOCK_KIND, LockHolder, image_lock, stale_reason
from orchestrator.runtime.reach import open_client

# Builds can stay silent for minutes (a fat-LTO link); the SDK's default 60 s read
# timeout would abort them. It bounds every call once the Engine has answered; image
# builds pass no timeout at all (the SDK's build call waits as long as the build runs).
API_TIMEOUT_S = 4 * 3600
# The first calls (version negotiation, ping) must be answered within this: a socket
# that accepts and never answers fails here instead of hanging for API_TIMEOUT_S.
CONNECT_TIMEOUT_S = 15
# Image locks are containers created (never started) from this empty image: the one image
# an engine can always be given, before any base image exists (runtime/imagelock.py).
LOCK_IMAGE = "orchestrator/lock:1"


class Engine:
    def __init__(self, client: docker.DockerClient, *, name: str = "current") -> None:
        self._client = client
        self.name = name  # the Docker context it was reached by ("current": DOCKER_HOST)
        self.session = uuid.uuid4().hex[:12]
        self._twins: list[str] = []  # the sessions of its twins (builds beside this one)

    def twin(self) -> Engine:
        """The same Engine under a session of its own, for one of several builds running
        on it at once: volumes, staging folders and crate downloads are named by session."""
        twin = Engine(self._client, name=self.name)
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
        return _image_info(image)

    def managed_images(self) -> list[ImageInfo]:
        images = self._client.images.list(filters={"label": f"{LABEL_MANAGED}=1"})
        return [_image_info(image) for image in images]

    def import_rootfs(self, tarball: Path, reference: str, labels: Mapping[str, str]) -> str:
        repository, tag = reference.rsplit(":", 1)
        changes = [f'LABEL {k}="{v}"' for k, v in {**self._labels("image"), **labels}.items()]
        try:
            self._client.api.import_image_from_file(
                str(tarball), repository=repository, tag=tag, changes=changes
            )
        except docker.errors.APIError as exc:
            raise ImageBuildError(f"docker import of {tarball} failed: {exc}") from exc
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
            self._remove_intermediate_stages(build_id)
        info = self.image(reference)
        if info is None or (image_id is not None and info.id != image_id):
            raise ImageBuildError(f"build of {reference} finished without the tagged image")
        return info.id

    def _remove_intermediate_stages(self, build_id: str) -> None:
        """Drop the untagged install stage (gigabytes of .debs) of this build, and those of
        builds whose process is gone; never a stage a concurrent build still needs."""
        for image in self._client.images.list(
            filters={"label": f"{LABEL_STAGE}=install", "dangling": True}
        ):
            owner = str((image.labels or {}).get(LABEL_BUILD_ID, ""))
            pid = owner.split("-", 1)[0]
            if owner != build_id and pid.isdigit() and process_alive(int(pid)):
                continue
            with suppress(docker.errors.APIError):
                self._client.images.remove(str(image.id), force=True)

    def remove_image(self, reference: str, *, unused_only: bool = False) -> bool:
        """Remove an image (its tags, and its layers where nothing else needs them);
        whether it went. `unused_only`: keep it while any container, a concurrent run's
        included, was made from it."""
        try:
            if unused_only and self._client.containers.list(
                all=True, filters={"ancestor": reference}
            ):
                return False
            self._client.images.remove(reference, force=True)
        except docker.errors.ImageNotFound:
            return False
        except docker.errors.APIError as exc:
            if unused_only and exc.status_code == requests.codes.conflict:
                return False  # a container started from it in the meantime
            raise
        return True

    # -- image locks (runtime/imagelock.py) -----------------------------------------
    @contextmanager
    def image_lock(self, reference: str, *, on_wait: OutputSink) -> Iterator[bool]:
        """Hold this engine's lock for building `reference`; yields whether it waited."""
        with image_lock(self, reference, self._labels(LOCK_KIND), on_wait=on_wait) as waited:
            yield waited

    def _lock_image(self) -> str:
        info = self.image(LOCK_IMAGE)
        if info is not None:
            return info.id
        # One empty folder: an image made on the spot, nothing pulled. Two runs racing to
        # make it each use their own (a few bytes); the tag goes to either.
        data = io.BytesIO()
        with tarfile.open(fileobj=data, mode="w") as tar:
            entry = tarfile.TarInfo("lock")
            entry.type, entry.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(entry)
        repository, tag = LOCK_IMAGE.rsplit(":", 1)
        labels = {**self._labels("lock-image")}
        changes = [f'LABEL {k}="{v}"' for k, v in labels.items()]
        try:
            answer = self._client.api.import_image_from_data(
                data.getvalue(), repository=repository, tag=tag, changes=changes
            )
        except docker.errors.APIError as exc:
            raise ImageBuildError(f"cannot make the lock image {LOCK_IMAGE}: {exc}") from exc
        return str(json.loads(answer)["status"])

    def create_lock(self, name: str, labels: Mapping[str, str]) -> str | None:
        for attempt in (1, 2):
            image = self._lock_image()
            try:
                sdk = self._client.containers.create(
                    image, command=["locked"], name=name, labels=dict(labels), network_mode="none"
                )
            except docker.errors.ImageNotFound:
                if attempt == 2:
                    raise
                continue  # removed since we looked (`clean --images`): make it again
            except docker.errors.APIError as exc:
                if exc.status_code == requests.codes.conflict:
                    return None  # the name is taken: another run holds the lock
                raise ContainerError(f"cannot create the image lock {name}: {exc}") from exc
            return str(sdk.id)
        return None

    def lock_holder(self, name: str) -> LockHolder | None:
        try:
            sdk = self._client.containers.get(name)
        except docker.errors.NotFound:
            return None
        return LockHolder(str(sdk.id), dict(sdk.labels or {}))

    def remove_lock(self, container_id: str) -> None:
        with suppress(docker.errors.NotFound):
            self._client.api.remove_container(container_id, force=True)

    # -- containers -------------------------------------------------------------
    @contextmanager
    def container(self, spec: ContainerSpec, *, keep: bool = False) -> Iterator[Container]:
        """A container that idles until removed; always removed unless `keep`."""
        privileges = spec.privileges
        try:
            sdk = self._client.containers.run(
                spec.image,
                command=["sleep", "infinity"],
                detach=True,
                init=True,
                network_mode="bridge" if spec.network else "none",
                environment=dict(spec.environment),
                labels={**self._labels("container"), "org.orchestrator.purpose": spec.purpose},
                # cap-drop ALL, no-new-privileges, and only the rights asked for by name
                **privileges.engine_options(),
                **spec.limits.engine_options(),  # pids and memory: a fork bomb stays inside
                user=spec.user,
                volumes={
                    **{name: {"bind": path, "mode": "rw"} for name, path in spec.volumes.items()},
                    **{
                        name: {"bind": path, "mode": "ro"}
                        for name, path in spec.read_only_volumes.items()
                    },
                },
                cpuset_cpus=spec.cpuset,
            )
        except docker.errors.APIError as exc:
            reason = str(exc.explanation or exc).strip()
            raise ContainerError(
                f"cannot start a {spec.purpose} container from {spec.image}: {reason}"
            ) from exc
        try:
            yield Container(self._client, sdk, spec.limits)
        finally:
            if not keep:
                self._force_remove(sdk)

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

    def remove_stale_locks(self) -> int:
        """Remove image locks whose holder is gone (a later build would take them over
        anyway; `clean` should leave none behind)."""
        removed = 0
        host = socket.gethostname()
        locks = self._client.containers.list(
            all=True, filters={"label": [f"{LABEL_MANAGED}=1", f"{LABEL_KIND}={LOCK_KIND}"]}
        )
        for sdk in locks:
            labels = dict(sdk.labels or {})
            if labels.get(LABEL_KIND) != LOCK_KIND:
                continue
            holder = LockHolder(str(sdk.id), labels)
            if stale_reason(holder, host=host, now=time.time()):
                self.remove_lock(holder.id)
                removed += 1
        return removed

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
    ) -> tuple[int, str]:
        """Run one short command in a throwaway container; (exit code, output)."""
        output: list[str] = []
        try:
            with self.container(
                ContainerSpec(image=image, privileges=privileges, user=user, purpose="probe")
            ) as box:
                code = box.exec(argv, on_output=output.append)
        except OrchestratorError as exc:
            return -1, str(exc)
        return code, "\n".join(output)


def _image_info(image: SdkImage) -> ImageInfo:
    return ImageInfo(
        id=str(image.id),
        tags=tuple(image.tags),
        labels=dict(image.labels or {}),
        size=int(image.attrs.get("Size", 0)),
    )


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

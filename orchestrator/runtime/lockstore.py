"""The Engine side of image locks (runtime/imagelock.py has the protocol): lock
containers created from an empty image, found by name, removed by id.

A lock is taken by creating a container under a name only one container may have. Docker
answers a taken name with 409 Conflict; Podman with 500 (and a message). So a failed
create counts as "taken" when a container of that name exists once it failed: the name's
owner decides, not the status code or the wording.
"""

from __future__ import annotations

import io
import socket
import tarfile
import time
from collections.abc import Callable, Mapping
from contextlib import suppress

import docker
import docker.errors
import requests

from orchestrator.errors import ContainerError, ImageBuildError
from orchestrator.runtime.api import LABEL_KIND, LABEL_MANAGED
from orchestrator.runtime.imagelock import LOCK_KIND, LockHolder, stale_reason
from orchestrator.runtime.imageops import image_info, import_tar, imported_id
from orchestrator.runtime.quirks import EngineKind

# Image locks are containers created (never started) from this empty image: the one image
# an engine can always be given, before any base image exists.
LOCK_IMAGE = "orchestrator/lock:1"
CREATE_ATTEMPTS = 3


class EngineLocks:
    """`imagelock.LockStore` on a real Engine."""

    def __init__(
        self,
        client: docker.DockerClient,
        kind: Callable[[], EngineKind],
        labels: Callable[[str], dict[str, str]],
    ) -> None:
        self._client = client
        self._kind = kind
        self._labels = labels  # the Engine's labels for what it makes, by kind

    def _lock_image(self) -> str:
        with suppress(docker.errors.ImageNotFound):
            return image_info(self._client.images.get(LOCK_IMAGE), self._kind()).id
        # One empty folder: an image made on the spot, nothing pulled. Two runs racing to
        # make it each use their own (a few bytes); the tag goes to either.
        data = io.BytesIO()
        with tarfile.open(fileobj=data, mode="w") as tar:
            entry = tarfile.TarInfo("lock")
            entry.type, entry.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(entry)
        changes = [f'LABEL {k}="{v}"' for k, v in self._labels("lock-image").items()]
        try:
            answer = import_tar(self._client, self._kind(), data.getvalue(), LOCK_IMAGE, changes)
        except ImageBuildError as exc:
            raise ImageBuildError(f"cannot make the lock image {LOCK_IMAGE}: {exc}") from exc
        return imported_id(answer) or LOCK_IMAGE

    def create_lock(self, name: str, labels: Mapping[str, str]) -> str | None:
        for attempt in range(1, CREATE_ATTEMPTS + 1):
            image = self._lock_image()
            try:
                sdk = self._client.containers.create(
                    image, command=["locked"], name=name, labels=dict(labels), network_mode="none"
                )
            except docker.errors.ImageNotFound:
                if attempt == CREATE_ATTEMPTS:
                    raise
                continue  # removed since we looked (`clean --images`): make it again
            except docker.errors.APIError as exc:
                if exc.status_code == requests.codes.conflict or self.lock_holder(name):
                    return None  # the name is taken: another run holds the lock
                if attempt == CREATE_ATTEMPTS or not self._kind().podman:
                    raise ContainerError(f"cannot create the image lock {name}: {exc}") from exc
                continue  # a holder that went between the create and the look: again
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

    def remove_stale(self) -> int:
        """Remove image locks whose holder is gone; how many."""
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

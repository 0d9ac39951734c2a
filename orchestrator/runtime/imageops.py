"""Images on the Engine, the same on Docker and Podman: import under a name, describe,
remove without taking anything a container still uses. What differs between the two
(runtime/quirks.py) is decided here, once; engine.py calls these."""

from __future__ import annotations

import json
from contextlib import suppress
from pathlib import Path

import docker
import docker.errors
import requests
from docker.models.images import Image as SdkImage

from orchestrator.errors import ImageBuildError
from orchestrator.host.system import process_alive
from orchestrator.runtime.api import LABEL_BUILD_ID, LABEL_STAGE, ImageInfo
from orchestrator.runtime.quirks import EngineKind


def image_info(image: SdkImage, kind: EngineKind) -> ImageInfo:
    return ImageInfo(
        id=str(image.id),
        tags=tuple(kind.plain_tag(str(tag)) for tag in image.tags),
        labels=dict(image.labels or {}),
        size=int(image.attrs.get("Size", 0)),
    )


def imported_id(answer: object) -> str:
    """The new image's id from an import's answer: JSON lines whose last "status" is it."""
    found = ""
    for line in str(answer).splitlines():
        with suppress(ValueError, TypeError, AttributeError):
            status = str(json.loads(line).get("status", ""))
            if status.startswith("sha256:"):
                found = status
    return found


def import_tar(
    client: docker.DockerClient,
    kind: EngineKind,
    source: str | bytes,
    reference: str,
    changes: list[str],
) -> str:
    """Import a root filesystem tar (a file path, or its bytes) as image `reference`;
    the import's answer (whose "status" is the new id where the engine gives one).

    Docker takes the name with the import. Podman's compat import drops the tag and
    would name it `<repository>:latest`: there it is imported without a name and then
    tagged by id, so no stray `:latest` moves from image to image."""
    repository, tag = reference.rsplit(":", 1)
    name = {"repository": repository, "tag": tag} if kind.tags_on_import else {}
    try:
        if isinstance(source, bytes):
            answer = client.api.import_image_from_data(source, changes=changes, **name)
        else:
            answer = client.api.import_image_from_file(source, changes=changes, **name)
        if not kind.tags_on_import:
            image_id = imported_id(answer)
            if not image_id:
                raise ImageBuildError(f"importing {reference}: the engine named no image")
            client.api.tag(image_id, repository, tag)
    except docker.errors.APIError as exc:
        raise ImageBuildError(f"docker import of {reference} failed: {exc}") from exc
    return str(answer)


def _in_use(client: docker.DockerClient, kind: EngineKind, reference: str) -> bool:
    """Whether any container, a concurrent run's included, was made from the image."""
    if not kind.force_removes_containers:  # Docker: its ancestor filter (as ever)
        return bool(client.containers.list(all=True, filters={"ancestor": reference}))
    # Podman's ancestor filter matches only a fully qualified name, never an id: compare
    # every container's image id instead.
    image_id = str(client.images.get(reference).id)
    return any(entry.get("ImageID") == image_id for entry in client.api.containers(all=True))


def remove_image(
    client: docker.DockerClient, kind: EngineKind, reference: str, *, unused_only: bool
) -> bool:
    """Remove an image (its tags, and its layers where nothing else needs them); whether
    it went. `unused_only`: keep it while any container was made from it.

    Docker: one forced removal (it never takes a container with it). Podman's force also
    removes the containers made from the image, so there each tag goes unforced and then
    the image by id: an image a container still uses is refused (409) and stays."""
    try:
        if unused_only and _in_use(client, kind, reference):
            return False
        if not kind.force_removes_containers:
            client.images.remove(reference, force=True)
            return True
        image = client.images.get(reference)
        for tag in image.tags[1:]:  # by id, an image with several tags is refused
            client.images.remove(str(tag))
        client.images.remove(str(image.id))
    except docker.errors.ImageNotFound:
        return False
    except docker.errors.APIError as exc:
        if exc.status_code == requests.codes.conflict and (
            unused_only or kind.force_removes_containers
        ):
            return False  # a container started from it in the meantime
        raise
    return True


def remove_intermediate_stages(
    client: docker.DockerClient, kind: EngineKind, build_id: str
) -> None:
    """Drop the untagged install stage (gigabytes of .debs) of the build `build_id`, and
    those of builds whose process is gone; never a stage a concurrent build still needs."""
    for image in client.images.list(filters={"label": f"{LABEL_STAGE}=install", "dangling": True}):
        owner = str((image.labels or {}).get(LABEL_BUILD_ID, ""))
        pid = owner.split("-", 1)[0]
        if owner != build_id and pid.isdigit() and process_alive(int(pid)):
            continue
        with suppress(docker.errors.APIError):  # Podman: never forced (see remove_image)
            remove_image(client, kind, str(image.id), unused_only=False)


def save_image(client: docker.DockerClient, reference: str, into: Path) -> None:
    """`docker save` of `reference` into the file `into`, streamed (gigabytes)."""
    try:
        with into.open("wb") as handle:
            for chunk in client.api.get_image(reference):
                handle.write(chunk)
    except docker.errors.APIError as exc:
        raise ImageBuildError(f"docker save of {reference} failed: {exc}") from exc


def load_image(client: docker.DockerClient, archive: Path) -> None:
    """`docker load` of `archive`; the engine checks every layer against the image's
    config (whose sha256 is the image id) as it loads."""
    try:
        with archive.open("rb") as handle:
            for event in client.api.load_image(handle, quiet=True) or ():  # type: ignore[no-untyped-call]
                if isinstance(event, dict) and event.get("error"):
                    raise ImageBuildError(f"docker load of {archive}: {event['error']}")
    except docker.errors.APIError as exc:
        raise ImageBuildError(f"docker load of {archive} failed: {exc}") from exc

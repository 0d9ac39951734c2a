"""The image archive of a CI cache on the real Engine (runtime/image_archive.py): a tiny
image saved, removed, and loaded back with the same id; an archive that also tags another
image, sealed with the right key, is not loaded at all. Seconds: the image is one file."""

from __future__ import annotations

import io
import json
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from orchestrator.host.cache_seal import seal
from orchestrator.model.documents.cache_records import ImageArchiveRecord
from orchestrator.model.documents.record_io import read_record, write_record
from orchestrator.model.hashing import content_hash
from orchestrator.plan.images import ImagePlan
from orchestrator.runtime.engine import LABEL_INPUT_HASH, Engine
from orchestrator.runtime.image_archive import (
    SLOT,
    archive_paths,
    load_image_archive,
    save_image_archive,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def plan(docker_client: docker.DockerClient, tmp_path: Path) -> Iterator[tuple[Engine, ImagePlan]]:
    """A one-file image under a reference of this test's own, removed at the end (with
    the tag a crafted archive would have added, had it been loaded)."""
    engine = Engine(docker_client)
    digest = content_hash({"test": "image archive", "run": uuid.uuid4().hex})
    image = ImagePlan(f"orchestrator/archive-test:{digest[:16]}", digest)
    rootfs = tmp_path / "rootfs.tar"
    with tarfile.open(rootfs, "w") as tar:
        data = b"the compiler\n"
        member = tarfile.TarInfo("usr/bin/cc")
        member.size, member.mode = len(data), 0o755
        tar.addfile(member, io.BytesIO(data))
    engine.import_rootfs(rootfs, image.reference, {LABEL_INPUT_HASH: digest})
    try:
        yield engine, image
    finally:
        for reference in (image.reference, f"{image.reference}-moved"):
            engine.remove_image(reference)


def test_saved_removed_and_loaded_back_with_the_same_id(
    plan: tuple[Engine, ImagePlan], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, image = plan
    monkeypatch.setenv("ORCHESTRATOR_CACHE_KEY", "a CI secret")
    said: list[str] = []
    warned: list[str] = []
    made = engine.image(image.reference)
    assert made is not None
    assert save_image_archive(engine, image, tmp_path / "cache", said.append, warned.append)
    assert engine.remove_image(image.reference)
    assert load_image_archive(engine, image, tmp_path / "cache", said.append, warned.append)
    loaded = engine.image(image.reference)
    assert loaded is not None and loaded.id == made.id
    assert loaded.labels[LABEL_INPUT_HASH] == image.input_hash
    assert warned == [], warned


def test_an_archive_that_would_move_another_tag_is_not_loaded(
    plan: tuple[Engine, ImagePlan], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sealed with the right key (a runner holding it), the archive also tags another
    reference: loading it would move that tag to this image. Refused before `docker load`."""
    engine, image = plan
    monkeypatch.setenv("ORCHESTRATOR_CACHE_KEY", "a CI secret")
    folder = tmp_path / "cache"
    assert save_image_archive(engine, image, folder, print, print)
    record_path, archive = archive_paths(folder, image)
    with tarfile.open(archive) as tar:
        members = [(m, tar.extractfile(m).read() if m.isfile() else None) for m in tar]  # type: ignore[union-attr]
    with tarfile.open(archive, "w") as tar:
        for member, data in members:
            written = data
            if member.name == "manifest.json" and data is not None:
                manifest = json.loads(data)
                manifest[0]["RepoTags"].append(f"{image.reference}-moved")
                written = json.dumps(manifest).encode()
                member.size = len(written)
            tar.addfile(member, io.BytesIO(written) if written is not None else None)
    record = read_record(record_path, ImageArchiveRecord)
    record = record.model_copy(update={"size": archive.stat().st_size})
    slot = f"{SLOT}/{image.input_hash}"
    write_record(
        record_path, record.model_copy(update={"seal": seal(slot, record.sealed_fields())})
    )
    assert engine.remove_image(image.reference)
    warned: list[str] = []
    assert not load_image_archive(engine, image, folder, print, warned.append)
    assert "it tags" in warned[0]
    assert engine.image(image.reference) is None
    assert engine.image(f"{image.reference}-moved") is None

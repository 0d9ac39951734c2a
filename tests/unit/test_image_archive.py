"""The toolchain image kept in a CI cache (runtime/image_archive.py): loaded only when its
sealed record, the archive's own index and the loaded image all say it is the planned
image; anything else is one warning and a build."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from orchestrator.host.cache_seal import seal
from orchestrator.model.documents.cache_records import ImageArchiveRecord
from orchestrator.model.documents.record_io import read_record, write_record
from orchestrator.plan.images import ImagePlan
from orchestrator.runtime.api import LABEL_INPUT_HASH, OutputSink
from orchestrator.runtime.image_archive import (
    SLOT,
    archive_paths,
    load_image_archive,
    save_image_archive,
)
from tests.unit.fakes import FakeEngine

HASH = "ab" * 32
PLAN = ImagePlan(f"orchestrator/cpu:rustc-web-1.96-{HASH[:16]}", HASH)


@pytest.fixture(autouse=True)
def _cache_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCHESTRATOR_CACHE_KEY", "the CI secret")


class Said:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.warnings: list[str] = []

    def say(self, line: str) -> None:
        self.lines.append(line)

    def warn(self, line: str) -> None:
        self.warnings.append(line)


def _saved(tmp_path: Path) -> tuple[Path, str]:
    """An archive of PLAN's image saved by one runner: the folder and the image's id."""
    maker = FakeEngine()
    image = maker.add_image(PLAN.reference, {LABEL_INPUT_HASH: HASH})
    said = Said()
    folder = tmp_path / "images"
    assert save_image_archive(maker, PLAN, folder, said.say, said.warn)
    assert said.warnings == []
    return folder, image.id


def _load(folder: Path, engine: FakeEngine | None = None) -> tuple[bool, FakeEngine, Said]:
    engine = engine or FakeEngine()
    said = Said()
    return load_image_archive(engine, PLAN, folder, said.say, said.warn), engine, said


def test_an_archive_saved_on_one_runner_loads_on_another(tmp_path: Path) -> None:
    folder, image_id = _saved(tmp_path)
    assert sorted(p.name for p in folder.iterdir()) == [f"{HASH}.json", f"{HASH}.tar"]
    loaded, engine, said = _load(folder)
    assert loaded, said.warnings
    info = engine.image(PLAN.reference)
    assert info is not None and info.id == image_id
    assert said.warnings == []
    assert any(line.startswith("image cache: loaded") for line in said.lines)


def test_no_archive_is_a_build_without_a_warning(tmp_path: Path) -> None:
    loaded, engine, said = _load(tmp_path / "empty")
    assert not loaded and engine.loaded_archives == [] and said.warnings == []
    assert said.lines[0].endswith(": the build makes the image")


def test_an_image_on_the_engine_is_not_loaded_again(tmp_path: Path) -> None:
    folder, _ = _saved(tmp_path)
    engine = FakeEngine()
    engine.add_image("orchestrator/other:1")  # so that the next id is not the archive's
    engine.add_image(PLAN.reference, {LABEL_INPUT_HASH: HASH})
    loaded, _, said = _load(folder, engine)
    assert not loaded and engine.loaded_archives == []
    assert "on this engine already (not the archive's)" in said.lines[-1]


def test_a_record_sealed_with_another_key_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, _ = _saved(tmp_path)
    monkeypatch.setenv("ORCHESTRATOR_CACHE_KEY", "another runner's key")
    loaded, engine, said = _load(folder)
    assert not loaded and engine.loaded_archives == []
    assert "not sealed with this machine's cache key" in said.warnings[0]


def test_an_edited_record_is_not_used(tmp_path: Path) -> None:
    """The image id changed in the record (to point at an image of one's own): the seal no
    longer matches."""
    folder, _ = _saved(tmp_path)
    record_path, _ = archive_paths(folder, PLAN)
    record = read_record(record_path, ImageArchiveRecord)
    write_record(record_path, record.model_copy(update={"image_id": "sha256:" + "cd" * 32}))
    loaded, engine, said = _load(folder)
    assert not loaded and engine.loaded_archives == []
    assert "not sealed" in said.warnings[0]


def _rewrite(archive: Path, change: dict[str, object]) -> None:
    """The archive with its manifest's one entry changed (as a crafted one would be)."""
    with tarfile.open(archive) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
    manifest = json.loads(members["manifest.json"])
    manifest[0].update(change)
    members["manifest.json"] = json.dumps(manifest).encode()
    with tarfile.open(archive, "w") as tar:
        for name, data in members.items():
            member = tarfile.TarInfo(name)
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))


@pytest.mark.parametrize(
    ("change", "why"),
    [
        # a correctly sealed archive that also moves another image's tag
        ({"RepoTags": [PLAN.reference, "orchestrator/base:trixie-0000"]}, "it tags"),
        ({"Config": "ef" * 32 + ".json"}, "its image is"),
    ],
)
def test_an_archive_that_names_more_or_another_image_is_not_loaded(
    tmp_path: Path, change: dict[str, object], why: str
) -> None:
    folder, _ = _saved(tmp_path)
    _, archive = archive_paths(folder, PLAN)
    _rewrite(archive, change)
    record_path, _ = archive_paths(folder, PLAN)
    record = read_record(record_path, ImageArchiveRecord)  # the size sealed again
    fields = record.model_copy(update={"size": archive.stat().st_size})
    write_record(
        record_path,
        fields.model_copy(update={"seal": seal(f"{SLOT}/{HASH}", fields.sealed_fields())}),
    )
    loaded, engine, said = _load(folder)
    assert not loaded and engine.loaded_archives == [] and engine.image(PLAN.reference) is None
    assert why in said.warnings[0]


def test_a_load_that_gives_another_image_is_undone(tmp_path: Path) -> None:
    """What the engine made of the archive is not the sealed id: removed, and built."""
    folder, image_id = _saved(tmp_path)
    engine = FakeEngine()
    engine.load_ids[image_id.removeprefix("sha256:")] = "sha256:" + "99" * 32
    loaded, _, said = _load(folder, engine)
    assert not loaded and engine.image(PLAN.reference) is None
    assert PLAN.reference in engine.removed_images
    assert "loaded another image than sealed" in said.warnings[0]


def test_a_link_or_a_fifo_in_place_of_the_archive_is_not_read(tmp_path: Path) -> None:
    folder, _ = _saved(tmp_path)
    _, archive = archive_paths(folder, PLAN)
    archive.unlink()
    archive.symlink_to("/dev/zero")
    loaded, engine, said = _load(folder)
    assert not loaded and engine.loaded_archives == []
    assert "not a regular file" in said.warnings[0]


def test_save_keeps_one_archive_and_writes_it_once(tmp_path: Path) -> None:
    folder, _ = _saved(tmp_path)
    older = folder / f"{'00' * 32}.tar"
    older.write_bytes(b"an archive of older pins")
    (folder / "notes.txt").write_text("not ours")
    engine = FakeEngine()
    engine.add_image("orchestrator/other:1")
    engine.add_image(PLAN.reference, {LABEL_INPUT_HASH: HASH})  # another id than the archive's
    said = Said()
    assert save_image_archive(engine, PLAN, folder, said.say, said.warn)
    assert not older.exists() and (folder / "notes.txt").is_file()
    assert not save_image_archive(engine, PLAN, folder, said.say, said.warn)
    assert engine.saved_images == [PLAN.reference]
    assert "holds" in said.lines[-1]


def test_save_without_the_image_warns_and_writes_nothing(tmp_path: Path) -> None:
    said = Said()
    assert not save_image_archive(FakeEngine(), PLAN, tmp_path / "i", said.say, said.warn)
    assert not (tmp_path / "i").exists()
    assert "not on this engine" in said.warnings[0]


def test_an_archive_of_another_size_than_recorded_is_not_loaded(tmp_path: Path) -> None:
    folder, _ = _saved(tmp_path)
    _, archive = archive_paths(folder, PLAN)
    with archive.open("ab") as handle:
        handle.write(b"\0" * 512)
    loaded, engine, said = _load(folder)
    assert not loaded and engine.loaded_archives == []
    assert "recorded" in said.warnings[0]


def test_an_image_made_meanwhile_is_left_alone(tmp_path: Path) -> None:
    """Another run on the engine made the image while this one waited for the lock: it is
    used as it is, never removed, whatever its id."""

    class Racing(FakeEngine):
        @contextmanager
        def image_lock(self, reference: str, *, on_wait: OutputSink) -> Iterator[bool]:
            self.add_image(reference, {LABEL_INPUT_HASH: HASH})  # the other run finished
            yield True

    folder, _ = _saved(tmp_path)
    engine = Racing()
    engine.add_image("orchestrator/other:1")
    loaded, _, said = _load(folder, engine)
    assert not loaded and engine.loaded_archives == [] and engine.removed_images == []
    assert engine.image(PLAN.reference) is not None
    assert "made meanwhile" in said.lines[-1]

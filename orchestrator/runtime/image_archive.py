"""A toolchain image kept in a CI cache as a `docker save` archive, for runners whose engine
starts empty (`build --target NAME --image-cache DIR`).

Building the cpu toolchain image from its .debs took 178-328 s on a 2-core machine; loading
its archive takes far less (bench/image_cache.py). But the image is the compiler: whoever
can write the cache could hand a build a compiler of their own. So an archive is used only
when all of this holds, and otherwise the image is built as if there were none:

- its record (`<input hash>.json`) carries a seal keyed by ORCHESTRATOR_CACHE_KEY (the
  profiles' seal, host/cache_seal.py) over the reference, the image's key (the hash of its
  pinned inputs, in the file's name and the seal's slot) and the image id;
- the archive's own index names that one image only: its manifest tags nothing but the
  planned reference and points at the config whose sha256 is the sealed image id (a
  crafted archive could otherwise move any other tag on the engine);
- after `docker load`, the engine's image under the reference has that id, and its
  input-hash label is the plan's. The id is the sha256 of the image's config, which lists
  every layer's digest, and the engine checks each layer against it as it loads: the same
  id means the same bytes that the sealing runner saved.

What a seal cannot stop, a runner holding the key writing a compiler of its own, is left to
the workflows (supply/workflows.py): a tag's build restores an image only for builder a of
`[ci] verify = "rebuild"`, whose builder b always builds its images from Debian's archive,
so that a forged compiler gives bytes the two-builder rule refuses (docs/trust.md).
"""

from __future__ import annotations

import json
import re
import tarfile
from collections.abc import Callable
from pathlib import Path

from orchestrator.errors import OrchestratorError
from orchestrator.host.archive import ArchiveLimits, reading_tar
from orchestrator.host.cache_read import UnusableRecord, read_sealed
from orchestrator.host.cache_seal import seal
from orchestrator.model.documents.cache_records import ImageArchiveRecord
from orchestrator.model.documents.record_io import write_record
from orchestrator.model.printable import printable
from orchestrator.plan.images import ImagePlan
from orchestrator.runtime.api import LABEL_INPUT_HASH, EngineApi

Say = Callable[[str], None]
SLOT = "images"  # the seal's slot: images/<input hash>
# A `docker save` of one image: a few dozen entries (its layers, config, index files)
ARCHIVE_LIMITS = ArchiveLimits(max_entries=10_000, max_total_bytes=64 << 30)
MAX_INDEX_BYTES = 1 << 20  # manifest.json, repositories, index.json: a few hundred bytes
_OURS = re.compile(r"[0-9a-f]{64}\.(tar|json)")


class ArchiveRefused(Exception):  # noqa: N818 - a reason not to load, said as a warning
    """Why an image archive is not loaded; the image is built instead."""


def archive_paths(folder: Path, plan: ImagePlan) -> tuple[Path, Path]:
    """The record and the archive of the image `plan` names, in `folder`."""
    return folder / f"{plan.input_hash}.json", folder / f"{plan.input_hash}.tar"


def _sealed_record(folder: Path, plan: ImagePlan) -> ImageArchiveRecord | None:
    record_path, _ = archive_paths(folder, plan)
    try:
        record = read_sealed(record_path, ImageArchiveRecord, f"{SLOT}/{plan.input_hash}")
    except UnusableRecord as why:
        raise ArchiveRefused(f"{record_path.name}: {why}") from None
    if record is not None and (record.reference, record.input_hash) != (
        plan.reference,
        plan.input_hash,
    ):
        raise ArchiveRefused(f"{record_path.name} records {printable(record.reference, 120)}")
    return record


def _index_member(tar: tarfile.TarFile, name: str) -> object:
    """The JSON of the archive's index file `name`, None where there is none."""
    try:
        member = tar.getmember(name)
    except KeyError:
        return None
    if not member.isfile() or member.size > MAX_INDEX_BYTES:
        raise ArchiveRefused(f"its {name} is not a small file")
    handle = tar.extractfile(member)
    if handle is None:
        raise ArchiveRefused(f"its {name} cannot be read")
    try:
        return json.loads(handle.read())
    except ValueError:
        raise ArchiveRefused(f"its {name} is not JSON") from None


def check_archive(archive: Path, plan: ImagePlan, record: ImageArchiveRecord) -> None:
    """ArchiveRefused unless `archive` is a regular file of the recorded size whose index
    files name the recorded image under `plan.reference` and nothing else."""
    if archive.is_symlink() or not archive.is_file():
        raise ArchiveRefused(f"{archive.name} is not a regular file")
    if archive.stat().st_size != record.size:
        raise ArchiveRefused(f"{archive.name} is not the {record.size} bytes recorded")
    image_id = record.image_id
    repository, tag = plan.reference.rsplit(":", 1)
    digest = image_id.removeprefix("sha256:")
    try:
        with reading_tar(archive, label=archive.name, limits=ARCHIVE_LIMITS) as tar:
            manifest = _index_member(tar, "manifest.json")
            repositories = _index_member(tar, "repositories")
            index = _index_member(tar, "index.json")
    except OrchestratorError as error:
        raise ArchiveRefused(error.message) from None
    if not isinstance(manifest, list) or len(manifest) != 1 or not isinstance(manifest[0], dict):
        raise ArchiveRefused("its manifest.json does not name exactly one image")
    entry = manifest[0]
    config = str(entry.get("Config", ""))
    if re.sub(r"\.json$", "", config.rsplit("/", 1)[-1]) != digest:
        raise ArchiveRefused(f"its image is {printable(config, 90)}, not {image_id}")
    if entry.get("RepoTags") != [plan.reference]:
        raise ArchiveRefused(f"it tags {printable(str(entry.get('RepoTags')), 200)}")
    if repositories is not None and (
        not isinstance(repositories, dict)
        or list(repositories) != [repository]
        or not isinstance(repositories[repository], dict)
        or list(repositories[repository]) != [tag]
    ):
        raise ArchiveRefused(f"its repositories file names {printable(str(repositories), 200)}")
    if index is not None:
        names = _index_names(index)
        if not names <= {plan.reference, f"docker.io/{plan.reference}", tag}:
            raise ArchiveRefused(f"its index.json names {printable(str(sorted(names)), 200)}")


def _index_names(index: object) -> set[str]:
    """The names an OCI index.json (newer engines write one beside manifest.json) gives its
    images; one it cannot read names "?", which no check accepts."""
    manifests = index.get("manifests") if isinstance(index, dict) else None
    if not isinstance(manifests, list):
        return {"?"}
    names = set()
    for found in manifests:
        annotations = found.get("annotations", {}) if isinstance(found, dict) else None
        if not isinstance(annotations, dict):
            return {"?"}
        for key in ("io.containerd.image.name", "org.opencontainers.image.ref.name"):
            if key in annotations:
                names.add(str(annotations[key]))
    return names


def load_image_archive(
    engine: EngineApi, plan: ImagePlan, folder: Path, say: Say, warn: Say
) -> bool:
    """Load the image `plan` names from its archive in `folder`, checked as the module says;
    whether the engine now holds it from there. Anything amiss is one warning, and the
    build makes the image itself."""
    present = engine.image(plan.reference)
    try:
        record = _sealed_record(folder, plan)
        if record is None:
            then = "the engine holds the image" if present else "the build makes the image"
            say(f"image cache: no archive of {plan.reference} in {folder}: {then}")
            return False
        _, archive = archive_paths(folder, plan)
        check_archive(archive, plan, record)
    except ArchiveRefused as why:
        warn(f"image cache: not used, the image is built instead: {why}")
        return False
    if present is not None:
        same = "the archive's" if present.id == record.image_id else "not the archive's"
        say(f"image cache: {plan.reference} is on this engine already ({same}): nothing loaded")
        return False
    with engine.image_lock(plan.reference, on_wait=say):
        return _load_checked(engine, plan, archive, record, say=say, warn=warn)


def _load_checked(
    engine: EngineApi,
    plan: ImagePlan,
    archive: Path,
    record: ImageArchiveRecord,
    *,
    say: Say,
    warn: Say,
) -> bool:
    """`docker load` of the checked `archive`, under the engine's lock for the reference;
    the loaded image is kept only if it is the sealed one."""
    if engine.image(plan.reference) is not None:  # another run's, made meanwhile
        say(f"image cache: {plan.reference} was made meanwhile: nothing loaded")
        return False
    try:
        engine.load_image(archive)
    except OrchestratorError as error:
        warn(f"image cache: {archive.name} did not load ({error.message}): it is built")
        return False
    loaded = engine.image(plan.reference)
    if loaded is None or (loaded.id, loaded.labels.get(LABEL_INPUT_HASH)) != (
        record.image_id,
        plan.input_hash,
    ):
        if loaded is not None:
            engine.remove_image(plan.reference, unused_only=True)
        warn(f"image cache: {archive.name} loaded another image than sealed: it is built")
        return False
    say(f"image cache: loaded {plan.reference} ({record.size / 1e9:.2f} GB), id {record.image_id}")
    return True


def save_image_archive(
    engine: EngineApi, plan: ImagePlan, folder: Path, say: Say, warn: Say
) -> bool:
    """Keep the image `plan` names in `folder` (its archive and sealed record), unless an
    archive of this very image is there; whether one was written. Archives of other
    images in `folder` (older pins) go."""
    info = engine.image(plan.reference)
    if info is None or info.labels.get(LABEL_INPUT_HASH) != plan.input_hash:
        warn(f"image cache: {plan.reference} is not on this engine: nothing saved")
        return False
    try:
        record = _sealed_record(folder, plan)
    except ArchiveRefused:
        record = None
    record_path, archive = archive_paths(folder, plan)
    if (
        record is not None
        and record.image_id == info.id
        and archive.is_file()
        and archive.stat().st_size == record.size
    ):
        say(f"image cache: {folder} holds {plan.reference} already")
        return False
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():
        if _OURS.fullmatch(old.name) and old.stem != plan.input_hash:
            old.unlink()
    partial = folder / f".{archive.name}.part"
    try:
        engine.save_image(plan.reference, partial)
        partial.replace(archive)
    finally:
        partial.unlink(missing_ok=True)
    fields = {
        "reference": plan.reference,
        "input_hash": plan.input_hash,
        "image_id": info.id,
        "size": archive.stat().st_size,
    }
    made = ImageArchiveRecord.model_validate(fields | {"seal": ""})
    sealed = made.model_copy(
        update={"seal": seal(f"{SLOT}/{plan.input_hash}", made.sealed_fields())}
    )
    write_record(record_path, sealed)
    say(f"image cache: saved {plan.reference} ({sealed.size / 1e9:.2f} GB) into {folder}")
    return True

"""The step cache: the output files of a step, stored under the content key of what the
step reads (plan/step_keys.py), so a step whose inputs are unchanged runs once, for every
target of a release and across runs.

<cache>/steps/<key>/ holds the files and step.json: their sha256 and size, who made them
and when, and an HMAC over all of it with the key kept outside the cache
(host/cache_seal.py), as the PGO profiles have. An entry is written under a temporary
name and renamed into place whole. Before use every file's sha256 and the seal are
checked; an entry that fails either is ignored with a warning and the step runs again.
"""

from __future__ import annotations

import datetime as dt
import io
import os
import shutil
import tarfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from orchestrator.host.cache_read import UnusableRecord, read_sealed
from orchestrator.host.cache_seal import seal
from orchestrator.model.documents.cache_records import StepEntryRecord
from orchestrator.model.documents.records import FileDigest, ReusedStep, write_record
from orchestrator.model.hashing import sha256_file
from orchestrator.model.layout import BUILDER_UID

ENTRY_FILE = "step.json"


def files_tar(folder: str, files: Mapping[str, Path], *, uid: int = BUILDER_UID) -> bytes:
    """A tar of `folder`/ holding `files` (name -> file) as executables, for
    `put_archive` at the folder's parent: cached binaries put back where a build puts them."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        top = tarfile.TarInfo(folder)
        top.type, top.mode = tarfile.DIRTYPE, 0o755
        top.uid = top.gid = uid
        tar.addfile(top)
        for name, path in files.items():
            info = tarfile.TarInfo(f"{folder}/{name}")
            info.size, info.mode = path.stat().st_size, 0o555
            info.uid = info.gid = uid
            with path.open("rb") as handle:
                tar.addfile(info, handle)
    return buffer.getvalue()


def file_tar(name: str, source: Path, dest: Path, *, uid: int = BUILDER_UID) -> Path:
    """A tar on disk at `dest` holding `source` as `name` (read-only), for `put_archive`
    as a stream: a cached file too large to hold in memory goes back into a container."""
    with tarfile.open(dest, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size, info.mode = source.stat().st_size, 0o444
        info.uid = info.gid = uid
        with source.open("rb") as handle:
            tar.addfile(info, handle)
    return dest


@dataclass(frozen=True)
class StepEntry:
    """A verified entry: its folder and record."""

    folder: Path
    record: StepEntryRecord

    def file(self, name: str) -> Path:
        return self.folder / name

    def reused(self) -> ReusedStep:
        """What build.json says of a step this entry stood in for."""
        record = self.record
        return ReusedStep(
            key=record.key, made_by=record.made_by, built_at=record.built_at, files=record.files
        )

    def describe(self, artifact: str) -> str:
        """The step line's note: which target built it, or when this target did."""
        if self.record.made_by != artifact:
            return f"same inputs as {self.record.made_by}"
        return f"built {self.record.built_at}"


@dataclass(frozen=True)
class StepCache:
    """<cache>/steps. `read` False (orchestrator release --force): every step runs, and
    what it makes still replaces the entry."""

    root: Path
    read: bool = True

    def slot(self, key: str) -> str:
        return f"steps/{key}"

    def contains(self, key: str) -> bool:
        """Cheap: an entry is there (not verified; for --dry-run)."""
        return (self.root / key / ENTRY_FILE).is_file()

    def get(
        self,
        key: str,
        step: str,
        inputs: Mapping[str, str],
        warn: Callable[[str], object],
        note: Callable[[str], object],
    ) -> StepEntry | None:
        """The verified entry for `key`, or None: nothing stored, `read` off, inputs the
        key does not cover differ (`note`), or it fails verification (`warn`)."""
        folder = self.root / key
        entry = folder / ENTRY_FILE
        if not self.read:
            return None
        try:
            record = read_sealed(entry, StepEntryRecord, self.slot(key))
        except UnusableRecord as why:
            warn(
                f"ignoring the cached {step} outputs {key[:12]}: {entry} cannot be used "
                f"({why}); running it"
            )
            return None
        if record is None:
            return None
        problem = self._problem(folder, key, step, record)
        if problem is not None:
            warn(f"ignoring the cached {step} outputs {key[:12]}: {problem}; running it")
            return None
        if dict(record.inputs) != dict(inputs):
            note(f"the cached {step} outputs {key[:12]} were made from other inputs; running it")
            return None
        return StepEntry(folder, record)

    def _problem(self, folder: Path, key: str, step: str, record: StepEntryRecord) -> str | None:
        """Why the entry must not be used, or None."""
        if record.step != step or record.key != key:
            return "recorded for another step"
        for name, digest in record.files.items():
            path = folder / name
            actual = sha256_file(path) if path.is_file() else "missing"
            if actual != digest.sha256:
                return (
                    f"{name} does not match its recorded sha256 ({actual[:12]} != "
                    f"{digest.sha256[:12]}): altered or corrupted"
                )
        return None

    def put(
        self,
        key: str,
        step: str,
        files: Mapping[str, Path],
        *,
        made_by: str,
        inputs: Mapping[str, str],
    ) -> StepEntry:
        """Store `files` (name -> file, moved in) as the entry for `key`, whole or not at
        all: an entry another run wrote meanwhile is replaced."""
        self.root.mkdir(parents=True, exist_ok=True)
        partial = self.root / f".{key}.{os.getpid()}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        try:
            digests: dict[str, FileDigest] = {}
            for name, source in files.items():
                target = partial / name
                shutil.move(source, target)
                digests[name] = FileDigest(sha256=sha256_file(target), size=target.stat().st_size)
            record = StepEntryRecord(
                step=step,
                key=key,
                files=digests,
                made_by=made_by,
                built_at=dt.datetime.now(tz=dt.UTC).isoformat(timespec="seconds"),
                inputs=dict(inputs),
            )
            record = record.model_copy(
                update={"seal": seal(self.slot(key), record.sealed_fields())}
            )
            write_record(partial / ENTRY_FILE, record)
            folder = self.root / key
            # A folder cannot be renamed over a non-empty one: move the old entry aside.
            old = self.root / f".{key}.{os.getpid()}.old"
            if folder.exists():
                folder.replace(old)
            partial.replace(folder)
            shutil.rmtree(old, ignore_errors=True)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
        return StepEntry(folder, record)

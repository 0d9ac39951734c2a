"""Profiles as release inputs: stored in the cache under the hash of what they depend on,
reused when that is unchanged, and refused when their bytes no longer match the record.
The record beside each profile is sealed with a key the cache does not hold
(host/cache_seal.py): a profile and record rewritten together in the cache are not used.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.errors import ProfileError
from orchestrator.host.cache_read import UnusableRecord, read_sealed
from orchestrator.host.cache_seal import seal
from orchestrator.model.documents.cache_records import ProfileSidecar
from orchestrator.model.documents.records import write_record
from orchestrator.model.hashing import sha256_file


@dataclass
class ProfileRecord:
    """A stored profile: content hash, size and what we know about it."""

    path: Path
    sha256: str
    size: int
    cached: bool
    details: dict[str, object] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return {
            "sha256": self.sha256,
            "size": self.size,
            "reused_from_cache": self.cached,
            **self.details,
        }


def store_profile(source: Path, cache: Path, details: dict[str, object]) -> ProfileRecord:
    """Move a fresh profile into the cache atomically, with a sidecar of its hash."""
    cache.parent.mkdir(parents=True, exist_ok=True)
    digest = sha256_file(source)
    partial = cache.with_suffix(".partial")
    shutil.copyfile(source, partial)
    partial.replace(cache)
    size = cache.stat().st_size
    write_sidecar(cache, ProfileSidecar(sha256=digest, size=size, details=details))
    return ProfileRecord(cache, digest, cache.stat().st_size, False, details)


def profile_slot(cache: Path) -> str:
    """What a seal binds a record to: its kind and file name (which holds its input key)."""
    return f"{cache.parent.name}/{cache.name}"


def write_sidecar(cache: Path, sidecar: ProfileSidecar) -> None:
    """The record beside the profile at `cache`, sealed for that slot."""
    sealed = sidecar.model_copy(update={"seal": seal(profile_slot(cache), sidecar.sealed_fields())})
    write_record(cache.with_suffix(".json"), sealed)


def load_profile(cache: Path, what: str, warn: Callable[[str], object]) -> ProfileRecord | None:
    """The stored profile, or None when there is none or its record is unusable: not
    readable, not a sidecar, or carrying no valid seal (not written by orchestrator with
    this machine's key). An unusable record is said in one warning: profile afresh."""
    meta_path = cache.with_suffix(".json")
    if not cache.is_file():
        return None
    try:
        meta = read_sealed(meta_path, ProfileSidecar, profile_slot(cache))
    except UnusableRecord as why:
        warn(
            f"ignoring the stored {what} profile {cache.name}: its record {meta_path} "
            f"cannot be used ({why}); profiling afresh"
        )
        return None
    if meta is None:
        return None
    digest = sha256_file(cache)
    if digest != meta.sha256:
        # A profile is a release input: silently retraining would change the binary.
        raise ProfileError(
            f"the stored {what} profile {cache} does not match its recorded sha256 "
            f"({digest[:12]} != {meta.sha256[:12]}): it was altered or corrupted",
            hint="Run the build with --retrain to profile again (or remove the file).",
        )
    return ProfileRecord(cache, digest, cache.stat().st_size, True, dict(meta.details))

"""Profiles as release inputs: stored in the cache under the hash of what they depend on,
reused when that is unchanged, and refused when their bytes no longer match the record.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.errors import ProfileError
from orchestrator.model.hashing import sha256_file
from orchestrator.model.records import ProfileSidecar, read_record, write_record


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
    write_record(
        cache.with_suffix(".json"), ProfileSidecar(sha256=digest, size=size, details=details)
    )
    return ProfileRecord(cache, digest, cache.stat().st_size, False, details)


def load_profile(cache: Path, what: str) -> ProfileRecord | None:
    meta_path = cache.with_suffix(".json")
    if not cache.is_file() or not meta_path.is_file():
        return None
    meta = read_record(meta_path, ProfileSidecar)
    digest = sha256_file(cache)
    if digest != meta.sha256:
        # A profile is a release input: silently retraining would change the binary.
        raise ProfileError(
            f"the stored {what} profile {cache} does not match its recorded sha256 "
            f"({digest[:12]} != {meta.sha256[:12]}): it was altered or corrupted",
            hint="Run the build with --retrain to profile again (or remove the file).",
        )
    return ProfileRecord(cache, digest, cache.stat().st_size, True, dict(meta.details))

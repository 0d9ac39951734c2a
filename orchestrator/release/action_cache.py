"""The action cache: `release` does not build a target again while its published artifact
was built from exactly the inputs the config gives now.

A hit needs all of: the artifact's build.json reads as a typed record; its `action_key`
equals the key of the plan made now (plan/serialize.py: sources, Cargo.lock, toolchain
image, flags, workloads, profile key, every setting that can change what is built or
checked, orchestrator's version); every binary it lists is there with the sha256 it
records; and, for a real run, each binary's signature verifies under the key this release
signs with. Anything else is a miss, with the reason, and the target is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from orchestrator.model.hashing import sha256_file
from orchestrator.model.records import BuildManifest, RecordError, read_record
from orchestrator.supply.attest import SIGNATURE_SUFFIX
from orchestrator.supply.minisign import PublicKey, VerificationError, verify_file


@dataclass(frozen=True)
class CacheLookup:
    manifest: BuildManifest | None  # the published build that is still current, on a hit
    reason: str  # why the target is built (a miss), or what was found (a hit)

    @property
    def hit(self) -> bool:
        return self.manifest is not None


def look_up(artifact: Path, key: str, public: PublicKey | None) -> CacheLookup:
    """Whether `artifact` (a published artifact folder) is current for the action `key`;
    `public`: the key its signatures must verify under (None: not checked, as in a dry
    run, which has no key)."""
    record = artifact / "build.json"
    if not record.is_file():
        return CacheLookup(None, "not built yet")
    try:
        manifest = read_record(record, BuildManifest)
    except RecordError:
        return CacheLookup(None, "its build.json does not read")
    if manifest.action_key != key:
        return CacheLookup(None, "its inputs changed" if manifest.action_key else "built before")
    for binary in manifest.artifact.binaries:
        path = artifact / binary.file
        if not path.is_file() or sha256_file(path) != binary.sha256:
            return CacheLookup(None, f"{binary.file} is not the binary build.json records")
        if public is None:
            continue
        signature = path.with_name(path.name + SIGNATURE_SUFFIX)
        try:
            verify_file(path, signature.read_text(), public)
        except (OSError, VerificationError):
            return CacheLookup(None, f"{signature.name} does not verify under this key")
    return CacheLookup(manifest, f"inputs unchanged since {manifest.finished_at}")

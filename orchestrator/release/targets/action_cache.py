"""The action cache: `release` does not build a target again while its published artifact
was built from exactly the inputs the config gives now.

A hit needs all of: the whole published folder verifies against the release's signed
chain (supply/chain.py: every file listed by the folder's SHA256SUMS with its hash, that
SHA256SUMS listed in the signed release SHA256SUMS, no file nobody signed), under the key
this release signs with (a dry run, which has no key, checks integrity under the release's
own minisign.pub); the artifact's build.json reads as a typed record; its `action_key`
equals the key of the plan made now (plan/serialize.py: sources, Cargo.lock, toolchain
image, flags, workloads, profile key, every setting that can change what is built or
checked, orchestrator's version); every binary it lists is there with the sha256 it
records and a signature that verifies. Anything else is a miss, with the reason, and the
target is built: a cached target is signed again with the release, so nothing may be
cached that the last signature did not vouch for.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from orchestrator.model.documents.records import BuildManifest, RecordError, read_record
from orchestrator.model.documents.run_logs import BUILD_RUN, BuildRun
from orchestrator.model.hashing import sha256_file
from orchestrator.model.printable import printable
from orchestrator.supply.attest import PUBLIC_KEY, SIGNATURE_SUFFIX
from orchestrator.supply.chain import ReleaseKeyError, SignedChain
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
    `public`: the key the release is signed with (None, in a dry run, which has no key: the
    key the release ships, which proves integrity only)."""
    record = artifact / "build.json"
    if not record.is_file():
        return CacheLookup(None, "not built yet")
    public, problem = _chain_problem(artifact, public)
    if public is None or problem is not None:
        return CacheLookup(None, f"it does not match the signed release: {problem}")
    try:
        manifest = read_record(record, BuildManifest)
    except RecordError:
        return CacheLookup(None, "its build.json does not read")
    if manifest.action_key != key:
        return CacheLookup(None, "its inputs changed" if manifest.action_key else "built before")
    problem = _binaries_problem(artifact, manifest, public)
    if problem is not None:
        return CacheLookup(None, problem)
    return CacheLookup(manifest, f"inputs unchanged{_since(artifact, manifest)}")


def _since(artifact: Path, manifest: BuildManifest) -> str:
    """` since <when it was built>`, from build.json (older releases) or the folder's
    unsigned logs/run.json; "" when neither says."""
    if manifest.finished_at:
        return f" since {printable(manifest.finished_at)}"
    try:
        run = read_record(artifact / BUILD_RUN, BuildRun)
    except RecordError:
        return ""
    return f" since {printable(run.finished_at)}" if run.finished_at else ""


def _binaries_problem(artifact: Path, manifest: BuildManifest, public: PublicKey) -> str | None:
    """Every binary build.json lists is there, with its sha256 and a valid signature."""
    for binary in manifest.artifact.binaries:
        path = artifact / binary.file
        if not path.is_file() or sha256_file(path) != binary.sha256:
            return f"{binary.file} is not the binary build.json records"
        signature = path.with_name(path.name + SIGNATURE_SUFFIX)
        try:
            verify_file(path, signature.read_text(), public)
        except (OSError, VerificationError):
            return f"{signature.name} does not verify under this key"
    return None


def _chain_problem(artifact: Path, public: PublicKey | None) -> tuple[PublicKey | None, str | None]:
    """The key checked under, and what keeps the folder from verifying against the
    release's signed chain (None: every file of it is vouched for). Without `public`, the
    release's own key; a release signed by another key than `public` is refused."""
    dry = public is None
    if public is None:
        try:
            public = PublicKey.load(artifact.parent / PUBLIC_KEY)
        except (OSError, VerificationError):
            return None, f"the release has no readable {PUBLIC_KEY}"
    try:
        return public, SignedChain.read(artifact.parent, public).folder_problem(artifact.name)
    except ReleaseKeyError as exc:
        if not dry:
            raise
        return public, exc.message

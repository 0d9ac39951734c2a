"""Signing on the host: which key, artifact signatures, and the release-level index.

The release folder holds, next to its artifact folders:
  SHA256SUMS (+ .minisig)                  every artifact binary, SBOM and folder SHA256SUMS
                                           (which lists every other file of the folder but its
                                           logs/), and every file outside the folders
                                           (release.json/.lock, bench reports) but
                                           logs/targets.json: one signature covers them all
  provenance.intoto.jsonl (+ .minisig)     a DSSE envelope around the SLSA statement
  minisign.pub                             the public key that signed all of it
  <artifact folder>.tar.xz (+ .minisig)    each target's archive (supply/archives.py),
  install.sh (+ .minisig)                  and the installer (supply/installer.py): listed
                                           in SHA256SUMS like the release files
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from orchestrator.model.documents.checksums import checksums_bytes
from orchestrator.model.documents.compose_record import COMPOSE_JSON
from orchestrator.model.documents.records import BuildManifest, read_record
from orchestrator.model.documents.run_logs import is_release_log
from orchestrator.model.hashing import content_hash, sha256_file
from orchestrator.supply.archives import archive_folder
from orchestrator.supply.chain import SignedChain
from orchestrator.supply.index_files import (
    CHECKSUMS,
    INDEX_FILES,
    PROVENANCE,
    PUBLIC_KEY,
    SIGNATURE_SUFFIX,
)
from orchestrator.supply.minisign import SecretKey, SigningError, dsse_sign, write_key_pair
from orchestrator.supply.provenance import PAYLOAD_TYPE, statement

__all__ = [  # the index's file names live in supply/index_files.py; signers read them here
    "CHECKSUMS",
    "INDEX_FILES",
    "PROVENANCE",
    "PUBLIC_KEY",
    "SIGNATURE_SUFFIX",
    "THROWAWAY_KEY",
    "ReleaseIndex",
    "Signer",
    "artifact_comment",
    "check_key_destination",
    "keygen",
    "refuse_inside_repository",
    "release_artifacts",
    "release_files",
    "repository_holding",
    "resolve_signer",
    "write_release_index",
]

THROWAWAY_KEY = "throwaway-signing.key"


@dataclass(frozen=True)
class Signer:
    key: SecretKey
    throwaway: bool
    source: str  # where the key came from, for the log

    def sign(self, path: Path, *, trusted_comment: str) -> Path:
        signature = path.with_name(path.name + SIGNATURE_SUFFIX)
        text = self.key.sign_file(
            path,
            trusted_comment=trusted_comment,
            untrusted_comment=f"signature from orchestrator key {self.key.public.id_text}",
        )
        _atomic_write(signature, text)
        return signature


def _atomic_write(path: Path, text: str) -> None:
    """Write through a temporary file and a rename; a failure leaves no temporary behind."""
    with tempfile.NamedTemporaryFile(
        "w", dir=path.parent, delete=False, prefix=f".{path.name}."
    ) as handle:
        partial = Path(handle.name)
    try:
        partial.write_text(text)
        partial.chmod(0o644)  # published files are for everyone to read
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _repository_roots(project_dir: Path) -> list[Path]:
    """The project folder and the git work tree holding it (found by its `.git` entry:
    a folder, or a file in worktrees and submodules), without running git."""
    project = project_dir.resolve()
    roots = [project]
    top = next((d for d in (project, *project.parents) if (d / ".git").exists()), None)
    if top is not None and top != project:
        roots.append(top)
    return roots


def refuse_inside_repository(path: Path, project_dir: Path) -> None:
    for root in _repository_roots(project_dir):
        if _inside(path, root):
            raise SigningError(
                f"refusing signing key {path}: it is inside the repository {root}",
                hint="Keep secret keys outside any repository (e.g. ~/.config/orchestrator/)"
                " and point signing.secret_key or ORCHESTRATOR_SIGNING_KEY at it.",
            )


def resolve_signer(
    secret_key: Path | None, *, project_dir: Path, cache_dir: Path, env: Mapping[str, str]
) -> Signer:
    """The configured key, or a throwaway one kept in the cache (and said so loudly)."""
    if secret_key is not None:
        path = secret_key.expanduser().resolve()
        refuse_inside_repository(path, project_dir)
        key = SecretKey.load(path, env.get("ORCHESTRATOR_SIGNING_PASSPHRASE"))
        return Signer(key, throwaway=False, source=str(path))
    throwaway = cache_dir / "keys" / THROWAWAY_KEY
    if not throwaway.is_file():
        write_key_pair(SecretKey.generate(), throwaway, passphrase=None)
    return Signer(SecretKey.load(throwaway, None), throwaway=True, source=str(throwaway))


def artifact_comment(manifest: BuildManifest, folder: str, file: str | None = None) -> str:
    """The trusted comment of a binary's signature (the main binary's unless `file`)."""
    artifact = manifest.artifact
    inputs = content_hash(manifest.inputs.dump())
    return (
        f"orchestrator: {folder}/{file or artifact.file} {artifact.name} "
        f"{artifact.version} inputs:{inputs[:16]}"
    )


def release_artifacts(release_dir: Path) -> list[tuple[str, BuildManifest]]:
    """(folder name, build.json) for every published artifact of a release."""
    found = []
    for folder in sorted(p for p in release_dir.iterdir() if p.is_dir()):
        manifest = folder / "build.json"
        if manifest.is_file():
            found.append((folder.name, read_record(manifest, BuildManifest)))
    return found


def release_files(release_dir: Path, *, artifact_folders: set[str]) -> list[Path]:
    """The release's plain files outside its artifact folders, its signed index and its
    unsigned logs/targets.json (model/documents/run_logs.py): release.json, release.lock, bench
    reports. The release SHA256SUMS lists each."""
    if not release_dir.is_dir():
        return []
    found = []
    for path in sorted(release_dir.rglob("*")):
        relative = path.relative_to(release_dir)
        name = relative.as_posix()
        if relative.parts[0] in artifact_folders or name in INDEX_FILES or is_release_log(name):
            continue
        if path.is_file() and not path.is_symlink():
            found.append(path)
    return found


@dataclass(frozen=True)
class ReleaseIndex:
    """What signing the release index wrote, and what it refused to sign (with why)."""

    written: list[Path]
    left_out: list[str]


def _vouched_by_caller(name: str, vouched: Collection[str]) -> bool:
    """Whether the release-relative `name` is, or lies in, a path the caller wrote itself."""
    parts = name.split("/")
    return any("/".join(parts[:length]) in vouched for length in range(1, len(parts) + 1))


def write_release_index(
    release_dir: Path,
    signer: Signer,
    out_dir: Path,
    *,
    chain: SignedChain,
    incoming: tuple[str, Path] | None = None,
    vouched: Collection[str] = (),
    staged: Collection[str] = (),
) -> ReleaseIndex:
    """Write the release-level checksums, provenance and signatures into `out_dir`, for the
    artifacts of `release_dir` plus `incoming` (folder name, staged folder), which replaces
    one of that name. Nothing in `release_dir` is written: host/staging.py swaps them in.

    Verify first, sign second: an artifact folder or release file is signed again only when
    `chain` (the signature being replaced, checked under this key) vouches for it exactly,
    or when it is in `vouched` (release-relative paths the calling command wrote itself).
    Anything else is left out of the signature, so that `verify` names it, and listed in
    the result's `left_out`.

    `staged` names release-level files (an archive, its signature, install.sh) that the
    caller already wrote into `out_dir`: they replace their namesakes with the index. An
    archive (and its signature) goes with its artifact folder: signed only when the folder
    is."""
    left_out: list[str] = []
    located: dict[str, tuple[Path, BuildManifest]] = {}
    folders = (
        sorted(p.name for p in release_dir.iterdir() if (p / "build.json").is_file())
        if release_dir.is_dir()
        else []
    )
    for folder in folders:
        if incoming is not None and folder == incoming[0]:
            continue
        problem = None if folder in vouched else chain.folder_problem(folder)
        if problem is not None:
            left_out.append(f"{folder}/: {problem}")
            continue
        located[folder] = (
            release_dir / folder,
            read_record(release_dir / folder / "build.json", BuildManifest),
        )
    if incoming is not None:
        folder, staged_folder = incoming
        located[folder] = (staged_folder, read_record(staged_folder / "build.json", BuildManifest))
    artifacts = [(folder, located[folder][1]) for folder in sorted(located)]
    lines: list[tuple[str, str]] = []  # (sha256, name)
    for folder, (where, manifest) in sorted(located.items()):
        # The folder's own SHA256SUMS lists every file in it (build.json, profiles, logs):
        # listing it here puts all of them under this file's signature.
        binaries = [b.file for b in manifest.artifact.binaries]
        for name in (*binaries, "sbom.cdx.json", CHECKSUMS):
            path = where / name
            if path.is_file():
                lines.append((sha256_file(path), f"{folder}/{name}"))
    signed = _signed_release_files(
        release_dir,
        out_dir,
        chain=chain,
        folders={*folders, *located},
        signed_folders=set(located),
        vouched=vouched,
        staged=staged,
        left_out=left_out,
    )
    lines += [(digest, name) for name, digest in signed]
    signed_files = {name for name, _ in signed}
    archives = sorted((name, digest) for name, digest in signed if archive_folder(name))
    checksums = out_dir / CHECKSUMS
    checksums.write_bytes(checksums_bytes(lines))
    release = release_dir.name
    # The lockfile pins every input; without one, the hash of the recorded build inputs.
    lockfile = release_dir / "release.lock"
    inputs = (
        "lock:" + sha256_file(lockfile)[:16]
        if lockfile.name in signed_files
        else content_hash([m.inputs.dump() for _, m in artifacts])[:16]
    )
    payload = json.dumps(
        statement(release=release, artifacts=artifacts, files=sorted(archives)),
        sort_keys=True,
        separators=(",", ":"),
    ).encode()
    envelope = dsse_sign(PAYLOAD_TYPE, payload, signer.key)
    provenance = out_dir / PROVENANCE
    provenance.write_text(json.dumps(envelope, sort_keys=True) + "\n")
    (out_dir / PUBLIC_KEY).write_text(signer.key.public.to_text())
    written = [checksums, provenance, out_dir / PUBLIC_KEY]
    for path in (checksums, provenance):
        written.append(
            signer.sign(
                path, trusted_comment=(f"orchestrator: {release}/{path.name} inputs:{inputs}")
            )
        )
    for path in written:
        path.chmod(0o644)  # published files are for everyone to read
    return ReleaseIndex(written, left_out)


def _signed_release_files(
    release_dir: Path,
    out_dir: Path,
    *,
    chain: SignedChain,
    folders: set[str],
    signed_folders: set[str],
    vouched: Collection[str],
    staged: Collection[str],
    left_out: list[str],
) -> list[tuple[str, str]]:
    """(name, sha256) of the release-level files to sign: those vouched for, then the
    staged ones; what is refused goes to `left_out`."""
    signed = []
    for path in release_files(release_dir, artifact_folders=folders):
        name = path.relative_to(release_dir).as_posix()
        if name in staged:
            continue
        owner = archive_folder(name.removesuffix(SIGNATURE_SUFFIX))
        # A composed -auto folder has no build.json: its archive is signed like its files
        composed = owner is not None and (release_dir / owner / COMPOSE_JSON).is_file()
        if owner is not None and owner not in signed_folders and not composed:
            left_out.append(f"{name}: the artifact folder {owner} is not signed")
        elif not (_vouched_by_caller(name, vouched) or chain.matches(name)):
            left_out.append(f"{name}: {_unvouched_reason(chain, name)}")
        else:
            signed.append((name, sha256_file(path)))
    signed += [(name, sha256_file(out_dir / name)) for name in sorted(staged)]
    return signed


def _unvouched_reason(chain: SignedChain, name: str) -> str:
    if not chain.trusted:
        return f"not signed before and not written by this command ({chain.note})"
    if name in chain.files:
        return "not the file that was signed"
    return "not under any signature (added after publication)"


def repository_holding(path: Path) -> Path | None:
    """The git work tree that holds `path` (a folder or file with a `.git` entry: a folder,
    or a file in worktrees and submodules), found from the path itself, without git."""
    return next((d for d in path.parents if (d / ".git").exists()), None)


def check_key_destination(path: Path) -> Path:
    """Where a new secret key may go, resolved: a new name outside any repository.

    The repository is looked for around the key's own path, never the current folder's:
    ~/.config/orchestrator/ is fine from anywhere, ../clone/signing.key never."""
    given = path.expanduser()
    if os.path.lexists(given):  # before resolving: a dangling link must not be written through
        raise SigningError(f"{given} exists; refusing to overwrite a key")
    resolved = given.resolve()
    repository = repository_holding(resolved)
    if repository is not None:
        raise SigningError(
            f"refusing to write signing key {resolved}: it is inside the repository {repository}",
            hint="Keep secret keys outside any repository, e.g. orchestrator keygen "
            "~/.config/orchestrator/signing.key, and point signing.secret_key or "
            "ORCHESTRATOR_SIGNING_KEY at it.",
        )
    return resolved


def keygen(path: Path, *, passphrase: str | None) -> Path:
    """Write a new key pair outside any repository; returns the public key's path."""
    path = check_key_destination(path)
    if os.path.lexists(path):
        raise SigningError(f"{path} exists; refusing to overwrite a key")
    return write_key_pair(SecretKey.generate(), path, passphrase)

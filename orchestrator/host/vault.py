"""The package vault: every input blob of a release (.debs, the rootfs tarball, the vendored
crates, profiles) in a content-addressed store, so a release rebuilds offline, months later.

A blob lives at <root>/sha256/<first two hex digits>/<sha256>. It enters through a
temporary file and a rename, after its hash was computed, so the store never holds a
partial file. Every read re-hashes: a blob whose bytes no longer match its name is
refused (VaultCorruptError) and never used.

The vault never shares an inode with the cache, in either direction: a hard link would let
a later write to the cache file (or a build rewriting a materialized one) change the
vault's only copy. Files are cloned (a reflink, where the filesystem can) or copied.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import shutil
import tarfile
from collections.abc import Iterable
from pathlib import Path

from orchestrator.errors import OrchestratorError, UnsafeArchiveError
from orchestrator.host.archive import (
    VAULT_ARCHIVE_LIMITS,
    MemberCheck,
    copy_exactly,
    reading_tar,
)
from orchestrator.host.scratch import scratch_dir
from orchestrator.model.hashing import sha256_file

HEX = frozenset("0123456789abcdef")
EXPORT_INDEX = "vault-export.json"
MAX_LOCKFILE_BYTES = 16 << 20
FICLONE = 0x40049409  # ioctl: make dst share src's extents copy-on-write (btrfs, xfs, ...)


class VaultError(OrchestratorError):
    exit_code = 51
    summary = "a vault blob is missing (offline reproduction cannot download it)"
    default_hint = "Import the release's vault (orchestrator vault import <archive>) first."


class VaultCorruptError(VaultError):
    exit_code = 52
    summary = "a vault blob or vault archive does not match its sha256: refused"
    default_hint = (
        "The file was changed after it entered the vault. Remove it and import the "
        "release's vault archive again; a corrupted input is never used."
    )


def clone_file(source: Path, dest: Path) -> None:
    """`dest` becomes an independent copy of `source`: a reflink if possible, else bytes."""
    with source.open("rb") as src, dest.open("wb") as dst:
        try:
            fcntl.ioctl(dst.fileno(), FICLONE, src.fileno())
        except OSError:
            pass
        else:
            return
    shutil.copyfile(source, dest)


def _check_digest(digest: str) -> str:
    if len(digest) != 64 or not set(digest) <= HEX:
        raise VaultError(f"{digest!r} is not a sha256 digest")
    return digest


class Vault:
    """The store at `root` (<cache>/vault); its temporaries go to the cache's scratch folder,
    on the same filesystem, so a blob enters by rename and a killed run leaves nothing here."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.cache_dir = root.parent

    def path(self, digest: str) -> Path:
        digest = _check_digest(digest)
        return self.root / "sha256" / digest[:2] / digest

    def has(self, digest: str) -> bool:
        return self.path(digest).is_file()

    def put(self, source: Path, *, expected: str | None = None) -> str:
        """Store a copy of `source` (a reflink when possible, never a link); its sha256.

        With `expected` already in the vault nothing is read: the blob there is checked
        against its name whenever it is used (`verify`)."""
        if expected is not None and self.has(expected):
            return expected
        digest = sha256_file(source)
        if expected is not None and digest != expected:
            raise VaultCorruptError(
                f"{source} has sha256 {digest}, but {expected} was recorded for it"
            )
        target = self.path(digest)
        if target.is_file():
            return digest
        target.parent.mkdir(parents=True, exist_ok=True)
        with scratch_dir(self.cache_dir, "vault-in") as tmp:
            partial = tmp / digest
            clone_file(source, partial)
            if sha256_file(partial) != digest:  # changed while we copied
                raise VaultCorruptError(f"{source} changed while it was stored")
            partial.chmod(0o444)
            partial.replace(target)
        return digest

    def put_bytes(self, data: bytes, name: str) -> str:
        """Store `data` (an archive made in memory, `name` for messages); its sha256."""
        with scratch_dir(self.cache_dir, "vault-bytes") as tmp:
            staged = tmp / name
            staged.write_bytes(data)
            return self.put(staged)

    def verify(self, digest: str) -> Path:
        """The blob's path, after checking its bytes still hash to `digest`."""
        path = self.path(digest)
        if not path.is_file():
            raise VaultError(
                f"the vault has no blob {digest}",
                hint=f"The vault at {self.root} lacks it: import the release's vault archive.",
            )
        actual = sha256_file(path)
        if actual != digest:
            raise VaultCorruptError(
                f"vault blob {path} hashes to {actual}, not to its name: refusing to use it"
            )
        return path

    def materialize(self, digest: str, dest: Path) -> None:
        """Write a copy of the verified blob to `dest` (via a temporary name)."""
        source = self.verify(digest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        # A copy, never a link: a build may rewrite what it finds in its cache. Its partial
        # lies in the cache's scratch (swept if we are killed), on the same disk as dest.
        with scratch_dir(self.cache_dir, "vault-out") as tmp:
            partial = Path(tmp) / dest.name
            clone_file(source, partial)
            partial.replace(dest)

    # -- moving a release's inputs between machines ---------------------------------
    def export(self, digests: Iterable[str], archive: Path, *, lockfile: Path) -> int:
        """One tar with the lockfile and every blob it names; returns the blob count."""
        wanted = sorted(set(digests))
        for digest in wanted:
            self.verify(digest)
        archive.parent.mkdir(parents=True, exist_ok=True)
        partial = archive.with_name(f".{archive.name}.partial")
        with tarfile.open(partial, "w") as tar:
            index = json.dumps({"lockfile": lockfile.name, "blobs": wanted}, indent=1).encode()
            _add_bytes(tar, EXPORT_INDEX, index)
            _add_bytes(tar, lockfile.name, lockfile.read_bytes())
            for digest in wanted:
                info = tar.gettarinfo(str(self.path(digest)), arcname=f"sha256/{digest}")
                _normalise(info)
                with self.path(digest).open("rb") as handle:
                    tar.addfile(info, handle)
        partial.replace(archive)
        return len(wanted)

    def import_archive(self, archive: Path, lockfile_dest: Path | None = None) -> list[str]:
        """Take every blob of an export in, each checked against its name first.

        All or nothing: every header is checked against the limits before a byte is staged,
        and blobs enter the vault only after every one of them matched its name.
        """
        label = f"vault archive {archive}"
        if not archive.is_file():
            raise VaultError(
                f"{archive} is not a file", hint="Pass an `orchestrator vault export` archive."
            )
        check = MemberCheck(VAULT_ARCHIVE_LIMITS, label=label, stored_bytes=archive.stat().st_size)
        self.root.mkdir(parents=True, exist_ok=True)
        with (
            reading_tar(archive, label=label, limits=VAULT_ARCHIVE_LIMITS) as tar,
            scratch_dir(self.cache_dir, "vault-import") as tmp,
        ):
            admitted = [(member, check.admit(member)) for member in tar]
            staged: list[tuple[str, Path]] = []
            lock_bytes: bytes | None = None
            index: bytes | None = None
            for member, path in admitted:
                handle = tar.extractfile(member) if member.isfile() else None
                if handle is None:
                    continue
                if path.parts == (EXPORT_INDEX,):
                    if member.size > MAX_LOCKFILE_BYTES:
                        raise UnsafeArchiveError(f"{label}: its {EXPORT_INDEX} is too large")
                    index = handle.read()
                    continue
                if path.parts[0] == "sha256" and len(path.parts) == 2:
                    digest = _check_digest(path.parts[1])
                    staged_path = tmp / digest
                    hasher = hashlib.sha256()
                    with staged_path.open("wb") as out:
                        copy_exactly(handle, out, member, on_block=hasher.update)
                    if hasher.hexdigest() != digest:
                        raise VaultCorruptError(
                            f"{archive}: blob sha256/{digest} hashes to {hasher.hexdigest()}; "
                            "the archive was altered and nothing was imported from it"
                        )
                    staged.append((digest, staged_path))
                elif (
                    lockfile_dest is not None
                    and len(path.parts) == 1
                    and path.name.endswith(".lock")
                ):
                    if member.size > MAX_LOCKFILE_BYTES:
                        raise VaultError(f"{archive}: {member.name} is too large for a lockfile")
                    lock_bytes = handle.read()
            _check_index(label, index, {digest for digest, _ in staged})
            for digest, staged_path in staged:  # each matched its name: move it in
                target = self.path(digest)
                target.parent.mkdir(parents=True, exist_ok=True)
                staged_path.chmod(0o444)
                staged_path.replace(target)
            if lockfile_dest is not None and lock_bytes is not None:
                lockfile_dest.parent.mkdir(parents=True, exist_ok=True)
                partial = lockfile_dest.with_name(f".{lockfile_dest.name}.partial")
                partial.write_bytes(lock_bytes)
                partial.replace(lockfile_dest)
        return [digest for digest, _ in staged]


def _check_index(label: str, index: bytes | None, staged: set[str]) -> None:
    """An export names itself (an index of its blobs); a tar without one, or one that lacks
    a blob its index lists (cut short, or edited), is refused whole."""
    if index is None:
        raise UnsafeArchiveError(
            f"{label} is a tar archive but not a vault export: it holds no {EXPORT_INDEX}",
            hint="Pass an archive written by `orchestrator vault export`; nothing was imported.",
        )
    try:
        listed = json.loads(index)["blobs"]
    except (ValueError, KeyError, TypeError):
        listed = None
    if not isinstance(listed, list) or not all(isinstance(d, str) for d in listed):
        raise UnsafeArchiveError(
            f"{label} is not a vault export: its {EXPORT_INDEX} holds no list of blobs",
            hint="Pass an archive written by `orchestrator vault export`; nothing was imported.",
        )
    missing = sorted(set(listed) - staged)
    if missing:
        raise VaultCorruptError(
            f"{label} lacks {len(missing)} blob(s) its {EXPORT_INDEX} lists "
            f"(sha256/{missing[0]} first): it was cut short or altered, and nothing was "
            "imported from it"
        )


def _normalise(info: tarfile.TarInfo) -> None:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = 0
    info.mode = 0o444


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    _normalise(info)
    tar.addfile(info, io.BytesIO(data))

"""Whether `reproduce` may rebuild from a lockfile: checked against the signed SHA256SUMS
published beside it before anything is built (issue 38's rule: a lock that was signed must
match its signature, and one that any checksum beside it contradicts is refused).

A lock without a signature to check is an UnsignedLockError (exit 61) unless the rebuilder
passes --trust-unsigned; an edited one is a VerificationError (exit 48).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import OrchestratorError
from orchestrator.model.documents.checksums import ChecksumsFormatError, parse_checksums
from orchestrator.model.documents.lockfile import LOCK_FILE
from orchestrator.model.hashing import sha256_file
from orchestrator.supply.index_files import CHECKSUMS, PUBLIC_KEY, SIGNATURE_SUFFIX, read_checksums
from orchestrator.supply.minisign import PublicKey, VerificationError, verify_file

__all__ = ["LockTrust", "UnsignedLockError", "authenticate_lock"]


class UnsignedLockError(OrchestratorError):
    exit_code = 61
    summary = (
        "`reproduce`: the lockfile has no signed `SHA256SUMS` beside it, or no public key to "
        "check one with; `--trust-unsigned` rebuilds it anyway"
    )


@dataclass(frozen=True)
class LockTrust:
    """What `reproduce` may say about the lockfile it is about to rebuild from."""

    signed: bool
    origin_checked: bool  # signed by a key the rebuilder named, not one shipped alongside
    note: str  # one line for the rebuilder: which key vouched for it, or that none did


def _check_listed_digests(lock: Path, sums: Path) -> bool:
    """Whether `sums` lists the lock at all; VerificationError when any line it has for the
    lock names another sha256, or it cannot be read as `sha256sum` lines.

    Signed or not: a checksum beside the lock that disagrees is evidence that it was
    edited, and deleting the signature must not make that evidence go away. A lock renamed
    from release.lock is still looked up under that name too.
    """
    names = {lock.name, LOCK_FILE}
    try:
        lines = parse_checksums(sums.read_bytes())
    except OSError as exc:
        raise VerificationError(f"{sums} cannot be read: {exc}") from None
    except ChecksumsFormatError as exc:
        raise VerificationError(f"{sums} {exc}") from None
    actual = sha256_file(lock)
    listed = False
    for number, (name, digest) in enumerate(lines, start=1):
        if name.removeprefix("./") not in names:
            continue
        listed = True
        if digest != actual:
            raise VerificationError(
                f"{lock} is not the lockfile {sums.name} lists (line {number} names another "
                "sha256): it was edited after the release was published",
                hint="Download the release again from its publisher. --trust-unsigned "
                "rebuilds only a lock that no checksum beside it contradicts.",
            )
    return listed


def authenticate_lock(lock: Path, key_path: Path | None, *, trust_unsigned: bool) -> LockTrust:
    """Check a lockfile against the signed SHA256SUMS published beside it, before it is used.

    A lock that was signed must match its signature whatever the flags say, and a lock that
    any SHA256SUMS beside it contradicts is refused, signature or not: only a lock with no
    checksum evidence against it may be trusted on the rebuilder's word.
    """
    sums = lock.parent / CHECKSUMS
    signature = sums.with_name(sums.name + SIGNATURE_SUFFIX)
    key_file = key_path or lock.parent / PUBLIC_KEY
    absent = [p.name for p in (sums, signature) if not p.is_file()]
    if key_path is None and not key_file.is_file():
        absent.append(PUBLIC_KEY)
    if absent:
        # No signature to check, but a checksum that disagrees still refuses it (48).
        listed_beside = sums.is_file() and _check_listed_digests(lock, sums)
        if trust_unsigned:
            agrees = f"; the unsigned {CHECKSUMS} beside it agrees" if listed_beside else ""
            return LockTrust(
                False,
                False,
                f"UNVERIFIED: {lock} is not covered by a signature (no {', '.join(absent)})"
                f"{agrees}; rebuilding it because --trust-unsigned says so",
            )
        raise UnsignedLockError(
            f"{lock} cannot be checked: {', '.join(absent)} missing beside it",
            hint="Reproduce from the release folder as published (it holds SHA256SUMS, its "
            ".minisig and minisign.pub), pass the publisher's key with --key, or, for a lock "
            "that was never signed, --trust-unsigned.",
        )
    public = PublicKey.load(key_file)
    verify_file(sums, signature.read_text(), public)
    listed = read_checksums(sums).get(LOCK_FILE)
    if listed is None:
        raise VerificationError(
            f"{sums} does not list {LOCK_FILE}: the signature does not cover this lockfile"
        )
    if sha256_file(lock) != listed:
        raise VerificationError(
            f"{lock} is not the lockfile that was signed (its sha256 differs from {sums.name})",
            hint="Someone edited it after the release was published. Download the release "
            "again from its publisher.",
        )
    if key_path is not None:
        note = f"{LOCK_FILE} is signed by the key {key_path} ({public.id_text})"
        return LockTrust(True, True, note)
    return LockTrust(
        True,
        False,
        f"{LOCK_FILE} matches the signature made with the release's own {PUBLIC_KEY} "
        f"({public.id_text}): this proves it is intact, NOT who made it. Pass --key with the "
        "publisher's key to check its origin.",
    )

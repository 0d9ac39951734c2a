"""What a published release's signed chain vouches for, read before anything is signed again.

The release's `SHA256SUMS` is signed; it lists each artifact folder's own `SHA256SUMS`,
which lists every file of that folder but its logs (model/documents/run_logs.py: how the build went,
never signed). A file is vouched for when that chain, checked
under the key about to sign, gives its exact sha256. Signing again re-signs only such
files and the ones the running command wrote itself: a file added or edited by hand since
the last signature must never come out of a new signature looking published.

A release signed by another key is refused outright (ReleaseKeyError): re-signing would
put this key's name on files only the other key's holder vouched for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.model.documents.run_logs import is_release_log
from orchestrator.model.hashing import sha256_file
from orchestrator.supply.index_files import CHECKSUMS, SIGNATURE_SUFFIX, read_checksums
from orchestrator.supply.minisign import (
    PublicKey,
    SigningError,
    VerificationError,
    signing_key_id,
    verify_file,
)


class ReleaseKeyError(SigningError):
    exit_code = 66
    summary = (
        "the release folder was signed by another key: signing it again with this key is "
        "refused (it would vouch for files only the other key's holder checked)"
    )
    default_hint = (
        "Sign with the key that published this release (signing.secret_key or "
        "ORCHESTRATOR_SIGNING_KEY), release a new version, or move the release folder away "
        "to publish it afresh."
    )


@dataclass(frozen=True)
class SignedChain:
    """The files of `release_dir` (release-relative names) with the sha256 the signed chain
    gives them; empty, with `note` saying why, when there is no chain to trust."""

    release_dir: Path
    files: Mapping[str, str] = field(default_factory=dict)
    note: str = ""

    @property
    def trusted(self) -> bool:
        return bool(self.files)

    @classmethod
    def read(cls, release_dir: Path, public: PublicKey) -> SignedChain:
        """The chain as signed under `public`; ReleaseKeyError when another key signed it."""
        sums = release_dir / CHECKSUMS
        signature = sums.with_name(CHECKSUMS + SIGNATURE_SUFFIX)
        if not sums.is_file() or sums.is_symlink():
            return cls(release_dir, note=f"the release has no signed {CHECKSUMS} yet")
        if not signature.is_file() or signature.is_symlink():
            return cls(release_dir, note=f"{signature.name} is missing")
        text = signature.read_text(errors="replace")
        signed_by = signing_key_id(text)
        if signed_by is not None and signed_by != public.id_text:
            raise ReleaseKeyError(
                f"{release_dir} is signed by key {signed_by}; this run signs with {public.id_text}"
            )
        try:
            verify_file(sums, text, public)
            listed = dict(read_checksums(sums))
        except (VerificationError, OSError, UnicodeDecodeError) as exc:
            why = exc.message if isinstance(exc, VerificationError) else str(exc)
            return cls(release_dir, note=f"its signed {CHECKSUMS} does not verify: {why}")
        files = dict(listed)
        for name, digest in listed.items():
            folder, _, rest = name.partition("/")
            if rest != CHECKSUMS or "/" in folder:
                continue
            inner = release_dir / name
            # a folder's listing counts only when it is the one the signed listing names
            if inner.is_file() and not inner.is_symlink() and sha256_file(inner) == digest:
                try:
                    files.update({f"{folder}/{n}": d for n, d in read_checksums(inner).items()})
                except (VerificationError, OSError, UnicodeDecodeError):
                    continue
        return cls(release_dir, files)

    def matches(self, name: str) -> bool:
        """Whether the file `name` is there, plain, with the sha256 the chain gives it."""
        digest = self.files.get(name)
        path = self.release_dir / name
        return (
            digest is not None
            and path.is_file()
            and not path.is_symlink()
            and sha256_file(path) == digest
        )

    def folder_problem(self, folder: str) -> str | None:
        """None when every file of the artifact folder is vouched for, nothing is missing and
        nothing was added; otherwise the first thing wrong, in words."""
        problem = self._listing_problem(folder)
        if problem is not None:
            return problem
        root = self.release_dir / folder
        present = set()
        for path in sorted(root.rglob("*")):
            if path.is_dir() and not path.is_symlink():
                continue
            name = path.relative_to(self.release_dir).as_posix()
            present.add(name)
            if is_release_log(name):  # how its build went: needs no signature (one that a
                continue  # release made before logs left the signature lists, too)
            problem = self._file_problem(path, name)
            if problem is not None:
                return problem
        missing = sorted(
            name for name in self.files if name.startswith(f"{folder}/") and name not in present
        )
        if missing:
            return f"{missing[0]} was signed but is gone"
        return None

    def _listing_problem(self, folder: str) -> str | None:
        """What is wrong with the folder itself or its SHA256SUMS, before its files."""
        if not self.trusted:
            return self.note
        root = self.release_dir / folder
        if root.is_symlink() or not root.is_dir():
            return f"{folder} is not a plain folder"
        listing = f"{folder}/{CHECKSUMS}"
        if listing not in self.files:
            return f"{listing} is not listed in the signed {CHECKSUMS}"
        if not self.matches(listing):
            return f"{listing} is not the one that was signed (edited or written again)"
        return None

    def _file_problem(self, path: Path, name: str) -> str | None:
        if path.is_symlink() or not path.is_file():
            return f"{name} is not a plain file"
        digest = self.files.get(name)
        if digest is None:
            return f"{name} is not under any signature (added after publication)"
        if sha256_file(path) != digest:
            return f"{name} is not the file that was signed"
        return None


def check_signing_key(release_dir: Path, public: PublicKey) -> None:
    """Refuse at once (ReleaseKeyError) a release folder that another key signed: before
    hours of building end in a signature that must not be made."""
    SignedChain.read(release_dir, public)

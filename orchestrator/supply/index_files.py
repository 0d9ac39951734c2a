"""The names of a release's signed index, and the reader of its `SHA256SUMS` lists.

Shared by the modules that write the index (supply/attest.py), trust it before signing
again (supply/chain.py) and check it (supply/verify.py), so that none of them imports
another for a file name.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.model.documents.checksums import ChecksumsFormatError, parse_checksums
from orchestrator.supply.minisign import VerificationError

CHECKSUMS = "SHA256SUMS"
PROVENANCE = "provenance.intoto.jsonl"
PUBLIC_KEY = "minisign.pub"
SIGNATURE_SUFFIX = ".minisig"
# The release-level files that sign the rest: no checksum lists them.
INDEX_FILES = frozenset(
    {
        CHECKSUMS,
        CHECKSUMS + SIGNATURE_SUFFIX,
        PROVENANCE,
        PROVENANCE + SIGNATURE_SUFFIX,
        PUBLIC_KEY,
    }
)


def read_checksums(listing: Path) -> dict[str, str]:
    """`sha256sum` lines as name -> digest, escaped names read back as sha256sum -c reads
    them (model/documents/checksums.py); a line that is not one is refused."""
    try:
        return dict(parse_checksums(listing.read_bytes()))
    except ChecksumsFormatError as exc:
        raise VerificationError(f"{listing.name} {exc}") from None

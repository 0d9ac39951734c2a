"""Content hashes: of files, of bytes, and of plain data in a canonical JSON form.

Every cache key, image tag and lock entry is one of these, so two runs that agree on
their inputs agree on the hash.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

CHUNK = 1 << 20


def content_hash(value: object) -> str:
    """sha256 of the canonical JSON form of `value`."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()

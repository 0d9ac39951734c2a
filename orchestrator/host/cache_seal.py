"""Seals on the cache's profile records, with a key the cache does not hold.

A PGO or BOLT profile changes the machine code that ships, so a cache someone else could
write to (a CI cache restored from another branch, a shared folder) must not be able to
hand a build its own profile: rewriting the profile and the sidecar that records its
sha256 together would pass a plain digest check. Each sidecar therefore carries an
HMAC-SHA256 over the cache slot it sits in and what it records, keyed by a secret kept
outside the cache: `ORCHESTRATOR_CACHE_KEY` when set (a CI secret, so runners share
their caches), else `$XDG_CONFIG_HOME/orchestrator/cache-seal.key` (made on first use,
mode 0600). A record whose seal does not match was not written here: it is not used.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Mapping
from pathlib import Path

KEY_ENV = "ORCHESTRATOR_CACHE_KEY"
KEY_FILE = "cache-seal.key"


def seal_key_path(env: Mapping[str, str]) -> Path:
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "orchestrator" / KEY_FILE


def _key(env: Mapping[str, str]) -> bytes:
    given = env.get(KEY_ENV)
    if given:
        return given.encode()
    path = seal_key_path(env)
    try:
        return path.read_bytes().strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    made = secrets.token_hex(32).encode()
    # O_EXCL: two builds starting at once agree on whichever key was written first.
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_bytes().strip()
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(made + b"\n")
    return made


def seal(slot: str, fields: Mapping[str, object], env: Mapping[str, str] | None = None) -> str:
    """The seal of `fields` recorded for the cache entry at `slot` (its path in the cache)."""
    message = json.dumps({"slot": slot, **fields}, sort_keys=True, separators=(",", ":"))
    key = _key(os.environ if env is None else env)
    return hmac.new(key, message.encode(), hashlib.sha256).hexdigest()


def seal_matches(
    slot: str, fields: Mapping[str, object], given: str | None, env: Mapping[str, str] | None = None
) -> bool:
    return given is not None and hmac.compare_digest(seal(slot, fields, env), given)

"""Profile records in the cache are sealed with a key outside the cache: a profile and its
record rewritten together (what a poisoned cache can do) are not used."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from orchestrator.execute.steps.profiles import load_profile, store_profile
from orchestrator.host.cache_seal import KEY_ENV, seal_key_path
from orchestrator.model.hashing import sha256_file


@pytest.fixture
def stored(tmp_path: Path) -> Path:
    fresh = tmp_path / "fresh.profdata"
    fresh.write_bytes(b"genuine profile")
    cache = tmp_path / "cache" / "profiles" / "pgo" / ("k" * 16 + ".profdata")
    store_profile(fresh, cache, {"functions": 10})
    return cache


def _load(cache: Path) -> tuple[object, list[str]]:
    warnings: list[str] = []
    return load_profile(cache, "PGO", warnings.append), warnings


def test_a_profile_stored_here_is_reused(stored: Path) -> None:
    record, warnings = _load(stored)
    assert record is not None and warnings == []
    key = seal_key_path(os.environ)  # made by the store, in the test's config folder
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert not key.is_relative_to(stored.parents[2])  # not inside the cache it guards


def test_a_profile_and_record_forged_together_are_not_used(stored: Path) -> None:
    stored.write_bytes(b"attacker's profile")
    sidecar = stored.with_suffix(".json")
    record = json.loads(sidecar.read_text())
    record["sha256"], record["size"] = sha256_file(stored), stored.stat().st_size
    sidecar.write_text(json.dumps(record))
    loaded, warnings = _load(stored)
    assert loaded is None
    assert "not sealed with this machine's cache key" in warnings[0]


def test_a_record_moved_to_another_slot_is_not_used(stored: Path) -> None:
    other = stored.with_name("o" * 16 + ".profdata")
    other.write_bytes(stored.read_bytes())
    other.with_suffix(".json").write_text(stored.with_suffix(".json").read_text())
    assert _load(other)[0] is None
    assert _load(stored)[0] is not None


def test_a_record_sealed_with_another_key_is_not_used(
    stored: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, "another machine's secret")
    assert _load(stored)[0] is None


def test_a_shared_key_from_the_environment_lets_machines_share_a_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, "the CI secret")
    fresh = tmp_path / "p.fdata"
    fresh.write_bytes(b"bolt")
    cache = tmp_path / "c" / "bolt" / "x.fdata"
    store_profile(fresh, cache, {})
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "another-home"))  # another runner
    assert _load(cache)[0] is not None

"""The crate store: `.crate` archives checked against Cargo.lock, unpacked entry by entry."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from orchestrator.errors import CacheCorruptError, SourceError, UnsafeArchiveError
from orchestrator.host.crates import crate_file, share_checked_crates, vendor_tar
from orchestrator.host.source import LockedCrate

from .execute_rig import crate_archive, untar


def _stored(cache: Path, root: str, files: dict[str, bytes]) -> LockedCrate:
    data = crate_archive(root, files)
    name, version = root.rsplit("-", 1)
    crate = LockedCrate(name, version, hashlib.sha256(data).hexdigest())
    path = crate_file(cache, crate)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return crate


def test_an_entry_outside_the_crates_folder_is_refused(tmp_path: Path) -> None:
    crate = _stored(tmp_path, "demo-1.0.0", {"../../other-2.0.0/src/lib.rs": b"x"})
    with pytest.raises(UnsafeArchiveError, match="climbs out"):
        vendor_tar(tmp_path, [crate], tmp_path / "vendor.tar")
    assert not (tmp_path / "vendor.tar").exists()


def test_an_entry_in_another_crates_folder_is_refused(tmp_path: Path) -> None:
    data = crate_archive("other-2.0.0", {"src/lib.rs": b"x"})
    crate = LockedCrate("demo", "1.0.0", hashlib.sha256(data).hexdigest())
    crate_file(tmp_path, crate).parent.mkdir(parents=True)
    crate_file(tmp_path, crate).write_bytes(data)
    with pytest.raises(SourceError, match=r"lies outside demo-1\.0\.0/"):
        vendor_tar(tmp_path, [crate], tmp_path / "vendor.tar")


def test_a_stored_archive_that_changed_is_removed_and_reported(tmp_path: Path) -> None:
    crate = _stored(tmp_path, "demo-1.0.0", {"src/lib.rs": b"ok"})
    crate_file(tmp_path, crate).write_bytes(b"changed")
    with pytest.raises(CacheCorruptError, match="was altered"):
        vendor_tar(tmp_path, [crate], tmp_path / "vendor.tar")
    assert not crate_file(tmp_path, crate).exists()


def test_executable_bits_survive_and_nothing_else_does(tmp_path: Path) -> None:
    crate = _stored(tmp_path, "demo-1.0.0", {"build.sh": b"#!/bin/sh\n", "src/lib.rs": b""})
    assert vendor_tar(tmp_path, [crate], tmp_path / "vendor.tar") == 1
    files = untar((tmp_path / "vendor.tar").read_bytes())
    assert sorted(files) == [
        "vendor/demo-1.0.0/.cargo-checksum.json",
        "vendor/demo-1.0.0/build.sh",
        "vendor/demo-1.0.0/src/lib.rs",
    ]


def test_a_second_builder_takes_only_crates_that_match_cargo_lock(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    good = _stored(first, "good-1.0.0", {"src/lib.rs": b"pub fn good() {}\n"})
    bad = _stored(first, "bad-1.0.0", {"src/lib.rs": b"pub fn bad() {}\n"})
    crate_file(first, bad).write_bytes(b"not what Cargo.lock pins")
    absent = LockedCrate("absent", "1.0.0", "0" * 64)
    assert share_checked_crates(first, second, [good, bad, absent]) == 1
    assert crate_file(second, good).read_bytes() == crate_file(first, good).read_bytes()
    assert not crate_file(second, bad).exists()
    assert share_checked_crates(first, second, [good]) == 0  # already there

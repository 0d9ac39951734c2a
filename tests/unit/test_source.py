from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from orchestrator.errors import SourceError
from orchestrator.host.source import registry_crates, snapshot, verify_vendor_archive

LOCK = """version = 4

[[package]]
name = "demo"
version = "0.1.0"
dependencies = ["either"]

[[package]]
name = "either"
version = "1.15.0"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "48c757948c5ede0e46177b7add2e67155f70e33c07fea8284df6576da70b3719"
"""


def _vendor_tar(path: Path, checksum: str) -> Path:
    with tarfile.open(path, "w") as tar:
        data = json.dumps({"files": {}, "package": checksum}).encode()
        info = tarfile.TarInfo("vendor/either-1.15.0/.cargo-checksum.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return path


def test_registry_crates_parse() -> None:
    crates = registry_crates(LOCK)
    assert [(c.name, c.version) for c in crates] == [("either", "1.15.0")]


def test_vendor_matching_lock_passes(tmp_path: Path) -> None:
    good = _vendor_tar(tmp_path / "v.tar", registry_crates(LOCK)[0].checksum)
    assert verify_vendor_archive(good, LOCK) == 1


def test_vendor_with_other_checksum_is_refused(tmp_path: Path) -> None:
    bad = _vendor_tar(tmp_path / "v.tar", "0" * 64)
    with pytest.raises(SourceError, match=r"does not match Cargo\.lock"):
        verify_vendor_archive(bad, LOCK)


def test_missing_lockfile_is_a_source_error(tmp_path: Path) -> None:
    (tmp_path / "Cargo.toml").write_text("[package]\n")
    with pytest.raises(SourceError) as caught:
        snapshot(tmp_path, 0)
    assert "cargo generate-lockfile" in caught.value.hint


def test_snapshot_hash_changes_with_one_byte(project: Path) -> None:
    crate = project / "crate"
    first = snapshot(crate, 1700000000)
    (crate / "src" / "main.rs").write_text("fn main() { }\n")
    second = snapshot(crate, 1700000000)
    assert first.archive_sha256 != second.archive_sha256
    assert first.cargo_lock_sha256 == second.cargo_lock_sha256

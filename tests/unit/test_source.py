from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import SourceError
from orchestrator.host.source import other_sources, registry_crates, snapshot

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


def test_registry_crates_parse() -> None:
    crates = registry_crates(LOCK)
    assert [(c.name, c.version) for c in crates] == [("either", "1.15.0")]


def test_other_sources_lists_git_and_other_registries_not_paths() -> None:
    lock = LOCK + (
        '\n[[package]]\nname = "gitdep"\nversion = "0.1.0"\n'
        'source = "git+https://example.org/gitdep#' + "c" * 40 + '"\n'
        '\n[[package]]\nname = "local"\nversion = "0.1.0"\n'
    )
    assert other_sources(lock) == [f"gitdep 0.1.0 (git+https://example.org/gitdep#{'c' * 40})"]
    assert other_sources(LOCK) == []


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

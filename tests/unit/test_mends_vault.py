"""The vault keeps its own copy: rewriting a cache file in place never reaches it."""

from __future__ import annotations

from pathlib import Path

from orchestrator.host.vault import Vault


def _rewrite_in_place(path: Path) -> None:
    path.chmod(0o644)
    with path.open("r+b") as handle:
        handle.write(b"XXXX")


def test_put_then_rewriting_the_cache_file_leaves_the_vault_intact(tmp_path: Path) -> None:
    vault = Vault(tmp_path / "vault")
    cached = tmp_path / "cache" / "crates.tar"
    cached.parent.mkdir()
    cached.write_bytes(b"original crate archive bytes")
    digest = vault.put(cached)
    _rewrite_in_place(cached)
    assert vault.verify(digest).read_bytes() == b"original crate archive bytes"
    assert vault.path(digest).stat().st_nlink == 1


def test_materialize_then_rewriting_the_copy_leaves_the_vault_intact(tmp_path: Path) -> None:
    vault = Vault(tmp_path / "vault")
    source = tmp_path / "incoming.deb"
    source.write_bytes(b"a debian package")
    digest = vault.put(source)
    dest = tmp_path / "cache" / "packages" / "x.deb"
    vault.materialize(digest, dest)
    assert dest.read_bytes() == b"a debian package"
    _rewrite_in_place(dest)
    assert vault.verify(digest).read_bytes() == b"a debian package"
    # materializing again replaces the rewritten copy
    vault.materialize(digest, dest)
    assert dest.read_bytes() == b"a debian package"

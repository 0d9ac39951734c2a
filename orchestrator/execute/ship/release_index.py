"""The release-level index (SHA256SUMS, provenance and their signatures) over a release
folder's artifacts, rewritten all at once: by `build` after each artifact it publishes, by
`release` once its targets are in, and by `assemble`."""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import suppress
from pathlib import Path

from orchestrator.host.staging import commit, fsync_tree, staging_root
from orchestrator.supply.attest import ReleaseIndex, Signer, write_release_index
from orchestrator.supply.chain import SignedChain


def update_release_index(
    release_dir: Path, signer: Signer, *, vouched: tuple[str, ...] = ()
) -> ReleaseIndex:
    """Rewrite the release-level index (checksums, provenance, signatures) all at once: the
    new files are written and fsynced beside the release, then renamed in together.

    Only what the index being replaced vouches for under this key, and `vouched` (paths
    the caller wrote itself), is signed again; the rest is in the result's `left_out`.
    A release signed by another key is refused (supply/chain.py's ReleaseKeyError). An
    index that comes out byte for byte as the release holds it is not written (signatures
    are deterministic): the result then lists nothing written."""
    root = staging_root(release_dir.parent)  # release_dir.parent is the artifacts folder
    root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-index-", dir=root))
    try:
        index = scratch / "index"
        index.mkdir()
        chain = SignedChain.read(release_dir, signer.key.public)
        signed = write_release_index(release_dir, signer, index, chain=chain, vouched=vouched)
        if _already_there(index, release_dir):  # the same bytes: nothing is written
            return ReleaseIndex([], signed.left_out)
        fsync_tree(index)
        commit(release_dir, index=index, backup=scratch / "previous")
        return ReleaseIndex([release_dir / path.name for path in signed.written], signed.left_out)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        with suppress(OSError):  # another build is staging too
            root.rmdir()


def _already_there(index: Path, release_dir: Path) -> bool:
    """Whether every file of the new `index` is in `release_dir` with the same bytes."""
    for path in index.iterdir():
        there = release_dir / path.name
        if there.is_symlink() or not there.is_file() or there.read_bytes() != path.read_bytes():
            return False
    return True

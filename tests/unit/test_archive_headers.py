"""Tar headers are checked from their raw 512-byte block, before tarfile reads what they
declare: a PAX header or GNU long name of gigabytes, a chain of headers, a sparse map, a
damaged header, or a file that is no tar at all is exit 41, never memory or a success.
"""

from __future__ import annotations

import gzip
import io
import json
import lzma
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.errors import UnsafeArchiveError
from orchestrator.host.archive import (
    MAX_GLOBAL_RECORDS,
    MAX_HEADERS_PER_ENTRY,
    ArchiveLimits,
    ChunkReader,
    reading_tar,
    safe_extract,
)

LIMITS = ArchiveLimits(max_entries=50, max_total_bytes=1 << 20)


def raw_header(name: bytes, size: int, typeflag: bytes, *, checksum: bool = True) -> bytes:
    """One ustar header block, written by hand so that it may declare anything: sizes past
    the 11 octal digits go in base-256, as GNU tar writes them (negative ones too)."""
    block = bytearray(512)
    block[: len(name)] = name
    block[100:108] = b"0000644\0"
    block[108:116] = block[116:124] = b"0000000\0"
    if 0 <= size < 8**11:
        block[124:136] = b"%011o\0" % size
    else:
        block[124:136] = (size % (1 << 88) | (0xFF << 88 if size < 0 else 0x80 << 88)).to_bytes(
            12, "big"
        )
    block[136:148] = b"00000000000\0"
    block[156:157] = typeflag
    block[257:265] = b"ustar\x0000"
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % (sum(block) + (0 if checksum else 1))
    return bytes(block)


def padded(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 512)


def pax_record(key: str, value: str) -> bytes:
    body = f" {key}={value}\n".encode()
    length = len(body) + 1
    while len(str(length)) + len(body) != length:
        length += 1
    return str(length).encode() + body


def entry(name: str, data: bytes = b"x") -> bytes:
    return raw_header(name.encode(), len(data), b"0") + padded(data)


END = b"\0" * 1024


def read_all(data: bytes, limits: ArchiveLimits = LIMITS) -> list[str]:
    with reading_tar(io.BytesIO(data), label="test archive", limits=limits) as tar:
        return [member.name for member in tar]


# -- what each header may declare ---------------------------------------------------------


@pytest.mark.parametrize(
    ("typeflag", "kind"),
    [
        (b"x", "PAX extended header"),
        (b"X", "PAX extended header"),
        (b"g", "PAX global header"),
        (b"L", "GNU long name"),
        (b"K", "GNU long link name"),
    ],
)
@pytest.mark.parametrize("size", [(64 << 10) + 1, 2 << 30, 1 << 70], ids=["64k+1", "2g", "base256"])
def test_an_oversized_extended_header_is_refused_at_its_header(
    typeflag: bytes, kind: str, size: int
) -> None:
    # Only the header is there: what it declares is never read (a read would come back short).
    bomb = entry("first") + raw_header(b"././@LongLink", size, typeflag) + b"n" * 4096
    with pytest.raises(UnsafeArchiveError, match=f"its {kind} at byte 1024 declares") as caught:
        read_all(bomb)
    assert "over the 64.0 KiB limit for one header" in caught.value.message
    assert caught.value.exit_code == 41


def test_extended_headers_up_to_the_limit_are_read() -> None:
    name = "d/" * 200 + "f"  # 401 bytes: a PAX path and a GNU long name both carry it
    records = pax_record("path", name)
    archive = (
        raw_header(b"pax", len(records), b"x")
        + padded(records)
        + entry("short")
        + raw_header(b"././@LongLink", len(name) + 1, b"L")
        + padded(name.encode() + b"\0")
        + entry("short")
        + END
    )
    assert read_all(archive) == [name, name]


@pytest.mark.parametrize("typeflag", [b"x", b"L", b"0", b"5"])
def test_a_negative_size_is_refused(typeflag: bytes) -> None:
    # tarfile would read(-n) for an extended header: everything to the end of the stream.
    bomb = raw_header(b"neg", -2048, typeflag) + b"\0" * 8192
    with pytest.raises(UnsafeArchiveError, match="negative size"):
        read_all(bomb)


def test_a_negative_pax_size_is_refused() -> None:
    # A negative entry would hide another entry's gigabytes from the total.
    records = pax_record("size", "-4096")
    archive = raw_header(b"pax", len(records), b"x") + padded(records) + entry("f") + END
    with pytest.raises(UnsafeArchiveError, match="negative size"):
        read_all(archive)


def test_a_chain_of_extended_headers_is_refused() -> None:
    # Thousands were a RecursionError traceback: tarfile reads each next header by recursion.
    records = pax_record("comment", "x")
    one = raw_header(b"pax", len(records), b"x") + padded(records)
    with pytest.raises(UnsafeArchiveError, match=f"more than {MAX_HEADERS_PER_ENTRY} extended"):
        read_all(one * 3000 + entry("f") + END)
    read_all(one * MAX_HEADERS_PER_ENTRY + entry("f") + END)  # the limit itself is fine


def test_extended_headers_have_a_total_for_the_archive() -> None:
    limits = ArchiveLimits(max_entries=50, max_total_bytes=1 << 20, max_header_total_bytes=4096)
    records = pax_record("comment", "c" * 1500)
    header = raw_header(b"pax", len(records), b"x") + padded(records)
    archive = b"".join(header + entry(f"f{i}") for i in range(3)) + END
    with pytest.raises(UnsafeArchiveError, match=r"declare more than 4\.0 KiB in all"):
        read_all(archive, limits)


def test_global_headers_hold_a_few_records() -> None:
    def archive(count: int) -> bytes:
        records = b"".join(pax_record(f"k{i}", "v") for i in range(count))
        return raw_header(b"g", len(records), b"g") + padded(records) + entry("f") + END

    assert read_all(archive(MAX_GLOBAL_RECORDS)) == ["f"]
    with pytest.raises(UnsafeArchiveError, match="PAX global headers hold"):
        read_all(archive(MAX_GLOBAL_RECORDS + 1))


def test_a_git_archive_style_global_comment_is_read(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with tarfile.open(
        fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT, pax_headers={"comment": "a" * 40}
    ) as tar:
        info = tarfile.TarInfo("src/lib.rs")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"//"))
    assert safe_extract(io.BytesIO(buffer.getvalue()), tmp_path, limits=LIMITS) == [
        Path("src/lib.rs")
    ]


def test_entries_are_counted_at_their_headers() -> None:
    # reading_tar itself stops at one entry too many, whatever its caller does.
    limits = ArchiveLimits(max_entries=3, max_total_bytes=1 << 20)
    archive = b"".join(entry(f"f{i}") for i in range(5)) + END
    with pytest.raises(UnsafeArchiveError, match="more than 3 entries"):
        read_all(archive, limits)


# -- sparse maps --------------------------------------------------------------------------


def test_a_gnu_sparse_header_is_refused_before_its_extension_blocks() -> None:
    header = bytearray(raw_header(b"holes", 0, b"S"))
    header[482] = 1  # "isextended": more map blocks follow, as many as the file holds
    header[148:156] = b" " * 8
    header[148:156] = b"%06o\0 " % sum(header)
    with pytest.raises(UnsafeArchiveError, match="'holes' is a sparse file"):
        read_all(bytes(header) + b"\1" * 512 * 64)


@pytest.mark.parametrize(
    "records",
    [
        [("GNU.sparse.major", "1"), ("GNU.sparse.minor", "0"), ("GNU.sparse.name", "s")],
        [("GNU.sparse.map", "0,1,2,3")],
        [("GNU.sparse.size", "10"), ("GNU.sparse.offset", "0"), ("GNU.sparse.numbytes", "1")],
    ],
    ids=["1.0", "0.1", "0.0"],
)
def test_a_pax_sparse_map_is_refused(records: list[tuple[str, str]]) -> None:
    pax = b"".join(pax_record(k, v) for k, v in records)
    # Version 1.0 keeps its map in the data: a count of 10^12 pairs would be read forever.
    data = b"1000000000000\n" + b"1\n" * 4096
    archive = raw_header(b"pax", len(pax), b"x") + padded(pax) + entry("s", data) + END
    with pytest.raises(UnsafeArchiveError, match="is a sparse file"):
        read_all(archive)


def test_a_pax_sparse_size_that_is_no_number_is_refused() -> None:
    pax = pax_record("GNU.sparse.realsize", "lots")
    archive = raw_header(b"pax", len(pax), b"x") + padded(pax) + entry("s") + END
    with pytest.raises(UnsafeArchiveError, match="malformed PAX record"):
        read_all(archive)


# -- damage and other kinds of file --------------------------------------------------------


def test_a_damaged_header_after_the_first_is_refused_not_the_end() -> None:
    # tarfile alone ends the archive there: the entries after it would quietly vanish.
    good = entry("a")
    bad = raw_header(b"b", 1, b"0", checksum=False) + padded(b"x")
    with pytest.raises(UnsafeArchiveError, match="damaged header at byte 1024"):
        read_all(good + bad + entry("c") + END)


def test_a_header_cut_in_half_is_refused() -> None:
    with pytest.raises(UnsafeArchiveError, match="damaged header at byte 1024"):
        read_all(entry("a") + entry("b")[:200])


def test_an_archive_without_its_end_marker_is_read_as_tar_does() -> None:
    assert read_all(entry("a") + entry("b")) == ["a", "b"]


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\0" * (1 << 20),
        END,  # a valid empty tar: indistinguishable from zeros, and nothing we read is empty
        gzip.compress(b"\0" * (1 << 20), mtime=0),
        lzma.compress(b"\0" * 4096),
        gzip.compress(b"", mtime=0),
        bytes(range(256)) * 64,
        b"PK\x03\x04 a zip",
    ],
    ids=[
        "empty",
        "zeros",
        "empty-tar",
        "gzip-of-zeros",
        "xz-of-zeros",
        "empty-gzip",
        "bytes",
        "zip",
    ],
)
def test_what_is_not_a_tar_is_exit_41(tmp_path: Path, data: bytes) -> None:
    with pytest.raises(UnsafeArchiveError, match="not a tar archive") as caught:
        safe_extract(io.BytesIO(data), tmp_path, limits=LIMITS)
    assert caught.value.exit_code == 41
    assert list(tmp_path.iterdir()) == []


# -- streams that cannot seek, compressed -------------------------------------------------


def _chunks(data: bytes, size: int = 1000) -> ChunkReader:
    return ChunkReader(data[i : i + size] for i in range(0, len(data), size))


@pytest.mark.parametrize("compress", [gzip.compress, lzma.compress, bytes], ids=["gz", "xz", "tar"])
def test_a_stream_is_guarded_through_its_compression(compress: Callable[[bytes], bytes]) -> None:
    good = compress(entry("a", b"hello") + END)
    with reading_tar(_chunks(good), label="stream", limits=LIMITS, mode="r|*") as tar:
        member = tar.next()
        assert member is not None and member.name == "a"
        handle = tar.extractfile(member)
        assert handle is not None and handle.read() == b"hello"
    bomb = compress(raw_header(b"././@PaxHeader", 2 << 30, b"x") + b"\0" * (1 << 20))
    with (
        pytest.raises(UnsafeArchiveError, match=r"PAX extended header at byte 0 declares 2\.0 GiB"),
        reading_tar(_chunks(bomb), label="stream", limits=LIMITS, mode="r|*") as tar,
    ):
        list(tar)


# -- the bombs of issue 28, through the real CLI under a memory limit ----------------------

PIECE = 64 << 20


def _repeated(pattern: bytes, first: bytes, last: bytes) -> tuple[bytes, bytes, bytes]:
    """Gzip members of PIECE bytes each, concatenated: one gzip stream of the whole, built
    from three compressions instead of gigabytes."""
    fill = PIECE - len(first)
    head = gzip.compress(first + pattern * fill, compresslevel=9, mtime=0)
    body = gzip.compress(pattern * PIECE, compresslevel=9, mtime=0)
    tail = gzip.compress(pattern * (PIECE - len(last)) + last, compresslevel=9, mtime=0)
    return head, body, tail


def _bomb(typeflag: bytes, size: int, first: bytes, pattern: bytes, last: bytes) -> bytes:
    head, body, tail = _repeated(pattern, first, last)
    blob = "sha256/" + "0" * 64
    after = raw_header(blob.encode(), 3, b"0") + padded(b"abc") + END
    return (
        gzip.compress(raw_header(b"././@LongLink", size, typeflag), mtime=0)
        + head
        + body * (size // PIECE - 2)
        + tail
        + gzip.compress(after, mtime=0)
    )


def pax_bomb() -> bytes:
    """2 GiB of one PAX record, "2147483648 comment=aaa...\\n": 2 MB as .tar.gz. Before the
    guard, `vault import` of it took 6.2 GB (exit 52), or died with MemoryError under
    `ulimit -v 4G`."""
    size = 2 << 30
    return _bomb(b"x", size, b"%d comment=" % size, b"a", b"\n")


def gnu_bomb() -> bytes:
    """A GNU long name of 1 GiB: 1 MB as .tar.gz; it took 2.1 GB before exit 41."""
    return _bomb(b"L", 1 << 30, b"", b"n", b"")


def global_records_bomb() -> bytes:
    """One 64 KiB global PAX header of ~7,800 tiny records, then 20,000 empty entries: a
    10 MB plain tar. tarfile copies the global records into every entry: 4.0 GB, exit 0."""
    records = b""
    while len(records) < (64 << 10) - 16:
        records += pax_record(f"g{len(records):x}", "")
    head = raw_header(b"g", len(records), b"g") + padded(records)
    return head + b"".join(raw_header(b"f%d" % i, 0, b"0") for i in range(20_000)) + END


MEMORY_LIMIT = 1 << 30  # RLIMIT_AS of the CLI: its own start-up needs well under this
PEAK_RSS_BOUND = 300 << 20  # what the refused import may use at its peak (it uses ~40 MB)

# Runs the CLI as its child under the limit and reports the child's peak RSS: a process of
# its own, so no other child of the test run counts in RUSAGE_CHILDREN.
_MEASURE = """
import json, resource, subprocess, sys
limit = int(sys.argv[1])
def cap():
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
done = subprocess.run(sys.argv[2:], capture_output=True, text=True, preexec_fn=cap)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
print(json.dumps({"code": done.returncode, "output": done.stdout + done.stderr, "peak": peak}))
"""


def _import_under_limit(tmp_path: Path, name: str, data: bytes) -> tuple[int, str, int]:
    archive = tmp_path / name
    archive.write_bytes(data)
    command = [sys.executable, "-m", "orchestrator", "vault", "import", str(archive)]
    command += ["--cache-dir", str(tmp_path / "cache")]
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(MEMORY_LIMIT), *command],
        capture_output=True,
        text=True,
        check=True,
    )
    report = json.loads(done.stdout)
    return report["code"], report["output"], report["peak"]


@pytest.mark.parametrize(
    ("build", "fragment"),
    [
        (pax_bomb, "its PAX extended header at byte 0 declares 2.0 GiB"),
        (gnu_bomb, "its GNU long name at byte 0 declares 1.0 GiB"),
        (global_records_bomb, "its PAX global headers hold"),
        (lambda: gzip.compress(b"\0" * (1 << 20), mtime=0), "is not a tar archive"),
    ],
    ids=["pax-2g", "gnu-long-name-1g", "global-records", "gzip-of-zeros"],
)
def test_the_tar_bombs_are_exit_41_in_bounded_memory(
    tmp_path: Path, build: Callable[[], bytes], fragment: str
) -> None:
    data = build()
    assert len(data) < 11 << 20  # a few MB on disk
    code, output, peak = _import_under_limit(tmp_path, "vault.tar.gz", data)
    assert code == 41, output
    assert fragment in output
    assert "Traceback" not in output and "MemoryError" not in output
    assert peak < PEAK_RSS_BOUND, f"peak RSS {peak >> 20} MiB"
    assert not (tmp_path / "cache" / "vault" / "sha256").exists()  # nothing imported

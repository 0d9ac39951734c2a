"""Raw tar headers from a stranger: whatever they declare (PAX and GNU extended headers of
any size, sparse maps, many entries, bad checksums, cut-off blocks), through any
compression, read from a file or a stream that cannot seek, the reader either returns
entries or refuses with UnsafeArchiveError (exit 41). Nothing else escapes it.
"""

from __future__ import annotations

import gzip
import io
import lzma
import tarfile
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from orchestrator.errors import OrchestratorError
from orchestrator.host.archive import ArchiveLimits, ChunkReader, reading_tar, safe_extract

from ..unit.test_archive_headers import END, padded, pax_record, raw_header

# Small limits, so that small examples reach every one of them.
LIMITS = ArchiveLimits(
    max_entries=4,
    max_total_bytes=4000,
    max_name_bytes=200,
    max_header_bytes=1024,
    max_header_total_bytes=2048,
)

TYPEFLAGS = st.sampled_from(
    [b"x", b"X", b"g", b"L", b"K", b"S", b"0", b"\0", b"5", b"2", b"1", b"3", b"6", b"7", b"V"]
) | st.binary(min_size=1, max_size=1)
SIZES = (
    st.sampled_from(
        [0, 1, 100, 511, 512, 1024, 1025, 64 << 10, (64 << 10) + 1, 2 << 30, 8**11 - 1, 1 << 70]
    )
    | st.sampled_from([-1, -512, -(1 << 40)])
    | st.integers(min_value=0, max_value=3000)
)
PAX_KEYS = st.sampled_from(
    [
        "path",
        "linkpath",
        "size",
        "mtime",
        "uid",
        "uname",
        "comment",
        "hdrcharset",
        "GNU.sparse.major",
        "GNU.sparse.minor",
        "GNU.sparse.map",
        "GNU.sparse.size",
        "GNU.sparse.realsize",
        "GNU.sparse.name",
    ]
) | st.text(min_size=1, max_size=8).filter(lambda k: "=" not in k)
PAX_VALUES = st.sampled_from(
    ["0", "1", "-1", "-4096", "1e9", "99999999999999999999", "../x", "/etc/passwd", "BINARY", ""]
) | st.text(max_size=30)
RECORDS = st.lists(st.tuples(PAX_KEYS, PAX_VALUES), max_size=5).map(
    lambda pairs: b"".join(pax_record(k, v) for k, v in pairs)
)
# What follows a header: PAX records, a long name, or any bytes; its length need not be the
# size the header declares.
PAYLOADS = RECORDS | st.binary(max_size=1200) | st.sampled_from([b"n" * 300 + b"\0", b""])
NAMES = st.sampled_from(["a", "a/b", "../x", "/abs", "", "././@LongLink", "d/"]) | st.text(
    max_size=20
)
HEADERS = st.lists(
    st.tuples(NAMES, TYPEFLAGS, SIZES, PAYLOADS, st.booleans()), min_size=1, max_size=7
)


def _build(headers: list[tuple[str, bytes, int, bytes, bool]], end: bool) -> bytes:
    out = bytearray()
    for name, typeflag, size, payload, good_checksum in headers:
        raw_name = name.encode("utf-8", "surrogateescape")[:100]
        out += raw_header(raw_name, size, typeflag, checksum=good_checksum) + padded(payload)
    return bytes(out + (END if end else b""))


COMPRESSIONS = st.sampled_from([lambda b: b, lambda b: gzip.compress(b, mtime=0), lzma.compress])


def _read_stream(data: bytes) -> None:
    chunks = ChunkReader(data[i : i + 700] for i in range(0, len(data), 700))
    with reading_tar(chunks, label="fuzz stream", limits=LIMITS, mode="r|*") as tar:
        for member in tar:
            if member.isfile() and 0 <= member.size <= LIMITS.max_total_bytes:
                handle = tar.extractfile(member)
                if handle is not None:
                    handle.read()


def _extract(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        dest = Path(tmp) / "out"
        dest.mkdir()
        written = safe_extract(io.BytesIO(data), dest, limits=LIMITS)
        for path in written:
            assert (dest / path).is_file()
        assert [p.name for p in Path(tmp).iterdir()] == ["out"]


def _clean_outcome(read: object, data: bytes) -> None:
    assert callable(read)
    try:
        read(data)
    except OrchestratorError as error:
        assert error.exit_code == 41, error.message
        assert "Traceback" not in error.message


@given(HEADERS, st.booleans(), COMPRESSIONS, st.data())
def test_raw_headers_are_read_or_refused(
    headers: list[tuple[str, bytes, int, bytes, bool]],
    end: bool,
    compress: object,
    data: st.DataObject,
) -> None:
    assert callable(compress)
    archive = _build(headers, end)
    cut = data.draw(st.sampled_from([len(archive), len(archive) - 1, 511, 700]), label="cut")
    stored = compress(archive[: max(cut, 0)])
    _clean_outcome(_extract, stored)
    _clean_outcome(_read_stream, stored)


@given(RECORDS, st.sampled_from([b"x", b"g", b"X"]), NAMES, st.binary(max_size=600))
def test_pax_records_are_read_or_refused(
    records: bytes, typeflag: bytes, name: str, body: bytes
) -> None:
    # A well-formed PAX header in front of a regular entry: only the records are hostile.
    entry_name = name.encode("utf-8", "surrogateescape")[:100]
    archive = (
        raw_header(b"././@PaxHeader", len(records), typeflag)
        + padded(records)
        + raw_header(entry_name, len(body), b"0")
        + padded(body)
        + END
    )
    _clean_outcome(_extract, archive)
    _clean_outcome(_read_stream, archive)


@given(st.integers(min_value=1, max_value=12), st.sampled_from([b"x", b"L", b"g", b"K"]))
def test_many_entries_and_header_chains_are_read_or_refused(count: int, typeflag: bytes) -> None:
    records = pax_record("comment", "c") if typeflag in (b"x", b"g") else b"n\0"
    one = raw_header(b"h", len(records), typeflag) + padded(records)
    archive = b"".join(
        one * (i % 10) + raw_header(f"f{i}".encode(), 1, b"0") + padded(b"z") for i in range(count)
    )
    _clean_outcome(_extract, archive + END)
    _clean_outcome(_read_stream, archive + END)


def test_the_fuzz_limits_are_reachable() -> None:
    # The strategies above can cross each limit; this pins that the small limits are in force.
    over = raw_header(b"big", 1025, b"x") + padded(b"1" * 1025) + END
    try:
        _extract(over)
    except OrchestratorError as error:
        assert "1.0 KiB limit for one header" in error.message
    else:
        raise AssertionError("a 1025-byte PAX header passed a 1024-byte limit")
    assert tarfile.BLOCKSIZE == 512

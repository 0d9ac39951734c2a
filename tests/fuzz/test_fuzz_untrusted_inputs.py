"""No input from outside crashes a reader or escapes its folder: each either parses into a
typed record whose paths were checked, or is refused with the reader's own error."""

from __future__ import annotations

import io
import json
import tarfile
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

from hypothesis import given, reject
from hypothesis import strategies as st

from orchestrator.config.resolve.options import resolve
from orchestrator.errors import UnsafeArchiveError
from orchestrator.host.archive import ArchiveLimits, safe_extract
from orchestrator.model.binaries.elf import ElfReadError, hide_versions_above, read_loader_needs
from orchestrator.model.documents.cache_records import ProfileSidecar, VariantsRecord
from orchestrator.model.documents.lockfile import LockfileError, blobs, dumps, parse_lock
from orchestrator.model.documents.records import BuildManifest, Record, RecordError, parse_record
from orchestrator.model.documents.release_summary import ReleaseSummary

from ..unit.conftest import plan_for
from ..unit.test_lockfile import lock_for

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
# Names a hostile archive or lockfile would use, besides random text.
HOSTILE_NAMES = st.sampled_from(
    [
        "",
        ".",
        "..",
        "/",
        "/etc/cron.d/x",
        "../x",
        "a/../../x",
        "a//b",
        "./a",
        "a/./b",
        "~",
        "\x00",
        "sha256/" + "0" * 64,
        "release.lock",
        "n" * 300,
        "é/\udcff",
    ]
)
# Paths made of few parts collide often: a file where a folder is, the same file twice.
SHORT_PATHS = st.lists(st.sampled_from(["a", "b", ".", "..", ""]), min_size=1, max_size=4).map(
    "/".join
)
NAMES = HOSTILE_NAMES | SHORT_PATHS | st.text(min_size=1, max_size=40)


def _paths(document: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path of a JSON document."""
    found = [prefix]
    if isinstance(document, dict):
        for key, value in document.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            found += _paths(value, (*prefix, index))
    return found


# The lock's keys whose values are joined onto a folder on the rebuilder's machine.
PATH_KEYS = {"file", "crate", "repository_path", "artifact", "cache_file"}


def _get(document: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        document = document[part]
    return document


def _replace(document: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    copy = json.loads(json.dumps(document))
    holder = copy
    for part in path[:-1]:
        holder = holder[part]
    holder[path[-1]] = value
    return copy


def _valid_lock() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        project = Path(tmp)
        (project / "crate" / "src").mkdir(parents=True)
        (project / "crate" / "Cargo.toml").write_text(
            '[package]\nname = "demo"\nversion = "1.2.3"\nedition = "2021"\n'
        )
        (project / "crate" / "Cargo.lock").write_text("version = 4\n")
        (project / "orchestrator.toml").write_text(
            '[package]\ncrate = "crate"\n[train]\nworkloads = [["--help"]]\n'
        )
        options = resolve(project / "orchestrator.toml", env={"SOURCE_DATE_EPOCH": "1700000000"})
        return json.loads(dumps(lock_for(plan_for(options))))  # type: ignore[no-any-return]


VALID_LOCK = _valid_lock()


def _check_lock(document: object) -> None:
    try:
        lock = parse_lock(document, "fuzz.lock")
    except LockfileError as error:
        assert error.exit_code == 53
        assert error.message.startswith("fuzz.lock")
        return
    for digest in blobs(lock):
        assert len(digest) == 64
        assert set(digest) <= set("0123456789abcdef")
    for key_path in _paths(lock.dump()):
        if key_path and key_path[-1] in PATH_KEYS:
            value = _get(lock.dump(), key_path)
            if value is None:
                continue
            path = PurePosixPath(value)
            assert not path.is_absolute(), key_path
            assert ".." not in path.parts, key_path


STRING_LEAVES = [p for p in _paths(VALID_LOCK) if isinstance(_get(VALID_LOCK, p), str)]


@given(st.sampled_from(_paths(VALID_LOCK)) | st.sampled_from(STRING_LEAVES), JSON | HOSTILE_NAMES)
def test_a_mutated_lockfile_is_read_or_refused(path: tuple[Any, ...], value: Any) -> None:
    _check_lock(_replace(VALID_LOCK, path, value))


@given(JSON)
def test_any_json_as_a_lockfile_is_read_or_refused(document: Any) -> None:
    _check_lock(document)


RECORDS: list[type[Record]] = [BuildManifest, ReleaseSummary, VariantsRecord, ProfileSidecar]


@given(st.sampled_from(RECORDS), JSON)
def test_any_json_as_a_record_is_read_or_refused(model: type[Record], document: Any) -> None:
    try:
        parse_record(document, model, "fuzz.json")
    except RecordError as error:
        assert error.exit_code == 59
        assert error.message.startswith("fuzz.json")


@given(
    st.sampled_from(RECORDS),
    st.dictionaries(
        st.sampled_from(["schema", "schema_version", "artifact", "targets", "x"]), JSON
    ),
)
def test_record_headers_are_read_or_refused(model: type[Record], document: dict[str, Any]) -> None:
    document.setdefault("schema", model.SCHEMA)
    try:
        parse_record(document, model, "fuzz.json")
    except RecordError as error:
        assert error.exit_code == 59


MEMBER_TYPES = st.sampled_from(
    [
        tarfile.REGTYPE,
        tarfile.DIRTYPE,
        tarfile.SYMTYPE,
        tarfile.LNKTYPE,
        tarfile.CHRTYPE,
        tarfile.FIFOTYPE,
        tarfile.GNUTYPE_SPARSE,
        tarfile.CONTTYPE,
    ]
)
MEMBERS = st.lists(
    st.tuples(NAMES, MEMBER_TYPES, st.binary(max_size=600), NAMES), min_size=1, max_size=8
)
LIMITS = ArchiveLimits(max_entries=6, max_total_bytes=2000, max_name_bytes=200)


def _archive(members: list[tuple[str, bytes, bytes, str]], fmt: int) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as tar:
        for name, kind, data, link in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            info.linkname = link
            info.size = len(data) if kind in (tarfile.REGTYPE, tarfile.CONTTYPE) else 0
            tar.addfile(info, io.BytesIO(data) if info.size else None)
    return buffer.getvalue()


def _extract_into_a_fence(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        fence = Path(tmp)
        dest = fence / "out"
        dest.mkdir()
        try:
            written = safe_extract(io.BytesIO(data), dest, limits=LIMITS)
        except UnsafeArchiveError as error:
            assert error.exit_code == 41
        else:
            for path in written:
                assert (dest / path).is_file()
        # Nothing but `out` was created beside the destination, and nothing inside is a link.
        assert [p.name for p in fence.iterdir()] == ["out"]
        for found in dest.rglob("*"):
            assert not found.is_symlink()
            assert found.is_file() or found.is_dir()


@given(MEMBERS, st.sampled_from([tarfile.PAX_FORMAT, tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT]))
def test_any_archive_extracts_inside_its_folder_or_is_refused(
    members: list[tuple[str, bytes, bytes, str]], fmt: int
) -> None:
    try:
        data = _archive(members, fmt)
    except (ValueError, UnicodeEncodeError):
        reject()  # tarfile cannot write that header: not an archive anyone can send
    _extract_into_a_fence(data)


@given(MEMBERS, st.data())
def test_a_damaged_archive_is_refused_not_a_crash(
    members: list[tuple[str, bytes, bytes, str]], data: st.DataObject
) -> None:
    try:
        archive = bytearray(_archive(members, tarfile.GNU_FORMAT))
    except (ValueError, UnicodeEncodeError):
        reject()
    for _ in range(data.draw(st.integers(min_value=1, max_value=8))):
        index = data.draw(st.integers(min_value=0, max_value=len(archive) - 1))
        archive[index] = data.draw(st.integers(min_value=0, max_value=255))
    cut = data.draw(st.integers(min_value=0, max_value=len(archive)))
    _extract_into_a_fence(bytes(archive[:cut]))


# A binary in a release someone else published is read by `verify`: a damaged or hostile
# ELF is refused with ElfReadError, never a traceback. Mutations land in the headers and the
# dynamic tables, where the reader looks.
_ELF = Path("/bin/true").read_bytes()


@given(st.lists(st.tuples(st.integers(0, 8191), st.integers(0, 255)), min_size=1, max_size=24))
def test_a_damaged_elf_is_read_or_refused(changes: list[tuple[int, int]]) -> None:
    damaged = bytearray(_ELF)
    for offset, value in changes:
        damaged[offset % len(damaged)] = value
    try:
        needs = read_loader_needs(io.BytesIO(bytes(damaged)))
    except ElfReadError:
        return
    assert all(isinstance(name, str) for name in needs.needed)
    try:
        rewritten, _ = hide_versions_above(bytes(damaged), "2.28")
    except ElfReadError:
        return
    assert len(rewritten) == len(damaged)

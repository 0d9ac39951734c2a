"""Reading the sealed records the cache holds (profile sidecars, step entries).

Whoever can write the cache folder can put anything where a record should be: text that
is not JSON, a record of another schema, one without our seal, a symlink to /dev/zero, a
FIFO. None of that may stop a build or hand it a forged input: such a record is treated
as absent, the caller says so in one warning naming the file, and the step runs again.
The file is opened without following links and without blocking, must be a regular
file, and is read up to a bound, so nothing here can hang or exhaust memory.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TypeVar

from orchestrator.config.nesting import loads_json
from orchestrator.host.cache_seal import KEY_ENV, seal_matches
from orchestrator.model.documents.cache_records import (
    ImageArchiveRecord,
    ProfileSidecar,
    StepEntryRecord,
)
from orchestrator.model.documents.record_io import RecordError, parse_record
from orchestrator.model.printable import printable

# Sidecars and step records are a few KiB (a C-heavy profile's function list: tens of KiB).
MAX_RECORD_BYTES = 4 * 1024 * 1024

UNSEALED = (
    f"not sealed with this machine's cache key (written elsewhere, by an older version, or "
    f"forged; set {KEY_ENV} to share a cache between machines)"
)


# The records that carry a seal over their fields and their cache slot.
S = TypeVar("S", ProfileSidecar, StepEntryRecord, ImageArchiveRecord)


class UnusableRecord(Exception):  # noqa: N818 - a reason to skip, never shown as an error
    """Why a cache record cannot be used; the caller warns and treats it as absent."""


def _read_bounded(path: Path) -> bytes:
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        if path.is_symlink():
            raise UnusableRecord("a symbolic link, not a file") from None
        raise UnusableRecord(f"not readable: {error.strerror}") from None
    with os.fdopen(descriptor, "rb") as handle:
        status = os.fstat(handle.fileno())
        if not stat.S_ISREG(status.st_mode):
            raise UnusableRecord("not a regular file")
        if status.st_size > MAX_RECORD_BYTES:
            raise UnusableRecord(f"{status.st_size} bytes, more than a record holds")
        try:
            data = handle.read(MAX_RECORD_BYTES + 1)
        except OSError as error:
            raise UnusableRecord(f"not readable: {error.strerror}") from None
    if len(data) > MAX_RECORD_BYTES:  # grew while read
        raise UnusableRecord("more bytes than a record holds")
    return data


def read_sealed(path: Path, model: type[S], slot: str) -> S | None:
    """The record at `path`, checked against its seal for cache `slot`; None when there is
    no file. Raises UnusableRecord (with why) for anything else that is not a record we
    wrote there."""
    if not path.exists() and not path.is_symlink():
        return None
    data = _read_bounded(path)
    try:
        document = loads_json(data.decode())  # nesting bounded: a ValueError
    except (UnicodeDecodeError, ValueError):
        raise UnusableRecord("not JSON") from None
    try:
        record = parse_record(document, model, "record")
    except RecordError as error:
        # The keys it names are the file's: escaped before they reach a terminal
        raise UnusableRecord(printable(error.message.removeprefix("record: "), 200)) from None
    if not seal_matches(slot, record.sealed_fields(), record.seal):
        raise UnusableRecord(UNSEALED)
    return record

"""The compiled dispatcher, kept in the cache once per (toolchain image, source).

It becomes `bin/<binary>` of every -auto folder and is signed with the release, so an
entry in a cache someone else can write (a restored CI cache, a shared folder) must not be
able to hand a release its own program: a binary and a dispatcher.json rewritten together
would pass a digest check. The entry is therefore sealed like the step cache and the
profiles (host/cache_seal.py), and its bytes are checked again on every use: the recorded
digest and size, and that it is the freestanding x86_64 executable the compile gives. An
entry that fails any check is ignored with a warning and compiled again.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from orchestrator.errors import StepFailedError
from orchestrator.execute.ship.dispatcher import (
    build_dispatcher,
    check_freestanding,
    dispatcher_source,
)
from orchestrator.host.cache_seal import KEY_ENV, seal, seal_matches
from orchestrator.model.documents.cache_records import DispatcherCacheEntry
from orchestrator.model.documents.compose_record import DispatcherInfo
from orchestrator.model.documents.records import RecordError, read_record, write_record
from orchestrator.model.hashing import content_hash, sha256_bytes
from orchestrator.runtime.api import EngineApi, OutputSink

CACHE_FOLDER = "dispatcher"
BINARY_FILE = "dispatcher"
ENTRY_FILE = "dispatcher.json"
# A dispatcher is a few KiB; anything far larger in its slot is not one (and is not read).
MAX_DISPATCHER_BYTES = 1 << 20


def cache_folder(cache_dir: Path, image: str) -> Path:
    """The cache slot of the dispatcher compiled in `image` from today's source."""
    source = sha256_bytes(dispatcher_source())
    return cache_dir / CACHE_FOLDER / content_hash([image, source])[:24]


def _slot(folder: Path) -> str:
    return f"{CACHE_FOLDER}/{folder.name}"


def read_cached(
    folder: Path, image: str, warn: Callable[[str], object]
) -> tuple[DispatcherInfo, bytes] | None:
    """The dispatcher stored in `folder`, or None (absent, or refused with a warning) when
    it is not exactly what this machine compiled in `image` from today's source."""
    binary, entry_file = folder / BINARY_FILE, folder / ENTRY_FILE
    if not entry_file.exists() and not binary.exists():
        return None
    try:
        entry = read_record(entry_file, DispatcherCacheEntry)
    except RecordError as error:
        problem: str | bytes = f"its record is unreadable ({error.message})"
    else:
        problem = _record_problem(entry, folder, image) or _read_binary(binary, entry.info, image)
    if isinstance(problem, str):
        warn(f"ignoring the cached dispatcher in {folder}: {problem}; compiling it again")
        return None
    return entry.info, problem


def _record_problem(entry: DispatcherCacheEntry, folder: Path, image: str) -> str | None:
    """Why the record does not vouch for a dispatcher of `image` and today's source."""
    if not seal_matches(_slot(folder), entry.info.dump(), entry.seal):
        return (
            "its record is not sealed with this machine's cache key (written elsewhere or "
            f"forged; set {KEY_ENV} to share a cache between machines)"
        )
    if entry.info.image != image or entry.info.source_sha256 != sha256_bytes(dispatcher_source()):
        return "it was compiled in another image or from another source"
    return None


def _read_binary(binary: Path, info: DispatcherInfo, image: str) -> str | bytes:
    """The stored bytes when they are the ones `info` names and a freestanding x86_64
    executable; else why not."""
    if binary.is_symlink() or not binary.is_file():
        return f"{BINARY_FILE} is not a regular file"
    if binary.stat().st_size > MAX_DISPATCHER_BYTES:
        return f"{BINARY_FILE} is larger than {MAX_DISPATCHER_BYTES} bytes"
    data = binary.read_bytes()
    if len(data) != info.size or sha256_bytes(data) != info.sha256:
        return f"{BINARY_FILE} is not the file its record names"
    try:
        check_freestanding(data, image)
    except StepFailedError as error:
        return error.message
    return data


def cached_dispatcher(
    engine: EngineApi,
    image: str,
    cache_dir: Path,
    on_output: OutputSink,
    warn: Callable[[str], object],
) -> tuple[DispatcherInfo, bytes] | None:
    """The dispatcher compiled in `image`: from the cache when its sealed entry holds, or
    built now; None when neither the cache has it nor the Engine has the image."""
    folder = cache_folder(cache_dir, image)
    found = read_cached(folder, image, warn)
    if found is not None:
        return found
    if engine.image(image) is None:
        return None
    built = build_dispatcher(engine, image, folder / BINARY_FILE, on_output=on_output)
    info = DispatcherInfo(
        sha256=built.sha256,
        size=built.size,
        image=built.image,
        source_sha256=built.source_sha256,
        command=list(built.compiler),
    )
    entry = DispatcherCacheEntry(info=info, seal=seal(_slot(folder), info.dump()))
    write_record(folder / ENTRY_FILE, entry)
    data = (folder / BINARY_FILE).read_bytes()
    if sha256_bytes(data) != info.sha256:  # changed between the compile and this read
        raise StepFailedError(f"the dispatcher in {folder} changed while it was stored")
    return info, data

"""Registry crates kept as downloaded, and the vendor tree built from them for every build.

A `.crate` file is what crates.io served, and its sha256 is the `checksum` Cargo.lock pins.
So the store keeps each one under that digest (<cache>/crates/registry/<sha256>.crate), checks
it against Cargo.lock before every use, and the vendor tree a build gets is unpacked from the
checked archives each time: nothing in the cache can change the code that is compiled
without its digest ceasing to match. (A vendored *tree* could be edited together with its
`.cargo-checksum.json`, and cargo would not notice.)

The tar is deterministic (sorted entries, fixed times and owners), so one Cargo.lock gives
one vendor tar on every machine.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePosixPath

from orchestrator.errors import CacheCorruptError, SourceError
from orchestrator.host.archive import (
    CONTAINER_OUTPUT_LIMITS,
    ArchiveLimits,
    MemberCheck,
    reading_tar,
)
from orchestrator.host.source import LockedCrate
from orchestrator.model.hashing import sha256_file

# One crate may be large (a bundled C library, test data) but not a bomb.
CRATE_LIMITS = ArchiveLimits(max_entries=50_000, max_total_bytes=2 << 30)
VENDOR_MTIME = 1  # what cargo vendor would not reproduce: one fixed time for every entry


def store_dir(cache_dir: Path) -> Path:
    return cache_dir / "crates" / "registry"


def crate_file(cache_dir: Path, crate: LockedCrate) -> Path:
    return store_dir(cache_dir) / f"{crate.checksum}.crate"


def verified_crate(cache_dir: Path, crate: LockedCrate) -> bytes | None:
    """The crate's archive if the store has it and it matches Cargo.lock; None if absent.

    A stored archive that does not match is removed (it is fetched again) and reported.
    """
    path = crate_file(cache_dir, crate)
    if not path.is_file():
        return None
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != crate.checksum:
        path.unlink()
        raise CacheCorruptError(
            f"cached {crate.name} {crate.version} ({path}) does not match Cargo.lock's "
            f"checksum {crate.checksum}: it was altered, and was removed",
            hint="Run the build again: the crate is downloaded afresh.",
        )
    return data


def missing_crates(cache_dir: Path, crates: Iterable[LockedCrate]) -> list[LockedCrate]:
    """The crates whose checked archive is not in the store."""
    return [c for c in crates if not crate_file(cache_dir, c).is_file()]


def take_in(downloaded: Path, cache_dir: Path, crates: Sequence[LockedCrate]) -> int:
    """Move freshly downloaded `.crate` files (any layout below `downloaded`, named
    `<name>-<version>.crate` as cargo names them) into the store, each checked first."""
    wanted = {f"{c.name}-{c.version}.crate": c for c in crates}
    store = store_dir(cache_dir)
    store.mkdir(parents=True, exist_ok=True)
    taken = 0
    for path in sorted(downloaded.rglob("*.crate")):
        crate = wanted.get(path.name)
        if crate is None or not path.is_file() or path.is_symlink():
            continue
        actual = sha256_file(path)
        if actual != crate.checksum:
            raise SourceError(
                f"downloaded {path.name} has sha256 {actual}, but Cargo.lock pins {crate.checksum}",
                hint="The registry (or a proxy) served other bytes than Cargo.lock recorded.",
            )
        path.replace(crate_file(cache_dir, crate))
        taken += 1
    return taken


def vendor_tar(
    cache_dir: Path, crates: Sequence[LockedCrate], dest: Path, *, git_tree: Path | None = None
) -> int:
    """Write the vendor tree of `crates` as a tar (entries `vendor/<name>-<version>/...`) to
    `dest`, unpacked from their checked archives; returns how many crates it holds.

    `git_tree`, a tar of a fresh `cargo vendor` output, gives the git dependencies: its
    folders that are not registry crates are copied (checked, normalised) after them."""
    missing = missing_crates(cache_dir, crates)
    if missing:
        names = ", ".join(f"{c.name} {c.version}" for c in missing[:5])
        raise CacheCorruptError(f"the crate store lacks {len(missing)} crate(s): {names}")
    partial = dest.with_name(f".{dest.name}.partial")
    try:
        with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as out:
            top = _info("vendor", directory=True)
            out.addfile(top)
            for crate in sorted(crates, key=lambda c: (c.name, c.version)):
                data = verified_crate(cache_dir, crate)
                if data is None:  # removed since the check above
                    raise CacheCorruptError(f"the crate store lost {crate.name} {crate.version}")
                _add_crate(out, crate, data)
            if git_tree is not None:
                registry = {f"{c.name}-{c.version}" for c in crates}
                _add_git_dependencies(out, git_tree, registry)
        partial.replace(dest)
    finally:
        partial.unlink(missing_ok=True)
    return len(crates)


def _info(
    name: str, *, directory: bool = False, size: int = 0, executable: bool = False
) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE if directory else tarfile.REGTYPE
    info.size = size
    info.mode = 0o755 if directory or executable else 0o644
    info.mtime = VENDOR_MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _add_crate(out: tarfile.TarFile, crate: LockedCrate, data: bytes) -> None:
    """Copy one `.crate` (a gzipped tar of `<name>-<version>/...`) under vendor/, checked
    entry by entry, plus the `.cargo-checksum.json` cargo's directory source needs."""
    root = f"{crate.name}-{crate.version}"
    label = f"crate {crate.name} {crate.version}"
    check = MemberCheck(CRATE_LIMITS, label=label, stored_bytes=len(data))
    entries: list[tuple[PurePosixPath, tarfile.TarInfo, bytes]] = []
    with reading_tar(io.BytesIO(data), label=label, limits=CRATE_LIMITS, mode="r:gz") as tar:
        for member in tar:
            path = check.admit(member)
            if path.parts[0] != root:
                raise SourceError(f"{label}: entry {member.name!r} lies outside {root}/")
            if member.isdir():
                continue
            handle = tar.extractfile(member)
            body = handle.read() if handle is not None else b""
            entries.append((path, member, body))
    folders = {p for path, _, _ in entries for p in path.parents if p != PurePosixPath(".")}
    out.addfile(_info(f"vendor/{root}", directory=True))
    for folder in sorted(folders - {PurePosixPath(root)}):
        out.addfile(_info(f"vendor/{folder}", directory=True))
    for path, member, body in sorted(entries, key=lambda e: e[0]):
        executable = bool(member.mode & 0o100)
        out.addfile(
            _info(f"vendor/{path}", size=len(body), executable=executable), io.BytesIO(body)
        )
    # Every file came from the archive whose digest is `package`: no per-file list needed.
    checksum = json.dumps({"files": {}, "package": crate.checksum}).encode()
    out.addfile(
        _info(f"vendor/{root}/.cargo-checksum.json", size=len(checksum)), io.BytesIO(checksum)
    )


def _add_git_dependencies(out: tarfile.TarFile, tree: Path, registry: set[str]) -> None:
    label = f"cargo vendor output {tree.name}"
    check = MemberCheck(CONTAINER_OUTPUT_LIMITS, label=label, stored_bytes=None)
    with reading_tar(tree, label=label, limits=CONTAINER_OUTPUT_LIMITS) as tar:
        members = sorted(
            ((check.admit(m), m) for m in tar),
            key=lambda pair: pair[0],
        )
        for path, member in members:
            if len(path.parts) < 2 or path.parts[0] != "vendor" or path.parts[1] in registry:
                continue  # registry crates come from their checked archives, never from here
            if member.isdir():
                out.addfile(_info(path.as_posix(), directory=True))
                continue
            handle = tar.extractfile(member)
            body = handle.read() if handle is not None else b""
            executable = bool(member.mode & 0o100)
            out.addfile(
                _info(path.as_posix(), size=len(body), executable=executable), io.BytesIO(body)
            )


def share_checked_crates(
    source_cache: Path, dest_cache: Path, crates: Iterable[LockedCrate]
) -> int:
    """Copy into `dest_cache`'s store each of `crates` that `source_cache`'s store holds
    and that matches Cargo.lock's checksum; how many were copied.

    A second, independent builder may take these and nothing else from the first one's
    cache: Cargo.lock, not the cache, vouches for their bytes (each is checked here and
    again before every use), so they are what crates.io would serve it. A crate that does
    not match is left behind (the second build downloads it itself)."""
    store = store_dir(dest_cache)
    copied = 0
    for crate in crates:
        target = crate_file(dest_cache, crate)
        if target.is_file():
            continue
        try:
            data = verified_crate(source_cache, crate)
        except CacheCorruptError:
            continue
        if data is None:
            continue
        store.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.partial")
        partial.write_bytes(data)
        partial.replace(target)
        copied += 1
    return copied

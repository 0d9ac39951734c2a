"""The release's user-facing archives: `<artifact folder>.tar.xz`, one per target.

Each holds a top folder of the artifact's name with its binaries (0755) and the crate's
README/LICENSE/COPYING/CHANGELOG files (0644) as the locked source snapshot has them. The
bytes depend on nothing but those files and SOURCE_DATE_EPOCH: PAX tar, sorted names, fixed
mtime, uid/gid 0 without owner names, xz at a fixed preset (an xz stream has no timestamp),
so a reproduction packs the same archive bytes.
"""

from __future__ import annotations

import hashlib
import io
import lzma
import tarfile
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

ARCHIVE_SUFFIX = ".tar.xz"
XZ_PRESET = 6  # fixed: another preset gives other bytes
DOC_PREFIXES = ("readme", "license", "licence", "copying", "changelog")


def archive_name(artifact_folder: str) -> str:
    """tinyllm-0.1.0-linux-x86_64-cpu-v3 -> tinyllm-0.1.0-linux-x86_64-cpu-v3.tar.xz"""
    return artifact_folder + ARCHIVE_SUFFIX


def archive_folder(name: str) -> str | None:
    """The artifact folder an archive's file name belongs to; None for any other name."""
    return name.removesuffix(ARCHIVE_SUFFIX) if name.endswith(ARCHIVE_SUFFIX) else None


def crate_docs(source_archive: bytes, prefix: str = "src") -> list[tuple[str, bytes]]:
    """The crate's top-level README*/LICENSE*/COPYING*/CHANGELOG* files from the source
    snapshot (a tar of our own making, under `prefix/`); plain files only, not links."""
    found = []
    with tarfile.open(fileobj=io.BytesIO(source_archive), mode="r:") as tar:
        for member in tar:
            path = PurePosixPath(member.name)
            if len(path.parts) != 2 or path.parts[0] != prefix or not member.isfile():
                continue
            if path.name.lower().startswith(DOC_PREFIXES):
                handle = tar.extractfile(member)
                if handle is not None:
                    found.append((path.name, handle.read()))
    return sorted(found)


def _member(
    name: str, *, size: int, mode: int, mtime: int, directory: bool = False
) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE if directory else tarfile.REGTYPE
    info.size = 0 if directory else size
    info.mode = mode
    info.mtime = mtime
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def write_archive(
    dest: Path,
    *,
    top: str,
    binaries: Sequence[Path],
    docs: Sequence[tuple[str, bytes]],
    mtime: int,
) -> Path:
    """Pack `binaries` and `docs` (name, bytes) under `top/` into the .tar.xz `dest`.
    A doc named like a binary is left out: the binary is what the archive is for."""
    names = {binary.name for binary in binaries}
    entries: list[tuple[str, Path | bytes]] = [(b.name, b) for b in binaries]
    entries += [(name, data) for name, data in docs if name not in names]
    with (
        dest.open("wb") as raw,
        lzma.LZMAFile(
            raw, "w", format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=XZ_PRESET
        ) as xz,
        tarfile.open(fileobj=xz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        tar.addfile(_member(top, size=0, mode=0o755, mtime=mtime, directory=True))
        for name, content in sorted(entries, key=lambda entry: entry[0]):
            if isinstance(content, Path):
                size = content.stat().st_size
                info = _member(f"{top}/{name}", size=size, mode=0o755, mtime=mtime)
                with content.open("rb") as handle:
                    tar.addfile(info, handle)
            else:
                info = _member(f"{top}/{name}", size=len(content), mode=0o644, mtime=mtime)
                tar.addfile(info, io.BytesIO(content))
    dest.chmod(0o644)  # published files are for everyone to read
    return dest


def archived_files(archive: Path) -> dict[str, tuple[int, str]]:
    """name (below the top folder) -> (mode, sha256) of an archive's plain files, for
    `verify`; only files one level under a top folder are accepted."""
    try:
        return _archived_files(archive)
    except (tarfile.TarError, lzma.LZMAError, EOFError) as exc:  # truncated or not an xz tar
        raise ValueError(f"{archive.name} cannot be read: {exc}") from exc


def _archived_files(archive: Path) -> dict[str, tuple[int, str]]:
    found: dict[str, tuple[int, str]] = {}
    with tarfile.open(archive, mode="r:xz") as tar:
        for member in tar:
            path = PurePosixPath(member.name)
            if member.isdir() and len(path.parts) == 1:
                continue
            if not member.isfile() or len(path.parts) != 2 or ".." in path.parts:
                raise ValueError(f"{archive.name}: unexpected entry {member.name!r}")
            digest = hashlib.sha256()
            handle = tar.extractfile(member)
            while handle is not None and (chunk := handle.read(1 << 20)):
                digest.update(chunk)
            found[path.name] = (member.mode, digest.hexdigest())
    return found

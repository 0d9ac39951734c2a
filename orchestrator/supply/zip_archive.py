"""The `.zip` twin of a target's .tar.xz, written when `archive.formats` lists "zip".

Deterministic like the tar: the same members (supply/archives.py's `archive_members`) in
sorted order, every time stamp SOURCE_DATE_EPOCH in DOS form (which cannot go below
1980-01-01, nor above 2107), Unix modes 0755/0644 in the external attributes, deflate at a
fixed level, no extra fields (no extended timestamps, no uid/gid), no comment.
"""

from __future__ import annotations

import functools
import stat
import time
import zipfile
import zlib
from collections.abc import Sequence
from pathlib import Path

from orchestrator.supply.archives import archive_members, hashed_files, member_folders

DEFLATE_LEVEL = 9  # fixed: another level gives other bytes
_UNIX = 3  # the "version made by" system whose external attributes hold st_mode
_MSDOS_DIRECTORY = 0x10
_DOS_EPOCH = 315532800  # 1980-01-01T00:00:00Z
_DOS_LAST = 4354819198  # 2107-12-31T23:59:58Z
# A zip's entries are read into memory by `verify` only once its signature checked; still,
# a signed archive with absurd sizes is refused rather than read.
_MAX_ENTRIES = 100_000


def dos_time(epoch: int) -> tuple[int, int, int, int, int, int]:
    """SOURCE_DATE_EPOCH as a zip entry's date_time (UTC), clamped to what DOS time holds."""
    moment = time.gmtime(min(max(epoch, _DOS_EPOCH), _DOS_LAST))
    return (
        moment.tm_year,
        moment.tm_mon,
        moment.tm_mday,
        moment.tm_hour,
        moment.tm_min,
        moment.tm_sec,
    )


def _entry(name: str, *, mode: int, when: tuple[int, int, int, int, int, int]) -> zipfile.ZipInfo:
    directory = name.endswith("/")
    info = zipfile.ZipInfo(name, date_time=when)
    info.create_system = _UNIX
    kind = stat.S_IFDIR if directory else stat.S_IFREG
    info.external_attr = ((kind | mode) << 16) | (_MSDOS_DIRECTORY if directory else 0)
    info.compress_type = zipfile.ZIP_STORED if directory else zipfile.ZIP_DEFLATED
    info.extra = b""
    info.comment = b""
    return info


def write_zip(
    dest: Path,
    *,
    top: str,
    binaries: Sequence[Path],
    docs: Sequence[tuple[str, bytes]],
    mtime: int,
    extras: Sequence[tuple[str, bytes]] = (),
) -> Path:
    """Pack the same members as the .tar.xz under `top/` into the zip `dest`."""
    members = archive_members(binaries, docs, extras)
    when = dos_time(mtime)
    entries: list[tuple[str, bytes | None, int]] = [(f"{top}/", None, 0o755)]
    entries += [(f"{top}/{folder}/", None, 0o755) for folder in member_folders(members)]
    entries += [(f"{top}/{m.path}", m.data(), m.mode) for m in members]
    with zipfile.ZipFile(dest, "w") as archive:
        for name, data, mode in sorted(entries, key=lambda entry: entry[0]):
            info = _entry(name, mode=mode, when=when)
            if data is None:
                archive.writestr(info, b"")
            else:
                archive.writestr(info, data, compresslevel=DEFLATE_LEVEL)
    dest.chmod(0o644)  # published files are for everyone to read
    return dest


def zipped_files(archive: Path) -> dict[str, tuple[int, str]]:
    """path (below the top folder) -> (mode, sha256) of a zip's plain files, for `verify`;
    as archives.py's `archived_files`: one top folder, no `..`, no links."""
    try:
        with zipfile.ZipFile(archive) as bundle:
            infos = bundle.infolist()
            if len(infos) > _MAX_ENTRIES:
                raise ValueError(f"{archive.name}: more than {_MAX_ENTRIES} entries")
            entries = (
                (
                    info.filename.rstrip("/"),
                    info.is_dir(),
                    stat.S_ISREG(info.external_attr >> 16),
                    stat.S_IMODE(info.external_attr >> 16),
                    functools.partial(bundle.open, info),
                )
                for info in infos
            )
            return hashed_files(archive.name, entries)
    except (
        zipfile.BadZipFile,
        zipfile.LargeZipFile,
        zlib.error,
        EOFError,
        NotImplementedError,
    ) as exc:
        raise ValueError(f"{archive.name} cannot be read: {exc}") from exc

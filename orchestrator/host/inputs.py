"""`[train] inputs`: files and folders outside the crate that runs of the binary read.

Each is packed as the sources are (sorted names, fixed times, owners and modes), so its
digest names its content alone; the archive unpacks at /build to inputs/<name>. A lockfile
pins the digests and the vault keeps the archives: `reproduce` unpacks them with every
entry checked (`unpack_locked_inputs`) and packs them again here, so the bytes that reach a
container are always ones this module wrote.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from orchestrator.errors import SourceError
from orchestrator.host.archive import ArchiveLimits, safe_extract
from orchestrator.host.packing import normalise_member, pack_tree
from orchestrator.model.hashing import sha256_bytes
from orchestrator.model.layout import BUILDER_UID
from orchestrator.plan.runs import TrainInput

# Independent of the commit: an input's digest changes only when its bytes do.
INPUT_MTIME = 315532800  # 1980-01-01, as zip and the sources outside git
INPUT_LIMITS = ArchiveLimits(max_entries=100_000, max_total_bytes=64 << 30)


def pack_input(path: Path, name: str) -> TrainInput:
    """One input as a deterministic tar: inputs/<name> (a file) or inputs/<name>/... (a
    folder of plain files and folders)."""
    if path.is_dir():
        archive = pack_tree(path, prefix=f"inputs/{name}", mtime=INPUT_MTIME, uid=BUILDER_UID)
    elif path.is_file():
        archive = _single_file(path, name)
    else:
        raise SourceError(
            f"train.inputs: {path} does not exist (or is not a file or folder)",
            hint="Inputs are paths relative to orchestrator.toml; fix the path or remove it.",
        )
    return TrainInput(name, archive, sha256_bytes(archive))


def _single_file(path: Path, name: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tar.gettarinfo(str(path), arcname=f"inputs/{name}")
        normalise_member(info, mtime=INPUT_MTIME, uid=BUILDER_UID)
        with path.open("rb") as handle:
            tar.addfile(info, handle)
    return buffer.getvalue()


def pack_inputs(train_inputs: Sequence[Path]) -> tuple[TrainInput, ...]:
    """Every configured input (Options.train_inputs), in the config's order (names are
    unique: config/resolve/checks.py)."""
    return tuple(pack_input(path, path.name) for path in train_inputs)


def unpack_locked_inputs(
    archives: Mapping[str, Path], configured: tuple[Path, ...], dest: Path
) -> tuple[Path, ...]:
    """Where `reproduce` finds the inputs the config names: unpacked from the locked
    archives (name -> verified vault blob) into `dest`, every entry checked and each
    archive's entries confined to inputs/<its name>. Returns the paths in config order."""
    found: list[Path] = []
    for path in configured:
        blob = archives.get(path.name)
        if blob is None:
            raise SourceError(
                f"the config reads the input {path.name!r}, but the lock pins no such input",
                hint="The lockfile and its config disagree: use an unmodified release.lock.",
            )
        unpacked = dest / path.name
        with blob.open("rb") as handle:
            written = safe_extract(
                handle, unpacked, limits=INPUT_LIMITS, label=f"locked input {path.name}"
            )
        stray = [w for w in written if w.parts[:2] != ("inputs", path.name)]
        if stray:
            raise SourceError(
                f"the locked input {path.name!r} holds {stray[0]}, outside inputs/{path.name}"
            )
        found.append(unpacked / "inputs" / path.name)
    return tuple(found)

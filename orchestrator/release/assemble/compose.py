"""After a release's targets: one more folder per flavor with two or more x86-64 levels,
`<crate>-<version>-linux-x86_64-<flavor>-auto/`, whose `bin/<binary>` is the dispatcher
(execute/ship/dispatcher.c) and whose `libexec/<binary>/<binary>-<level>` are the level targets'
shipped binaries, byte-equal, beside the crate's README and licences as every archive
carries them; compose.json records all of them, and `<folder>.tar.xz` packs it. A level
that the gate counted no faster than the one below it is left out (model/verdict/level_map.py):
its CPUs run the lower one, and compose.json says why, with the counts.

The folder is built from published level folders only, so it needs no build of its own: the
dispatcher is compiled once per (toolchain image, source) and kept in the cache, sealed
(release/assemble/dispatcher_cache.py). Its files
are listed one by one in the release's SHA256SUMS (release/run.py vouches for them) and its
archive is a provenance subject; `verify` checks the copies against the level folders.
"""

from __future__ import annotations

import hashlib
import lzma
import shutil
import tarfile
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from orchestrator.errors import OrchestratorError
from orchestrator.flavors import get_flavor
from orchestrator.model.binaries.dispatch import DISPATCH_LEVELS, dispatch_levels, libexec_path
from orchestrator.model.documents.compose_record import (
    AUTO_SUFFIX,
    COMPOSE_JSON,
    ComposedLevel,
    ComposeRecord,
    DispatcherInfo,
    composed_digests,
)
from orchestrator.model.documents.records import BuildManifest, read_record, record_text
from orchestrator.model.hashing import sha256_bytes, sha256_file
from orchestrator.model.layout import artifact_dir_name
from orchestrator.model.verdict.level_map import LevelCounts, map_levels, shipped_cycles
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.release.assemble.dispatcher_cache import cached_dispatcher
from orchestrator.release.targets.release_view import ReleaseView
from orchestrator.release.targets.target import TargetResult
from orchestrator.runtime.api import EngineApi
from orchestrator.supply.archive_docs import crate_docs
from orchestrator.supply.archives import Member, archive_name, write_members
from orchestrator.supply.attest import SIGNATURE_SUFFIX, Signer
from orchestrator.supply.chain import SignedChain

DISPATCH_ARCH = "x86_64"  # the dispatcher is x86_64 code: cpuid, xgetbv


@dataclass(frozen=True)
class ComposeGroup:
    """One folder to compose: a flavor's built levels, lowest first."""

    flavor: str
    folder: str  # <crate>-<version>-linux-x86_64-<flavor>-auto
    levels: tuple[tuple[str, str], ...]  # (rustc's CPU name, the level's artifact folder)
    image: str  # the flavor's toolchain image: the dispatcher is compiled with its gcc
    # the crate's README, licences and what they name (supply/archive_docs.py), as each
    # level's archive carries them: the snapshot every level was built from
    docs: tuple[tuple[str, bytes], ...] = ()


def auto_folder(release: ReleaseView, flavor: str) -> str:
    module = get_flavor(flavor)
    base = artifact_dir_name(release.binary, release.version, module.arch, module.artifact_flavor)
    return base + AUTO_SUFFIX


def compose_groups(
    release: ReleaseView, built: Sequence[tuple[TargetResult, BuildPlan]]
) -> tuple[list[ComposeGroup], list[str]]:
    """The folders to compose (flavors with `dispatch` on and two or more x86-64 levels
    published), and the -auto folders of this run's other x86-64 flavors (stale: removed)."""
    by_flavor: dict[str, list[tuple[TargetResult, BuildPlan]]] = {}
    for result, plan in built:
        if plan.arch == DISPATCH_ARCH:
            by_flavor.setdefault(plan.flavor, []).append((result, plan))
    groups, stale = [], []
    for flavor, items in by_flavor.items():
        folder = auto_folder(release, flavor)
        published = {
            result.target.level: plan
            for result, plan in items
            if result.status in ("ok", "cached") and result.target.level in DISPATCH_LEVELS
        }
        levels = dispatch_levels(published)
        if not release.dispatches(flavor) or len(levels) < 2:
            stale.append(folder)
            continue
        chosen = tuple((level, published[level].artifact_dir) for level in levels)
        lowest = published[levels[0]]
        docs = tuple(doc for doc in crate_docs(lowest.source.archive) if _beside_bin(doc[0]))
        groups.append(ComposeGroup(flavor, folder, chosen, lowest.image.reference, docs))
    return groups, stale


def _beside_bin(path: str) -> bool:
    """A doc's path that is none of the composed folder's own (bin/, libexec/, compose.json)."""
    return path != COMPOSE_JSON and PurePosixPath(path).parts[0] not in ("bin", "libexec")


def compose_record(
    release: ReleaseView, group: ComposeGroup, release_dir: Path, dispatcher: DispatcherInfo
) -> ComposeRecord:
    """compose.json of `group`, from the level folders' build.json (their shipped binaries,
    and the gate's counts that decide which levels ship: model/verdict/level_map.py)."""
    built: dict[str, ComposedLevel] = {}
    counts: list[LevelCounts] = []
    names: list[str] | None = None
    for level, target in group.levels:
        manifest = read_record(release_dir / target / "build.json", BuildManifest)
        shipped = {b.file: b.sha256 for b in manifest.artifact.binaries}
        order = [b.file for b in manifest.artifact.binaries]
        if names is not None and order != names:
            raise ComposeError(
                f"{target} ships {', '.join(order)}, another level ships {', '.join(names)}"
            )
        names = order
        built[level] = ComposedLevel(target=target, binaries=shipped)
        counts.append(shipped_cycles(level, target, manifest.gate))
    decisions = map_levels(counts)
    return ComposeRecord(
        name=release.binary,
        version=release.version,
        flavor=group.flavor,
        binaries=names or [],
        levels={level: built[level] for level, decision in decisions.items() if decision.kept},
        dispatcher=dispatcher,
        docs={path: sha256_bytes(data) for path, data in group.docs},
        decisions=decisions,
    )


def composed_files(record: ComposeRecord, release_dir: Path) -> list[tuple[str, Path]]:
    """(path in the composed folder, the level folder's file) of every libexec/ binary;
    bin/<binary> is the dispatcher itself."""
    files = []
    for binary in record.binaries:
        for level, source in record.levels.items():
            files.append(
                (libexec_path(binary, level).as_posix(), release_dir / source.target / binary)
            )
    return files


class ComposeError(Exception):
    """The level folders cannot be composed into one: only ever a warning (the level
    targets are published either way), so it carries no exit code."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def composed_members(
    record: ComposeRecord,
    release_dir: Path,
    dispatcher: bytes,
    docs: Sequence[tuple[str, bytes]] = (),
) -> list[Member]:
    """Every file of the composed folder (and of its archive), with its bytes: the
    dispatcher, the levels' binaries, compose.json and the crate's `docs`."""
    members = [Member(f"bin/{b}", dispatcher, executable=True) for b in record.binaries]
    for path, source in composed_files(record, release_dir):
        members.append(Member(path, source.read_bytes(), executable=True))
    members.append(Member(COMPOSE_JSON, record_text(record).encode(), executable=False))
    return members + [Member(path, data, executable=False) for path, data in docs]


def composed_current(
    release_dir: Path, folder: str, members: Sequence[Member], *, mtime: int, chain: SignedChain
) -> bool:
    """Whether the published folder and its archive hold exactly `members` (the archive with
    every entry at `mtime`), all vouched for by the release's signed chain: then composing
    again would write the same bytes, and nothing is written (a no-op release)."""
    wanted = {m.path: (m.mode, sha256_bytes(m.data())) for m in members}
    top = release_dir / folder
    if not top.is_dir() or top.is_symlink():
        return False
    present = {p.relative_to(top).as_posix() for p in top.rglob("*") if not p.is_dir()}
    archive = archive_name(folder)
    signed = [*(f"{folder}/{path}" for path in wanted), archive, archive + SIGNATURE_SUFFIX]
    if present != set(wanted) or not all(chain.matches(name) for name in signed):
        return False
    if any(chain.files[f"{folder}/{path}"] != digest for path, (_, digest) in wanted.items()):
        return False
    return packed_files(release_dir / archive, folder) == (wanted, {mtime})


def packed_files(archive: Path, top: str) -> tuple[dict[str, tuple[int, str]], set[int]]:
    """path below `top` -> (mode, sha256) of a .tar.xz's plain files, and the mtimes of all
    its entries; nothing (and no mtime) when it is not one archive under `top`."""
    files: dict[str, tuple[int, str]] = {}
    mtimes: set[int] = set()
    try:
        with tarfile.open(archive, mode="r:xz") as tar:
            for member in tar:
                mtimes.add(int(member.mtime))
                if member.name == top and member.isdir():
                    continue
                path = member.name.removeprefix(f"{top}/")
                if path == member.name or (not member.isfile() and not member.isdir()):
                    return {}, set()
                handle = tar.extractfile(member) if member.isfile() else None
                if handle is not None:
                    files[path] = (member.mode, hashlib.sha256(handle.read()).hexdigest())
    except (OSError, tarfile.TarError, lzma.LZMAError, EOFError):
        return {}, set()
    return files, mtimes


def write_composed(
    release_dir: Path,
    folder: str,
    record: ComposeRecord,
    dispatcher: bytes,
    *,
    mtime: int,
    docs: Sequence[tuple[str, bytes]] = (),
) -> list[str]:
    """Write the composed folder and its .tar.xz into `release_dir`, replacing any earlier
    one whole, with the crate's `docs` beside bin/ (the ones compose.json records); the
    release-relative names written (the folder, the archive)."""
    staging = Path(tempfile.mkdtemp(prefix=".compose-", dir=release_dir))
    try:
        top = staging / folder
        members = composed_members(record, release_dir, dispatcher, docs)
        expected = composed_digests(record) | record.docs
        for member in members:
            data = member.data()
            if member.path in expected and sha256_bytes(data) != expected[member.path]:
                raise ComposeError(
                    f"{folder}/{member.path}: not the file compose.json records (a level's "
                    "binary changed after it was published?)"
                )
            target = top / member.path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            target.chmod(member.mode)
        archive = write_members(
            staging / archive_name(folder), top=folder, members=members, mtime=mtime
        )
        published = release_dir / folder
        if published.exists():
            shutil.rmtree(published)
        top.replace(published)
        archive.replace(release_dir / archive.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return [folder, archive_name(folder)]


def remove_composed(release_dir: Path, folder: str) -> bool:
    """Remove a composed folder and its archive (with signature); whether one was there."""
    found = False
    published = release_dir / folder
    if published.is_dir() and (published / COMPOSE_JSON).is_file():
        shutil.rmtree(published)
        found = True
    for name in (archive_name(folder), archive_name(folder) + SIGNATURE_SUFFIX):
        if (release_dir / name).is_file():
            (release_dir / name).unlink()
            found = True
    return found


def compose_release(
    release: ReleaseView,
    release_dir: Path,
    built: Sequence[tuple[TargetResult, BuildPlan]],
    engine: EngineApi | None,
    *,
    signer: Signer,
    announce: Callable[[str], None],
    carried: Mapping[str, tuple[DispatcherInfo, bytes]] | None = None,
) -> list[str]:
    """Compose every -auto folder of this run (and remove stale ones); the release-relative
    names written, for the release index to sign. The dispatcher is the one the level
    folders `carried` (release assemble, checked), else this cache's or compiled by
    `engine` (None: no Engine here). A folder that cannot be composed is a
    warning, never a failed release: the level targets are published either way. A folder
    whose published files and archive are already what composing writes is left as it is
    (not in the names returned)."""
    groups, stale = compose_groups(release, built)
    chain = SignedChain.read(release_dir, signer.key.public)
    for folder in stale:
        if release_dir.is_dir() and remove_composed(release_dir, folder):
            announce(f"  removed {folder}: dispatch is off or fewer than two levels built")
    written: list[str] = []
    for group in groups:
        try:
            found = (carried or {}).get(group.image) or (
                None
                if engine is None
                else cached_dispatcher(
                    engine,
                    group.image,
                    release.cache_dir,
                    lambda _line: None,
                    lambda line: announce(f"warning: {line}"),
                )
            )
        except OrchestratorError as exc:  # a failed compile: the level targets stand alone
            remove_composed(release_dir, group.folder)
            announce(f"warning: {group.folder} not composed: {exc.message}")
            continue
        if found is None:
            remove_composed(release_dir, group.folder)
            why = (
                "the level folders carry no dispatcher and there is no Engine here"
                if engine is None
                else f"no dispatcher built in {group.image} and the Engine lacks that image "
                "(build a level again)"
            )
            announce(f"warning: {group.folder} not composed: {why}")
            continue
        info, data = found
        try:
            record = compose_record(release, group, release_dir, info)
            members = composed_members(record, release_dir, data, group.docs)
            if composed_current(
                release_dir, group.folder, members, mtime=release.source_date_epoch, chain=chain
            ):
                continue  # the same bytes are published and signed: nothing to write
            names = write_composed(
                release_dir,
                group.folder,
                record,
                data,
                mtime=release.source_date_epoch,
                docs=group.docs,
            )
        except ComposeError as exc:
            announce(f"warning: {group.folder} not composed: {exc.message}")
            continue
        archive = release_dir / archive_name(group.folder)
        comment = (
            f"orchestrator: {archive.name} {release.binary} {release.version} "
            f"compose:{sha256_file(release_dir / group.folder / COMPOSE_JSON)[:16]}"
        )
        written += [*names, signer.sign(archive, trusted_comment=comment).name]
        levels = ", ".join(record.levels)
        announce(f"  composed {group.folder}: dispatcher ({info.size} bytes) over {levels}")
        for level, decision in record.decisions.items():
            if not decision.kept:
                announce(f"    {level} {decision.reason}")
    return written

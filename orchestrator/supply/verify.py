"""`orchestrator verify`: every signature, checksum, provenance subject and SBOM of a release.

A failed check is a VerificationError (exit 48: the files are not what was signed); a
folder without SHA256SUMS is not a release at all, a NotAReleaseError (exit 56).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import NotAReleaseError, OrchestratorError
from orchestrator.model.binaries.dispatch import dispatch_levels
from orchestrator.model.binaries.elf import loader_needs
from orchestrator.model.documents.compose_record import (
    COMPOSE_JSON,
    ComposeRecord,
    composed_digests,
)
from orchestrator.model.documents.records import BuildManifest, PortabilityInfo, read_record
from orchestrator.model.documents.run_logs import is_release_log
from orchestrator.model.hashing import sha256_file
from orchestrator.model.printable import printable
from orchestrator.model.verdict.level_map import map_levels, shipped_cycles
from orchestrator.supply.archives import (
    ARCHIVE_SUFFIX,
    ZIP_SUFFIX,
    archive_name,
    archived_files,
)
from orchestrator.supply.index_files import (
    CHECKSUMS,
    INDEX_FILES,
    PROVENANCE,
    PUBLIC_KEY,
    SIGNATURE_SUFFIX,
    read_checksums,
)
from orchestrator.supply.installer import INSTALLER
from orchestrator.supply.minisign import PublicKey, VerificationError, dsse_verify, verify_file
from orchestrator.supply.provenance import PAYLOAD_TYPE, PREDICATE_TYPE, STATEMENT_TYPE
from orchestrator.supply.sbom import SBOM_FILE, sbom_binaries, sbom_subject
from orchestrator.supply.zip_archive import zipped_files

__all__ = [
    "Check",
    "NotAReleaseError",
    "Verifier",
    "verify_release",
]


@dataclass(frozen=True)
class Check:
    file: str
    check: str
    ok: bool
    detail: str


class Verifier:
    def __init__(self, release_dir: Path, key: PublicKey) -> None:
        self.root = release_dir
        self.key = key
        self.checks: list[Check] = []

    def _record(self, file: Path, check: str, run: Callable[[], str]) -> bool:
        name = (
            file.relative_to(self.root).as_posix() if file.is_relative_to(self.root) else str(file)
        )
        try:
            detail = run()
        except (
            OrchestratorError,
            OSError,
            ValueError,
            LookupError,
            TypeError,
            AttributeError,
            RecursionError,  # JSON nested past the parser's stack: a forged file, not a bug
        ) as exc:
            # a file of the wrong shape (a list for an object...) fails its check, no traceback
            message = exc.message if isinstance(exc, OrchestratorError) else str(exc)
            self.checks.append(Check(name, check, False, message))
            return False
        self.checks.append(Check(name, check, True, detail))
        return True

    def signature(self, path: Path) -> bool:
        def run() -> str:
            signature = path.with_name(path.name + SIGNATURE_SUFFIX)
            if not signature.is_file():
                raise VerificationError(f"missing {signature.name}")
            return verify_file(path, signature.read_text(), self.key).trusted_comment

        return self._record(path, "signature", run)

    def checksums(self, listing: Path) -> None:
        def run() -> str:
            listed = read_checksums(listing)
            for name, digest in listed.items():
                target = listing.parent / name
                if ".." in Path(name).parts or Path(name).is_absolute():
                    raise VerificationError(f"unsafe path {name!r} in {listing.name}")
                if target.is_symlink() or not target.is_file():
                    raise VerificationError(
                        f"{printable(name)} is listed but missing (or not a plain file)"
                    )
                if sha256_file(target) != digest:
                    raise VerificationError(
                        f"{printable(name)}: sha256 differs from {listing.name}"
                    )
            if not listed:
                raise VerificationError(f"{listing.name} lists nothing")
            return f"{len(listed)} files match"

        self._record(listing, "checksums", run)

    def coverage(self, folders: list[str]) -> None:
        """Every file of the release is reached from the signed SHA256SUMS: listed there, or
        listed by a folder's SHA256SUMS that is listed there. The logs/ records of how the
        builds went (model/documents/run_logs.py) are counted as unsigned; anything else was
        added."""

        def run() -> str:
            covered = set(_safe_listing(self.root / CHECKSUMS))
            for folder in folders:
                inner = f"{folder}/{CHECKSUMS}"
                if inner not in covered:
                    raise VerificationError(f"{inner} is not listed in the signed {CHECKSUMS}")
                covered |= {f"{folder}/{name}" for name in _safe_listing(self.root / inner)}
            unlisted, logs = [], 0
            for path in sorted(self.root.rglob("*")):
                name = path.relative_to(self.root).as_posix()
                if path.is_dir() and not path.is_symlink():
                    continue
                if name in covered or name in INDEX_FILES or _is_listing(name):
                    continue
                if is_release_log(name) and path.is_file() and not path.is_symlink():
                    logs += 1  # how the build went: unsigned by design, named below
                else:
                    unlisted.append(name)
            if unlisted:
                shown = ", ".join(map(printable, unlisted[:10]))
                shown += " ..." if len(unlisted) > 10 else ""
                raise VerificationError(
                    f"{len(unlisted)} file(s) that no signed checksum lists: {shown}"
                )
            unsigned = f"; {logs} log file(s) under logs/ are not signed" if logs else ""
            return f"all {len(covered)} files are under the signature of {CHECKSUMS}{unsigned}"

        self._record(self.root / CHECKSUMS, "coverage", run)

    def provenance(self, path: Path, binaries: dict[str, str]) -> None:
        def run() -> str:
            envelope = json.loads(path.read_text())
            if envelope.get("payloadType") != PAYLOAD_TYPE:
                raise VerificationError("unexpected DSSE payload type")
            statement = json.loads(dsse_verify(envelope, self.key))
            if (
                statement.get("_type") != STATEMENT_TYPE
                or statement.get("predicateType") != PREDICATE_TYPE
            ):
                raise VerificationError("not an in-toto v1 statement with SLSA v1 provenance")
            subjects = {s["name"]: s["digest"]["sha256"] for s in statement["subject"]}
            for name, digest in subjects.items():
                target = self.root / name
                if not target.is_file() or sha256_file(target) != digest:
                    raise VerificationError(f"subject {name} does not match the file")
            missing = sorted(set(binaries) - set(subjects))
            if missing:
                raise VerificationError(f"artifacts missing from the provenance: {missing}")
            return f"DSSE signature valid; {len(subjects)} subjects match"

        self._record(path, "provenance", run)

    def sbom(self, path: Path, folder: str, binaries: list[Path]) -> None:
        def run() -> str:
            artifact, _digest = sbom_subject(path.read_text())
            if artifact != folder:
                raise VerificationError(f"SBOM describes {artifact}, not {folder}")
            recorded = sbom_binaries(path.read_text())
            for binary in binaries:
                if binary.name not in recorded:
                    raise VerificationError(f"SBOM does not list {binary.name}")
                if recorded[binary.name] != sha256_file(binary):
                    raise VerificationError(f"SBOM's hash is not {binary.name}'s")
            components = len(json.loads(path.read_text()).get("components", []))
            names = ", ".join(b.name for b in binaries)
            return f"describes {names} ({components} components)"

        self._record(path, "sbom", run)

    def archive(self, path: Path, binaries: list[Path]) -> None:
        """The archive holds exactly the folder's binaries (executable), and docs beside."""

        def run() -> str:
            read = zipped_files if path.name.endswith(ZIP_SUFFIX) else archived_files
            files = read(path)
            for binary in binaries:
                mode, digest = files.get(binary.name, (0, ""))
                if digest != sha256_file(binary):
                    raise VerificationError(f"{binary.name} in the archive is not the signed one")
                if mode != 0o755:
                    raise VerificationError(f"{binary.name} is mode {mode:o} in the archive")
            extra = sorted(set(files) - {b.name for b in binaries})
            executable = [name for name in extra if files[name][0] & 0o111]
            if executable:
                raise VerificationError(f"executables the artifact lacks: {executable}")
            return f"{len(binaries)} binaries match the artifact; docs: {', '.join(extra)}"

        self._record(path, "archive", run)

    def glibc(self, binary: Path, portability: PortabilityInfo | None) -> None:
        """The binary's own ELF, read again: the glibc it needs is the one build.json
        recorded, and no newer than the floor it was built for (a build made before floors
        were recorded has nothing to re-check)."""
        if portability is None or portability.glibc_floor is None:
            return
        floor = portability.glibc_floor

        def run() -> str:
            needs = loader_needs(binary)
            recorded = portability.glibc_of(binary.name)
            if needs.glibc_max != recorded:
                raise VerificationError(
                    f"needs glibc {needs.glibc_max}, build.json says {recorded}"
                )
            above = [f"{s.name}@{s.version}" for s in needs.symbols_above(floor)]
            if needs.glibc_above(floor):
                raise VerificationError(
                    f"needs glibc {needs.glibc_max}, above its floor {floor}: "
                    + ", ".join(above[:8])
                )
            return f"needs glibc {needs.glibc_max} <= floor {floor}"

        self._record(binary, "glibc", run)

    def composed(self, folder: Path) -> None:
        """A composed -auto folder: bin/ holds the dispatcher compose.json records, each
        libexec/ binary is byte-equal to its level folder's signed binary, and the crate's
        documents beside them are the ones compose.json records."""

        def run() -> str:
            record = read_record(folder / COMPOSE_JSON, ComposeRecord)
            expected = composed_digests(record) | record.docs
            for level, source in record.levels.items():
                if Path(source.target).name != source.target or source.target == folder.name:
                    raise VerificationError(f"{level}: {source.target!r} is no level folder")
                manifest = read_record(self.root / source.target / "build.json", BuildManifest)
                shipped = {b.file: b.sha256 for b in manifest.artifact.binaries}
                if shipped != source.binaries:
                    raise VerificationError(
                        f"{level}: compose.json's binaries are not {source.target}'s"
                    )
                for binary, digest in shipped.items():
                    if sha256_file(self.root / source.target / binary) != digest:
                        raise VerificationError(f"{source.target}/{binary} is not its build's")
            left_out = _check_level_map(self.root, folder.name, record)
            present = {
                path.relative_to(folder).as_posix()
                for path in folder.rglob("*")
                if path.is_file() or path.is_symlink()
            } - {COMPOSE_JSON}
            if present != set(expected):
                extra, missing = sorted(present - set(expected)), sorted(set(expected) - present)
                raise VerificationError(f"files differ from compose.json: +{extra} -{missing}")
            for name, digest in sorted(expected.items()):
                path = folder / name
                if path.is_symlink() or sha256_file(path) != digest:
                    raise VerificationError(f"{name} is not the file compose.json records")
            levels = ", ".join(record.levels)
            copies = len(expected) - len(record.binaries) - len(record.docs)
            gone = f"; left out: {', '.join(left_out)}" if left_out else ""
            copied = f"{copies} {'copy' if copies == 1 else 'copies'} of {levels}"
            return f"dispatcher, {copied} and {len(record.docs)} documents{gone}"

        self._record(folder / COMPOSE_JSON, "composed", run)

    def composed_archive(self, archive: Path, folder: Path) -> None:
        """The composed folder's archive holds exactly its files, with their modes."""

        def run() -> str:
            files = archived_files(archive)
            on_disk = {
                path.relative_to(folder).as_posix(): (
                    path.stat().st_mode & 0o777,
                    sha256_file(path),
                )
                for path in folder.rglob("*")
                if path.is_file()
            }
            if files != on_disk:
                differ = sorted(set(files.items()) ^ set(on_disk.items()))
                raise VerificationError(f"differs from {folder.name}/: {differ[:4]}")
            return f"{len(files)} files match {folder.name}/"

        self._record(archive, "archive", run)


def _check_level_map(root: Path, folder: str, record: ComposeRecord) -> list[str]:
    """compose.json's kept and left-out levels are what the level folders' signed gate
    counts give (model/verdict/level_map.py), and the kept ones are exactly those it ships; the
    levels left out. A folder composed before levels were judged records none."""
    if not record.decisions:
        return []
    order = dispatch_levels(record.decisions)
    if len(order) != len(record.decisions):
        raise VerificationError(f"compose.json judges levels it cannot ship: {record.decisions}")
    counts = []
    for level in order:
        target = record.decisions[level].target
        if Path(target).name != target or target == folder:
            raise VerificationError(f"{level}: {target!r} is no level folder")
        manifest = read_record(root / target / "build.json", BuildManifest)
        counts.append(shipped_cycles(level, target, manifest.gate))
    if map_levels(counts) != record.decisions:
        raise VerificationError(
            "compose.json's kept and left-out levels are not what the level folders' gate "
            "counts give"
        )
    kept = {level: d.target for level, d in record.decisions.items() if d.kept}
    if kept != {level: source.target for level, source in record.levels.items()}:
        raise VerificationError("compose.json ships other levels than it kept")
    return [level for level in order if level not in kept]


def _safe_listing(listing: Path) -> list[str]:
    """The names a SHA256SUMS lists; none at all when it is missing or malformed (its own
    `checksums` check reports why)."""
    try:
        return list(read_checksums(listing))
    except (OSError, VerificationError):
        return []


def _is_listing(name: str) -> bool:
    """An artifact folder's SHA256SUMS: listed in the release's, checked by `coverage`."""
    parts = name.split("/")
    return len(parts) == 2 and parts[1] == CHECKSUMS


def verify_release(release_dir: Path, key_path: Path | None) -> tuple[list[Check], str]:
    """All checks of a release folder, and which key they were made against."""
    release_dir = release_dir.resolve()
    if not (release_dir / CHECKSUMS).is_file():
        raise NotAReleaseError(f"{release_dir} has no {CHECKSUMS}: not a release folder")
    shipped_key = release_dir / PUBLIC_KEY
    key_note = f"key {key_path}" if key_path else f"the release's own {PUBLIC_KEY} (integrity only)"
    verifier = Verifier(release_dir, PublicKey.load(key_path or shipped_key))
    verifier.signature(release_dir / CHECKSUMS)
    verifier.checksums(release_dir / CHECKSUMS)
    binaries: dict[str, str] = {}
    for folder in sorted(p for p in release_dir.iterdir() if (p / "build.json").is_file()):
        manifest = read_record(folder / "build.json", BuildManifest)  # RecordError names it
        shipped = [folder / b.file for b in manifest.artifact.binaries]
        for binary in shipped:
            binaries[f"{folder.name}/{binary.name}"] = folder.name
            verifier.signature(binary)
        verifier.checksums(folder / CHECKSUMS)
        verifier.sbom(folder / SBOM_FILE, folder.name, shipped)
        for binary in shipped:
            verifier.glibc(binary, manifest.portability)
        for suffix in (ARCHIVE_SUFFIX, ZIP_SUFFIX):
            archive = release_dir / archive_name(folder.name, suffix)
            if not archive.exists():  # releases made before archives have none; zip: asked
                continue
            binaries[archive.name] = folder.name  # a provenance subject too
            # Its contents are read only once it is known to be the signed file: a
            # stranger's archive could declare headers or sizes meant to exhaust the reader.
            if verifier.signature(archive):
                verifier.archive(archive, shipped)
    folders = sorted(set(binaries.values()))
    for folder in sorted(p for p in release_dir.iterdir() if (p / COMPOSE_JSON).is_file()):
        verifier.composed(folder)
        archive = release_dir / archive_name(folder.name)
        if archive.exists():
            binaries[archive.name] = folder.name  # a provenance subject, like the targets'
            if verifier.signature(archive):
                verifier.composed_archive(archive, folder)
    if (release_dir / INSTALLER).exists():
        verifier.signature(release_dir / INSTALLER)
    verifier.signature(release_dir / PROVENANCE)
    verifier.provenance(release_dir / PROVENANCE, binaries)
    verifier.coverage(folders)  # a composed folder's files are listed one by one
    return verifier.checks, key_note

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
from orchestrator.model.hashing import sha256_file
from orchestrator.model.records import BuildManifest, read_record
from orchestrator.supply.attest import CHECKSUMS, PROVENANCE, PUBLIC_KEY, SIGNATURE_SUFFIX
from orchestrator.supply.minisign import PublicKey, VerificationError, dsse_verify, verify_file
from orchestrator.supply.provenance import PAYLOAD_TYPE, PREDICATE_TYPE, STATEMENT_TYPE
from orchestrator.supply.sbom import SBOM_FILE, sbom_subject

__all__ = ["Check", "NotAReleaseError", "Verifier", "verify_release"]


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
        ) as exc:
            # a file of the wrong shape (a list for an object...) fails its check, no traceback
            message = exc.message if isinstance(exc, OrchestratorError) else str(exc)
            self.checks.append(Check(name, check, False, message))
            return False
        self.checks.append(Check(name, check, True, detail))
        return True

    def signature(self, path: Path) -> None:
        def run() -> str:
            signature = path.with_name(path.name + SIGNATURE_SUFFIX)
            if not signature.is_file():
                raise VerificationError(f"missing {signature.name}")
            return verify_file(path, signature.read_text(), self.key).trusted_comment

        self._record(path, "signature", run)

    def checksums(self, listing: Path) -> None:
        def run() -> str:
            count = 0
            for line in listing.read_text().splitlines():
                digest, _, name = line.partition("  ")
                target = listing.parent / name
                if ".." in Path(name).parts or Path(name).is_absolute():
                    raise VerificationError(f"unsafe path {name!r} in {listing.name}")
                if not target.is_file():
                    raise VerificationError(f"{name} is listed but missing")
                if sha256_file(target) != digest:
                    raise VerificationError(f"{name}: sha256 differs from {listing.name}")
                count += 1
            if count == 0:
                raise VerificationError(f"{listing.name} lists nothing")
            return f"{count} files match"

        self._record(listing, "checksums", run)

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

    def sbom(self, path: Path, folder: str, binary: Path) -> None:
        def run() -> str:
            artifact, digest = sbom_subject(path.read_text())
            if artifact != folder:
                raise VerificationError(f"SBOM describes {artifact}, not {folder}")
            if digest != sha256_file(binary):
                raise VerificationError("SBOM's hash is not the binary's")
            components = len(json.loads(path.read_text()).get("components", []))
            return f"describes {binary.name} ({components} components)"

        self._record(path, "sbom", run)


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
        binary = folder / manifest.artifact.file
        binaries[f"{folder.name}/{binary.name}"] = folder.name
        verifier.signature(binary)
        verifier.checksums(folder / CHECKSUMS)
        verifier.sbom(folder / SBOM_FILE, folder.name, binary)
    verifier.signature(release_dir / PROVENANCE)
    verifier.provenance(release_dir / PROVENANCE, binaries)
    return verifier.checks, key_note

"""supply/attest and supply/verify on a real release folder: sign it, check it, tamper with it.

`make_release` builds what `publish` leaves behind (an artifact folder with its binary,
signature, SBOM, build.json and SHA256SUMS) and then the release index, with a real key.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestrator.config.resolve.options import resolve
from orchestrator.errors import NotAReleaseError
from orchestrator.execute.ship.release_index import update_release_index
from orchestrator.host.staging import write_checksums
from orchestrator.model.documents.records import write_record
from orchestrator.supply import minisign
from orchestrator.supply.attest import (
    CHECKSUMS,
    PROVENANCE,
    PUBLIC_KEY,
    THROWAWAY_KEY,
    Signer,
    _atomic_write,
    artifact_comment,
    keygen,
    release_artifacts,
    resolve_signer,
)
from orchestrator.supply.minisign import (
    PublicKey,
    SecretKey,
    SigningError,
    dsse_sign,
    verify_file,
    write_key_pair,
)
from orchestrator.supply.provenance import PAYLOAD_TYPE
from orchestrator.supply.sbom import SBOM_FILE, build_sbom
from orchestrator.supply.verify import Check, verify_release

from .conftest import CARGO_TOML, plan_for
from .manifests import produced_manifest


@dataclass(frozen=True)
class Release:
    root: Path
    folder: str  # the artifact folder's name
    binary: str  # the binary's file name
    public: Path  # the publisher's public key file
    signer: Signer

    @property
    def artifact(self) -> Path:
        return self.root / self.folder


def make_release(base: Path) -> Release:
    """A signed release of one cpu artifact under base/artifacts/demo-1.2.3/."""
    project = base / "project"
    (project / "crate" / "src").mkdir(parents=True)
    (project / "crate" / "Cargo.toml").write_text(CARGO_TOML)
    (project / "crate" / "Cargo.lock").write_text("version = 4\n")
    (project / "crate" / "src" / "main.rs").write_text("fn main() {}\n")
    (project / "orchestrator.toml").write_text(
        '[package]\ncrate = "crate"\n[train]\nworkloads = [["--help"]]\n'
    )
    options = resolve(project / "orchestrator.toml", env={"SOURCE_DATE_EPOCH": "1700000000"})
    plan = plan_for(options)
    work = base / "work"
    work.mkdir()
    manifest = produced_manifest(options, plan, work)
    secret = SecretKey.generate()
    public = write_key_pair(secret, base / "keys" / "signing.key", None)
    signer = Signer(secret, throwaway=False, source="test")

    root = base / "artifacts" / plan.release_dir
    artifact = root / plan.artifact_dir
    artifact.mkdir(parents=True)
    binary = artifact / plan.binary
    shutil.copyfile(work / plan.binary, binary)
    (artifact / SBOM_FILE).write_text(
        build_sbom(
            name="demo",
            cargo_package="demo",
            version="1.2.3",
            artifact=plan.artifact_dir,
            binary_sha256=manifest.artifact.sha256,
            crates=[],
            toolchain=[],
            timestamp=1700000000,
        )
    )
    write_record(artifact / "build.json", manifest)
    (artifact / "profiles").mkdir()
    (artifact / "profiles" / "pgo.profdata").write_bytes(b"\x00profile")
    (artifact / "logs").mkdir()
    (artifact / "logs" / "build-release.log").write_text("+ cargo build --release\n")
    signer.sign(binary, trusted_comment=artifact_comment(manifest, plan.artifact_dir))
    write_checksums(artifact)
    update_release_index(root, signer, vouched=(plan.artifact_dir,))
    return Release(root, plan.artifact_dir, plan.binary, public, signer)


@pytest.fixture
def release(tmp_path: Path) -> Release:
    return make_release(tmp_path)


def failed(checks: list[Check]) -> set[tuple[str, str]]:
    return {(c.file, c.check) for c in checks if not c.ok}


def details(checks: list[Check]) -> dict[tuple[str, str], str]:
    return {(c.file, c.check): c.detail for c in checks}


def test_a_fresh_release_passes_every_check(release: Release) -> None:
    checks, note = verify_release(release.root, release.public)
    assert note == f"key {release.public}"
    folder, binary = release.folder, f"{release.folder}/{release.binary}"
    assert [(c.file, c.check) for c in checks] == [
        (CHECKSUMS, "signature"),
        (CHECKSUMS, "checksums"),
        (binary, "signature"),
        (f"{folder}/{CHECKSUMS}", "checksums"),
        (f"{folder}/{SBOM_FILE}", "sbom"),
        (PROVENANCE, "signature"),
        (PROVENANCE, "provenance"),
        (CHECKSUMS, "coverage"),
    ]
    assert failed(checks) == set()
    found = details(checks)
    assert found[CHECKSUMS, "checksums"] == "3 files match"  # binary, SBOM, folder listing
    # binary, its .minisig, SBOM, build.json, a profile; the folder listing; and a log,
    # which says how the build went and is not signed
    assert found[CHECKSUMS, "coverage"] == (
        "all 6 files are under the signature of SHA256SUMS; "
        "1 log file(s) under logs/ are not signed"
    )
    assert found[PROVENANCE, "provenance"] == "DSSE signature valid; 1 subjects match"
    assert found[f"{folder}/{SBOM_FILE}", "sbom"] == f"describes {release.binary} (0 components)"
    assert found[binary, "signature"].startswith(f"orchestrator: {binary} demo 1.2.3 inputs:")
    assert found[CHECKSUMS, "signature"].startswith(f"orchestrator: {release.root.name}/SHA256SUMS")


def test_release_index_files(release: Release) -> None:
    lines = (release.root / CHECKSUMS).read_text().splitlines()
    binary = release.artifact / release.binary
    assert lines == [
        f"{hashlib.sha256(binary.read_bytes()).hexdigest()}  {release.folder}/{release.binary}",
        f"{hashlib.sha256((release.artifact / SBOM_FILE).read_bytes()).hexdigest()}"
        f"  {release.folder}/{SBOM_FILE}",
        f"{hashlib.sha256((release.artifact / CHECKSUMS).read_bytes()).hexdigest()}"
        f"  {release.folder}/{CHECKSUMS}",
    ]
    assert (release.root / PUBLIC_KEY).read_text() == release.public.read_text()
    for name in (CHECKSUMS, PROVENANCE, PUBLIC_KEY, CHECKSUMS + ".minisig"):
        assert (release.root / name).stat().st_mode & 0o777 == 0o644
    assert not list(release.root.glob(".*"))  # no temporary files left
    [(folder, manifest)] = release_artifacts(release.root)
    assert folder == release.folder
    assert manifest.artifact.file == release.binary


def test_without_a_key_the_shipped_one_checks_integrity(release: Release) -> None:
    checks, note = verify_release(release.root, None)
    assert note == f"the release's own {PUBLIC_KEY} (integrity only)"
    assert failed(checks) == set()


def test_a_changed_binary_byte_fails_everything_that_covers_it(release: Release) -> None:
    binary = release.artifact / release.binary
    data = bytearray(binary.read_bytes())
    data[0] ^= 0x01
    binary.write_bytes(bytes(data))
    checks, _ = verify_release(release.root, release.public)
    path = f"{release.folder}/{release.binary}"
    assert failed(checks) == {
        (CHECKSUMS, "checksums"),
        (path, "signature"),
        (f"{release.folder}/{CHECKSUMS}", "checksums"),
        (f"{release.folder}/{SBOM_FILE}", "sbom"),
        (PROVENANCE, "provenance"),
    }
    found = details(checks)
    assert found[CHECKSUMS, "checksums"] == f"{path}: sha256 differs from SHA256SUMS"
    assert found[path, "signature"] == f"{release.binary}: signature does not match the file"
    assert (
        found[f"{release.folder}/{SBOM_FILE}", "sbom"] == f"SBOM's hash is not {release.binary}'s"
    )
    assert found[PROVENANCE, "provenance"] == f"subject {path} does not match the file"


def test_an_edited_checksums_line_breaks_its_signature(release: Release) -> None:
    listing = release.root / CHECKSUMS
    first, rest = listing.read_text().split("\n", 1)
    listing.write_text("0" * 64 + first[64:] + "\n" + rest)
    checks, _ = verify_release(release.root, release.public)
    assert failed(checks) == {(CHECKSUMS, "signature"), (CHECKSUMS, "checksums")}
    assert (
        details(checks)[CHECKSUMS, "signature"] == "SHA256SUMS: signature does not match the file"
    )


@pytest.mark.parametrize(
    ("line", "detail"),
    [
        ("0" * 64 + "  ../outside", "unsafe path '../outside' in SHA256SUMS"),
        ("0" * 64 + "  /etc/passwd", "unsafe path '/etc/passwd' in SHA256SUMS"),
        ("0" * 64 + "  gone/file", "gone/file is listed but missing (or not a plain file)"),
    ],
)
def test_bad_checksum_entries(release: Release, line: str, detail: str) -> None:
    listing = release.artifact / CHECKSUMS
    listing.write_text(line + "\n" + listing.read_text())
    checks, _ = verify_release(release.root, release.public)
    # The folder's listing changed, so the signed one no longer matches it either.
    assert failed(checks) == {
        (f"{release.folder}/{CHECKSUMS}", "checksums"),
        (CHECKSUMS, "checksums"),
    }
    assert details(checks)[f"{release.folder}/{CHECKSUMS}", "checksums"] == detail


def test_an_empty_checksums_file_lists_nothing(release: Release) -> None:
    (release.artifact / CHECKSUMS).write_text("")
    checks, _ = verify_release(release.root, release.public)
    assert details(checks)[f"{release.folder}/{CHECKSUMS}", "checksums"] == (
        "SHA256SUMS lists nothing"
    )


def resign_provenance(release: Release, envelope: dict[str, object]) -> None:
    path = release.root / PROVENANCE
    path.write_text(json.dumps(envelope) + "\n")
    release.signer.sign(path, trusted_comment="re-signed")


def test_a_changed_provenance_envelope_fails(release: Release) -> None:
    path = release.root / PROVENANCE
    envelope = json.loads(path.read_text())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["subject"][0]["digest"]["sha256"] = "0" * 64
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    path.write_text(json.dumps(envelope) + "\n")
    checks, _ = verify_release(release.root, release.public)
    assert failed(checks) == {(PROVENANCE, "signature"), (PROVENANCE, "provenance")}
    assert "signature is invalid" in details(checks)[PROVENANCE, "provenance"]


def statement_envelope(release: Release, statement: dict[str, object]) -> dict[str, object]:
    payload = json.dumps(statement).encode()
    return dsse_sign(PAYLOAD_TYPE, payload, release.signer.key)


def test_provenance_content_checks(release: Release) -> None:
    path = release.root / PROVENANCE
    original = json.loads(base64.b64decode(json.loads(path.read_text())["payload"]))
    cases: list[tuple[dict[str, object], str]] = [
        (
            {**statement_envelope(release, original), "payloadType": "text/plain"},
            "unexpected DSSE payload type",
        ),
        (
            statement_envelope(release, {**original, "predicateType": "https://slsa.dev/v0.2"}),
            "not an in-toto v1 statement with SLSA v1 provenance",
        ),
        (
            statement_envelope(release, {**original, "subject": []}),
            f"artifacts missing from the provenance: ['{release.folder}/{release.binary}']",
        ),
        (
            statement_envelope(release, {**original, "subject": [{"name": "x"}]}),
            "'digest'",  # a KeyError is a failed check, not a crash
        ),
    ]
    for envelope, detail in cases:
        resign_provenance(release, envelope)
        checks, _ = verify_release(release.root, release.public)
        assert failed(checks) == {(PROVENANCE, "provenance")}, detail
        assert details(checks)[PROVENANCE, "provenance"] == detail
    path.write_text("not json")
    checks, _ = verify_release(release.root, release.public)
    assert (PROVENANCE, "provenance") in failed(checks)


def test_an_sbom_for_another_artifact_fails(release: Release) -> None:
    sbom = release.artifact / SBOM_FILE
    sbom.write_text(sbom.read_text().replace(release.folder, "demo-1.2.3-linux-x86_64-cuda"))
    checks, _ = verify_release(release.root, release.public)
    assert failed(checks) == {
        (CHECKSUMS, "checksums"),
        (f"{release.folder}/{CHECKSUMS}", "checksums"),
        (f"{release.folder}/{SBOM_FILE}", "sbom"),
    }
    assert details(checks)[f"{release.folder}/{SBOM_FILE}", "sbom"] == (
        f"SBOM describes demo-1.2.3-linux-x86_64-cuda, not {release.folder}"
    )


def test_a_missing_or_altered_signature_fails(release: Release) -> None:
    signature = release.artifact / (release.binary + ".minisig")
    lines = signature.read_text().splitlines()
    lines[2] = "trusted comment: something else"
    signature.write_text("\n".join(lines) + "\n")
    checks, _ = verify_release(release.root, release.public)
    path = f"{release.folder}/{release.binary}"
    assert details(checks)[path, "signature"] == (
        f"{release.binary}: the trusted comment was altered"
    )
    signature.unlink()
    checks, _ = verify_release(release.root, release.public)
    assert failed(checks) == {(path, "signature"), (f"{release.folder}/{CHECKSUMS}", "checksums")}
    assert details(checks)[path, "signature"] == f"missing {release.binary}.minisig"


def test_a_foreign_key_fails_every_signature(release: Release, tmp_path: Path) -> None:
    foreign = write_key_pair(SecretKey.generate(), tmp_path / "other" / "k.key", None)
    checks, _ = verify_release(release.root, foreign)
    assert failed(checks) == {
        (CHECKSUMS, "signature"),
        (f"{release.folder}/{release.binary}", "signature"),
        (PROVENANCE, "signature"),
        (PROVENANCE, "provenance"),
    }
    other = PublicKey.load(foreign).id_text
    assert details(checks)[PROVENANCE, "provenance"] == (
        f"the provenance envelope has no signature by key {other}"
    )


def test_a_folder_without_checksums_is_not_a_release(tmp_path: Path) -> None:
    with pytest.raises(NotAReleaseError, match="has no SHA256SUMS: not a release folder") as caught:
        verify_release(tmp_path, None)
    assert caught.value.exit_code == 56


def test_release_index_covers_release_files_and_pins_the_lock(release: Release) -> None:
    (release.root / "release.json").write_text("{}\n")
    (release.root / "release.lock").write_text("{}\n")
    update_release_index(release.root, release.signer, vouched=("release.json", "release.lock"))
    names = [line.split("  ")[1] for line in (release.root / CHECKSUMS).read_text().splitlines()]
    assert names[-2:] == ["release.json", "release.lock"]
    lock_hash = hashlib.sha256(b"{}\n").hexdigest()[:16]
    info = verify_file(
        release.root / PROVENANCE,
        (release.root / (PROVENANCE + ".minisig")).read_text(),
        PublicKey.load(release.public),
    )
    assert (
        info.trusted_comment
        == f"orchestrator: {release.root.name}/{PROVENANCE} inputs:lock:{lock_hash}"
    )
    checks, _ = verify_release(release.root, release.public)
    assert failed(checks) == set()
    assert details(checks)[CHECKSUMS, "checksums"] == "5 files match"


@pytest.mark.skipif(shutil.which("minisign") is None, reason="the minisign CLI is not installed")
def test_the_minisign_cli_accepts_our_signatures(release: Release) -> None:
    for path in (release.artifact / release.binary, release.root / CHECKSUMS):
        result = subprocess.run(
            ["minisign", "-V", "-p", str(release.public), "-m", str(path)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        assert "Signature and comment signature verified" in result.stdout
    path = release.artifact / release.binary
    path.write_bytes(path.read_bytes() + b"!")
    result = subprocess.run(
        ["minisign", "-V", "-p", str(release.public), "-m", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0


# -- which key -------------------------------------------------------------------------
def cheap_scrypt(passphrase: str, salt: bytes) -> bytes:
    return hashlib.shake_256(passphrase.encode() + salt).digest(minisign.KEYNUM_SK_LEN)


def test_throwaway_key_is_made_once_and_reused(tmp_path: Path) -> None:
    cache, project = tmp_path / "cache", tmp_path / "project"
    project.mkdir()
    first = resolve_signer(None, project_dir=project, cache_dir=cache, env={})
    path = cache / "keys" / THROWAWAY_KEY
    assert first.throwaway
    assert first.source == str(path)
    assert path.stat().st_mode & 0o777 == 0o600
    again = resolve_signer(None, project_dir=project, cache_dir=cache, env={})
    assert again.key.public.raw == first.key.public.raw
    assert again.key.public.key_id == first.key.public.key_id


def test_configured_key_with_passphrase(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(minisign, "_scrypt", cheap_scrypt)
    project = tmp_path / "project"
    project.mkdir()
    secret = SecretKey.generate()
    write_key_pair(secret, tmp_path / "keys" / "signing.key", "hunter2")
    signer = resolve_signer(
        tmp_path / "keys" / ".." / "keys" / "signing.key",
        project_dir=project,
        cache_dir=tmp_path / "cache",
        env={"ORCHESTRATOR_SIGNING_PASSPHRASE": "hunter2"},
    )
    assert not signer.throwaway
    assert signer.source == str(tmp_path / "keys" / "signing.key")
    assert signer.key.public.raw == secret.public.raw
    assert not (tmp_path / "cache").exists()  # no throwaway key made
    with pytest.raises(SigningError, match="no passphrase"):
        resolve_signer(
            tmp_path / "keys" / "signing.key", project_dir=project, cache_dir=tmp_path, env={}
        )


def test_unreadable_configured_key(tmp_path: Path) -> None:
    with pytest.raises(SigningError, match="cannot read signing key") as caught:
        resolve_signer(
            tmp_path / "absent.key", project_dir=tmp_path / "p", cache_dir=tmp_path, env={}
        )
    assert caught.value.hint == "`orchestrator keygen` makes a key pair."


def test_keys_inside_the_project_or_its_work_tree_are_refused(tmp_path: Path) -> None:
    top = tmp_path / "repo"
    project = top / "sub" / "project"
    project.mkdir(parents=True)
    (top / ".git").write_text("gitdir: elsewhere\n")  # a worktree's .git is a file
    secret = top / "keys" / "signing.key"
    write_key_pair(SecretKey.generate(), secret, None)
    with pytest.raises(SigningError, match=f"inside the repository {top}$"):
        resolve_signer(secret, project_dir=project, cache_dir=tmp_path, env={})
    with pytest.raises(SigningError, match=f"inside the repository {project}$"):
        resolve_signer(project / "k.key", project_dir=project, cache_dir=tmp_path, env={})


def test_keygen(tmp_path: Path) -> None:
    public = keygen(tmp_path / "keys" / "release.key", passphrase=None)
    assert public == tmp_path / "keys" / "release.pub"
    secret = SecretKey.from_text((tmp_path / "keys" / "release.key").read_text(), None)
    assert PublicKey.load(public).raw == secret.public.raw
    with pytest.raises(SigningError, match="exists; refusing to overwrite a key"):
        keygen(tmp_path / "keys" / "release.key", passphrase=None)
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    with pytest.raises(SigningError, match="inside the repository"):
        keygen(tmp_path / "repo" / "keys" / "k.key", passphrase=None)
    assert not (tmp_path / "repo" / "keys").exists()


def test_a_failed_index_write_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full_disk(self: Path, target: Path) -> Path:
        raise OSError("no space left on device")

    monkeypatch.setattr(Path, "replace", full_disk)
    with pytest.raises(OSError, match="no space left"):
        _atomic_write(tmp_path / "SHA256SUMS", "x\n")
    assert list(tmp_path.iterdir()) == []


def test_keygen_refuses_a_dangling_symlink(tmp_path: Path) -> None:
    link = tmp_path / "signing.key"
    link.symlink_to(tmp_path / "elsewhere" / "victim.key")
    with pytest.raises(SigningError, match="exists; refusing to overwrite"):
        keygen(link, passphrase=None)
    assert not (tmp_path / "elsewhere").exists()

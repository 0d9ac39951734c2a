"""`reproduce` checks release.lock against the release's signed SHA256SUMS before it reads
or builds anything: an edited lock is refused (48), an unsigned one needs --trust-unsigned (61).

Docker is down in every CLI test here, so a refusal that came after reaching Docker would
exit 20 instead.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.config.resolve.options import resolve
from orchestrator.model.hashing import sha256_file
from orchestrator.supply.attest import CHECKSUMS, PUBLIC_KEY, SIGNATURE_SUFFIX
from orchestrator.supply.lock_trust import UnsignedLockError, authenticate_lock
from orchestrator.supply.minisign import SecretKey, VerificationError, write_key_pair

from .conftest import plan_for
from .test_cli_bad_input import cli, docker_down, refused  # noqa: F401 (a fixture)
from .test_lockfile import lock_for


def _publish(project: Path, release: Path, key: SecretKey) -> Path:
    """A release folder as `release` leaves it: the lock, SHA256SUMS listing it, signed."""
    document = lock_for(plan_for(resolve(project / "orchestrator.toml", env={})))
    release.mkdir(parents=True)
    lock = release / "release.lock"
    lock.write_text(json.dumps(document.dump(), indent=1) + "\n")
    sums = release / CHECKSUMS
    sums.write_text(f"{sha256_file(lock)}  release.lock\n{'0' * 64}  other/file\n")
    signature = key.sign_file(sums, trusted_comment="t", untrusted_comment="u")
    (release / (CHECKSUMS + SIGNATURE_SUFFIX)).write_text(signature)
    (release / PUBLIC_KEY).write_text(key.public.to_text())
    return lock


def _edit(lock: Path) -> None:
    """One pinned toolchain version changed, as in the issue's probe."""
    document = json.loads(lock.read_text())
    packages = document["targets"][0]["inputs"]["packages"]
    packages[next(iter(packages))] = "9.99.0-evil"
    lock.write_text(json.dumps(document, indent=1) + "\n")


@pytest.fixture
def key() -> SecretKey:
    return SecretKey.generate()


def test_an_intact_lock_passes_with_the_shipped_key_and_says_it_proves_integrity_only(
    project: Path, tmp_path: Path, key: SecretKey
) -> None:
    lock = _publish(project, tmp_path / "r", key)
    trust = authenticate_lock(lock, None, trust_unsigned=False)
    assert trust.signed and not trust.origin_checked
    assert "NOT who made it" in trust.note and key.public.id_text in trust.note


def test_a_named_publisher_key_checks_origin(project: Path, tmp_path: Path, key: SecretKey) -> None:
    lock = _publish(project, tmp_path / "r", key)
    public = write_key_pair(key, tmp_path / "keys" / "publisher.key", passphrase=None)
    trust = authenticate_lock(lock, public, trust_unsigned=False)
    assert trust.signed and trust.origin_checked


def test_an_edited_lock_is_refused_even_with_trust_unsigned(
    project: Path, tmp_path: Path, key: SecretKey
) -> None:
    lock = _publish(project, tmp_path / "r", key)
    _edit(lock)
    for trust_unsigned in (False, True):
        with pytest.raises(VerificationError, match="not the lockfile that was signed"):
            authenticate_lock(lock, None, trust_unsigned=trust_unsigned)


def test_a_release_resigned_by_someone_else_fails_against_the_publisher_key(
    project: Path, tmp_path: Path, key: SecretKey
) -> None:
    lock = _publish(project, tmp_path / "r", SecretKey.generate())  # the attacker's key
    public = write_key_pair(key, tmp_path / "keys" / "publisher.key", passphrase=None)
    with pytest.raises(VerificationError, match="signed by key"):
        authenticate_lock(lock, public, trust_unsigned=False)


def test_sums_that_do_not_list_the_lock_do_not_cover_it(
    project: Path, tmp_path: Path, key: SecretKey
) -> None:
    lock = _publish(project, tmp_path / "r", key)
    sums = lock.parent / CHECKSUMS
    sums.write_text(f"{'1' * 64}  other/file\n")
    signature = key.sign_file(sums, trusted_comment="t", untrusted_comment="u")
    (lock.parent / (CHECKSUMS + SIGNATURE_SUFFIX)).write_text(signature)
    with pytest.raises(VerificationError, match=r"does not list release\.lock"):
        authenticate_lock(lock, None, trust_unsigned=False)


@pytest.mark.parametrize("removed", [CHECKSUMS, CHECKSUMS + SIGNATURE_SUFFIX, PUBLIC_KEY])
def test_an_unsigned_lock_needs_trust_unsigned(
    project: Path, tmp_path: Path, key: SecretKey, removed: str
) -> None:
    lock = _publish(project, tmp_path / "r", key)
    (lock.parent / removed).unlink()
    with pytest.raises(UnsignedLockError, match=removed):
        authenticate_lock(lock, None, trust_unsigned=False)
    trust = authenticate_lock(lock, None, trust_unsigned=True)
    assert not trust.signed and "UNVERIFIED" in trust.note


@pytest.mark.usefixtures("docker_down")
def test_reproduce_of_an_edited_lock_exits_48_before_anything(
    project: Path, tmp_path: Path, key: SecretKey
) -> None:
    lock = _publish(project, tmp_path / "demo-1.2.3", key)
    _edit(lock)
    output = refused(cli("reproduce", str(lock.parent)), 48, "not the lockfile that was signed")
    assert "Docker" not in output
    assert not (tmp_path / "demo-1.2.3.reproduce").exists()


@pytest.mark.usefixtures("docker_down")
def test_reproduce_of_an_unsigned_lock_exits_61_and_names_the_way_out(
    project: Path, tmp_path: Path, key: SecretKey
) -> None:
    lock = _publish(project, tmp_path / "demo-1.2.3", key)
    (lock.parent / (CHECKSUMS + SIGNATURE_SUFFIX)).unlink()
    refused(cli("reproduce", str(lock.parent)), 61, "SHA256SUMS.minisig", "--trust-unsigned")


@pytest.mark.usefixtures("docker_down")
def test_reproduce_of_an_intact_lock_goes_on_to_read_it(
    project: Path, tmp_path: Path, key: SecretKey
) -> None:
    lock = _publish(project, tmp_path / "demo-1.2.3", key)
    # Past the signature check, the next refusal is the empty vault's (53), not a trust one.
    output = refused(cli("reproduce", str(lock.parent)), 53, "the vault lacks")
    assert "proves it is intact, NOT who made it" in output


# -- a checksum that disagrees refuses the lock, signature or not ------------------------
@pytest.mark.parametrize(
    "removed",
    [(CHECKSUMS + SIGNATURE_SUFFIX,), (PUBLIC_KEY,), (CHECKSUMS + SIGNATURE_SUFFIX, PUBLIC_KEY)],
)
def test_an_edited_lock_beside_unsigned_sums_is_refused_even_with_trust_unsigned(
    project: Path, tmp_path: Path, key: SecretKey, removed: tuple[str, ...]
) -> None:
    lock = _publish(project, tmp_path / "r", key)
    _edit(lock)
    for name in removed:  # deleting the signature must not delete the evidence
        (lock.parent / name).unlink()
    for trust_unsigned in (False, True):
        with pytest.raises(VerificationError, match="not the lockfile SHA256SUMS lists"):
            authenticate_lock(lock, None, trust_unsigned=trust_unsigned)


def test_any_line_for_the_lock_counts_and_a_renamed_lock_is_still_looked_up(
    project: Path, tmp_path: Path, key: SecretKey
) -> None:
    lock = _publish(project, tmp_path / "r", key)
    (lock.parent / (CHECKSUMS + SIGNATURE_SUFFIX)).unlink()
    sums = lock.parent / CHECKSUMS
    right = f"{sha256_file(lock)}  release.lock\n"
    sums.write_text(right + f"{'9' * 64}  ./release.lock\n")  # a second, other line
    with pytest.raises(VerificationError, match="line 2 names another sha256"):
        authenticate_lock(lock, None, trust_unsigned=True)
    sums.write_text(right)
    _edit(lock)
    renamed = lock.rename(lock.with_name("mine.lock"))
    with pytest.raises(VerificationError, match="not the lockfile SHA256SUMS lists"):
        authenticate_lock(renamed, None, trust_unsigned=True)


def test_unreadable_sums_beside_an_unsigned_lock_are_no_agreement(
    project: Path, tmp_path: Path, key: SecretKey
) -> None:
    lock = _publish(project, tmp_path / "r", key)
    (lock.parent / (CHECKSUMS + SIGNATURE_SUFFIX)).unlink()
    (lock.parent / CHECKSUMS).write_text("this is not sha256sum output\n")
    with pytest.raises(VerificationError, match="line 1 is not"):
        authenticate_lock(lock, None, trust_unsigned=True)


def test_unsigned_sums_that_agree_or_do_not_list_the_lock_leave_it_to_trust_unsigned(
    project: Path, tmp_path: Path, key: SecretKey
) -> None:
    lock = _publish(project, tmp_path / "r", key)
    (lock.parent / (CHECKSUMS + SIGNATURE_SUFFIX)).unlink()
    trust = authenticate_lock(lock, None, trust_unsigned=True)
    assert not trust.signed and "the unsigned SHA256SUMS beside it agrees" in trust.note
    with pytest.raises(UnsignedLockError):  # agreeing unsigned sums are no signature
        authenticate_lock(lock, None, trust_unsigned=False)
    (lock.parent / CHECKSUMS).write_text(f"{'1' * 64}  other/file\n")
    _edit(lock)  # nothing beside it says what the lock was: only the rebuilder's word
    trust = authenticate_lock(lock, None, trust_unsigned=True)
    assert not trust.signed and "agrees" not in trust.note


@pytest.mark.usefixtures("docker_down")
def test_reproduce_of_an_edited_lock_without_its_signature_exits_48_before_anything(
    project: Path, tmp_path: Path, key: SecretKey
) -> None:
    """The issue's probe: delete SHA256SUMS.minisig beside an edited lock, --trust-unsigned."""
    lock = _publish(project, tmp_path / "demo-1.2.3", key)
    _edit(lock)
    (lock.parent / (CHECKSUMS + SIGNATURE_SUFFIX)).unlink()
    result = cli("reproduce", str(lock.parent), "--trust-unsigned")
    output = refused(result, 48, "not the lockfile SHA256SUMS lists", "--trust-unsigned")
    assert "UNVERIFIED" not in output and "Docker" not in output
    assert not (tmp_path / "demo-1.2.3.reproduce").exists()

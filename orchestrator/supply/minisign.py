"""minisign-compatible Ed25519 keys and signatures, and DSSE envelopes, on the host.

Formats follow minisign 0.11: keys are "Ed" + 8-byte key id + key material, base64 with an
untrusted comment line. Signatures use the prehashed "ED" form, an Ed25519 signature over
BLAKE2b-512(file). A second signature covers that signature plus the trusted comment. The
cryptography comes from `cryptography` (Ed25519) and hashlib (BLAKE2b, scrypt).
Secret keys are only ever read here, on the host; nothing in this module runs in a container.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import struct
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

from orchestrator.errors import OrchestratorError

SIG_ALG = b"Ed"
PREHASHED_ALG = b"ED"
KDF_SCRYPT = b"Sc"
KDF_NONE = b"\0\0"
CHECKSUM_ALG = b"B2"
# minisign's defaults: libsodium's "sensitive" scrypt limits, i.e. N=2^20, r=8, p=1 (1 GiB).
OPSLIMIT = 33554432
MEMLIMIT = 1073741824
SCRYPT_N, SCRYPT_R, SCRYPT_P = 1 << 20, 8, 1
KEYNUM_SK_LEN = 8 + 64 + 32  # key id, Ed25519 secret key (seed + public), checksum


class SigningError(OrchestratorError):
    exit_code = 47
    summary = "signing failed (no/invalid key, wrong passphrase, key inside the repository)"


class VerificationError(OrchestratorError):
    exit_code = 48
    summary = "`verify` found a bad signature, checksum, provenance subject or SBOM"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str, what: str, error: type[OrchestratorError] = VerificationError) -> bytes:
    try:
        return base64.b64decode(text.strip(), validate=True)
    except ValueError as exc:
        raise error(f"{what}: not valid base64") from exc


_PUBLIC_KEY_HINT = (
    "Pass the publisher's minisign public key: a comment line, then one base64 line "
    "(`orchestrator keygen` writes one as KEY.pub)."
)
_KEYGEN_HINT = "`orchestrator keygen` makes a key pair."


def _read_key_file(path: Path, what: str, error: type[OrchestratorError], hint: str) -> str:
    try:
        return path.read_text()
    except UnicodeDecodeError:
        raise error(f"{path}: not a {what} (not even text)", hint=hint) from None
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc}", hint=hint) from exc


def _key_id_text(key_id: bytes) -> str:
    return f"{struct.unpack('<Q', key_id)[0]:016X}"


@dataclass(frozen=True)
class PublicKey:
    key_id: bytes
    key: Ed25519PublicKey

    @property
    def raw(self) -> bytes:
        return self.key.public_bytes(Encoding.Raw, PublicFormat.Raw)

    @property
    def id_text(self) -> str:
        return _key_id_text(self.key_id)

    def to_text(self) -> str:
        return (
            f"untrusted comment: minisign public key {self.id_text}\n"
            f"{_b64(SIG_ALG + self.key_id + self.raw)}\n"
        )

    @classmethod
    def from_text(cls, text: str) -> PublicKey:
        lines = [line for line in text.splitlines() if line.strip()]
        blob = _unb64(lines[-1] if lines else "", "public key")
        if len(blob) != 42 or blob[:2] != SIG_ALG:
            raise VerificationError("not a minisign Ed25519 public key")
        return cls(blob[2:10], Ed25519PublicKey.from_public_bytes(blob[10:]))

    @classmethod
    def load(cls, path: Path) -> PublicKey:
        """The key in `path`; every refusal names the file."""
        text = _read_key_file(path, "public key", VerificationError, _PUBLIC_KEY_HINT)
        try:
            return cls.from_text(text)
        except VerificationError as error:
            raise VerificationError(f"{path}: {error.message}", hint=_PUBLIC_KEY_HINT) from None


@dataclass(frozen=True)
class SecretKey:
    key_id: bytes
    key: Ed25519PrivateKey

    @classmethod
    def generate(cls) -> SecretKey:
        return cls(secrets.token_bytes(8), Ed25519PrivateKey.generate())

    @property
    def public(self) -> PublicKey:
        return PublicKey(self.key_id, self.key.public_key())

    def _sk(self) -> bytes:
        seed = self.key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        return seed + self.public.raw  # libsodium's 64-byte secret key layout

    def to_text(self, passphrase: str | None) -> str:
        """The secret key file; encrypted with scrypt unless `passphrase` is None."""
        sk = self._sk()
        if passphrase is None:
            # minisign -W writes no salt, limits or checksum for an unencrypted key.
            body = KDF_NONE + CHECKSUM_ALG + bytes(32) + bytes(16) + self.key_id + sk + bytes(32)
            comment = "minisign encrypted secret key"  # minisign's own wording, even here
        else:
            salt = secrets.token_bytes(32)
            checksum = hashlib.blake2b(SIG_ALG + self.key_id + sk, digest_size=32).digest()
            stream = _scrypt(passphrase, salt)
            keynum = bytes(a ^ b for a, b in zip(self.key_id + sk + checksum, stream, strict=True))
            body = (
                KDF_SCRYPT + CHECKSUM_ALG + salt + struct.pack("<QQ", OPSLIMIT, MEMLIMIT) + keynum
            )
            comment = "minisign encrypted secret key"
        return f"untrusted comment: {comment}\n{_b64(SIG_ALG + body)}\n"

    @classmethod
    def from_text(cls, text: str, passphrase: str | None) -> SecretKey:
        lines = [line for line in text.splitlines() if line.strip()]
        blob = _unb64(lines[-1] if lines else "", "secret key", SigningError)
        if len(blob) != 2 + 2 + 2 + 32 + 16 + KEYNUM_SK_LEN or blob[:2] != SIG_ALG:
            raise SigningError("not a minisign Ed25519 secret key")
        kdf, salt, keynum = blob[2:4], blob[6:38], blob[54:]
        if kdf == KDF_SCRYPT:
            if passphrase is None:
                raise SigningError(
                    "the secret key is encrypted and no passphrase was given",
                    hint="Set ORCHESTRATOR_SIGNING_PASSPHRASE, or run in a terminal to be asked.",
                )
            opslimit, memlimit = struct.unpack("<QQ", blob[38:54])
            if (opslimit, memlimit) != (OPSLIMIT, MEMLIMIT):
                raise SigningError("unsupported scrypt limits in the secret key")
            keynum = bytes(a ^ b for a, b in zip(keynum, _scrypt(passphrase, salt), strict=True))
        elif kdf != KDF_NONE:
            raise SigningError(f"unsupported key derivation {kdf!r} in the secret key")
        key_id, sk, checksum = keynum[:8], keynum[8:72], keynum[72:]
        if kdf == KDF_SCRYPT:
            expected = hashlib.blake2b(SIG_ALG + key_id + sk, digest_size=32).digest()
            if not hmac.compare_digest(expected, checksum):
                raise SigningError("wrong passphrase for the secret key (checksum mismatch)")
        key = Ed25519PrivateKey.from_private_bytes(sk[:32])
        secret = cls(key_id, key)
        if secret.public.raw != sk[32:]:
            raise SigningError("corrupt secret key: its public half does not match")
        return secret

    @classmethod
    def load(cls, path: Path, passphrase: str | None) -> SecretKey:
        """The key in `path`; every refusal names the file."""
        text = _read_key_file(path, "signing key", SigningError, _KEYGEN_HINT)
        try:
            return cls.from_text(text, passphrase)
        except SigningError as error:
            raise SigningError(
                f"{path}: {error.message}", hint=error.hint or _KEYGEN_HINT
            ) from None

    def sign_file(self, path: Path, *, trusted_comment: str, untrusted_comment: str) -> str:
        """A .minisig for `path` (prehashed), as minisign -S -H writes it."""
        if "\n" in trusted_comment or "\n" in untrusted_comment:
            raise SigningError("signature comments must be one line")
        digest = blake2b_file(path)
        signature = self.key.sign(digest)
        global_signature = self.key.sign(signature + trusted_comment.encode())
        return (
            f"untrusted comment: {untrusted_comment}\n"
            f"{_b64(PREHASHED_ALG + self.key_id + signature)}\n"
            f"trusted comment: {trusted_comment}\n"
            f"{_b64(global_signature)}\n"
        )


def _scrypt(passphrase: str, salt: bytes) -> bytes:
    return hashlib.scrypt(
        passphrase.encode(),
        salt=salt,
        n=SCRYPT_N,
        r=SCRYPT_R,
        p=SCRYPT_P,
        maxmem=128 * SCRYPT_R * SCRYPT_N + (64 << 20),  # 1 GiB for scrypt, plus slack
        dklen=KEYNUM_SK_LEN,
    )


def blake2b_file(path: Path) -> bytes:
    digest = hashlib.blake2b(digest_size=64)
    with path.open("rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.digest()


@dataclass(frozen=True)
class SignatureInfo:
    trusted_comment: str
    key_id: str


def signing_key_id(signature_text: str) -> str | None:
    """The id of the key a .minisig names as its signer (unchecked); None if unreadable."""
    lines = signature_text.splitlines()
    try:
        blob = _unb64(lines[1], "signature")
    except (IndexError, VerificationError):
        return None
    return _key_id_text(blob[2:10]) if len(blob) == 74 else None


def verify_file(path: Path, signature_text: str, public: PublicKey) -> SignatureInfo:
    """Check a .minisig the way `minisign -V` does; raise VerificationError on any mismatch."""
    lines = signature_text.splitlines()
    if len(lines) < 4 or not lines[2].startswith("trusted comment: "):
        raise VerificationError(f"{path.name}.minisig is not a minisign signature")
    blob = _unb64(lines[1], "signature")
    if len(blob) != 74 or blob[:2] not in (PREHASHED_ALG, SIG_ALG):
        raise VerificationError("unsupported signature algorithm")
    key_id, signature = blob[2:10], blob[10:]
    if key_id != public.key_id:
        raise VerificationError(f"signed by key {_key_id_text(key_id)}, not by {public.id_text}")
    message = blake2b_file(path) if blob[:2] == PREHASHED_ALG else path.read_bytes()
    trusted = lines[2][len("trusted comment: ") :]
    try:
        public.key.verify(signature, message)
    except InvalidSignature:
        raise VerificationError(f"{path.name}: signature does not match the file") from None
    try:
        public.key.verify(_unb64(lines[3], "global signature"), signature + trusted.encode())
    except InvalidSignature:
        raise VerificationError(f"{path.name}: the trusted comment was altered") from None
    return SignatureInfo(trusted, public.id_text)


# -- DSSE (in-toto envelopes) -----------------------------------------------------------
def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %b %d %b" % (len(kind), kind, len(payload), payload)


def dsse_sign(payload_type: str, payload: bytes, key: SecretKey) -> dict[str, object]:
    signature = key.key.sign(pae(payload_type, payload))
    return {
        "payloadType": payload_type,
        "payload": _b64(payload),
        "signatures": [{"keyid": key.public.id_text, "sig": _b64(signature)}],
    }


def dsse_verify(envelope: dict[str, object], public: PublicKey) -> bytes:
    """The verified payload of a DSSE envelope signed by `public`."""
    payload_type, payload = envelope.get("payloadType"), envelope.get("payload")
    signatures = envelope.get("signatures")
    if (
        not isinstance(payload_type, str)
        or not isinstance(payload, str)
        or not isinstance(signatures, list)
    ):
        raise VerificationError("not a DSSE envelope")
    body = _unb64(payload, "DSSE payload")
    for entry in signatures:
        if isinstance(entry, dict) and entry.get("keyid") == public.id_text:
            try:
                public.key.verify(
                    _unb64(str(entry.get("sig")), "DSSE signature"), pae(payload_type, body)
                )
            except InvalidSignature:
                raise VerificationError("the provenance envelope's signature is invalid") from None
            return body
    raise VerificationError(f"the provenance envelope has no signature by key {public.id_text}")


def write_key_pair(secret: SecretKey, secret_path: Path, passphrase: str | None) -> Path:
    """Write KEY (mode 0600) and KEY.pub; refuse to overwrite."""
    public_path = secret_path.with_suffix(".pub")
    for path in (secret_path, public_path):
        if path.exists():
            raise SigningError(
                f"{path} exists; refusing to overwrite a key",
                hint="Choose another path or remove the old key on purpose.",
            )
    secret_path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(secret_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(secret.to_text(passphrase))
    public_path.write_text(secret.public.to_text())
    return public_path

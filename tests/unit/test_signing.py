"""Signature formats against the real minisign's output, DSSE, provenance and SBOM shapes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator import __version__
from orchestrator.config.resolve.options import resolve
from orchestrator.supply.attest import refuse_inside_repository
from orchestrator.supply.minisign import (
    PublicKey,
    SecretKey,
    SigningError,
    VerificationError,
    dsse_sign,
    dsse_verify,
    pae,
    verify_file,
    write_key_pair,
)
from orchestrator.supply.provenance import PREDICATE_TYPE, STATEMENT_TYPE, statement
from orchestrator.supply.sbom import (
    Crate,
    DebPackage,
    build_sbom,
    crates_from_metadata,
    sbom_subject,
)

from .conftest import plan_for
from .manifests import produced_manifest

KAT = Path(__file__).resolve().parents[1] / "fixtures" / "minisign-kat"


def test_known_answer_against_minisign_cli() -> None:
    """test.key, msg.txt and msg.txt.minisig were made by minisign 0.11 itself (-G -W, -S)."""
    key = SecretKey.from_text((KAT / "test.key").read_text(), None)
    assert key.public.to_text() == (KAT / "test.pub").read_text()
    ours = key.sign_file(
        KAT / "msg.txt",
        trusted_comment="trusted comment for the KAT",
        untrusted_comment="untrusted comment for the KAT",
    )
    assert ours == (KAT / "msg.txt.minisig").read_text()


def test_verify_accepts_minisign_and_rejects_tampering(tmp_path: Path) -> None:
    public = PublicKey.load(KAT / "test.pub")
    signature = (KAT / "msg.txt.minisig").read_text()
    info = verify_file(KAT / "msg.txt", signature, public)
    assert info.trusted_comment == "trusted comment for the KAT"
    altered = tmp_path / "msg.txt"
    altered.write_bytes((KAT / "msg.txt").read_bytes() + b"!")
    with pytest.raises(VerificationError, match="does not match"):
        verify_file(altered, signature, public)
    forged = signature.replace("trusted comment for the KAT", "trusted comment for the KAY")
    with pytest.raises(VerificationError, match="trusted comment was altered"):
        verify_file(KAT / "msg.txt", forged, public)
    other = SecretKey.generate().public
    with pytest.raises(VerificationError, match="signed by key"):
        verify_file(KAT / "msg.txt", signature, other)


def test_encrypted_key_round_trip(tmp_path: Path) -> None:
    key = SecretKey.generate()
    text = key.to_text("correct horse")
    assert SecretKey.from_text(text, "correct horse").public.raw == key.public.raw
    with pytest.raises(SigningError, match="wrong passphrase"):
        SecretKey.from_text(text, "battery staple")
    with pytest.raises(SigningError, match="no passphrase"):
        SecretKey.from_text(text, None)


def test_key_pair_files_are_private_and_never_overwritten(tmp_path: Path) -> None:
    public = write_key_pair(SecretKey.generate(), tmp_path / "k.key", None)
    assert public == tmp_path / "k.pub"
    assert (tmp_path / "k.key").stat().st_mode & 0o777 == 0o600
    with pytest.raises(SigningError, match="refusing to overwrite"):
        write_key_pair(SecretKey.generate(), tmp_path / "k.key", None)


def test_keys_inside_the_repository_are_refused(tmp_path: Path) -> None:
    with pytest.raises(SigningError, match="inside the repository"):
        refuse_inside_repository(tmp_path / "keys" / "signing.key", tmp_path)
    refuse_inside_repository(tmp_path.parent / "elsewhere.key", tmp_path)


def test_dsse_pae_matches_the_specification() -> None:
    assert pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )


def test_dsse_envelope_round_trip_and_tamper() -> None:
    key = SecretKey.generate()
    envelope = dsse_sign("application/vnd.in-toto+json", b'{"a":1}', key)
    assert dsse_verify(envelope, key.public) == b'{"a":1}'
    envelope["payloadType"] = "text/plain"
    with pytest.raises(VerificationError):
        dsse_verify(envelope, key.public)


def test_provenance_statement_structure(project: Path, tmp_path: Path) -> None:
    options = resolve(project / "orchestrator.toml", env={"SOURCE_DATE_EPOCH": "1700000000"})
    plan = plan_for(options)
    manifest = produced_manifest(options, plan, tmp_path)
    result = statement(release="demo-1.2.3", artifacts=[(plan.artifact_dir, manifest)])
    assert result["_type"] == STATEMENT_TYPE
    assert result["predicateType"] == PREDICATE_TYPE
    assert result["subject"] == [
        {"name": f"{plan.artifact_dir}/demo", "digest": {"sha256": manifest.artifact.sha256}}
    ]
    predicate = result["predicate"]
    assert isinstance(predicate, dict)
    definition = predicate["buildDefinition"]
    assert set(definition["externalParameters"]["source"]) == {"git_commit", "dirty", "git"}
    assert definition["externalParameters"]["config_sha256"] == manifest.inputs.config_sha256
    assert definition["externalParameters"]["flavors"] == ["cpu"]
    uris = {d["uri"]: d.get("digest") for d in definition["resolvedDependencies"]}
    assert uris["pkg:deb/debian/gcc@4:14.2.0-1?arch=amd64"] == {"sha256": "45" * 32}
    assert uris["pkg:cargo/either@1.15.0"] == {"sha256": "67" * 32}
    assert uris["debian:trixie:rootfs"] == {"sha256": "23" * 32}
    assert uris["profile:pgo.profdata"] == {"sha256": "89" * 32}
    details = predicate["runDetails"]
    assert details["builder"]["version"]["orchestrator"]
    # nothing of how the run went: two honest builders of these inputs sign the same bytes
    assert details["metadata"] == {"invocationId": "demo-1.2.3"}
    assert details["byproducts"] == [
        {"name": f"{plan.artifact_dir}/build.json", "uri": f"file:{plan.artifact_dir}/build.json"}
    ]
    later = manifest.model_copy(update={"started_at": "2030-01-01T00:00:00+00:00", "steps": []})
    assert statement(release="demo-1.2.3", artifacts=[(plan.artifact_dir, later)]) == result


def test_sbom_is_valid_cyclonedx_and_names_its_artifact() -> None:
    metadata = {
        "packages": [
            {"id": "demo 1.0", "name": "demo", "version": "1.0", "source": None, "license": "MIT"},
            {
                "id": "either 1.15.0",
                "name": "either",
                "version": "1.15.0",
                "source": "registry+https://github.com/rust-lang/crates.io-index",
                "license": "MIT OR Apache-2.0",
            },
        ],
        "resolve": {
            "nodes": [
                {"id": "demo 1.0", "dependencies": ["either 1.15.0"]},
                {"id": "either 1.15.0", "dependencies": []},
            ]
        },
    }
    crates = crates_from_metadata(metadata, {("either", "1.15.0"): "67" * 32}, "demo")
    assert crates == [
        Crate(
            "either",
            "1.15.0",
            "MIT OR Apache-2.0",
            "67" * 32,
            "registry+https://github.com/rust-lang/crates.io-index",
        )
    ]

    def sbom() -> str:
        return build_sbom(
            name="demo",
            cargo_package="demo-cli",
            version="1.0",
            artifact="demo-1.0-linux-x86_64-cpu",
            binary_sha256="ab" * 32,
            crates=crates,
            toolchain=[DebPackage("gcc", "4:14.2.0-1", "amd64", "45" * 32)],
            timestamp=1700000000,
        )

    text = sbom()
    data = json.loads(text)
    assert data["specVersion"] == "1.6"
    purls = {c["purl"]: c.get("scope") for c in data["components"]}
    assert purls["pkg:cargo/either@1.15.0"] == "required"
    assert purls["pkg:deb/debian/gcc@4:14.2.0-1?arch=amd64"] == "excluded"
    assert sbom_subject(text) == ("demo-1.0-linux-x86_64-cpu", "ab" * 32)
    # The product: the binary "demo", built from the cargo package "demo-cli".
    product = data["metadata"]["component"]
    assert (product["name"], product["purl"]) == ("demo", "pkg:cargo/demo-cli@1.0")
    assert data["metadata"]["tools"]["components"] == [
        {
            "bom-ref": f"tool:orchestrator@{__version__}",
            "name": "orchestrator",
            "type": "application",
            "version": __version__,
        }
    ]
    # Same inputs, same bytes: serial number and timestamp are derived, not drawn.
    again = sbom()
    assert again == text

"""Every error class has its own documented exit code; `verify` tells tampering from a
folder that is not a release."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestrator.cli.exit_codes import error_classes
from orchestrator.errors import OrchestratorError
from orchestrator.supply.attest import CHECKSUMS
from orchestrator.supply.minisign import SecretKey, VerificationError
from orchestrator.supply.verify import NotAReleaseError, verify_release

ROOT = Path(__file__).resolve().parents[2]


def _readme_codes() -> set[int]:
    table = (ROOT / "docs" / "exit-codes.md").read_text()
    return {int(m) for m in re.findall(r"^\| (\d+) \|", table, flags=re.MULTILINE)}


def test_every_error_class_has_its_own_documented_exit_code() -> None:
    classes = error_classes()
    assert len(classes) > 20
    documented = _readme_codes()
    owners: dict[int, list[str]] = {}
    for cls in classes:
        assert cls.exit_code != 1, f"{cls.__qualname__} exits 1, which is not documented"
        assert cls.exit_code in documented, (
            f"{cls.__qualname__}: {cls.exit_code} not in docs/exit-codes.md"
        )
        owners.setdefault(cls.exit_code, []).append(cls.__qualname__)
    shared = {code: names for code, names in owners.items() if len(names) > 1}
    assert shared == {}


def test_a_new_subclass_without_its_own_code_is_refused() -> None:
    with pytest.raises(TypeError, match="exit_code"):

        class NamelessError(OrchestratorError):
            pass


def test_no_bare_orchestrator_error_is_raised() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "orchestrator").rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if "raise OrchestratorError(" in line
    ]
    assert offenders == []


def test_verify_of_a_folder_that_is_not_a_release_is_not_tampering(tmp_path: Path) -> None:
    with pytest.raises(NotAReleaseError) as caught:
        verify_release(tmp_path, None)
    assert not isinstance(caught.value, VerificationError)
    assert caught.value.exit_code != VerificationError.exit_code == 48


def test_verify_of_a_tampered_release_still_exits_48(tmp_path: Path) -> None:
    secret = SecretKey.generate()
    (tmp_path / "minisign.pub").write_text(secret.public.to_text())
    (tmp_path / "tool").write_bytes(b"tampered")
    (tmp_path / CHECKSUMS).write_text("0" * 64 + "  tool\n")
    checks, _ = verify_release(tmp_path, None)
    failed = [c for c in checks if not c.ok]
    assert any("sha256 differs" in c.detail for c in failed)

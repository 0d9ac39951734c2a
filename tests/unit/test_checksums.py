"""SHA256SUMS for any file name: written byte for byte as GNU coreutils' `sha256sum` writes
it, read back by the real `sha256sum -c` and by `orchestrator verify`. Before, a name with
a newline broke its line, and the folder fell out of the release's signature."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from orchestrator.host.staging import CHECKSUMS, write_checksums
from orchestrator.model.documents.checksums import (
    ChecksumsFormatError,
    checksum_line,
    checksums_bytes,
    parse_checksums,
)
from orchestrator.model.hashing import sha256_file
from orchestrator.supply.minisign import SecretKey
from orchestrator.supply.verify import Verifier

NAMES = [
    "plain.txt",
    "notes/a\nb.log",  # recipe 3 (not logs/: those are unsigned, model/documents/run_logs.py)
    "c\rd",
    "back\\slash",
    "tab\there",
    "form\x0cfeed",  # no escape in sha256sum: Python's splitlines() would split here
    "esc\x1b[31m",
    os.fsdecode(b"latin1-caf\xe9"),  # not UTF-8: written back as its own bytes
]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "artifact"
    for index, name in enumerate(NAMES):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(f"file {index}\n".encode())
    return root


def _listed(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def test_written_as_sha256sum_writes_it(folder: Path) -> None:
    ours = write_checksums(folder).read_bytes()
    names = [n for n in _listed(folder) if n != CHECKSUMS]
    theirs = subprocess.run(
        ["sha256sum", "--", *names], cwd=folder, capture_output=True, check=True
    ).stdout
    assert ours == theirs
    assert ours.count(b"\n") == len(NAMES)  # one line per file, whatever its name
    assert b"\\" + sha256_file(folder / "c\rd").encode() + b"  c\\rd\n" in ours


def test_sha256sum_checks_it_and_verify_reads_it_back(folder: Path) -> None:
    listing = write_checksums(folder)
    run = subprocess.run(
        ["sha256sum", "--check", "--strict", CHECKSUMS],
        cwd=folder,
        capture_output=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.count(b": OK\n") == len(NAMES)
    assert sorted(name for name, _ in parse_checksums(listing.read_bytes())) == sorted(NAMES)
    verifier = Verifier(folder, SecretKey.generate().public)
    verifier.checksums(listing)
    (check,) = verifier.checks
    assert check.ok, check.detail
    assert check.detail == f"{len(NAMES)} files match"


def test_an_edited_escaped_file_is_found(folder: Path) -> None:
    listing = write_checksums(folder)
    (folder / "notes" / "a\nb.log").write_text("changed\n")
    verifier = Verifier(folder, SecretKey.generate().public)
    verifier.checksums(listing)
    (check,) = verifier.checks
    assert not check.ok
    assert check.detail == "notes/a\\nb.log: sha256 differs from SHA256SUMS"  # escaped


def test_lines_round_trip_and_malformed_ones_are_refused() -> None:
    entries = [("a" * 64, name) for name in NAMES]
    assert parse_checksums(checksums_bytes(entries)) == [(n, d) for d, n in entries]
    assert checksum_line("b" * 64, "x\\n") == "\\" + "b" * 64 + "  x\\\\n\n"
    for bad, said in [
        ("\\" + "a" * 64 + "  x\\q\n", r"line 1: unknown escape \\q"),
        ("a" * 64 + " x\n", "line 1 is not"),
        ("A" * 64 + "  x\n", "line 1 is not"),
        ("a" * 64 + "  x\n" + "a" * 63 + "  y\n", "line 2 is not"),
    ]:
        with pytest.raises(ChecksumsFormatError, match=said):
            parse_checksums(bad.encode())

"""Only a crate whose build may read git gets the commit's facts in its plan (and so in its
step keys): a crate that never asks keeps its cached builds across commits."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from orchestrator.host.git_facts import asks_git, crate_git_facts
from orchestrator.host.source import CrateView

from .execute_rig import make_options

PLAIN_LOCK = 'version = 3\n\n[[package]]\nname = "demo"\nversion = "0.1.0"\n'


def _crate(root: Path) -> Path:
    (root / "src").mkdir(parents=True)
    (root / "src" / "main.rs").write_text("fn main() {}\n")
    (root / "Cargo.lock").write_text(PLAIN_LOCK)
    return root


def test_a_plain_crate_does_not_ask(tmp_path: Path) -> None:
    crate = _crate(tmp_path / "crate")
    (crate / "build.rs").write_text('fn main() { println!("cargo:rerun-if-changed=x"); }\n')
    (crate / "target" / "debug").mkdir(parents=True)  # build output is not the crate's
    (crate / "target" / "debug" / "build.rs").write_text("// git\n")
    assert asks_git(crate) is None


def test_a_build_script_naming_git_asks(tmp_path: Path) -> None:
    crate = _crate(tmp_path / "crate")
    member = crate / "crates" / "cli"
    member.mkdir(parents=True)
    (member / "build.rs").write_text('Command::new("git").args(["rev-parse", "HEAD"])\n')
    assert asks_git(crate) == "crates/cli/build.rs names git"


@pytest.mark.parametrize("name", ["vergen-gitcl", "shadow-rs", "built"])
def test_a_git_embedding_crate_in_the_lock_asks(tmp_path: Path, name: str) -> None:
    crate = _crate(tmp_path / "crate")
    (crate / "Cargo.lock").write_text(PLAIN_LOCK + f'\n[[package]]\nname = "{name}"\n')
    assert asks_git(crate) == f"Cargo.lock has {name}"


def test_facts_are_read_only_for_a_crate_that_asks(project: Path) -> None:
    crate = project / "crate"
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "one"]):
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
            cwd=crate,
            check=True,
            capture_output=True,
        )
    options = make_options(project)
    assert asks_git(crate) is None
    assert crate_git_facts(CrateView.from_options(options)) is None
    (crate / "build.rs").write_text('fn main() { let _ = std::process::Command::new("git"); }\n')
    facts = crate_git_facts(CrateView.from_options(options))
    assert facts is not None
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=crate, check=True, capture_output=True, text=True
    )
    assert facts.commit == head.stdout.strip()

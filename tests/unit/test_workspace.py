"""A workspace root as package.crate, with the member to release named by
[package] package: its name and version, --package in every cargo command, and an SBOM of
what that member reaches (not the other members' dependencies)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config.resolve.options import resolve
from orchestrator.errors import ConfigError
from orchestrator.supply.sbom import crates_from_metadata

from .conftest import plan_for


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    for member, version in (("cli", "{ workspace = true }"), ("core", '"0.3.0"')):
        (root / "crates" / member / "src").mkdir(parents=True)
        (root / "crates" / member / "Cargo.toml").write_text(
            f'[package]\nname = "{member}"\nversion = {version}\nedition = "2021"\n'
        )
    (root / "Cargo.toml").write_text(
        '[workspace]\nmembers = ["crates/*"]\nresolver = "2"\n'
        '[workspace.package]\nversion = "2.5.0"\n'
    )
    (root / "Cargo.lock").write_text("version = 4\n")
    (tmp_path / "orchestrator.toml").write_text(
        '[package]\ncrate = "ws"\npackage = "cli"\nbinary = "tool"\n'
        '[train]\nworkloads = [["--help"]]\n'
    )
    return tmp_path


def test_a_member_is_released_with_the_workspace_version(workspace: Path) -> None:
    options = resolve(workspace / "orchestrator.toml", env={})
    assert (options.package_name, options.version, options.binary) == ("cli", "2.5.0", "tool")
    plan = plan_for(options)
    for command in (plan.build, plan.test, plan.variants["baseline"].build):
        argv = list(command.argv)
        assert argv[argv.index("--package") + 1] == "cli"
    assert plan.artifact_dir == "tool-2.5.0-linux-x86_64-cpu"


def test_a_workspace_root_without_a_member_names_the_members(workspace: Path) -> None:
    config = workspace / "orchestrator.toml"
    config.write_text(config.read_text().replace('package = "cli"\n', ""))
    with pytest.raises(ConfigError) as caught:
        resolve(config, env={})
    assert "workspace root" in caught.value.message
    assert "members: cli, core" in caught.value.hint


def test_an_unknown_member_gets_a_did_you_mean(workspace: Path) -> None:
    config = workspace / "orchestrator.toml"
    config.write_text(config.read_text().replace('package = "cli"', 'package = "clj"'))
    with pytest.raises(ConfigError, match="did you mean 'cli'"):
        resolve(config, env={})


def test_the_sbom_lists_what_the_member_reaches() -> None:
    registry = "registry+https://github.com/rust-lang/crates.io-index"
    metadata = {
        "packages": [
            {"id": "cli", "name": "cli", "version": "2.5.0", "source": None},
            {"id": "core", "name": "core", "version": "0.3.0", "source": None},
            {"id": "memchr", "name": "memchr", "version": "2.7.4", "source": registry},
            {"id": "serde", "name": "serde", "version": "1.0.0", "source": registry},
        ],
        "resolve": {
            "nodes": [
                {"id": "cli", "dependencies": ["core"]},
                {"id": "core", "dependencies": ["memchr"]},
                {"id": "memchr", "dependencies": []},
                {"id": "serde", "dependencies": []},  # another member's, not cli's
            ]
        },
    }
    names = [c.name for c in crates_from_metadata(metadata, {}, "cli")]
    assert names == ["core", "memchr"]

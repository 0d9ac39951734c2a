from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path, PurePosixPath

import pytest

from orchestrator.cli.release_common import refuse_dirty
from orchestrator.config.resolve.options import resolve
from orchestrator.errors import SourceError
from orchestrator.host.source import (
    CrateView,
    crate_identity,
    other_sources,
    own_folders,
    registry_crates,
    snapshot,
    uncommitted_changes,
)
from orchestrator.host.system import source_identity

LOCK = """version = 4

[[package]]
name = "demo"
version = "0.1.0"
dependencies = ["either"]

[[package]]
name = "either"
version = "1.15.0"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "48c757948c5ede0e46177b7add2e67155f70e33c07fea8284df6576da70b3719"
"""


def test_registry_crates_parse() -> None:
    crates = registry_crates(LOCK)
    assert [(c.name, c.version) for c in crates] == [("either", "1.15.0")]


def test_other_sources_lists_git_and_other_registries_not_paths() -> None:
    lock = LOCK + (
        '\n[[package]]\nname = "gitdep"\nversion = "0.1.0"\n'
        'source = "git+https://example.org/gitdep#' + "c" * 40 + '"\n'
        '\n[[package]]\nname = "local"\nversion = "0.1.0"\n'
    )
    assert other_sources(lock) == [f"gitdep 0.1.0 (git+https://example.org/gitdep#{'c' * 40})"]
    assert other_sources(LOCK) == []


def test_missing_lockfile_is_a_source_error(tmp_path: Path) -> None:
    (tmp_path / "Cargo.toml").write_text("[package]\n")
    with pytest.raises(SourceError) as caught:
        snapshot(tmp_path, 0)
    assert "cargo generate-lockfile" in caught.value.hint


def test_snapshot_hash_changes_with_one_byte(project: Path) -> None:
    crate = project / "crate"
    first = snapshot(crate, 1700000000)
    (crate / "src" / "main.rs").write_text("fn main() { }\n")
    second = snapshot(crate, 1700000000)
    assert first.archive_sha256 != second.archive_sha256
    assert first.cargo_lock_sha256 == second.cargo_lock_sha256


def _members(archive: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return {m.name: m for m in tar.getmembers()}


def test_symlinks_inside_the_tree_are_kept_as_symlinks(project: Path) -> None:
    """As `git archive` packs them: a link to a folder and one to a file, relative."""
    crate = project / "crate"
    (crate / "pkg" / "brew").mkdir(parents=True)
    (crate / "pkg" / "brew" / "formula.rb").write_text("class Demo\nend\n")
    (crate / "HomebrewFormula").symlink_to("pkg/brew")
    (crate / "pkg" / "README").symlink_to("../src/main.rs")
    members = _members(snapshot(crate, 1700000000).archive)
    link = members["src/HomebrewFormula"]
    assert link.issym() and link.linkname == "pkg/brew"
    assert members["src/pkg/README"].linkname == "../src/main.rs"
    assert "src/HomebrewFormula/formula.rb" not in members  # stored, not followed
    assert members["src/pkg/brew/formula.rb"].isfile()
    # Deterministic like the rest: the same tree packs to the same bytes.
    assert snapshot(crate, 1700000000).archive_sha256 == snapshot(crate, 1700000000).archive_sha256


@pytest.mark.parametrize("target", ["../../outside", "/etc/passwd", "a/../../../x"])
def test_a_symlink_leaving_the_tree_is_refused_by_name(project: Path, target: str) -> None:
    crate = project / "crate"
    (crate / "escape").symlink_to(target)
    with pytest.raises(SourceError) as caught:
        snapshot(crate, 0)
    assert f"{crate / 'escape'}" in caught.value.message and target in caught.value.message
    assert 'exclude = ["escape"]' in caught.value.hint
    # Left out by the config, it no longer stops the build.
    assert "src/escape" not in _members(snapshot(crate, 0, ["escape"]).archive)


def test_exclude_patterns_leave_paths_out(project: Path) -> None:
    crate = project / "crate"
    (crate / "docs" / "img").mkdir(parents=True)
    (crate / "docs" / "img" / "logo.png").write_bytes(b"png")
    (crate / "src" / "demo.mp4").write_bytes(b"video")
    (crate / "data").mkdir()
    (crate / "data" / "big.bin").write_bytes(b"big")
    (crate / "data" / "small.txt").write_text("kept\n")
    names = set(_members(snapshot(crate, 0, ["docs", "*.mp4", "data/*.bin"]).archive))
    assert "src/data/small.txt" in names and "src/src/main.rs" in names
    assert not {n for n in names if "docs" in n or n.endswith((".mp4", ".bin"))}
    everything = set(_members(snapshot(crate, 0).archive))
    assert {"src/docs/img/logo.png", "src/src/demo.mp4", "src/data/big.bin"} <= everything


def test_the_last_releases_own_folders_inside_the_crate_do_not_make_it_dirty(
    project: Path,
) -> None:
    """A config at the crate's root puts artifacts/ inside the crate; where git does not
    ignore it, the first release must not make the next one refuse the tree as dirty (a
    second `make release` did, for examples/minilang). A changed source still does."""
    crate = project / "crate"
    config = crate / "orchestrator.toml"
    config.write_text('[package]\ncrate = "."\n[train]\nworkloads = [["--help"]]\n')
    git = ["git", "-C", str(crate), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "crate"], check=True)
    options = resolve(config, env={}, cwd=crate)
    view = CrateView.from_options(options)
    assert options.artifacts_dir == crate / "artifacts"
    published = options.artifacts_dir / "demo-1.2.3" / "demo-1.2.3-linux-x86_64-cpu"
    published.mkdir(parents=True)
    (published / "build.json").write_text("{}")
    assert own_folders(view)[0] == PurePosixPath("artifacts")
    assert crate_identity(view)["dirty"] is False
    assert source_identity(crate)["dirty"] is True  # what git alone says
    (crate / "src" / "main.rs").write_text("fn main() { println!(); }\n")
    assert crate_identity(view)["dirty"] is True


def test_an_uncommitted_config_alone_leaves_the_tree_clean_and_the_error_names_files(
    project: Path,
) -> None:
    """`init` then `release`: the config `init` just wrote is the only change. The lock
    carries its text (reproduce puts it back among the sources), so it does not make the
    tree dirty; any other change does, and the refusal names the files."""
    crate = project / "crate"
    git = ["git", "-C", str(crate), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "crate"], check=True)
    config = crate / "orchestrator.toml"
    config.write_text('[package]\ncrate = "."\n[train]\nworkloads = [["--help"]]\n')
    options = resolve(config, env={}, cwd=crate)
    view = CrateView.from_options(options)
    assert crate_identity(view)["dirty"] is False
    assert uncommitted_changes(view) == []
    (crate / "src" / "extra.rs").write_text("// new\n")
    (crate / "src" / "main.rs").write_text("fn main() { println!(); }\n")
    assert crate_identity(view)["dirty"] is True
    assert sorted(uncommitted_changes(view)) == ["src/extra.rs", "src/main.rs"]
    with pytest.raises(SourceError, match=r"uncommitted changes \(src/extra.rs, src/main.rs\)"):
        refuse_dirty(CrateView.from_options(options), allow_dirty=False)
    refuse_dirty(CrateView.from_options(options), allow_dirty=True)

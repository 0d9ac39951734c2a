"""host/bootstrap without Debian: recipes, package-set manifests, and a stand-in mmdebstrap.

The stand-in is a small script on PATH that records its argv and SOURCE_DATE_EPOCH and
writes what the real one would (a tarball, or .debs through the sync-out hooks).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import stat
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.config.resolve.toolchains import AptSources, BaseSpec, load_base_spec
from orchestrator.errors import BootstrapError, CacheCorruptError
from orchestrator.host import bootstrap
from orchestrator.host.bootstrap import (
    MANIFEST,
    PackageFile,
    PackageSet,
    deb_identity,
    fetch_packages,
    load_package_set,
    make_rootfs,
    read_manifest,
    recipe_file,
    rootfs_recipe,
)
from orchestrator.progress.reporter import StepLog

FAKE_MMDEBSTRAP = """\
import json, os, sys
from pathlib import Path

args = sys.argv[1:]
if args == ["--version"]:
    print("mmdebstrap 1.5.7")
    sys.exit(0)
with open(os.environ["FAKE_CALLS"], "a") as calls:
    calls.write(json.dumps({"argv": args, "epoch": os.environ.get("SOURCE_DATE_EPOCH")}) + "\\n")
print("I: fake mmdebstrap running")
code = int(os.environ.get("FAKE_EXIT", "0"))
if code:
    print("E: the mirror said no")
    if args[-2] != "/dev/null":
        Path(args[-2]).write_bytes(b"half a tarball")
    sys.exit(code)
if args[-2] != "/dev/null":
    Path(args[-2]).write_bytes(b"rootfs tarball bytes")
    sys.exit(0)
for hook in (a.removeprefix("--customize-hook=") for a in args if "sync-out" in a):
    _, source, target = hook.split(" ")
    out = Path(target)
    if os.environ.get("FAKE_NODEBS"):
        continue
    if source == "/var/cache/apt/archives":
        (out / "gcc_4%3a14.2.0-1_amd64.deb").write_bytes(b"gcc deb")
        (out / "libc6_2.41-1_amd64.deb").write_bytes(b"libc deb")
        (out / "lock").write_text("")
        (out / "partial").mkdir()
    else:
        for name in os.environ.get("FAKE_UNPACK", "").split():
            (out / name).write_bytes(name.encode())
"""


@pytest.fixture
def fake_mmdebstrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Puts the stand-in first on PATH; returns the file its calls are recorded in."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    program = bin_dir / "mmdebstrap"
    program.write_text(f"#!{sys.executable}\n{FAKE_MMDEBSTRAP}")
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("FAKE_CALLS", str(calls))
    monkeypatch.delenv("FAKE_EXIT", raising=False)
    monkeypatch.delenv("FAKE_UNPACK", raising=False)
    monkeypatch.delenv("FAKE_NODEBS", raising=False)
    return calls


def calls_in(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def step_log() -> tuple[StepLog, io.StringIO]:
    handle = io.StringIO()
    return StepLog(handle, None, None, "bootstrap"), handle


SPEC = BaseSpec(
    suite="trixie",
    mirror="http://snapshot.debian.org/archive/debian/20260101T000000Z",
    variant="minbase",
    components=("main",),
    source_date_epoch=1767225600,
)


# -- pure parts ------------------------------------------------------------------------
def test_rootfs_recipe_argv(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert rootfs_recipe(SPEC, "/out/rootfs.tar") == [
        "--variant=minbase",
        "--mode=root",
        "--components=main",
        "--aptopt=Acquire::Retries=3",
        "trixie",
        "/out/rootfs.tar",
        SPEC.mirror,
    ]
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "--mode=unshare" in rootfs_recipe(SPEC)
    assert rootfs_recipe(load_base_spec())[-2] == "<rootfs.tar>"


def test_common_args_merge_components_and_add_foreign_architectures() -> None:
    args = bootstrap._common_args(
        replace(SPEC, components=("main", "contrib")), ("non-free", "main"), ("arm64",)
    )
    assert "--components=main,contrib,non-free" in args
    assert args[-1] == "--architectures=amd64,arm64"


def test_recipe_file_sits_beside_the_tarball() -> None:
    assert recipe_file(Path("/c/rootfs/abc.tar")) == Path("/c/rootfs/abc.json")


@pytest.mark.parametrize(
    ("name", "identity"),
    [
        ("gcc_4%3a14.2.0-1_amd64.deb", ("gcc", "4:14.2.0-1", "amd64")),
        ("/x/unpack/libc6_2.41-1_arm64.deb", ("libc6", "2.41-1", "arm64")),
        (
            "rustc-web_1.96.0+dfsg1-1~deb13u1_amd64.deb",
            ("rustc-web", "1.96.0+dfsg1-1~deb13u1", "amd64"),
        ),
    ],
)
def test_deb_identity(name: str, identity: tuple[str, str, str]) -> None:
    assert deb_identity(name) == identity


def test_deb_identity_refuses_a_name_without_three_fields() -> None:
    with pytest.raises(ValueError, match="unpack"):
        deb_identity("gcc.deb")


def write_set(directory: Path, files: dict[str, bytes]) -> list[dict[str, object]]:
    directory.mkdir(parents=True, exist_ok=True)
    entries: list[dict[str, object]] = []
    for name, data in files.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_bytes(data)
        entries.append(
            {"file": name, "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
        )
    (directory / MANIFEST).write_text(json.dumps(entries))
    return entries


def test_package_set_round_trip(tmp_path: Path) -> None:
    entries = write_set(tmp_path / "set", {"a_1_amd64.deb": b"a", "unpack/b_2_arm64.deb": b"bb"})
    expected = tuple(
        PackageFile(str(e["file"]), str(e["sha256"]), int(str(e["size"]))) for e in entries
    )
    assert read_manifest(tmp_path / "set") == expected
    loaded = load_package_set(tmp_path / "set")
    assert loaded == PackageSet(tmp_path / "set", expected)
    lines = "".join(f"{f.sha256}  {f.file}\n" for f in expected)
    assert loaded.digest == hashlib.sha256(lines.encode()).hexdigest()


def test_missing_package_set_is_none(tmp_path: Path) -> None:
    assert read_manifest(tmp_path) is None
    assert load_package_set(tmp_path / "absent") is None


@pytest.mark.parametrize(
    "manifest",
    ["not json", '[{"file": "a.deb"}]', '[{"file": "a", "sha256": "x", "size": "z"}]', "[1]"],
)
def test_unreadable_manifest_is_cache_corruption(tmp_path: Path, manifest: str) -> None:
    (tmp_path / MANIFEST).write_text(manifest)
    with pytest.raises(CacheCorruptError, match=rf"{tmp_path / MANIFEST} is unreadable"):
        load_package_set(tmp_path)


def test_changed_or_missing_deb_is_cache_corruption(tmp_path: Path) -> None:
    write_set(tmp_path, {"a_1_amd64.deb": b"a", "b_1_amd64.deb": b"b"})
    (tmp_path / "a_1_amd64.deb").write_bytes(b"A")
    with pytest.raises(CacheCorruptError, match=r"a_1_amd64\.deb is missing or does not match"):
        load_package_set(tmp_path)
    (tmp_path / "a_1_amd64.deb").write_bytes(b"a")
    (tmp_path / "b_1_amd64.deb").unlink()
    with pytest.raises(CacheCorruptError) as caught:
        load_package_set(tmp_path)
    assert caught.value.hint is not None
    assert f"Remove {tmp_path}" in caught.value.hint


# -- with the stand-in mmdebstrap -------------------------------------------------------
def test_without_mmdebstrap_is_a_bootstrap_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shutil, "which", lambda _name: None)
    log, _ = step_log()
    with pytest.raises(BootstrapError, match="mmdebstrap is not installed") as caught:
        make_rootfs(SPEC, tmp_path / "rootfs.tar", log)
    assert caught.value.exit_code == 21
    assert not (tmp_path / "rootfs.tar").exists()


def test_make_rootfs(fake_mmdebstrap: Path, tmp_path: Path) -> None:
    dest = tmp_path / "cache" / "rootfs" / "base.tar"
    log, handle = step_log()
    digest = make_rootfs(SPEC, dest, log)
    assert dest.read_bytes() == b"rootfs tarball bytes"
    assert digest == hashlib.sha256(b"rootfs tarball bytes").hexdigest()
    [call] = calls_in(fake_mmdebstrap)
    assert call["epoch"] == "1767225600"
    argv = call["argv"]
    assert isinstance(argv, list)
    partial = Path(argv[-2])
    assert partial.parent.parent == dest.parent  # a temporary folder beside the destination
    assert partial.parent.name.startswith(".rootfs-")
    assert argv == rootfs_recipe(SPEC, str(partial))
    recipe = json.loads(recipe_file(dest).read_text())
    assert recipe == {
        "mmdebstrap_version": "mmdebstrap 1.5.7",
        "command": ["mmdebstrap", *rootfs_recipe(SPEC)],
        "sha256": digest,
    }
    assert sorted(p.name for p in dest.parent.iterdir()) == ["base.json", "base.tar"]
    text = handle.getvalue()
    assert text.startswith("+ SOURCE_DATE_EPOCH=1767225600 ")
    assert "I: fake mmdebstrap running" in text


def test_failed_make_rootfs_leaves_nothing(
    fake_mmdebstrap: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_EXIT", "3")
    dest = tmp_path / "rootfs" / "base.tar"
    log, handle = step_log()
    with pytest.raises(BootstrapError, match="mmdebstrap exited with 3") as caught:
        make_rootfs(SPEC, dest, log)
    assert caught.value.hint is not None
    assert "toolchains/" in caught.value.hint
    assert list(dest.parent.iterdir()) == []  # neither the half tarball nor a recipe
    assert "E: the mirror said no" in handle.getvalue()


def test_fetch_packages(fake_mmdebstrap: Path, tmp_path: Path) -> None:
    dest = tmp_path / "packages" / "set"
    dest.mkdir(parents=True)
    (dest / "old.deb").write_bytes(b"replaced")
    log, handle = step_log()
    found = fetch_packages(SPEC, {"gcc": "4:14.2.0-1", "cmake": "3.31"}, dest, log)
    assert [f.file for f in found.files] == ["gcc_4%3a14.2.0-1_amd64.deb", "libc6_2.41-1_amd64.deb"]
    assert sorted(p.name for p in dest.iterdir()) == sorted(
        [MANIFEST, "unpack", "gcc_4%3a14.2.0-1_amd64.deb", "libc6_2.41-1_amd64.deb"]
    )  # the old set is gone, and apt's lock file and partial/ folder too
    assert load_package_set(dest) == found
    assert sorted(p.name for p in dest.parent.iterdir()) == ["set"]
    [call] = calls_in(fake_mmdebstrap)
    assert call["epoch"] == str(SPEC.source_date_epoch)
    argv = call["argv"]
    assert isinstance(argv, list)
    assert "--include=cmake=3.31,gcc=4:14.2.0-1" in argv
    assert "--skip=download/empty" in argv
    assert argv[-3:] == ["trixie", "/dev/null", SPEC.mirror]
    assert not any("apt-get download" in a for a in argv)
    assert f"2 packages, 0 MB in {dest}" in handle.getvalue()


def test_fetch_packages_with_foreign_arch_and_unpacked_debs(
    fake_mmdebstrap: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_UNPACK", "libcuda_1_arm64.deb")
    log, _ = step_log()
    found = fetch_packages(
        SPEC,
        {"gcc": "4:14.2.0-1"},
        tmp_path / "set",
        log,
        sources=AptSources(components=("non-free",), architectures=("arm64",)),
        unpack={"libcuda": "1"},
    )
    assert found.files[-1].file == "unpack/libcuda_1_arm64.deb"
    [call] = calls_in(fake_mmdebstrap)
    argv = call["argv"]
    assert isinstance(argv, list)
    assert "--components=main,non-free" in argv
    assert "--architectures=amd64,arm64" in argv
    assert any('apt-get download libcuda=1"' in a for a in argv)


def test_fetch_packages_refuses_unexpected_unpack_files(
    fake_mmdebstrap: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_UNPACK", "libcuda_1_arm64.deb extra_2_arm64.deb")
    log, _ = step_log()
    with pytest.raises(BootstrapError, match=r"fetched other files than \['libcuda'\]"):
        fetch_packages(SPEC, {"gcc": "1"}, tmp_path / "set", log, unpack={"libcuda": "1"})
    assert list(tmp_path.glob("set*")) == []
    assert list(tmp_path.glob(".packages-*")) == []


def test_failed_fetch_leaves_the_old_set_alone(
    fake_mmdebstrap: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_set(tmp_path / "set", {"a_1_amd64.deb": b"a"})
    monkeypatch.setenv("FAKE_EXIT", "100")
    log, _ = step_log()
    with pytest.raises(BootstrapError, match="exited with 100"):
        fetch_packages(SPEC, {"gcc": "1"}, tmp_path / "set", log)
    assert load_package_set(tmp_path / "set") is not None
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_fetch_that_downloads_nothing_is_an_error(
    fake_mmdebstrap: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_NODEBS", "1")
    log, _ = step_log()
    with pytest.raises(BootstrapError, match="downloaded no packages"):
        fetch_packages(SPEC, {"gcc": "1"}, tmp_path / "set", log)
    assert not (tmp_path / "set").exists()

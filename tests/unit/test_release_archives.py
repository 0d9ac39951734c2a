"""The release's archives and install.sh: deterministic packing, publication beside the
artifact folder (signed, listed, a provenance subject), `verify`, and the installer's
choices run for real with the host's sh on a local release folder."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
from contextlib import ExitStack
from pathlib import Path

import pytest

from orchestrator.execute.ship import release_index
from orchestrator.model.hashing import sha256_file
from orchestrator.supply.archive_docs import crate_docs
from orchestrator.supply.archives import (
    Member,
    archive_name,
    archived_files,
    write_archive,
    write_members,
)
from orchestrator.supply.attest import Signer
from orchestrator.supply.installer import INSTALLER, render_installer
from orchestrator.supply.minisign import SecretKey, dsse_verify, verify_file
from orchestrator.supply.verify import Verifier, verify_release

from .execute_rig import make_options
from .publish_rig import extract_and_publish, ready_to_publish

TOP = "demo-1.2.3-linux-x86_64-cpu"


def _binaries(folder: Path) -> list[Path]:
    folder.mkdir(exist_ok=True)
    (folder / "demo").write_bytes(b"\x7fELF demo")
    (folder / "demo-helper").write_bytes(b"\x7fELF helper")
    return [folder / "demo", folder / "demo-helper"]


def test_an_archive_is_the_same_bytes_every_time(tmp_path: Path) -> None:
    binaries = _binaries(tmp_path / "bin")
    docs = [("README.md", b"# demo\n"), ("LICENSE-MIT", b"MIT\n")]
    first = write_archive(tmp_path / "a.tar.xz", top=TOP, binaries=binaries, docs=docs, mtime=7)
    os.utime(binaries[0], (1, 1))  # the files' own times and owners play no part
    second = write_archive(
        tmp_path / "b.tar.xz", top=TOP, binaries=binaries[::-1], docs=docs[::-1], mtime=7
    )
    assert first.read_bytes() == second.read_bytes()
    later = write_archive(tmp_path / "c.tar.xz", top=TOP, binaries=binaries, docs=docs, mtime=8)
    assert later.read_bytes() != first.read_bytes()
    with tarfile.open(first, "r:xz") as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == [
        TOP,
        *(f"{TOP}/{n}" for n in ("LICENSE-MIT", "README.md", "demo", "demo-helper")),
    ]
    assert {(m.uid, m.gid, m.uname, m.gname, m.mtime) for m in members} == {(0, 0, "", "", 7)}
    assert [oct(m.mode) for m in members] == ["0o755", "0o644", "0o644", "0o755", "0o755"]
    files = archived_files(first)
    assert files["demo"] == (0o755, sha256_file(binaries[0]))


def test_docs_come_from_the_top_of_the_source_snapshot() -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name in ("src/README.md", "src/COPYING", "src/src/README.md", "src/main.rs"):
            info = tarfile.TarInfo(name)
            info.size = len(name)
            tar.addfile(info, io.BytesIO(name.encode()))
        link = tarfile.TarInfo("src/CHANGELOG.md")
        link.type, link.linkname = tarfile.SYMTYPE, "docs/CHANGES.md"
        tar.addfile(link)
    assert crate_docs(buffer.getvalue()) == [
        ("COPYING", b"src/COPYING"),
        ("README.md", b"src/README.md"),
    ]


def test_publish_writes_a_signed_archive_and_installer_that_verify_covers(
    project: Path, tmp_path: Path
) -> None:
    options = make_options(project)
    key = SecretKey.generate()
    with ExitStack() as stack:
        rig = ready_to_publish(options, stack, tmp_path, Signer(key, True, "test key"))
        extract_and_publish(rig)
    plan = rig.pipeline.plan
    release = options.artifacts_dir / plan.release_dir
    archive = release / archive_name(plan.artifact_dir)
    files = archived_files(archive)
    assert files["demo"] == (0o755, sha256_file(release / plan.artifact_dir / "demo"))
    assert "README.md" in files  # the fake snapshot's
    for path in (archive, release / INSTALLER):
        verify_file(path, path.with_name(path.name + ".minisig").read_text(), key.public)
    sums = (release / "SHA256SUMS").read_text()
    for name in (archive.name, f"{archive.name}.minisig", INSTALLER, f"{INSTALLER}.minisig"):
        assert f"  {name}\n" in sums
    envelope = json.loads((release / "provenance.intoto.jsonl").read_text())
    subjects = {
        s["name"]: s["digest"]["sha256"]
        for s in json.loads(dsse_verify(envelope, key.public))["subject"]
    }
    assert subjects[archive.name] == sha256_file(archive)
    checks, _ = verify_release(release, None)
    assert [c for c in checks if not c.ok] == []
    assert {c.check for c in checks if c.file == archive.name} >= {"signature", "archive"}

    # a tampered archive: verify refuses it, and signing the release again leaves it out
    archive.write_bytes(archive.read_bytes()[:-8] + b"tampered")
    checks, _ = verify_release(release, None)
    assert {(c.file, c.check) for c in checks if not c.ok} >= {
        ("SHA256SUMS", "checksums"),
        (archive.name, "signature"),
        ("provenance.intoto.jsonl", "provenance"),
    }
    assert rig.pipeline.signer is not None
    signed = release_index.update_release_index(release, rig.pipeline.signer)
    assert signed.left_out == [f"{archive.name}: not the file that was signed"]
    assert f"  {archive.name}\n" not in (release / "SHA256SUMS").read_text()


def test_an_archive_whose_binary_differs_fails_verify(tmp_path: Path) -> None:
    binaries = _binaries(tmp_path / TOP)
    archive = write_archive(
        tmp_path / f"{TOP}.tar.xz", top=TOP, binaries=binaries, docs=[], mtime=1
    )
    (tmp_path / TOP / "demo").write_bytes(b"another")
    verifier = Verifier(tmp_path, SecretKey.generate().public)
    verifier.archive(archive, binaries)
    assert verifier.checks[0].detail == "demo in the archive is not the signed one"
    archive.write_bytes(b"not xz")
    verifier.archive(archive, binaries)
    assert not verifier.checks[1].ok and "cannot be read" in verifier.checks[1].detail


# -- install.sh, run by the host's sh on a local release --------------------------------
def _release(tmp_path: Path) -> Path:
    """demo 1.2.3 with a portable (v2) and a v3 x86_64 archive, as a release lists them."""
    release = tmp_path / "demo-1.2.3"
    release.mkdir()
    lines = []
    for suffix in ("", "-v3"):
        top = f"demo-1.2.3-linux-x86_64-cpu{suffix}"
        folder = tmp_path / "built" / top
        folder.mkdir(parents=True)
        (folder / "demo").write_text(f"#!/bin/sh\necho demo{suffix or '-portable'}\n")
        archive = write_archive(
            release / archive_name(top), top=top, binaries=[folder / "demo"], docs=[], mtime=1
        )
        lines.append(f"{sha256_file(archive)}  {archive.name}\n")
    (release / "SHA256SUMS").write_text("".join(lines))
    (release / INSTALLER).write_text(render_installer("demo", "1.2.3"))
    return release


def _install(
    release: Path, prefix: Path, *args: str, level: str = "", shell: str = "sh"
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ORCHESTRATOR_INSTALL_LEVEL": level}
    return subprocess.run(
        [shell, str(release / INSTALLER), "--prefix", str(prefix), *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


needs_tools = pytest.mark.skipif(
    os.uname().machine != "x86_64" or not all(shutil.which(t) for t in ("xz", "sha256sum")),
    reason="the installer test runs on x86_64 with xz and sha256sum",
)


@needs_tools
@pytest.mark.parametrize(
    ("level", "expected"), [("v2", "demo-portable"), ("v3", "demo-v3"), ("v4", "demo-v3")]
)
def test_the_installer_picks_the_best_archive_for_the_level(
    tmp_path: Path, level: str, expected: str
) -> None:
    release, prefix = _release(tmp_path), tmp_path / "root"
    done = _install(release, prefix, level=level)
    assert done.returncode == 0, done.stderr
    assert (
        subprocess.run([prefix / "bin" / "demo"], capture_output=True, text=True, check=True).stdout
        == f"{expected}\n"
    )
    assert sorted(p.relative_to(prefix).as_posix() for p in prefix.rglob("*")) == [
        "bin",
        "bin/demo",
    ]


# Stands in for the dispatcher (execute/ship/dispatcher.c): it finds libexec/ beside the folder
# of its real path, and exits 127 when the level build is not there.
FAKE_DISPATCHER = """#!/bin/sh
real=$(readlink -f -- "$0")
exec "${real%/*}/../libexec/demo/demo-x86-64-v2" "$@" 2>/dev/null || exit 127
"""


def _with_auto_archive(release: Path) -> None:
    """Add the -auto archive (bin/demo dispatching to libexec/demo/) to the release."""
    top = "demo-1.2.3-linux-x86_64-cpu-auto"
    members = [
        Member("bin/demo", FAKE_DISPATCHER.encode(), executable=True),
        Member("libexec/demo/demo-x86-64-v2", b"#!/bin/sh\necho demo-auto-v2\n", True),
    ]
    archive = write_members(release / archive_name(top), top=top, members=members, mtime=1)
    with (release / "SHA256SUMS").open("a") as sums:
        sums.write(f"{sha256_file(archive)}  {archive.name}\n")


@needs_tools
@pytest.mark.parametrize("shell", ["dash", "bash", "sh"])
@pytest.mark.parametrize("spelt", [False, True], ids=["plain", "home-libexec-exists"])
def test_the_auto_archive_installs_through_a_prefix_reached_by_a_symlink(
    tmp_path: Path, shell: str, spelt: bool
) -> None:
    """--prefix home, where home/bin -> ../real/bin: libexec/ goes beside the real bin/,
    where the dispatcher looks. dash's cd resolved `home/bin/../libexec` by its spelling:
    rc 2, or, where home/libexec exists, an install there and a program that always exits
    127."""
    release = _release(tmp_path)
    _with_auto_archive(release)
    home = tmp_path / "home"
    (tmp_path / "real" / "bin").mkdir(parents=True)
    home.mkdir()
    (home / "bin").symlink_to("../real/bin")
    if spelt:
        (home / "libexec").mkdir()
    done = _install(release, home, shell=shell)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "real" / "libexec" / "demo" / "demo-x86-64-v2").is_file()
    assert not (home / "libexec" / "demo").exists()
    ran = subprocess.run([home / "bin" / "demo"], capture_output=True, text=True, check=False)
    assert (ran.returncode, ran.stdout) == (0, "demo-auto-v2\n")


@needs_tools
@pytest.mark.parametrize("spelling", ["root", "root/"])
def test_a_prefix_is_the_root_of_bin_and_libexec(tmp_path: Path, spelling: str) -> None:
    """--prefix DIR: the dispatcher into DIR/bin, the level builds into DIR/libexec, as
    installers users know treat a prefix; nothing beside DIR."""
    release = _release(tmp_path)
    _with_auto_archive(release)
    done = _install(release, tmp_path / spelling)
    assert done.returncode == 0, done.stderr
    prefix = tmp_path / "root"
    assert sorted(p.relative_to(prefix).as_posix() for p in prefix.rglob("*")) == [
        "bin",
        "bin/demo",
        "libexec",
        "libexec/demo",
        "libexec/demo/demo-x86-64-v2",
    ]
    assert not (tmp_path / "libexec").exists()
    assert "--prefix is the root" not in done.stderr
    ran = subprocess.run([prefix / "bin" / "demo"], capture_output=True, text=True, check=False)
    assert (ran.returncode, ran.stdout) == (0, "demo-auto-v2\n")


@needs_tools
def test_the_default_prefix_is_dot_local_and_a_bin_prefix_gets_a_note(tmp_path: Path) -> None:
    release, home = _release(tmp_path), tmp_path / "home"
    _with_auto_archive(release)
    env = {**os.environ, "HOME": str(home), "ORCHESTRATOR_INSTALL_LEVEL": ""}
    done = subprocess.run(
        ["sh", str(release / INSTALLER)], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert (home / ".local" / "bin" / "demo").is_file()
    assert (home / ".local" / "libexec" / "demo" / "demo-x86-64-v2").is_file()
    # The old spelling, --prefix DIR/bin: installed where it says, and told so.
    done = _install(release, tmp_path / "opt" / "bin")
    assert done.returncode == 0, done.stderr
    assert f"--prefix is the root: binaries go into {tmp_path}/opt/bin/bin" in done.stderr
    assert (tmp_path / "opt" / "bin" / "bin" / "demo").is_file()


@needs_tools
def test_the_installer_refuses_a_tampered_archive_and_installs_nothing(tmp_path: Path) -> None:
    release, prefix = _release(tmp_path), tmp_path / "root"
    archive = release / "demo-1.2.3-linux-x86_64-cpu.tar.xz"
    archive.write_bytes(archive.read_bytes() + b"\0")
    done = _install(release, prefix, "--from", str(release), level="v2")
    assert done.returncode != 0
    assert "sha256" in done.stderr and "not installed" in done.stderr
    assert not prefix.exists()


@needs_tools
def test_the_installer_refuses_what_it_cannot_do(tmp_path: Path) -> None:
    release, prefix = _release(tmp_path), tmp_path / "root"
    assert "unknown CPU level v9" in _install(release, prefix, level="v9").stderr
    done = _install(release, prefix, "--flavor", "cuda", level="v3")
    assert done.returncode != 0 and "no cuda archive for x86_64" in done.stderr
    assert (
        "https:// URL or a local folder" in _install(release, prefix, "--from", "http://x").stderr
    )
    assert not prefix.exists()


def test_the_installer_is_shellcheck_clean(tmp_path: Path) -> None:
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed")
    script = tmp_path / INSTALLER
    script.write_text(render_installer("demo", "1.2.3"))
    done = subprocess.run(
        ["shellcheck", "-s", "sh", str(script)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout


def test_the_installer_takes_plain_names_only() -> None:
    with pytest.raises(ValueError, match="cannot be written"):
        render_installer("demo'; rm -rf /", "1.0")


def _fake_tool(folder: Path, name: str, body: str) -> None:
    folder.mkdir(exist_ok=True)
    tool = folder / name
    tool.write_text(f"#!/bin/sh\n{body}\n")
    tool.chmod(0o755)


@needs_tools
def test_the_installer_downloads_from_a_url_and_checks_minisign(tmp_path: Path) -> None:
    release, prefix, tools = _release(tmp_path), tmp_path / "root", tmp_path / "tools"
    # curl that serves https://example.test/r/<file> from the release folder
    _fake_tool(
        tools,
        "curl",
        'while [ $# -gt 1 ]; do [ "$1" = -o ] && out=$2; shift; done\n'
        f'cp "{release}/${{1#https://example.test/r/}}" "$out"',
    )
    # minisign that accepts SHA256SUMS and refuses the archive: a bad signature
    _fake_tool(tools, "minisign", 'case "$*" in *SHA256SUMS*) exit 0 ;; *) exit 1 ;; esac')
    for name in ("SHA256SUMS.minisig", "demo-1.2.3-linux-x86_64-cpu.tar.xz.minisig"):
        (release / name).write_text("signature\n")
    env = {**os.environ, "PATH": f"{tools}:{os.environ['PATH']}"}
    args = ["sh", str(release / INSTALLER), "--from", "https://example.test/r/", "--prefix"]
    done = subprocess.run(
        [*args, str(prefix), "--cpu-level", "v2"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "no --key: signatures not checked" in done.stderr
    assert (prefix / "bin" / "demo").is_file()
    shutil.rmtree(prefix)
    done = subprocess.run(
        [*args, str(prefix), "--cpu-level", "v2", "--key", str(tmp_path / "publisher.pub")],
        env=env,
        check=False,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1
    assert "bad signature; not installed" in done.stderr
    assert not prefix.exists()


@needs_tools
def test_a_published_release_installs_with_the_real_minisign(project: Path, tmp_path: Path) -> None:
    if shutil.which("minisign") is None:
        pytest.skip("minisign is not installed")
    options = make_options(project)
    key = SecretKey.generate()
    with ExitStack() as stack:
        rig = ready_to_publish(options, stack, tmp_path, Signer(key, True, "test key"))
        extract_and_publish(rig)
    release = options.artifacts_dir / rig.pipeline.plan.release_dir
    prefix = tmp_path / "root"
    done = _install(release, prefix, "--key", str(release / "minisign.pub"), level="v2")
    assert done.returncode == 0, done.stderr
    assert "minisign signatures verified" in done.stderr
    assert (prefix / "bin" / "demo").read_bytes() == (
        release / rig.pipeline.plan.artifact_dir / "demo"
    ).read_bytes()
    other = tmp_path / "other.pub"
    other.write_text(SecretKey.generate().public.to_text())
    shutil.rmtree(prefix)
    done = _install(release, prefix, "--key", str(other), level="v2")
    assert done.returncode == 1 and "bad signature; not installed" in done.stderr
    assert not prefix.exists()

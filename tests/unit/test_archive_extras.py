"""[archive]: extra files from the crate (archive.include) and printed by the binary
([[archive.generate]]), the deterministic .zip (archive.formats), and how publication,
verify and the config check them."""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
import tarfile
import zipfile
from contextlib import ExitStack
from pathlib import Path

import pytest

from orchestrator.config.declarations.kinds import Run
from orchestrator.config.resolve.archive_include import (
    check_archive_formats,
    check_generate_entries,
    included_files,
)
from orchestrator.config.resolve.options import resolve
from orchestrator.errors import ConfigError, GeneratedFileError, OrchestratorError
from orchestrator.execute.ship.archive_stage import ArtifactToPublish, archive_extras
from orchestrator.model.documents.records import BuildManifest, read_record
from orchestrator.model.hashing import sha256_bytes, sha256_file
from orchestrator.release.lock.pin import archive_outputs
from orchestrator.supply.archives import (
    GENERATED_DIR,
    ZIP_SUFFIX,
    archive_name,
    archived_files,
    write_archive,
)
from orchestrator.supply.attest import Signer
from orchestrator.supply.minisign import SecretKey, dsse_verify
from orchestrator.supply.verify import verify_release
from orchestrator.supply.zip_archive import dos_time, write_zip, zipped_files

from .conftest import write_config
from .execute_rig import make_options
from .publish_rig import extract_and_publish, ready_to_publish

TOP = "demo-1.2.3-linux-x86_64-cpu"


def _snapshot(*files: tuple[str, bytes], links: tuple[str, ...] = ()) -> bytes:
    """A source snapshot as host/source.py packs it: everything under src/."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files:
            info = tarfile.TarInfo(f"src/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name in links:
            link = tarfile.TarInfo(f"src/{name}")
            link.type, link.linkname = tarfile.SYMTYPE, "README.md"
            tar.addfile(link)
    return buffer.getvalue()


SNAPSHOT = _snapshot(
    ("README.md", b"# demo\n"),
    ("doc/demo.1", b".TH DEMO 1\n"),
    ("completions/demo.bash", b"complete -F _demo demo\n"),
    ("completions/demo.fish", b"complete -c demo\n"),
    ("completions/deeper/demo.zsh", b"#compdef demo\n"),
)


def test_include_globs_take_files_at_their_path_one_segment_per_segment() -> None:
    found = included_files(SNAPSHOT, ["doc/demo.1", "completions/*.bash", "completions/*.fish"])
    assert found == [
        ("completions/demo.bash", b"complete -F _demo demo\n"),
        ("completions/demo.fish", b"complete -c demo\n"),
        ("doc/demo.1", b".TH DEMO 1\n"),
    ]  # `*` never crosses "/": deeper/demo.zsh is not taken


@pytest.mark.parametrize(
    "pattern", ["/etc/passwd", "../secret", "doc/../../x", "doc\\demo.1", "", " "]
)
def test_include_refuses_paths_that_could_leave_the_crate(pattern: str) -> None:
    with pytest.raises(ConfigError, match="not a relative path") as raised:
        included_files(SNAPSHOT, [pattern])
    assert raised.value.hint  # says how to write it


def test_include_refuses_a_pattern_that_matches_nothing_and_a_link() -> None:
    with pytest.raises(ConfigError, match=r"'man/\*.1' matches no file") as raised:
        included_files(SNAPSHOT, ["doc/demo.1", "man/*.1"])
    assert "package.exclude" in raised.value.hint
    linked = _snapshot(("README.md", b"x"), links=("doc/README",))
    with pytest.raises(ConfigError, match="which is a link"):
        included_files(linked, ["doc/*"])


def test_generate_entries_are_checked_before_anything_builds() -> None:
    check_generate_entries([Run(("completions", "bash"), path="completions/demo.bash")], ["demo"])
    bad = [
        (Run((), path="../demo.bash"), "not a relative path"),
        (Run((), path="completions/*.bash"), "not a pattern"),
        (Run((), binary="other", path="x.txt"), "is not one the artifact ships"),
        (Run((), path="demo"), "already has a file at that path"),  # the binary's name
        (Run((), path="doc/demo.1"), "already has a file at that path"),  # included
    ]
    for entry, message in bad:
        with pytest.raises(ConfigError, match=message):
            check_generate_entries([entry], ["demo"], ["doc/demo.1"])
    with pytest.raises(ConfigError, match=r'"tar\.xz" is missing'):
        check_archive_formats(["zip"])
    with pytest.raises(ConfigError, match="unknown"):
        check_archive_formats(["tar.xz", "7z"])


def test_archive_tables_resolve_from_the_config(project: Path) -> None:
    write_config(
        project,
        '[package]\ncrate = "crate"\n[train]\nworkloads = [["--help"]]\n'
        '[archive]\nformats = ["tar.xz", "zip"]\ninclude = ["doc/demo.1"]\n'
        '[[archive.generate]]\npath = "completions/demo.bash"\nargs = ["completions", "bash"]\n',
    )
    options = resolve(project / "orchestrator.toml", env={})
    assert options.archive_formats == ("tar.xz", "zip")
    assert options.archive_include == ("doc/demo.1",)
    assert options.archive_generate == (Run(("completions", "bash"), path="completions/demo.bash"),)
    write_config(project, '[package]\ncrate = "crate"\n[[archive.generate]]\nargs = ["x"]\n')
    with pytest.raises(ConfigError, match=r"archive\.generate: expected"):
        resolve(project / "orchestrator.toml", env={})


def _binaries(folder: Path) -> list[Path]:
    folder.mkdir(exist_ok=True)
    (folder / "demo").write_bytes(b"\x7fELF demo")
    return [folder / "demo"]


EXTRAS = [("completions/demo.bash", b"complete\n"), ("doc/demo.1", b".TH\n")]


def test_the_tar_holds_extras_at_their_paths_with_their_folders(tmp_path: Path) -> None:
    binaries = _binaries(tmp_path / "bin")
    archive = write_archive(
        tmp_path / "a.tar.xz", top=TOP, binaries=binaries, docs=[], mtime=7, extras=EXTRAS
    )
    with tarfile.open(archive, "r:xz") as tar:
        listed = [(m.name, m.isdir(), oct(m.mode)) for m in tar.getmembers()]
    assert listed == [
        (TOP, True, "0o755"),
        (f"{TOP}/completions", True, "0o755"),
        (f"{TOP}/completions/demo.bash", False, "0o644"),
        (f"{TOP}/demo", False, "0o755"),
        (f"{TOP}/doc", True, "0o755"),
        (f"{TOP}/doc/demo.1", False, "0o644"),
    ]
    assert archived_files(archive)["doc/demo.1"] == (0o644, sha256_bytes(b".TH\n"))


def test_a_zip_is_the_same_bytes_whatever_the_files_times_and_umask(tmp_path: Path) -> None:
    binaries = _binaries(tmp_path / "bin")
    docs = [("README.md", b"# demo\n")]
    first = write_zip(
        tmp_path / "a.zip", top=TOP, binaries=binaries, docs=docs, mtime=1700000000, extras=EXTRAS
    )
    os.utime(binaries[0], (1, 1))
    binaries[0].chmod(0o600)
    previous = os.umask(0o077)
    try:
        second = write_zip(
            tmp_path / "b.zip",
            top=TOP,
            binaries=binaries,
            docs=docs,
            mtime=1700000000,
            extras=EXTRAS[::-1],
        )
    finally:
        os.umask(previous)
    assert first.read_bytes() == second.read_bytes()
    assert stat.S_IMODE(second.stat().st_mode) == 0o644
    later = write_zip(tmp_path / "c.zip", top=TOP, binaries=binaries, docs=docs, mtime=1800000000)
    assert later.read_bytes() != first.read_bytes()
    with zipfile.ZipFile(first) as bundle:
        entries = bundle.infolist()
    names = [e.filename for e in entries]
    assert names == sorted(names) and names[0] == f"{TOP}/"
    assert {e.date_time for e in entries} == {(2023, 11, 14, 22, 13, 20)}
    assert {e.extra for e in entries} == {b""} and {e.create_system for e in entries} == {3}
    modes = {e.filename: stat.S_IMODE(e.external_attr >> 16) for e in entries}
    assert modes[f"{TOP}/demo"] == 0o755 and modes[f"{TOP}/doc/demo.1"] == 0o644
    assert {e.compress_type for e in entries if not e.is_dir()} == {zipfile.ZIP_DEFLATED}
    assert zipped_files(first) == archived_files(
        write_archive(
            tmp_path / "a.tar.xz",
            top=TOP,
            binaries=binaries,
            docs=docs,
            mtime=1700000000,
            extras=EXTRAS,
        )
    )  # the same files, modes and bytes as the .tar.xz


def test_dos_time_cannot_go_below_1980() -> None:
    assert dos_time(0) == (1980, 1, 1, 0, 0, 0)
    assert dos_time(315532800 + 86400) == (1980, 1, 2, 0, 0, 0)


def test_a_zip_with_an_entry_outside_its_top_folder_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "evil.zip"
    with zipfile.ZipFile(path, "w") as bundle:
        bundle.writestr(f"{TOP}/demo", b"x")
        bundle.writestr("../escape", b"x")
    with pytest.raises(ValueError, match="unexpected entry"):
        zipped_files(path)
    path.write_bytes(b"PK not a zip")
    with pytest.raises(ValueError, match="cannot be read"):
        zipped_files(path)


def _entry(bundle: zipfile.ZipFile, tar: tarfile.TarFile, name: str, kind: int) -> None:
    """One entry, a file holding "x" or a link to "x", written into both archives."""
    info = zipfile.ZipInfo(name)
    info.external_attr = (kind | 0o755) << 16
    bundle.writestr(info, b"x")
    member = tarfile.TarInfo(name)
    member.mode = 0o755
    if kind == stat.S_IFLNK:
        member.type, member.linkname = tarfile.SYMTYPE, "x"
        tar.addfile(member)
    else:
        member.size = 1
        tar.addfile(member, io.BytesIO(b"x"))


def test_the_tar_and_the_zip_refuse_the_same_entries_alike(tmp_path: Path) -> None:
    """One rule reads both back (supply/archives.py hashed_files): a second top folder and a
    link are refused by each format with the same words."""
    cases = {
        "more than one top folder": ("other/demo", stat.S_IFREG),
        "unexpected entry": (f"{TOP}/link", stat.S_IFLNK),
    }
    zipped, tarred = tmp_path / "good.zip", tmp_path / "good.tar.xz"
    with zipfile.ZipFile(zipped, "w") as bundle, tarfile.open(tarred, "w:xz") as tar:
        _entry(bundle, tar, f"{TOP}/demo", stat.S_IFREG)
    assert zipped_files(zipped) == archived_files(tarred) == {"demo": (0o755, sha256_bytes(b"x"))}
    for message, (name, kind) in cases.items():
        zipped, tarred = tmp_path / f"{kind}.zip", tmp_path / f"{kind}.tar.xz"
        with zipfile.ZipFile(zipped, "w") as bundle, tarfile.open(tarred, "w:xz") as tar:
            _entry(bundle, tar, f"{TOP}/demo", stat.S_IFREG)
            _entry(bundle, tar, name, kind)
        for path in (zipped, tarred):
            with pytest.raises(ValueError, match=message):
                zipped_files(path) if path is zipped else archived_files(path)


def _same_output(path: str) -> bytes:
    """The fake container's files: both runs of a generate command print the same."""
    stem = path.rsplit("/", 1)[-1].replace("-first", "").replace("-again", "")
    return b"" if stem.endswith(".stderr") else f"complete {stem}\n".encode()


def test_publish_packs_included_and_generated_files_into_a_signed_zip_verify_covers(
    project: Path, tmp_path: Path
) -> None:
    generate = Run(("completions", "bash"), path="completions/demo.bash")
    options = make_options(
        project,
        archive_formats=("tar.xz", "zip"),
        archive_include=("Cargo.toml",),  # the fake snapshot's top files: README, Cargo.toml
        archive_generate=(generate,),
    )
    key = SecretKey.generate()
    with ExitStack() as stack:
        rig = ready_to_publish(options, stack, tmp_path, Signer(key, True, "test key"))
        rig.pipeline.box.missing = _same_output  # type: ignore[attr-defined]
        extract_and_publish(rig)
    plan = rig.pipeline.plan
    release = options.artifacts_dir / plan.release_dir
    folder = release / plan.artifact_dir
    zipped = release / archive_name(plan.artifact_dir, ZIP_SUFFIX)
    tarred = release / archive_name(plan.artifact_dir)
    generated = b"complete generate-0.stdout\n"
    assert (folder / GENERATED_DIR / "completions" / "demo.bash").read_bytes() == generated
    manifest = read_record(folder / "build.json", BuildManifest)
    assert manifest.generated is not None
    assert [(g.path, g.args, g.sha256) for g in manifest.generated] == [
        ("completions/demo.bash", ["completions", "bash"], sha256_bytes(generated))
    ]
    for archive in (tarred, zipped):
        files = zipped_files(archive) if archive is zipped else archived_files(archive)
        assert set(files) == {"demo", "README.md", "Cargo.toml", "completions/demo.bash"}
        assert files["completions/demo.bash"] == (0o644, sha256_bytes(generated))
    sums = (release / "SHA256SUMS").read_text()
    assert (
        f"{sha256_file(zipped)}  {zipped.name}\n" in sums and f"  {zipped.name}.minisig\n" in sums
    )
    checks, _ = verify_release(release, None)
    assert [c for c in checks if not c.ok] == []
    assert {c.check for c in checks if c.file == zipped.name} >= {"signature", "archive"}
    envelope = json.loads((release / "provenance.intoto.jsonl").read_text())
    subjects = {
        s["name"]: s["digest"]["sha256"]
        for s in json.loads(dsse_verify(envelope, key.public))["subject"]
    }
    assert subjects[zipped.name] == sha256_file(zipped)

    # a tampered zip: its signature, the release's checksums and provenance all fail
    zipped.write_bytes(zipped.read_bytes()[:-8] + b"tampered")
    checks, _ = verify_release(release, None)
    assert {(c.file, c.check) for c in checks if not c.ok} >= {
        ("SHA256SUMS", "checksums"),
        (zipped.name, "signature"),
        ("provenance.intoto.jsonl", "provenance"),
    }
    # a generated file edited in the folder is refused when the archive is packed again
    (folder / GENERATED_DIR / "completions" / "demo.bash").write_bytes(b"edited\n")
    item = ArtifactToPublish(folder, plan.artifact_dir, manifest, plan.source.archive)
    with pytest.raises(OrchestratorError, match=r"not the file build\.json records"):
        archive_extras(item, options.archive_include)
    # ... and so is one reached through a symlinked folder, even with the recorded bytes
    outside = tmp_path / "elsewhere" / "completions"
    outside.mkdir(parents=True)
    (outside / "demo.bash").write_bytes(generated)
    shutil.rmtree(folder / GENERATED_DIR)
    (folder / GENERATED_DIR).symlink_to(outside.parent)
    with pytest.raises(OrchestratorError, match=r"not the file build\.json records"):
        archive_extras(item, options.archive_include)


def test_a_generate_command_printing_something_else_twice_stops_the_build(
    project: Path, tmp_path: Path
) -> None:
    generate = Run(("completions", "bash"), path="completions/demo.bash")
    options = make_options(project, archive_generate=(generate,))
    with ExitStack() as stack:
        rig = ready_to_publish(options, stack, tmp_path, Signer(SecretKey.generate(), True, "k"))
        # the fake container answers each file with its own path: the two runs differ
        with pytest.raises(GeneratedFileError, match=r"'completions/demo\.bash'.*run twice"):
            extract_and_publish(rig)
    assert GeneratedFileError.exit_code == 73


def test_the_lock_records_each_archive_written_beside_the_folder(tmp_path: Path) -> None:
    (tmp_path / f"{TOP}.tar.xz").write_bytes(b"tar")
    assert archive_outputs(tmp_path, TOP)["archive_zip"] is None  # no zip asked for
    (tmp_path / f"{TOP}.zip").write_bytes(b"zipped")
    outputs = archive_outputs(tmp_path, TOP)
    zipped = outputs["archive_zip"]
    assert zipped is not None
    assert (zipped.file, zipped.sha256, zipped.size) == (
        f"{TOP}.zip",
        sha256_bytes(b"zipped"),
        6,
    )
    tarred = outputs["archive"]
    assert tarred is not None and tarred.file == f"{TOP}.tar.xz"

"""`release assemble` believes nothing a runner's folder says of itself (issue 38's recipes):
each attack below worked against the folder check that compared target.json with itself;
every one is refused here, by what the plan and the bytes show, naming the file escaped."""

from __future__ import annotations

import io
import os
import shutil
import signal
import stat
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from rich.console import Console

from orchestrator.execute.ship.release_index import update_release_index
from orchestrator.model.documents.lockfile import LOCK_FILE, LockedPackage, LockInputArchive
from orchestrator.model.documents.records import BuildManifest, read_record, write_record
from orchestrator.model.documents.target_folder import TARGET_RECORD, TargetFolder
from orchestrator.model.hashing import sha256_bytes
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.release.assemble.assemble_checks import MAX_LOG_BYTES, check_folder
from orchestrator.release.assemble.binary_checks import planned_rustc
from orchestrator.release.assemble.shard import (
    AssembleError,
    TargetFolderError,
    UnplannedBinaryError,
    assemble,
    check_folders,
)
from orchestrator.release.run import RELEASE_JSON
from orchestrator.release.targets.release_view import ReleaseView
from orchestrator.release.targets.target import Target
from orchestrator.supply.attest import Signer
from orchestrator.supply.minisign import SecretKey
from orchestrator.supply.verify import verify_release

from .assemble_rig import compile_elf, describe, edit_to_match, ready_folder

Folder = tuple[Path, Target, BuildPlan]


@pytest.fixture
def handed_over(project: Path, tmp_path: Path) -> Folder:
    return ready_folder(project, tmp_path)


@contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """Fail instead of hanging: the FIFO recipe hung the old check for ever."""

    def expired(_signum: int, _frame: object) -> None:
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _record(folder: Path) -> TargetFolder:
    return read_record(folder / TARGET_RECORD, TargetFolder)


def test_the_intact_folder_is_accepted_with_what_the_plan_fixes(handed_over: Folder) -> None:
    folder, target, plan = handed_over
    checked = check_folder(folder, [(target, plan)])
    assert checked.record.lock.output.sha256 == checked.files[plan.binary]
    assert checked.record.summary.sha256 == checked.files[plan.binary]
    assert checked.record.summary.glibc is None  # a static binary needs no glibc
    assert set(checked.files) == set(_record(folder).files)


def test_the_v3_binary_in_the_v2_folder_is_refused(handed_over: Folder, tmp_path: Path) -> None:
    """Recipe 2a: build.json, the SBOM and target.json edited to match the other binary."""
    folder, target, plan = handed_over
    assert plan.target_cpu == "x86-64-v2"
    rustc = planned_rustc(plan) or ""
    v3 = compile_elf(tmp_path / "v3", march="x86-64-v3", rustc=rustc)
    edit_to_match(folder, target, plan, {plan.binary: v3.read_bytes()})
    with pytest.raises(UnplannedBinaryError, match="is not an x86-64-v2 binary") as raised:
        check_folders([(target, plan)], [folder])
    assert raised.value.exit_code == 71
    assert "of x86-64-v3" in raised.value.message
    assert "no CPUID instruction" in raised.value.message


def test_an_extra_binary_is_refused(handed_over: Folder, tmp_path: Path) -> None:
    """Recipe 2b: `sudo` added to build.json's other_binaries, listed in target.json."""
    folder, target, plan = handed_over
    rustc = planned_rustc(plan) or ""
    sudo = compile_elf(tmp_path / "sudo", march=plan.target_cpu, rustc=rustc)
    edit_to_match(folder, target, plan, {"sudo": sudo.read_bytes()})
    assert "sudo" in _record(folder).files
    with pytest.raises(TargetFolderError, match="sudo is not a file that the plan") as raised:
        check_folders([(target, plan)], [folder])
    assert raised.value.exit_code == 69


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        ("notes.txt", "notes.txt is not a file that the plan"),
        ("profiles/pgo.profdata.bak", "profiles/pgo.profdata.bak is not a file that the plan"),
        ("logs/deep/01-x.log", "logs/deep/01-x.log is not a file that the plan"),
    ],
)
def test_extra_listed_files_are_refused(handed_over: Folder, extra: str, said: str) -> None:
    folder, target, plan = handed_over
    (folder / extra).parent.mkdir(parents=True, exist_ok=True)
    (folder / extra).write_text("listed\n")
    describe(folder, target, plan)  # listed, with its sha256
    with pytest.raises(TargetFolderError, match=said):
        check_folders([(target, plan)], [folder])


def test_a_hard_link_is_refused(handed_over: Folder, tmp_path: Path) -> None:
    """A listed log hard-linked to a file of the signer's machine would be copied, signed."""
    folder, target, plan = handed_over
    secret = tmp_path / "secret.key"
    secret.write_text("untrusted comment: a key\n")
    log = next((folder / "logs").iterdir())
    log.unlink()
    os.link(secret, log)
    describe(folder, target, plan)
    with pytest.raises(TargetFolderError, match=r"a hard link \(2 names for one file\)"):
        check_folders([(target, plan)], [folder])


def test_forged_lock_inputs_are_refused_naming_the_field(handed_over: Folder) -> None:
    """Recipe 2d: lock.inputs.rustflags = ["-Cforged-by-runner"] in target.json."""
    folder, target, plan = handed_over
    lock = _record(folder).lock
    forged = lock.model_copy(
        update={"inputs": lock.inputs.model_copy(update={"rustflags": ["-Cforged-by-runner"]})}
    )
    describe(folder, target, plan, lock=forged)
    with pytest.raises(AssembleError, match=r"in lock\.inputs\.rustflags$") as raised:
        check_folders([(target, plan)], [folder])
    assert raised.value.exit_code == 70


def test_forged_pins_and_outputs_are_refused(handed_over: Folder) -> None:
    folder, target, plan = handed_over
    record = _record(folder)
    pins = record.pins.model_copy(
        update={"inputs": [LockInputArchive(name="corpus", sha256="5" * 64, size=3)]}
    )
    output = record.lock.output.model_copy(update={"size": 1})
    describe(
        folder, target, plan, pins=pins, lock=record.lock.model_copy(update={"output": output})
    )
    with pytest.raises(AssembleError, match=r"in lock\.output, pins\.inputs$"):
        check_folders([(target, plan)], [folder])


def test_build_json_claims_are_checked_against_the_plan(handed_over: Folder) -> None:
    folder, target, plan = handed_over
    manifest = read_record(folder / "build.json", BuildManifest)
    flags = manifest.flags.model_copy(update={"target_cpu": "x86-64-v3"})
    write_record(folder / "build.json", manifest.model_copy(update={"flags": flags}))
    describe(folder, target, plan)
    with pytest.raises(AssembleError, match=r"build\.json flags\.target_cpu"):
        check_folders([(target, plan)], [folder])


def test_a_name_with_a_newline_is_refused_escaped(handed_over: Folder) -> None:
    """Recipe 3: `logs/a\\nb.log`, listed. It is refused by name, and the message shows the
    newline as an escape, on one line."""
    folder, target, plan = handed_over
    (folder / "logs" / "a\nb.log").write_text("x\n")
    listed = {**_record(folder).files, "logs/a\nb.log": sha256_bytes(b"x\n")}
    describe(folder, target, plan, files=listed)  # the runner's own check refuses it too
    with pytest.raises(TargetFolderError, match="not a safe file name") as raised:
        check_folders([(target, plan)], [folder])
    assert "logs/a\\nb.log" in raised.value.message
    assert "\n" not in raised.value.message


def test_target_json_as_a_fifo_is_refused_at_once(handed_over: Folder) -> None:
    """Recipe 4a: opening a FIFO for reading waits for a writer; it is opened non-blocking."""
    folder, target, plan = handed_over
    (folder / TARGET_RECORD).unlink()
    os.mkfifo(folder / TARGET_RECORD)
    with deadline(10), pytest.raises(TargetFolderError, match="not a regular file"):
        check_folders([(target, plan)], [folder])


def test_target_json_linked_to_dev_zero_is_refused_unread(handed_over: Folder) -> None:
    """Recipe 4b: read before the link check, /dev/zero ended in a MemoryError."""
    folder, target, plan = handed_over
    (folder / TARGET_RECORD).unlink()
    (folder / TARGET_RECORD).symlink_to("/dev/zero")
    with pytest.raises(TargetFolderError, match=r"target\.json: a symbolic link"):
        check_folders([(target, plan)], [folder])


def test_a_sparse_listed_log_of_a_gib_is_refused_unread(handed_over: Folder) -> None:
    """Recipe 4c: a sparse 1 GiB log was copied (1.1 GB) into the release and signed."""
    folder, target, plan = handed_over
    log = folder / "logs" / "09-huge.log"
    with log.open("wb") as handle:
        handle.truncate(1 << 30)
    describe(folder, target, plan, files={**_record(folder).files, "logs/09-huge.log": "0" * 64})
    with pytest.raises(TargetFolderError, match=f"1073741824 bytes, more than.*{MAX_LOG_BYTES}"):
        check_folders([(target, plan)], [folder])


def test_a_runners_words_reach_the_console_escaped(handed_over: Folder) -> None:
    """Recipe 5: escape sequences in summary.engine reached the signer's terminal raw."""
    folder, target, plan = handed_over
    summary = _record(folder).summary.model_copy(
        update={"engine": "\x1b]0;owned\x07\x1b[2J", "warnings": ["line\rover"]}
    )
    describe(folder, target, plan, summary=summary, written_by="orchestrator \x1b[31m")
    (checked,) = check_folders([(target, plan)], [folder])
    assert checked.record.summary.engine == "\\x1b]0;owned\\x07\\x1b[2J"
    assert checked.record.summary.warnings == ["line\\rover"]
    assert checked.record.written_by == "orchestrator \\x1b[31m"


def test_another_compiler_is_refused(handed_over: Folder, tmp_path: Path) -> None:
    folder, target, plan = handed_over
    other = compile_elf(tmp_path / "other", march=plan.target_cpu, rustc="1.80.0")
    edit_to_match(folder, target, plan, {plan.binary: other.read_bytes()})
    with pytest.raises(UnplannedBinaryError, match=r"compiled by 1\.80\.0 .*not by rustc 1\.96"):
        check_folders([(target, plan)], [folder])


def test_glibc_symbols_above_the_floor_are_refused(handed_over: Folder, tmp_path: Path) -> None:
    """Linked against the host's glibc 2.36: __libc_start_main@GLIBC_2.34, above 2.31."""
    folder, target, plan = handed_over
    source = tmp_path / "dynamic.c"
    source.write_text(
        f'__asm__(".ident \\"rustc version {planned_rustc(plan)} (0000000 2026-01-01)\\"");\n'
        '#include <stdio.h>\nint main(void) { puts("hi"); return 0; }\n'
    )
    out = tmp_path / "dynamic"
    subprocess.run([shutil.which("gcc") or "cc", "-O1", "-o", str(out), str(source)], check=True)
    edit_to_match(folder, target, plan, {plan.binary: out.read_bytes()})
    with pytest.raises(
        UnplannedBinaryError, match=rf"needs glibc 2\.3\d, above .* {plan.glibc_floor}"
    ):
        check_folders([(target, plan)], [folder])


@pytest.mark.parametrize(
    ("offset", "value", "said"),
    [
        (18, b"\xb7\x00", "EM_AARCH64 binary; the plan builds a 64-bit little-endian EM_X86_64"),
        (16, b"\x01\x00", "of ELF type ET_REL, not an executable"),
        (0, b"#!/bin/sh\n", "not a readable ELF binary"),
    ],
)
def test_another_machine_or_kind_of_file_is_refused(
    handed_over: Folder, offset: int, value: bytes, said: str
) -> None:
    folder, target, plan = handed_over
    data = bytearray((folder / plan.binary).read_bytes())
    data[offset : offset + len(value)] = value
    edit_to_match(folder, target, plan, {plan.binary: bytes(data)})
    with pytest.raises(UnplannedBinaryError, match=said):
        check_folders([(target, plan)], [folder])


def test_a_folder_twice_or_of_another_build_is_still_refused(handed_over: Folder) -> None:
    folder, target, plan = handed_over
    with pytest.raises(AssembleError, match="comes twice"):
        check_folders([(target, plan)], [folder, folder])
    summary = _record(folder).summary.model_copy(update={"level": "x86-64-v3"})
    describe(folder, target, plan, summary=summary)
    with pytest.raises(AssembleError, match="summary describes"):
        check_folders([(target, plan)], [folder])


def test_a_device_among_the_files_is_refused(handed_over: Folder) -> None:
    """A character device where a log was (root makes one: the tests run as root here)."""
    folder, target, plan = handed_over
    log = next((folder / "logs").iterdir())
    log.unlink()
    os.mknod(log, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero's numbers
    with pytest.raises(TargetFolderError, match="not a regular file or folder"):
        check_folders([(target, plan)], [folder])


def test_an_accepted_folder_is_published_and_verifies(handed_over: Folder) -> None:
    """What was checked is what is copied, signed and published: `verify` passes, and the
    runner's engine name reaches the console (printed as the CLI prints) escaped."""
    folder, target, plan = handed_over
    summary = _record(folder).summary.model_copy(update={"engine": "[/bold]\x1b[2J"})
    describe(folder, target, plan, summary=summary)
    checked = check_folders([(target, plan)], [folder])
    signer = Signer(SecretKey.generate(), False, "test key")
    said: list[str] = []
    release = ReleaseView.from_options(target.options)
    results, lock = assemble(release, checked, signer, said.append, pytest.fail)
    release_dir = lock.parent
    update_release_index(release_dir, signer, vouched=(RELEASE_JSON, LOCK_FILE))
    checks, _ = verify_release(release_dir, None)
    assert [c for c in checks if not c.ok] == []
    assert (release_dir / plan.artifact_dir / plan.binary).read_bytes() == (
        folder / plan.binary
    ).read_bytes()
    assert not (release_dir / plan.artifact_dir / TARGET_RECORD).exists()
    assert results[0].engine == "[/bold]\\x1b[2J"
    shown = io.StringIO()
    Console(file=shown, width=200, markup=False, highlight=False).print(*said)  # as the CLI
    assert shown.getvalue() == f"published {plan.artifact_dir} (built on [/bold]\\x1b[2J)\n"


def test_folders_nested_deeper_than_a_generated_path_are_refused(handed_over: Folder) -> None:
    folder, target, plan = handed_over
    deep = folder.joinpath("generated", *["d"] * 8)
    deep.mkdir(parents=True)
    (deep / "x.1").write_text("deep\n")
    with pytest.raises(TargetFolderError, match="folders nested too deep"):
        check_folders([(target, plan)], [folder])
    (deep / "x.1").unlink()
    deep.rmdir()  # one folder less: within the limit, then refused as a file of no plan
    (deep.parent / "x.1").write_text("deep\n")
    with pytest.raises(TargetFolderError, match=r"d/x\.1 is not a file that the plan"):
        check_folders([(target, plan)], [folder])


def test_a_sysroot_deb_of_another_version_under_the_same_name_is_accepted(
    handed_over: Folder,
) -> None:
    """The lock lists the image's libc6-dev and, under unpack/, the glibc floor's older one:
    one name, two versions, each checked against its own list of the plan (found by the CI
    executor: the second entry was compared with the image's version and refused)."""
    folder, target, plan = handed_over
    shared = sorted(set(plan.packages) & {n.removesuffix(":amd64") for n in plan.unpack})
    assert shared, "the cpu plan installs libc6-dev and unpacks an older one"
    name = shared[0]
    sysroot = plan.unpack[f"{name}:amd64"]

    def package(version: str, *, unpacked: bool) -> LockedPackage:
        file = f"{'unpack/' if unpacked else ''}{name}_{version}_amd64.deb"
        return LockedPackage(
            name=name, version=version, arch="amd64", file=file, sha256="0" * 64, size=1
        )

    def locked(*packages: LockedPackage) -> None:
        lock = _record(folder).lock
        resolved = lock.resolved.model_copy(update={"packages": list(packages)})
        describe(folder, target, plan, lock=lock.model_copy(update={"resolved": resolved}))

    locked(package(plan.packages[name], unpacked=False), package(sysroot, unpacked=True))
    check_folder(folder, [(target, plan)])
    locked(
        package(plan.packages[name], unpacked=False), package(plan.packages[name], unpacked=True)
    )
    with pytest.raises(AssembleError, match=rf"in lock\.resolved\.packages\.unpack/{name}:amd64$"):
        check_folder(folder, [(target, plan)])

"""The training bundle's checks (`build --train-elsewhere`, `build --profiles`): train.sh run
by dash with a bare PATH refuses a tampered file and another architecture and names a
workload that leaves no profile; read_profiles refuses what train.sh does not write."""

from __future__ import annotations

import io
import platform
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.errors import BundleError, UnsafeArchiveError
from orchestrator.execute.optimize.train_bundle import (
    MANIFEST,
    TRAIN_SH,
    workload_files,
    write_bundle,
)
from orchestrator.execute.optimize.train_profiles import load_manifest, read_profiles
from orchestrator.execute.optimize.train_script import bundle_word
from orchestrator.model.documents.training_bundle import BundleWorkload, TrainingManifest
from orchestrator.supply.attest import Signer
from orchestrator.supply.minisign import SecretKey, verify_file

ARCH = platform.machine()
DASH = shutil.which("dash")
# Stands in for an instrumented binary: reads the file it is given, and writes a profile
# where LLVM_PROFILE_FILE says unless its argument is "crash".
FAKE_BINARY = """#!/bin/sh
[ "$1" = crash ] && exit 7
[ "$1" = quiet ] && exit 0
cat "$1" > /dev/null
out=$(echo "$LLVM_PROFILE_FILE" | sed "s/%m_%p/fake_$$/")
echo "profile of $1" > "$out"
"""


def _bundle(tmp_path: Path, *args_each: tuple[str, ...], arch: str = ARCH) -> Path:
    crate = tmp_path / "crate"
    (crate / "data").mkdir(parents=True)
    (crate / "data" / "words.txt").write_text("alpha beta\n")
    (crate / "data" / "more.csv").write_text("a,b\n")
    binary = tmp_path / "fake-instrumented"
    binary.write_text(FAKE_BINARY)
    dest = tmp_path / "bundle"
    write_bundle(
        dest,
        signer=Signer(SecretKey.generate(), throwaway=True, source="test key"),
        identity={"package": "demo", "version": "1.0.0", "flavor": "cpu", "profile_key": "k1"},
        arch=arch,
        binaries={"demo": binary},
        workloads=[
            BundleWorkload(index=i, binary="bin/demo", args=args)
            for i, args in enumerate(args_each)
        ],
        crate_dir=crate,
        inputs={},
    )
    return dest


def _train(bundle: Path) -> subprocess.CompletedProcess[str]:
    assert DASH is not None, "dash is /bin/sh on Debian; the tests run train.sh with it"
    return subprocess.run(
        [DASH, str(bundle / TRAIN_SH)],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_round_trip_train_sh_then_read_profiles(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, ("data/words.txt",), ("/build/src/data/more.csv",))
    manifest, digest = load_manifest(bundle / MANIFEST)
    assert [f.path for f in manifest.data] == ["src/data/more.csv", "src/data/words.txt"]
    signature = (bundle / f"{MANIFEST}.minisig").read_text()
    assert digest in signature  # the trusted comment names the manifest's sha256
    copy = tmp_path / "elsewhere"
    shutil.copytree(bundle, copy)
    result = _train(copy)
    assert result.returncode == 0, result.stderr
    trained = read_profiles(copy / "profiles.tar", manifest, digest, tmp_path / "raw")
    assert sorted(p.parent.name for p in trained.raw_files) == ["w0", "w1"]
    assert trained.machine["arch"] == ARCH
    assert trained.summary().startswith(f"arch {ARCH}")
    assert not list(copy.glob(".train.*"))  # its work folder is gone


def test_manifest_signature_verifies(tmp_path: Path) -> None:
    key = SecretKey.generate()
    crate = tmp_path / "crate"
    crate.mkdir()
    binary = tmp_path / "b"
    binary.write_text(FAKE_BINARY)
    write_bundle(
        tmp_path / "bundle",
        signer=Signer(key, throwaway=True, source="k"),
        identity={"package": "p", "version": "1", "flavor": "cpu", "profile_key": "k"},
        arch=ARCH,
        binaries={"p": binary},
        workloads=[BundleWorkload(index=0, binary="bin/p", args=("quiet",))],
        crate_dir=crate,
        inputs={},
    )
    manifest = tmp_path / "bundle" / MANIFEST
    verify_file(manifest, (tmp_path / "bundle" / f"{MANIFEST}.minisig").read_text(), key.public)


@pytest.mark.parametrize("tampered", ["bin/demo", "src/data/words.txt"])
def test_train_sh_refuses_a_tampered_file(tmp_path: Path, tampered: str) -> None:
    bundle = _bundle(tmp_path, ("data/words.txt",))
    with (bundle / tampered).open("a") as handle:
        handle.write("# changed\n")
    result = _train(bundle)
    assert result.returncode == 4
    assert f"{tampered}: FAILED" in result.stdout + result.stderr
    assert not (bundle / "profiles.tar").exists()


def test_train_sh_refuses_another_architecture(tmp_path: Path) -> None:
    other = "aarch64" if ARCH == "x86_64" else "x86_64"
    bundle = _bundle(tmp_path, ("data/words.txt",), arch=other)
    result = _train(bundle)
    assert result.returncode == 3
    assert f"this bundle is for {other} machines; this one is {ARCH}" in result.stderr


def test_train_sh_names_the_workload_without_a_profile(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, ("data/words.txt",), ("quiet",), ("crash",))
    result = _train(bundle)
    assert result.returncode == 5
    assert "workload 1 (bin/demo quiet) wrote no .profraw file" in result.stderr
    assert not (bundle / "profiles.tar").exists()


def test_write_bundle_refuses_an_existing_folder_and_leaves_nothing(tmp_path: Path) -> None:
    (tmp_path / "bundle").mkdir()
    with pytest.raises(BundleError, match="exists"):
        _bundle(tmp_path, ("data/words.txt",))
    with pytest.raises(BundleError, match="not in the bundle"):
        write_bundle(
            tmp_path / "other",
            signer=Signer(SecretKey.generate(), throwaway=True, source="k"),
            identity={"package": "p", "version": "1", "flavor": "cpu", "profile_key": "k"},
            arch=ARCH,
            binaries={},
            workloads=[BundleWorkload(index=0, binary="bin/p", args=())],
            crate_dir=tmp_path,
            inputs={},
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle", "crate", "fake-instrumented"]


def test_bundle_word_points_container_paths_into_the_bundle() -> None:
    assert bundle_word("--in=/build/src/a b.txt") == "'--in='\"$root\"/src'/a b.txt'"
    assert bundle_word("/build/inputs/m/x.bin") == "\"$root\"/inputs'/m/x.bin'"
    assert bundle_word("/build/srcx") == "'/build/srcx'"
    assert bundle_word("it's") == "'it'\\''s'"


def _tar(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _manifest(tmp_path: Path) -> tuple[TrainingManifest, str]:
    return load_manifest(_bundle(tmp_path, ("data/words.txt",), ("quiet",)) / MANIFEST)


def _machine(digest: str, arch: str = ARCH) -> bytes:
    return f"arch: {arch}\ncpu: test\nbundle: {digest}\n".encode()


def test_read_profiles_names_a_missing_workload(tmp_path: Path) -> None:
    manifest, digest = _manifest(tmp_path)
    tar = _tar(tmp_path / "p.tar", {"machine.txt": _machine(digest), "w0/a_1.profraw": b"x"})
    with pytest.raises(BundleError, match=r"no profile of workload\(s\) 1: bin/demo quiet"):
        read_profiles(tar, manifest, digest, tmp_path / "raw")


def test_read_profiles_refuses_another_architecture(tmp_path: Path) -> None:
    manifest, digest = _manifest(tmp_path)
    members = {
        "machine.txt": _machine(digest, "riscv64"),
        "w0/a.profraw": b"x",
        "w1/a.profraw": b"y",
    }
    with pytest.raises(BundleError, match="trained on riscv64; the bundle is for"):
        read_profiles(_tar(tmp_path / "p.tar", members), manifest, digest, tmp_path / "raw")


def test_read_profiles_refuses_another_bundles_profiles(tmp_path: Path) -> None:
    manifest, digest = _manifest(tmp_path)
    members = {"machine.txt": _machine("0" * 64), "w0/a.profraw": b"x", "w1/a.profraw": b"y"}
    with pytest.raises(BundleError, match="from another bundle"):
        read_profiles(_tar(tmp_path / "p.tar", members), manifest, digest, tmp_path / "raw")


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("w0/evil.sh", UnsafeArchiveError),
        ("../w0/a.profraw", UnsafeArchiveError),
        ("w7/a.profraw", BundleError),  # no such workload in the manifest
    ],
)
def test_read_profiles_refuses_other_files(tmp_path: Path, name: str, error: type) -> None:
    manifest, digest = _manifest(tmp_path)
    members = {"machine.txt": _machine(digest), "w0/a.profraw": b"x", name: b"z"}
    with pytest.raises(error):
        read_profiles(_tar(tmp_path / "p.tar", members), manifest, digest, tmp_path / "raw")
    assert not (tmp_path / "raw").exists()  # refused before a byte was written


def test_read_profiles_refuses_a_tampered_manifest(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, ("data/words.txt",))
    (bundle / MANIFEST).write_text('{"schema": "orchestrator/training-bundle-1"}')
    with pytest.raises(BundleError, match="no training manifest"):
        load_manifest(bundle / MANIFEST)


def test_cli_refuses_both_training_flags_and_a_missing_profiles_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/nowhere.sock")  # never reached
    runner = CliRunner()
    both = runner.invoke(
        app, ["build", "--train-elsewhere", str(tmp_path / "b"), "--profiles", "p.tar"]
    )
    assert both.exit_code == 10, both.output
    assert "--train-elsewhere writes a bundle; --profiles brings back" in both.output
    missing = runner.invoke(app, ["build", "--profiles", str(tmp_path / "none.tar")])
    assert missing.exit_code == 10, missing.output
    assert "none.tar: no such file" in missing.output
    target = runner.invoke(app, ["build", "--target", "x", "--train-elsewhere", "d"])
    assert target.exit_code == 10 and "neither --target nor --dry-run" in target.output


def test_workload_files_map_crate_and_input_paths_into_the_bundle(tmp_path: Path) -> None:
    crate, model = tmp_path / "crate", tmp_path / "model"
    (crate / "data" / "set").mkdir(parents=True)
    (crate / "data" / "set" / "a.txt").write_text("a")
    (crate / "data" / "one.csv").write_text("1")
    model.mkdir()
    (model / "w.bin").write_bytes(b"\0")
    args = ["data/set", "--in=/build/src/data/one.csv", "/build/inputs/model/w.bin", "/dev/null"]
    found = dict(workload_files(args, crate, {"model": model}))
    assert found == {
        "src/data/set/a.txt": crate / "data" / "set" / "a.txt",
        "src/data/one.csv": crate / "data" / "one.csv",
        "inputs/model/w.bin": model / "w.bin",
    }

"""A GPU flavor's training bundle: train.sh (run by dash with a bare PATH and a stub
nvidia-smi, no Docker) runs each validation run with the CPU reference arguments and with
the GPU arguments where nvidia-smi -L lists a GPU, and `build --profiles` judges both
with the flavor's comparator: a failed or differing GPU run is refused, an altered or
missing output too, and build.json's gpu_path says where the GPU path ran or why not."""

from __future__ import annotations

import io
import platform
import shutil
import subprocess
import tarfile
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.config.resolve.options import FlavorSettings
from orchestrator.errors import BundleError, GpuPathError, ValidationError
from orchestrator.execute.optimize.train_bundle import MANIFEST, TRAIN_SH, write_bundle
from orchestrator.execute.optimize.train_elsewhere import gpu_checks
from orchestrator.execute.optimize.train_gpu import first_difference, judge_gpu_checks
from orchestrator.execute.optimize.train_profiles import (
    TrainedElsewhere,
    load_manifest,
    read_profiles,
)
from orchestrator.execute.optimize.train_script import render_train_sh
from orchestrator.execute.verdict.gpu_path import record_gpu_path
from orchestrator.model.documents.training_bundle import (
    BundleGpuCheck,
    BundleWorkload,
    TrainingManifest,
)
from orchestrator.model.verdict.outputs import Captured, compare_captured
from orchestrator.supply.attest import Signer
from orchestrator.supply.minisign import SecretKey

from .execute_rig import Rig, answers, make_options, make_rig
from .fakes import FakeEngine

ARCH = platform.machine()
DASH = shutil.which("dash")
# An instrumented inference binary: a profile where LLVM_PROFILE_FILE says; the same
# tokens on both backends and another float checksum on the GPU, as GPU arithmetic gives.
# BREAK_GPU makes its GPU path fail as torchless-rs's did; EXTRA_LINE makes it differ.
FAKE_BINARY = """#!/bin/sh
out=$(echo "$LLVM_PROFILE_FILE" | sed "s/%m_%p/fake_$$/")
echo profile > "$out"
backend=cpu
case "$*" in *"--backend cuda"*) backend=cuda ;; esac
if [ "$backend" = cuda ] && [ -n "${BREAK_GPU:-}" ]; then
  echo 'CUDA compile error: NVRTC_ERROR_COMPILATION identifier "INFINITY" is undefined' >&2
  exit 101
fi
echo "token hello world"
if [ "$backend" = cuda ]; then echo "checksum 0.30000001"; else echo "checksum 0.3"; fi
if [ "$backend" = cuda ] && [ -n "${EXTRA_LINE:-}" ]; then echo "token wrong"; fi
exit 0
"""
STUB_NVIDIA_SMI = """#!/bin/sh
case "$1" in
  -L) echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)" ;;
  *) echo "NVIDIA H100 80GB HBM3, 580.95.05" ;;
esac
"""
NO_DEVICE_NVIDIA_SMI = """#!/bin/sh
echo "No devices were found"
exit 6
"""
SELECT = "^token "


def _bundle(tmp_path: Path) -> Path:
    crate = tmp_path / "crate"
    crate.mkdir()
    binary = tmp_path / "fake-instrumented"
    binary.write_text(FAKE_BINARY)
    dest = tmp_path / "bundle"
    args = ("generate", "--tokens", "4")
    write_bundle(
        dest,
        signer=Signer(SecretKey.generate(), throwaway=True, source="test key"),
        identity={"package": "demo", "version": "1.0.0", "flavor": "cuda", "profile_key": "k"},
        arch=ARCH,
        binaries={"demo": binary},
        workloads=[BundleWorkload(index=0, binary="bin/demo", args=(*args, "--backend", "cpu"))],
        crate_dir=crate,
        inputs={},
        gpu_vendor="nvidia",
        gpu_checks=[
            BundleGpuCheck(
                index=0,
                binary="bin/demo",
                cpu_args=(*args, "--backend", "cpu"),
                gpu_args=(*args, "--backend", "cpu", "--backend", "cuda"),
            )
        ],
    )
    return dest


def _train(tmp_path: Path, smi: str | None = STUB_NVIDIA_SMI, **env: str) -> Path:
    """Train a copy of the bundle with `smi` as nvidia-smi (None: none on PATH)."""
    assert DASH is not None, "dash is /bin/sh on Debian; the tests run train.sh with it"
    bundle = _bundle(tmp_path)
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    if smi is not None:
        (stubs / "nvidia-smi").write_text(smi)
        (stubs / "nvidia-smi").chmod(0o755)
    result = subprocess.run(
        [DASH, str(bundle / TRAIN_SH)],
        env={"PATH": f"{stubs}:/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return bundle


def _read(bundle: Path, tmp_path: Path) -> tuple[TrainingManifest, TrainedElsewhere]:
    manifest, digest = load_manifest(bundle / MANIFEST)
    trained = read_profiles(bundle / "profiles.tar", manifest, digest, tmp_path / "raw")
    return manifest, trained


def _judge(manifest: TrainingManifest, trained: TrainedElsewhere, select: str = SELECT) -> str:
    return judge_gpu_checks(manifest, trained, tolerance=0.0, select=select)


def test_train_sh_runs_the_gpu_checks_where_nvidia_smi_lists_a_gpu(tmp_path: Path) -> None:
    bundle = _train(tmp_path)
    manifest, trained = _read(bundle, tmp_path)
    assert [p.parent.name for p in trained.raw_files] == ["w0"]  # checks leave no profile
    assert trained.machine["gpu"] == "NVIDIA H100 80GB HBM3, 580.95.05"
    assert sorted(trained.gpu_files) == [
        "SHA256SUMS", "c0.err", "c0.exit", "c0.out", "g0.err", "g0.exit", "g0.out"
    ]  # fmt: skip
    assert b"checksum 0.30000001" in trained.gpu_files["g0.out"]
    assert _judge(manifest, trained) == (
        "exercised on NVIDIA H100 80GB HBM3, driver 580.95.05 (through the training bundle)"
    )


@pytest.mark.parametrize("smi", [None, NO_DEVICE_NVIDIA_SMI])
def test_without_a_gpu_train_sh_records_not_exercised(tmp_path: Path, smi: str | None) -> None:
    manifest, trained = _read(_train(tmp_path, smi), tmp_path)
    assert trained.gpu_files == {}
    assert trained.machine["gpu_check"] == "not exercised: no GPU on this machine"
    assert _judge(manifest, trained) == (
        "not exercised: no GPU on this machine (through the training bundle)"
    )


def test_a_gpu_run_that_fails_is_refused_naming_its_check(tmp_path: Path) -> None:
    manifest, trained = _read(_train(tmp_path, BREAK_GPU="1"), tmp_path)
    with pytest.raises(GpuPathError) as caught:
        _judge(manifest, trained)
    message = str(caught.value)
    assert "GPU check 0: the GPU run `demo generate --tokens 4" in message
    assert "exited with 101 on NVIDIA H100 80GB HBM3, driver 580.95.05" in message
    assert "NVRTC_ERROR_COMPILATION" in message
    assert caught.value.exit_code == 76
    assert isinstance(caught.value, ValidationError)


def test_a_gpu_run_that_differs_is_refused_with_its_first_line(tmp_path: Path) -> None:
    manifest, trained = _read(_train(tmp_path, EXTRA_LINE="1"), tmp_path)
    with pytest.raises(GpuPathError, match=r"first: stdout line 3: CPU '', GPU 'token wrong'"):
        _judge(manifest, trained)


def test_the_flavor_comparator_decides_what_may_differ(tmp_path: Path) -> None:
    manifest, trained = _read(_train(tmp_path), tmp_path)
    with pytest.raises(GpuPathError, match=r"stdout line 2: CPU 'checksum 0.3', GPU 'checksum"):
        _judge(manifest, trained, select="")  # every line: the checksum differs
    assert judge_gpu_checks(manifest, trained, tolerance=1e-6, select="").startswith("exercised")


def test_comparator_on_gpu_and_cpu_outputs() -> None:
    cpu = Captured(b"token a b\nchecksum 0.3\n", b"")
    gpu = Captured(b"token a b\nchecksum 0.30000001\n", b"")
    assert compare_captured(cpu, gpu, 0.0, "")
    assert compare_captured(cpu, gpu, 0.0, SELECT) == ""
    assert compare_captured(cpu, gpu, 1e-6, "") == ""
    assert first_difference(cpu, gpu, 0.0, "") == (
        "stdout line 2: CPU 'checksum 0.3', GPU 'checksum 0.30000001'"
    )


def _rewrite(tar_path: Path, change: dict[str, bytes | None]) -> None:
    """profiles.tar with members replaced (bytes) or left out (None)."""
    with tarfile.open(tar_path) as tar:
        members = {
            m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar
            if m.isfile()
        }
    members.update({k: v for k, v in change.items() if v is not None})
    with tarfile.open(tar_path, "w") as tar:
        for name, data in members.items():
            if change.get(name, b"") is None:
                continue
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_an_altered_gpu_output_is_refused(tmp_path: Path) -> None:
    bundle = _train(tmp_path, EXTRA_LINE="1")
    _rewrite(bundle / "profiles.tar", {"gpu/g0.out": b"token hello world\nchecksum 0.3\n"})
    manifest, trained = _read(bundle, tmp_path)
    with pytest.raises(BundleError, match=r"gpu/g0.out in profiles.tar differs from its sha256"):
        _judge(manifest, trained)


def test_a_missing_gpu_output_names_the_check(tmp_path: Path) -> None:
    bundle = _train(tmp_path)
    _rewrite(bundle / "profiles.tar", {"gpu/g0.exit": None})
    manifest, trained = _read(bundle, tmp_path)
    with pytest.raises(BundleError, match=r"gpu/g0.exit in profiles.tar is not what"):
        _judge(manifest, trained)
    trained.gpu_files.pop("SHA256SUMS")
    with pytest.raises(BundleError, match=r"no gpu/SHA256SUMS"):
        _judge(manifest, trained)


def test_a_check_without_its_runs_is_named(tmp_path: Path) -> None:
    manifest, trained = _read(_train(tmp_path), tmp_path)
    for name in ("g0.out", "g0.err", "g0.exit"):
        trained.gpu_files.pop(name)
    sums = b"".join(
        line + b"\n"
        for line in trained.gpu_files["SHA256SUMS"].splitlines()
        if not line.endswith((b"g0.out", b"g0.err", b"g0.exit"))
    )
    trained.gpu_files["SHA256SUMS"] = sums
    with pytest.raises(
        BundleError, match=r"no GPU run of GPU check 0 \(`demo generate .*`\): gpu/g0.out"
    ):
        _judge(manifest, trained)


def test_gpu_outputs_of_no_check_are_refused(tmp_path: Path) -> None:
    bundle = _train(tmp_path)
    _rewrite(bundle / "profiles.tar", {"gpu/c9.out": b"x"})
    manifest, digest = load_manifest(bundle / MANIFEST)
    trained = read_profiles(bundle / "profiles.tar", manifest, digest, tmp_path / "raw")
    with pytest.raises(BundleError, match=r"gpu/c9.out in profiles.tar is not what"):
        _judge(manifest, trained)


def _rig(project: Path, stack: ExitStack, tmp_path: Path, **flavor: object) -> Rig:
    tmp_path.mkdir(exist_ok=True)
    options = make_options(project)
    settings = {**options.flavor_settings, "cuda": FlavorSettings(**flavor)}  # type: ignore[arg-type]
    options = replace(options, flavor_settings=settings, validate_command=("generate", "-n", "3"))
    engine = FakeEngine(responder=answers(("nvidia-smi", 0, ["NVIDIA H100 80GB HBM3, 580.65.06"])))
    return make_rig(options, stack, tmp_path, flavor="cuda", engine=engine)


def test_the_bundle_checks_each_validation_run_with_the_flavor_gpu_args(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig = _rig(project, stack, tmp_path / "on", gpu_args=("--backend", "cuda"))
    vendor, checks = gpu_checks(rig.pipeline, [rig.pipeline.plan.binary])
    assert vendor == "nvidia"
    assert [(c.binary, c.cpu_args, c.gpu_args) for c in checks] == [
        (
            f"bin/{rig.pipeline.plan.binary}",
            ("generate", "-n", "3"),
            ("generate", "-n", "3", "--backend", "cuda"),
        )
    ]
    off = _rig(project, stack, tmp_path / "off", gpu="off", gpu_args=("--backend", "cuda"))
    assert gpu_checks(off.pipeline, [off.pipeline.plan.binary]) == ("", [])
    bare = _rig(project, stack, tmp_path / "bare")
    assert gpu_checks(bare.pipeline, [bare.pipeline.plan.binary]) == ("", [])


def test_the_training_machine_word_on_the_gpu_path_is_kept(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig = _rig(project, stack, tmp_path)
    rig.pipeline.state.gpu_path = (
        "exercised on NVIDIA H100, driver 580 (through the training bundle)"
    )
    assert record_gpu_path(rig.pipeline, rig.log) == rig.pipeline.state.gpu_path
    assert rig.box.execs == []  # no driver check in the build container overwrote it


def test_a_rocm_bundle_looks_for_dev_kfd() -> None:
    check = BundleGpuCheck(index=0, binary="bin/x", cpu_args=("a",), gpu_args=("a", "--gpu"))
    text = render_train_sh(
        arch="x86_64",
        title="x",
        files=(),
        workloads=(),
        workdir="src",
        stdin="",
        environment={},
        gpu_vendor="amd",
        gpu_checks=[check],
    )
    assert "if [ -e /dev/kfd ]; then" in text and "nvidia-smi -L" not in text
    assert "check g 0 'bin/x' 'a' '--gpu'" in text
    assert "tar -cf" in text and "machine.txt w* gpu)" in text

"""bench/gpu_train.sh, run by dash with no GPU: its `train` step on a real training bundle
(test_train_gpu.py's, with a stub binary), its `time` step on two stub binaries whose speed
differs by construction, and the arguments it refuses. The GPU measurement itself needs
a GPU machine (docs/pgo-bolt.md)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from .test_train_gpu import _bundle

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gpu_train.sh"
DASH = shutil.which("dash")


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert DASH is not None, "dash is /bin/sh on Debian; the script is POSIX sh"
    return subprocess.run(
        [DASH, str(SCRIPT), *args],
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def _stub(path: Path, seconds: str) -> Path:
    path.write_text(
        f'#!/bin/sh\n[ "$1" = --backend ] && [ "$2" = cuda ] || exit 9\nsleep {seconds}\n'
    )
    path.chmod(0o755)
    return path


def test_train_runs_the_bundle_and_shows_its_machine(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path)
    result = _run("train", str(bundle), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (bundle / "profiles.tar").is_file()
    assert "gpu_check: not exercised: no GPU on this machine" in result.stdout
    assert f"bring back {bundle}/profiles.tar" in result.stdout


def test_time_gives_medians_and_a_ratio_with_its_interval(tmp_path: Path) -> None:
    slow, fast = _stub(tmp_path / "slow", "0.12"), _stub(tmp_path / "fast", "0.02")
    result = _run("time", "-n", "6", str(slow), str(fast), "--", "--backend", "cuda", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "nvidia-smi lists no GPU here" in result.stderr
    found = re.search(
        r"ratio gpu-/cpu-trained +median +([0-9.]+) +95% CI \[([0-9.]+), ([0-9.]+)\] +\(n=6\)",
        result.stdout,
    )
    assert found, result.stdout
    median, low, high = (float(value) for value in found.groups())
    assert low <= median <= high < 1.0  # the "GPU-trained" stub is the faster by design
    for label in ("cpu-trained", "gpu-trained"):
        assert re.search(rf"{label} +median +[0-9.]+ ms +95% CI", result.stdout), result.stdout


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ((), "usage:"),
        (("build",), "usage:"),
        (("train",), "usage:"),
        (("train", "nowhere"), "has no train.sh"),
        (("time", "-n", "0", "a", "b", "--", "x"), "-n takes a count"),
        (("time", "a", "b", "x"), "usage:"),
        (("time", "missing", "missing", "--", "x"), "missing is no executable file"),
    ],
)
def test_arguments_it_refuses(tmp_path: Path, args: tuple[str, ...], says: str) -> None:
    result = _run(*args, cwd=tmp_path)
    assert result.returncode == 2
    assert says in result.stderr


def test_a_failing_run_stops_the_timing(tmp_path: Path) -> None:
    ok = _stub(tmp_path / "ok", "0")
    result = _run("time", "-n", "2", str(ok), str(ok), "--", "--backend", "cpu", cwd=tmp_path)
    assert result.returncode == 1
    assert "--backend cpu failed" in result.stderr

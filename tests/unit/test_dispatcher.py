"""The dispatcher: its build through the Engine (a fake one), the checks on what gcc made,
the contract between dispatcher.c and model/binaries/dispatch.py, and, where this host has gcc
for x86_64, the program itself run against a folder of level binaries."""

from __future__ import annotations

import io
import os
import platform
import re
import shutil
import struct
import subprocess
import tarfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from orchestrator.errors import StepFailedError
from orchestrator.execute.ship.dispatcher import (
    COMPILE_FLAGS,
    SOURCE,
    WORKDIR,
    build_dispatcher,
    check_freestanding,
    dispatcher_source,
)
from orchestrator.model.binaries import dispatch
from orchestrator.model.binaries.dispatch import (
    DISPATCH_LEVELS,
    Choice,
    dispatch_levels,
    libexec_path,
    parse_show,
)
from orchestrator.model.hashing import sha256_bytes
from tests.unit.fakes import FakeEngine

EM_X86_64, EM_AARCH64 = 62, 183
PT_LOAD, PT_INTERP = 1, 3


def tiny_elf(*, machine: int = EM_X86_64, segments: Sequence[int] = (PT_LOAD,)) -> bytes:
    """An ELF64 executable header with the given program header types (and no sections)."""
    header = struct.pack(
        "<4sBBBBB7sHHIQQQIHHHHHH",
        b"\x7fELF", 2, 1, 1, 0, 0, b"\0" * 7,
        2, machine, 1, 0x401000, 64, 0, 0, 64, 56, len(segments), 64, 0, 0,
    )  # fmt: skip
    tables = b"".join(struct.pack("<IIQQQQQQ", kind, 5, 0, 0, 0, 0, 0, 0x1000) for kind in segments)
    return header + tables


def test_the_build_runs_gcc_without_network_or_capabilities(tmp_path: Path) -> None:
    elf = tiny_elf()
    engine = FakeEngine(missing=lambda _path: elf)
    lines: list[str] = []
    built = build_dispatcher(
        engine, "orchestrator/cpu:x", tmp_path / "bin" / "tool", on_output=lines.append
    )
    (box,) = engine.containers
    assert box.spec.network is False and box.spec.image == "orchestrator/cpu:x"
    assert box.spec.privileges.engine_options()["cap_drop"] == ["ALL"]
    assert box.removed
    gcc = next(e for e in box.execs if e.argv[0] == "gcc")
    assert gcc.workdir == WORKDIR
    assert {"-static", "-nostdlib", "-ffreestanding", "-Wl,--build-id=none"} <= set(gcc.argv)
    assert any(line.startswith("+ gcc ") for line in lines)  # echoed like every tool call
    (put_at, tar_bytes), *_ = box.puts
    assert put_at == WORKDIR
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
        member = tar.extractfile("dispatcher.c")
        assert member is not None and member.read() == dispatcher_source()
    assert built.path.read_bytes() == elf
    assert built.path.stat().st_mode & 0o777 == 0o755
    assert (built.sha256, built.size) == (sha256_bytes(elf), len(elf))
    assert built.source_sha256 == sha256_bytes(SOURCE.read_bytes())


def test_a_compiler_failure_is_a_failed_step(tmp_path: Path) -> None:
    def responder(argv: Sequence[str]) -> tuple[int, list[str]]:
        return (1, ["dispatcher.c:1: error: oops"]) if argv[0] == "gcc" else (0, [])

    engine = FakeEngine(responder=responder, missing=lambda _path: tiny_elf())
    with pytest.raises(StepFailedError, match="did not compile"):
        build_dispatcher(engine, "img", tmp_path / "d", on_output=lambda _line: None)
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (tiny_elf(segments=(PT_LOAD, PT_INTERP)), "PT_INTERP"),
        (tiny_elf(machine=EM_AARCH64), "EM_AARCH64"),
        (b"#!/bin/sh\necho hi\n", "no ELF file"),
    ],
)
def test_only_a_static_x86_64_executable_is_taken(data: bytes, why: str) -> None:
    with pytest.raises(StepFailedError, match=why):
        check_freestanding(data, "img")


def test_show_lines_parse_and_junk_does_not() -> None:
    line = "level=x86-64-v3 cpu=x86-64-v4 path=/opt/my tool/libexec/t/t-x86-64-v3\n"
    assert parse_show(line) == Choice(
        "x86-64-v3", "x86-64-v4", "/opt/my tool/libexec/t/t-x86-64-v3"
    )
    with pytest.raises(ValueError, match="not a line"):
        parse_show("x86-64-v3 /opt/t")


def test_levels_and_paths() -> None:
    assert dispatch_levels(["x86-64-v3", "znver4", "x86-64-v2"]) == ("x86-64-v2", "x86-64-v3")
    assert libexec_path("rg", "x86-64-v3").as_posix() == "libexec/rg/rg-x86-64-v3"


def test_the_c_source_and_the_model_agree() -> None:
    """Level names, the variable and the exit statuses are written twice (C and Python)."""
    source = SOURCE.read_text()
    names = re.search(r"level_names\[\] = \{([^}]*)\}", source)
    assert names is not None
    assert re.findall(r'"([^"]*)"', names.group(1)) == ["", *DISPATCH_LEVELS]
    assert f'"{dispatch.LEVEL_VARIABLE}="' in source
    statuses = dict(re.findall(r"STATUS_(\w+) = (\d+)", source))
    assert {k: int(v) for k, v in statuses.items()} == {
        "NO_SELF": dispatch.EXIT_NO_SELF,
        "BAD_LEVEL": dispatch.EXIT_BAD_LEVEL,
        "CPU_LACKS": dispatch.EXIT_CPU_LACKS,
        "EXEC_FAILED": dispatch.EXIT_EXEC_FAILED,
        "MISSING": dispatch.EXIT_MISSING,
    }


# -- the program itself, compiled by this host's gcc (the integration test uses the image's)
_HOST_GCC = shutil.which("gcc") if platform.machine() == "x86_64" else None
needs_host_gcc = pytest.mark.skipif(_HOST_GCC is None, reason="needs gcc on an x86_64 host")


@pytest.fixture(scope="module")
def host_dispatcher(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dispatcher") / "dispatcher"
    subprocess.run(
        ["gcc", *COMPILE_FLAGS, "-o", str(out), str(SOURCE)], check=True, capture_output=True
    )
    check_freestanding(out.read_bytes(), "this host")
    return out


def _lay_out(root: Path, dispatcher: Path, levels: Sequence[str]) -> Path:
    """root/bin/tool (the dispatcher) and root/libexec/tool/tool-<level> scripts."""
    (root / "bin").mkdir(parents=True)
    shutil.copy(dispatcher, root / "bin" / "tool")
    for level in levels:
        script = root / libexec_path("tool", level)
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text(f'#!/bin/sh\necho "{level} $*"\n')
        script.chmod(0o755)
    return root / "bin" / "tool"


def _run(tool: Path, *args: str, level: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != dispatch.LEVEL_VARIABLE}
    if level is not None:
        env[dispatch.LEVEL_VARIABLE] = level
    return subprocess.run([tool, *args], env=env, capture_output=True, text=True, check=False)


@needs_host_gcc
def test_it_runs_the_best_present_level_and_falls_back(
    host_dispatcher: Path, tmp_path: Path
) -> None:
    tool = _lay_out(tmp_path / "pkg", host_dispatcher, ["x86-64", "x86-64-v2"])
    shown = _run(tool, level="show")
    assert shown.returncode == 0, shown.stderr
    choice = parse_show(shown.stdout)
    assert choice.cpu in DISPATCH_LEVELS  # whatever this host has, it is at least v1
    assert choice.level == ("x86-64" if choice.cpu == "x86-64" else "x86-64-v2")
    assert choice.path == str((tmp_path / "pkg" / libexec_path("tool", choice.level)).resolve())
    ran = _run(tool, "a", "b c")
    assert (ran.returncode, ran.stdout) == (0, f"{choice.level} a b c\n")
    # through a link from elsewhere: it finds libexec/ by its real path
    link = tmp_path / "link"
    link.symlink_to(tool)
    assert _run(link, "x").stdout == f"{choice.level} x\n"


@needs_host_gcc
def test_forcing_a_level_and_its_errors(host_dispatcher: Path, tmp_path: Path) -> None:
    tool = _lay_out(tmp_path / "pkg", host_dispatcher, ["x86-64", "x86-64-v2"])
    assert _run(tool, "x", level="v1").stdout == "x86-64 x\n"
    missing = _run(tool, level="v3")
    cpu = parse_show(_run(tool, level="show").stdout).cpu
    if cpu in {"x86-64-v3", "x86-64-v4"}:
        assert missing.returncode == dispatch.EXIT_MISSING
        assert "tool-x86-64-v3" in missing.stderr
    else:
        assert missing.returncode == dispatch.EXIT_CPU_LACKS
    bad = _run(tool, level="avx2")
    assert bad.returncode == dispatch.EXIT_BAD_LEVEL
    assert "ORCHESTRATOR_LEVEL=avx2 is none of" in bad.stderr
    empty = tmp_path / "empty"
    lone = _lay_out(empty, host_dispatcher, [])
    assert _run(lone).returncode == dispatch.EXIT_MISSING


@needs_host_gcc
def test_the_same_source_gives_the_same_bytes(host_dispatcher: Path, tmp_path: Path) -> None:
    again = tmp_path / "again"
    subprocess.run(
        ["gcc", *COMPILE_FLAGS, "-o", str(again), str(SOURCE)], check=True, capture_output=True
    )
    assert again.read_bytes() == host_dispatcher.read_bytes()
    assert len(again.read_bytes()) < 8192  # tiny: it runs before the program, every time

"""The CPU level a binary's instructions need (model/binaries/cpu_levels.py), on programs the host's
gcc compiles at each level, and the rule for binaries that pick code at run time."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from orchestrator.model.binaries.cpu_levels import (
    DISPATCHED_SHARE,
    LevelScan,
    LevelUse,
    level_problem,
    scan_levels,
)
from orchestrator.model.binaries.elf import ElfReadError

from .assemble_rig import compile_elf

# Asks the CPU first, then runs a function compiled for AVX2: what memchr does.
DISPATCHING = r"""
int data[256];
__attribute__((noinline, target("avx2"))) int wide(const int *a, int n) {
    int s = 0;
    for (int i = 0; i < n; i++) s += a[i] * 7;
    return s;
}
__attribute__((noinline)) int has_avx2(void) {
    unsigned a = 7, b, c = 0, d;
    __asm__ volatile("cpuid" : "+a"(a), "=b"(b), "+c"(c), "=d"(d));
    return (b >> 5) & 1;
}
void _start(void) {
    long code = has_avx2() ? wide(data, 256) : 0;
    __asm__ volatile("syscall" :: "a"(60L), "D"(code & 0x7f));
    for (;;) {}
}
"""


def _scan(path: Path) -> LevelScan:
    with path.open("rb") as stream:
        return scan_levels(stream, path.name)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, LevelScan]:
    folder = tmp_path_factory.mktemp("levels")
    return {
        march: _scan(compile_elf(folder / march, march=march, rustc="1.96.0"))
        for march in ("x86-64", "x86-64-v2", "x86-64-v3")
    }


def test_each_level_shows_in_the_instructions(built: dict[str, LevelScan]) -> None:
    # `rep bsf` (the count of trailing zeros) decodes as TZCNT and is not counted
    assert built["x86-64"].by_level == {}
    assert set(built["x86-64-v2"].by_level) == {"x86-64-v2"}
    assert "x86-64-v3" in built["x86-64-v3"].by_level
    assert all(scan.cpu_query is None for scan in built.values())
    for march, scan in built.items():
        assert level_problem(scan, march) is None
        assert level_problem(scan, "x86-64-v4") is None  # a lower level runs on a higher
        assert level_problem(scan, "znver4") is None  # no psABI table for a CPU name


def test_a_higher_level_without_a_cpu_check_is_refused(built: dict[str, LevelScan]) -> None:
    problem = level_problem(built["x86-64-v3"], "x86-64-v2")
    assert problem is not None
    assert "no CPUID instruction" in problem
    assert problem.endswith("it was built for x86-64-v3")
    first = built["x86-64-v3"].by_level["x86-64-v3"].first
    assert first is not None and first[1].startswith("v")  # a VEX-encoded instruction
    assert level_problem(built["x86-64-v2"], "x86-64") is not None


def test_code_picked_at_run_time_is_seen(tmp_path: Path) -> None:
    source = tmp_path / "dispatch.c"
    source.write_text(DISPATCHING)
    binary = tmp_path / "dispatch"
    argv = [shutil.which("gcc") or "cc", "-O3", "-march=x86-64", "-static", "-nostdlib"]
    argv += ["-ffreestanding", "-fno-pie", "-no-pie", "-Wl,--eh-frame-hdr"]
    argv += ["-o", str(binary), str(source)]
    subprocess.run(argv, check=True)
    scan = _scan(binary)
    assert scan.cpu_query is not None and scan.cpu_query.startswith("CPUID at 0x")
    assert scan.function_starts is not None and len(scan.function_starts) >= 3
    assert scan.functions_using("x86-64-v2") == 1  # `wide` only
    # judged by the share of functions (here one of a handful: far more than 5%)
    problem = level_problem(scan, "x86-64")
    assert problem is not None
    assert f"1 of its {len(scan.function_starts)} functions" in problem


def _dispatching(functions: int, using: set[int], *, table: bool = True) -> LevelScan:
    use = LevelUse(instructions=10 * len(using), first=(0x1000, "vpaddd"), functions=using)
    return LevelScan(
        instructions=1000,
        by_level={"x86-64-v3": use},
        cpu_query="CPUID at 0x2000",
        function_starts=list(range(functions)) if table else None,
    )


def test_a_binary_that_asks_the_cpu_may_hold_a_little_higher_code() -> None:
    assert DISPATCHED_SHARE == 0.05
    assert level_problem(_dispatching(200, {1, 2}), "x86-64-v2") is None  # 1%: memchr's AVX2
    problem = level_problem(_dispatching(200, set(range(20))), "x86-64-v2")  # 10%
    assert problem is not None
    assert "20 of its 200 functions (10%)" in problem
    assert "after CPUID at 0x2000" in problem
    # without a function table, the share of instructions decides (1% at most)
    assert level_problem(_dispatching(0, {1}, table=False), "x86-64-v2") is None
    assert level_problem(_dispatching(0, set(range(2)), table=False), "x86-64-v2") is not None


def test_what_is_no_x86_64_elf_is_a_read_error(tmp_path: Path) -> None:
    script = tmp_path / "script"
    script.write_bytes(b"#!/bin/sh\necho hi\n")
    with pytest.raises(ElfReadError, match="not a readable ELF binary"):
        _scan(script)

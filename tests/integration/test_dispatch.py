"""The dispatcher for real: built twice in the cpu flavor's image with its own gcc (same
bytes), laid out beside two level binaries of a tiny C program built there too, then run
under `qemu-x86_64 -cpu <model>` in the aarch64 flavor's image (it carries qemu-user):
a CPU without AVX2 gets the v2 binary, one with AVX2/BMI2/FMA/MOVBE the v3 binary, a forced
level is obeyed or refused, and a dispatched run prints what the chosen binary prints when
run directly (qemu-user without binfmt does not follow an exec: the chosen binary itself runs
natively, which changes nothing of what it prints). Natively it must pick what this host's
/proc/cpuinfo says; under callgrind its own start-up is counted (run with -s to see it).
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.config.resolve.options import resolve
from orchestrator.execute.build import prepare_plan
from orchestrator.execute.ship.dispatcher import DispatcherBuild, build_dispatcher
from orchestrator.execute.steps.toolchain import plan_images
from orchestrator.host.packing import single_file_tar
from orchestrator.model.binaries import dispatch
from orchestrator.model.binaries.dispatch import Choice, libexec_path, parse_show
from orchestrator.progress.reporter import StepLog
from orchestrator.runtime.api import ContainerApi, ContainerSpec
from orchestrator.runtime.engine import Engine
from tests.integration.conftest import REPO

pytestmark = pytest.mark.integration

ROOT = "/tmp/pkg"  # in the throwaway containers
TOOL = f"{ROOT}/bin/tool"
LEVELS = ("x86-64-v2", "x86-64-v3")
# A level binary: what it was built for, and everything the dispatcher must pass unchanged.
PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    printf("level %s\n", LEVEL);
    printf("argv0 %s\n", argv[0]);
    for (int i = 1; i < argc; i++) printf("arg %s\n", argv[i]);
    const char *probe = getenv("PROBE");
    printf("env %s\n", probe ? probe : "-");
    return 3;
}
"""
# qemu's models: Nehalem has SSE4.2/POPCNT/CX16 but no AVX; Haswell adds AVX2/BMI2/FMA/MOVBE.
MODELS = {"Nehalem": "x86-64-v2", "Haswell": "x86-64-v3"}


def _flavor_image(engine: Engine, flavor: str) -> str:
    """The example project's toolchain image of `flavor`, built here if the Engine lacks it."""
    options = resolve(REPO / "orchestrator.toml", env=dict(os.environ), cwd=REPO)
    plan = prepare_plan(options, flavor)
    if engine.image(plan.image.reference) is not None:
        return plan.image.reference
    log = StepLog(sys.stdout, None, None, f"{flavor}-image")
    plan_images(engine, plan, log, cache_dir=options.cache_dir, offline=options.offline)
    return plan.image.reference


def _sh(box: ContainerApi, script: str) -> tuple[int, str]:
    lines: list[str] = []
    code = box.exec(["sh", "-c", script], on_output=lines.append)
    return code, "\n".join(lines)


def _ok(box: ContainerApi, script: str) -> str:
    code, output = _sh(box, script)
    assert code == 0, f"{script}\n{output}"
    return output


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    yield Engine.connect()


@pytest.fixture(scope="module")
def cpu_box(engine: Engine) -> Iterator[ContainerApi]:
    with engine.container(ContainerSpec(_flavor_image(engine, "cpu"), purpose="test")) as box:
        yield box


@pytest.fixture(scope="module")
def built(
    engine: Engine, cpu_box: ContainerApi, tmp_path_factory: pytest.TempPathFactory
) -> tuple[DispatcherBuild, DispatcherBuild]:
    image = _flavor_image(engine, "cpu")
    out = tmp_path_factory.mktemp("dispatcher")
    first = build_dispatcher(engine, image, out / "first", on_output=print)
    second = build_dispatcher(engine, image, out / "second", on_output=print)
    print(f"dispatcher: {first.size} bytes, sha256 {first.sha256}")
    return first, second


@pytest.fixture(scope="module")
def package(built: tuple[DispatcherBuild, DispatcherBuild], cpu_box: ContainerApi) -> bytes:
    """A tar of /tmp/pkg: bin/tool (the dispatcher) and libexec/tool/tool-x86-64-v2, -v3."""
    dispatcher = built[0].path.read_bytes()
    _ok(cpu_box, f"mkdir -p {ROOT}/bin /tmp/src")
    cpu_box.put_archive("/tmp/src", single_file_tar("/tmp/src/level.c", PROGRAM.encode()))
    cpu_box.put_archive(f"{ROOT}/bin", single_file_tar(TOOL, dispatcher))
    for level in LEVELS:
        binary = f"{ROOT}/{libexec_path('tool', level)}"
        _ok(
            cpu_box,
            f"mkdir -p {shlex.quote(str(Path(binary).parent))} && gcc -O2 -static "
            f"-march={level} -DLEVEL='\"{level}\"' -o {binary} /tmp/src/level.c",
        )
    _ok(cpu_box, f"chmod 0755 {TOOL}")
    return b"".join(cpu_box.get_archive(ROOT))


@pytest.fixture(scope="module")
def qemu_box(engine: Engine, package: bytes) -> Iterator[ContainerApi]:
    spec = ContainerSpec(_flavor_image(engine, "aarch64"), purpose="test")
    with engine.container(spec) as box:
        box.put_archive("/tmp", package)
        assert _sh(box, "command -v qemu-x86_64")[0] == 0, "qemu-user has no qemu-x86_64"
        yield box


def _shown(box: ContainerApi, command: str, *, cwd: str = "/") -> Choice:
    output = _ok(box, f"cd {cwd} && {dispatch.LEVEL_VARIABLE}=show {command} 2>/dev/null")
    return parse_show(output.strip().splitlines()[-1])


def test_same_source_same_image_same_bytes(built: tuple[DispatcherBuild, DispatcherBuild]) -> None:
    first, second = built
    assert first.path.read_bytes() == second.path.read_bytes()
    assert first.sha256 == second.sha256
    assert first.size < 8192  # it runs before the program, every time


@pytest.mark.parametrize(("model", "level"), MODELS.items())
def test_qemu_cpu_models_get_their_level(qemu_box: ContainerApi, model: str, level: str) -> None:
    choice = _shown(qemu_box, f"qemu-x86_64 -cpu {model} {TOOL}")
    assert choice == Choice(level, level, f"{ROOT}/{libexec_path('tool', level)}")
    # through a relative path, from another folder: it finds libexec/ by its real path
    relative = _shown(qemu_box, f"qemu-x86_64 -cpu {model} ../bin/tool", cwd=f"{ROOT}/libexec")
    assert relative == choice


def test_a_forced_level_is_obeyed_or_refused(qemu_box: ContainerApi) -> None:
    code, output = _sh(
        qemu_box,
        f"{dispatch.LEVEL_VARIABLE}=v2 qemu-x86_64 -cpu Haswell {TOOL} 2>/dev/null; echo status $?",
    )
    assert output.startswith("level x86-64-v2\n") and output.endswith("status 3"), output
    code, output = _sh(
        qemu_box, f"{dispatch.LEVEL_VARIABLE}=v3 qemu-x86_64 -cpu Nehalem {TOOL} 2>&1"
    )
    assert code == dispatch.EXIT_CPU_LACKS, output
    assert "forces x86-64-v3, which this CPU lacks" in output
    code, output = _sh(
        qemu_box, f"{dispatch.LEVEL_VARIABLE}=v4 qemu-x86_64 -cpu Haswell {TOOL} 2>&1"
    )
    assert code == dispatch.EXIT_CPU_LACKS, output  # qemu's Haswell has no AVX-512


@pytest.mark.parametrize("model", MODELS)
def test_a_dispatched_run_equals_the_chosen_binary_run_directly(
    qemu_box: ContainerApi, model: str
) -> None:
    chosen = f"{ROOT}/{libexec_path('tool', MODELS[model])}"
    args = "one 'two words' ''"
    script = "PROBE=yes qemu-x86_64 -cpu {model} {binary} {args} 2>/dev/null; echo status $?"
    direct = _sh(qemu_box, script.format(model=model, binary=chosen, args=args))
    dispatched = _sh(qemu_box, script.format(model=model, binary=TOOL, args=args))
    assert direct[0] == dispatched[0] == 0
    assert dispatched[1].replace(f"argv0 {TOOL}", f"argv0 {chosen}") == direct[1]
    assert (
        f"level {MODELS[model]}\nargv0 {TOOL}\narg one\narg two words\narg \nenv yes\n"
        in (dispatched[1])
    )
    assert dispatched[1].endswith("status 3")  # the program's own exit status


def _host_level() -> str:
    """The best level this host's kernel reports in /proc/cpuinfo (it hides what XCR0 lacks)."""
    found = re.search(r"^flags\s*:(.*)$", Path("/proc/cpuinfo").read_text(), re.MULTILINE)
    assert found is not None
    flags = set(found.group(1).split())
    v2 = {"pni", "ssse3", "sse4_1", "sse4_2", "popcnt", "cx16", "lahf_lm"}
    v3 = {"avx", "avx2", "bmi1", "bmi2", "fma", "f16c", "abm", "movbe", "xsave"}
    v4 = {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}
    best = "x86-64"
    for name, needs in (("x86-64-v2", v2), ("x86-64-v3", v3), ("x86-64-v4", v4)):
        if not needs <= flags:
            break
        best = name
    return best


def test_natively_it_sees_this_hosts_cpu(cpu_box: ContainerApi, package: bytes) -> None:
    del package  # laid out in cpu_box
    choice = _shown(cpu_box, TOOL)
    assert choice.cpu == _host_level()
    assert choice.level == ("x86-64-v3" if choice.cpu == "x86-64-v4" else choice.cpu)


def _collected(output: str) -> list[int]:
    return [int(n.replace(",", "")) for n in re.findall(r"Collected : ([\d,]+)", output)]


def test_start_up_cost_under_callgrind(cpu_box: ContainerApi, package: bytes) -> None:
    """Instructions of the dispatcher itself (to its exit, printing its choice: the exec
    path plus a write), and of a dispatched run against the chosen binary run directly."""
    del package
    valgrind = "valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.%p"
    output = _ok(cpu_box, f"{dispatch.LEVEL_VARIABLE}=show {valgrind} {TOOL} 2>&1")
    alone = _collected(output)
    # valgrind's own CPU decides (it has AVX2 and no AVX-512): the binary it would run
    choice = parse_show(next(line for line in output.splitlines() if line.startswith("level=")))
    direct = _collected(_sh(cpu_box, f"{valgrind} {choice.path} 2>&1")[1])
    traced = _collected(_sh(cpu_box, f"{valgrind} --trace-children=yes {TOOL} 2>&1")[1])
    print(f"under valgrind: {choice}")
    print(f"dispatcher alone: {alone} instructions; direct run {direct}; dispatched {traced}")
    assert len(alone) == 1 and 0 < alone[0] < 5000
    # the chosen binary's own count differs by its argv[0] (it prints it): not compared
    assert len(direct) == 1 and traced

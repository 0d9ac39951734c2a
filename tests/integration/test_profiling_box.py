"""The profiling container, for real: perf samples there, and a workload cannot leave it.

The grant comes from the production probe (`find_perf_access` on this Engine), and the
container is started the way the pipeline starts its profiler (`Engine.container` with that
grant, the image's own user), so what is checked here is what ships.
"""

from __future__ import annotations

import json
import platform
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.runtime.api import ContainerSpec, Privileges
from orchestrator.runtime.container import Container
from orchestrator.runtime.engine import Engine
from orchestrator.runtime.perf import GRANTS, find_perf_access
from tests.integration.conftest import REPO

pytestmark = pytest.mark.integration

# x86-64 syscall numbers, called straight through libc's syscall(): each answer is seccomp's
# (EPERM) or the kernel's (any other errno, or success). unshare(CLONE_NEWUSER) and keyctl
# need no capability at all, so only seccomp can refuse them; setns and bpf reach the
# kernel (EBADF, EINVAL) under the old CAP_SYS_ADMIN grant.
SYSCALLS = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
calls = {
    "unshare(CLONE_NEWUSER)": (272, 0x10000000),
    "keyctl(GET_KEYRING_ID)": (250, 0, -3, 0),
    "setns": (308, -1, 0),
    "bpf": (321, 0, 0, 0),
    "mount": (165, b"none", b"/tmp", b"tmpfs", 0, 0),
    "clone3": (435, 0, 0),
}
for name, args in calls.items():
    result = libc.syscall(*args)
    print(name, "ok" if result >= 0 else os.strerror(ctypes.get_errno()))
import threading
thread = threading.Thread(target=print, args=("threads", "ok"))
thread.start()
thread.join()
"""
RAW_SOCKET = "import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)"
# A small workload under perf, as bolt-profile runs the training workloads.
SAMPLE = (
    "perf record -e cpu-clock:u -o /tmp/perf.data -- python3 -c 'sum(range(5_000_000))' "
    "&& perf report -i /tmp/perf.data --stdio 2>/dev/null | grep '^# Samples'"
)


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    yield Engine.connect()


@pytest.fixture(scope="module")
def cpu_image(engine: Engine, request: pytest.FixtureRequest) -> str:
    """The cpu toolchain image of the example project, as the plan names it."""
    plan = subprocess.run(
        [sys.executable, "-m", "orchestrator", "build", "--flavor", "cpu", "--dry-run"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    reference = str(json.loads(plan.stdout)["image"]["reference"])
    if engine.image(reference) is None:
        request.getfixturevalue("release")  # the build every other test shares makes it
    return reference


def _run(box: Container, script: str) -> tuple[int, str]:
    lines: list[str] = []
    code = box.exec(["sh", "-c", script], on_output=lines.append)
    return code, "\n".join(lines)


def _spec(image: str, privileges: Privileges) -> ContainerSpec:
    return ContainerSpec(image, privileges=privileges, purpose="profile")


def _paranoid() -> int:
    return int(Path("/proc/sys/kernel/perf_event_paranoid").read_text())


@pytest.fixture(scope="module")
def profiling_grant(engine: Engine, cpu_image: str) -> Privileges:
    access = find_perf_access(engine, cpu_image, allowed=True)  # probed afresh, no cache
    if not access.capabilities.sampling:
        if _paranoid() > 2:
            pytest.skip(f"perf_event_paranoid={_paranoid()}: sampling needs CAP_PERFMON here")
        pytest.fail(f"perf cannot sample under any grant: {access.capabilities.grant}")
    assert access.privileges in GRANTS  # our profile, never SYS_ADMIN or unconfined
    return access.privileges


@pytest.fixture(scope="module")
def profiler(engine: Engine, cpu_image: str, profiling_grant: Privileges) -> Iterator[Container]:
    with engine.container(_spec(cpu_image, profiling_grant)) as box:
        yield box


needs_x86_64 = pytest.mark.skipif(
    platform.machine() != "x86_64", reason="syscall numbers are x86-64's"
)


def test_the_grant_is_our_profile_without_capabilities(profiling_grant: Privileges) -> None:
    options = profiling_grant.engine_options()
    assert options["cap_drop"] == ["ALL"] and not options["privileged"]
    assert "no-new-privileges" in options["security_opt"]
    assert profiling_grant.seccomp == "orchestrator-perf"
    # On this engine (perf_event_paranoid <= 2) no capability at all is needed.
    if _paranoid() <= 2:
        assert profiling_grant.cap_add == ()


def test_perf_samples_in_the_profiling_container(profiler: Container) -> None:
    code, output = _run(profiler, SAMPLE)
    assert code == 0, output
    match = re.search(r"# Samples: (\d+)", output)
    assert match is not None and int(match.group(1)) > 0, output


def test_a_workload_cannot_leave_the_profiling_container(profiler: Container) -> None:
    code, output = _run(profiler, "id -u")
    assert (code, output.strip()) == (0, "1000")  # the image's user, as the profiler runs
    for script in (
        "unshare -Ur true",
        "unshare -Urm sh -c 'mount -t tmpfs none /tmp'",
        "mount -t tmpfs none /tmp",
    ):
        code, output = _run(profiler, script)
        assert code != 0, f"{script}: {output}"
        assert "not permitted" in output or "must be superuser" in output, output
    code, output = _run(profiler, f'python3 -c "{RAW_SOCKET}"')
    assert code != 0 and "PermissionError" in output, output


@needs_x86_64
def test_seccomp_refuses_the_escape_syscalls(profiler: Container) -> None:
    code, output = _run(profiler, f"python3 -c '{SYSCALLS}'")
    assert code == 0, output
    answers = dict(line.split(" ", 1) for line in output.splitlines())
    refused = ("unshare(CLONE_NEWUSER)", "keyctl(GET_KEYRING_ID)", "setns", "bpf", "mount")
    assert answers == {
        **dict.fromkeys(refused, "Operation not permitted"),
        # "not implemented", as Docker's default says: libc then makes threads with the
        # filtered clone, so a threaded workload still runs.
        "clone3": "Function not implemented",
        "threads": "ok",
    }


@needs_x86_64
def test_the_old_grant_let_a_workload_out(engine: Engine, cpu_image: str) -> None:
    """The control: the same probes tell a leaky grant apart (CAP_SYS_ADMIN, what perf
    used to get), so their refusals above are the profile's doing."""
    with engine.container(_spec(cpu_image, Privileges(cap_add=("SYS_ADMIN",)))) as box:
        code, output = _run(box, "unshare -Urm sh -c 'mount -t tmpfs none /tmp && id -u'")
        assert (code, output.strip()) == (0, "0"), output
        code, output = _run(box, f"python3 -c '{SYSCALLS}'")
        assert "unshare(CLONE_NEWUSER) ok" in output, output

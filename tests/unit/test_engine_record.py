"""build.json's engine record: which engine kind and version built the target, and the
container limits that engine did not apply, measured once per engine in the first
container given limits (runtime/api.py engine_record, Engine.container)."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

from orchestrator.model.documents.records import EngineRecord
from orchestrator.runtime.api import ContainerSpec, Limits, engine_record
from orchestrator.runtime.engine import Engine
from tests.unit.fakes import FakeEngine
from tests.unit.test_engine_kinds import PODMAN_INFO, PODMAN_VERSION, Calls, client

# Debian trixie's docker.io as tests/integration/docker26_engine.py starts it (trimmed).
DOCKER26_VERSION = {
    "Version": "26.1.5+dfsg1",
    "ApiVersion": "1.45",
    "MinAPIVersion": "1.24",
    "Components": [{"Name": "Engine", "Version": "26.1.5+dfsg1"}],
}
DOCKER26_INFO = {
    "Name": "vm",
    "Architecture": "x86_64",
    "CgroupVersion": "1",
    "SecurityOptions": ["name=seccomp,profile=builtin"],
    "Driver": "overlay2",
    "OperatingSystem": "Debian GNU/Linux 13 (trixie)",
    "KernelVersion": "6.18.44-fc-v595",
}
# What a rootless engine under cgroup v1 shows in a container given limits: none.
ROOTLESS_V1 = (
    b"/sys/fs/cgroup/pids/pids.max:max\n/sys/fs/cgroup/pids/pids.current:2\n"
    b"/sys/fs/cgroup/memory/memory.limit_in_bytes:9223372036854771712\n"
)


def test_docker_26_is_recorded_by_kind_version_and_api() -> None:
    record = engine_record(FakeEngine(info=DOCKER26_INFO, version=DOCKER26_VERSION))
    assert (record.kind, record.version, record.api_version) == ("docker", "26.1.5+dfsg1", "1.45")
    assert (record.cgroup_version, record.rootless, record.unapplied_limits) == (1, False, [])
    assert record.storage_driver == "overlay2"
    assert record.described() == (
        "fake (Docker 26.1.5+dfsg1, Debian GNU/Linux 13 (trixie), kernel 6.18.44-fc-v595, overlay2)"
    )


def test_a_rootless_podman_without_limits_says_so() -> None:
    fake = FakeEngine(info={**PODMAN_INFO, "Rootless": True}, version=PODMAN_VERSION)
    fake.limits_not_applied = ("pids", "memory")
    record = engine_record(fake)
    assert (record.kind, record.version, record.rootless) == ("podman", "4.3.1", True)
    assert record.unapplied_limits == ["pids", "memory"]
    assert record.described().startswith("fake (Podman 4.3.1 rootless, ")


def test_an_engine_record_from_before_the_kind_still_reads() -> None:
    older = {
        "context": "current",
        "name": "vm",
        "version": "20.10.24+dfsg1",
        "api_version": "1.41",
        "os": "Debian GNU/Linux 12 (bookworm)",
        "kernel": "6.1.0",
        "architecture": "x86_64",
        "storage_driver": "fuse-overlayfs",
    }
    record = EngineRecord.model_validate(older)
    assert (record.kind, record.unapplied_limits) == ("", [])
    assert record.described().startswith("current (Docker 20.10.24+dfsg1, ")


def _engine_answering(cgroup: bytes) -> tuple[Engine, Calls]:
    calls = Calls(DOCKER26_VERSION, DOCKER26_INFO)
    calls.answers["containers.run"] = lambda _image, **_options: SimpleNamespace(
        id="c1", remove=lambda force: None
    )
    calls.answers["api.exec_create"] = {"Id": "e1"}

    def exec_start(*_args: Any, **_kwargs: Any) -> Iterator[bytes]:
        return iter([cgroup])

    calls.answers["api.exec_start"] = exec_start
    calls.answers["api.exec_inspect"] = {"ExitCode": 0}
    return Engine(client(calls)), calls


def test_limits_are_measured_once_per_engine_in_the_first_container_given_them() -> None:
    engine, calls = _engine_answering(ROOTLESS_V1)
    with engine.container(ContainerSpec("img")):  # no limits: nothing to measure
        pass
    assert "api.exec_create" not in calls.names()
    limited = ContainerSpec("img", limits=Limits(pids=4096, memory=8 << 30))
    for builder in (engine, engine.twin()):  # a twin shares what its engine measured
        with builder.container(limited):
            pass
    assert calls.names().count("api.exec_create") == 1
    assert engine.unapplied_limits() == ("pids", "memory")
    assert engine_record(engine).unapplied_limits == ["pids", "memory"]


def test_limits_in_force_leave_nothing_unapplied() -> None:
    in_force = (
        b"/sys/fs/cgroup/pids/pids.max:4096\n"
        b"/sys/fs/cgroup/memory/memory.limit_in_bytes:8589934592\n"
    )
    engine, _calls = _engine_answering(in_force)
    with engine.container(ContainerSpec("img", limits=Limits(pids=4096, memory=8 << 30))):
        pass
    assert engine.unapplied_limits() == ()

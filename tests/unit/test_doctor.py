"""`orchestrator doctor`'s checks, with FakeEngine behind Engine.connect and a made-up PATH."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest

from orchestrator.errors import ContainerError, DockerUnavailableError
from orchestrator.runtime.api import ContainerSpec
from orchestrator.runtime.doctor import Check, run_checks
from orchestrator.runtime.engine import Privileges
from orchestrator.runtime.perf import LBR_PROBE
from tests.unit.fakes import FakeContainer, FakeEngine, Prober
from tests.unit.test_cgroups import grep_output
from tests.unit.test_engine_kinds import FEDORA_INFO, PODMAN_INFO, PODMAN_VERSION, SLIRP_TUN

GB = 1_000_000_000


def use_engine(monkeypatch: pytest.MonkeyPatch, engine: FakeEngine) -> None:
    monkeypatch.setattr("orchestrator.runtime.doctor.Engine.connect", staticmethod(lambda: engine))


def use_path(monkeypatch: pytest.MonkeyPatch, *tools: str) -> None:
    """Only `tools` are on PATH; never `docker`, so no docker CLI is ever run."""
    assert "docker" not in tools
    found = {tool: f"/usr/bin/{tool}" for tool in tools}
    monkeypatch.setattr("orchestrator.runtime.doctor.shutil.which", found.get)


def use_free_space(monkeypatch: pytest.MonkeyPatch, free: int) -> None:
    monkeypatch.setattr(
        "orchestrator.runtime.doctor.shutil.disk_usage", lambda _path: SimpleNamespace(free=free)
    )


def by_name(checks: Sequence[Check]) -> dict[str, Check]:
    names = [c.name for c in checks]
    assert len(names) == len(set(names)), names
    return {c.name: c for c in checks}


def test_docker_unreachable_still_runs_every_check(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def refuse() -> FakeEngine:
        raise DockerUnavailableError("cannot reach the Docker Engine: connection refused")

    monkeypatch.setattr("orchestrator.runtime.doctor.Engine.connect", staticmethod(refuse))
    use_path(monkeypatch, "mmdebstrap")
    use_free_space(monkeypatch, 100 * GB)
    checks = run_checks(tmp_path)
    assert [c.name for c in checks] == [
        "docker",
        "buildkit",
        "disk (docker)",
        "disk (cache)",
        "mmdebstrap",
        "qemu-user (host)",
        "import and tag",
        "image cleanup",
        "image lock",
        "init",
        "seccomp profile",
        "read-only volumes",
        "pids and memory limits",
        "container network",
        "GPUs",
        "privileged containers",
        "perf in a container",
    ]
    found = by_name(checks)
    assert found["docker"] == Check(
        "docker", "fail", "cannot reach the Docker Engine: connection refused"
    )
    # What needs no Docker is still checked; what does says so.
    assert found["mmdebstrap"].status == "ok"
    assert found["disk (cache)"].status == "ok"
    skipped = [c.name for c in checks if c.status == "skip"]
    assert skipped == ["disk (docker)", *[c.name for c in checks][-11:]]
    assert {found[name].detail for name in skipped} == {"skipped: Docker unreachable"}


def test_fresh_host_without_images(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = FakeEngine(info={"Driver": "overlay2", "DockerRootDir": str(tmp_path)})
    use_engine(monkeypatch, fake)
    use_path(monkeypatch, "mmdebstrap")
    use_free_space(monkeypatch, 100 * GB)
    checks = by_name(run_checks(tmp_path / "cache"))
    assert checks["docker"] == Check(
        "docker",
        "ok",
        "Docker Engine 27.0.0 (rootful), API 1.46, storage overlay2, cgroup version unknown",
    )
    assert checks["buildkit"].status == "info"  # no docker CLI: the classic builder
    assert checks["disk (docker)"].status == "ok"
    assert checks["disk (cache)"] == Check("disk (cache)", "ok", f"100 GB free at {tmp_path}")
    assert checks["mmdebstrap"] == Check("mmdebstrap", "ok", "/usr/bin/mmdebstrap")
    for name in ("init", "read-only volumes", "pids and memory limits", "privileged containers"):
        assert checks[name].status == "info"
        assert "no base image yet" in checks[name].detail
    assert "no toolchain image yet" in checks["perf in a container"].detail
    assert fake.probes == []  # nothing to probe with
    # What needs no image was tried, and left nothing behind.
    assert [checks[n].status for n in ("import and tag", "image cleanup", "image lock")] == [
        "ok"
    ] * 3
    assert fake.images == {} and fake.locks.held == {} and fake.in_use == set()


def test_missing_mmdebstrap_and_little_disk_fail(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    use_engine(monkeypatch, FakeEngine(info={"DockerRootDir": str(tmp_path / "absent")}))
    use_path(monkeypatch, "qemu-aarch64-static")
    use_free_space(monkeypatch, 4 * GB)
    checks = by_name(run_checks(tmp_path))
    assert checks["mmdebstrap"].status == "fail"
    assert "apt-get install mmdebstrap" in checks["mmdebstrap"].detail
    assert checks["disk (cache)"].status == "fail"
    assert "disk (docker)" not in checks  # its root folder is not on this machine
    assert checks["qemu-user (host)"].detail.startswith("/usr/bin/qemu-aarch64-static;")


def test_low_disk_is_a_warning(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    use_engine(monkeypatch, FakeEngine())
    use_path(monkeypatch, "mmdebstrap")
    use_free_space(monkeypatch, 10 * GB)
    assert by_name(run_checks(tmp_path))["disk (cache)"].status == "warn"


def test_with_images_probes_privileges_and_perf(monkeypatch: pytest.MonkeyPatch) -> None:
    def prober(image: str, argv: Sequence[str], privileges: Privileges) -> tuple[int, str]:
        if privileges.privileged:
            return 1, "Error: privileged mode is disabled by policy"
        lbr = tuple(argv) == LBR_PROBE
        return (1, "no LBR") if lbr else (0, "")

    fake = FakeEngine(prober=prober)
    fake.add_image("orchestrator/base:trixie-" + "0" * 16)
    fake.add_image("orchestrator/cpu:rustc-web-1.96-" + "0" * 16)
    use_engine(monkeypatch, fake)
    use_path(monkeypatch, "mmdebstrap")
    checks = by_name(run_checks(None))
    privileged = checks["privileged containers"]
    assert privileged.status == "info"
    assert "privileged mode is disabled by policy" in privileged.detail
    perf = checks["perf in a container"]
    assert perf.status == "ok"
    assert perf.detail.startswith(
        "software sampling (no LBR) with seccomp orchestrator-perf (Docker's default + "
        "perf_event_open), cap-drop ALL (the least grant"
    )
    # The privileged probe runs as root in the base image.
    (found,) = [p for p in fake.probes if p[2].privileged]
    assert found == (
        "orchestrator/base:trixie-" + "0" * 16,
        ("true",),
        Privileges(privileged=True),
        "0",
    )


def test_no_perf_at_all_warns_of_instrumentation(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeEngine(prober=lambda _image, _argv, _privileges: (1, "denied"))
    fake.add_image("orchestrator/cpu:rustc-web-1.96-" + "0" * 16)
    use_engine(monkeypatch, fake)
    use_path(monkeypatch)
    perf = by_name(run_checks(None))["perf in a container"]
    assert perf.status == "warn"
    assert "instrumentation" in perf.detail


def podman_doctor(
    monkeypatch: pytest.MonkeyPatch,
    *,
    info: Mapping[str, object],
    cgroup: str,
    prober: Prober,
    network_refused: str | None = None,
) -> dict[str, Check]:
    """doctor on a fake Podman holding a base image, whose containers' cgroup files are
    the fixture folder `cgroup` (tests/unit/cgroups/); with `network_refused`, a container
    with a network does not start, for that reason."""

    def responder(argv: Sequence[str]) -> tuple[int, list[str]]:
        if argv[0] == "grep":
            return 0, grep_output(cgroup, argv)
        return 0, []  # the read-only volume refused the write

    fake = FakeEngine(version=PODMAN_VERSION, info=info, responder=responder, prober=prober)
    fake.add_image("orchestrator/base:trixie-" + "0" * 16)
    if network_refused is not None:
        plain = fake.container

        @contextmanager
        def container(spec: ContainerSpec, *, keep: bool = False) -> Iterator[FakeContainer]:
            if spec.network:
                where = f"a {spec.purpose} container from {spec.image} on {fake.kind().title}"
                raise ContainerError(f"cannot start {where}: {network_refused}")
            with plain(spec, keep=keep) as box:
                yield box

        monkeypatch.setattr(fake, "container", container)
    use_engine(monkeypatch, fake)
    use_path(monkeypatch, "mmdebstrap")
    return by_name(run_checks(None))


def test_podman_is_named_and_each_of_its_differences_said(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    info = {**FEDORA_INFO, "Driver": "overlay"}
    checks = podman_doctor(
        monkeypatch, info=info, cgroup="v2-hits", prober=lambda _i, _a, _p: (0, "")
    )
    assert checks["docker"].detail == (
        "Podman 4.3.1 (rootless), API 1.41, storage overlay, cgroup v2, "
        "SELinux: volumes mounted with :z"
    )
    assert "tagged by id after the import" in checks["import and tag"].detail
    assert "never forced" in checks["image cleanup"].detail
    assert "HTTP 500 (Podman)" in checks["image lock"].detail
    assert "by file path" in checks["seccomp profile"].detail
    # v2-hits has pids.max 64 and memory.max 256 MiB: the probe's own limits.
    assert checks["pids and memory limits"] == Check(
        "pids and memory limits", "ok", "in force (cgroup v2); hits are detected"
    )
    assert {c.status for c in checks.values()} <= {"ok", "info"}


def test_podman_without_catatonit_or_delegated_controllers_says_what_to_do(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def prober(_image: str, _argv: Sequence[str], privileges: Privileges) -> tuple[int, str]:
        if privileges.privileged:
            return 0, ""
        return -1, "container-init binary not found: stat /usr/libexec/podman/catatonit"

    checks = podman_doctor(monkeypatch, info=FEDORA_INFO, cgroup="v2-undelegated", prober=prober)
    assert checks["init"].status == "fail"
    assert checks["init"].detail.endswith("apt-get install catatonit.")
    assert checks["seccomp profile"].status == "fail"  # no container starts at all
    limits = checks["pids and memory limits"]
    assert limits.status == "warn"
    assert limits.detail.startswith("pids and memory limit not in force")
    assert "Delegate=pids memory" in limits.detail


def test_rootless_podman_on_cgroup_v1_is_told_limits_need_v2(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What rootless Podman 4.3 on this project's v1 hosts showed: the limits are
    accepted and not applied (no pids.max, no memory limit in the container)."""
    info = {**FEDORA_INFO, "CgroupVersion": "1", "SecurityOptions": [], "Rootless": True}
    checks = podman_doctor(
        monkeypatch, info=info, cgroup="v2-undelegated", prober=lambda _i, _a, _p: (0, "")
    )
    assert checks["docker"].detail.startswith("Podman 4.3.1 (rootless), API 1.41")
    limits = checks["pids and memory limits"]
    assert limits.status == "warn"
    assert limits.detail.endswith("cannot set limits under cgroup v1: boot with cgroup v2")


def test_rootless_podman_without_a_usable_tun_device_warns_that_crates_cannot_be_fetched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Measured here: rootless Podman 4.3 with /dev/net/tun root's alone (mode 0600)."""
    info = {**FEDORA_INFO, "CgroupVersion": "1", "SecurityOptions": [], "Rootless": True}
    checks = podman_doctor(
        monkeypatch,
        info=info,
        cgroup="v2-hits",
        prober=lambda _i, _a, _p: (0, ""),
        network_refused=SLIRP_TUN,
    )
    network = checks["container network"]
    assert network.status == "warn"
    assert "Permission denied -> a rootless Podman's network (slirp4netns)" in network.detail
    assert "WARNING" not in network.detail  # slirp4netns's reason, not its warnings
    assert "chmod 0666 /dev/net/tun" in network.detail
    assert network.detail.endswith("only crates already in the cache can be used")
    assert checks["init"].status == "ok"  # containers without a network start


def test_a_container_network_that_works_is_ok(monkeypatch: pytest.MonkeyPatch) -> None:
    checks = podman_doctor(
        monkeypatch, info=PODMAN_INFO, cgroup="v2-hits", prober=lambda _i, _a, _p: (0, "")
    )
    assert checks["container network"] == Check(
        "container network", "ok", "containers reach a network (fetch-crates)"
    )

"""`orchestrator doctor`'s checks, with FakeEngine behind Engine.connect and a made-up PATH."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import pytest

from orchestrator.errors import DockerUnavailableError
from orchestrator.runtime.doctor import Check, run_checks
from orchestrator.runtime.engine import Privileges
from orchestrator.runtime.perf import LBR_PROBE
from tests.unit.fakes import FakeEngine

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
    assert skipped == ["disk (docker)", "privileged containers", "perf in a container"]
    assert {found[name].detail for name in skipped} == {"skipped: Docker unreachable"}


def test_fresh_host_without_images(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = FakeEngine(info={"Driver": "overlay2", "DockerRootDir": str(tmp_path)})
    use_engine(monkeypatch, fake)
    use_path(monkeypatch, "mmdebstrap")
    use_free_space(monkeypatch, 100 * GB)
    checks = by_name(run_checks(tmp_path / "cache"))
    assert checks["docker"] == Check("docker", "ok", "engine 27.0.0 API 1.46, storage overlay2")
    assert checks["buildkit"].status == "info"  # no docker CLI: the classic builder
    assert checks["disk (docker)"].status == "ok"
    assert checks["disk (cache)"] == Check("disk (cache)", "ok", f"100 GB free at {tmp_path}")
    assert checks["mmdebstrap"] == Check("mmdebstrap", "ok", "/usr/bin/mmdebstrap")
    assert checks["privileged containers"].status == "info"
    assert "no base image yet" in checks["privileged containers"].detail
    assert "no toolchain image yet" in checks["perf in a container"].detail
    assert fake.probes == []  # nothing to probe with


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
    image, argv, privileges, user = fake.probes[0]
    assert (image, argv, privileges, user) == (
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

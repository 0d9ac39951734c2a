"""`orchestrator doctor`: what this host can do, found by trying it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from orchestrator.errors import OrchestratorError
from orchestrator.model.verdict.bolt_report import choose_mode
from orchestrator.runtime import capabilities
from orchestrator.runtime.capabilities import Check
from orchestrator.runtime.engine import Engine, ImageInfo, Privileges
from orchestrator.runtime.perf import find_perf_access

__all__ = ["Check", "run_checks"]

MIN_FREE_GB = 15  # one toolchain image plus its packages and a build


def _tagged(images: list[ImageInfo], repository: str) -> ImageInfo | None:
    matching = [i for i in images if any(t.startswith(repository + ":") for t in i.tags)]
    return matching[0] if matching else None


def _host_tool(name: str) -> str | None:
    return shutil.which(name)


def _buildx() -> Check:
    docker = _host_tool("docker")
    if docker is None:
        return Check(
            "buildkit",
            "info",
            "no docker CLI; images are built over the Engine API with the classic builder",
        )
    try:
        result = subprocess.run(
            [docker, "buildx", "version"], capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return Check("buildkit", "info", f"buildx not usable ({exc})")
    if result.returncode == 0:
        return Check("buildkit", "ok", result.stdout.strip())
    return Check(
        "buildkit",
        "info",
        "no buildx plugin: images are built over the Engine API "
        "with the classic builder (all this tool needs)",
    )


def _disk(path: Path, label: str) -> Check:
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    free_gb = shutil.disk_usage(existing).free / 1e9
    status = "ok" if free_gb >= MIN_FREE_GB else "fail" if free_gb < 5 else "warn"
    return Check(f"disk ({label})", status, f"{free_gb:.0f} GB free at {existing}")


def _perf(engine: Engine, image: str, *, allow_privileged: bool) -> Check:
    access = find_perf_access(engine, image, allowed=True, allow_privileged=allow_privileged)
    mode = choose_mode("auto", access.capabilities)
    if mode.mode == "instrument":
        return Check(
            "perf in a container",
            "warn",
            "no sampling under any grant; BOLT will use instrumentation",
        )
    what = "LBR sampling" if mode.mode == "lbr" else "software sampling (no LBR)"
    return Check(
        "perf in a container",
        "ok",
        f"{what} with {access.privileges.describe()} (the least grant that works)",
    )


DOCKER_SKIPPED = "skipped: Docker unreachable"
# The checks that need an image (a base image made by a first build) to start containers.
_BASE_CHECKS = (
    "init",
    "seccomp profile",
    "read-only volumes",
    "pids and memory limits",
    "container network",
    "GPUs",
    "privileged containers",
)
# The checks that talk to the Engine; without one each is reported as skipped.
_CONTAINER_CHECKS = (
    "import and tag",
    "image cleanup",
    "image lock",
    *_BASE_CHECKS,
    "perf in a container",
)


def run_checks(cache_dir: Path | None, *, allow_privileged: bool = False) -> list[Check]:
    """Every check, in one order; those that need Docker are skipped, not dropped, when it
    is unreachable, so one run shows everything that needs fixing. `allow_privileged`
    (profiling.allow_privileged) lets the perf probe try --privileged last, as a build would."""
    engine: Engine | None = None
    try:
        engine = Engine.connect()
    except OrchestratorError as exc:
        checks = [Check("docker", "fail", exc.message), _buildx()]
        checks.append(Check("disk (docker)", "skip", DOCKER_SKIPPED))
    else:
        info = engine.info()
        checks = [capabilities.describe(engine), _buildx()]
        root = Path(str(info.get("DockerRootDir", "/var/lib/docker")))
        if root.exists():
            checks.append(_disk(root, "docker"))
    if cache_dir is not None:
        checks.append(_disk(cache_dir, "cache"))
    checks += _host_checks()
    if engine is None:
        checks += [Check(name, "skip", DOCKER_SKIPPED) for name in _CONTAINER_CHECKS]
    else:
        checks += _container_checks(engine, allow_privileged=allow_privileged)
    return checks


def _host_checks() -> list[Check]:
    """What this host has without Docker: mmdebstrap, qemu-user."""
    mmdebstrap = _host_tool("mmdebstrap")
    qemu = _host_tool("qemu-aarch64") or _host_tool("qemu-aarch64-static")
    binfmt = Path("/proc/sys/fs/binfmt_misc/qemu-aarch64").exists()
    return [
        Check(
            "mmdebstrap",
            "ok" if mmdebstrap else "fail",
            mmdebstrap or "missing: apt-get install mmdebstrap (makes base images)",
        ),
        Check(
            "qemu-user (host)",
            "info",
            f"{qemu or 'not on PATH'}; binfmt {'registered' if binfmt else 'no'} "
            "(aarch64 images carry their own)",
        ),
    ]


def _container_checks(engine: Engine, *, allow_privileged: bool) -> list[Check]:
    """What the Engine does as a build asks: images, locks, containers, perf."""
    checks = [*capabilities.import_and_cleanup(engine), capabilities.image_lock(engine)]
    images = engine.managed_images()
    base = _tagged(images, "orchestrator/base")
    if base is None:
        checks += [
            Check(name, "info", "not checked: no base image yet (run `orchestrator build`)")
            for name in _BASE_CHECKS
        ]
    else:
        checks += capabilities.container_checks(engine, base.tags[0])
        code, output = engine.probe(
            base.tags[0], ["true"], privileges=Privileges(privileged=True), user="0"
        )
        checks.append(
            Check(
                "privileged containers",
                "ok" if code == 0 else "info",
                "granted"
                if code == 0
                else f"refused (…{output.strip()[-90:]}); perf does not need it",
            )
        )
    toolchain = _tagged(images, "orchestrator/cpu")
    if toolchain is None:
        checks.append(
            Check(
                "perf in a container",
                "info",
                "not checked: no toolchain image yet (run `orchestrator build`)",
            )
        )
    else:
        checks.append(_perf(engine, toolchain.tags[0], allow_privileged=allow_privileged))
    return checks

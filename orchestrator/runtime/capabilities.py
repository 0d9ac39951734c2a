"""`orchestrator doctor`'s engine probes: each thing a build relies on, tried on the
Engine as a build would do it (through the Engine's own calls, so that what works around
an engine's difference is what gets tried), and for each that fails, what to install or
configure.
"""

from __future__ import annotations

import re
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import OrchestratorError
from orchestrator.runtime import cgroups
from orchestrator.runtime.api import ContainerSpec, Limits, Privileges
from orchestrator.runtime.engine import Engine
from orchestrator.runtime.gpu_probe import engine_gpus
from orchestrator.runtime.imagelock import LOCK_KIND, lock_name
from orchestrator.runtime.quirks import EngineKind
from orchestrator.runtime.seccomp import PERF_PROFILE

PROBE_REPOSITORY = "orchestrator/doctor-probe"
PROBE_PIDS = 64
PROBE_MEMORY = 256 << 20
RO_PATH = "/probe"


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok | warn | fail | info | skip
    detail: str


def _failing(name: str, what: str, fix: str) -> Check:
    return Check(name, "fail", f"{what.strip()[-160:]} -> {fix}")


def describe(engine: Engine) -> Check:
    """The engine's kind and version, and the facts that change what is sent to it."""
    kind, info = engine.kind(), engine.info()
    facts = [
        kind.title,
        f"API {kind.api_version}",
        f"storage {info.get('Driver')}",
        f"cgroup v{kind.cgroup_version}" if kind.cgroup_version else "cgroup version unknown",
    ]
    if kind.selinux:
        facts.append("SELinux: volumes mounted with :z")
    return Check("docker", "ok", ", ".join(facts))


def import_and_cleanup(engine: Engine) -> list[Check]:
    """Import a one-folder image under a name (as base images are made), list it under
    that name, then remove it, refused while a container uses it (superseded images)."""
    kind = engine.kind()
    reference = f"{PROBE_REPOSITORY}:{engine.session}"
    with tempfile.TemporaryDirectory(prefix="orchestrator-doctor-") as folder:
        tarball = Path(folder) / "probe.tar"
        with tarfile.open(tarball, "w") as tar:
            entry = tarfile.TarInfo("probe")
            entry.type, entry.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(entry)
        try:
            engine.import_rootfs(tarball, reference, {})
        except OrchestratorError as exc:
            fix = "the engine must accept `docker import` (POST /images/create?fromSrc=-)"
            return [_failing("import and tag", exc.message, fix)]
    how = "tagged by id after the import (Podman drops the import's tag)"
    named = "named by the import" if kind.tags_on_import else how
    listed = any(reference in image.tags for image in engine.managed_images())
    checks = [
        Check("import and tag", "ok", named)
        if listed
        else Check(
            "import and tag",
            "fail",
            f"imported, but not listed as {reference} -> report the engine and version",
        )
    ]
    return [*checks, _cleanup(engine, reference)]


def _cleanup(engine: Engine, reference: str) -> Check:
    try:
        with engine.created(reference):
            taken = engine.remove_image(reference, unused_only=True)
            kept = engine.image(reference) is not None
        gone = engine.remove_image(reference, unused_only=True) and engine.image(reference) is None
    except OrchestratorError as exc:
        engine.remove_image(reference)
        return _failing("image cleanup", exc.message, "see the engine's log")
    if taken or not kept:
        return Check(
            "image cleanup",
            "fail",
            "an image a container uses was removed: superseded images would be taken from "
            "under a running build -> report the engine and version",
        )
    if not gone:
        return Check("image cleanup", "warn", f"{reference} could not be removed; remove it")
    how = "untag, then remove by id, never forced" if engine.kind().podman else "forced removal"
    return Check("image cleanup", "ok", f"kept while in use, removed after ({how})")


def image_lock(engine: Engine) -> Check:
    """Two creates of one lock name: the second must be refused, its holder found."""
    locks = engine.locks
    name = lock_name(f"{PROBE_REPOSITORY}:{engine.session}")
    labels = {"org.orchestrator.managed": "1", "org.orchestrator.kind": LOCK_KIND}
    try:
        first = locks.create_lock(name, labels)
        try:
            second = locks.create_lock(name, labels) if first else None
            holder = locks.lock_holder(name)
        finally:
            if first:
                locks.remove_lock(first)
    except OrchestratorError as exc:
        return _failing("image lock", exc.message, "the engine must create containers by name")
    if first is None or second is not None or holder is None or holder.id != first:
        return Check(
            "image lock",
            "fail",
            "a second container of a taken name was not refused: concurrent builds could "
            "build one image twice -> run one build at a time on this engine",
        )
    status = "HTTP 500 (Podman), told apart by looking up the name"
    said = status if engine.kind().podman else "409 Conflict"
    return Check("image lock", "ok", f"a taken name is refused ({said}): builds wait")


def container_checks(engine: Engine, image: str) -> list[Check]:
    """init, our seccomp profile, a read-only volume, the pids and memory limits, a
    network, GPUs."""
    kind = engine.kind()
    code, output = engine.probe(image, ["true"])
    checks = [
        Check("init", "ok", "containers start with an init process")
        if code == 0
        else _failing("init", output, kind.start_hint(output) or _init_fix(kind))
    ]
    code, output = engine.probe(image, ["true"], privileges=Privileges(seccomp=PERF_PROFILE))
    by = "by content" if kind.seccomp_inline else "by file path (Podman reads seccomp= as a path)"
    checks.append(
        Check("seccomp profile", "ok", f"our profile is taken {by}")
        if code == 0
        else _failing(
            "seccomp profile",
            output,
            kind.start_hint(output) or "perf then has no grant: BOLT uses instrumentation",
        )
    )
    checks += _volume_and_limits(engine, image, kind)
    checks.append(_network(engine, image, kind))
    # What the GPU flavors' containers would get (flavors.<cuda|rocm>.gpu); none is no fault.
    return [*checks, Check("GPUs", "info", engine_gpus(engine, image))]


def _init_fix(kind: EngineKind) -> str:
    if kind.podman:
        return "apt-get install catatonit (Podman's init)"
    return "the engine's docker-init (tini) is missing: reinstall the engine"


def _volume_and_limits(engine: Engine, image: str, kind: EngineKind) -> list[Check]:
    chosen = cgroups.layouts(kind.cgroup_version)
    lines: list[str] = []
    try:
        with engine.volume("doctor") as volume:
            spec = ContainerSpec(
                image,
                read_only_volumes={volume: RO_PATH},
                limits=Limits(pids=PROBE_PIDS, memory=PROBE_MEMORY),
                purpose="probe",
            )
            with engine.container(spec) as box:
                refused = f"test -d {RO_PATH} && ! touch {RO_PATH}/x 2>/dev/null"
                guarded = box.exec(["sh", "-c", refused], on_output=lines.append)
                lines.clear()
                box.exec(cgroups.read_command(chosen), on_output=lines.append)
    except OrchestratorError as exc:
        fix = kind.start_hint(exc.message) or "see the engine's log"
        return [_failing("read-only volumes", exc.message, fix)]
    volumes = (
        Check("read-only volumes", "ok", "sources are mounted read-only")
        if guarded == 0
        else Check(
            "read-only volumes",
            "fail",
            "a read-only volume was writable: a build script could change the sources "
            "later variants compile -> report the engine and version",
        )
    )
    return [volumes, _limits(cgroups.parse(lines, chosen), kind)]


def _network(engine: Engine, image: str, kind: EngineKind) -> Check:
    """A container with a network, as fetch-crates starts one for crates not yet cached."""
    try:
        with engine.container(ContainerSpec(image, network=True, purpose="probe")):
            pass
    except OrchestratorError as exc:
        fix = kind.start_hint(exc.message) or "see the engine's log"
        # slirp4netns's reason comes first; its warnings follow ("\\n" as Podman sends it)
        first_line = re.split(r"\\n|\n", exc.message.strip())[0]
        detail = f"{first_line[-160:]} -> {fix}"
        return Check(
            "container network",
            "warn",
            f"{detail}; until then only crates already in the cache can be used",
        )
    return Check("container network", "ok", "containers reach a network (fetch-crates)")


def _limits(reading: cgroups.Reading, kind: EngineKind) -> Check:
    version = f"cgroup v{kind.cgroup_version}" if kind.cgroup_version else "cgroup"
    missing = cgroups.unapplied(reading, {"pids": PROBE_PIDS, "memory": PROBE_MEMORY})
    if not missing:
        return Check("pids and memory limits", "ok", f"in force ({version}); hits are detected")
    if kind.rootless and kind.cgroup_version == 1:
        fix = "a rootless engine cannot set limits under cgroup v1: boot with cgroup v2"
    elif kind.rootless:
        fix = (
            "rootless on cgroup v2: delegate the pids and memory controllers to the user "
            "(systemd: Delegate=pids memory in user@.service.d)"
        )
    else:
        fix = f"the engine's {version} lacks the controller: enable it"
    return Check(
        "pids and memory limits",
        "warn",
        f"{' and '.join(missing)} limit not in force in the container; a fork bomb or a "
        f"runaway build is then stopped only by the host -> {fix}",
    )

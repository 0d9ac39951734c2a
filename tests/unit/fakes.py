"""In-memory stand-ins for `Engine` and `Container` (the `EngineApi`/`ContainerApi` Protocols).

Nothing here talks to Docker. Images are a dict of reference -> ImageInfo; containers
record what is exec'd in them and answer through a responder; archives are kept per path.
"""

from __future__ import annotations

import io
import json
import os
import socket
import tarfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, cast

from orchestrator.errors import OrchestratorError
from orchestrator.host.packing import single_file_tar
from orchestrator.runtime.engine import (
    LABEL_HOST,
    LABEL_KIND,
    LABEL_MANAGED,
    LABEL_PID,
    LABEL_SESSION,
    ContainerApi,
    ContainerSpec,
    Engine,
    EngineApi,
    ImageInfo,
    Limits,
    OutputSink,
    Privileges,
    is_leftover,
)
from orchestrator.runtime.gpu import GpuPassthrough
from orchestrator.runtime.imagelock import LOCK_KIND, LockHolder, image_lock
from orchestrator.runtime.quirks import EngineKind, binds, detect

Responder = Callable[[Sequence[str]], tuple[int, list[str]]]
Prober = Callable[[str, Sequence[str], Privileges], tuple[int, str]]
BuildHook = Callable[["BuildCall", OutputSink], None]


def succeed(_argv: Sequence[str]) -> tuple[int, list[str]]:
    return 0, []


def labels_of(
    kind: str, *, session: str, pid: int | None = None, host: str | None = None
) -> dict[str, str]:
    """The labels Engine puts on what it makes; pid and host default to this process's."""
    return {
        LABEL_MANAGED: "1",
        LABEL_KIND: kind,
        LABEL_SESSION: session,
        LABEL_PID: str(os.getpid() if pid is None else pid),
        LABEL_HOST: socket.gethostname() if host is None else host,
    }


@dataclass
class Managed:
    """A managed container or volume as `managed_containers()` lists it."""

    name: str
    labels: dict[str, str]
    removed: bool = False

    def remove(self, *, force: bool = False) -> None:
        del force
        self.removed = True


@dataclass
class Exec:
    argv: tuple[str, ...]
    environment: dict[str, str]
    workdir: str | None
    user: str | None


@dataclass
class FakeContainer:
    id: str
    spec: ContainerSpec
    responder: Responder = succeed
    # Content of the single file `get_archive` returns for a path never put; None: raise.
    missing: Callable[[str], bytes] | None = None
    execs: list[Exec] = field(default_factory=list)
    archives: dict[str, bytes] = field(default_factory=dict)  # path -> last tar put there
    puts: list[tuple[str, bytes]] = field(default_factory=list)
    removed: bool = False
    # What `limit_hits` answers after a failed command (a test's fork bomb: ("pids",)).
    hits: tuple[str, ...] = ()
    # The SDK's `volumes` the real Engine would send for it (SELinux labels included).
    binds: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def limits(self) -> Limits:
        return self.spec.limits

    def limit_hits(self) -> tuple[str, ...]:
        hits, self.hits = self.hits, ()
        return hits

    def exec(
        self,
        argv: Sequence[str],
        *,
        on_output: OutputSink,
        environment: Mapping[str, str] | None = None,
        workdir: str | None = None,
        user: str | None = None,
    ) -> int:
        self.execs.append(Exec(tuple(argv), dict(environment or {}), workdir, user))
        code, lines = self.responder(argv)
        for line in lines:
            on_output(line)
        return code

    @property
    def argvs(self) -> list[tuple[str, ...]]:
        return [e.argv for e in self.execs]

    def put_archive(self, path: str, data: bytes | BinaryIO) -> None:
        if not isinstance(data, bytes):  # a tar streamed from a file
            data = data.read()
        self.puts.append((path, data))
        self.archives[path] = data

    def get_archive(self, path: str) -> Iterator[bytes]:
        data = self.archives.get(path)
        if data is None:
            if self.missing is None:
                raise OrchestratorError(f"{path} does not exist in the build container")
            data = single_file_tar(path, self.missing(path))
        third = max(len(data) // 3, 1)  # in chunks, as the Engine streams it
        return iter([data[i : i + third] for i in range(0, len(data), third)])


@dataclass
class BuildCall:
    context: Path
    reference: str
    buildargs: dict[str, str]
    labels: dict[str, str]
    files: tuple[str, ...]  # the build context's files, relative, at build time


@dataclass
class ImportCall:
    tarball: Path
    reference: str
    labels: dict[str, str]


@dataclass
class FakeLocks:
    """The lock containers of one engine; share one between fakes to model runs on it."""

    held: dict[str, LockHolder] = field(default_factory=dict)  # name -> holder
    created: list[str] = field(default_factory=list)  # every name ever created
    removed: list[str] = field(default_factory=list)  # ids removed
    _serial: int = 0

    def create_lock(self, name: str, labels: Mapping[str, str]) -> str | None:
        if name in self.held:
            return None
        self._serial += 1
        self.held[name] = LockHolder(f"lock-{self._serial}", dict(labels))
        self.created.append(name)
        return self.held[name].id

    def lock_holder(self, name: str) -> LockHolder | None:
        return self.held.get(name)

    def remove_lock(self, container_id: str) -> None:
        for name, holder in list(self.held.items()):
            if holder.id == container_id:
                del self.held[name]
                self.removed.append(container_id)


class FakeEngine:
    def __init__(
        self,
        *,
        responder: Responder = succeed,
        prober: Prober | None = None,
        missing: Callable[[str], bytes] | None = None,
        build_hook: BuildHook | None = None,
        info: Mapping[str, Any] | None = None,
        version: Mapping[str, Any] | None = None,
        session: str = "fake-session",
        archives: Mapping[str, bytes] | None = None,
        locks: FakeLocks | None = None,
    ) -> None:
        self.session = session
        self.locks = locks if locks is not None else FakeLocks()
        self.in_use: set[str] = set()  # image ids or references a container uses
        self.lock_sleeps: list[float] = []  # waits while another run held a lock
        # What a wait does; a test sets it to let "the other run" finish meanwhile.
        self.lock_sleep: Callable[[float], None] = self._no_one_releases
        self.name = "fake"
        # Tars every container started from now on serves at these paths (get_archive).
        self.archives: dict[str, bytes] = dict(archives or {})
        self.responder = responder
        self.prober = prober
        self.missing = missing
        self.build_hook = build_hook
        self._info = dict(info or {"NCPU": 4, "Driver": "overlay2"})
        self.limits_not_applied: tuple[str, ...] = ()  # as a rootless engine would say
        self._version = dict(version or {"Version": "27.0.0", "ApiVersion": "1.46"})
        self.images: dict[str, ImageInfo] = {}
        self.builds: list[BuildCall] = []
        self.imports: list[ImportCall] = []
        self.removed_images: list[str] = []
        self.saved_images: list[str] = []
        self.loaded_archives: list[Path] = []
        self.load_ids: dict[str, str] = {}  # config digest -> the id a load gives it
        self.containers: list[FakeContainer] = []  # every one started, removed or not
        self.managed: list[Managed] = []  # managed containers, as managed_containers() lists
        self.volumes: list[Managed] = []
        self.probes: list[tuple[str, tuple[str, ...], Privileges, str | None]] = []
        self.gpu_kinds: set[str] = set()  # the GPU passthrough kinds it accepts (runtime/gpu.py)
        self.gpu_probes: list[GpuPassthrough] = []
        self._serial = 0

    def _next_id(self) -> str:
        self._serial += 1
        return f"{self._serial:064x}"

    # -- facts ---------------------------------------------------------------------
    def version(self) -> dict[str, Any]:
        return dict(self._version)

    def info(self) -> dict[str, Any]:
        return dict(self._info)

    def kind(self) -> EngineKind:
        return detect(self._version, self._info)

    def unapplied_limits(self) -> tuple[str, ...]:
        return self.limits_not_applied

    # -- images --------------------------------------------------------------------
    def add_image(
        self, reference: str, labels: Mapping[str, str] | None = None, *, size: int = 0
    ) -> ImageInfo:
        info = ImageInfo(
            id=f"sha256:{self._next_id()}",
            tags=(reference,),
            labels={**labels_of("image", session=self.session), **(labels or {})},
            size=size,
        )
        self.images[reference] = info
        return info

    def image(self, reference: str) -> ImageInfo | None:
        if reference in self.images:
            return self.images[reference]
        return next((i for i in self.images.values() if i.id == reference), None)

    def managed_images(self) -> list[ImageInfo]:
        return [i for i in self.images.values() if i.labels.get(LABEL_MANAGED) == "1"]

    def import_rootfs(self, tarball: Path, reference: str, labels: Mapping[str, str]) -> str:
        self.imports.append(ImportCall(tarball, reference, dict(labels)))
        return self.add_image(reference, labels).id

    def build_image(
        self,
        context: Path,
        reference: str,
        *,
        buildargs: Mapping[str, str],
        labels: Mapping[str, str],
        on_output: OutputSink,
    ) -> str:
        files = tuple(
            sorted(p.relative_to(context).as_posix() for p in context.rglob("*") if p.is_file())
        )
        call = BuildCall(context, reference, dict(buildargs), dict(labels), files)
        self.builds.append(call)
        if self.build_hook is not None:
            self.build_hook(call, on_output)  # may raise ImageBuildError
        return self.add_image(reference, labels).id

    def save_image(self, reference: str, into: Path) -> None:
        """A `docker save` archive of the image as Docker 20 writes one: its config under
        its id, and manifest.json naming it with its tag."""
        info = self.images[reference]
        digest = info.id.removeprefix("sha256:")
        manifest = [{"Config": f"{digest}.json", "RepoTags": [reference], "Layers": []}]
        members = {
            f"{digest}.json": json.dumps({"config": {"Labels": info.labels}}).encode(),
            "manifest.json": json.dumps(manifest).encode(),
        }
        with tarfile.open(into, "w") as tar:
            for name, data in members.items():
                member = tarfile.TarInfo(name)
                member.size = len(data)
                tar.addfile(member, io.BytesIO(data))
        self.saved_images.append(reference)

    def load_image(self, archive: Path) -> None:
        """What `docker load` does with such an archive: each image its manifest names,
        under each of its tags (the id: `load_ids` where a test sets one for the config)."""
        self.loaded_archives.append(archive)
        with tarfile.open(archive) as tar:
            manifest = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
            for entry in manifest:
                config = json.load(tar.extractfile(entry["Config"]))  # type: ignore[arg-type]
                digest = entry["Config"].rsplit("/", 1)[-1].removesuffix(".json")
                image_id = self.load_ids.get(digest, f"sha256:{digest}")
                labels = dict(config["config"]["Labels"])
                for tag in entry["RepoTags"]:
                    self.images[tag] = ImageInfo(id=image_id, tags=(tag,), labels=labels, size=0)

    def remove_image(self, reference: str, *, unused_only: bool = False) -> bool:
        removed = False
        for key, info in list(self.images.items()):
            if reference in (key, info.id):
                if unused_only and {key, info.id} & self.in_use:
                    continue
                del self.images[key]
                self.removed_images.append(reference)
                removed = True
        return removed

    # -- image locks ---------------------------------------------------------------
    def create_lock(self, name: str, labels: Mapping[str, str]) -> str | None:
        return self.locks.create_lock(name, labels)

    def lock_holder(self, name: str) -> LockHolder | None:
        return self.locks.lock_holder(name)

    def remove_lock(self, container_id: str) -> None:
        self.locks.remove_lock(container_id)

    def _no_one_releases(self, seconds: float) -> None:
        if len(self.lock_sleeps) > 100:
            raise AssertionError("waited 100 times for an image lock nobody releases")

    @contextmanager
    def image_lock(self, reference: str, *, on_wait: OutputSink) -> Iterator[bool]:
        labels = labels_of(LOCK_KIND, session=self.session)

        def sleep(seconds: float) -> None:
            self.lock_sleeps.append(seconds)
            self.lock_sleep(seconds)

        with image_lock(self, reference, labels, on_wait=on_wait, sleep=sleep) as waited:
            yield waited

    # -- containers and volumes ----------------------------------------------------
    @contextmanager
    def created(self, image: str) -> Iterator[str]:
        """A container made from `image`, never started: the image is in use meanwhile."""
        self.in_use.add(image)
        try:
            yield self._next_id()
        finally:
            self.in_use.discard(image)

    @contextmanager
    def container(self, spec: ContainerSpec, *, keep: bool = False) -> Iterator[FakeContainer]:
        box = FakeContainer(
            self._next_id(),
            spec,
            self.responder,
            self.missing,
            archives=dict(self.archives),
            binds=binds(self.kind(), spec.volumes, spec.read_only_volumes),
        )
        record = Managed(box.id, labels_of("container", session=self.session))
        self.containers.append(box)
        self.managed.append(record)
        try:
            yield box
        finally:
            if not keep:
                box.removed = record.removed = True

    @contextmanager
    def volume(self, purpose: str, *, keep: bool = False) -> Iterator[str]:
        record = Managed(
            f"orchestrator-{purpose}-{self.session}", labels_of("volume", session=self.session)
        )
        self.volumes.append(record)
        try:
            yield record.name
        finally:
            if not keep:
                record.removed = True

    def remove_managed_volumes(self) -> int:
        live = [v for v in self.volumes if not v.removed]
        for volume in live:
            volume.remove(force=True)
        return len(live)

    def _remove_stale(self, records: Sequence[Managed]) -> int:
        host = socket.gethostname()
        stale = [
            r
            for r in records
            if not r.removed and is_leftover(r.labels, session=self.session, host=host)
        ]
        for record in stale:
            record.remove(force=True)
        return len(stale)

    def remove_stale_volumes(self) -> int:
        return self._remove_stale(self.volumes)

    def managed_containers(self) -> list[Managed]:
        return [c for c in self.managed if not c.removed]

    def remove_stale_containers(self) -> int:
        return self._remove_stale(self.managed)

    def remove_leftovers(self) -> tuple[int, int]:
        return self.remove_stale_containers(), self.remove_stale_volumes()

    def probe(
        self,
        image: str,
        argv: Sequence[str],
        *,
        privileges: Privileges = Privileges(),
        user: str | None = None,
        gpu: GpuPassthrough | None = None,
    ) -> tuple[int, str]:
        if gpu is not None:
            # The engine starts a GPU container only through the ways in it has.
            self.gpu_probes.append(gpu)
            if gpu.kind in self.gpu_kinds:
                return 0, ""
            return 125, f"unresolvable CDI devices {gpu.describe()}"
        self.probes.append((image, tuple(argv), privileges, user))
        if self.prober is None:
            return 0, ""
        return self.prober(image, argv, privileges)


def as_engine(fake: FakeEngine) -> Engine:
    """The fake where a caller is still annotated with `Engine` rather than `EngineApi`."""
    return cast("Engine", fake)


if TYPE_CHECKING:  # mypy checks that the fakes satisfy the Protocols

    def _satisfies_protocols(
        engine: FakeEngine, box: FakeContainer
    ) -> tuple[EngineApi, ContainerApi]:
        return engine, box

"""One running container, as steps see it: exec with streamed output, files in and out.
The Engine (engine.py) starts and removes it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import BinaryIO

import docker
import docker.errors
from docker.models.containers import Container as SdkContainer

from orchestrator.errors import ContainerError
from orchestrator.runtime import cgroups
from orchestrator.runtime.api import Limits, OutputSink

NO_LIMITS = Limits()
PIDS_SLACK = 8  # this close to limits.pids after a failure counts as having reached it


class Container:
    """A running container that steps `exec` into."""

    def __init__(
        self,
        client: docker.DockerClient,
        sdk: SdkContainer,
        limits: Limits = NO_LIMITS,
        *,
        cgroup_version: int = 0,
    ) -> None:
        self._client = client
        self._sdk = sdk
        self._limits = limits
        self._cgroups = cgroups.layouts(cgroup_version)  # 0: unknown, both are read
        self._hits: dict[str, int] = {}  # counts seen by the last `limit_hits`

    @property
    def limits(self) -> Limits:
        return self._limits

    @property
    def id(self) -> str:
        return str(self._sdk.id)

    def exec(
        self,
        argv: Sequence[str],
        *,
        on_output: OutputSink,
        environment: Mapping[str, str] | None = None,
        workdir: str | None = None,
        user: str | None = None,
    ) -> int:
        """Run `argv`, stream its combined output line by line, return its exit code."""
        api = self._client.api
        exec_id = api.exec_create(
            self.id,
            list(argv),
            stdout=True,
            stderr=True,
            environment=dict(environment or {}),
            workdir=workdir,
            user=user or "",
        )["Id"]
        pending = b""
        for chunk in api.exec_start(exec_id, stream=True):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                on_output(line.decode("utf-8", "replace"))
        if pending:
            on_output(pending.decode("utf-8", "replace"))
        code = api.exec_inspect(exec_id).get("ExitCode")
        return int(code) if code is not None else -1

    def put_archive(self, path: str, data: bytes | BinaryIO) -> None:
        try:
            done = self._sdk.put_archive(path, data)
        except docker.errors.APIError as exc:
            done = False
            reason = str(exc.explanation or exc)
        else:
            reason = "the Engine refused"
        if not done:
            raise ContainerError(f"could not copy files into the container at {path}: {reason}")

    def get_archive(self, path: str) -> Iterator[bytes]:
        try:
            chunks, _stat = self._sdk.get_archive(path)
        except docker.errors.NotFound:
            raise ContainerError(f"{path} does not exist in the build container") from None
        except docker.errors.APIError as exc:  # a path the Engine refuses (400), a gone box
            reason = str(exc.explanation or exc)
            raise ContainerError(
                f"could not copy {path!r} out of the container: {reason}"
            ) from None
        return iter(chunks)

    def cgroup(self) -> cgroups.Reading:
        """Its cgroup's limits in force and hit counters, read from inside; empty when no
        process can be started (the pids limit is reached)."""
        output: list[str] = []
        try:
            self.exec(cgroups.read_command(self._cgroups), on_output=output.append)
        except docker.errors.APIError:
            output = []
        return cgroups.parse(output, self._cgroups)

    def unapplied_limits(self) -> tuple[str, ...] | None:
        """The limits it was given that are not in force in its cgroup; None where the
        cgroup could not be read at all (no file of either version answered)."""
        reading = self.cgroup()
        if not (reading.limits or reading.current or reading.hits):
            return None
        asked = {"pids": self._limits.pids, "memory": self._limits.memory}
        return cgroups.unapplied(reading, asked)

    def limit_hits(self) -> tuple[str, ...]:
        """The limits ("pids", "memory") this container ran into since the last call, from
        its cgroup's counters. Asked after a command failed, so that a fork bomb or a
        runaway build script is named as such rather than as a plain failed step."""
        if not (self._limits.pids or self._limits.memory):
            return ()
        reading = self.cgroup()
        counts = dict(reading.hits)
        full = reading.refused or self._pids_full(reading)
        if "pids" not in counts and self._limits.pids and full:
            counts["pids"] = self._hits.get("pids", 0) + 1
        hits = tuple(k for k, n in sorted(counts.items()) if n > self._hits.get(k, 0))
        self._hits.update(counts)
        return hits

    def _pids_full(self, reading: cgroups.Reading) -> bool:
        """Whether the container sits at its pids limit, where no counter of refused forks
        could be read: from its cgroup's pids.current, else from the Engine's stats."""
        current = reading.current.get("pids")
        if current is None:
            try:
                stats = self._sdk.stats(stream=False)
            except docker.errors.APIError:
                return False
            pids = (stats.get("pids_stats") if isinstance(stats, dict) else None) or {}
            current = pids.get("current")
        if not isinstance(current, int):
            return False
        # Read after the failed command: its own processes (cargo, rustc, a shell) have
        # exited by then, so what a fork bomb left running sits a few pids under the
        # limit. The limit is the one asked for: Podman's stats do not report it.
        return self._limits.pids - current <= PIDS_SLACK

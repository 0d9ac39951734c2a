"""One running container, as steps see it: exec with streamed output, files in and out.
The Engine (engine.py) starts and removes it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import docker
import docker.errors
from docker.models.containers import Container as SdkContainer

from orchestrator.errors import ContainerError
from orchestrator.runtime.api import OutputSink


class Container:
    """A running container that steps `exec` into."""

    def __init__(self, client: docker.DockerClient, sdk: SdkContainer) -> None:
        self._client = client
        self._sdk = sdk

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

    def put_archive(self, path: str, data: bytes) -> None:
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
        return iter(chunks)

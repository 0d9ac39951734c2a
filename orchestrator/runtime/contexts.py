"""Docker contexts: which Engine a name stands for (`docker context inspect`, read through
python-on-whales). The Engine API itself is spoken by runtime/engine.py with the SDK.

A context names an ordinary Docker Engine: a local socket, `tcp://` (with the context's
TLS files when it has them) or `ssh://`. Nothing is installed on the engines.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from python_on_whales import DockerClient as WhalesClient
from python_on_whales.exceptions import DockerException

from orchestrator.errors import DockerUnavailableError

# The engine the Docker CLI and DOCKER_HOST select: what a run without --engines uses.
CURRENT = ""


@dataclass(frozen=True)
class EngineEndpoint:
    """Where one Engine answers, as its Docker context says."""

    context: str  # the context's name; CURRENT for DOCKER_HOST / the default socket
    host: str  # unix:///var/run/docker.sock, tcp://10.0.0.5:2376, ssh://builder@gpu-box
    tls_dir: Path | None = None  # ca.pem, cert.pem, key.pem of a tcp:// context
    skip_tls_verify: bool = False

    @property
    def label(self) -> str:
        return self.context or "current"


def resolve_contexts(names: Sequence[str]) -> list[EngineEndpoint]:
    """Each named context's endpoint, in order, or DockerUnavailableError naming the ones
    the Docker CLI does not know. Duplicates are refused: one engine, one entry."""
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise DockerUnavailableError(
            f"engines: {', '.join(duplicates)} listed more than once",
            hint="Name each Docker context once; [engines] jobs sets how many targets one "
            "engine builds at a time.",
        )
    whales = WhalesClient()
    endpoints = []
    for name in names:
        try:
            context = whales.context.inspect(name)
        except DockerException as error:
            known = _known_contexts(whales)
            raise DockerUnavailableError(
                f"engines: the Docker context {name!r} cannot be read: {_first_line(error.stderr)}",
                hint=f"Known contexts: {', '.join(known) or 'none'}. Create one with "
                "`docker context create NAME --docker host=ssh://user@host` (or tcp://, "
                "unix://).",
            ) from None
        docker_endpoint = (context.endpoints or {}).get("docker")
        if docker_endpoint is None or not docker_endpoint.host:
            raise DockerUnavailableError(f"engines: the Docker context {name!r} has no endpoint")
        tls_path = context.storage.tls_path if context.storage else None
        tls = Path(tls_path or "/nonexistent") / "docker"
        endpoints.append(
            EngineEndpoint(
                context=name,
                host=docker_endpoint.host,
                tls_dir=tls if (tls / "ca.pem").is_file() else None,
                skip_tls_verify=bool(docker_endpoint.skip_tls_verify),
            )
        )
    return endpoints


def _known_contexts(whales: WhalesClient) -> list[str]:
    try:
        return [context.name for context in whales.context.list()]
    except DockerException:
        return []


def _first_line(text: str | None) -> str:
    lines = [line for line in (text or "").splitlines() if line.strip()]
    return lines[0].strip() if lines else "the Docker CLI failed"

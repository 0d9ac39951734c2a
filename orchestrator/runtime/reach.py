"""How an Engine is reached: an SDK client for a Docker context, else for DOCKER_HOST (else
the default socket), and, when none answers, why, in words a person can act on."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

import docker
import docker.constants
import docker.errors
import docker.tls
import requests

from orchestrator.errors import DockerUnavailableError
from orchestrator.runtime.contexts import EngineEndpoint

if TYPE_CHECKING:  # the shapes requests-stubs gives Session.merge_environment_settings
    from requests.sessions import _Cert, _Settings, _TextMapping, _Verify


def open_client(endpoint: EngineEndpoint | None, *, timeout_s: int) -> docker.DockerClient:
    """A client whose Engine answered a ping within `timeout_s`, or DockerUnavailableError
    naming where it looked."""
    where = _endpoint(os.environ) if endpoint is None else _context_text(endpoint)
    try:
        if endpoint is None:
            client = docker.from_env(timeout=timeout_s)  # asks for the API version already
        else:
            client = _ContextClient(
                base_url=endpoint.host,
                tls=_tls(endpoint),
                timeout=timeout_s,
                use_ssh_client=endpoint.host.startswith("ssh://"),
            )
        client.ping()
    except (docker.errors.DockerException, requests.RequestException) as exc:
        raise DockerUnavailableError(
            f"cannot reach the Docker Engine at {where}: {_reason(exc, timeout_s)}"
        ) from exc
    return client


def _context_text(endpoint: EngineEndpoint) -> str:
    return f"{endpoint.host} (Docker context {endpoint.context})"


def _tls(endpoint: EngineEndpoint) -> docker.tls.TLSConfig | bool:
    """The context's TLS files for a tcp:// engine; False where it has none."""
    directory = endpoint.tls_dir
    if directory is None:
        return False
    return docker.tls.TLSConfig(
        client_cert=(str(directory / "cert.pem"), str(directory / "key.pem")),
        ca_cert=None if endpoint.skip_tls_verify else str(directory / "ca.pem"),
        verify=not endpoint.skip_tls_verify,
    )


class _ContextApi(docker.APIClient):
    """requests lets REQUESTS_CA_BUNDLE or CURL_CA_BUNDLE replace a session's own CA on every
    request (docker/docker-py#2433), so an engine whose certificate the context's CA signed
    fails to verify wherever a company bundle is set, though the Docker CLI reaches it. Each
    request gets the session's CA; the environment still gives proxies."""

    def merge_environment_settings(
        self,
        url: str | bytes | None,
        proxies: _TextMapping | None,
        stream: bool | None,
        verify: _Verify | None,
        cert: _Cert | None,
    ) -> _Settings:
        verify = self.verify if verify is None else verify
        return super().merge_environment_settings(url, proxies, stream, verify, cert)


class _ContextClient(docker.DockerClient):
    def __init__(  # DockerClient's own only makes an APIClient
        self, *, base_url: str, tls: docker.tls.TLSConfig | bool, timeout: int, use_ssh_client: bool
    ) -> None:
        self.api = _ContextApi(
            base_url=base_url, tls=tls, timeout=timeout, use_ssh_client=use_ssh_client
        )


def _endpoint(env: Mapping[str, str]) -> str:
    """Where `docker.from_env` looks for the Engine, as a person would write it."""
    host = env.get("DOCKER_HOST")
    if host:
        return f"{host} (DOCKER_HOST)"
    default = docker.constants.DEFAULT_UNIX_SOCKET.replace("http+unix://", "unix://")
    return f"{default} (the default socket; DOCKER_HOST is not set)"


def _causes(error: BaseException) -> Iterator[BaseException]:
    """`error` and everything it wraps: causes, contexts and exceptions in its args
    (urllib3 keeps the socket's own error there)."""
    seen: set[int] = set()
    pending = [error]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        wrapped = [current.__cause__, current.__context__, *current.args]
        pending += [e for e in wrapped if isinstance(e, BaseException)]


def _reason(error: BaseException, timeout_s: int) -> str:
    """Why the Engine could not be reached, in words; the SDK's text when none fits."""
    for cause in _causes(error):
        if isinstance(cause, FileNotFoundError):
            return "no such socket"
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused (nothing listens there)"
        if isinstance(cause, PermissionError):
            return "permission denied (is this user in the docker group?)"
        if isinstance(cause, TimeoutError | requests.Timeout):
            return f"no answer within {timeout_s} s"
    return str(error)

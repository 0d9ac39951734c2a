"""A container with CDI devices on Podman, made through Podman's own API.

Podman 4's Docker-compatible API takes a device for a host path and refuses a CDI name
(`stat nvidia.com/gpu=all: no such file or directory`); its own API resolves the name
from the specs it reads. Only such a container is made here, from the same container
options the SDK would send (`Engine.container`), then started and handled through the
compatible API as every other one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import docker
import docker.errors
import requests
from docker.models.containers import Container as SdkContainer

CREATE_PATH = "/v4.0.0/libpod/containers/create"


def _security(options: Mapping[str, Any]) -> dict[str, Any]:
    """security_opt as Podman's own fields: no-new-privileges, a seccomp profile's path,
    SELinux label options."""
    spec: dict[str, Any] = {}
    for option in options.get("security_opt") or []:
        key, _, value = str(option).partition("=")
        if option == "no-new-privileges":
            spec["no_new_privileges"] = True
        elif key == "seccomp":
            spec["seccomp_profile_path"] = value
        elif key == "label":
            spec.setdefault("selinux_opts", []).append(value)
        else:
            raise ValueError(f"internal: no libpod field for security option {option!r}")
    return spec


def _limits(options: Mapping[str, Any]) -> dict[str, Any]:
    limits: dict[str, Any] = {}
    if options.get("pids_limit"):
        limits["pids"] = {"limit": options["pids_limit"]}
    if options.get("mem_limit"):
        limits["memory"] = {"limit": options["mem_limit"], "swap": options["memswap_limit"]}
    if options.get("cpuset_cpus"):
        limits["cpu"] = {"cpus": options["cpuset_cpus"]}
    return limits


def spec_generator(image: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """Podman's SpecGenerator for the SDK's container options (those Engine.container
    sends; any other is refused, not dropped)."""
    known = {
        "command", "name", "detach", "init", "network_mode", "environment", "labels",
        "privileged", "cap_add", "cap_drop", "security_opt", "pids_limit", "mem_limit",
        "memswap_limit", "user", "volumes", "cpuset_cpus", "devices", "group_add",
    }  # fmt: skip
    unknown = set(options) - known
    if unknown:
        raise ValueError(f"internal: no libpod field for {', '.join(sorted(unknown))}")
    volumes = options.get("volumes") or {}
    spec: dict[str, Any] = {
        "image": image,
        "name": options["name"],
        "command": list(options["command"]),
        "init": bool(options.get("init")),
        "env": dict(options.get("environment") or {}),
        "labels": dict(options.get("labels") or {}),
        "user": options.get("user") or "",
        "netns": {"nsmode": "bridge" if options.get("network_mode") == "bridge" else "none"},
        "privileged": bool(options.get("privileged")),
        "cap_add": list(options.get("cap_add") or []),
        "cap_drop": list(options.get("cap_drop") or []),
        # Our volumes are named ones (binds' keys); their mode is "rw,z"-like options.
        "volumes": [
            {"Name": name, "Dest": mount["bind"], "Options": mount["mode"].split(",")}
            for name, mount in volumes.items()
        ],
        # CDI names (nvidia.com/gpu=all): resolved by Podman from its spec folders
        "devices": [{"path": str(device)} for device in options.get("devices") or []],
        "groups": list(options.get("group_add") or []),
        "resource_limits": _limits(options),
        **_security(options),
    }
    return spec


def run_with_cdi(
    client: docker.DockerClient, image: str, options: Mapping[str, Any]
) -> SdkContainer:
    """Create the container through Podman's own API, start it through the compatible
    one; docker.errors.APIError with Podman's words where either refuses."""
    api = client.api
    body = json.dumps(spec_generator(image, options))
    answer = api.post(
        f"{api.base_url}{CREATE_PATH}", data=body, headers={"Content-Type": "application/json"}
    )
    try:
        answer.raise_for_status()
    except requests.HTTPError as exc:
        try:
            said = str(answer.json().get("message", answer.text))
        except ValueError:
            said = answer.text
        raise docker.errors.APIError(said, response=answer, explanation=said) from exc
    container = client.containers.get(str(answer.json()["Id"]))
    container.start()
    return container

"""Docker Engine and Podman behind one Engine: the kind told from /version, and each of
Podman's differences handled at the engine boundary (runtime/quirks.py, imageops.py,
lockstore.py, engine.py), on stub SDK clients that answer as each engine did here."""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import docker
import docker.errors
import pytest
import requests

from orchestrator.errors import ContainerError
from orchestrator.runtime.api import ContainerSpec, Privileges, engine_facts
from orchestrator.runtime.engine import Engine
from orchestrator.runtime.imageops import import_tar, remove_image
from orchestrator.runtime.lockstore import EngineLocks
from orchestrator.runtime.quirks import DOCKER, PODMAN, EngineKind, binds, detect
from orchestrator.runtime.seccomp import PERF_PROFILE, profile_json
from tests.unit.execute_rig import make_options, make_rig
from tests.unit.fakes import FakeEngine

# The answers of this machine's engines (trimmed to what is read): Docker Engine 20.10
# as root, and Podman 4.3.1's `podman system service` as root.
DOCKER_VERSION = {
    "Version": "20.10.24+dfsg1",
    "ApiVersion": "1.41",
    "Components": [
        {"Name": "Engine", "Version": "20.10.24+dfsg1"},
        {"Name": "containerd", "Version": "1.6.20~ds1"},
        {"Name": "runc", "Version": "1.1.5+ds1"},
        {"Name": "docker-init", "Version": "0.19.0"},
    ],
}
DOCKER_INFO = {
    "Architecture": "x86_64",
    "CgroupVersion": "1",
    "SecurityOptions": ["name=seccomp,profile=default"],
    "Driver": "fuse-overlayfs",
}
PODMAN_VERSION = {
    "Version": "4.3.1",
    "ApiVersion": "1.41",
    "Components": [
        {"Name": "Podman Engine", "Version": "4.3.1", "Details": {"APIVersion": "4.3.1"}},
        {"Name": "Conmon", "Version": "conmon version 2.1.6, commit: unknown"},
        {"Name": "OCI Runtime (runc)", "Version": "runc version 1.1.5+ds1"},
    ],
}
PODMAN_INFO = {
    "Architecture": "amd64",
    "CgroupVersion": "1",
    "SecurityOptions": ["name=seccomp,profile=default"],
    "Driver": "overlay",
}
# A Fedora workstation's rootless Podman, as its SecurityOptions and cgroup say it.
FEDORA_INFO = {
    "Architecture": "amd64",
    "CgroupVersion": "2",
    "SecurityOptions": [
        "name=seccomp,profile=/usr/share/containers/seccomp.json",
        "name=rootless",
        "name=selinux",
    ],
}
DOCKER_KIND = detect(DOCKER_VERSION, DOCKER_INFO)
PODMAN_KIND = detect(PODMAN_VERSION, PODMAN_INFO)


def test_kinds_told_apart_by_the_podman_component() -> None:
    assert EngineKind(DOCKER, "20.10.24+dfsg1", "1.41", 1, False, False) == DOCKER_KIND
    assert EngineKind(PODMAN, "4.3.1", "1.41", 1, False, False) == PODMAN_KIND
    assert PODMAN_KIND.title == "Podman 4.3.1 (rootful)"
    fedora = detect(PODMAN_VERSION, FEDORA_INFO)
    assert (fedora.cgroup_version, fedora.selinux, fedora.rootless) == (2, True, True)
    assert detect({}, {}).cgroup_version == 0  # an engine that does not say


def test_podman_rootless_and_selinux_from_its_own_answers() -> None:
    """Podman 4.3's compat /info names neither in SecurityOptions: a rootless service
    here answered `"Rootless": true`; its /libpod/info has host.security."""
    rootless = detect(PODMAN_VERSION, {**PODMAN_INFO, "Rootless": True})
    assert rootless.rootless and rootless.title == "Podman 4.3.1 (rootless)"
    libpod = {"host": {"security": {"rootless": False, "selinuxEnabled": True}}}
    assert detect(PODMAN_VERSION, PODMAN_INFO, libpod).selinux
    assert not detect(PODMAN_VERSION, PODMAN_INFO, {"host": "odd"}).selinux


def test_the_engine_asks_podman_for_its_libpod_info_and_docker_not() -> None:
    calls = Calls(PODMAN_VERSION, PODMAN_INFO)
    calls.answers["api.get"] = SimpleNamespace(
        status_code=200, json=lambda: {"host": {"security": {"selinuxEnabled": True}}}
    )
    assert Engine(client(calls)).kind().selinux
    docker_calls = Calls(DOCKER_VERSION, DOCKER_INFO)
    assert not Engine(client(docker_calls)).kind().selinux
    assert "api.get" not in docker_calls.names()


def test_what_differs_on_podman_and_not_on_docker() -> None:
    differs = ("tags_on_import", "seccomp_inline", "force_removes_containers")
    assert [getattr(DOCKER_KIND, name) for name in differs] == [True, True, False]
    assert [getattr(PODMAN_KIND, name) for name in differs] == [False, False, True]
    assert not PODMAN_KIND.stats_pids_limit and DOCKER_KIND.stats_pids_limit


def test_podman_names_are_reported_without_their_registry() -> None:
    for tag in (
        "docker.io/orchestrator/base:trixie-0",  # imported or built
        "localhost/orchestrator/base:trixie-0",  # podman load
        "orchestrator/base:trixie-0",
    ):
        assert PODMAN_KIND.plain_tag(tag) == "orchestrator/base:trixie-0"
    # Docker never prefixes: a localhost/ there is a registry's name, kept.
    assert DOCKER_KIND.plain_tag("localhost/x:1") == "localhost/x:1"


def test_architecture_by_the_kernels_name_on_both() -> None:
    for info in (DOCKER_INFO, PODMAN_INFO):
        fake = FakeEngine(info=info, version=PODMAN_VERSION)
        assert engine_facts(fake).architecture == "x86_64"


def test_selinux_labels_shared_volumes_z_and_a_private_bind_mount_capital_z() -> None:
    volumes, read_only = {"orchestrator-out-s": "/build/out", "/srv/x": "/x"}, {"src": "/s"}
    plain = binds(DOCKER_KIND, volumes, read_only)
    assert {k: v["mode"] for k, v in plain.items()} == {
        "orchestrator-out-s": "rw",
        "/srv/x": "rw",
        "src": "ro",
    }
    labelled = binds(detect(PODMAN_VERSION, FEDORA_INFO), volumes, read_only)
    assert {k: v["mode"] for k, v in labelled.items()} == {
        "orchestrator-out-s": "rw,z",
        "/srv/x": "rw,Z",
        "src": "ro,z",
    }
    assert labelled["src"]["bind"] == "/s"


def test_selinux_through_the_fake_engine_every_build_mount_is_shared(
    project: Path, tmp_path: Path
) -> None:
    """A build's containers on an SELinux engine: the source loader, the build box."""
    selinux = FakeEngine(info=FEDORA_INFO, version=PODMAN_VERSION)
    with ExitStack() as stack:
        rig = make_rig(make_options(project), stack, tmp_path, engine=selinux)
        rig.pipeline.load_sources(rig.log)
        _ = rig.pipeline.box
    modes = {
        (box.spec.purpose, mount["bind"]): mount["mode"]
        for box in selinux.containers
        for mount in box.binds.values()
    }
    assert modes == {
        ("sources", "/build/src"): "rw,z",
        ("build", "/build/out"): "rw,z",
        ("build", "/build/src"): "ro,z",
    }
    plain = FakeEngine()
    with ExitStack() as stack:
        _ = make_rig(make_options(project), stack, tmp_path, engine=plain).pipeline.box
    assert {m["mode"] for box in plain.containers for m in box.binds.values()} == {"rw", "ro"}


class Calls:
    """A stub of the SDK's client: the calls made, answered as the engine would."""

    def __init__(self, version: dict[str, Any], info: dict[str, Any]) -> None:
        self.made: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        # Podman's /libpod/info: absent unless a test gives one
        self.answers: dict[str, Any] = {"api.get": SimpleNamespace(status_code=404)}
        self._version, self._info = version, info
        self.api = _Part(self, "api")
        self.images = _Part(self, "images")
        self.containers = _Part(self, "containers")

    def version(self) -> dict[str, Any]:
        return self._version

    def info(self) -> dict[str, Any]:
        return self._info

    def names(self) -> list[str]:
        return [name for name, _args, _kwargs in self.made]


class _Call:
    def __init__(self, calls: Calls, name: str) -> None:
        self.calls, self.name = calls, name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.made.append((self.name, args, kwargs))
        answer = self.calls.answers.get(self.name)
        if isinstance(answer, Exception):
            raise answer
        return answer(*args, **kwargs) if callable(answer) else answer


class _Part:
    def __init__(self, calls: Calls, part: str) -> None:
        self.calls, self.part = calls, part

    def __getattr__(self, name: str) -> Any:
        return _Call(self.calls, f"{self.part}.{name}")


def client(calls: Calls) -> docker.DockerClient:
    return cast("docker.DockerClient", calls)


def api_error(status: int, text: str) -> docker.errors.APIError:
    response = requests.Response()
    response.status_code = status
    return docker.errors.APIError(text, response=response, explanation=text)


IMPORTED = json.dumps({"status": "sha256:" + "ab" * 32, "progress": "", "id": "x"})


def test_docker_import_names_the_image_itself() -> None:
    calls = Calls(DOCKER_VERSION, DOCKER_INFO)
    calls.answers["api.import_image_from_file"] = IMPORTED
    import_tar(client(calls), DOCKER_KIND, "/r.tar", "orchestrator/base:t-1", ["LABEL a=b"])
    (name, _args, kwargs), *rest = calls.made
    assert name == "api.import_image_from_file" and rest == []
    assert (kwargs["repository"], kwargs["tag"]) == ("orchestrator/base", "t-1")


def test_podman_import_goes_unnamed_then_is_tagged_by_id() -> None:
    calls = Calls(PODMAN_VERSION, PODMAN_INFO)
    calls.answers["api.import_image_from_data"] = IMPORTED
    import_tar(client(calls), PODMAN_KIND, b"tar", "orchestrator/lock:1", [])
    (_, _, imported), (name, args, _) = calls.made
    assert "repository" not in imported and "tag" not in imported  # no stray :latest
    assert (name, args) == ("api.tag", ("sha256:" + "ab" * 32, "orchestrator/lock", "1"))


def test_podman_removal_never_forces_and_a_used_image_stays() -> None:
    calls = Calls(PODMAN_VERSION, PODMAN_INFO)
    image = SimpleNamespace(id="sha256:1", tags=["docker.io/o/b:1", "docker.io/o/b:2"])
    calls.answers["images.get"] = image
    calls.answers["api.containers"] = [{"ImageID": "sha256:9"}, {"ImageID": "sha256:1"}]
    assert not remove_image(client(calls), PODMAN_KIND, "o/b:1", unused_only=True)
    assert "images.remove" not in calls.names()  # in use: the ancestor filter is not asked
    calls.answers["api.containers"] = []
    assert remove_image(client(calls), PODMAN_KIND, "o/b:1", unused_only=True)
    removals = [(a, k) for n, a, k in calls.made if n == "images.remove"]
    assert removals == [(("docker.io/o/b:2",), {}), (("sha256:1",), {})]  # no force
    # A container made meanwhile: Podman refuses (409) instead of removing it too.
    calls.answers["images.remove"] = api_error(409, "image is in use by a container")
    assert not remove_image(client(calls), PODMAN_KIND, "o/b:1", unused_only=True)


def test_docker_removal_as_before() -> None:
    calls = Calls(DOCKER_VERSION, DOCKER_INFO)
    calls.answers["containers.list"] = []
    assert remove_image(client(calls), DOCKER_KIND, "o/b:1", unused_only=True)
    (_, _, listed), (name, args, kwargs) = calls.made
    assert listed == {"all": True, "filters": {"ancestor": "o/b:1"}}
    assert (name, args, kwargs) == ("images.remove", ("o/b:1",), {"force": True})


def locks_on(calls: Calls, kind: EngineKind) -> EngineLocks:
    calls.answers["images.get"] = SimpleNamespace(id="sha256:l", tags=[], labels={}, attrs={})
    return EngineLocks(client(calls), lambda: kind, lambda _kind: {})


def test_podman_taken_lock_name_is_a_wait_not_a_failure() -> None:
    calls = Calls(PODMAN_VERSION, PODMAN_INFO)
    locks = locks_on(calls, PODMAN_KIND)
    calls.answers["containers.create"] = api_error(500, 'the container name "x" is in use')
    calls.answers["containers.get"] = SimpleNamespace(id="held", labels={})
    assert locks.create_lock("orchestrator-lock-x", {}) is None
    # The name is free when looked at (its holder just went): tried again, then an error.
    calls.answers["containers.get"] = docker.errors.NotFound("gone")
    with pytest.raises(ContainerError, match="cannot create the image lock"):
        locks.create_lock("orchestrator-lock-x", {})
    assert calls.names().count("containers.create") == 1 + 3


def test_docker_lock_conflict_is_409_and_other_errors_fail_at_once() -> None:
    calls = Calls(DOCKER_VERSION, DOCKER_INFO)
    locks = locks_on(calls, DOCKER_KIND)
    calls.answers["containers.create"] = api_error(409, "Conflict")
    assert locks.create_lock("n", {}) is None
    calls.answers["containers.create"] = api_error(500, "no space left on device")
    calls.answers["containers.get"] = docker.errors.NotFound("none")
    with pytest.raises(ContainerError, match="no space left"):
        locks.create_lock("n", {})
    assert calls.names().count("containers.create") == 2


def run_container(calls: Calls, spec: ContainerSpec) -> dict[str, Any]:
    """Engine.container on the stub; the options it sent, and the profile file's text
    while the container was being made."""
    seen: dict[str, Any] = {}

    def run(_image: str, **options: Any) -> Any:
        seen.update(options)
        for option in options["security_opt"]:
            path = option.removeprefix("seccomp=")
            if path.startswith("/"):
                seen["file"] = Path(path)
                seen["text"] = Path(path).read_text()
        return SimpleNamespace(id="c1", remove=lambda force: None)

    calls.answers["containers.run"] = run
    with Engine(client(calls)).container(spec):
        pass
    return seen


def test_podman_gets_our_seccomp_profile_as_a_file_docker_as_its_json() -> None:
    spec = ContainerSpec("img", privileges=Privileges(seccomp=PERF_PROFILE))
    podman = run_container(Calls(PODMAN_VERSION, PODMAN_INFO), spec)
    assert podman["text"] == profile_json(PERF_PROFILE)
    assert not podman["file"].exists()  # gone once the container was made
    assert podman["init"] is True and "no-new-privileges" in podman["security_opt"]
    docker_sent = run_container(Calls(DOCKER_VERSION, DOCKER_INFO), spec)
    assert f"seccomp={profile_json(PERF_PROFILE)}" in docker_sent["security_opt"]
    assert "file" not in docker_sent


def test_podman_without_catatonit_says_what_to_install() -> None:
    calls = Calls(PODMAN_VERSION, PODMAN_INFO)
    calls.answers["containers.run"] = api_error(
        500, "container-init binary not found on the host: stat /usr/libexec/podman/catatonit"
    )
    with (
        pytest.raises(ContainerError) as caught,
        Engine(client(calls)).container(ContainerSpec("img")),
    ):
        pass
    assert "on Podman 4.3.1 (rootful)" in caught.value.message
    assert "apt-get install catatonit" in caught.value.hint


# Both as rootless Podman 4.3.1's service answered here, /dev/net/tun being root's alone
# (mode 0600): the first container with a network, then every later one (a stale netns).
SLIRP_TUN = (
    '/usr/bin/slirp4netns failed: "open(\\"/dev/net/tun\\"): Permission denied\\n'
    'WARNING: Support for seccomp is experimental\\nchild failed(1)\\n"'
)
STALE_NETNS = "failed to mount runtime directory for rootless netns: no such file or directory"


@pytest.mark.parametrize("reason", [SLIRP_TUN, STALE_NETNS])
def test_rootless_podman_without_a_usable_tun_device_says_how_to_allow_it(reason: str) -> None:
    calls = Calls(PODMAN_VERSION, {**PODMAN_INFO, "Rootless": True})
    calls.answers["containers.run"] = api_error(500, reason)
    with (
        pytest.raises(ContainerError) as caught,
        Engine(client(calls)).container(ContainerSpec("img", network=True, purpose="fetch")),
    ):
        pass
    assert "fetch container from img on Podman 4.3.1 (rootless)" in caught.value.message
    assert "chmod 0666 /dev/net/tun" in caught.value.hint
    assert "netns/rootless-netns-*" in caught.value.hint
    # A rootful Podman's network needs no slirp4netns; Docker never says this.
    assert "/dev/net/tun" not in PODMAN_KIND.start_hint(reason)
    assert DOCKER_KIND.start_hint(reason) == ""

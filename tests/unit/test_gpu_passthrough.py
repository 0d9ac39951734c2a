"""GPU passthrough: what each way in sends to the engine (Docker and Podman), which one a
flavor's build container gets under each `flavors.<name>.gpu` mode, and that a GPU adds
devices, never capabilities."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from docker.types import HostConfig

from orchestrator.config.resolve.options import Options, resolve
from orchestrator.errors import ConfigError, GpuUnavailableError
from orchestrator.flavors import FlavorView
from orchestrator.flavors.cuda import CudaFlavor
from orchestrator.runtime.api import ContainerSpec, Limits
from orchestrator.runtime.doctor import run_checks
from orchestrator.runtime.engine import Engine
from orchestrator.runtime.gpu import AMD, CDI, NVIDIA
from orchestrator.runtime.gpu_probe import CDI_NVIDIA, KFD_AMD, RUNTIME_NVIDIA, gpu_use
from orchestrator.runtime.libpod import spec_generator
from tests.unit.fakes import FakeEngine
from tests.unit.test_doctor import by_name, use_engine, use_path
from tests.unit.test_engine_kinds import (
    DOCKER_INFO,
    DOCKER_VERSION,
    PODMAN_INFO,
    PODMAN_KIND,
    PODMAN_VERSION,
    Calls,
    api_error,
    client,
    run_container,
)

from .conftest import write_config

NVIDIA_INFO = {
    **DOCKER_INFO,
    "Runtimes": {"runc": {}, "nvidia": {"path": "nvidia-container-runtime"}},
}


def _sent(version: dict[str, Any], info: dict[str, Any], spec: ContainerSpec) -> dict[str, Any]:
    """The HostConfig JSON the SDK makes of what Engine.container passed it."""
    options = run_container(Calls(version, info), spec)
    keys = ("device_requests", "devices", "group_add", "cap_add", "cap_drop", "privileged")
    return dict(HostConfig(version="1.43", **{k: options[k] for k in keys if k in options}))


def test_nvidia_runtime_is_what_docker_run_gpus_all_sends() -> None:
    sent = _sent(DOCKER_VERSION, NVIDIA_INFO, ContainerSpec("img", gpu=RUNTIME_NVIDIA))
    assert sent["DeviceRequests"] == [
        {"Driver": "", "Count": -1, "DeviceIDs": [], "Capabilities": [["gpu"]], "Options": {}}
    ]
    assert sent["CapDrop"] == ["ALL"] and "CapAdd" not in sent and not sent.get("Privileged")


def test_cdi_goes_to_docker_as_a_cdi_device_request_and_to_podman_as_a_device() -> None:
    docker_sent = _sent(DOCKER_VERSION, DOCKER_INFO, ContainerSpec("img", gpu=CDI_NVIDIA))
    (request,) = docker_sent["DeviceRequests"]
    assert request["Driver"] == "cdi" and request["DeviceIDs"] == ["nvidia.com/gpu=all"]
    assert "Devices" not in docker_sent
    # On Podman a device name, which its own API resolves (the next test).
    assert CDI_NVIDIA.engine_options(PODMAN_KIND) == {"devices": ["nvidia.com/gpu=all"]}


def test_amd_gets_kfd_dri_and_the_render_and_video_groups_only() -> None:
    for version, info in ((DOCKER_VERSION, DOCKER_INFO), (PODMAN_VERSION, PODMAN_INFO)):
        sent = _sent(version, info, ContainerSpec("img", gpu=KFD_AMD))
        assert [(d["PathOnHost"], d["CgroupPermissions"]) for d in sent["Devices"]] == [
            ("/dev/kfd", "rwm"),
            ("/dev/dri", "rwm"),
        ]
        assert sent["GroupAdd"] == ["video", "render"]
        assert sent["CapDrop"] == ["ALL"] and "CapAdd" not in sent


def test_a_container_without_a_gpu_asks_for_none() -> None:
    sent = _sent(DOCKER_VERSION, NVIDIA_INFO, ContainerSpec("img"))
    assert not {"DeviceRequests", "Devices", "GroupAdd"} & set(sent)


def _engine(*kinds: str, info: dict[str, Any] | None = None) -> FakeEngine:
    engine = FakeEngine(info=info)
    engine.gpu_kinds = set(kinds)
    return engine


def test_auto_takes_cdi_first_and_records_what_it_tried() -> None:
    engine = _engine(CDI, NVIDIA, info=NVIDIA_INFO)
    use = gpu_use(engine, "img", "cuda", "auto")
    assert use.passthrough == CDI_NVIDIA and engine.gpu_probes == [CDI_NVIDIA]


def test_auto_falls_back_to_the_nvidia_runtime_where_info_lists_it() -> None:
    engine = _engine(NVIDIA, info=NVIDIA_INFO)
    use = gpu_use(engine, "img", "cuda", "auto")
    assert use.passthrough == RUNTIME_NVIDIA
    assert engine.gpu_probes == [CDI_NVIDIA, RUNTIME_NVIDIA]
    assert "refused" in use.tried[0].describe()


def test_the_nvidia_runtime_is_not_tried_where_info_does_not_list_it() -> None:
    engine = _engine(NVIDIA)  # accepts it, but /info says no nvidia runtime
    use = gpu_use(engine, "img", "cuda", "auto")
    assert use.passthrough is None and engine.gpu_probes == [CDI_NVIDIA]
    assert use.why.startswith("the engine can give no nvidia GPU")


def test_rocm_gets_kfd_where_the_engine_has_it() -> None:
    assert gpu_use(_engine(AMD), "img", "rocm", "auto").passthrough == KFD_AMD
    assert gpu_use(_engine(CDI), "img", "rocm", "auto").passthrough is None


def test_require_without_a_gpu_fails_with_its_own_exit_code() -> None:
    with pytest.raises(GpuUnavailableError) as caught:
        gpu_use(_engine(), "img", "cuda", "require")
    assert caught.value.exit_code == 33
    assert "nvidia.com/gpu=all" in caught.value.message and "nvidia-ctk" in caught.value.hint
    assert gpu_use(_engine(CDI), "img", "cuda", "require").passthrough == CDI_NVIDIA


def test_off_and_cpu_flavors_ask_the_engine_nothing() -> None:
    engine = _engine(CDI, NVIDIA, AMD, info=NVIDIA_INFO)
    off = gpu_use(engine, "img", "cuda", "off")
    cpu = gpu_use(engine, "img", "cpu", "require")
    assert off.passthrough is None and cpu.passthrough is None
    assert off.why == 'flavors.cuda.gpu = "off"' and engine.gpu_probes == []


BASE = """\
[package]
crate = "crate"
[validate]
command = ["check"]
"""


def _options(project: Path, extra: str) -> Options:
    return resolve(write_config(project, BASE + extra), env={})


def test_gpu_mode_is_declared_per_flavor_and_checked(project: Path) -> None:
    options = _options(project, '[flavors.cuda]\ngpu = "require"\n')
    assert options.settings_for("cuda").gpu == "require"
    assert options.settings_for("rocm").gpu == "auto"
    CudaFlavor().validate(FlavorView.from_options(options))
    with pytest.raises(ConfigError) as caught:
        CudaFlavor().validate(
            FlavorView.from_options(_options(project, '[flavors.cuda]\ngpu = "yes"\n'))
        )
    assert "flavors.cuda.gpu = 'yes'" in caught.value.message


def test_validate_select_per_flavor_and_a_bad_pattern_refused(project: Path) -> None:
    options = _options(project, '[flavors.cuda.validate]\nselect = "^token "\n')
    assert options.validate_select == ""
    assert options.for_flavor("cuda").validate_select == "^token "
    with pytest.raises(ConfigError) as caught:
        _options(project, '[flavors.cuda.validate]\nselect = "(unclosed"\n')
    assert (
        "validate.select" in caught.value.message and "regular expression" in caught.value.message
    )


def test_doctor_lists_what_each_engine_would_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _engine(CDI, AMD, info=NVIDIA_INFO)
    fake.add_image("orchestrator/base:trixie-" + "0" * 16)
    use_engine(monkeypatch, fake)
    use_path(monkeypatch, "mmdebstrap")
    gpus = by_name(run_checks(None))["GPUs"]
    assert gpus.status == "info"
    assert gpus.detail == (
        "nvidia runtime listed in /info; nvidia: would pass CDI devices nvidia.com/gpu=all; "
        "amd: would pass devices /dev/kfd, /dev/dri; groups video, render"
    )
    none = _engine(info=DOCKER_INFO)
    none.add_image("orchestrator/base:trixie-" + "0" * 16)
    use_engine(monkeypatch, none)
    detail = by_name(run_checks(None))["GPUs"].detail
    assert detail.startswith("nvidia runtime not listed in /info; nvidia: none (CDI devices")
    assert "amd: none (devices /dev/kfd, /dev/dri; groups video, render: refused" in detail


def test_a_container_the_engine_made_but_could_not_start_is_removed() -> None:
    calls = Calls(DOCKER_VERSION, DOCKER_INFO)
    refusal = 'could not select device driver "cdi" with capabilities: []'
    calls.answers["containers.run"] = api_error(500, refusal)
    code, said = Engine(client(calls)).probe("img", ["true"], gpu=CDI_NVIDIA)
    assert code == -1 and refusal in said
    (run,) = [kwargs for name, _args, kwargs in calls.made if name == "containers.run"]
    removed = [args for name, args, _kwargs in calls.made if name == "api.remove_container"]
    assert removed == [(run["name"],)] and run["name"].startswith("orchestrator-")


class _Created:
    """Podman's answer to its own create call."""

    status_code = 201

    def raise_for_status(self) -> None:
        return None

    def json(self) -> dict[str, str]:
        return {"Id": "c1"}


def test_cdi_on_podman_goes_through_its_own_api_with_the_same_rights() -> None:
    calls = Calls(PODMAN_VERSION, PODMAN_INFO)
    calls.answers["api.post"] = _Created()
    started: list[str] = []
    calls.answers["containers.get"] = lambda ident: SimpleNamespace(
        id=ident, start=lambda: started.append(ident), remove=lambda force: None
    )
    # The first container given limits is asked what its cgroup holds (the engine record).
    calls.answers["api.exec_create"] = {"Id": "e1"}
    calls.answers["api.exec_start"] = lambda *_args, **_kwargs: iter([b""])
    calls.answers["api.exec_inspect"] = {"ExitCode": 0}
    spec = ContainerSpec(
        "img", gpu=CDI_NVIDIA, limits=Limits(pids=64, memory=1 << 30), volumes={"v": "/out"}
    )
    with Engine(client(calls)).container(spec):
        pass
    assert "containers.run" not in calls.names() and started == ["c1"]
    [((url,), post)] = [(args, kw) for name, args, kw in calls.made if name == "api.post"]
    assert url.endswith("/v4.0.0/libpod/containers/create")
    body = json.loads(post["data"])
    assert body["devices"] == [{"path": "nvidia.com/gpu=all"}]
    assert body["cap_drop"] == ["ALL"] and body["cap_add"] == [] and not body["privileged"]
    assert body["no_new_privileges"] is True and body["netns"] == {"nsmode": "none"}
    assert body["resource_limits"] == {
        "pids": {"limit": 64},
        "memory": {"limit": 1 << 30, "swap": 1 << 30},
    }
    assert body["volumes"] == [{"Name": "v", "Dest": "/out", "Options": ["rw"]}]
    assert body["labels"]["org.orchestrator.purpose"] == "build" and body["init"] is True


def test_an_option_podman_s_own_api_is_not_given_is_refused_not_dropped() -> None:
    with pytest.raises(ValueError, match="ulimits"):
        spec_generator("img", {"name": "n", "command": ["true"], "ulimits": []})
    with pytest.raises(ValueError, match="apparmor"):
        spec_generator("img", {"name": "n", "command": ["true"], "security_opt": ["apparmor=x"]})

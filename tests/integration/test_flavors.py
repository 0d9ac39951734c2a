"""Every flavor of tinyllm, built for real: aarch64 cross (run under qemu), cuda, rocm.

The aarch64 artifact comes from the session's cpu+aarch64 release (conftest), which the
reproduction tests rebuild.

GPU flavors build without PGO/BOLT here (the cpu tests cover those paths); what they
add is device code, checked by the build and again here with the vendors' own tools.
"""

from __future__ import annotations

import json
import shutil
import struct
import uuid
from pathlib import Path
from typing import Any

import docker
import pytest

from orchestrator.flavors.gpu import offload_bundle_targets
from tests.integration.conftest import (
    AARCH64_ARTIFACT,
    REPO,
    CrossRelease,
    Release,
    managed_containers,
    orchestrator,
)
from tests.integration.test_optimize import assert_no_relocations_only_bolt_reads

pytestmark = pytest.mark.integration

RELEASE = "tinyllm-0.1.0"
VALIDATE = ["generate", "--seed", "42", "--tokens", "96", "--layers", "3", "--dim", "96"]
EM_AARCH64, EM_X86_64 = 183, 62


def _build(flavor: str, artifacts: Path, *extra: str) -> tuple[Path, dict[str, Any]]:
    run = orchestrator(["build", "--flavor", flavor, "--artifacts-dir", str(artifacts), *extra])
    assert run.returncode == 0, run.output
    directory = artifacts / RELEASE / f"{RELEASE}-linux-x86_64-{flavor}"
    return directory, json.loads((directory / "build.json").read_text())


def _elf_machine(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:20]
    assert header[:4] == b"\x7fELF"
    (machine,) = struct.unpack_from("<H", header, 18)
    return header[4], machine  # EI_CLASS (2 = 64-bit), e_machine


def _in_image(
    client: docker.DockerClient, manifest: dict[str, Any], directory: Path, command: list[str]
) -> tuple[int, str]:
    """Run `command` in the build's own image, offline, with the artifact at /artifact."""
    image = manifest["images"]["toolchain"]["reference"]
    container = client.containers.run(
        image,
        command,
        volumes={str(directory): {"bind": "/artifact", "mode": "ro"}},
        network_disabled=True,
        detach=True,
    )
    try:
        code = int(container.wait(timeout=600)["StatusCode"])
        return code, container.logs().decode()
    finally:
        container.remove(force=True)


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("flavors")


def test_aarch64_cross_build_runs_under_qemu(
    cross_release: CrossRelease, release: Release, docker_client: docker.DockerClient
) -> None:
    directory = cross_release.directory / AARCH64_ARTIFACT
    manifest = cross_release.manifest(AARCH64_ARTIFACT)
    binary = directory / "tinyllm"
    assert _elf_machine(binary) == (2, EM_AARCH64)
    assert manifest["artifact"]["target"] == "aarch64-unknown-linux-gnu"
    assert manifest["portability"]["target"] == "aarch64-unknown-linux-gnu"
    assert "ld-linux-aarch64.so.1" in manifest["portability"]["needed"]
    # PGO was trained under qemu, and validation compared outputs under qemu
    assert "pgo" in manifest["artifact"]["optimizations"]
    assert manifest["pgo"]["profile"]["size"] > 0
    assert manifest["validation"]["identical"] is True
    # BOLT by instrumentation works for Arm (its runtime is unpacked into the image)
    bolt = manifest["bolt"]
    assert bolt["mode"] == "instrument"
    assert bolt["applied"] is True, bolt.get("fallback_reason")
    assert "bolt" in manifest["artifact"]["optimizations"]
    assert bolt["coverage"]["profiled_functions"] > 0
    assert_no_relocations_only_bolt_reads(directory, manifest)

    code, output = _in_image(
        docker_client,
        manifest,
        directory,
        ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu", "/artifact/tinyllm", *VALIDATE],
    )
    assert code == 0, output
    # Same IEEE arithmetic in the same order: the Arm build prints what the x86_64 one does.
    code, x86_output = _in_image(
        docker_client, release.manifest, release.directory, ["/artifact/tinyllm", *VALIDATE]
    )
    assert code == 0, x86_output
    assert output == x86_output
    assert managed_containers(docker_client) == []


@pytest.mark.extended
def test_cuda_binary_embeds_every_requested_sm(
    artifacts: Path, docker_client: docker.DockerClient
) -> None:
    directory, manifest = _build("cuda", artifacts, "--no-pgo", "--no-bolt")
    wanted = ["sm_80", "sm_86", "sm_89", "sm_90"]
    device = manifest["device_code"]
    assert device["requested"] == wanted
    assert set(wanted) <= set(device["supported"])
    assert set(device["binary"]["embedded"]) == set(wanted)
    assert "release 12.4" in device["compiler"]
    assert _elf_machine(directory / "tinyllm") == (2, EM_X86_64)
    # The driver is loaded at run time: nothing CUDA in DT_NEEDED, so it starts anywhere.
    assert not [lib for lib in manifest["portability"]["needed"] if "cuda" in lib]

    # Checked again here with NVIDIA's own tool, on the published file.
    code, listing = _in_image(
        docker_client, manifest, directory, ["cuobjdump", "--list-elf", "/artifact/tinyllm"]
    )
    assert code == 0, listing
    for sm in wanted:
        assert f".{sm}.cubin" in listing, listing
    code, output = _in_image(
        docker_client, manifest, directory, ["/artifact/tinyllm", "generate", "--backend", "cuda"]
    )
    # No GPU here. The image's toolkit brings a libcuda, so the driver loads and says so.
    assert code == 2, output
    assert "no CUDA driver" in output or "CUDA_ERROR_NO_DEVICE" in output, output
    code, output = _in_image(docker_client, manifest, directory, ["/artifact/tinyllm", *VALIDATE])
    assert code == 0 and "checksum:" in output  # auto: the CPU path


@pytest.mark.extended
def test_rocm_binary_embeds_every_requested_gfx_target(
    artifacts: Path, docker_client: docker.DockerClient
) -> None:
    directory, manifest = _build("rocm", artifacts, "--no-pgo", "--no-bolt")
    wanted = ["gfx90a", "gfx1030", "gfx1100"]
    device = manifest["device_code"]
    assert device["requested"] == wanted
    assert set(device["binary"]["embedded"]) == set(wanted)
    assert device["compiler"].startswith("HIP version: 5.7")
    assert offload_bundle_targets((directory / "tinyllm").read_bytes()) == set(wanted)
    assert not [lib for lib in manifest["portability"]["needed"] if "amdhip" in lib]
    # AMD's roc-obj-ls reads the same bundle out of the published binary.
    code, listing = _in_image(
        docker_client, manifest, directory, ["roc-obj-ls", "/artifact/tinyllm"]
    )
    assert code == 0, listing
    for target in wanted:
        assert target in listing, listing


@pytest.mark.extended
def test_unsupported_gpu_target_fails_before_building(tmp_path: Path) -> None:
    config = (REPO / "orchestrator.toml").read_text()
    config = config.replace('crate = "examples/tinyllm"', f'crate = "{REPO}/examples/tinyllm"')
    config = config.replace(
        'gpu_targets = ["sm_80", "sm_86", "sm_89", "sm_90"]', 'gpu_targets = ["sm_80", "sm_30"]'
    )
    path = tmp_path / "orchestrator.toml"
    path.write_text(config)
    run = orchestrator(
        ["build", "--flavor", "cuda", "--config", str(path), "--artifacts-dir", str(tmp_path / "a")]
    )
    assert run.returncode == 31, run.output
    assert "cannot compile for sm_30" in run.output
    assert "sm_90" in run.output  # the error lists what is supported
    assert "build-baseline" not in run.output
    assert not (tmp_path / "a" / RELEASE).exists()


@pytest.mark.extended
def test_cuda_kernels_compiled_at_run_time_pass_the_device_check(
    tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    """A program that embeds no device code and compiles its kernel with NVRTC when it runs
    (dlopen by name, as cudarc does): `kernels = "runtime"` checks that instead, and the
    program really compiles its kernel during validation, in the image, without a GPU."""
    fixture = REPO / "tests" / "fixtures" / "runtime-kernels"
    artifacts = tmp_path / "artifacts"
    run = orchestrator(
        [
            "build",
            "--flavor",
            "cuda",
            "--config",
            str(fixture / "orchestrator.toml"),
            "--artifacts-dir",
            str(artifacts),
            "--no-pgo",
            "--no-bolt",
        ]
    )
    assert run.returncode == 0, run.output
    directory = artifacts / "nvrtc-probe-0.2.0" / "nvrtc-probe-0.2.0-linux-x86_64-cuda"
    manifest = json.loads((directory / "build.json").read_text())
    binary = manifest["device_code"]["binary"]
    assert binary["kernels"] == "runtime"
    assert "dlopen name libnvrtc.so.12" in binary["loads"]
    assert any(name.startswith("libnvrtc.so.12") for name in binary["image_runtime_compiler"])
    log = (directory / "logs").glob("*-validate.log")
    text = next(log).read_text()
    # The shipped variant is the release build here (no PGO, no BOLT): its first run's output.
    assert "release-0> entry saxpy: true" in text, text
    assert "> nvrtc 12.4" in text
    # A bare Debian has no NVRTC: there the binary is only loaded, and build.json says why.
    runs = manifest["portability"]["distros"]
    assert [(r["suite"], r["loads"], r["validated"]) for r in runs] == [
        ("bullseye", True, False),
        ("trixie", True, False),
    ]
    assert all("libnvrtc" in r["not_validated"] for r in runs)
    assert managed_containers(docker_client) == []


@pytest.mark.extended
def test_a_crate_that_loads_cuda_at_run_time_gets_a_cuda_artifact(
    tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    """Shaped like an inference engine on cudarc 0.11: cuda-12050 (newer than the image's
    12.4 toolkit) fixed in its own Cargo.toml, a kernel NVRTC compiles when it runs, and
    `--backend auto` that panics without a GPU. The resolved graph says it binds CUDA at
    run time: no toolkit match is asked for, and build.json records what the driver of the
    machine it runs on must serve. Its cuda flavor trains and validates with --backend cpu
    ([flavors.cuda.train] and [flavors.cuda.validate] args_append)."""
    project = tmp_path / "cuda-runtime"
    shutil.copytree(REPO / "tests" / "fixtures" / "cuda-runtime", project)
    with (project / "orchestrator.toml").open("a") as config_file:  # as the other cuda tests
        config_file.write("\n[pgo]\nenabled = false\n\n[bolt]\nenabled = false\n")
    artifacts = tmp_path / "artifacts"
    config = ["--config", str(project / "orchestrator.toml"), "--artifacts-dir", str(artifacts)]
    # A copy outside git: --allow-dirty, and reproduced from --source.
    run = orchestrator(["release", *config, "--bench-runs", "0", "--allow-dirty"])
    assert run.returncode == 0, run.output
    release = artifacts / "tinyinfer-0.1.0"
    directory = release / "tinyinfer-0.1.0-linux-x86_64-cuda"
    manifest = json.loads((directory / "build.json").read_text())
    cuda = manifest["cuda_runtime"]
    assert (cuda["crate"], cuda["binding"]) == ("cudarc 0.11.9", "run time")
    assert cuda["cuda_api"] == "12.5"  # its cuda-12050 feature
    assert cuda["toolkit_check"].startswith("skipped: cudarc 0.11.9 binds CUDA at run time")
    run_log = json.loads((directory / "logs" / "run.json").read_text())
    assert cuda["driver_check"] is None  # this builder's GPU: its logs/run.json
    assert run_log["cuda_driver_check"] == "not checked (no GPU)"
    assert "release 12.4" in manifest["device_code"]["compiler"]  # older than what it names
    # No libnvrtc file name in the binary (cudarc 0.11 formats it): the graph vouches.
    loads = manifest["device_code"]["binary"]["loads"]
    assert loads == ["dlopen by cudarc 0.11.9 (nvrtc feature; file name built at run time)"]
    assert manifest["validation"]["command"][-2:] == ["--backend", "cpu"]
    assert manifest["validation"]["identical"] is True
    code, output = _in_image(
        docker_client, manifest, directory, ["/artifact/tinyinfer", "generate", "--backend", "auto"]
    )
    # Without a GPU, --backend auto panics (the toolkit's libcuda loads, no device answers).
    assert code != 0 and "panicked" in output, output
    assert "no CUDA device" in output or "Unable to dynamically load" in output, output
    code, output = _in_image(
        docker_client, manifest, directory, ["/artifact/tinyinfer", "generate", "--backend", "cpu"]
    )
    assert code == 0 and output.startswith("backend cpu: "), output
    _reproduces_bit_for_bit(release, project, tmp_path / "rebuild")
    assert managed_containers(docker_client) == []


def _reproduces_bit_for_bit(release: Path, source: Path, workdir: Path) -> None:
    argv = ["reproduce", str(release), "--source", str(source), "--workdir", str(workdir)]
    run = orchestrator([*argv, "--reuse-images"])
    assert run.returncode == 0, run.output
    assert "the artifact is bit-identical" in run.output, run.output


BINFMT = Path("/proc/sys/fs/binfmt_misc")


def _binfmt_entries() -> set[str]:
    return {entry.name for entry in BINFMT.iterdir()} if BINFMT.is_dir() else set()


def test_aarch64_tests_that_start_the_crates_binary_pass_under_qemu(
    tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    """An integration test that runs CARGO_BIN_EXE_<name> itself, as ripgrep's do: through
    `qemu-aarch64` because CROSS_RUNNER is set, and with nothing registered on the host."""
    project = tmp_path / "cross-spawn"
    shutil.copytree(REPO / "tests" / "fixtures" / "cross-spawn", project)
    # Sources no earlier run built: the test step runs here rather than coming from the cache.
    with (project / "src" / "main.rs").open("a") as source:
        source.write(f"// {uuid.uuid4().hex}\n")
    before = _binfmt_entries()
    artifacts = tmp_path / "artifacts"
    config = ["--config", str(project / "orchestrator.toml"), "--artifacts-dir", str(artifacts)]
    run = orchestrator(["release", *config, "--bench-runs", "0", "--allow-dirty"])
    assert run.returncode == 0, run.output
    assert _binfmt_entries() == before  # no binfmt_misc handler was added for the run
    release = artifacts / "cross-spawn-0.0.1"
    directory = release / "cross-spawn-0.0.1-linux-aarch64-cpu"
    assert _elf_machine(directory / "cross-spawn") == (2, EM_AARCH64)
    (log,) = (directory / "logs").glob("*-test.log")
    text = log.read_text()
    assert "test spawned_binary_prints_its_arguments ... ok" in text, text
    assert "test result: ok. 1 passed" in text, text
    assert "exec format error" not in text.lower()
    tests = json.loads((directory / "build.json").read_text())["tests"]
    assert tests["ran"] is True
    assert tests["runner"]["cargo_runner"].startswith("qemu-aarch64 ")
    assert tests["runner"]["environment"] == {
        "CROSS_RUNNER": "qemu-user",
        "QEMU_LD_PREFIX": "/usr/aarch64-linux-gnu",
    }
    _reproduces_bit_for_bit(release, project, tmp_path / "rebuild")
    assert _binfmt_entries() == before
    assert managed_containers(docker_client) == []

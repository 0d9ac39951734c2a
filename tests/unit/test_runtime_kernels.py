"""GPU crates that compile kernels when they run (cudarc + NVRTC, hiprtc): with
`kernels = "runtime"` the device-code step checks the binary reaches the runtime compiler
instead of looking for embedded code (cudarc's binding: test_cuda_binding.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.config.resolve.options import FlavorSettings, resolve
from orchestrator.errors import ConfigError
from orchestrator.execute.steps.pipeline import BIN_DIR
from orchestrator.execute.verdict import device
from orchestrator.flavors.gpu import (
    DeviceCodeMissingError,
    cudarc_cuda_version,
    nvcc_release,
    runtime_compiler_use,
)
from orchestrator.host.packing import single_file_tar
from orchestrator.model.layout import PATHS

from .conftest import plan_for
from .execute_rig import Rig, answers, make_options, make_rig
from .fakes import FakeEngine


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


READELF = [
    " 0x0000000000000001 (NEEDED)             Shared library: [libgcc_s.so.1]",
    " 0x0000000000000001 (NEEDED)             Shared library: [libc.so.6]",
]
METADATA_PATH = f"{PATHS.out}/cargo-metadata.json"  # a crate on no cudarc
IMAGE_LIBS = [
    "/usr/lib/x86_64-linux-gnu/libnvrtc.so.12",
    "/usr/lib/x86_64-linux-gnu/libnvrtc.so.12.4.127",
]


def test_a_dlopen_name_or_a_needed_entry_counts_as_reaching_the_compiler() -> None:
    binary = b"\x00junk libcuda.so\x00libnvrtc.so.12\x00libnvrtc.so\x00more"
    assert runtime_compiler_use(["libc.so.6"], binary, "libnvrtc") == [
        "dlopen name libnvrtc.so",
        "dlopen name libnvrtc.so.12",
    ]
    assert runtime_compiler_use(["libhiprtc.so.6"], b"", "libhiprtc") == [
        "DT_NEEDED libhiprtc.so.6"
    ]
    assert runtime_compiler_use(["libc.so.6"], b"libcudart.so.12", "libnvrtc") == []


def test_cudarc_features_and_nvcc_releases_are_read() -> None:
    assert cudarc_cuda_version(["std", "nvrtc", "cuda-12040"]) == "12.4"
    assert cudarc_cuda_version(["cuda-11080"]) == "11.8"
    assert cudarc_cuda_version(["cuda-version-from-build-system"]) is None
    assert nvcc_release("Cuda compilation tools, release 12.4, V12.4.131") == "12.4"


def _runtime_rig(project: Path, stack: ExitStack, tmp_path: Path, binary: bytes) -> Rig:
    options = make_options(project)
    options = replace(
        options,
        flavor_settings={**options.flavor_settings, "cuda": FlavorSettings(kernels="runtime")},
    )
    engine = FakeEngine(
        responder=answers(("readelf", 0, READELF), ("find", 0, IMAGE_LIBS)),
        missing=lambda _path: binary,
        archives={METADATA_PATH: single_file_tar(METADATA_PATH, b'{"packages": []}')},
    )
    rig = make_rig(options, stack, tmp_path, flavor="cuda", engine=engine)
    rig.pipeline.state.shipped = f"{BIN_DIR}/optimized"
    rig.pipeline.state.gpu = {"kind": "cuda"}
    return rig


def test_runtime_kernels_are_checked_by_the_compiler_the_binary_loads(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig = _runtime_rig(project, stack, tmp_path, b"\x7fELF...libnvrtc.so.12\x00")
    device.device_code(rig.pipeline, rig.log)
    assert not any(argv[0] == "cuobjdump" for argv in rig.box.argvs)  # no embedded code sought
    assert rig.pipeline.state.gpu == {
        "kind": "cuda",
        "binary": {
            "kind": "cuda",
            "kernels": "runtime",
            "loads": ["dlopen name libnvrtc.so.12"],
            "image_runtime_compiler": ["libnvrtc.so.12", "libnvrtc.so.12.4.127"],
        },
    }


def test_runtime_kernels_without_the_compiler_are_refused(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig = _runtime_rig(project, stack, tmp_path, b"\x7fELF...libcudart.so.12\x00")
    with pytest.raises(DeviceCodeMissingError, match=r"neither links nor names libnvrtc\.so"):
        device.device_code(rig.pipeline, rig.log)


def test_an_unknown_kernels_mode_is_a_config_error(project: Path) -> None:
    config = project / "orchestrator.toml"
    config.write_text(config.read_text() + '\n[flavors.cuda]\nkernels = "jit"\n')
    options = resolve(config, env={})
    with pytest.raises(ConfigError, match="expected one of embedded, runtime"):
        plan_for(options, "cuda")

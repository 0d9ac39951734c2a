"""Flavor plans, GPU target lists and their checks, naming: pure, no Docker."""

from __future__ import annotations

import struct
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.config.resolve.options import KNOWN_FLAVORS, FlavorSettings, Options, resolve
from orchestrator.config.resolve.toolchains import load_base_spec, load_toolchain
from orchestrator.errors import ConfigError
from orchestrator.flavors import FLAVORS, FlavorView, get_flavor
from orchestrator.flavors.gpu import (
    DeviceCodeMissingError,
    GpuTargetError,
    compiler_release,
    cuda_embedded,
    cuda_supported,
    offload_bundle_targets,
    require_embedded,
    require_supported,
    rocm_supported,
)
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.plan.dockerfiles import render_dockerfile
from orchestrator.plan.images import base_image_plan, toolchain_image_plan
from orchestrator.release.targets.target import targets

from .conftest import plan_for, write_config

# Output seen in the cuda and rocm images: `nvcc --list-gpu-code` (nvcc 12.4.131),
# `cuobjdump --list-elf` on a cuda build of tinyllm, `llc-17 -march=amdgcn -mcpu=help`.
NVCC_LIST = "\n".join(f"sm_{n}" for n in (50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90))
CUOBJDUMP = (
    "ELF file    1: release.1.sm_80.cubin\n"
    "ELF file    2: release.2.sm_86.cubin\n"
    "ELF file    3: release.3.sm_90.cubin\n"
)
LLC_HELP = (
    "Available CPUs for this target:\n\n"
    "  bonaire    - Select the bonaire processor.\n"
    "  gfx1030    - Select the gfx1030 processor.\n"
    "  gfx1100    - Select the gfx1100 processor.\n"
    "  gfx90a     - Select the gfx90a processor.\n"
    "  gfx940     - Select the gfx940 processor.\n"
    "  gfx90a-insts                                 - Additional instructions for GFX90A+.\n"
)


@pytest.fixture
def options(project: Path) -> Options:
    return resolve(project / "orchestrator.toml", env={"SOURCE_DATE_EPOCH": "1700000000"})


def _plan(options: Options, flavor_name: str = "cpu") -> BuildPlan:
    return plan_for(options, flavor_name)


def test_registry_matches_the_config_schema() -> None:
    assert tuple(FLAVORS) == KNOWN_FLAVORS
    for name, flavor in FLAVORS.items():
        assert flavor.name == name


@pytest.mark.parametrize("toolchain", ["rustc-web-1.96", "rustc-1.85"])
def test_every_toolchain_pins_every_flavor(toolchain: str) -> None:
    spec = load_toolchain(toolchain)
    for name in FLAVORS:
        packages = spec.packages_for(name)
        assert spec.packages.items() <= packages.items()
    assert "nvidia-cuda-toolkit" in spec.packages_for("cuda")
    assert "hipcc" in spec.packages_for("rocm")
    std = [p for p in spec.packages_for("aarch64") if p.endswith(":arm64")]
    assert len(std) == 1 and std[0].startswith("libstd-rust")
    # the arm64 std must be exactly the compiler's version
    rustc = next(v for p, v in spec.packages.items() if p.startswith("rustc"))
    assert spec.packages_for("aarch64")[std[0]] == rustc


def test_aarch64_plan_cross_compiles_and_runs_under_qemu(options: Options) -> None:
    plan = _plan(options, "aarch64")
    assert plan.rust_target == "aarch64-unknown-linux-gnu"
    assert plan.target_cpu == "generic"  # build.target_cpu (x86-64-v2) means nothing on Arm
    assert plan.runner[0] == "qemu-aarch64"
    env = plan.build.environment
    assert env["CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER"] == "aarch64-linux-gnu-gcc"
    assert env["CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER"].startswith("qemu-aarch64 -L")
    assert env["CC_aarch64_unknown_linux_gnu"] == "aarch64-linux-gnu-gcc"
    assert "--target" in plan.build.argv and "aarch64-unknown-linux-gnu" in plan.build.argv
    assert plan.final.binary.endswith("/aarch64-unknown-linux-gnu/release/demo")
    assert plan.apt_sources.architectures == ("arm64",)
    assert plan.bolt is not None and plan.bolt.mode == "instrument"  # no perf under qemu
    assert plan.artifact_dir == "demo-1.2.3-linux-aarch64-cpu"
    assert "dpkg --add-architecture arm64" in plan.dockerfile
    assert "'libstd-rust-web-dev:arm64=" in plan.dockerfile


def test_aarch64_refuses_an_explicit_x86_level_and_sampled_bolt(project: Path) -> None:
    flagged = resolve(
        project / "orchestrator.toml",
        env={"SOURCE_DATE_EPOCH": "1"},
        cli={"build.target_cpu": "x86-64-v3"},
    )
    with pytest.raises(ConfigError, match="x86_64 level"):
        _plan(flagged, "aarch64")
    sampled = resolve(
        project / "orchestrator.toml", env={"SOURCE_DATE_EPOCH": "1"}, cli={"bolt.mode": "sample"}
    )
    with pytest.raises(ConfigError, match=r"bolt\.mode sample cannot work for the aarch64"):
        _plan(sampled, "aarch64")
    assert _plan(sampled, "cpu").bolt is not None


def test_a_flavor_answers_from_its_view_of_the_options_alone(project: Path) -> None:
    flagged = resolve(
        project / "orchestrator.toml",
        env={"SOURCE_DATE_EPOCH": "1"},
        cli={"build.target_cpu": "x86-64-v3"},
    )
    view = FlavorView.from_options(flagged)
    assert (view.target_cpu, view.target_cpu_source) == ("x86-64-v3", "flag")
    assert view.settings_for("cuda") == flagged.settings_for("cuda")
    with pytest.raises(ConfigError, match="x86_64 level"):
        FLAVORS["aarch64"].validate(view)
    # a view made by hand, no Options at all: the same answers from the same few fields
    levels = ("x86-64-v2", "x86-64-v3")
    from_file = FlavorView("znver4", "file", {"cpu": FlavorSettings(levels=levels)})
    assert FLAVORS["cpu"].levels(from_file) == levels
    assert FLAVORS["cpu"].artifact_suffix(from_file) == "-znver4"
    assert FLAVORS["cpu"].rustflags(from_file) == ["-Ctarget-cpu=znver4"]
    FLAVORS["aarch64"].validate(replace(from_file, target_cpu="x86-64-v3"))  # the file's: kept
    assert FLAVORS["aarch64"].target_cpu(replace(from_file, target_cpu="x86-64-v3")) == "generic"


def test_gpu_plans_export_targets_and_check_device_code(options: Options) -> None:
    cuda = _plan(options, "cuda")
    assert cuda.build.environment["CUDAARCHS"] == "80;86;89;90"
    assert cuda.device_code is not None
    assert cuda.device_code.targets == ("sm_80", "sm_86", "sm_89", "sm_90")
    assert cuda.apt_sources.components == ("contrib", "non-free")
    rocm = _plan(options, "rocm")
    assert rocm.build.environment["AMDGPU_TARGETS"] == "gfx90a;gfx1030;gfx1100"
    assert rocm.bolt is not None and rocm.bolt.mode == "auto"
    steps = [str(s.name) for s in rocm.steps]
    assert steps.index("toolchain-check") < steps.index("gpu-targets") < steps.index("fetch-crates")
    assert steps.index("bolt-optimize") < steps.index("device-code") < steps.index("validate")
    assert "gpu-targets" not in [s.name for s in _plan(options, "cpu").steps]
    assert cuda.artifact_dir == "demo-1.2.3-linux-x86_64-cuda"
    # one image per flavor: tags and hashes differ
    assert len({_plan(options, n).image.reference for n in FLAVORS}) == len(FLAVORS)


def test_configured_gpu_targets(project: Path) -> None:
    write_config(
        project,
        '[package]\ncrate = "crate"\n[train]\nworkloads = [["x"]]\n'
        '[flavors.cuda]\ngpu_targets = ["sm_90"]\n[flavors.rocm]\ngpu_targets = ["gfx1100"]\n',
    )
    options = resolve(project / "orchestrator.toml", env={"SOURCE_DATE_EPOCH": "1"})
    assert _plan(options, "cuda").build.environment["CUDAARCHS"] == "90"
    assert _plan(options, "rocm").build.environment["ORCHESTRATOR_GPU_TARGETS"] == "gfx1100"


@pytest.mark.parametrize(
    ("flavor", "targets_", "message"),
    [
        ("cuda", ("sm80",), "'sm80' is not a cuda target name"),
        ("cuda", ("gfx90a",), "not a cuda target name"),
        ("rocm", ("sm_90",), "not a rocm target name"),
        ("rocm", ("gfx90a", "gfx90a"), "lists gfx90a twice"),
        ("cuda", (), None),  # empty means: the default list
    ],
)
def test_gpu_target_names_are_validated(
    options: Options, flavor: str, targets_: tuple[str, ...], message: str | None
) -> None:
    configured = replace(options, flavor_settings={flavor: FlavorSettings(gpu_targets=targets_)})
    if message is None:
        assert _plan(configured, flavor).device_code is not None
        return
    with pytest.raises(ConfigError, match=message):
        _plan(configured, flavor)


def test_gpu_targets_on_a_cpu_flavor_are_refused(options: Options) -> None:
    configured = replace(options, flavor_settings={"cpu": FlavorSettings(gpu_targets=("sm_90",))})
    with pytest.raises(ConfigError, match="cpu builds no GPU code"):
        _plan(configured, "cpu")


def test_supported_targets_from_the_compilers() -> None:
    assert {"sm_80", "sm_90"} <= cuda_supported(NVCC_LIST)
    assert "sm_100" not in cuda_supported(NVCC_LIST)
    assert rocm_supported(LLC_HELP) == {"gfx1030", "gfx1100", "gfx90a", "gfx940"}
    require_supported("cuda", "nvcc", ["sm_80", "sm_90"], cuda_supported(NVCC_LIST))
    with pytest.raises(GpuTargetError, match="cannot compile for sm_100; it supports: sm_50"):
        require_supported("cuda", "nvcc", ["sm_80", "sm_100"], cuda_supported(NVCC_LIST))
    assert GpuTargetError("x").exit_code == 31


def test_embedded_cuda_targets() -> None:
    assert cuda_embedded(CUOBJDUMP) == {"sm_80", "sm_86", "sm_90"}
    with pytest.raises(DeviceCodeMissingError, match="no device code for sm_89"):
        require_embedded("a", ["sm_80", "sm_89"], cuda_embedded(CUOBJDUMP))


def _bundle(ids: list[str]) -> bytes:
    """A clang offload bundle with the layout clang-offload-bundler writes."""
    header = b"__CLANG_OFFLOAD_BUNDLE__" + struct.pack("<Q", len(ids))
    entries = b"".join(struct.pack("<QQQ", 4096, 16, len(i)) + i.encode() for i in ids)
    return header + entries


def test_offload_bundle_targets_inside_a_binary() -> None:
    bundle = _bundle(
        [
            "host-x86_64-unknown-linux--",
            "hipv4-amdgcn-amd-amdhsa--gfx90a",
            "hipv4-amdgcn-amd-amdhsa--gfx1100:xnack-",
        ]
    )
    binary = b"\x7fELF" + b"\0" * 100 + bundle + b"\0" * 64 + b"__CLANG_OFFLOAD_BUNDLE__"
    assert offload_bundle_targets(binary) == {"gfx90a", "gfx1100"}
    assert offload_bundle_targets(b"no bundle here") == set()


def test_release_targets_cover_flavors_and_levels(options: Options) -> None:
    configured = replace(
        options,
        flavor_settings={
            "cpu": FlavorSettings(levels=("x86-64-v2", "x86-64-v3")),
            "aarch64": FlavorSettings(levels=("generic", "neoverse-n1")),
        },
    )
    found = targets(configured, ["cpu", "cuda", "rocm", "aarch64"])
    names = [
        (t.flavor, get_flavor(t.flavor).artifact_suffix(FlavorView.from_options(t.options)))
        for t in found
    ]
    assert names == [
        ("cpu", ""),
        ("cpu", "-v3"),
        ("cuda", ""),
        ("rocm", ""),
        ("aarch64", ""),
        ("aarch64", "-neoverse-n1"),
    ]


def test_offload_bundle_made_by_hipcc() -> None:
    # `hipcc --genco --offload-arch=gfx90a --offload-arch=gfx1030 --offload-arch=gfx1100`
    # on examples/tinyllm/kernels/matvec.hip, in the rocm image (HIP 5.7, clang 17)
    fixture = Path(__file__).parents[1] / "fixtures" / "device-code"
    bundle = (fixture / "matvec-gfx90a-gfx1030-gfx1100.hsaco").read_bytes()
    assert offload_bundle_targets(bundle) == {"gfx90a", "gfx1030", "gfx1100"}
    assert offload_bundle_targets(b"\0" * 64 + bundle) == {"gfx90a", "gfx1030", "gfx1100"}


def test_compiler_release_line() -> None:
    nvcc = (
        "nvcc: NVIDIA (R) Cuda compiler driver\n"
        "Cuda compilation tools, release 12.4, V12.4.131\n"
        "Build cuda_12.4.r12.4/compiler.34097967_0\n"
    )
    assert compiler_release(nvcc) == "Cuda compilation tools, release 12.4, V12.4.131"
    hipcc = "HIP version: 5.7.31921-0\nDebian clang version 17.0.6 (22+b2)\n"
    assert compiler_release(hipcc) == "HIP version: 5.7.31921-0"


def test_one_flavors_pins_do_not_change_another_flavors_image(options: Options) -> None:
    toolchain = load_toolchain("rustc-web-1.96")
    changed = replace(
        toolchain,
        flavor_packages={**toolchain.flavor_packages, "aarch64": {"qemu-user": "1:11"}},
    )
    cuda = get_flavor("cuda")
    dockerfile = render_dockerfile(cuda, toolchain)
    base = base_image_plan(load_base_spec())
    before = toolchain_image_plan(cuda, toolchain, dockerfile, base)
    assert toolchain_image_plan(cuda, changed, dockerfile, base) == before
    aarch64 = get_flavor("aarch64")
    assert toolchain_image_plan(aarch64, changed, dockerfile, base) != toolchain_image_plan(
        aarch64, toolchain, dockerfile, base
    )

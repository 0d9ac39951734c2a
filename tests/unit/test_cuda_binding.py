"""CUDA crates that bind at build time or at run time, told apart from cargo metadata's
resolved graph (tests/unit/cargo_metadata/*.json: real `cargo metadata` output of a crate
on each cudarc, trimmed to ids, features and dependencies)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from rich.console import Console

from orchestrator.cli.release_table import release_table
from orchestrator.config.resolve.options import FlavorSettings
from orchestrator.execute.ship import inventory
from orchestrator.execute.steps.pipeline import BIN_DIR
from orchestrator.execute.verdict import device
from orchestrator.execute.verdict.cuda_runtime import NO_GPU, cuda_runtime_record, toolkit_check
from orchestrator.flavors.cuda_binding import (
    cuda_bindings,
    driver_cuda_version,
    driver_serves,
    run_time_requirement,
)
from orchestrator.flavors.gpu import DeviceCodeMissingError, GpuTargetError
from orchestrator.model.documents.release_summary import TargetSummary
from orchestrator.release.targets.target import Target, TargetResult

from .execute_rig import LOCK, Rig, answers, make_options, make_rig
from .fakes import FakeEngine

GRAPHS = Path(__file__).parent / "cargo_metadata"
NVCC_12_4 = "Cuda compilation tools, release 12.4, V12.4.131"
# The banner of nvidia-smi 580 on an H100 (the header line carries the driver's CUDA).
NVIDIA_SMI = [
    "+-----------------------------------------------------------------------------------------+",
    "| NVIDIA-SMI 580.159.03             Driver Version: 580.159.03     CUDA Version: 13.0     |",
]


def graph(name: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((GRAPHS / f"{name}.json").read_text())
    return document


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


@pytest.mark.parametrize(
    ("name", "crate", "at_run_time", "cuda_api", "nvrtc"),
    [
        ("cudarc-0.11-loads", "cudarc 0.11.9", True, "12.5", True),
        ("cudarc-0.11-linked", "cudarc 0.11.9", False, "12.5", True),
        ("cudarc-0.16-default", "cudarc 0.16.0", True, "12.8", True),
        ("cudarc-0.16-static", "cudarc 0.16.0", False, "12.4", True),
        ("cudarc-0.9-builds", "cudarc 0.9.0", False, None, True),
    ],
)
def test_the_binding_is_read_from_the_resolved_graph(
    name: str, crate: str, at_run_time: bool, cuda_api: str | None, nvrtc: bool
) -> None:
    [binding] = cuda_bindings(graph(name))
    assert (binding.crate, binding.at_run_time, binding.cuda_api) == (crate, at_run_time, cuda_api)
    assert binding.runtime_compiler is nvrtc
    if name == "cudarc-0.11-linked":
        assert binding.why == "feature dynamic-linking: linked when built"
    if name == "cudarc-0.9-builds":
        assert "no libloading dependency" in binding.why


def test_a_graph_without_cudarc_has_no_binding() -> None:
    document = graph("cudarc-0.11-loads")
    document["packages"] = [p for p in document["packages"] if p["name"] != "cudarc"]
    assert cuda_bindings(document) == []
    assert run_time_requirement([]) is None


def test_the_run_time_requirement_is_the_newest_api_of_the_loading_crates() -> None:
    loads_12_5 = cuda_bindings(graph("cudarc-0.11-loads"))
    loads_12_8 = cuda_bindings(graph("cudarc-0.16-default"))
    linked = cuda_bindings(graph("cudarc-0.16-static"))
    chosen = run_time_requirement(linked + loads_12_5 + loads_12_8)
    assert chosen is not None and chosen.cuda_api == "12.8"
    assert run_time_requirement(linked) is None


def test_the_drivers_cuda_release_is_read_from_nvidia_smi() -> None:
    assert driver_cuda_version("\n".join(NVIDIA_SMI)) == "13.0"
    assert driver_cuda_version("NVIDIA-SMI has failed because it couldn't communicate") is None
    assert driver_serves("13.0", "12.5") and driver_serves("12.5", "12.5")
    assert not driver_serves("12.4", "12.5")
    assert driver_serves("12.10", "12.9")  # numbers, not text


def test_a_run_time_binding_needs_no_toolkit_match_and_a_linked_one_does() -> None:
    [loads] = cuda_bindings(graph("cudarc-0.11-loads"))
    assert toolkit_check(loads, "12.4").startswith("skipped: cudarc 0.11.9 binds CUDA at run time")
    [linked] = cuda_bindings(graph("cudarc-0.11-linked"))
    with pytest.raises(GpuTargetError, match=r"linked for CUDA 12\.5 .*toolkit is CUDA 12\.4") as e:
        toolkit_check(linked, "12.4")
    assert e.value.exit_code == 31 and "cuda-12040" in e.value.hint
    [static] = cuda_bindings(graph("cudarc-0.16-static"))
    assert toolkit_check(static, "12.4") == "CUDA 12.4: the image's toolkit release"


def test_the_record_says_what_the_driver_must_serve() -> None:
    bindings = cuda_bindings(graph("cudarc-0.11-loads"))
    record = cuda_runtime_record(bindings, "12.4", None)
    assert record is not None
    assert (record.binding, record.cuda_api, record.nvrtc) == ("run time", "12.5", True)
    assert record.driver_check == NO_GPU and record.driver_cuda is None
    newer = cuda_runtime_record(bindings, "12.4", "13.0")
    assert newer is not None and newer.driver_check == "ok: the driver serves CUDA 13.0 >= 12.5"
    older = cuda_runtime_record(bindings, "12.4", "12.4")
    assert older is not None and (older.driver_check or "").startswith(
        "fails: the driver serves CUDA 12.4"
    )
    # A linked binding for another release fails even where a run-time one is recorded.
    with pytest.raises(GpuTargetError):
        cuda_runtime_record(bindings + cuda_bindings(graph("cudarc-0.11-linked")), "12.4", None)


def _cuda_rig(
    project: Path, stack: ExitStack, tmp_path: Path, metadata: dict[str, Any], smi: list[str]
) -> Rig:
    """A cuda build with kernels = "runtime" whose binary names no libnvrtc (cudarc 0.11)."""
    options = make_options(project)
    options = replace(
        options,
        flavor_settings={**options.flavor_settings, "cuda": FlavorSettings(kernels="runtime")},
    )
    files = {"cargo-metadata.json": json.dumps(metadata).encode()}
    engine = FakeEngine(
        responder=answers(("nvidia-smi", 0 if smi else 127, smi), ("readelf", 0, [])),
        missing=lambda path: files.get(Path(path).name, b"\x7fELF...libcuda nvrtcCompileProgram"),
    )
    rig = make_rig(options, stack, tmp_path, flavor="cuda", engine=engine)
    rig.pipeline.state.shipped = f"{BIN_DIR}/optimized"
    rig.pipeline.state.gpu = {"kind": "cuda", "compiler": NVCC_12_4}
    return rig


def test_the_device_step_passes_a_cudarc_crate_that_loads_nvrtc_by_a_built_name(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig = _cuda_rig(project, stack, tmp_path, graph("cudarc-0.11-loads"), [])
    device.device_code(rig.pipeline, rig.log)
    binary = (rig.pipeline.state.gpu or {}).get("binary")
    assert isinstance(binary, dict)
    assert binary["loads"] == [
        "dlopen by cudarc 0.11.9 (nvrtc feature; file name built at run time)"
    ]
    record = rig.pipeline.state.cuda_runtime
    assert record is not None
    assert (record.cuda_api, record.driver_check) == ("12.5", NO_GPU)
    assert record.toolkit_check.startswith("skipped: cudarc 0.11.9 binds CUDA at run time")
    assert "needs at run time: CUDA 12.5; driver check: not checked (no GPU)" in rig.text
    assert [argv[0] for argv in rig.box.argvs][:1] == ["sh"]  # cargo metadata, in the box


def test_the_device_step_compares_the_drivers_release_where_a_gpu_answers(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    smi = [NVIDIA_SMI[0], NVIDIA_SMI[1].replace("13.0", "12.4")]
    rig = _cuda_rig(project, stack, tmp_path, graph("cudarc-0.11-loads"), smi)
    device.device_code(rig.pipeline, rig.log)
    record = rig.pipeline.state.cuda_runtime
    assert record is not None and record.driver_cuda == "12.4"
    assert "warning: this builder's GPU cannot run the binary's CUDA calls" in rig.text


def test_a_linked_cudarc_for_a_newer_cuda_than_the_toolkit_is_refused(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig = _cuda_rig(project, stack, tmp_path, graph("cudarc-0.11-linked"), [])
    with pytest.raises(GpuTargetError, match=r"CUDA 12\.5"):
        device.device_code(rig.pipeline, rig.log)


def test_a_run_time_binding_without_nvrtc_still_fails_the_kernels_check(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    document = graph("cudarc-0.11-loads")
    for node in document["resolve"]["nodes"]:
        node["features"] = [f for f in node["features"] if f != "nvrtc"]
    rig = _cuda_rig(project, stack, tmp_path, document, [])
    with pytest.raises(DeviceCodeMissingError, match=r"neither links nor names libnvrtc"):
        device.device_code(rig.pipeline, rig.log)


ON_H100 = "exercised on NVIDIA H100 80GB HBM3, driver 580.65.06"


def test_the_release_summary_and_table_carry_the_run_time_requirement(project: Path) -> None:
    record = cuda_runtime_record(cuda_bindings(graph("cudarc-0.11-loads")), "12.4", None)
    manifest = cast(
        Any,
        SimpleNamespace(
            portability=None, gate=None, bolt=None, cuda_runtime=record, gpu_path=ON_H100
        ),
    )
    result = TargetResult(Target("cuda", "x86-64-v2", make_options(project)), "demo-cuda")
    result.take_build_facts(manifest)
    again = TargetSummary.model_validate(result.summary().dump())  # as release.json holds it
    assert again.cuda_runtime == "12.5"
    assert TargetResult.from_summary(result.target, again).cuda_runtime == "12.5"
    console = Console(file=io.StringIO(), width=300)
    console.print(release_table([result], "release demo", 300))
    shown = console.file.getvalue()  # type: ignore[attr-defined]
    assert "needs a CUDA 12.5 driver" in shown
    assert f"gpu path {ON_H100}" in shown  # the GPU flavor says where its GPU path ran
    assert TargetResult.from_summary(result.target, again).gpu_path == ON_H100
    linked = cuda_runtime_record(cuda_bindings(graph("cudarc-0.16-static")), "12.4", None)
    built = TargetResult(Target("cuda", "x86-64-v2", make_options(project)), "demo-cuda")
    built.take_build_facts(
        cast(
            Any,
            SimpleNamespace(
                portability=None, gate=None, bolt=None, cuda_runtime=linked, gpu_path=None
            ),
        )
    )
    assert built.cuda_runtime is None  # linked to the image's toolkit: nothing new to ask


def test_cargo_metadata_runs_once_for_the_device_step_and_the_sbom(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    (project / "crate" / "Cargo.lock").write_text(LOCK)
    rig = _cuda_rig(project, stack, tmp_path, graph("cudarc-0.11-loads"), [])
    device.device_code(rig.pipeline, rig.log)
    crates, _packages = inventory.inventory(rig.pipeline, rig.log)
    metadata_runs = [argv for argv in rig.box.argvs if "metadata" in argv]
    assert len(metadata_runs) == 1
    assert {c.name for c in crates} >= {"cudarc", "libloading"}

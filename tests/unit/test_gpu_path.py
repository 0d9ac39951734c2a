"""build.json's gpu_path and which containers get the GPU: the build container of a GPU
flavor (training, validation, the driver check), never the sources loader; the driver
check runs nvidia-smi in it."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

from orchestrator.config.resolve.options import FlavorSettings
from orchestrator.execute.verdict.gpu_path import NVIDIA_QUERY, devices_seen, record_gpu_path
from orchestrator.runtime.gpu import AMD, CDI
from orchestrator.runtime.gpu_probe import CDI_NVIDIA, KFD_AMD

from .execute_rig import Rig, answers, make_options, make_rig
from .fakes import FakeEngine

H100 = "NVIDIA H100 80GB HBM3, 580.65.06"


def _rig(
    project: Path,
    stack: ExitStack,
    tmp_path: Path,
    *,
    kinds: tuple[str, ...] = (),
    smi: tuple[int, list[str]] = (0, [H100]),
    flavor: str = "cuda",
    gpu: str = "auto",
) -> tuple[Rig, FakeEngine]:
    options = make_options(project)
    settings = {**options.flavor_settings, flavor: FlavorSettings(gpu=gpu)}
    options = replace(options, flavor_settings=settings)
    engine = FakeEngine(responder=answers(("nvidia-smi", smi[0], smi[1])))
    engine.gpu_kinds = set(kinds)
    return make_rig(options, stack, tmp_path, flavor=flavor, engine=engine), engine


def test_with_a_gpu_the_build_container_gets_it_and_the_driver_check_names_it(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig, engine = _rig(project, stack, tmp_path, kinds=(CDI,))
    assert record_gpu_path(rig.pipeline, rig.log) == (
        "exercised on NVIDIA H100 80GB HBM3, driver 580.65.06"
    )
    rig.pipeline.load_sources(rig.log)
    by_purpose = {box.spec.purpose: box.spec.gpu for box in engine.containers}
    assert by_purpose == {"build": CDI_NVIDIA, "sources": None}
    # The driver check ran in that container.
    assert [e.argv for e in rig.box.execs] == [tuple(NVIDIA_QUERY)]
    # No capability comes with it.
    assert rig.box.spec.privileges.cap_add == () and not rig.box.spec.privileges.privileged


def test_without_a_gpu_the_record_says_why(project: Path, stack: ExitStack, tmp_path: Path) -> None:
    rig, _engine = _rig(project, stack, tmp_path)
    path = record_gpu_path(rig.pipeline, rig.log) or ""
    assert path.startswith("not exercised: the engine can give no nvidia GPU (CDI devices")
    assert rig.box.spec.gpu is None


def test_gpu_off_asks_nothing_and_says_so(project: Path, stack: ExitStack, tmp_path: Path) -> None:
    rig, engine = _rig(project, stack, tmp_path, kinds=(CDI,), gpu="off")
    assert record_gpu_path(rig.pipeline, rig.log) == 'not exercised: flavors.cuda.gpu = "off"'
    assert engine.gpu_probes == [] and rig.box.spec.gpu is None


def test_a_gpu_passed_that_nvidia_smi_cannot_see_is_not_exercised(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig, _engine = _rig(project, stack, tmp_path, kinds=(CDI,), smi=(127, []))
    assert record_gpu_path(rig.pipeline, rig.log) == (
        "not exercised: CDI devices nvidia.com/gpu=all was passed, but nvidia-smi in the "
        "build container saw no GPU (exit 127)"
    )


def test_rocm_gets_kfd_and_cpu_flavors_no_record(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig, _engine = _rig(project, stack, tmp_path, kinds=(AMD,), flavor="rocm")
    assert (record_gpu_path(rig.pipeline, rig.log) or "").startswith("exercised on an AMD GPU")
    assert rig.box.spec.gpu == KFD_AMD
    (tmp_path / "cpu").mkdir()
    with ExitStack() as other:
        cpu, engine = _rig(project, other, tmp_path / "cpu", kinds=(CDI, AMD), flavor="cpu")
        assert record_gpu_path(cpu.pipeline, cpu.log) is None
        assert cpu.box.spec.gpu is None and engine.gpu_probes == []


def test_nvidia_smi_lines_are_read_bounded_and_malformed_ones_left_out() -> None:
    assert devices_seen([H100, "garbage", ", 1.0", "A" * 200 + ", 1"]) == [
        ("NVIDIA H100 80GB HBM3", "580.65.06"),
        ("A" * 80, "1"),
    ]

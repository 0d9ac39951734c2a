"""Which files are the unsigned records of how a build went (model/documents/run_logs.py): only
those, so that `verify` still flags anything else no signature covers; and what of a
build's record goes there rather than into the signed build.json."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config.resolve.options import resolve
from orchestrator.model.documents.record_io import record_text
from orchestrator.model.documents.records import (
    BoltInfo,
    BuildManifest,
    CudaRuntimeInfo,
    ProfilingInfo,
)
from orchestrator.model.documents.run_logs import ImageRun, is_build_log, is_release_log, split_run

from .conftest import plan_for
from .manifests import produced_manifest


@pytest.mark.parametrize("name", ["logs/run.json", "logs/01-build.log", "logs/a b.log"])
def test_a_folders_run_record_and_step_logs_are_build_logs(name: str) -> None:
    assert is_build_log(name)
    assert is_release_log(f"demo-1.2.3-linux-x86_64-cpu/{name}")


@pytest.mark.parametrize(
    "name",
    ["logs/run.sh", "logs/.hidden", "logs/deep/x.log", "logs/", "build.json", "x/logs/a.log"],
)
def test_nothing_else_is(name: str) -> None:
    assert not is_build_log(name)


def test_the_release_keeps_only_targets_json_under_its_logs() -> None:
    assert is_release_log("logs/targets.json")
    assert not is_release_log("logs/other.json")
    assert not is_release_log("logs/run.json")  # a folder's record, not the release's
    assert not is_release_log("release.json")


def test_split_run_keeps_how_the_build_went_out_of_build_json(
    project: Path, tmp_path: Path
) -> None:
    options = resolve(project / "orchestrator.toml", env={"SOURCE_DATE_EPOCH": "1700000000"})
    plan = plan_for(options)
    whole = produced_manifest(options, plan, tmp_path)
    signed, run = split_run(whole, plan.artifact_dir)
    assert run.artifact == plan.artifact_dir and run.flavor == "cpu"
    assert run.started_at == "2026-11-21T10:00:00+00:00" and run.finished_at
    assert run.images["toolchain"] == ImageRun(id="sha256:t", built_this_run=True)
    assert run.images["base"] == ImageRun(id="sha256:b", built_this_run=False)
    assert run.profiles_reused == []
    # build.json: nothing a second honest build of the same inputs would write otherwise
    assert (signed.started_at, signed.finished_at, signed.steps) == (None, None, None)
    assert (signed.engine, signed.reused_steps) == (None, None)
    for image in (signed.images.base, signed.images.toolchain):
        assert (image.id, image.built_this_run) == (None, None)
    assert signed.profiling.container_started is None
    assert run.profiler_started is whole.profiling.container_started
    assert signed.pgo is not None and "reused_from_cache" not in signed.pgo.profile
    assert signed.pgo.profile["sha256"] == "89" * 32
    # the same inputs, another run: a profile from the cache, other times and image ids
    again = whole.model_copy(
        update={
            "started_at": "2030-01-01T00:00:00+00:00",
            "steps": [{"name": "pgo-merge", "status": "cached", "seconds": 0.1}],
            "pgo": whole.pgo.model_copy(  # type: ignore[union-attr]
                update={"profile": {**whole.pgo.profile, "reused_from_cache": True}}  # type: ignore[union-attr]
            ),
            "images": whole.images.model_copy(
                update={"toolchain": whole.images.toolchain.model_copy(update={"id": "x"})}
            ),
            "profiling": whole.profiling.model_copy(update={"container_started": True}),
        }
    )
    signed_again, run_again = split_run(again, plan.artifact_dir)
    assert record_text(signed_again) == record_text(signed)
    assert run_again.profiles_reused == ["pgo"]


def _on_hardware(whole: BuildManifest, *, host: bool, mode: str = "instrument") -> BuildManifest:
    """`whole` as a builder with (host) or without (a CI runner) a GPU and LBR would
    record it: the same bytes built, other hardware."""
    cuda = CudaRuntimeInfo(
        crate="cudarc 0.11.9",
        binding="run time",
        why="dlopen",
        cuda_api="12050",
        nvrtc=True,
        toolkit_check="matches the image's CUDA 12.4",
        driver_cuda="13.0" if host else None,
        driver_check="ok: driver CUDA 13.0 >= 12.5" if host else "not checked (no GPU)",
    )
    return whole.model_copy(
        update={
            "gpu_path": "exercised on NVIDIA H100, driver 580.159"
            if host
            else "not exercised: the engine lends no GPU",
            "cuda_runtime": cuda,
            "bolt": BoltInfo(
                policy="fallback",
                flags=["-reorder-blocks=ext-tsp"],
                mode=mode,
                mode_reason="profile stored for this binary"
                if host
                else "auto: perf cannot sample here: instrumented",
                applied=True,
                # Sampled too little, so instrumented: the count is the machine's, each run's
                sample_gate={"samples": 47, "min_samples": 20000} if host else None,
            ),
            "profiling": ProfilingInfo(
                granted="seccomp orchestrator-perf" if host else "none",
                lbr=host,
                sampling=host,
                container_started=host,
            ),
        }
    )


def test_two_builders_with_other_hardware_sign_the_same_build_json(
    project: Path, tmp_path: Path
) -> None:
    """A host with a GPU and LBR and a CI runner with neither, building the same bytes:
    build.json is the same; what each machine found goes to its logs/run.json. The BOLT
    mode is not such a fact: it changes the binary, so it stays (the lock pins it)."""
    options = resolve(project / "orchestrator.toml", env={"SOURCE_DATE_EPOCH": "1700000000"})
    plan = plan_for(options)
    whole = produced_manifest(options, plan, tmp_path)
    signed_host, run_host = split_run(_on_hardware(whole, host=True), plan.artifact_dir)
    signed_ci, run_ci = split_run(_on_hardware(whole, host=False), plan.artifact_dir)
    assert record_text(signed_host) == record_text(signed_ci)
    assert signed_host.gpu_path is None and signed_host.profiling == ProfilingInfo()
    assert signed_host.cuda_runtime is not None
    assert (signed_host.cuda_runtime.driver_cuda, signed_host.cuda_runtime.driver_check) == (
        None,
        None,
    )
    assert signed_host.cuda_runtime.cuda_api == "12050"  # what the binary needs: signed
    assert signed_host.bolt is not None and signed_host.bolt.mode == "instrument"
    assert signed_host.bolt.mode_reason is None
    assert run_host.gpu_path == "exercised on NVIDIA H100, driver 580.159"
    assert run_ci.gpu_path == "not exercised: the engine lends no GPU"
    assert (run_host.cuda_driver, run_ci.cuda_driver) == ("13.0", None)
    assert run_ci.cuda_driver_check == "not checked (no GPU)"
    assert run_host.bolt_mode_reason == "profile stored for this binary"
    assert signed_host.bolt.sample_gate is None
    assert run_host.bolt_sample_gate == {"samples": 47, "min_samples": 20000}
    assert run_ci.bolt_sample_gate is None
    assert run_host.perf is not None and run_host.perf.lbr is True
    assert run_ci.perf is not None and (run_ci.perf.lbr, run_ci.perf.granted) == (False, "none")
    # another BOLT mode made other bytes: build.json differs
    signed_sampled, _ = split_run(_on_hardware(whole, host=True, mode="sample"), plan.artifact_dir)
    assert record_text(signed_sampled) != record_text(signed_host)


def test_a_build_json_from_before_keeps_its_hardware_facts_readable(
    project: Path, tmp_path: Path
) -> None:
    """An older build.json holds them: it still reads, and says what it said."""
    options = resolve(project / "orchestrator.toml", env={"SOURCE_DATE_EPOCH": "1700000000"})
    whole = _on_hardware(produced_manifest(options, plan_for(options), tmp_path), host=True)
    old = BuildManifest.model_validate_json(record_text(whole))
    assert old.gpu_path == "exercised on NVIDIA H100, driver 580.159"
    assert old.profiling.lbr is True and old.bolt is not None
    assert old.bolt.mode_reason == "profile stored for this binary"
    assert old.cuda_runtime is not None and old.cuda_runtime.driver_cuda == "13.0"

"""What a release keeps of how its builds went, outside every signature: the `logs/`
folders.

What a release signs is a function of its inputs, so that two honest builders of the same
commit sign the same bytes. How a build went is not: its start and end, each step's time
and status, which steps the step cache served, the Docker Engine and image ids it used, the
release's per-target times, statuses, engines and quick-bench ratios. Those are kept, for
people and for the next run's time estimates, in files no checksum lists:

  <release>/logs/targets.json        each target's last build (model/documents/release_summary.py)
  <release>/<artifact>/logs/run.json this build's times, steps, engine, images and reused
                                     profiles (BuildRun; split_run takes them out of build.json)
  <release>/<artifact>/logs/*.log    each step's log

`verify` names them as unsigned and accepts no other unlisted file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from orchestrator.model.documents.records import (
    BoltInfo,
    BuildManifest,
    EngineRecord,
    ImageRecord,
    JsonDict,
    PgoInfo,
    ProfilingInfo,
    Record,
    RecordError,
    ReusedStep,
    read_record,
)

LOGS_DIR = "logs"
TARGET_RUNS = f"{LOGS_DIR}/targets.json"  # release-relative
BUILD_RUN = f"{LOGS_DIR}/run.json"  # relative to an artifact folder
STEP_LOG_SUFFIX = ".log"


def is_build_log(relative: str) -> bool:
    """Whether `relative` (to an artifact folder) is one of its unsigned run records:
    logs/run.json or a step's logs/<name>.log, nothing deeper."""
    folder, _, name = relative.partition("/")
    if folder != LOGS_DIR or not name or "/" in name:
        return False
    return relative == BUILD_RUN or name.endswith(STEP_LOG_SUFFIX)


def is_release_log(name: str) -> bool:
    """Whether the release-relative `name` is unsigned by design: logs/targets.json, or an
    artifact folder's build log (`<folder>/logs/...`, see is_build_log)."""
    if name == TARGET_RUNS:
        return True
    folder, _, rest = name.partition("/")
    return bool(folder) and folder != LOGS_DIR and is_build_log(rest)


class ImageRun(Record):
    """One image as this build found it: its Engine id, and whether this run made it."""

    id: str
    built_this_run: bool


class BuildRun(Record):
    """<artifact>/logs/run.json: how one build went. Not signed: build.json (signed) holds
    what was built and from what; this holds what differs between two honest builds."""

    SCHEMA = "orchestrator/build-run"
    VERSION = 1

    schema_: Literal["orchestrator/build-run"] = Field("orchestrator/build-run", alias="schema")
    schema_version: Literal[1] = 1
    artifact: str = Field(description="the artifact folder it describes")
    flavor: str = Field(description="its flavor (step time estimates compare like with like)")
    started_at: str
    finished_at: str
    steps: list[JsonDict] = Field(
        description="each step as it ran: name, status, seconds, detail, log"
    )
    reused_steps: dict[str, ReusedStep] | None = Field(
        None, description="steps the step cache served: step name -> who built them, when"
    )
    engine: EngineRecord | None = Field(None, description="the Docker Engine that built it")
    images: dict[str, ImageRun] = Field(
        default_factory=dict, description="base and toolchain: their ids, and whether made now"
    )
    profiles_reused: list[str] = Field(
        default_factory=list,
        description="the PGO and BOLT profiles taken from the cache rather than trained now "
        "(pgo, bolt, bolt:<binary>)",
    )
    profiler_started: bool = Field(
        False,
        description="whether the profiling container was started (not when training "
        "came from a cache)",
    )
    # What the builder's hardware and engine allowed or found: two machines that make the
    # same bytes may differ in all of it (added within version 1: absent in older files,
    # whose build.json holds them).
    perf: ProfilingInfo | None = Field(
        None, description="the profiling container's perf access: the grant, LBR, sampling"
    )
    bolt_mode_reason: str | None = Field(
        None,
        description="why BOLT profiled in the mode it did (build.json records the mode, "
        "which reproduce uses)",
    )
    bolt_sample_gate: dict[str, int] | None = Field(
        None,
        description="a sampled BOLT profile's count of samples and bolt.min_samples: the "
        "count varies from run to run, the mode it led to is in build.json",
    )
    gpu_path: str | None = Field(
        None,
        description="GPU flavors: 'exercised on <device>, driver <version>' or 'not "
        "exercised: <why>'",
    )
    cuda_driver: str | None = Field(
        None, description="the CUDA version of this builder's driver, where it has a GPU"
    )
    cuda_driver_check: str | None = Field(
        None, description="whether that driver runs the binary's CUDA calls, or why unchecked"
    )


REUSED = "reused_from_cache"  # the profile store's flag, which build.json does not keep


def _profile_reused(profile: JsonDict | None) -> tuple[JsonDict | None, bool]:
    if profile is None:
        return None, False
    kept = {key: value for key, value in profile.items() if key != REUSED}
    return kept, bool(profile.get(REUSED))


def _without_reuse(manifest: BuildManifest) -> tuple[PgoInfo | None, BoltInfo | None, list[str]]:
    """pgo and bolt without the profile store's `reused_from_cache`, and which were."""
    reused: list[str] = []
    pgo = manifest.pgo
    if pgo is not None:
        profile, hit = _profile_reused(pgo.profile)
        pgo = pgo.model_copy(update={"profile": profile or {}})
        reused += ["pgo"] if hit else []
    bolt = manifest.bolt
    if bolt is not None:
        profile, hit = _profile_reused(bolt.profile)
        reused += ["bolt"] if hit else []
        binaries = {}
        for name, binary in bolt.binaries.items():
            own, own_hit = _profile_reused(binary.profile)
            binaries[name] = binary.model_copy(update={"profile": own})
            reused += [f"bolt:{name}"] if own_hit else []
        bolt = bolt.model_copy(
            update={
                "profile": profile,
                "binaries": binaries,
                "mode_reason": None,
                "sample_gate": None,
            }
        )
    return pgo, bolt, reused


def _sample_gate(bolt: BoltInfo | None) -> dict[str, int] | None:
    """The sample gate's numbers, as logs/run.json keeps them."""
    if bolt is None or not bolt.sample_gate:
        return None
    return {key: int(value) for key, value in bolt.sample_gate.items() if isinstance(value, int)}


def _image_run(image: ImageRecord) -> tuple[ImageRecord, ImageRun | None]:
    run = None
    if image.id is not None:
        run = ImageRun(id=image.id, built_this_run=bool(image.built_this_run))
    return image.model_copy(update={"id": None, "built_this_run": None}), run


def split_run(manifest: BuildManifest, artifact: str) -> tuple[BuildManifest, BuildRun]:
    """A build's whole record as two: build.json, signed, with nothing of how the run went
    (so two honest builds of the same inputs write the same bytes), and logs/run.json.
    What the builder's hardware decided goes to logs/run.json too: its perf access (LBR or
    not), how many samples a sampled BOLT profile got and why BOLT took its mode (the mode
    itself changes the binary: build.json keeps it and the lock pins it), whether a GPU ran
    the GPU path, the CUDA driver's check."""
    base, base_run = _image_run(manifest.images.base)
    toolchain, toolchain_run = _image_run(manifest.images.toolchain)
    pgo, bolt, reused = _without_reuse(manifest)
    cuda = manifest.cuda_runtime
    images = {name: run for name, run in (("base", base_run), ("toolchain", toolchain_run)) if run}
    run = BuildRun(
        artifact=artifact,
        flavor=manifest.artifact.flavor,
        started_at=manifest.started_at or "",
        finished_at=manifest.finished_at or "",
        steps=manifest.steps or [],
        reused_steps=manifest.reused_steps,
        engine=manifest.engine,
        images=images,
        profiles_reused=reused,
        profiler_started=bool(manifest.profiling.container_started),
        perf=manifest.profiling.model_copy(update={"container_started": None}),
        bolt_mode_reason=manifest.bolt.mode_reason if manifest.bolt else None,
        bolt_sample_gate=_sample_gate(manifest.bolt),
        gpu_path=manifest.gpu_path,
        cuda_driver=cuda.driver_cuda if cuda else None,
        cuda_driver_check=cuda.driver_check if cuda else None,
    )
    signed = manifest.model_copy(
        update={
            "steps": None,
            "started_at": None,
            "finished_at": None,
            "engine": None,
            "reused_steps": None,
            "images": manifest.images.model_copy(update={"base": base, "toolchain": toolchain}),
            "pgo": pgo,
            "bolt": bolt,
            "profiling": ProfilingInfo(),
            "gpu_path": None,
            "cuda_runtime": cuda.model_copy(update={"driver_cuda": None, "driver_check": None})
            if cuda
            else None,
        }
    )
    return signed, run


def read_build_run(folder: Path) -> BuildRun | None:
    """The artifact folder's logs/run.json, or None where it has none (or an unreadable
    one: it is unsigned, and only informs)."""
    try:
        return read_record(folder / BUILD_RUN, BuildRun)
    except RecordError:
        return None

"""What a release keeps of how its builds went, outside every signature: the `logs/`
folders.

What a release signs is a function of its inputs, so that two honest builders of the same
commit sign the same bytes. How a build went is not: its start and end, each step's time
and status, which steps the step cache served, the Docker Engine and image ids it used, the
release's per-target times, statuses, engines and quick-bench ratios. Those are kept, for
people and for the next run's time estimates, in files no checksum lists:

  <release>/logs/targets.json        each target's last build (model/release_summary.py)
  <release>/<artifact>/logs/run.json this build's times, steps, engine and images (BuildRun)
  <release>/<artifact>/logs/*.log    each step's log

`verify` names them as unsigned and accepts no other unlisted file.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from orchestrator.model.records import EngineRecord, JsonDict, Record, ReusedStep

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

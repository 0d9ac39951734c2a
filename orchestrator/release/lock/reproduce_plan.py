"""What `reproduce` will run, and how long the release's own record says that takes.

A reproduction shares steps across targets as a release does: every step keyed by its
inputs (release/step_plan.py) that an earlier target of the same reproduction ran is
reused from the reproduction's own step cache, which starts empty in its fresh work
folder, so nothing comes from a cache this reproduction did not fill. The plain `cargo
build --release` baseline of two levels reads no target-cpu: it is built once, and so is
the `cargo test` the levels share. The PGO and BOLT profiles, the gate's pick and the
vendored crates come from the lock (the vault), never trained, counted or fetched again;
images are built once per reproduction and reused by the targets after.

The estimate adds up, for each step that will run, the seconds the release recorded for
it in that target's unsigned logs/run.json (model/documents/run_logs.py; build.json's own `steps` in
a release from before the split). A step that the release took from its step cache counts
the time of the target whose build ran it, where that target's record is there. Steps
with no recorded time are named, never guessed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.model.documents.lockfile import LockedTarget
from orchestrator.model.documents.records import BuildManifest, JsonDict, RecordError, read_record
from orchestrator.model.documents.run_logs import BUILD_RUN, BuildRun
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.plan.steps import StepName
from orchestrator.release.step_plan import PGO_STEPS, StepPlanner

IMAGE_STEPS = (StepName.BASE_IMAGE, StepName.TOOLCHAIN_IMAGE)


@dataclass(frozen=True)
class PlannedStep:
    """One step of one target as the reproduction will do it."""

    artifact: str
    step: str
    runs: bool  # False: shared with an earlier target, or its output is in the lock
    reason: str
    seconds: float | None = None  # what the release recorded for it (None: nothing)


@dataclass(frozen=True)
class Recorded:
    """A target's step times as its release recorded them: step -> seconds of the steps
    that ran, and step -> the artifact whose build ran a step it took from a cache."""

    seconds: dict[str, float]
    made_by: dict[str, str]


def _step_seconds(steps: Sequence[JsonDict]) -> dict[str, float]:
    found: dict[str, float] = {}
    for step in steps:
        name, seconds = step.get("name"), step.get("seconds")
        ran = step.get("status") == "ok" and isinstance(name, str)
        if ran and isinstance(seconds, int | float) and seconds >= 0:
            found[str(name)] = float(seconds)
    return found


def recorded_times(release_dir: Path, artifact: str) -> Recorded:
    """What `release_dir`/`artifact` recorded of its build's steps; nothing when it has no
    readable record (a lockfile reproduced without its release folder)."""
    try:
        run = read_record(release_dir / artifact / BUILD_RUN, BuildRun)
    except RecordError:
        try:  # a release from before logs/run.json kept the steps in build.json
            manifest = read_record(release_dir / artifact / "build.json", BuildManifest)
        except RecordError:
            return Recorded({}, {})
        return Recorded(_step_seconds(manifest.steps or []), {})
    made_by = {step: reused.made_by for step, reused in (run.reused_steps or {}).items()}
    return Recorded(_step_seconds(run.steps), made_by)


@dataclass(frozen=True)
class ReproducePlan:
    steps: tuple[PlannedStep, ...]
    recorded: bool  # whether any target's step times were found

    def running(self, artifact: str | None = None) -> list[PlannedStep]:
        return [s for s in self.steps if s.runs and artifact in (None, s.artifact)]

    def expected_seconds(self, artifact: str | None = None) -> float | None:
        """The recorded seconds of the steps that run (None: no step time was found)."""
        if not self.recorded:
            return None
        return sum(s.seconds or 0.0 for s in self.running(artifact))

    def lines(self) -> list[str]:
        """What reproduce prints before it starts: the steps it runs and shares, and the
        time the release's record says they take."""
        running, shared = self.running(), [s for s in self.steps if not s.runs]
        targets = len({s.artifact for s in self.steps})
        lines = [
            f"reproduce plan: {targets} target(s), {len(running)} steps to run, "
            f"{len(shared)} shared or from the lock"
        ]
        lines += [f"  {s.artifact}: {s.step} not run: {s.reason}" for s in shared]
        expected = self.expected_seconds()
        if expected is None:
            lines.append(
                "  no estimate: the release records no step times (logs/run.json of its "
                "targets is not there)"
            )
            return lines
        unknown = [f"{s.artifact}: {s.step}" for s in running if s.seconds is None]
        estimate = f"  expected: about {_duration(expected)}, the sum of the release's own "
        estimate += "recorded times of the steps to run"
        if unknown:
            estimate += f"; {len(unknown)} with no recorded time, counted as 0: "
            estimate += ", ".join(unknown)
        return [*lines, estimate]


def _duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{rest:02d}s" if minutes else f"{rest}s"


MAIN_BOLT_PROFILES = ("bolt.fdata", "bolt.unshipped.fdata")  # release/lock/pin.py's names


def _from_lock(entry: LockedTarget, plan: BuildPlan, step: StepName) -> str:
    """Why `step` of `entry` needs no run: its output is pinned in the lock ("": it runs)."""
    profiles = entry.resolved.profiles
    if step in PGO_STEPS and any(name.startswith("pgo.") for name in profiles):
        return "the PGO profile comes from the lock"
    if step == StepName.BOLT_PROFILE and any(name in profiles for name in MAIN_BOLT_PROFILES):
        return "the BOLT profile comes from the lock"
    if step == StepName.SPEED_GATE and plan.gate is not None and plan.gate.pinned:
        return "the gate's pick comes from the lock: nothing is counted"
    if step == StepName.FETCH_CRATES:
        return "the vendored crates come from the vault"
    if step == StepName.DISTROS:  # a reproduction is offline (execute/verdict/portability.py)
        return "offline: the distros' root filesystems are not pinned"
    return ""


def plan_reproduction(
    targets: Sequence[tuple[LockedTarget, BuildPlan]],
    cache_dir: Path,
    release_dir: Path,
    config: str = "",
) -> ReproducePlan:
    """Each step of each target (in the order they are rebuilt), run or shared, with the
    release's recorded time; `cache_dir` is the reproduction's own fresh cache."""
    planner = StepPlanner(cache_dir=cache_dir, seen={}, config=config)
    images: dict[str, str] = {}  # image input hash -> the first target that builds it
    steps: list[PlannedStep] = []
    found = False
    records: dict[str, Recorded] = {}

    def record(artifact: str) -> Recorded:
        if artifact not in records:
            records[artifact] = recorded_times(release_dir, artifact)
        return records[artifact]

    for entry, plan in targets:
        artifact = plan.artifact_dir
        times = record(artifact)
        found = found or bool(times.seconds)
        notes = {note.step: note for note in planner.notes(plan)}
        for step in plan.steps:
            reason = _from_lock(entry, plan, step.name)
            note = notes.get(step.name)
            if not reason and note is not None and note.reused:
                reason = note.reason
            if not reason and step.name in IMAGE_STEPS:
                image = plan.base_image if step.name == StepName.BASE_IMAGE else plan.image
                first = images.setdefault(image.input_hash, artifact)
                reason = f"the image {first} builds" if first != artifact else ""
            if reason:
                steps.append(PlannedStep(artifact, step.name, False, reason))
                continue
            seconds = times.seconds.get(step.name)
            if seconds is None and step.name in times.made_by:
                seconds = record(times.made_by[step.name]).seconds.get(step.name)
            steps.append(PlannedStep(artifact, step.name, True, "", seconds))
    return ReproducePlan(tuple(steps), found)

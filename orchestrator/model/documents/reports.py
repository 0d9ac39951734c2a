"""Typed records of the JSON documents the commands print with `--json`.

Each is one document on stdout (progress and warnings go to stderr), named by `schema`
and `schema_version` like the files orchestrator writes (model/documents/record_io.py), and
published as a JSON Schema under schemas/ (`python -m orchestrator.tools.schemas`).
A field is added with a default or under a new version, never renamed in place.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, JsonValue

from orchestrator.config.declarations.kinds import toml_shape
from orchestrator.config.declarations.settings import FLAVOR_SETTINGS, SETTINGS
from orchestrator.config.resolve.options import Options
from orchestrator.model.documents.record_io import JsonDict, Record
from orchestrator.model.documents.release_summary import EngineJobs, TargetSummary


# -- orchestrator config --json ---------------------------------------------------------
class SettingEntry(Record):
    key: str = Field(description="dotted key, as in orchestrator.toml")
    value: JsonValue = Field(
        description="the resolved value; null where it is computed later or unset"
    )
    shown: str = Field(description="the value as `orchestrator config` prints it")
    source: str = Field(description='where it came from: "default", "file ...", "env ..."...')


class ConfigReport(Record):
    """`orchestrator config --json`: every resolved setting and where it came from."""

    SCHEMA = "orchestrator/config"
    VERSION = 1

    schema_: Literal["orchestrator/config"] = Field("orchestrator/config", alias="schema")
    schema_version: Literal[1] = 1
    config_path: str
    settings: list[SettingEntry]


def _json_value(value: object) -> JsonValue:
    shaped = toml_shape(value)
    if isinstance(shaped, list):
        return [_json_value(item) for item in shaped]
    if isinstance(shaped, Path):
        return str(shaped)
    if shaped is None or isinstance(shaped, str | int | float | bool):
        return shaped
    return str(shaped)


def config_report(options: Options) -> ConfigReport:
    """The rows `orchestrator config` shows, with each value also in its JSON shape."""
    values: dict[str, object] = {spec.key: getattr(options, spec.attr) for spec in SETTINGS}
    for name, settings in options.flavor_settings.items():
        for key in FLAVOR_SETTINGS:
            values[f"flavors.{name}.{key.name}"] = getattr(settings, key.name)
        for dotted, value in settings.overrides:  # its [flavors.<name>.<section>] tables
            values[f"flavors.{name}.{dotted}"] = value
        for section, args in settings.args_append:
            values[f"flavors.{name}.{section}.args_append"] = args
    return ConfigReport(
        config_path=str(options.config_path),
        settings=[
            SettingEntry(key=key, value=_json_value(values.get(key)), shown=shown, source=source)
            for key, shown, source in options.describe()
        ],
    )


# -- orchestrator doctor --json ---------------------------------------------------------
class DoctorCheck(Record):
    name: str
    status: str = Field(description="ok, warn, fail (blocks builds), info or skip")
    detail: str


class DoctorReport(Record):
    """`orchestrator doctor --json`: every check of this host; `ok` is false on a blocker."""

    SCHEMA = "orchestrator/doctor"
    VERSION = 1

    schema_: Literal["orchestrator/doctor"] = Field("orchestrator/doctor", alias="schema")
    schema_version: Literal[1] = 1
    ok: bool
    blockers: list[str]
    checks: list[DoctorCheck]


# -- orchestrator verify --json ---------------------------------------------------------
class VerifyCheck(Record):
    file: str = Field(description="path relative to the release folder")
    check: str = Field(description="signature, checksums, provenance or sbom")
    ok: bool
    detail: str


class VerifyReport(Record):
    """`orchestrator verify --json`: every check of a release against one public key."""

    SCHEMA = "orchestrator/verify"
    VERSION = 1

    schema_: Literal["orchestrator/verify"] = Field("orchestrator/verify", alias="schema")
    schema_version: Literal[1] = 1
    release_dir: str
    key: str | None = Field(
        description="the public key file given with --key; null: the release's own"
    )
    integrity_only: bool = Field(
        description="checked against the key shipped inside the release: proves integrity, "
        "not origin"
    )
    passed: bool
    failed: int
    checks: list[VerifyCheck]


# -- bench.json and orchestrator bench --json -------------------------------------------
class BenchVariant(Record):
    name: str
    label: str
    runs: int
    median_s: float
    p95_s: float
    mean_s: float
    stddev_s: float
    speedup_vs_baseline: float
    speedup_ci95: list[float] = Field(description="95% bootstrap interval: [low, high]")
    verdict: str = Field(
        "",
        description="baseline, faster, slower, or 'no measurable difference' (the interval "
        "holds 1.0)",
    )
    user_s: float = Field(0.0, description="mean user CPU seconds per run")
    system_s: float = Field(0.0, description="mean system CPU seconds per run")
    max_rss_kb: int
    size_bytes: int
    times_s: list[float]


class CountedRun(Record):
    """One command counted under callgrind (bench --metric callgrind)."""

    label: str  # "bench" or "workload <index>"
    command: list[str]
    instructions: int
    l1_misses: int
    ll_misses: int
    branches: int
    mispredicts: int
    estimated_cycles: int


class CountedVariant(Record):
    name: str
    label: str
    size_bytes: int
    cycles_vs_baseline: float = Field(
        description="geometric mean over the runs of estimated cycles / the baseline's"
    )
    instructions_vs_baseline: float
    runs: list[CountedRun]


class BenchReport(Record):
    """bench.json, which `orchestrator bench --json` also prints: every variant measured."""

    SCHEMA = "orchestrator/bench"
    VERSION = 1

    schema_: Literal["orchestrator/bench"] = Field("orchestrator/bench", alias="schema")
    schema_version: Literal[1] = 1
    artifact: str
    image: str
    command: list[str]
    cpu: str
    runs: int
    warmup: int
    order: Literal["interleaved"]
    variants: list[BenchVariant]  # wall time; empty under --metric callgrind
    metric: str = "wall"  # wall | callgrind | all
    counts: list[CountedVariant] = Field(default_factory=list)  # callgrind, when asked for
    counts_formula: str | None = None


# -- orchestrator release --dry-run --json ----------------------------------------------
class StepNote(Record):
    """`release --dry-run`: whether one cached step of a target would run, and why."""

    step: str
    reused: bool | None = Field(
        description="true: its outputs come from the step cache (or a stored profile) or "
        "from an earlier target of this release; false: it runs; null: decided as it runs"
    )
    reason: str


class CacheState(Record):
    """What the caches already hold for a target; null where it cannot be known."""

    base_image: bool | None = Field(description="null: Docker not reachable")
    toolchain_image: bool | None = Field(description="null: Docker not reachable")
    crates: bool
    pgo_profile: bool | None = Field(description="null: PGO is off")
    artifact: bool = Field(
        False,
        description="the published artifact is current (its inputs unchanged): nothing "
        "is built for this target, and `steps` is empty",
    )
    artifact_reason: str = Field("", description="why the target is built, or why it is not")
    baseline: bool = Field(
        False,
        description="the plain baseline build is not run: the step cache holds its outputs, "
        "or an earlier target of this release builds the same baseline (not verified here: "
        "a tampered entry or other vendored crates still run it)",
    )
    baseline_reason: str = Field("", description="where the reused baseline comes from")
    steps: list[StepNote] = Field(
        default_factory=list,
        description="each step the step cache may skip, in build order: run or reused, and "
        "why (not verified here: a tampered entry or other vendored crates still run it)",
    )

    def labelled(self) -> dict[str, bool | None]:
        if self.artifact:
            return {"artifact (nothing to build)": True}
        return {
            "base image": self.base_image,
            "toolchain image": self.toolchain_image,
            "crates": self.crates,
            "pgo profile": self.pgo_profile,
            "baseline build": self.baseline,  # whence: baseline_reason (--json)
            **{
                f"{note.step} ({note.reason})": True
                for note in self.steps
                # the baseline has its own label; pgo-instrument speaks for the PGO steps
                if note.reused and note.step not in ("build-baseline", "pgo-train", "pgo-merge")
            },
        }


class EngineFit(Record):
    """`release --dry-run`: whether one engine can build the target. Which of those that
    fit takes it is decided while the release runs: an idle one, preferring one that
    already holds the target's images."""

    engine: str = Field(description="its Docker context")
    fits: bool
    holds: str = Field(description='"toolchain image", "base image" or ""')
    note: str = Field(description="why it cannot build the target, or that it is unreachable")


class PlannedTargetEntry(Record):
    flavor: str
    level: str
    artifact: str
    rust_target: str = Field(description="target triple, e.g. x86_64-unknown-linux-gnu")
    target_cpu: str
    toolchain: str
    base_image: str
    image: str
    steps: list[str]
    cached: CacheState
    engines: list[EngineFit] = Field(
        default_factory=list,
        description="each engine's fit (one that does not answer: fits false, and why); "
        "empty where no engine answers",
    )


class ReleasePlanReport(Record):
    """`orchestrator release --dry-run --json`: the targets in build order; nothing built."""

    SCHEMA = "orchestrator/release-plan"
    VERSION = 1

    schema_: Literal["orchestrator/release-plan"] = Field(
        "orchestrator/release-plan", alias="schema"
    )
    schema_version: Literal[1] = 1
    name: str
    version: str
    release_dir: str
    docker_reachable: bool
    targets: list[PlannedTargetEntry]
    jobs_per_engine: list[EngineJobs] = Field(
        default_factory=list,
        description="how many targets each engine that answered would build at a time, and why",
    )


# -- orchestrator build --dry-run --json -------------------------------------------------
class PlannedImage(Record):
    reference: str
    input_hash: str


class PlannedVariant(Record):
    argv: list[str]  # its cargo command line
    rustflags: list[str]


class BuildPlanReport(Record):
    """`orchestrator build --dry-run [--json]`: one target's plan; nothing built."""

    SCHEMA = "orchestrator/build-plan"
    VERSION = 1

    schema_: Literal["orchestrator/build-plan"] = Field("orchestrator/build-plan", alias="schema")
    schema_version: Literal[1] = 1
    flavor: str
    arch: str
    rust_target: str
    target_cpu: str
    toolchain: str
    base_image: PlannedImage
    image: PlannedImage
    source_archive_sha256: str
    cargo_lock_sha256: str
    rustflags: list[str]
    variants: dict[str, PlannedVariant]
    test: list[str] = Field(description="the cargo test command line")
    test_build: list[str] | None = Field(
        None,
        description="cargo test --no-run: compiles the tests, cached apart from the run "
        "(without the arguments after `--`, which only the run reads)",
    )
    test_skipped: str | None = Field(description="why the tests do not run (null: they do)")
    test_target_cpu: str | None = Field(description="the CPU level the tests compile for")
    test_shared: str | None = Field(description="why that is another level's (null: its own)")
    run: JsonDict = Field(description="what every workload sees: env, stdin, inputs")
    pgo: JsonDict | None
    bolt: JsonDict | None
    binaries: list[str]
    workloads: list[list[str] | JsonDict]
    runner: list[str] = Field(description="the emulator workloads run under (cross builds)")
    gpu_targets: list[str]
    # `validate_` in Python, `validate` in JSON: it dodges BaseModel's own `validate`.
    validate_: list[str] = Field(alias="validate", description="the validate command")
    validate_runs: list[list[str] | JsonDict]
    artifact: str = Field(description="<release>/<artifact>: where it would be published")
    steps: list[str]


# -- orchestrator release --json ---------------------------------------------------------
class SigningInfo(Record):
    key: str = Field(description="where the secret key came from")
    key_id: str
    throwaway: bool = Field(
        description="signed with a throwaway key from the cache: integrity, not origin"
    )
    public_key: str | None = Field(description="the public key file to verify with, if found")


class ReleaseRunReport(Record):
    """`orchestrator release --json`: how each target of this run went, in build order."""

    SCHEMA = "orchestrator/release-run"
    VERSION = 1

    schema_: Literal["orchestrator/release-run"] = Field("orchestrator/release-run", alias="schema")
    schema_version: Literal[1] = 1
    name: str
    version: str
    release_dir: str
    published: bool = Field(description="whether the release folder holds anything")
    seconds: float = Field(description="wall time of the whole run")
    targets: list[TargetSummary]
    failed: list[str]
    lockfile: str | None
    signing: SigningInfo
    verify_command: str | None = Field(description="what to run next; null: nothing published")
    jobs_per_engine: list[EngineJobs] = Field(
        default_factory=list,
        description="how many targets each engine built at a time, and why",
    )

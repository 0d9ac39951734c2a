"""The BOLT steps: profile the optimized binary (LBR, sampling or instrumentation), then
rewrite its layout with llvm-bolt and check that it still prints what the baseline does.
BOLT rewrites the main binary (package.binary) with the workloads that run it; the other
binaries of package.binaries ship as the optimized build made them.

When a BOLT step fails and bolt.policy is "fallback", the executor ships the unBOLTed
binary and records why (`fall_back`); with "require" the build fails.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from orchestrator.errors import BoltError, OrchestratorError, StepFailedError
from orchestrator.execute.pipeline import (
    Pipeline,
    fetch_file,
    put_file,
    run,
    run_workloads,
    variant_binary,
)
from orchestrator.execute.profiles import ProfileRecord, load_profile, store_profile
from orchestrator.execute.validate import validate_binaries
from orchestrator.model.bolt_report import ModeChoice, choose_mode, parse_report
from orchestrator.plan.bolt import BoltPlan
from orchestrator.plan.steps import StepName
from orchestrator.progress import StepLog

PERF_FREQUENCY = "10000"  # samples/s: the default 4000 leaves BOLT asking for more


def _bolt(pipeline: Pipeline) -> BoltPlan:
    if pipeline.plan.bolt is None:
        raise StepFailedError("internal: a BOLT step in a plan without BOLT")
    return pipeline.plan.bolt


def _profile_path(bolt: BoltPlan) -> str:
    return f"{bolt.work_dir}/profile.fdata"


def profile(pipeline: Pipeline, log: StepLog) -> None:
    """Choose the profile mode, then collect a profile (or reuse the stored one)."""
    bolt, options, state = _bolt(pipeline), pipeline.options, pipeline.state
    optimized = state.shipped
    state.unbolted = optimized
    report: dict[str, object] = {"policy": bolt.policy, "flags": list(bolt.flags)}
    state.bolt_report = report
    binary_sha = run(
        pipeline.box, ["sha256sum", optimized], log, StepName.BOLT_PROFILE, keep_output=True
    ).split()[0]

    def cache_for(mode: str) -> Path:
        return options.cache_dir / "profiles" / "bolt" / f"{binary_sha}-{mode}.fdata"

    stored: ProfileRecord | None = None
    choice: ModeChoice | None = None
    if bolt.mode != "auto" and not pipeline.retrain:
        # A forced mode whose profile is stored needs no perf at all (reproductions
        # force the locked mode; the machine may not sample like the releasing one).
        stored = load_profile(cache_for(bolt.mode), "BOLT", log.line)
        if stored is not None:
            choice = ModeChoice(bolt.mode, "forced; profile stored for this binary")
    if choice is None:
        pipeline.profiler()  # probes perf access first
        choice = choose_mode(bolt.mode, pipeline.perf.capabilities)
        if bolt.mode == "auto" and not pipeline.retrain:  # a forced one was looked up
            stored = load_profile(cache_for(choice.mode), "BOLT", log.line)
    report |= {"mode": choice.mode, "mode_reason": choice.reason}
    log.line(f"BOLT profile mode: {choice.mode} ({choice.reason})")
    cache = cache_for(choice.mode)
    target = _profile_path(bolt)
    if stored is None:
        _collect_bolt_profile(
            pipeline, bolt, mode=choice.mode, binary=optimized, profile=target, log=log
        )
        fetched = fetch_file(pipeline.box, target, pipeline.scratch)
        details: dict[str, object] = {"mode": choice.mode, "cache_key": cache.stem}
        stored = store_profile(fetched, cache, details)
    else:
        put_file(pipeline.box, target, stored.path.read_bytes())
        log.mark_cached(f"profile for this exact binary ({binary_sha[:12]})")
    state.bolt_profile = stored
    report["profile"] = stored.as_dict()
    log.detail = log.detail or f"mode {choice.mode}, {stored.size} bytes"


def optimize(pipeline: Pipeline, log: StepLog) -> None:
    bolt, state = _bolt(pipeline), pipeline.state
    report = state.bolt_report if state.bolt_report is not None else {}
    main = pipeline.plan.binary
    output = variant_binary("bolt", main)
    run(pipeline.box, ["mkdir", "-p", str(PurePosixPath(output).parent)], log, "bolt-optimize")
    text = run(
        pipeline.box,
        [
            bolt.tools["llvm_bolt"],
            state.unbolted,
            f"-data={_profile_path(bolt)}",
            *bolt.flags,
            "-o",
            output,
        ],
        log,
        StepName.BOLT_OPTIMIZE,
        keep_output=True,
    )
    coverage = parse_report(text)
    report["coverage"] = coverage.as_dict()
    validate_binaries(
        pipeline, {main: output}, log, what="the BOLT-optimized binary", label="bolted"
    )
    log.detail = (
        f"{coverage.profiled_functions}/{coverage.total_functions} functions "
        f"with profile ({coverage.percent}%)"
    )
    report["applied"] = True
    state.shipped = output


def fall_back(pipeline: Pipeline, error: OrchestratorError) -> None:
    """A BOLT step failed: ship the binary without BOLT, or fail under policy require."""
    bolt, state = _bolt(pipeline), pipeline.state
    if bolt.policy == "require":
        raise BoltError(
            f"BOLT failed and bolt.policy is require: {error.message}", hint=error.hint
        ) from error
    pipeline.reporter.warn(
        f"BOLT FAILED, shipping the binary without BOLT (bolt.policy = fallback): {error.message}"
    )
    report = state.bolt_report if state.bolt_report is not None else {}
    report |= {"applied": False, "fallback_reason": error.message}
    state.bolt_report = report
    state.bolt_profile = None
    if state.unbolted:
        state.shipped = state.unbolted


def _collect_bolt_profile(
    pipeline: Pipeline, bolt: BoltPlan, *, mode: str, binary: str, profile: str, log: StepLog
) -> None:
    tools, raw = bolt.tools, f"{bolt.work_dir}/raw"
    box = pipeline.box
    run(box, ["mkdir", "-p", raw], log, "bolt-profile")
    if mode == "instrument":
        instrumented = f"{bolt.work_dir}/instrumented"
        run(
            box,
            [
                tools["llvm_bolt"],
                binary,
                "-instrument",
                f"-instrumentation-file={raw}/profile",
                "-instrumentation-file-append-pid",
                *bolt.instrument_args,
                "-o",
                instrumented,
            ],
            log,
            "bolt-profile",
        )
        run_workloads(pipeline, {pipeline.plan.binary: instrumented}, log, "bolt-profile")
    else:
        events = ["-e", "cycles:u", "-j", "any,u"] if mode == "lbr" else ["-e", "cpu-clock:u"]
        wrap = [
            "perf",
            "record",
            *events,
            "-F",
            PERF_FREQUENCY,
            "-o",
            f"{raw}/perf-{{index}}.data",
            "--",
        ]
        ran = run_workloads(
            pipeline, {pipeline.plan.binary: binary}, log, "bolt-profile", wrap=wrap
        )
        for index in ran:
            argv = [
                tools["perf2bolt"],
                "-p",
                f"{raw}/perf-{index}.data",
                "-o",
                f"{raw}/perf-{index}.fdata",
                binary,
            ]
            if mode == "sample":
                argv.insert(1, "-nl")  # no branch stacks: basic-block samples only
            run(box, argv, log, "bolt-profile")
    run(
        box,
        ["sh", "-c", f'{tools["merge_fdata"]} {raw}/*.fdata > "$0"', profile],
        log,
        "bolt-profile",
    )

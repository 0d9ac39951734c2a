"""The BOLT steps: profile the optimized binary (LBR, sampling or instrumentation), then
rewrite its layout with llvm-bolt and check that it still prints what the baseline does.
BOLT rewrites every binary of package.binaries that a training workload runs, each with
the profile of the workloads that run it (execute/optimize/bolt_others.py for all but the main
one, which wraps these steps); a binary no workload runs ships as the optimized build
made it.

When a BOLT step of the main binary fails and bolt.policy is "fallback", the executor
ships every binary unBOLTed and records why (`fall_back`); with "require" the build
fails. Another binary's failure, under "fallback", leaves only that one unBOLTed.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from orchestrator.errors import BoltError, OrchestratorError, StepFailedError
from orchestrator.execute.steps.commands import fetch_file, put_file, run
from orchestrator.execute.steps.pipeline import Pipeline, run_workloads, variant_binary
from orchestrator.execute.steps.profiles import ProfileRecord, load_profile, store_profile
from orchestrator.execute.steps.step_reuse import look_up, mark_reused, store
from orchestrator.execute.verdict.validate import validate_binaries
from orchestrator.host.step_cache import StepEntry, files_tar
from orchestrator.model.verdict.bolt_report import BoltReport, ModeChoice, choose_mode, parse_report
from orchestrator.plan.bolt import BoltPlan
from orchestrator.plan.step_keys import bolt_optimize_key, bolt_profile_inputs
from orchestrator.plan.steps import StepName
from orchestrator.progress.reporter import StepLog

PERF_FREQUENCY = "10000"  # samples/s: the default 4000 leaves BOLT asking for more
DEBUG_FLAG = "-update-debug-sections"  # rewrite DWARF for the new layout instead of dropping it


def _bolt(pipeline: Pipeline) -> BoltPlan:
    if pipeline.plan.bolt is None:
        raise StepFailedError("internal: a BOLT step in a plan without BOLT")
    return pipeline.plan.bolt


def policy_of(pipeline: Pipeline) -> str:
    """bolt.policy: fallback (ship unBOLTed, say why) or require (fail the build)."""
    return _bolt(pipeline).policy


def work_dir(pipeline: Pipeline, name: str) -> str:
    """Where BOLT works on binary `name`: the main one's folder is the BOLT work folder."""
    bolt = _bolt(pipeline)
    return bolt.work_dir if name == pipeline.plan.binary else f"{bolt.work_dir}/binaries/{name}"


def profile_path(pipeline: Pipeline, name: str) -> str:
    return f"{work_dir(pipeline, name)}/profile.fdata"


def workloads_of(pipeline: Pipeline, name: str) -> int:
    """How many training workloads run binary `name`."""
    plan = pipeline.plan
    return sum(1 for workload in plan.workloads if workload.binary_or(plan.binary) == name)


def profile(pipeline: Pipeline, log: StepLog) -> None:
    """Choose the profile mode, then collect a profile (or reuse the stored one)."""
    bolt, plan, state = _bolt(pipeline), pipeline.plan, pipeline.state
    optimized = state.shipped
    state.unbolted = optimized
    state.unbolted_others = dict(state.others)
    state.bolt_binaries = {plan.binary: {"workloads": workloads_of(pipeline, plan.binary)}}
    report: dict[str, object] = {"policy": bolt.policy, "flags": list(bolt.flags)}
    state.bolt_report = report
    binary_sha = run(
        pipeline.box, ["sha256sum", optimized], log, StepName.BOLT_PROFILE, keep_output=True
    ).split()[0]

    def cache_for(mode: str) -> Path:
        return profile_cache(pipeline, binary_sha, mode)

    stored: ProfileRecord | None = None
    choice: ModeChoice | None = None
    if bolt.mode != "auto" and not pipeline.retrain:
        # A forced mode whose profile is stored needs no perf at all (reproductions
        # force the locked mode; the machine may not sample like the releasing one).
        stored = load_stored(pipeline, bolt.mode, cache_for(bolt.mode), log)
        if stored is not None:
            choice = ModeChoice(bolt.mode, "forced; profile stored for this binary")
    if choice is None:
        pipeline.profiler()  # probes perf access first
        choice = choose_mode(bolt.mode, pipeline.perf.capabilities)
        if bolt.mode == "auto" and not pipeline.retrain:  # a forced one was looked up
            stored = load_stored(pipeline, choice.mode, cache_for(choice.mode), log)
    log.line(f"BOLT profile mode: {choice.mode} ({choice.reason})")
    stored = stored or collect(pipeline, choice.mode, optimized, cache_for(choice.mode), log)
    if choice.mode != "instrument":
        samples = profile_samples(stored.path.read_text(errors="replace"))
        report["sample_gate"] = {"samples": samples, "min_samples": bolt.min_samples}
        if samples < bolt.min_samples and bolt.mode == "auto":
            # Too few samples say little about the hot paths; instrumentation is exact.
            choice = ModeChoice(
                "instrument",
                f"{samples} samples in {choice.mode} mode, fewer than bolt.min_samples "
                f"{bolt.min_samples}: instrumented instead (exact counts)",
            )
            log.line(f"BOLT sample gate: {choice.reason}")
            stored = (
                None
                if pipeline.retrain
                else load_stored(pipeline, "instrument", cache_for("instrument"), log)
            )
            stored = stored or collect(
                pipeline, "instrument", optimized, cache_for("instrument"), log
            )
    report |= {"mode": choice.mode, "mode_reason": choice.reason}
    if stored.cached:
        put_file(pipeline.box, profile_path(pipeline, plan.binary), stored.path.read_bytes())
        log.mark_cached(f"profile for this exact binary ({binary_sha[:12]})")
    state.bolt_profile = stored
    report["profile"] = stored.as_dict()
    log.detail = log.detail or f"mode {choice.mode}, {stored.size} bytes"


def profile_cache(pipeline: Pipeline, binary_sha: str, mode: str) -> Path:
    """Where the profile store keeps the BOLT profile of a binary (by content) and mode."""
    return pipeline.options.cache_dir / "profiles" / "bolt" / f"{binary_sha}-{mode}.fdata"


def profile_samples(fdata: str) -> int:
    """The samples (or branch records) a BOLT profile holds: the count that ends each line
    (`no_lbr` and LBR .fdata alike)."""
    total = 0
    for line in fdata.splitlines():
        fields = line.split()
        if len(fields) > 1 and fields[-1].isdigit():
            total += int(fields[-1])
    return total


def collect(
    pipeline: Pipeline, mode: str, binary: str, cache: Path, log: StepLog, *, name: str = ""
) -> ProfileRecord:
    """A fresh profile in `mode` of binary `name` (the main one unless named; its file is
    `binary`), stored in the cache; it lies at its profile path too."""
    bolt, name = _bolt(pipeline), name or pipeline.plan.binary
    target = profile_path(pipeline, name)
    _collect_bolt_profile(
        pipeline, bolt, mode=mode, name=name, binary=binary, profile=target, log=log
    )
    scratch = pipeline.scratch / (
        f"bolt-{mode}" if name == pipeline.plan.binary else f"bolt-{mode}-{name}"
    )
    scratch.mkdir(exist_ok=True)
    fetched = fetch_file(pipeline.box, target, scratch)
    inputs = bolt_profile_inputs(pipeline.plan, mode, name)
    return store_profile(fetched, cache, {"mode": mode, "cache_key": cache.stem, "inputs": inputs})


def load_stored(
    pipeline: Pipeline, mode: str, cache: Path, log: StepLog, name: str = ""
) -> ProfileRecord | None:
    """The profile stored for this binary and mode, unless it was collected from other
    workloads (or other tools) than those of binary `name` (the main one unless named):
    its record names what it was collected from. A record
    without that (an older one, or seeded by reproduce from an older lock) is used."""
    stored = load_profile(cache, "BOLT", log.warn)
    if stored is None:
        return None
    recorded = stored.details.get("inputs")
    if recorded is not None and recorded != bolt_profile_inputs(pipeline.plan, mode, name):
        log.line(
            f"the stored BOLT profile {cache.name} was collected from other workloads or "
            "tools: profiling again"
        )
        return None
    return stored


def optimize(pipeline: Pipeline, log: StepLog) -> None:
    state, main = pipeline.state, pipeline.plan.binary
    report = state.bolt_report if state.bolt_report is not None else {}
    output, coverage, entry = rewrite(
        pipeline, main, state.unbolted, profile=state.bolt_profile, report=report, log=log
    )
    log.detail = (
        f"{coverage.profiled_functions}/{coverage.total_functions} functions "
        f"with profile ({coverage.percent}%)"
    )
    report["applied"] = True
    state.shipped = state.bolted = output
    state.bolt_binaries.setdefault(main, {}).update(
        applied=True, reason=f"BOLTed with the {report.get('mode')} profile of its workloads"
    )
    if entry is not None:
        mark_reused(pipeline, log, StepName.BOLT_OPTIMIZE, entry)


def rewrite(
    pipeline: Pipeline,
    name: str,
    source: str,
    *,
    profile: ProfileRecord | None,
    report: dict[str, object],
    log: StepLog,
) -> tuple[str, BoltReport, StepEntry | None]:
    """Rewrite binary `name` (at `source`) with its profile, check its debug info, size and
    outputs; where the BOLTed binary is, llvm-bolt's report, and the step cache entry used
    (None: llvm-bolt ran). The findings go into `report`."""
    bolt = _bolt(pipeline)
    output = variant_binary("bolt", name)
    run(pipeline.box, ["mkdir", "-p", str(PurePosixPath(output).parent)], log, "bolt-optimize")
    # Debug info the crate asked for must describe the rewritten code, not the old layout.
    asked_for_debug_info = _has_debug_info(pipeline, source, log)
    keep_debug = [DEBUG_FLAG] if asked_for_debug_info and DEBUG_FLAG not in bolt.flags else []
    argv = [
        bolt.tools["llvm_bolt"],
        source,
        f"-data={profile_path(pipeline, name)}",
        *bolt.flags,
        *keep_debug,
        "-o",
        output,
    ]
    text, entry = _rewrite(pipeline, argv, source=source, profile=profile, output=output, log=log)
    coverage = parse_report(text)
    report["coverage"] = coverage.as_dict()
    report["debug_info"] = _debug_info_verdict(pipeline, asked_for_debug_info, output, log)
    _check_growth(pipeline, source, output, report, log)
    what = "the BOLT-optimized binary"
    if name != pipeline.plan.binary:
        what = f"the BOLT-optimized {name}"
    validate_binaries(pipeline, {name: output}, log, what=what, label="bolted")
    return output, coverage, entry


BOLT_LOG = "llvm-bolt.log"  # llvm-bolt's report of a cached rewrite, read again on reuse


def _rewrite(
    pipeline: Pipeline,
    argv: list[str],
    *,
    source: str,
    profile: ProfileRecord | None,
    output: str,
    log: StepLog,
) -> tuple[str, StepEntry | None]:
    """Run llvm-bolt (`argv`: `source` with `profile`, writing `output`), or put its cached
    output there; its report, and the entry used (None: it ran)."""
    if pipeline.step_cache is None or profile is None:
        return run(pipeline.box, argv, log, StepName.BOLT_OPTIMIZE, keep_output=True), None
    binary_sha = run(
        pipeline.box, ["sha256sum", source], log, StepName.BOLT_OPTIMIZE, keep_output=True
    ).split()[0]
    key = bolt_optimize_key(
        pipeline.plan, binary_sha256=binary_sha, profile_sha256=profile.sha256, argv=argv
    )
    entry = look_up(pipeline, log, StepName.BOLT_OPTIMIZE, key, {})
    name = PurePosixPath(output).name
    if entry is not None:
        folder = str(PurePosixPath(output).parent)
        log.line(f"+ docker cp <step cache {key[:12]}> {output}")
        pipeline.box.put_archive(
            str(PurePosixPath(folder).parent),
            files_tar(PurePosixPath(folder).name, {name: entry.file(name)}),
        )
        return entry.file(BOLT_LOG).read_text(), entry
    text = run(pipeline.box, argv, log, StepName.BOLT_OPTIMIZE, keep_output=True)
    store(
        pipeline,
        log,
        StepName.BOLT_OPTIMIZE,
        key,
        container_files={name: output},
        texts={BOLT_LOG: text},
        inputs={},
    )
    return text, None


def _has_debug_info(pipeline: Pipeline, binary: str, log: StepLog) -> bool:
    """Whether `binary` carries DWARF (.debug_info), as the crate's profile asked."""
    sections = run(
        pipeline.box,
        ["readelf", "--section-headers", "--wide", binary],
        log,
        "bolt-optimize",
        keep_output=True,
    )
    return any(field == ".debug_info" for line in sections.splitlines() for field in line.split())


def _debug_info_verdict(
    pipeline: Pipeline, asked: bool, output: str, log: StepLog
) -> dict[str, object]:
    """What became of the debug info: kept (rewritten for the new layout), none asked for,
    or dropped, which is said loudly: a crash report would then name no function."""
    if not asked:
        return {"asked": False, "kept": False, "note": "the binary BOLT read had none"}
    if _has_debug_info(pipeline, output, log):
        return {"asked": True, "kept": True, "note": f"rewritten by llvm-bolt {DEBUG_FLAG}"}
    note = "llvm-bolt dropped the debug info the crate's profile asked for"
    loud = (
        f"{note.upper()}: the BOLT binary has no .debug_info, the binary it rewrote had. "
        "Set bolt.enabled = false to keep it, or accept symbols only."
    )
    log.warn(loud)
    return {"asked": True, "kept": False, "note": note}


def _check_growth(
    pipeline: Pipeline, before: str, after: str, report: dict[str, object], log: StepLog
) -> None:
    """BOLT must not bloat the binary: more than bolt.max_growth times its input's size
    is a BOLT failure (a 2 MiB-aligned huge-page segment was 7x on tinyllm)."""
    bolt = _bolt(pipeline)
    sizes = run(
        pipeline.box, ["stat", "-c", "%s", before, after], log, "bolt-optimize", keep_output=True
    ).split()
    try:
        size_before, size_after = int(sizes[-2]), int(sizes[-1])
    except (IndexError, ValueError):
        raise StepFailedError(f"cannot read the sizes of {before} and {after}: {sizes}") from None
    growth = size_after / size_before
    report["size"] = {"before": size_before, "after": size_after, "growth": round(growth, 3)}
    if growth > bolt.max_growth:
        raise BoltError(
            f"BOLT made the binary {growth:.2f}x larger ({size_before:,} -> {size_after:,} "
            f"bytes), more than bolt.max_growth {bolt.max_growth}",
            hint="Keep -no-huge-pages and -use-old-text in bolt.flags, or raise "
            "bolt.max_growth if the size is worth it.",
        )


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
    state.bolted = ""
    if state.unbolted:
        state.shipped = state.unbolted


def _keep_converted(
    converted: list[str], refused: list[tuple[str, StepFailedError]], log: StepLog
) -> None:
    """A short workload may end before perf takes one sample of the binary, and perf2bolt
    then refuses its recording ("failed to match build-id ... or there were no samples"):
    the profile is made of the recordings it converted. None converted: BOLT has nothing."""
    if refused and not converted:
        raise refused[0][1]
    for recording, error in refused:
        log.warn(
            f"BOLT's profile leaves out {recording}: perf2bolt could not convert its "
            f"recording ({error}; usually no sample of the binary in a run that short)"
        )


def _collect_bolt_profile(
    pipeline: Pipeline,
    bolt: BoltPlan,
    *,
    mode: str,
    name: str,
    binary: str,
    profile: str,
    log: StepLog,
) -> None:
    """Profile binary `name` (its file: `binary`) with the workloads that run it."""
    folder = work_dir(pipeline, name)
    tools, raw = bolt.tools, f"{folder}/raw"
    box = pipeline.box
    # Empty: a sampled profile refused by the sample gate must not merge into this one.
    run(box, ["rm", "-rf", raw], log, "bolt-profile")
    run(box, ["mkdir", "-p", raw], log, "bolt-profile")
    if mode == "instrument":
        instrumented = f"{folder}/instrumented"
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
        run_workloads(pipeline, {name: instrumented}, log, "bolt-profile")
    else:
        events = ["-e", "cycles:u", "-j", "any,u"] if mode == "lbr" else ["-e", "cpu-clock:u"]
        converted: list[str] = []
        refused: list[tuple[str, StepFailedError]] = []
        for repeat in range(bolt.sample_repeat):  # more samples from the same workloads
            wrap = [
                "perf",
                "record",
                *events,
                "-F",
                PERF_FREQUENCY,
                "-o",
                f"{raw}/perf-{{index}}-{repeat}.data",
                "--",
            ]
            ran = run_workloads(pipeline, {name: binary}, log, "bolt-profile", wrap=wrap)
            for index in ran:
                argv = [
                    tools["perf2bolt"],
                    "-p",
                    f"{raw}/perf-{index}-{repeat}.data",
                    "-o",
                    f"{raw}/perf-{index}-{repeat}.fdata",
                    binary,
                ]
                if mode == "sample":
                    argv.insert(1, "-nl")  # no branch stacks: basic-block samples only
                recording = f"workload {index + 1}, round {repeat + 1}"
                try:
                    run(box, argv, log, "bolt-profile")
                    converted.append(recording)
                except StepFailedError as error:
                    refused.append((recording, error))
                    run(
                        box, ["rm", "-f", f"{raw}/perf-{index}-{repeat}.fdata"], log, "bolt-profile"
                    )
        _keep_converted(converted, refused, log)
    run(
        box,
        ["sh", "-c", f'{tools["merge_fdata"]} {raw}/*.fdata > "$0"', profile],
        log,
        "bolt-profile",
    )

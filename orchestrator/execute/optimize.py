"""PGO and BOLT, executed: instrument, train, merge; profile, optimize, fall back.

Profiles are release inputs: stored in the cache under the hash of what they depend on,
reused when that is unchanged, and refused when their bytes no longer match the record.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.errors import (
    BoltError,
    OrchestratorError,
    ProfileError,
)
from orchestrator.execute.pipeline import (
    BIN_DIR,
    Pipeline,
    cargo,
    fetch_file,
    put_file,
    run,
    run_workloads,
    validate_binary,
)
from orchestrator.model.bolt_report import ModeChoice, choose_mode, parse_report
from orchestrator.model.hashing import sha256_file
from orchestrator.model.pgo_report import parse_profdata_show
from orchestrator.plan.build_plan import (
    BoltPlan,
    PgoPlan,
)
from orchestrator.progress import StepLog

PERF_FREQUENCY = "10000"  # samples/s: the default 4000 leaves BOLT asking for more


@dataclass
class ProfileRecord:
    """A stored profile: content hash, size and what we know about it."""

    path: Path
    sha256: str
    size: int
    cached: bool
    details: dict[str, object] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return {
            "sha256": self.sha256,
            "size": self.size,
            "reused_from_cache": self.cached,
            **self.details,
        }


def store_profile(source: Path, cache: Path, details: dict[str, object]) -> ProfileRecord:
    """Move a fresh profile into the cache atomically, with a sidecar of its hash."""
    cache.parent.mkdir(parents=True, exist_ok=True)
    digest = sha256_file(source)
    partial = cache.with_suffix(".partial")
    shutil.copyfile(source, partial)
    partial.replace(cache)
    meta = {"sha256": digest, "size": cache.stat().st_size, **details}
    cache.with_suffix(".json").write_text(json.dumps(meta, indent=1) + "\n")
    return ProfileRecord(cache, digest, cache.stat().st_size, False, details)


def load_profile(cache: Path, what: str) -> ProfileRecord | None:
    meta_path = cache.with_suffix(".json")
    if not cache.is_file() or not meta_path.is_file():
        return None
    meta = json.loads(meta_path.read_text())
    digest = sha256_file(cache)
    if digest != meta.get("sha256"):
        # A profile is a release input: silently retraining would change the binary.
        raise ProfileError(
            f"the stored {what} profile {cache} does not match its recorded sha256 "
            f"({digest[:12]} != {str(meta.get('sha256'))[:12]}): it was altered or corrupted",
            hint="Run the build with --retrain to profile again (or remove the file).",
        )
    details = {k: v for k, v in meta.items() if k not in ("sha256", "size")}
    return ProfileRecord(cache, digest, cache.stat().st_size, True, details)


def run_pgo(pipeline: Pipeline, pgo: PgoPlan) -> ProfileRecord:
    plan, options = pipeline.plan, pipeline.options
    cache = options.cache_dir / "profiles" / "pgo" / f"{pgo.profile_key}.profdata"
    stored = None if pipeline.retrain else load_profile(cache, "PGO")
    if stored is not None:
        for name in ("pgo-instrument", "pgo-train"):
            with pipeline.step(name) as log:
                log.mark_cached(f"profile {stored.sha256[:12]} unchanged inputs")
        with pipeline.step("pgo-merge") as log:
            put_file(pipeline.box, pgo.merged, stored.path.read_bytes())
            log.mark_cached(f"{stored.size} bytes, sha256 {stored.sha256[:12]}")
        return stored

    with pipeline.step("pgo-instrument") as log:
        cargo(pipeline.box, plan.variants["pgo-generate"].build, log, "pgo-instrument")
        binary = pipeline.copy_binary("pgo-generate", log)
    with pipeline.step("pgo-train") as log:
        run(pipeline.box, ["mkdir", "-p", pgo.raw_dir], log, "pgo-train")
        run_workloads(
            pipeline,
            binary,
            log,
            "pgo-train",
            environment={"LLVM_PROFILE_FILE": pgo.profile_file_pattern},
        )
    with pipeline.step("pgo-merge") as log:
        listing = run(
            pipeline.box,
            ["find", pgo.raw_dir, "-name", "*.profraw", "-type", "f"],
            log,
            "pgo-merge",
            keep_output=True,
        )
        raw_files = [line for line in listing.splitlines() if line.strip()]
        if not raw_files:
            raise ProfileError(
                "training wrote no .profraw file: the instrumented binary never reached exit",
                hint="Workloads must exit normally (a process killed or aborting writes no "
                "profile).",
            )
        run(pipeline.box, pgo.merge_argv, log, "pgo-merge")
        summary = parse_profdata_show(
            run(pipeline.box, pgo.show_argv, log, "pgo-merge", keep_output=True)
        )
        fetched = fetch_file(pipeline.box, pgo.merged, pipeline.scratch)
        record = store_profile(fetched, cache, {"raw_files": len(raw_files), **summary.as_dict()})
        log.detail = (
            f"{len(raw_files)} .profraw -> {record.size} bytes, {summary.functions} functions"
        )
    return record


@dataclass(frozen=True)
class BoltOutcome:
    binary: str  # what to ship: the BOLTed binary, or the input on fallback
    report: dict[str, object]
    profile: ProfileRecord | None


def run_bolt(pipeline: Pipeline, bolt: BoltPlan, optimized: str) -> BoltOutcome:
    """Profile and optimize with BOLT; return the binary to ship and what happened."""
    options = pipeline.options
    tools = bolt.tools
    report: dict[str, object] = {"policy": bolt.policy, "flags": list(bolt.flags)}
    stored: ProfileRecord | None = None
    try:
        with pipeline.step("bolt-profile") as log:
            binary_sha = run(
                pipeline.box, ["sha256sum", optimized], log, "bolt-profile", keep_output=True
            ).split()[0]
            profile = f"{bolt.work_dir}/profile.fdata"

            def cache_for(mode: str) -> Path:
                return options.cache_dir / "profiles" / "bolt" / f"{binary_sha}-{mode}.fdata"

            choice: ModeChoice | None = None
            if bolt.mode != "auto" and not pipeline.retrain:
                # A forced mode whose profile is stored needs no perf at all (reproductions
                # force the locked mode; the machine may not sample like the releasing one).
                stored = load_profile(cache_for(bolt.mode), "BOLT")
                if stored is not None:
                    choice = ModeChoice(bolt.mode, "forced; profile stored for this binary")
            if choice is None:
                pipeline.profiler()  # probes perf access first
                choice = choose_mode(bolt.mode, pipeline.perf.capabilities)
                if bolt.mode == "auto" and not pipeline.retrain:  # a forced one was looked up
                    stored = load_profile(cache_for(choice.mode), "BOLT")
            report |= {"mode": choice.mode, "mode_reason": choice.reason}
            log.line(f"BOLT profile mode: {choice.mode} ({choice.reason})")
            cache = cache_for(choice.mode)
            if stored is None:
                _collect_bolt_profile(
                    pipeline, bolt, mode=choice.mode, binary=optimized, profile=profile, log=log
                )
                fetched = fetch_file(pipeline.box, profile, pipeline.scratch)
                details: dict[str, object] = {"mode": choice.mode, "cache_key": cache.stem}
                stored = store_profile(fetched, cache, details)
            else:
                put_file(pipeline.box, profile, stored.path.read_bytes())
                log.mark_cached(f"profile for this exact binary ({binary_sha[:12]})")
            report["profile"] = stored.as_dict()
            log.detail = log.detail or f"mode {choice.mode}, {stored.size} bytes"
        with pipeline.step("bolt-optimize") as log:
            output = f"{BIN_DIR}/optimized.bolt"
            text = run(
                pipeline.box,
                [tools["llvm_bolt"], optimized, f"-data={profile}", *bolt.flags, "-o", output],
                log,
                "bolt-optimize",
                keep_output=True,
            )
            coverage = parse_report(text)
            report["coverage"] = coverage.as_dict()
            validate_binary(pipeline, output, log, what="the BOLT-optimized binary")
            log.detail = (
                f"{coverage.profiled_functions}/{coverage.total_functions} functions "
                f"with profile ({coverage.percent}%)"
            )
    except OrchestratorError as exc:
        if bolt.policy == "require":
            raise BoltError(
                f"BOLT failed and bolt.policy is require: {exc.message}", hint=exc.hint
            ) from exc
        pipeline.reporter.warn(
            f"BOLT FAILED, shipping the binary without BOLT (bolt.policy = fallback): {exc.message}"
        )
        report |= {"applied": False, "fallback_reason": exc.message}
        return BoltOutcome(optimized, report, None)
    report["applied"] = True
    return BoltOutcome(output, report, stored)


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
        run_workloads(pipeline, instrumented, log, "bolt-profile")
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
        run_workloads(pipeline, binary, log, "bolt-profile", wrap=wrap)
        for index in range(len(pipeline.plan.workloads)):
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

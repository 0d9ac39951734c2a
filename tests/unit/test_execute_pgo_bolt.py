"""The PGO and BOLT steps through the fake Engine: stored profiles reused (and refused when
altered), fresh profiles collected with the right commands, BOLT's fallback policy."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from orchestrator.errors import BoltError, ProfileError, StepFailedError, ValidationError
from orchestrator.execute.optimize import bolt, pgo
from orchestrator.execute.steps import pipeline as pipeline_module
from orchestrator.execute.steps.pipeline import BIN_DIR
from orchestrator.execute.steps.profiles import store_profile
from orchestrator.model.documents.cache_records import ProfileSidecar
from orchestrator.model.documents.records import read_record
from orchestrator.model.layout import PATHS
from orchestrator.model.verdict.bolt_report import PerfCapabilities
from orchestrator.plan.step_keys import bolt_profile_inputs
from orchestrator.plan.steps import StepName
from orchestrator.runtime.engine import Privileges
from orchestrator.runtime.perf import PerfAccess

from .execute_rig import Rig, answers, make_options, make_rig, untar
from .fakes import FakeEngine

SHOW = ["Total functions: 40", "Maximum function count: 9", "Total count: 1234"]
RAW = ["/build/out/pgo/raw/demo_11.profraw", "/build/out/pgo/raw/demo_12.profraw", ""]
BINARY_SHA = "5e" * 32
BOLT_INFO = (
    "BOLT-INFO: 950 out of 1000 functions in the binary (95.0%) have non-empty execution profile"
)


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


def _pgo_rig(project: Path, stack: ExitStack, tmp_path: Path, **changes: object) -> Rig:
    engine = FakeEngine(
        responder=answers(("find", 0, RAW), ("show", 0, SHOW)),
        missing=lambda path: b"merged profile",
    )
    return make_rig(make_options(project, bolt=False, **changes), stack, tmp_path, engine=engine)


def _pgo_cache(rig: Rig) -> Path:
    plan = rig.pipeline.plan
    assert plan.pgo is not None
    return rig.pipeline.options.cache_dir / "profiles" / "pgo" / f"{plan.pgo.profile_key}.profdata"


def _run_pgo(rig: Rig) -> list[str]:
    """The three PGO steps as run_steps runs them; their statuses."""
    reporter = rig.pipeline.reporter
    for name, executor in (
        (StepName.PGO_INSTRUMENT, pgo.instrument),
        (StepName.PGO_TRAIN, pgo.train),
        (StepName.PGO_MERGE, pgo.merge),
    ):
        with reporter.step(name, name) as log:
            executor(rig.pipeline, log)
    return [r.status for r in reporter.results]


def _store(tmp_path: Path, cache: Path, data: bytes, details: dict[str, object]) -> None:
    source = tmp_path / "fresh"
    source.write_bytes(data)
    store_profile(source, cache, details)


# -- PGO ---------------------------------------------------------------------------------
def test_a_stored_profile_makes_all_three_pgo_steps_cached(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig = _pgo_rig(project, stack, tmp_path)
    _store(tmp_path, _pgo_cache(rig), b"stored profile", {"functions": 12})
    assert _run_pgo(rig) == ["cached", "cached", "cached"]
    plan = rig.pipeline.plan
    assert plan.pgo is not None
    assert rig.box.argvs == [("mkdir", "-p", "/build/out/pgo")]  # only the put
    # the merged.profdata the optimized build reads
    assert [(parent, untar(data)) for parent, data in rig.box.puts] == [
        ("/build/out/pgo", {"merged.profdata": b"stored profile"})
    ]
    record = rig.pipeline.state.pgo
    assert record is not None and record.cached and record.details == {"functions": 12}
    assert not rig.pipeline.profiler_started


def test_a_fresh_profile_is_instrumented_trained_merged_and_stored(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig = _pgo_rig(project, stack, tmp_path)
    assert _run_pgo(rig) == ["ok", "ok", "ok"]
    plan = rig.pipeline.plan
    assert plan.pgo is not None
    generate = plan.variants["pgo-generate"]
    assert rig.box.argvs == [
        generate.build.argv,
        ("mkdir", "-p", f"{BIN_DIR}/pgo-generate"),
        ("cp", generate.binary, f"{BIN_DIR}/pgo-generate/"),
        ("mkdir", "-p", plan.pgo.raw_dir),
        ("find", plan.pgo.raw_dir, "-name", "*.profraw", "-type", "f"),
        plan.pgo.merge_argv,
        plan.pgo.show_argv,
    ]
    profiler = rig.engine.containers[-1]
    assert profiler.spec.purpose == "profile"
    assert profiler.argvs == [(f"{BIN_DIR}/pgo-generate/demo", "--help")]
    assert profiler.execs[0].environment == {"LLVM_PROFILE_FILE": plan.pgo.profile_file_pattern}
    assert profiler.execs[0].workdir == PATHS.src  # relative paths reach the crate's files
    cache = _pgo_cache(rig)
    assert cache.read_bytes() == b"merged profile"
    sidecar = read_record(cache.with_suffix(".json"), ProfileSidecar)
    record = rig.pipeline.state.pgo
    assert record is not None and not record.cached
    assert (sidecar.sha256, sidecar.size) == (record.sha256, 14)
    assert sidecar.details == {
        "raw_files": 2,
        "functions": 40,
        "max_function_count": 9,
        "total_count": 1234,
    }
    assert rig.pipeline.reporter.results[-1].detail == "2 .profraw -> 14 bytes, 40 functions"


def test_workloads_get_the_train_env_and_stdin_and_a_different_profile_key(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    (project / "crate" / "corpus.txt").write_text("the quick brown fox\n")
    plain = _pgo_rig(project, stack, tmp_path).pipeline.plan
    rig = _pgo_rig(project, stack, tmp_path, run_env=("MODE=train",), run_stdin="corpus.txt")
    _run_pgo(rig)
    plan = rig.pipeline.plan
    assert plan.pgo is not None and plain.pgo is not None
    profiler = rig.engine.containers[-1]
    (workload,) = profiler.execs
    assert workload.argv == (
        "/bin/sh",
        "-c",
        'f=$1; shift; exec "$@" < "$f"',
        "sh",
        f"{PATHS.src}/corpus.txt",
        f"{BIN_DIR}/pgo-generate/demo",
        "--help",
    )
    assert workload.environment == {
        "MODE": "train",
        "LLVM_PROFILE_FILE": plan.pgo.profile_file_pattern,
    }
    # What the workloads see is part of what the profile depends on.
    assert plan.pgo.profile_key != plain.pgo.profile_key


def test_training_that_leaves_no_profraw_is_a_profile_error(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig = _pgo_rig(project, stack, tmp_path)
    rig.engine.responder = answers(("find", 0, ["", "  "]))
    with pytest.raises(ProfileError, match=r"no \.profraw file"):
        _run_pgo(rig)
    assert not _pgo_cache(rig).exists()
    assert rig.pipeline.plan.pgo is not None
    assert rig.pipeline.plan.pgo.merge_argv not in rig.box.argvs


def test_a_tampered_stored_profile_is_refused_unless_retraining(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig = _pgo_rig(project, stack, tmp_path)
    cache = _pgo_cache(rig)
    _store(tmp_path, cache, b"stored profile", {})
    cache.write_bytes(b"altered profile")
    with pytest.raises(ProfileError, match="does not match its recorded sha256"):
        pgo.instrument(rig.pipeline, rig.log)
    rig.pipeline.retrain = True
    pgo.instrument(rig.pipeline, rig.log)
    assert rig.pipeline.state.pgo is None
    assert rig.box.argvs[0] == rig.pipeline.plan.variants["pgo-generate"].build.argv


def test_pgo_steps_in_a_plan_without_pgo_are_an_internal_error(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig = make_rig(make_options(project, pgo=False), stack, tmp_path)
    with pytest.raises(StepFailedError, match="plan without PGO"):
        pgo.merge(rig.pipeline, rig.log)


# -- BOLT --------------------------------------------------------------------------------
READELF = "readelf --section-headers --wide"
DEBUG_SECTIONS = [
    "  [28] .debug_info       PROGBITS        0000000000000000 0f1a2c 02b3f1 00      0   0  1",
    "  [29] .debug_line       PROGBITS        0000000000000000 11d01d 00a001 00      0   0  1",
]


def _bolt_rig(
    project: Path,
    stack: ExitStack,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    **changes: object,
) -> tuple[Rig, list[str]]:
    """A BOLT plan whose optimized binary is built; the list records perf probes."""
    probes: list[str] = []
    capabilities = changes.pop("perf", PerfCapabilities(lbr=False, sampling=False, grant="none"))
    sizes = changes.pop("sizes", ["1000000", "1100000"])  # `stat -c %s` before, after BOLT
    assert isinstance(sizes, list)
    # `readelf --section-headers` of the binary BOLT reads and of what it writes
    sections = changes.pop("sections", ([], []))
    assert isinstance(sections, tuple)
    first_rules = changes.pop("answers", ())  # rules asked before the usual ones
    assert isinstance(first_rules, tuple)

    def access(engine: object, image: str, *, allowed: bool, **_cache: object) -> PerfAccess:
        probes.append(image)
        assert isinstance(capabilities, PerfCapabilities)
        return PerfAccess(Privileges(cap_add=("PERFMON",)), capabilities)

    monkeypatch.setattr(pipeline_module, "find_perf_access", access)
    engine = FakeEngine(
        responder=answers(
            *first_rules,
            (f"{READELF} {BIN_DIR}/optimized", 0, sections[0]),
            (f"{READELF} {BIN_DIR}/bolt/demo", 0, sections[1]),
            ("sha256sum", 0, [f"{BINARY_SHA}  {BIN_DIR}/optimized"]),
            ("-o /build/out/bin/bolt/demo", 0, ["BOLT-INFO: first line", BOLT_INFO]),
            ("stat -c %s", 0, sizes),
            ("--version", 0, ["demo 1.2.3"]),
        ),
        missing=lambda path: b"fdata profile",
    )
    rig = make_rig(make_options(project, pgo=False, **changes), stack, tmp_path, engine=engine)
    rig.pipeline.state.shipped = f"{BIN_DIR}/optimized"
    return rig, probes


VALIDATED = "/build/out/validate"
CAPTURE = ("/bin/sh", "-c", 'o=$1; e=$2; shift 2; exec "$@" > "$o" 2> "$e"', "sh")


def _bolt_cache(rig: Rig, mode: str) -> Path:
    cache = rig.pipeline.options.cache_dir / "profiles" / "bolt"
    return cache / f"{BINARY_SHA}-{mode}.fdata"


def test_a_forced_mode_with_a_stored_profile_needs_no_perf(
    project: Path, stack: ExitStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig, probes = _bolt_rig(project, stack, tmp_path, monkeypatch, bolt_mode="lbr")
    _store(tmp_path, _bolt_cache(rig, "lbr"), b"stored fdata", {"mode": "lbr"})
    bolt.profile(rig.pipeline, rig.log)
    assert probes == [] and not rig.pipeline.profiler_started
    assert [(parent, untar(data)) for parent, data in rig.box.puts] == [
        ("/build/out/bolt", {"profile.fdata": b"stored fdata"})
    ]
    assert rig.box.argvs == [
        ("sha256sum", f"{BIN_DIR}/optimized"),
        ("mkdir", "-p", "/build/out/bolt"),
    ]
    report = rig.pipeline.state.bolt_report
    assert report is not None
    assert (report["mode"], report["mode_reason"]) == (
        "lbr",
        "forced; profile stored for this binary",
    )
    assert report["profile"]["reused_from_cache"] is True  # type: ignore[index]
    assert rig.log.cached
    assert rig.pipeline.state.unbolted == f"{BIN_DIR}/optimized"


def test_instrument_mode_instruments_runs_the_workloads_and_merges(
    project: Path, stack: ExitStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig, probes = _bolt_rig(project, stack, tmp_path, monkeypatch, bolt_mode="instrument")
    bolt.profile(rig.pipeline, rig.log)
    plan = rig.pipeline.plan
    assert plan.bolt is not None
    tools, raw = plan.bolt.tools, "/build/out/bolt/raw"
    assert probes == []  # instrumentation needs no perf access
    assert rig.box.argvs[1:] == [
        ("rm", "-rf", raw),
        ("mkdir", "-p", raw),
        (
            tools["llvm_bolt"],
            f"{BIN_DIR}/optimized",
            "-instrument",
            f"-instrumentation-file={raw}/profile",
            "-instrumentation-file-append-pid",
            *plan.bolt.instrument_args,
            "-o",
            "/build/out/bolt/instrumented",
        ),
        (
            "sh",
            "-c",
            f'{tools["merge_fdata"]} {raw}/*.fdata > "$0"',
            "/build/out/bolt/profile.fdata",
        ),
    ]
    assert rig.engine.containers[-1].argvs == [("/build/out/bolt/instrumented", "--help")]
    stored = _bolt_cache(rig, "instrument")
    assert stored.read_bytes() == b"fdata profile"
    assert read_record(stored.with_suffix(".json"), ProfileSidecar).details == {
        "mode": "instrument",
        "cache_key": stored.stem,
        # what it was collected from: another set of workloads profiles again
        "inputs": bolt_profile_inputs(rig.pipeline.plan, "instrument"),
    }
    assert rig.log.detail == "mode instrument, 13 bytes"


@pytest.mark.parametrize(
    ("capabilities", "mode", "events", "no_lbr"),
    [
        (
            PerfCapabilities(True, True, "cap-add PERFMON"),
            "lbr",
            ("-e", "cycles:u", "-j", "any,u"),
            (),
        ),
        (
            PerfCapabilities(False, True, "cap-add PERFMON"),
            "sample",
            ("-e", "cpu-clock:u"),
            ("-nl",),
        ),
    ],
)
def test_auto_mode_samples_with_perf_and_converts_with_perf2bolt(
    project: Path,
    stack: ExitStack,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capabilities: PerfCapabilities,
    mode: str,
    events: tuple[str, ...],
    no_lbr: tuple[str, ...],
) -> None:
    rig, probes = _bolt_rig(
        project, stack, tmp_path, monkeypatch, perf=capabilities, bolt_min_samples=0
    )
    bolt.profile(rig.pipeline, rig.log)
    plan = rig.pipeline.plan
    assert plan.bolt is not None and plan.bolt.mode == "auto"
    assert len(probes) == 1
    raw, binary = "/build/out/bolt/raw", f"{BIN_DIR}/optimized"
    profiler = rig.engine.containers[-1]
    assert profiler.spec.privileges == Privileges(cap_add=("PERFMON",))
    assert profiler.argvs == [
        (
            "perf",
            "record",
            *events,
            "-F",
            "10000",
            "-o",
            f"{raw}/perf-0-0.data",
            "--",
            binary,
            "--help",
        )
    ]
    perf2bolt = (
        plan.bolt.tools["perf2bolt"],
        *no_lbr,
        "-p",
        f"{raw}/perf-0-0.data",
        "-o",
        f"{raw}/perf-0-0.fdata",
        binary,
    )
    assert perf2bolt in rig.box.argvs
    assert rig.pipeline.state.bolt_report is not None
    assert rig.pipeline.state.bolt_report["mode"] == mode
    assert _bolt_cache(rig, mode).is_file()


NO_SAMPLES = ["PERF2BOLT-ERROR: failed to match build-id from perf output."]


def test_a_recording_perf2bolt_cannot_convert_is_left_out_with_a_warning(
    project: Path, stack: ExitStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run too short for one sample of the binary: its round is left out, the rest is
    the profile (a sumtool fixture's short workload did this, now and then)."""
    sample = PerfCapabilities(False, True, "cap-add PERFMON")
    second_round = "-p /build/out/bolt/raw/perf-0-1.data"
    rig, _ = _bolt_rig(
        project,
        stack,
        tmp_path,
        monkeypatch,
        perf=sample,
        bolt_min_samples=0,
        bolt_sample_repeat=2,
        answers=((second_round, 1, NO_SAMPLES),),
    )
    bolt.profile(rig.pipeline, rig.log)
    assert ("rm", "-f", "/build/out/bolt/raw/perf-0-1.fdata") in rig.box.argvs
    assert "BOLT's profile leaves out workload 1, round 2" in rig.text
    assert any("merge-fdata" in " ".join(argv) for argv in rig.box.argvs)
    assert rig.pipeline.state.bolt_report is not None


def test_no_recording_perf2bolt_converts_fails_the_profile(
    project: Path, stack: ExitStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sample = PerfCapabilities(False, True, "cap-add PERFMON")
    rig, _ = _bolt_rig(
        project,
        stack,
        tmp_path,
        monkeypatch,
        perf=sample,
        bolt_min_samples=0,
        bolt_sample_repeat=2,
        bolt_mode="sample",
        answers=(("-p /build/out/bolt/raw/perf-", 1, NO_SAMPLES),),
    )
    with pytest.raises(StepFailedError, match="step bolt-profile"):
        bolt.profile(rig.pipeline, rig.log)
    assert not any("merge-fdata" in " ".join(argv) for argv in rig.box.argvs)


def test_auto_mode_reuses_the_profile_stored_for_the_chosen_mode(
    project: Path, stack: ExitStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sample = PerfCapabilities(False, True, "cap-add PERFMON")
    rig, probes = _bolt_rig(project, stack, tmp_path, monkeypatch, perf=sample)
    stored = b"no_lbr\n1 main 4a 15000\n1 main 7c 9000\n"  # 24000 samples: enough
    _store(tmp_path, _bolt_cache(rig, "sample"), stored, {"mode": "sample"})
    bolt.profile(rig.pipeline, rig.log)
    assert len(probes) == 1 and rig.pipeline.profiler_started
    assert rig.engine.containers[-1].argvs == []  # no workload ran
    assert rig.log.cached
    assert rig.pipeline.state.bolt_profile is not None
    assert (
        rig.pipeline.state.bolt_profile.sha256
        == read_record(_bolt_cache(rig, "sample").with_suffix(".json"), ProfileSidecar).sha256
    )


def test_too_few_samples_make_auto_mode_instrument_and_say_why(
    project: Path, stack: ExitStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """831 samples (a real CLI's profile) say little: auto mode instruments instead."""
    sample = PerfCapabilities(False, True, "cap-add PERFMON")
    rig, _ = _bolt_rig(project, stack, tmp_path, monkeypatch, perf=sample, bolt_sample_repeat=2)
    rig.engine.missing = lambda path: b"no_lbr\n1 main 4a 800\n1 main 7c 31\n"
    bolt.profile(rig.pipeline, rig.log)
    report = rig.pipeline.state.bolt_report
    assert report is not None
    assert report["sample_gate"] == {"samples": 831, "min_samples": 20000}
    assert report["mode"] == "instrument"
    assert "831 samples in sample mode, fewer than bolt.min_samples 20000" in str(
        report["mode_reason"]
    )
    ran = [argv[:2] for argv in rig.engine.containers[-1].argvs]
    # Sampled twice (bolt.sample_repeat = 2), then the instrumented binary ran.
    assert ran == [
        ("perf", "record"),
        ("perf", "record"),
        ("/build/out/bolt/instrumented", "--help"),
    ]
    box = rig.box.argvs
    instrumented = next(i for i, argv in enumerate(box) if "-instrument" in argv)
    # The sampled .fdata files are gone before the instrumented profile is merged.
    assert box[instrumented - 2 : instrumented] == [
        ("rm", "-rf", "/build/out/bolt/raw"),
        ("mkdir", "-p", "/build/out/bolt/raw"),
    ]
    assert _bolt_cache(rig, "instrument").is_file() and _bolt_cache(rig, "sample").is_file()


def test_a_forced_sample_mode_keeps_its_profile_and_records_the_count(
    project: Path, stack: ExitStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sample = PerfCapabilities(False, True, "cap-add PERFMON")
    rig, _ = _bolt_rig(project, stack, tmp_path, monkeypatch, perf=sample, bolt_mode="sample")
    rig.engine.missing = lambda path: b"no_lbr\n1 main 4a 12\n"
    bolt.profile(rig.pipeline, rig.log)
    report = rig.pipeline.state.bolt_report
    assert report is not None and report["mode"] == "sample"
    assert report["sample_gate"] == {"samples": 12, "min_samples": 20000}
    assert bolt.profile_samples("1 a 1 1 b 2 0 7\n1 a 3 1 b 4 1 5\n") == 12  # LBR lines


def test_optimize_runs_llvm_bolt_then_validates_and_ships_the_result(
    project: Path, stack: ExitStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig, _ = _bolt_rig(project, stack, tmp_path, monkeypatch, validate_command=("--version",))
    state = rig.pipeline.state
    state.unbolted, state.bolt_report = f"{BIN_DIR}/optimized", {"policy": "fallback"}
    bolt.optimize(rig.pipeline, rig.log)
    plan = rig.pipeline.plan
    assert plan.bolt is not None
    bolted = f"{BIN_DIR}/bolt/demo"
    assert rig.box.argvs == [
        ("mkdir", "-p", f"{BIN_DIR}/bolt"),
        (*READELF.split(), f"{BIN_DIR}/optimized"),
        (
            plan.bolt.tools["llvm_bolt"],
            f"{BIN_DIR}/optimized",
            "-data=/build/out/bolt/profile.fdata",
            *plan.bolt.flags,
            "-o",
            bolted,
        ),
        ("stat", "-c", "%s", f"{BIN_DIR}/optimized", bolted),
        ("mkdir", "-p", "/build/out/validate"),
        (
            *CAPTURE,
            f"{VALIDATED}/baseline-0.stdout",
            f"{VALIDATED}/baseline-0.stderr",
            f"{BIN_DIR}/baseline/demo",
            "--version",
        ),
        ("mkdir", "-p", "/build/out/validate"),
        (  # the baseline again: a command that prints the same twice can be compared
            *CAPTURE,
            f"{VALIDATED}/baseline-0-again.stdout",
            f"{VALIDATED}/baseline-0-again.stderr",
            f"{BIN_DIR}/baseline/demo",
            "--version",
        ),
        ("mkdir", "-p", "/build/out/validate"),
        (
            *CAPTURE,
            f"{VALIDATED}/bolted-0.stdout",
            f"{VALIDATED}/bolted-0.stderr",
            bolted,
            "--version",
        ),
    ]
    assert state.shipped == bolted
    assert state.bolt_report["applied"] is True
    assert state.bolt_report["coverage"] == {
        "profiled_functions": 950,
        "total_functions": 1000,
        "percent": 95.0,
    }
    assert rig.log.detail == "950/1000 functions with profile (95.0%)"
    assert state.bolt_report["debug_info"] == {  # none to keep: none asked
        "asked": False,
        "kept": False,
        "note": "the binary BOLT read had none",
    }


@pytest.mark.parametrize("kept", [True, False])
def test_debug_info_the_crate_asked_for_is_rewritten_or_its_loss_said_loudly(
    project: Path, stack: ExitStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kept: bool
) -> None:
    after = DEBUG_SECTIONS if kept else []
    rig, _ = _bolt_rig(project, stack, tmp_path, monkeypatch, sections=(DEBUG_SECTIONS, after))
    state = rig.pipeline.state
    state.unbolted, state.bolt_report = f"{BIN_DIR}/optimized", {"policy": "fallback"}
    bolt.optimize(rig.pipeline, rig.log)
    [bolt_argv] = [argv for argv in rig.box.argvs if "-data=/build/out/bolt/profile.fdata" in argv]
    assert bolt_argv[-3:] == ("-update-debug-sections", "-o", f"{BIN_DIR}/bolt/demo")
    assert (f"{READELF} {BIN_DIR}/bolt/demo").split() == list(
        next(
            argv
            for argv in rig.box.argvs
            if argv[-1] == f"{BIN_DIR}/bolt/demo" and "readelf" in argv
        )
    )
    verdict = state.bolt_report["debug_info"]
    assert isinstance(verdict, dict)
    assert verdict["asked"] is True and verdict["kept"] is kept
    loud = "LLVM-BOLT DROPPED THE DEBUG INFO THE CRATE'S PROFILE ASKED FOR"
    assert (loud in rig.text) is not kept


def test_a_bolted_binary_past_max_growth_is_a_bolt_failure(
    project: Path, stack: ExitStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tinyllm grew 7x with BOLT's huge-page segment: past bolt.max_growth, BOLT failed."""
    rig, _ = _bolt_rig(project, stack, tmp_path, monkeypatch, sizes=["877416", "6444784"])
    state = rig.pipeline.state
    state.unbolted, state.bolt_report = f"{BIN_DIR}/optimized", {"policy": "fallback"}
    with pytest.raises(BoltError, match=r"7\.35x larger \(877,416 -> 6,444,784 bytes\)"):
        bolt.optimize(rig.pipeline, rig.log)
    assert state.bolt_report["size"] == {"before": 877416, "after": 6444784, "growth": 7.345}
    assert not state.bolted and "applied" not in state.bolt_report


def test_optimize_refuses_a_bolted_binary_that_prints_something_else(
    project: Path, stack: ExitStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig, _ = _bolt_rig(project, stack, tmp_path, monkeypatch, validate_command=("--version",))
    rig.engine.responder = answers(
        ("-o /build/out/bin/bolt/demo", 0, [BOLT_INFO]), ("stat -c %s", 0, ["10", "11"])
    )
    # What the two validate runs wrote to their stdout files.
    rig.engine.missing = lambda path: b"demo 1.2.3\n" if "baseline" in path else b"demo 1.2.4\n"
    state = rig.pipeline.state
    state.unbolted = f"{BIN_DIR}/optimized"
    with pytest.raises(ValidationError, match="the BOLT-optimized binary printed something else"):
        bolt.optimize(rig.pipeline, rig.log)
    assert state.shipped == f"{BIN_DIR}/optimized"


def test_fall_back_ships_the_unbolted_binary_or_fails_under_require(
    project: Path, stack: ExitStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig, _ = _bolt_rig(project, stack, tmp_path, monkeypatch)
    state = rig.pipeline.state
    state.unbolted, state.shipped = f"{BIN_DIR}/optimized", f"{BIN_DIR}/optimized.bolt"
    state.bolt_report = {"policy": "fallback", "mode": "lbr"}
    error = ProfileError("perf recorded 0 samples", hint="try instrument")
    bolt.fall_back(rig.pipeline, error)
    assert state.shipped == f"{BIN_DIR}/optimized"
    assert state.bolt_profile is None
    assert state.bolt_report == {
        "policy": "fallback",
        "mode": "lbr",
        "applied": False,
        "fallback_reason": "perf recorded 0 samples",
    }
    console = rig.pipeline.reporter.console.file.getvalue()  # type: ignore[attr-defined]
    assert "BOLT FAILED" in console

    strict, _ = _bolt_rig(project, stack, tmp_path, monkeypatch, bolt_policy="require")
    with pytest.raises(BoltError, match=r"bolt\.policy is require: perf recorded 0") as caught:
        bolt.fall_back(strict.pipeline, error)
    assert caught.value.hint == "try instrument"
    assert caught.value.__cause__ is error


def test_bolt_steps_in_a_plan_without_bolt_are_an_internal_error(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig = make_rig(make_options(project, bolt=False), stack, tmp_path)
    with pytest.raises(StepFailedError, match="plan without BOLT"):
        bolt.optimize(rig.pipeline, rig.log)

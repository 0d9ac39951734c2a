"""Pure logic of PGO, BOLT and the validation gate: parsing, choosing, comparing."""

from __future__ import annotations

import pytest

from orchestrator.errors import BoltError, ProfileError
from orchestrator.model.verdict.bolt_report import PerfCapabilities, choose_mode, parse_report
from orchestrator.model.verdict.outputs import compare_outputs, render_diff
from orchestrator.model.verdict.pgo_report import Coverage, missing_functions, parse_profdata_show

NOTHING = PerfCapabilities(lbr=False, sampling=False, grant="none")
SAMPLING = PerfCapabilities(lbr=False, sampling=True, grant="cap-add SYS_ADMIN")
LBR = PerfCapabilities(lbr=True, sampling=True, grant="privileged")


@pytest.mark.parametrize(
    ("perf", "expected"),
    [(LBR, "lbr"), (SAMPLING, "sample"), (NOTHING, "instrument")],
)
def test_auto_picks_the_best_available_mode(perf: PerfCapabilities, expected: str) -> None:
    assert choose_mode("auto", perf).mode == expected


def test_forced_mode_is_used_when_possible() -> None:
    assert choose_mode("instrument", LBR).mode == "instrument"
    assert choose_mode("sample", LBR).mode == "sample"
    assert "forced" in choose_mode("sample", SAMPLING).reason


@pytest.mark.parametrize(("requested", "perf"), [("lbr", SAMPLING), ("sample", NOTHING)])
def test_forced_mode_that_cannot_work_is_an_error(requested: str, perf: PerfCapabilities) -> None:
    with pytest.raises(BoltError, match=f"--bolt-mode {requested}") as caught:
        choose_mode(requested, perf)
    assert "instrument" in caught.value.hint


BOLT_OUTPUT = """BOLT-INFO: enabling relocation mode
BOLT-INFO: 41 out of 621 functions in the binary (6.6%) have non-empty execution profile
BOLT-INFO: 4 functions with profile could not be optimized
"""


def test_bolt_report_parsed() -> None:
    report = parse_report(BOLT_OUTPUT)
    assert (report.profiled_functions, report.total_functions, report.percent) == (41, 621, 6.6)


def test_bolt_report_missing_is_an_error() -> None:
    with pytest.raises(BoltError):
        parse_report("BOLT-ERROR: input binary is not a valid ELF executable\n")


PROFDATA_SHOW = """Instrumentation level: IR  entry_first = 0  instrument_loop_entries = 0
Total functions: 677
Maximum function count: 30577728
Maximum internal block count: 30577728
Total number of blocks: 3796
Total count: 89669592
"""
RUSTC_WARNINGS = """   Compiling tinyllm v0.1.0 (/build/src)
warning: tinyllm.946f55fd-cgu.0: no profile data available for function _ZN7tinyllm5model5Model3new17hefaeE Hash = 790715556156840734 up to 0 count discarded

warning: tinyllm.946f55fd-cgu.0: no profile data available for function _ZN7tinyllm5model13prompt_tokens17he59eE Hash = 784007058953177093 up to 0 count discarded
warning: tinyllm.946f55fd-cgu.0: no profile data available for function _ZN7tinyllm5model5Model3new17hefaeE Hash = 790715556156840734 up to 0 count discarded
    Finished `release` profile [optimized] target(s) in 12.90s
"""  # noqa: E501


def test_profdata_summary_parsed() -> None:
    summary = parse_profdata_show(PROFDATA_SHOW)
    assert (summary.functions, summary.total_count) == (677, 89669592)


def test_profdata_garbage_is_a_profile_error() -> None:
    with pytest.raises(ProfileError):
        parse_profdata_show("error: merged.profdata: invalid instrumentation profile data\n")


def test_missing_function_warnings_counted_once_each() -> None:
    assert missing_functions(RUSTC_WARNINGS) == [
        "_ZN7tinyllm5model13prompt_tokens17he59eE",
        "_ZN7tinyllm5model5Model3new17hefaeE",
    ]
    assert missing_functions("    Finished `release`\n") == []


def test_coverage_threshold() -> None:
    Coverage(profiled_functions=100, missing_functions=10, max_missing_ratio=0.1).check()
    with pytest.raises(ProfileError, match=r"11 functions .* \(11\.0%, limit 10\.0%\)") as caught:
        Coverage(profiled_functions=100, missing_functions=11, max_missing_ratio=0.1).check()
    assert "--retrain" in caught.value.hint
    with pytest.raises(ProfileError):
        Coverage(profiled_functions=0, missing_functions=0, max_missing_ratio=1.0).check()


def test_identical_outputs_pass() -> None:
    text = "tokens: 1 2 3\nchecksum: e097af0d0222967e\n"
    assert compare_outputs(text, text) == []


def test_any_change_fails_without_tolerance() -> None:
    differences = compare_outputs("tokens: 1 2 3\nloss: 0.5\n", "tokens: 1 2 3\nloss: 0.5000001\n")
    assert [(d.line, d.expected, d.got) for d in differences] == [
        (2, "loss: 0.5", "loss: 0.5000001")
    ]


def test_numbers_within_tolerance_pass_words_must_match() -> None:
    assert compare_outputs("loss: 0.5\n", "loss: 0.5000001\n", tolerance=1e-6) == []
    assert compare_outputs("loss: 0.5\n", "loss: 0.51\n", tolerance=1e-6) != []
    assert compare_outputs("checksum: abc\n", "checksum: abd\n", tolerance=0.5) != []
    assert compare_outputs("a\nb\n", "a\n", tolerance=0.5) != []  # missing lines count
    assert compare_outputs("x: nan\n", "x: nan\n", tolerance=0.1) == []  # identical text


def test_diff_names_both_sides() -> None:
    diff = render_diff("a\nb\n", "a\nc\n", expected_name="baseline", got_name="optimized")
    assert "--- baseline" in diff and "+++ optimized" in diff
    assert "-b" in diff and "+c" in diff

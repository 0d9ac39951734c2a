"""The failed tests read from `cargo test`'s output, and the hint whose table skips them."""

from __future__ import annotations

import tomllib

from orchestrator.model.verdict.failed_tests import (
    MAX_FOUND,
    MAX_NAME,
    failing_tests,
    skip_args,
    skip_hint,
    skip_table,
)

# What cargo test prints for a crate with two failing unit tests, one `should_panic`, and
# a failing doc test (two test binaries: cargo stops after the first that fails unless
# --no-fail-fast, so both are shown here as it prints them with it).
OUTPUT = """\
   Compiling demo v0.1.0 (/build/src)
    Finished `release` profile [optimized] target(s) in 4.20s
     Running unittests src/main.rs (target/x86_64-unknown-linux-gnu/release/deps/demo-1a2b)

running 4 tests
test model::tests::loads ... ok
test model::tests::sampler_is_greedy ... FAILED
test tokenizer::tests::splits ... ok
test tokenizer::tests::rejects_empty - should panic ... FAILED

failures:

---- model::tests::sampler_is_greedy stdout ----
thread 'model::tests::sampler_is_greedy' panicked at src/model.rs:88:9:
assertion `left == right` failed
  left: 3
 right: 4
    at some indented line of the test's own output
failures:
    not::a::failure::listing

---- tokenizer::tests::rejects_empty stdout ----
note: test did not panic as expected

failures:
    model::tests::sampler_is_greedy
    tokenizer::tests::rejects_empty

test result: FAILED. 2 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out

   Doc-tests demo

running 1 test
test src/lib.rs - add (line 5) ... FAILED

failures:

---- src/lib.rs - add (line 5) stdout ----
error[E0425]: cannot find value `x` in this scope

failures:
    src/lib.rs - add (line 5)

test result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out
error: 2 targets failed:
    `--bin demo`
    `--doc`
"""


def test_the_failed_tests_are_read_in_order_each_once() -> None:
    assert failing_tests(OUTPUT) == (
        "model::tests::sampler_is_greedy",
        "tokenizer::tests::rejects_empty",  # without libtest's " - should panic"
        # (not "not::a::failure::listing": a test's own output, though it says "failures:")
        "src/lib.rs - add (line 5)",  # a doc test: --skip takes its name as a substring
    )


def test_the_failures_list_alone_names_them() -> None:
    """The `failures:` listing at the end (e.g. a log that kept only its tail)."""
    tail = "failures:\n    a::b\n    c::d\n\ntest result: FAILED. 0 passed; 2 failed;\n"
    assert failing_tests(tail) == ("a::b", "c::d")


def test_a_listing_without_its_test_result_line_names_none() -> None:
    printed = "failures:\n    printed::by::a::test\n\nthread 'x' panicked\n"
    assert failing_tests(printed) == ()


def test_colours_and_timings_do_not_hide_a_failure() -> None:
    line = "test a::slow ... \x1b[31mFAILED\x1b[0m <12.003s>"
    assert failing_tests(line) == ("a::slow",)


def test_a_passing_or_uncompiled_run_names_none() -> None:
    assert failing_tests("test a ... ok\ntest b ... ignored\n\ntest result: ok.") == ()
    assert failing_tests("error[E0425]: cannot find value `x`\nerror: could not compile") == ()


def test_untrusted_names_keep_printable_characters_only_and_are_cut() -> None:
    hostile = "test evil\x1b]0;pwned\x07::name\x9b ... FAILED"
    assert failing_tests(hostile) == ("evil]0;pwned::name",)
    (long,) = failing_tests(f"test {'a' * 1000} ... FAILED")
    assert long == "a" * MAX_NAME
    many = "\n".join(f"test t{i} ... FAILED" for i in range(MAX_FOUND + 20))
    assert len(failing_tests(many)) == MAX_FOUND


def test_skip_args_add_a_separator_only_where_there_is_none() -> None:
    assert skip_args((), ["a::b"]) == ("--", "--skip", "a::b")
    assert skip_args(("--workspace",), ["a", "b"]) == (
        "--workspace",
        "--",
        "--skip",
        "a",
        "--skip",
        "b",
    )
    kept = ("--workspace", "--", "--skip", "slow_case")
    assert skip_args(kept, ["a"]) == (*kept, "--skip", "a")


def test_the_table_is_toml_that_reads_back_as_the_args() -> None:
    names = ['quote"and\\backslash', "tab\there", "ünïcode::名前"]
    table = skip_table("cpu", ("--workspace",), names)
    assert table.splitlines()[0] == "[flavors.cpu.test]"
    parsed = tomllib.loads(table)
    assert parsed == {
        "flavors": {"cpu": {"test": {"args": list(skip_args(("--workspace",), names))}}}
    }
    odd = tomllib.loads(skip_table("my flavor", (), ["x"]))  # a name that is no bare key
    assert odd["flavors"]["my flavor"]["test"]["args"] == ["--", "--skip", "x"]


def test_the_hint_spells_the_table_that_skips_the_failed_tests() -> None:
    hint = skip_hint("cuda", (), failing_tests(OUTPUT)[:1])
    assert hint.startswith("The crate's own tests failed: model::tests::sampler_is_greedy;")
    assert "set [flavors.cuda.test] args in orchestrator.toml" in hint
    assert "To release without it," in hint
    table = hint.split("\n", 1)[1]
    assert table == (
        '    [flavors.cuda.test]\n    args = ["--", "--skip", "model::tests::sampler_is_greedy"]'
    )
    assert tomllib.loads(table)["flavors"]["cuda"]["test"]["args"][-1] == (
        "model::tests::sampler_is_greedy"
    )


def test_the_hint_skips_at_most_five_and_counts_the_rest() -> None:
    names = [f"t{i}" for i in range(7)]
    hint = skip_hint("cpu", ("--workspace",), names)
    assert "t0, t1, t2, t3, t4 and 2 more;" in hint
    args = tomllib.loads(hint.split("\n", 1)[1])["flavors"]["cpu"]["test"]["args"]
    assert args == ["--workspace", "--", *(w for n in names[:5] for w in ("--skip", n))]


def test_without_names_the_hint_still_names_the_setting() -> None:
    hint = skip_hint("aarch64", (), ())
    assert "nothing was published" in hint
    assert '[flavors.aarch64.test] args = ["--", "--skip", "<test name>"]' in hint

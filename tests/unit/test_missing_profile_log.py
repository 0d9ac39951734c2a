"""A PGO build's thousands of "no profile data available for function" warnings (5,608 in
the test log of a real crate) are one line with their count in the step log and in the
stored test log; the output the step reads back keeps every one (build-optimized counts
them against pgo.max_missing_ratio)."""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from orchestrator.execute.steps.commands import cargo
from orchestrator.model.verdict.pgo_report import (
    is_missing_profile_line,
    missing_functions,
    summarised_output,
)
from orchestrator.plan.cargo_commands import CargoCommand
from orchestrator.progress.reporter import StepLog

MISSING = (
    "warning: /src/lib.rs: no profile data available for function _ZN4demo{n}E "
    "Hash = 1234 [-Wbackend-plugin]"
)
OUTPUT = [
    "   Compiling demo v1.2.3 (/src)",
    *(MISSING.format(n=n) for n in range(3)),
    "warning: unused variable: `x`",
    *(MISSING.format(n=n) for n in range(3, 5608)),
    "test result: ok. 12 passed; 0 failed",
]


class _Box:
    """A container that prints OUTPUT and exits 0."""

    def exec(
        self,
        argv: Sequence[str],
        *,
        environment: Mapping[str, str] | None = None,
        on_output: Callable[[str], None],
        workdir: str | None = None,
    ) -> int:
        for line in OUTPUT:
            on_output(line)
        return 0

    def limit_hits(self) -> list[str]:
        return []


def test_the_step_log_says_the_missing_profile_warnings_in_one_line() -> None:
    handle = io.StringIO()
    log = StepLog(handle, None, None, "test")
    command = CargoCommand(argv=("cargo", "test", "--release"), environment={})
    output = cargo(cast(Any, _Box()), command, log, "test")
    written = handle.getvalue().splitlines()
    assert written[1:4] == [OUTPUT[0], "warning: unused variable: `x`", OUTPUT[-1]]
    assert len(written) == 5  # the command, three lines, the count
    assert written[-1].startswith("(5,608 of rustc's 'no profile data available' warnings")
    assert not any(is_missing_profile_line(line) for line in log.tail)
    # What the step reads back is whole: the coverage check counts every function.
    assert len(missing_functions(output)) == 5608


def test_the_stored_test_log_is_summarised_too() -> None:
    text = summarised_output("\n".join(OUTPUT))
    assert text.splitlines()[:3] == [OUTPUT[0], "warning: unused variable: `x`", OUTPUT[-1]]
    assert text.splitlines()[-1].startswith("(5,608 of rustc's")
    assert not is_missing_profile_line(text.splitlines()[-1])  # the note is no warning
    assert summarised_output("test result: ok.") == "test result: ok."
    assert summarised_output("") == ""

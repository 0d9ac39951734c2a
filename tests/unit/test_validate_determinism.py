"""Validation runs the baseline twice first: a command whose own output varies is named as
not deterministic (exit 74, with what to change), not failed or passed by chance."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path, PurePosixPath

import pytest

from orchestrator.errors import ValidationError
from orchestrator.execute.steps.pipeline import BIN_DIR
from orchestrator.execute.verdict import validate
from orchestrator.execute.verdict.validate import NondeterministicOutputError
from orchestrator.model.verdict.outputs import Captured

from .execute_rig import Rig, make_options, make_rig
from .fakes import FakeEngine


def _engine(files: dict[str, bytes]) -> FakeEngine:
    """Each captured file by its name (baseline-0-again.stdout); a file not named is empty."""
    return FakeEngine(missing=lambda path: files.get(PurePosixPath(path).name, b""))


def _validated_rig(project: Path, stack: ExitStack, tmp_path: Path, files: dict[str, bytes]) -> Rig:
    options = make_options(project, validate_command=("search", "--threads", "8"))
    rig = make_rig(options, stack, tmp_path, engine=_engine(files))
    rig.pipeline.state.shipped = f"{BIN_DIR}/optimized"
    return rig


@pytest.mark.parametrize(
    ("again", "advice"),
    [
        (b"b.txt\na.txt\n", "another order"),  # threads finishing in turn: sort
        (b"a.txt\nseed 17\n", "fix its random seed"),  # other values
    ],
)
def test_a_baseline_that_prints_something_else_twice_is_not_deterministic(
    project: Path, stack: ExitStack, tmp_path: Path, again: bytes, advice: str
) -> None:
    first = b"a.txt\nb.txt\n" if advice == "another order" else b"a.txt\nseed 3\n"
    files = {
        "baseline-0.stdout": first,
        "baseline-0-again.stdout": again,
        # The optimized binary happens to print what the first run did: without the check
        # this build would pass by chance.
        "optimized-0.stdout": first,
    }
    rig = _validated_rig(project, stack, tmp_path, files)
    with pytest.raises(NondeterministicOutputError) as caught:
        validate.validate(rig.pipeline, rig.log)
    error = caught.value
    assert error.exit_code == 74 and isinstance(error, ValidationError)
    assert "`demo search --threads 8` is not deterministic" in error.message
    assert "--- baseline" in error.message and "+++ baseline again" in error.message
    assert error.hint is not None and advice in error.hint
    # The optimized binary was never run: there is nothing steady to compare it with.
    ran = [e.argv[4] for e in rig.box.execs if e.argv[0] == "/bin/sh"]
    assert ran == [
        "/build/out/validate/baseline-0.stdout",
        "/build/out/validate/baseline-0-again.stdout",
    ]
    assert rig.pipeline.state.validation == {}


def test_a_steady_baseline_is_checked_once_per_build(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    same = b"a.txt\nb.txt\n"
    files = {"baseline-0.stdout": same, "baseline-0-again.stdout": same}
    files["optimized-0.stdout"] = same
    rig = _validated_rig(project, stack, tmp_path, files)
    validate.validate(rig.pipeline, rig.log)
    assert rig.pipeline.state.validation["identical"] is True
    validate.validate(rig.pipeline, rig.log)  # e.g. BOLT's validation, then the step's
    ran = [PurePosixPath(e.argv[4]).name for e in rig.box.execs if e.argv[0] == "/bin/sh"]
    assert ran == [
        "baseline-0.stdout",
        "baseline-0-again.stdout",
        "optimized-0.stdout",
        "baseline-0.stdout",
        "optimized-0.stdout",
    ]
    assert "the baseline printed the same twice" in rig.text


def test_the_hint_is_computed_from_how_the_runs_differ() -> None:
    reordered = validate.nondeterminism_hint(Captured(b"1\n2\n", b""), Captured(b"2\n1\n", b""))
    changed = validate.nondeterminism_hint(Captured(b"t=1\n", b""), Captured(b"t=2\n", b""))
    assert "sorts its output" in reordered and "seed" not in reordered
    assert "seed" in changed and "another order" not in changed

"""Warnings that change what ships or what is reused reach the console, not only a step
log: a stored profile ignored because its seal does not verify, a corrupt cache dropped."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from rich.console import Console

from orchestrator.execute.optimize import bolt, pgo
from orchestrator.execute.steps.profiles import load_profile, store_profile
from orchestrator.plan.steps import StepName
from orchestrator.progress.reporter import Reporter

from .execute_rig import answers, make_options, make_rig
from .fakes import FakeEngine


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


def _forge_seal(record: Path) -> str:
    """A record whose seal does not verify: written elsewhere, by an older version, forged."""
    document = json.loads(record.read_text())
    document["seal"] = "0" * len(document["seal"])
    record.write_text(json.dumps(document))
    return "not sealed with this machine's cache key"


def _not_json(record: Path) -> str:
    record.write_text("not json")
    return "not JSON"


def _other_schema(record: Path) -> str:
    record.write_text(json.dumps({"schema": "orchestrator/variants", "schema_version": 1}))
    return "schema"


def _link_to_dev_zero(record: Path) -> str:
    record.unlink()
    record.symlink_to("/dev/zero")  # followed, a read would never end
    return "a symbolic link"


def _fifo(record: Path) -> str:
    record.unlink()
    os.mkfifo(record)  # opened blocking, a read would wait forever
    return "not a regular file"


def _escapes(record: Path) -> str:
    document = json.loads(record.read_text())
    record.write_text(json.dumps({**document, "\x1b]0;pwned\x07": 1}))  # a key the error names
    return "\\x1b]0;pwned\\x07"  # escaped before it reaches a terminal


# Every way a cache writer can spoil a sealed record: each is ignored with one warning.
SPOILERS = [_forge_seal, _not_json, _other_schema, _link_to_dev_zero, _fifo, _escapes]


def _flat(text: str) -> str:
    """The console wraps long lines (a warning names a full path): compare words."""
    return " ".join(text.split())


def _stored(tmp_path: Path, cache: Path, spoil: Callable[[Path], str] = _forge_seal) -> str:
    fresh = tmp_path / "fresh"
    fresh.write_bytes(b"stored profile")
    store_profile(fresh, cache, {"functions": 12})
    return spoil(cache.with_suffix(".json"))


@pytest.mark.parametrize("spoil", SPOILERS, ids=lambda spoil: spoil.__name__.strip("_"))
def test_an_unusable_pgo_profile_record_is_said_once_and_profiled_afresh(
    project: Path, stack: ExitStack, tmp_path: Path, spoil: Callable[[Path], str]
) -> None:
    engine = FakeEngine(
        responder=answers(
            ("find", 0, ["/build/out/pgo/raw/demo_1.profraw", ""]),
            ("show", 0, ["Total functions: 40", "Maximum function count: 9", "Total count: 9"]),
        ),
        missing=lambda path: b"merged profile",
    )
    rig = make_rig(make_options(project, bolt=False), stack, tmp_path, engine=engine)
    plan = rig.pipeline.plan
    assert plan.pgo is not None
    cache = rig.pipeline.options.cache_dir / "profiles" / "pgo" / f"{plan.pgo.profile_key}.profdata"
    why = _stored(tmp_path, cache, spoil)
    with rig.pipeline.reporter.step(StepName.PGO_INSTRUMENT, "instrumented build") as log:
        pgo.instrument(rig.pipeline, log)
    console = _flat(rig.console)
    assert console.count("warning:") == 1
    assert "warning: pgo-instrument: ignoring the stored PGO profile" in console
    assert f"its record {cache.with_suffix('.json')} cannot be used" in console
    assert why in console and "\x1b" not in rig.console and "\x07" not in rig.console
    assert rig.pipeline.state.pgo is None  # not reused: the instrumented build ran
    assert rig.box.argvs[0] == plan.variants["pgo-generate"].build.argv
    step_log = (tmp_path / "logs" / "01-pgo-instrument.log").read_text()
    assert "warning: ignoring the stored PGO profile" in step_log
    # The fresh profile takes the spoilt record's place: the next build reuses it.
    with rig.pipeline.reporter.step(StepName.PGO_TRAIN, "training") as log:
        pgo.train(rig.pipeline, log)
    with rig.pipeline.reporter.step(StepName.PGO_MERGE, "merge") as log:
        pgo.merge(rig.pipeline, log)
    assert load_profile(cache, "PGO", pytest.fail) is not None


@pytest.mark.parametrize("spoil", SPOILERS, ids=lambda spoil: spoil.__name__.strip("_"))
def test_an_unusable_bolt_profile_record_is_said_once_and_profiled_afresh(
    project: Path, stack: ExitStack, tmp_path: Path, spoil: Callable[[Path], str]
) -> None:
    binary_sha = "5e" * 32
    engine = FakeEngine(
        responder=answers(("sha256sum", 0, [f"{binary_sha}  /build/out/bin/optimized"])),
        missing=lambda path: b"fdata profile",
    )
    options = make_options(project, pgo=False, bolt_mode="instrument")
    rig = make_rig(options, stack, tmp_path, engine=engine)
    rig.pipeline.state.shipped = "/build/out/bin/optimized"
    cache = options.cache_dir / "profiles" / "bolt" / f"{binary_sha}-instrument.fdata"
    why = _stored(tmp_path, cache, spoil)
    bolt.profile(rig.pipeline, rig.log)
    console = _flat(rig.console)
    assert console.count("warning:") == 1
    assert "warning: ignoring the stored BOLT profile" in console
    assert f"its record {cache.with_suffix('.json')} cannot be used (" in console
    assert why in console
    assert "warning: ignoring the stored BOLT profile" in rig.text  # and in the step log
    report = rig.pipeline.state.bolt_report
    assert report is not None
    assert report["profile"]["reused_from_cache"] is False  # type: ignore[index]
    # Profiled again (the instrumented binary ran its workloads) and stored afresh.
    assert any("-instrument" in argv for argv in rig.box.argvs)
    assert load_profile(cache, "BOLT", pytest.fail) is not None


@pytest.mark.parametrize("github", [False, True])
def test_a_step_warning_is_printed_outside_the_log_and_annotated_on_github(
    tmp_path: Path, github: bool
) -> None:
    out = io.StringIO()
    env = {"GITHUB_ACTIONS": "true"} if github else {}
    reporter = Reporter(Console(file=out, width=200), tmp_path, env=env)
    with reporter.step("pgo-instrument", "instrumented build") as log:
        log.line("ordinary output")
        log.warn("the stored profile was ignored")
    printed = out.getvalue()
    assert "warning: pgo-instrument: the stored profile was ignored" in printed
    # Outside GitHub's fold only the warning is printed, not the step's ordinary output.
    assert ("ordinary output" in printed) is github
    annotation = "::warning title=pgo-instrument::the stored profile was ignored"
    assert (annotation in printed) is github
    logged = (tmp_path / "01-pgo-instrument.log").read_text()
    assert logged == "ordinary output\nwarning: the stored profile was ignored\n"

"""Warnings that change what ships or what is reused reach the console, not only a step
log: a stored profile ignored because its seal does not verify, a corrupt cache dropped."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from rich.console import Console

from orchestrator.execute import bolt, pgo
from orchestrator.execute.profiles import store_profile
from orchestrator.plan.steps import StepName
from orchestrator.progress.reporter import Reporter

from .execute_rig import answers, make_options, make_rig
from .fakes import FakeEngine


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


def _forge_seal(cache: Path) -> None:
    """A record whose seal does not verify: written elsewhere, by an older version, forged."""
    sidecar = cache.with_suffix(".json")
    record = json.loads(sidecar.read_text())
    record["seal"] = "0" * len(record["seal"])
    sidecar.write_text(json.dumps(record))


def _stored(tmp_path: Path, cache: Path) -> None:
    fresh = tmp_path / "fresh"
    fresh.write_bytes(b"stored profile")
    store_profile(fresh, cache, {"functions": 12})
    _forge_seal(cache)


def test_an_unsealed_pgo_profile_is_said_on_the_console_and_profiled_afresh(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    engine = FakeEngine(
        responder=answers(("find", 0, ["/build/out/pgo/raw/demo_1.profraw", ""])),
        missing=lambda path: b"merged profile",
    )
    rig = make_rig(make_options(project, bolt=False), stack, tmp_path, engine=engine)
    plan = rig.pipeline.plan
    assert plan.pgo is not None
    cache = rig.pipeline.options.cache_dir / "profiles" / "pgo" / f"{plan.pgo.profile_key}.profdata"
    _stored(tmp_path, cache)
    with rig.pipeline.reporter.step(StepName.PGO_INSTRUMENT, "instrumented build") as log:
        pgo.instrument(rig.pipeline, log)
    console = rig.console
    assert "warning: pgo-instrument: ignoring the stored PGO profile" in console
    assert "not sealed with this machine's cache key" in console
    assert rig.pipeline.state.pgo is None  # not reused: the instrumented build ran
    assert rig.box.argvs[0] == plan.variants["pgo-generate"].build.argv
    step_log = (tmp_path / "logs" / "01-pgo-instrument.log").read_text()
    assert "warning: ignoring the stored PGO profile" in step_log


def test_an_unsealed_bolt_profile_is_said_on_the_console(
    project: Path, stack: ExitStack, tmp_path: Path
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
    _stored(tmp_path, cache)
    bolt.profile(rig.pipeline, rig.log)
    assert "warning: ignoring the stored BOLT profile" in rig.console
    assert "warning: ignoring the stored BOLT profile" in rig.text  # and in the step log
    report = rig.pipeline.state.bolt_report
    assert report is not None
    assert report["profile"]["reused_from_cache"] is False  # type: ignore[index]


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

"""A release's ending is computed from what happened: an interrupted release names the
targets it published and whether release.lock was written; a crate that changed while the
release ran is named, and the lock still pins what was built (the sources of the start).

The builds are stand-ins (no Docker); publishing is a build.json in the target's folder."""

from __future__ import annotations

import io
import json
import os
import subprocess
import tarfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import orchestrator.release.lock.reproduce as release_reproduce
import orchestrator.release.targets.target as release_target
from orchestrator.cli import app
from orchestrator.cli.app import INTERRUPTED
from orchestrator.config.resolve.options import resolve
from orchestrator.errors import SourceError, StepFailedError
from orchestrator.execute.build import BuildOutcome
from orchestrator.host.source import CrateView, crate_snapshot
from orchestrator.model.documents.lockfile import (
    LOCK_FILE,
    LockDocument,
    LockfileError,
    SharedPins,
    dumps,
    parse_lock,
    read_lock,
)
from orchestrator.plan.steps import StepName
from orchestrator.release.ending import changed_note, interrupted, published_marks
from orchestrator.release.lock import pin
from orchestrator.release.lock.locked_sources import config_folders, lay_out_sources
from orchestrator.release.run import ReleaseIncompleteError, incomplete_hint
from orchestrator.release.targets.release_view import ReleaseView
from orchestrator.release.targets.sources_at_start import (
    SourcesAtStart,
    changed_files,
    changed_since_start,
    sources_at_start,
)
from orchestrator.release.targets.target import Target, TargetResult, targets

from .conftest import plan_for
from .test_cli_commands import configure
from .test_cli_json import _stand_in_build, stand_in_release  # noqa: F401 - a fixture
from .test_lockfile import lock_for

runner = CliRunner()
V2 = "demo-1.2.3-linux-x86_64-cpu"
V3 = "demo-1.2.3-linux-x86_64-cpu-v3"


@pytest.fixture(autouse=True)
def _not_interrupted() -> Iterator[None]:
    """The process-wide flag a stopped command sets (cli/app.py) is left clear."""
    yield
    INTERRUPTED.clear()


def _publishing_build(options: Any, plan: Any, *args: Any, **kwargs: Any) -> BuildOutcome:
    """The stand-in build, publishing: its folder gets a build.json."""
    outcome = _stand_in_build(options, plan, *args, **kwargs)
    (outcome.artifact / "build.json").write_text(f'{{"artifact": "{plan.artifact_dir}"}}\n')
    return outcome


def _config(project: Path) -> Path:
    return configure(project, '[flavors.cpu]\nlevels = ["x86-64-v2", "x86-64-v3"]\n')


# -- a: an interrupted release says what it published -----------------------------------
@pytest.mark.usefixtures("stand_in_release")
def test_an_interrupted_release_names_the_targets_it_published(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    locked: list[Path] = []

    def build_then_stop(options: Any, plan: Any, *args: Any, **kwargs: Any) -> BuildOutcome:
        if plan.artifact_dir == V3:
            raise KeyboardInterrupt  # Ctrl-C during the second target
        return _publishing_build(options, plan, *args, **kwargs)

    monkeypatch.setattr(release_target, "run_build", build_then_stop)

    def record_release(*args: Any, **_kwargs: Any) -> Path:
        locked.append(args[2])
        return Path(args[2]) / LOCK_FILE

    monkeypatch.setattr(release_reproduce, "record_release", record_release)
    result = runner.invoke(app, ["release", "--bench-runs", "0", "-c", str(_config(project))])
    assert result.exit_code == 130, result.output
    release_dir = project / "out" / "demo-1.2.3"
    assert (
        f"error: interrupted: 1 of 2 targets published to {release_dir} before the stop: "
        f"{V2}; not published: {V3}; release.lock was not written" in result.stderr
    )
    assert "Nothing was published" not in result.stderr  # the old, untrue ending
    assert "orchestrator lock" in result.stderr  # how to pin what was published
    assert locked == [] and not (release_dir / LOCK_FILE).exists()
    assert INTERRUPTED.is_set()  # main() then leaves without waiting on Docker streams


def test_a_stop_before_any_publication_says_nothing_was_published(tmp_path: Path) -> None:
    release_dir = tmp_path / "demo-1.2.3"
    (release_dir / V2).mkdir(parents=True)
    (release_dir / V2 / "build.json").write_text("{}")  # published by an earlier release
    marks = published_marks(release_dir, [V2, V3])
    error = interrupted(release_dir, marks)
    assert error.message == (
        f"interrupted: no target was published to {release_dir}; release.lock was not "
        "written (the release stopped before pinning its inputs)"
    )
    assert error.hint is not None and error.hint.startswith("Nothing was published")
    # A target published again and the lock written before the stop: both are said.
    (release_dir / V2 / "build.json").write_text('{"again": true}')
    (release_dir / LOCK_FILE).write_text("{}")
    error = interrupted(release_dir, marks)
    assert f"2 targets published to {release_dir} before the stop: {V2};" in error.message
    assert f"not published: {V3}; release.lock was written" in error.message


@pytest.mark.usefixtures("stand_in_release")
def test_a_release_whose_targets_all_failed_says_why_no_lock_was_written(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(*_args: Any, **_kwargs: Any) -> BuildOutcome:
        raise StepFailedError("cargo build failed")

    monkeypatch.setattr(release_target, "run_build", fail)
    result = runner.invoke(app, ["release", "--bench-runs", "0", "-c", str(_config(project))])
    assert result.exit_code == 49, result.output
    assert (
        "lock:    release.lock not written: no target was published or current (2 of 2 failed)"
        in result.stdout
    )


@pytest.mark.usefixtures("stand_in_release")
def test_a_lock_that_cannot_be_written_is_said_after_the_summary(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the lock's error alone, in place of the summary of what was published."""

    def record_release(*_args: Any, **_kwargs: Any) -> Path:
        raise LockfileError("the vendored crates /c/x.tar are no longer in the cache")

    monkeypatch.setattr(release_target, "run_build", _publishing_build)
    monkeypatch.setattr(release_reproduce, "record_release", record_release)
    result = runner.invoke(app, ["release", "--bench-runs", "0", "-c", str(_config(project))])
    assert result.exit_code == 53, result.output  # the lock's own code
    assert (
        "lock:    release.lock not written: the vendored crates /c/x.tar are no longer in "
        "the cache" in result.stdout
    )
    assert "(2 of 2 targets ok" in result.stdout  # what was published is still said
    assert "error: the vendored crates /c/x.tar are no longer in the cache" in result.stderr


# -- b: a crate that changed while the release ran ---------------------------------------
def _tar(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"src/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_changed_files_names_added_removed_and_edited_files() -> None:
    before = _tar({"Cargo.toml": b"a", "src/main.rs": b"fn main() {}", "old.txt": b"x"})
    after = _tar({"Cargo.toml": b"a", "src/main.rs": b"fn main() { 1; }", "new.txt": b"y"})
    assert changed_files(before, after) == ["new.txt", "old.txt", "src/main.rs"]
    assert changed_files(before, before) == []


@pytest.mark.usefixtures("stand_in_release")
def test_a_crate_changed_during_the_release_is_named_and_the_lock_pins_the_start(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _config(project)
    options = resolve(config, env={})
    crate = CrateView.from_options(options)
    before = crate_snapshot(crate).archive_sha256
    given: dict[str, Any] = {}

    def build_and_edit(options: Any, plan: Any, *args: Any, **kwargs: Any) -> BuildOutcome:
        # Someone edits the crate while the first target builds (a pull, a branch switch).
        (project / "crate" / "src" / "main.rs").write_text("fn main() { edited(); }\n")
        return _publishing_build(options, plan, *args, **kwargs)

    def record_release(*args: Any, **kwargs: Any) -> Path:
        given.update(kwargs)
        return Path(args[2]) / LOCK_FILE

    monkeypatch.setattr(release_target, "run_build", build_and_edit)
    monkeypatch.setattr(release_reproduce, "record_release", record_release)
    result = runner.invoke(app, ["release", "--bench-runs", "0", "-c", str(config)])
    assert result.exit_code == 0, result.output  # before: exit 53 "not a lockfile"
    assert "warning: the crate changed: src/main.rs" in result.stderr
    assert "the crate changed while the release ran: src/main.rs" in result.stderr
    assert "release.lock pins those (their commit and snapshot)" in result.stderr
    assert "release.lock not written" not in result.stdout
    assert "failed (the table says so)" not in result.stderr  # none failed: not claimed
    failing = changed_note(["src/main.rs"], locked=False, failed=True)
    assert "release.lock was not written. A target whose build began after" in failing
    # The lock is written from the plans the targets were built from, and the sources of
    # the start: not the edited checkout.
    at_start: SourcesAtStart = given["at_start"]
    assert at_start.archive_sha256 == before != crate_snapshot(crate).archive_sha256
    assert [plan.artifact_dir for _, plan in given["planned"]] == [V2, V3]
    assert {plan.source.archive_sha256 for _, plan in given["planned"]} == {before}


def test_record_release_pins_the_plans_and_sources_of_the_start(
    project: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Given the release's own plans, nothing is planned again from the changed checkout
    (that made the lock's check fail: exit 53); identity, Cargo.lock and config text are
    those of the start."""
    options = resolve(project / "orchestrator.toml", env={"SOURCE_DATE_EPOCH": "1700000000"})
    (target,) = targets(options, ["cpu"])
    plan = plan_for(options)
    release_dir = tmp_path / "release"
    (release_dir / plan.artifact_dir).mkdir(parents=True)
    (release_dir / plan.artifact_dir / "build.json").write_text("{}")
    start = sources_at_start(CrateView.from_options(options), plan)
    # plan_for's sources are a stand-in: the real ones
    snapshot = crate_snapshot(CrateView.from_options(options))
    start = SourcesAtStart(
        archive=snapshot.archive,
        archive_sha256=snapshot.archive_sha256,
        identity={"git_commit": "a" * 40, "dirty": False},
        cargo_lock=start.cargo_lock,
        config_text=start.config_text,
        config_sha256=start.config_sha256,
    )
    # The checkout changes after the start: the config and a source file.
    (project / "orchestrator.toml").write_text(start.config_text + "# edited\n")
    (project / "crate" / "src" / "main.rs").write_text("fn main() { edited(); }\n")
    assert changed_since_start(CrateView.from_options(options), start) == [
        "src/main.rs",
        "orchestrator.toml",
    ]
    document = lock_for(plan)

    def replanned(*_args: Any) -> Any:
        raise AssertionError("planned again from the changed checkout")

    def locked_target(_t: Any, planned: Any, *_args: Any, **_kwargs: Any) -> Any:
        assert planned is plan
        return document.targets[0]

    shared = SharedPins(
        rootfs_sha256=document.base.rootfs_sha256,
        mmdebstrap=document.base.mmdebstrap,
        vendor_sha256=document.source.vendor_sha256,
    )
    monkeypatch.setattr(pin, "prepare_plan", replanned)
    monkeypatch.setattr(pin, "read_record", lambda *_a: None)
    monkeypatch.setattr(pin, "locked_target", locked_target)
    monkeypatch.setattr(pin, "shared_pins", lambda *_a: shared)
    monkeypatch.setattr(pin, "_repository_path", lambda _o: None)
    path = pin.record_release(
        ReleaseView.from_options(options),
        [target],
        release_dir,
        pin.vault_for(options.cache_dir),
        planned=[(target, plan)],
        at_start=start,
    )
    written = read_lock(path)
    assert written.source.git_commit == "a" * 40
    assert written.config.text == start.config_text and "# edited" not in written.config.text
    assert written.config.sha256 == start.config_sha256


# -- c: reproduce finds the crate's repository wherever the config lives -----------------
def _git(folder: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "PATH": os.environ["PATH"],
    }
    done = subprocess.run(
        ["git", "-C", str(folder), *args], capture_output=True, text=True, check=True, env=env
    )
    return done.stdout.strip()


@pytest.fixture
def config_beside_repository(tmp_path: Path) -> tuple[Path, LockDocument]:
    """orchestrator.toml in a folder that is no repository; the crate `tool` below it is a
    repository of its own (the issue's layout); the lock names the crate's commit and no
    repository path (the config's folder has none)."""
    top = tmp_path / "work"
    crate = top / "tool"
    (crate / "src").mkdir(parents=True)
    (crate / "Cargo.toml").write_text('[package]\nname = "tool"\nversion = "0.1.0"\n')
    (crate / "src" / "main.rs").write_text("fn main() {}\n")
    (top / "orchestrator.toml").write_text(
        '[package]\ncrate = "tool"\n[train]\nworkloads = [["--help"]]\n'
    )
    _git(crate, "init", "-q")
    _git(crate, "add", "-A")
    _git(crate, "commit", "-q", "-m", "one")
    commit = _git(crate, "rev-parse", "HEAD")
    (crate / "src" / "main.rs").write_text("fn main() { later(); }\n")  # a later edit
    _git(crate, "commit", "-q", "-am", "two")
    options = resolve(top / "orchestrator.toml", env={})
    raw = json.loads(dumps(lock_for(plan_for(options))))
    raw["source"].update(git_commit=commit, repository_path=None, crate="tool", dirty=False)
    raw["config"].update(file="orchestrator.toml", text="# locked\n")
    return top, parse_lock(raw, "release.lock")


def test_reproduce_finds_the_crates_repository_from_the_release_folder(
    config_beside_repository: tuple[Path, LockDocument],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    top, document = config_beside_repository
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # not in any repository (before: refused, no --source said)
    places = config_folders(top / "artifacts" / "tool-0.1.0")
    assert top.resolve() in places
    config = lay_out_sources(document, tmp_path / "out", None, places=places)
    assert config.read_text() == "# locked\n"
    # The crate as it was at the locked commit, not as it is now.
    assert (tmp_path / "out" / "tool" / "src" / "main.rs").read_text() == "fn main() {}\n"


def test_reproduce_that_finds_no_repository_says_source(
    config_beside_repository: tuple[Path, LockDocument], tmp_path: Path
) -> None:
    _top, document = config_beside_repository
    nowhere = tmp_path / "nowhere"
    nowhere.mkdir()
    with pytest.raises(SourceError) as caught:
        lay_out_sources(document, tmp_path / "out", None, places=[nowhere])
    commit = document.source.git_commit
    assert commit is not None
    assert f"the locked commit {commit[:12]} is in no git repository found from {nowhere}" in (
        caught.value.message
    )
    assert caught.value.hint is not None and "--source" in caught.value.hint
    # A commit the crate's repository does not hold (not fetched) is not taken either.
    raw = json.loads(dumps(document))
    raw["source"]["git_commit"] = "f" * 40
    with pytest.raises(SourceError, match="ffffffffffff is in no git repository"):
        lay_out_sources(parse_lock(raw, "release.lock"), tmp_path / "o2", None, places=[_top])


def test_a_release_whose_tests_failed_hints_one_table_per_flavor(project: Path) -> None:
    """Levels of one flavor share its test.args: one table skips what any of them named."""
    config = configure(project, '[flavors.cpu]\nlevels = ["x86-64-v2", "x86-64-v3"]\n')
    options = resolve(config, env={"SOURCE_DATE_EPOCH": "1700000000"})

    def failed(flavor: str, level: str, error: StepFailedError | None) -> TargetResult:
        result = TargetResult(Target(flavor, level, options.for_flavor(flavor)), flavor + level)
        if error is not None:
            result.status, result.exception = "failed", error
        return result

    def test_failure(*names: str) -> StepFailedError:
        return StepFailedError("step test", step=StepName.TEST, failed_tests=names)

    results = [
        failed("cpu", "x86-64-v2", test_failure("a::b")),
        failed("cpu", "x86-64-v3", test_failure("c::d", "a::b")),
        failed("cpu", "x86-64-v4", StepFailedError("step build-release", step="build-release")),
        failed("aarch64", "generic", test_failure()),  # no names read: the setting, named
        failed("cpu", "x86-64", None),
    ]
    lines = incomplete_hint(results).splitlines()
    assert lines[0] == ReleaseIncompleteError.default_hint
    assert lines[1] == (
        "cpux86-64-v2, cpux86-64-v3: the crate's own tests failed: a::b, c::d. To release "
        "without them, set [flavors.cpu.test] args in orchestrator.toml (it replaces "
        "test.args for this flavor):"
    )
    table = tomllib.loads("\n".join(lines[2:4]))
    assert table["flavors"]["cpu"]["test"]["args"] == ["--", "--skip", "a::b", "--skip", "c::d"]
    assert lines[4] == (
        "aarch64generic: `cargo test` failed. If a test of the crate's own fails, "
        "[flavors.aarch64.test] args in orchestrator.toml skips it: "
        '[flavors.aarch64.test] args = ["--", "--skip", "<test name>"].'
    )
    assert len(lines) == 5  # the failed build step is not a test's to skip
    assert incomplete_hint(results[2:3]) == ReleaseIncompleteError.default_hint

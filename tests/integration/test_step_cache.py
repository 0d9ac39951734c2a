"""The step cache for real: a release of two CPU levels builds the plain baseline once,
and the release's binaries are the same bytes when every step runs (--force); a PGO + BOLT
target released again after each kind of change runs only the steps that read it."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import docker
import pytest

from orchestrator.config.resolve.options import default_cache_dir
from orchestrator.model.binaries.dispatch import parse_show
from orchestrator.release.assemble.dispatcher_cache import cache_folder
from tests.integration.conftest import REPO, managed_containers, orchestrator

pytestmark = pytest.mark.integration
FIXTURE = REPO / "tests" / "fixtures" / "level-sensitive"
NAME = "level-sensitive"
V2 = f"{NAME}-0.0.1-linux-x86_64-cpu"
V3 = f"{NAME}-0.0.1-linux-x86_64-cpu-v3"
AUTO = f"{NAME}-0.0.1-linux-x86_64-cpu-auto"
# Two levels of one flavor, nothing but the builds: the baselines of both are identical.
CONFIG = """[package]
crate = "."

[build]
source_date_epoch = 1700000000
flavors = ["cpu"]

[flavors.cpu]
levels = ["x86-64-v2", "x86-64-v3"]

[pgo]
enabled = false

[bolt]
enabled = false

[test]
enabled = false
reason = "its tests refuse AVX2 builds; this release is about the baseline"
"""


# Where a reused step's log goes on with the log of the run that made its outputs.
HISTORY = "--- the "


def _own_lines(log: Path) -> list[str]:
    """The lines of a step log that this run wrote: a reused step's log goes on with the
    log of the run that built its outputs, whose commands this run did not run."""
    text = log.read_text()
    return text[: text.index(HISTORY)].splitlines() if HISTORY in text else text.splitlines()


def _baseline_cargo_runs(artifact: Path) -> int:
    """`cargo build` commands in the artifact's build-baseline step log."""
    (log,) = (artifact / "logs").glob("*-build-baseline.log")
    return sum(1 for line in _own_lines(log) if line.startswith("+ ") and " build " in line)


def test_two_cpu_levels_build_the_baseline_once(
    tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    project = tmp_path / "project"
    shutil.copytree(FIXTURE, project, ignore=shutil.ignore_patterns("target"))
    (project / "orchestrator.toml").write_text(CONFIG)
    # Sources no earlier run built: the step cache (shared with other runs) has no entry.
    with (project / "src" / "main.rs").open("a") as source:
        source.write(f"// {uuid.uuid4().hex}\n")
    config = ["--config", str(project / "orchestrator.toml"), "--bench-runs", "0"]
    first = tmp_path / "first"
    run = orchestrator(["release", *config, "--artifacts-dir", str(first), "--allow-dirty"])
    assert run.returncode == 0, run.output
    assert "= build-baseline" in run.output
    assert f"(same inputs as {V2})" in run.output
    release = first / f"{NAME}-0.0.1"
    manifests = {a: json.loads((release / a / "build.json").read_text()) for a in (V2, V3)}
    assert _baseline_cargo_runs(release / V2) == 1
    assert _baseline_cargo_runs(release / V3) == 0
    # ... and its log still shows the build that made the binary, by the other target.
    (v3_log,) = (release / V3 / "logs").glob("*-build-baseline.log")
    assert f"{HISTORY}build-baseline log of the run that made these outputs ({V2}" in (
        v3_log.read_text()
    )
    assert manifests[V2]["variants"]["baseline"] == manifests[V3]["variants"]["baseline"]
    assert _run_log(release / V2).get("reused_steps") is None
    reused = _run_log(release / V3)["reused_steps"]["build-baseline"]
    assert reused["made_by"] == V2
    assert reused["files"][NAME]["sha256"] == manifests[V2]["variants"]["baseline"]["sha256"]
    # The levels differ where they should: only the baseline was shared.
    assert manifests[V2]["artifact"]["sha256"] != manifests[V3]["artifact"]["sha256"]
    _check_auto_folder(release)
    _check_a_forged_dispatcher_cache_is_not_shipped(config, release, tmp_path / "forged")

    # Every step run again, none from the step cache: the same release binaries.
    second = tmp_path / "second"
    forced = orchestrator(
        ["release", *config, "--artifacts-dir", str(second), "--allow-dirty", "--force"]
    )
    assert forced.returncode == 0, forced.output
    assert "= build-baseline" not in forced.output
    again = second / f"{NAME}-0.0.1"
    for artifact in (V2, V3):
        assert _baseline_cargo_runs(again / artifact) == 1
        assert (again / artifact / NAME).read_bytes() == (release / artifact / NAME).read_bytes()
    # The composed archive too: same dispatcher, same copies, same bytes.
    assert (again / f"{AUTO}.tar.xz").read_bytes() == (release / f"{AUTO}.tar.xz").read_bytes()
    assert managed_containers(docker_client) == []


def _check_a_forged_dispatcher_cache_is_not_shipped(
    config: list[str], release: Path, artifacts: Path
) -> None:
    """The review's recipe: a shell script in place of the cached dispatcher, its sha256
    and size put into dispatcher.json. A release of the same (cached) targets ignores the
    entry, says so, compiles the dispatcher again and ships the real one."""
    image = json.loads((release / AUTO / "compose.json").read_text())["dispatcher"]["image"]
    slot = cache_folder(default_cache_dir(os.environ), image)
    script = b"#!/bin/sh\necho owned\n"
    (slot / "dispatcher").write_bytes(script)
    entry = json.loads((slot / "dispatcher.json").read_text())
    entry["info"].update(sha256=hashlib.sha256(script).hexdigest(), size=len(script))
    (slot / "dispatcher.json").write_text(json.dumps(entry))
    run = orchestrator(["release", *config, "--artifacts-dir", str(artifacts), "--allow-dirty"])
    assert run.returncode == 0, run.output
    assert "ignoring the cached dispatcher" in run.output
    again = artifacts / release.name
    real = (release / AUTO / "bin" / NAME).read_bytes()
    assert (again / AUTO / "bin" / NAME).read_bytes() == real
    assert (slot / "dispatcher").read_bytes() == real  # the entry was made again, sealed
    assert (again / f"{AUTO}.tar.xz").read_bytes() == (release / f"{AUTO}.tar.xz").read_bytes()


def _check_auto_folder(release: Path) -> None:
    """The -auto folder of the two levels: its dispatcher picks a level present, a run
    through it prints what that level's binary prints, and `verify` checks it all."""
    auto = release / AUTO
    record = json.loads((auto / "compose.json").read_text())
    assert sorted(record["levels"]) == ["x86-64-v2", "x86-64-v3"]
    for level, folder in (("x86-64-v2", V2), ("x86-64-v3", V3)):
        copy = auto / "libexec" / NAME / f"{NAME}-{level}"
        assert copy.read_bytes() == (release / folder / NAME).read_bytes()
    dispatcher = str(auto / "bin" / NAME)
    shown = subprocess.run(
        [dispatcher],
        env={**os.environ, "ORCHESTRATOR_LEVEL": "show"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    choice = parse_show(shown)
    assert choice.level in record["levels"], shown
    level_run = subprocess.run([choice.path], capture_output=True, text=True, check=True).stdout
    dispatched = subprocess.run([dispatcher], capture_output=True, text=True, check=True).stdout
    assert dispatched == level_run
    assert dispatched == f"portable: {str(choice.level == 'x86-64-v2').lower()}\n"
    forced = subprocess.run(
        [dispatcher],
        env={**os.environ, "ORCHESTRATOR_LEVEL": "v2"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert forced.stdout == "portable: true\n"
    verified = orchestrator(["verify", str(release)])
    assert verified.returncode == 0, verified.output
    assert "composed" in verified.output


# -- every build step: one PGO + BOLT target, released again after each change ----------
STEP_FIXTURE = REPO / "tests" / "fixtures" / "step-cache"
STEP_NAME = "step-cache"
STEP_ARTIFACT = f"{STEP_NAME}-0.0.1-linux-x86_64-cpu"
STEP_CONFIG = """[package]
crate = "."

[build]
source_date_epoch = 1700000000
flavors = ["cpu"]

[train]
workloads = [["20000"]]

[validate]
command = ["300"]
tolerance = {tolerance}

[bolt]
mode = "instrument"
policy = "require"

[gate]
min_gain = {min_gain}

[release]
distro_check = "off"

[bench]
runs = {runs}
"""
# What each cached step leaves in logs/run.json's reused_steps when its inputs are unchanged.
CACHED_STEPS = {
    "build-baseline",
    "build-release",
    "build-optimized",
    "test-build",
    "test",
    "bolt-optimize",
    "speed-gate",
}
PGO_STEPS = {"pgo-instrument", "pgo-train", "pgo-merge"}
BY_CONTENT = {"bolt-optimize", "speed-gate"}
CARGO_BUILD_STEPS = ("build-baseline", "build-release", "pgo-instrument", "build-optimized")


class StepRelease:
    """The fixture copied once; each `release` writes the config and releases it."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path
        self.project = tmp_path / "project"
        shutil.copytree(STEP_FIXTURE, self.project, ignore=shutil.ignore_patterns("target"))
        # Sources no earlier run built: the step cache (shared with other runs; the
        # packages that built the image are there too) has no entry for them.
        self.touch()
        self.runs = 0

    def touch(self) -> None:
        with (self.project / "src" / "main.rs").open("a") as source:
            source.write(f"// {uuid.uuid4().hex}\n")

    def configure(self, *, tolerance: float = 0.0, min_gain: float = 0.01, runs: int = 0) -> None:
        text = STEP_CONFIG.format(tolerance=tolerance, min_gain=min_gain, runs=runs)
        (self.project / "orchestrator.toml").write_text(text)

    def release(self, *extra: str, into: Path | None = None) -> tuple[str, Path]:
        """Run a release; its output and the artifact folder."""
        self.runs += 1
        out = into or self.root / "artifacts"
        config = ["--config", str(self.project / "orchestrator.toml"), "--bench-runs", "0"]
        run = orchestrator(
            ["release", *config, "--artifacts-dir", str(out), "--allow-dirty", *extra]
        )
        assert run.returncode == 0, run.output
        return run.output, out / f"{STEP_NAME}-0.0.1" / STEP_ARTIFACT


def _run_log(artifact: Path) -> dict[str, Any]:
    """How the build went (steps, reused steps): the unsigned logs/run.json."""
    return dict(json.loads((artifact / "logs" / "run.json").read_text()))


def _statuses(artifact: Path) -> dict[str, str]:
    return {step["name"]: step["status"] for step in _run_log(artifact)["steps"]}


def _cargo_builds(artifact: Path, step: str) -> int:
    """`cargo build` commands the step's log shows it ran."""
    logs = list((artifact / "logs").glob(f"*-{step}.log"))
    return sum(
        1
        for log in logs
        for line in _own_lines(log)
        if line.startswith("+ ") and " build " in line and "cargo" in line
    )


def _assert_all_reused(artifact: Path, output: str) -> None:
    """Every cached step came from the step cache, built by the first release."""
    reused = _run_log(artifact)["reused_steps"]
    assert set(reused) == CACHED_STEPS | PGO_STEPS, output
    assert all(entry["made_by"] == STEP_ARTIFACT for entry in reused.values())
    assert all(_cargo_builds(artifact, step) == 0 for step in CARGO_BUILD_STEPS)
    statuses = _statuses(artifact)
    assert {statuses[step] for step in CACHED_STEPS | PGO_STEPS} == {"cached"}
    assert "= build-optimized" in output and "(built " in output


def test_every_build_step_is_reused_verified_and_rebuilt_only_for_what_changed(
    tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    rig = StepRelease(tmp_path)
    rig.configure()
    _, first = rig.release()
    # Keyed by binaries' content, not sources: an earlier run's identical binaries (a
    # comment changes no code) may have left these; every step keyed by the sources runs.
    assert set(_run_log(first).get("reused_steps") or {}) <= BY_CONTENT
    assert all(_cargo_builds(first, step) == 1 for step in CARGO_BUILD_STEPS)
    shipped = (first / STEP_NAME).read_bytes()
    (log,) = (first / "logs").glob("*-build-release.log")
    kept = next(line for line in log.read_text().splitlines() if "kept in the step cache" in line)
    release_entry = Path(kept.split(": ", 1)[1])  # (the folder is replaced by each release)

    # (a) Only bench.runs changed, on the command line: the target is current.
    output, _ = rig.release("--bench-runs", "3")
    assert f"{STEP_ARTIFACT}: cached" in output
    # In the config file, which lies in the crate: the sources' snapshot changes, so the
    # target is built again, and every build step is reused (the config is no build input).
    rig.configure(runs=3)
    output, again = rig.release()
    _assert_all_reused(again, output)
    assert (again / STEP_NAME).read_bytes() == shipped  # (e) with the step cache as without

    # A setting no build step reads (the validation tolerance; the gate's min_gain, read
    # only by its decision, the counts are reused) reruns only what reads it.
    rig.configure(tolerance=0.01, min_gain=0.0101)
    output, again = rig.release()
    _assert_all_reused(again, output)
    assert _statuses(again)["validate"] == "ok"
    assert (again / STEP_NAME).read_bytes() == shipped

    # (d) A tampered cached binary: rebuilt, with a warning on the console.
    assert release_entry.name == _run_log(again)["reused_steps"]["build-release"]["key"]
    with (release_entry / STEP_NAME).open("r+b") as binary:
        binary.seek(100)
        binary.write(b"tampered")
    rig.configure(tolerance=0.02, min_gain=0.0101)
    output, tampered = rig.release()
    assert "ignoring the cached build-release outputs" in output
    assert "does not match its recorded sha256" in output
    assert _cargo_builds(tampered, "build-release") == 1
    assert "build-release" not in _run_log(tampered)["reused_steps"]
    assert _cargo_builds(tampered, "build-optimized") == 0
    assert (tampered / STEP_NAME).read_bytes() == shipped

    # (c) One source file touched: every build runs, no image or crate step does.
    rig.touch()
    output, touched = rig.release()
    assert set(_run_log(touched).get("reused_steps") or {}) <= BY_CONTENT, output
    assert all(_cargo_builds(touched, step) == 1 for step in CARGO_BUILD_STEPS)
    statuses = _statuses(touched)
    assert statuses["test"] == "ok"
    for step in ("base-image", "toolchain-image", "fetch-crates"):
        assert statuses[step] == "cached", (step, statuses)

    # --force: every step runs, none from the step cache: the same bytes as the reuse.
    output, forced = rig.release("--force", into=tmp_path / "forced")
    assert _run_log(forced).get("reused_steps") is None
    assert _cargo_builds(forced, "build-optimized") == 1
    assert (forced / STEP_NAME).read_bytes() == (touched / STEP_NAME).read_bytes()
    assert managed_containers(docker_client) == []


# -- (b) one flavor's features changed: only that flavor's steps run ----------------------
TWO_FLAVORS = """[package]
crate = "."

[build]
source_date_epoch = 1700000000
flavors = ["cpu", "aarch64"]

[flavors.aarch64]
features = [{features}]

[pgo]
enabled = false

[bolt]
enabled = false

[test]
enabled = false
reason = "the step cache of the builds is what this release is about"

[release]
distro_check = "off"
"""
ARM_ARTIFACT = f"{STEP_NAME}-0.0.1-linux-aarch64-cpu"


def test_changing_one_flavors_features_runs_only_that_flavors_builds(tmp_path: Path) -> None:
    rig = StepRelease(tmp_path)
    config = rig.project / "orchestrator.toml"
    config.write_text(TWO_FLAVORS.format(features=""))
    rig.release()
    release = tmp_path / "artifacts" / f"{STEP_NAME}-0.0.1"
    config.write_text(TWO_FLAVORS.format(features='"loud"'))
    output, cpu = rig.release()
    arm = release / ARM_ARTIFACT
    # The cpu target is built again (its config lies among the sources) from the cache.
    cpu_reused = _run_log(cpu)["reused_steps"]
    assert "build-baseline" in cpu_reused, output
    builds = [step for step in _statuses(cpu) if step.startswith("build-")]
    assert all(_cargo_builds(cpu, step) == 0 for step in builds)
    assert set(builds) <= set(cpu_reused)
    # The aarch64 target's features changed: each of its builds ran.
    assert _run_log(arm).get("reused_steps") is None
    arm_builds = [step for step in _statuses(arm) if step.startswith("build-")]
    assert arm_builds and all(_cargo_builds(arm, step) == 1 for step in arm_builds)


# -- a failed test skipped on retry: the tests are not compiled again ---------------------
FAILING_FIXTURE = REPO / "tests" / "fixtures" / "failing-tests"
FAILING_NAME = "failing-tests"
FAILING_ARTIFACT = f"{FAILING_NAME}-0.0.1-linux-x86_64-cpu"
FAILED_TEST = "tests::answer_is_42"
SKIP_TABLE = f'[flavors.cpu.test]\nargs = ["--", "--skip", "{FAILED_TEST}"]'
# What the first build's step lines say of a step: "✓ test-build 95.5s"
_STEP_LINE = re.compile(r"^[✓✗=] (\S+)(?: failed after)? ([0-9.]+)s", re.MULTILINE)


def _step_seconds(output: str) -> dict[str, float]:
    return {m.group(1): float(m.group(2)) for m in _STEP_LINE.finditer(output)}


def test_a_failed_test_skipped_on_retry_is_not_compiled_again(
    tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    project = tmp_path / "project"
    shutil.copytree(FAILING_FIXTURE, project, ignore=shutil.ignore_patterns("target"))
    with (project / "src" / "main.rs").open("a") as source:  # a compile no run has cached
        source.write(f"// {uuid.uuid4().hex}\n")
    config = project / "orchestrator.toml"
    # Distros off: the retry's own cost is what this test is about.
    config.write_text(config.read_text() + '\n[release]\ndistro_check = "off"\n')
    artifacts = tmp_path / "artifacts"
    build = ["build", "--config", str(config), "--artifacts-dir", str(artifacts), "--flavor", "cpu"]

    first = orchestrator(build)
    assert first.returncode == 40, first.output
    assert "✓ test-build" in first.output and "✗ test failed" in first.output
    assert "deliberately failing test" in first.output
    hint = "\n".join(line.strip() for line in first.output.splitlines())
    assert SKIP_TABLE in hint  # the hint spells the table that skips it
    assert not artifacts.exists() or list(artifacts.iterdir()) == []  # nothing published
    assert set(tmp_path.iterdir()) <= {project, artifacts}  # no staging folder left
    assert managed_containers(docker_client) == []

    config.write_text(config.read_text() + "\n" + SKIP_TABLE + "\n")
    retry = orchestrator(build)
    assert retry.returncode == 0, retry.output
    artifact = artifacts / f"{FAILING_NAME}-0.0.1" / FAILING_ARTIFACT
    statuses = _statuses(artifact)
    assert statuses["test-build"] == "cached" and statuses["test"] == "ok"
    assert "test-build" in _run_log(artifact)["reused_steps"]
    (test_log,) = (artifact / "logs").glob("*-test.log")
    own = _own_lines(test_log)
    cargo_tests = [line for line in own if line.startswith("+ ") and " test " in line]
    assert len(cargo_tests) == 1 and "--no-run" not in cargo_tests[0]
    assert cargo_tests[0].endswith(f"-- --skip {FAILED_TEST}")
    assert not any("Compiling " in line for line in own), own  # nothing compiled again
    assert any("1 filtered out" in line for line in own)
    (build_log,) = (artifact / "logs").glob("*-test-build.log")
    assert not any(line.startswith("+ ") for line in _own_lines(build_log))
    before, after = _step_seconds(first.output), _step_seconds(retry.output)
    print(
        f"tests: first build test-build {before['test-build']}s + test {before['test']}s; "
        f"retry test-build {after['test-build']}s + test {after['test']}s"
    )
    assert managed_containers(docker_client) == []

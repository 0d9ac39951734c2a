"""What a release costs in cargo builds: a fixture crate released cold, then after three
small changes, counting the cargo builds that ran.

    .venv/bin/python bench/release_cost.py [--fixture portable-cli] [--no-aarch64]
    .venv/bin/python bench/release_cost.py --config orchestrator.toml --scenarios cold,source
    .venv/bin/python bench/release_cost.py --config orchestrator.toml --code /tmp/before

The fixture (tests/fixtures/<name>, or the crate a project's orchestrator.toml names with
--config; copied to a temporary folder: the repository's tree is never touched) is released
for cpu at two levels (x86-64-v2, x86-64-v3) plus aarch64 (cross-built, run under qemu), with
`--bench-runs 0`. --code runs another copy of the orchestrator's code (an older commit,
unpacked with `git archive`) with this script's counting, to compare before and after.
Scenarios, each on top of the last:

  cold        a fresh cache folder: empty step cache, no stored PGO profile, no kept
              variants; the package vault, rootfs tarballs and crate archives are
              hard-linked from the host cache and the Docker images are present, so
              nothing is downloaded and no image is built (a missing image is built
              first, untimed, by a release without PGO and BOLT in the host cache,
              where the .debs it was built from stay for the lock)
  bench       one bench setting changed ([bench] runs)
  features    one flavor's features changed ([flavors.cpu] default_features = false)
  source      one source file changed (a comment appended to src/main.rs)

A cargo build is a step that runs cargo on the sources: build-baseline, build-release,
pgo-instrument, build-optimized and test (`cargo test` compiles the crate again). Each
published build.json lists its steps with their status; a step taken from the step
cache is `cached`, and a target whose published artifact is current (the action cache:
release.json says `cached`) runs none. Counts are deterministic; the seconds are wall
time measured once, on whatever else the machine is doing. The floor is two builds per
target (instrumented and optimized); the ratio is the builds per built target over it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from orchestrator.config.resolve.options import resolve_cache_dir  # noqa: E402

CARGO_STEPS = ("build-baseline", "build-release", "pgo-instrument", "build-optimized", "test")
# What a cold run may take from the host cache: content-addressed downloads, not results.
SHARED = ("packages", "rootfs", "crates", "keys")
LEVELS = ("x86-64-v2", "x86-64-v3")
FLOOR = 2  # builds per target a PGO release needs at least: instrumented and optimized
SCENARIOS = ("cold", "bench", "features", "source")
LOCK_NOT_WRITTEN = 53  # LockfileError: the targets are built and published, the lock is not


@dataclass
class Outcome:
    scenario: str
    seconds: float
    built: list[str]  # artifacts built (not cached as a whole)
    builds: Counter[str] = field(default_factory=Counter)  # cargo step -> times it ran
    reused: Counter[str] = field(default_factory=Counter)  # cargo step -> from the step cache

    @property
    def total(self) -> int:
        return sum(self.builds.values())

    def row(self) -> str:
        per = f"{self.total / len(self.built):.2f}" if self.built else "-"
        ratio = f"{self.total / len(self.built) / FLOOR:.2f}" if self.built else "-"
        return (
            f"| {self.scenario} | {self.seconds:.0f} | {self.total} | {len(self.built)} "
            f"| {per} | {ratio} |"
        )

    def detail(self) -> str:
        ran = ", ".join(f"{name} x{n}" for name, n in sorted(self.builds.items())) or "none"
        reused = ", ".join(f"{name} x{n}" for name, n in sorted(self.reused.items())) or "none"
        return f"{self.scenario}: ran {ran}; reused from the step cache: {reused}"


# The orchestrator's code the releases run: this checkout, or --code's copy.
CODE = {"root": REPO}


def orchestrator(args: list[str], env: dict[str, str] | None = None) -> str:
    """The real CLI, as a user runs it; exits with its output when it fails."""
    code = CODE["root"]
    run = subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        cwd=code,
        env={**os.environ, "PYTHONPATH": str(code), **(env or {})},
        capture_output=True,
        text=True,
        check=False,
    )
    if run.returncode == LOCK_NOT_WRITTEN and "release.lock not written" in run.stdout:
        # Every target built; only the lock is missing (an image this cache did not make,
        # e.g. a base image another cache's run imported): what this script counts is there.
        print(f"  note: {run.stderr.strip().splitlines()[0]} (no release.lock)", flush=True)
    elif run.returncode != 0:
        sys.exit(
            f"orchestrator {' '.join(args)} failed ({run.returncode}):\n{run.stdout}\n{run.stderr}"
        )
    return run.stdout


def fresh_cache(target: Path, source: Path) -> Path:
    """A cache folder holding only the host cache's downloads, hard-linked (copied across
    file systems): what a cold release must not download again, and nothing it built."""
    target.mkdir(parents=True)
    for name in SHARED:
        if (source / name).is_dir():
            shutil.copytree(source / name, target / name, copy_function=_link_or_copy)
    return target


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


class Project:
    """A copy of the fixture whose orchestrator.toml this script writes: the fixture's own
    settings, its flavors and levels replaced, and the tables a scenario adds."""

    def __init__(self, root: Path, fixture: str, aarch64: bool, config: Path | None = None) -> None:
        if config is None:
            crate, text = REPO / "tests" / "fixtures" / fixture, None
        else:  # the crate the config names, the config beside it in the copy
            crate, text = _crate_of(config)
        self.dir = root / crate.name
        shutil.copytree(crate, self.dir, ignore=_ignored)
        self.config = self.dir / "orchestrator.toml"
        lines = (text or self.config.read_text()).splitlines()
        if "[build]" not in lines:
            lines.append("[build]")
        lines = [line for line in lines if not line.startswith("flavors =")]
        flavors = ["cpu", "aarch64"] if aarch64 else ["cpu"]
        lines.insert(lines.index("[build]") + 1, f"flavors = {json.dumps(flavors)}")
        self.fixture_text = "\n".join(lines) + "\n"
        self.bench_runs: int | None = None  # [bench] runs, when a scenario sets it
        self.cpu_default_features = True
        self.artifacts = root / "artifacts"
        self.since = 0.0  # when the last release() started (time.time())
        self.write()

    def write(self) -> None:
        cpu = f"levels = {json.dumps(list(LEVELS))}\n"
        if not self.cpu_default_features:
            cpu += "default_features = false\n"
        text = _with_cpu_table(self.fixture_text, cpu)
        if self.bench_runs is not None:  # into the fixture's [bench], or a table of its own
            runs = f"[bench]\nruns = {self.bench_runs}\n"
            text = text.replace("[bench]\n", runs, 1) if "[bench]\n" in text else text + runs
        self.config.write_text(text)

    def release(self, cache: Path, env: dict[str, str] | None = None) -> float:
        started = time.monotonic()
        self.since = time.time()  # a target built by this release has a newer logs/run.json
        orchestrator(
            [
                "release",
                "--config",
                str(self.config),
                "--artifacts-dir",
                str(self.artifacts),
                "--cache-dir",
                str(cache),
                "--bench-runs",
                "0",
                "--allow-dirty",
            ],
            env,
        )
        return time.monotonic() - started

    def dry_run(self, cache: Path) -> list[dict[str, Any]]:
        """`release --dry-run --json`'s targets: what the caches hold for each."""
        argv = ["release", "--dry-run", "--json", "--config", str(self.config)]
        argv += ["--artifacts-dir", str(self.artifacts), "--cache-dir", str(cache)]
        targets: list[dict[str, Any]] = json.loads(orchestrator(argv))["targets"]
        return targets

    def images_present(self, cache: Path) -> bool:
        return all(
            t["cached"]["toolchain_image"] and t["cached"]["base_image"]
            for t in self.dry_run(cache)
        )

    def count(self, scenario: str, seconds: float) -> Outcome:
        """The cargo steps this release ran, from its logs/targets.json and each target's
        logs/run.json (a run that built nothing writes neither: nothing was built)."""
        (release,) = [p for p in self.artifacts.iterdir() if (p / "release.json").is_file()]
        runs = release / "logs" / "targets.json"
        entries = json.loads(runs.read_text())["targets"] if runs.is_file() else []
        built = [
            e["artifact"]
            for e in entries
            if e["status"] == "ok"
            and (release / e["artifact"] / "logs" / "run.json").stat().st_mtime >= self.since
        ]  # a cached target keeps the entry (and run.json) of the release that built it
        outcome = Outcome(scenario, seconds, built)
        for artifact in built:
            manifest = json.loads((release / artifact / "logs" / "run.json").read_text())
            for step in manifest["steps"]:
                if step["name"] in CARGO_STEPS and step["status"] == "ok":
                    outcome.builds[step["name"]] += 1
                elif step["name"] in CARGO_STEPS and step["status"] == "cached":
                    outcome.reused[step["name"]] += 1
        return outcome


def _ignored(folder: str, names: list[str]) -> set[str]:
    return {"target", "artifacts", ".orchestrator"} & set(names)


def _crate_of(config: Path) -> tuple[Path, str]:
    """The crate folder `config` names ([package] crate, relative to it) and the config's
    text with the crate at "." (the copy puts the config inside the crate)."""
    config = config.resolve()
    text = config.read_text()
    crate = config.parent
    lines = []
    for line in text.splitlines():
        names_crate = line.replace(" ", "").startswith("crate=")
        if names_crate:
            named = line.split("=", 1)[1].split("#")[0].strip().strip('"')
            crate = (config.parent / named).resolve()
        lines.append('crate = "."' if names_crate else line)
    return crate, "\n".join(lines) + "\n"


def _with_cpu_table(text: str, body: str) -> str:
    """`text` with `body` at the top of its [flavors.cpu] table (added when missing), and
    that table's own levels and default_features lines dropped."""
    lines = text.splitlines()
    if "[flavors.cpu]" not in lines:
        return text + "\n[flavors.cpu]\n" + body
    out, in_cpu = [], False
    for line in lines:
        if line.startswith("["):
            in_cpu = line.strip() == "[flavors.cpu]"
            out.append(line)
            if in_cpu:
                out.extend(body.splitlines())
            continue
        if in_cpu and line.split("=")[0].strip() in ("levels", "default_features"):
            continue
        out.append(line)
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--fixture", default="portable-cli", help="under tests/fixtures/")
    parser.add_argument("--no-aarch64", action="store_true", help="the two cpu levels only")
    parser.add_argument(
        "--config", type=Path, help="a project's orchestrator.toml: release its crate instead"
    )
    parser.add_argument(
        "--code", type=Path, help="another copy of the orchestrator's code to run (before)"
    )
    parser.add_argument(
        "--scenarios",
        default=",".join(SCENARIOS),
        help=f"which of {', '.join(SCENARIOS)} to run, in that order (cold always runs)",
    )
    options = parser.parse_args()
    if options.code is not None:
        CODE["root"] = options.code.resolve()
    wanted = {"cold", *options.scenarios.split(",")}
    name = options.config.parent.name if options.config else options.fixture
    base = resolve_cache_dir(dict(os.environ))
    # Next to the host cache: hard links need the same file system.
    base.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="orch-bench-cost-", dir=base.parent) as scratch:
        root = Path(scratch)
        project = Project(root, options.fixture, not options.no_aarch64, options.config)
        cache = fresh_cache(root / "cache", base)
        if not project.images_present(cache) or not (base / "packages").is_dir():
            # In the host cache: the lock needs the .debs an image was built from, and a
            # later run finds them there (its results land there too, keyed by inputs).
            print("building the missing images first (untimed: no PGO, no BOLT) ...", flush=True)
            no_pgo = {"ORCHESTRATOR_PGO_ENABLED": "false", "ORCHESTRATOR_BOLT_ENABLED": "false"}
            project.release(base, no_pgo)
            shutil.rmtree(project.artifacts)
            shutil.rmtree(cache)
            cache = fresh_cache(root / "cache", base)  # with what the warm-up downloaded
        outcomes = []
        for scenario in (s for s in SCENARIOS if s in wanted):
            change(project, scenario)
            print(f"release: {scenario} ...", flush=True)
            for target in project.dry_run(cache) if scenario != "cold" else []:
                reason = target["cached"]["artifact_reason"] or "-"
                print(f"  action cache, {target['artifact']}: {reason}", flush=True)
            outcomes.append(project.count(scenario, project.release(cache)))
            print(outcomes[-1].detail(), flush=True)
            print(outcomes[-1].row(), flush=True)
    targets = len(LEVELS) + (0 if options.no_aarch64 else 1)
    print(
        f"\n{name} ({CODE['root']}): {targets} targets (cpu {', '.join(LEVELS)}"
        f"{'' if options.no_aarch64 else ', aarch64'}); floor {FLOOR} builds per target\n"
    )
    print(
        "| scenario | seconds | cargo builds | targets built | builds per target | ratio to floor |"
    )
    print("|---|---|---|---|---|---|")
    for outcome in outcomes:
        print(outcome.row())


def change(project: Project, scenario: str) -> None:
    """Make the scenario's one change (on top of the earlier ones)."""
    if scenario == "bench":
        project.bench_runs = 3
    elif scenario == "features":
        project.cpu_default_features = False
    elif scenario == "source":
        main_rs = project.dir / "src" / "main.rs"
        main_rs.write_text(main_rs.read_text() + "\n// one changed line\n")
    project.write()


if __name__ == "__main__":
    main()

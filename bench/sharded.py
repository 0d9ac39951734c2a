"""A release built in one go against the same release built target by target and
assembled: what `orchestrator ci github` runs, timed on this one machine.

    .venv/bin/python bench/sharded.py [--rounds 2] [--levels x86-64-v2,x86-64-v3]

The crate is the mixed-language fixture (Rust plus C through build.rs, PGO trained on its
workload, tests run), one cpu flavor at the given levels. Every run starts from a cold
step cache: each gets a cache of its own holding only what a CI runner's actions/cache
restores (rootfs, .debs, vendored crates, hard-linked from this machine's cache), so
nothing is shared between targets that CI runners would not share either.

Rounds alternate one-shot and sharded, so both see the same machine load. Printed per
round: the one-shot release's wall seconds; each `build --target` and the `release
assemble` in seconds; the sharded sum (one machine doing every shard in turn) and the
sharded wall time on a CI matrix (the slowest shard plus assemble: the shards run side by
side there); and whether the two releases' binaries and archives are the same bytes.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from orchestrator.config.resolve.options import resolve_cache_dir  # noqa: E402
from tests.integration.conftest import orchestrator  # noqa: E402

FIXTURE = REPO / "tests" / "fixtures" / "mixed-language"
RELEASE = "mixed-language-0.1.0"
CONFIG = """
[package]
crate = "."

[build]
source_date_epoch = 1700000000

[flavors.cpu]
levels = {levels}

[train]
workloads = [["2000"], ["50"]]

[release]
distro_check = "off"

[validate]
command = ["3000"]
"""


def restored_cache(where: Path) -> Path:
    """What actions/cache restores on a runner: rootfs, .debs, vendored crates."""
    main = resolve_cache_dir(os.environ, None)
    for part in ("rootfs", "packages", "crates"):
        if (main / part).is_dir():
            shutil.copytree(main / part, where / part, copy_function=os.link)
    return where


def run(argv: list[str]) -> float:
    started = time.monotonic()
    result = orchestrator(argv)
    if result.returncode != 0:
        sys.exit(f"{' '.join(argv[:3])} failed ({result.returncode})")
    return time.monotonic() - started


def shipped(release: Path) -> dict[str, str]:
    """sha256 of every binary and archive, by name: what must be the same bytes."""
    return {
        path.relative_to(release).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(release.rglob("*"))
        if path.is_file() and (path.name == "mixed-language" or path.name.endswith(".tar.xz"))
    }


def one_shot(project: Path, scratch: Path, key_cache: Path) -> tuple[float, Path]:
    artifacts = scratch / "one-shot"
    config = ["--config", str(project / "orchestrator.toml"), "--artifacts-dir", str(artifacts)]
    seconds = run(["release", *config, "--cache-dir", str(key_cache), "--allow-dirty"])
    return seconds, artifacts / RELEASE


def sharded(
    project: Path, scratch: Path, targets: list[str], key_cache: Path
) -> tuple[list[float], float, Path]:
    config = ["--config", str(project / "orchestrator.toml")]
    folders, shard_seconds = [], []
    for index, target in enumerate(targets):
        out = scratch / f"out-{index}"
        cache = restored_cache(scratch / f"cache-{index}")
        argv = ["build", *config, "--target", target, "--out", str(out)]
        argv += ["--cache-dir", str(cache), "--artifacts-dir", str(scratch / f"a-{index}")]
        shard_seconds.append(run(argv))
        folders.append(str(out / target))
    artifacts = scratch / "assembled"
    argv = ["release", "assemble", *folders, *config, "--artifacts-dir", str(artifacts)]
    assemble = run([*argv, "--cache-dir", str(key_cache), "--allow-dirty"])
    return shard_seconds, assemble, artifacts / RELEASE


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each (2)")
    parser.add_argument("--levels", default="x86-64-v2,x86-64-v3", help="the cpu levels")
    options = parser.parse_args()
    levels = options.levels.split(",")
    suffixes = [
        "" if i == 0 else f"-{level.removeprefix('x86-64-')}" for i, level in enumerate(levels)
    ]
    targets = [f"{RELEASE}-linux-x86_64-cpu{suffix}" for suffix in suffixes]
    one: list[float] = []
    ci_wall: list[float] = []
    with tempfile.TemporaryDirectory(prefix="orch-bench-sharded-") as scratch_dir:
        scratch = Path(scratch_dir)
        project = scratch / "mixed-language"
        shutil.copytree(FIXTURE, project, ignore=shutil.ignore_patterns("target"))
        (project / "orchestrator.toml").write_text(CONFIG.format(levels=levels))
        for round_number in range(1, options.rounds + 1):
            here = scratch / f"round-{round_number}"
            key_cache = restored_cache(here / "signing-cache")  # the one with the key
            seconds, whole = one_shot(project, here / "a", restored_cache(here / "a-cache"))
            shards, assemble, assembled = sharded(project, here / "b", targets, key_cache)
            same = shipped(whole) == shipped(assembled)
            one.append(seconds)
            ci_wall.append(max(shards) + assemble)
            print(
                f"round {round_number}: one-shot {seconds:.0f} s | shards "
                + ", ".join(f"{s:.0f} s" for s in shards)
                + f", assemble {assemble:.1f} s | sum {sum(shards) + assemble:.0f} s, "
                f"CI matrix wall {max(shards) + assemble:.0f} s | same bytes: {same}",
                flush=True,
            )
            shutil.rmtree(here)
    median_one, matrix = statistics.median(one), statistics.median(ci_wall)
    print(
        f"median one-shot {median_one:.0f} s; median sharded wall on a CI matrix {matrix:.0f} s; "
        f"ratio {matrix / median_one:.2f}"
    )


if __name__ == "__main__":
    main()

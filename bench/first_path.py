"""The README's first path, timed: `init`, commit, `build --flavor cpu`, `verify`, on a
copy of a crate that has no orchestrator.toml yet, with a cache of its own.

    .venv/bin/python bench/first_path.py [--crate examples/minilang]

What "cold" means is printed, not assumed: the step cache, vault and crates are always
empty (a fresh ORCHESTRATOR_CACHE_DIR); the images are whatever this engine holds, and the
script says whether the base and cpu toolchain images were there at the start (remove
them first, on a machine nobody else is using, for a cold-image run). Printed: each
command's wall seconds, the build's step times from build.json, and the total.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ORCHESTRATOR = [sys.executable, "-m", "orchestrator"]


def _timed(argv: list[str], cwd: Path, env: dict[str, str]) -> float:
    started = time.monotonic()
    subprocess.run(argv, cwd=cwd, env=env, check=True)
    return time.monotonic() - started


def _images() -> list[str]:
    listing = subprocess.run(
        ["docker", "images", "--format", "{{.Repository}}:{{.Tag}}", "orchestrator/*"],
        capture_output=True,
        text=True,
        check=False,
    )
    return sorted(line for line in listing.stdout.splitlines() if line)


def _first_path(source: Path, scratch: Path) -> None:
    crate = scratch / source.resolve().name
    shutil.copytree(
        source,
        crate,
        ignore=shutil.ignore_patterns("target", "artifacts", "orchestrator.toml"),
    )
    env = {**os.environ, "ORCHESTRATOR_CACHE_DIR": str(scratch / "cache")}
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.invalid"]
    subprocess.run(["git", "init", "-q"], cwd=crate, check=True)
    subprocess.run([*git, "add", "-A"], cwd=crate, check=True)
    subprocess.run([*git, "commit", "-qm", "the crate"], cwd=crate, check=True)
    images = _images()
    print(f"images at the start: {', '.join(images) or 'none'}", flush=True)
    seconds = {"init": _timed([*ORCHESTRATOR, "init"], crate, env)}
    subprocess.run([*git, "add", "orchestrator.toml"], cwd=crate, check=True)
    subprocess.run([*git, "commit", "-qm", "Add orchestrator.toml"], cwd=crate, check=True)
    seconds["build --flavor cpu"] = _timed([*ORCHESTRATOR, "build", "--flavor", "cpu"], crate, env)
    release = next((crate / "artifacts").iterdir())
    seconds["verify"] = _timed([*ORCHESTRATOR, "verify", str(release)], crate, env)
    build = json.loads(next(release.glob("*/logs/run.json")).read_text())
    print("\nstep times of the build (logs/run.json):")
    for step in build.get("steps", []):
        print(f"  {step['name']:<16} {step['seconds']:8.1f} s  {step.get('status', '')}")
    print("\ncommands:")
    for name, wall in seconds.items():
        print(f"  {name:<20} {wall:8.1f} s")
    print(f"  {'total':<20} {sum(seconds.values()):8.1f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--crate", type=Path, default=ROOT / "examples" / "minilang")
    parser.add_argument(
        "--keep", action="store_true", help="keep the copy, its cache and the step logs"
    )
    args = parser.parse_args()
    scratch = tempfile.mkdtemp(prefix="first-path-")
    print(f"working in {scratch}", flush=True)
    try:
        _first_path(args.crate, Path(scratch))
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

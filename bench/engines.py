"""One engine against two: the engines tests' three-target release (the mixed-language
crate at three CPU levels), timed on the host's engine alone and over the host's engine
plus a second dockerd started on this machine (tests/integration/second_engine.py).

    .venv/bin/python bench/engines.py [--rounds 3]

Rounds alternate one engine, two engines, so both see the same machine load. Every round
rebuilds every target (--force). The second engine starts empty: its first round also
imports the base rootfs and builds the toolchain image there, and is reported apart.
Prints wall seconds per round, which engine built what, the medians and their ratio, and
the spread of the per-round ratios (each round's two runs are a pair under the same load).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.integration.second_engine import second_engine  # noqa: E402
from tests.integration.test_engines import CONFIG, CONTEXT, FIXTURE, release, summary  # noqa: E402


def timed_release(project: Path, artifacts: Path, engines: str) -> tuple[float, dict[str, str]]:
    """Wall seconds of one forced release on `engines`, and which engine built each target."""
    started = time.monotonic()
    with contextlib.redirect_stdout(io.StringIO()):  # the release's own output: on failure
        run = release(project, artifacts, "--force", "--engines", engines)
    seconds = time.monotonic() - started
    if run.returncode != 0:
        sys.exit(f"release on {engines} failed ({run.returncode}):\n{run.output}")
    return seconds, {name: entry["engine"] for name, entry in summary(artifacts).items()}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds of each (3)")
    rounds = parser.parse_args().rounds
    with tempfile.TemporaryDirectory(prefix="orch-bench-engines-") as scratch:
        project = Path(scratch) / "mixed-language"
        shutil.copytree(FIXTURE, project, ignore=shutil.ignore_patterns("target"))
        (project / "orchestrator.toml").write_text(CONFIG)
        one: list[float] = []
        two: list[float] = []
        with second_engine(CONTEXT):
            print("warming the host engine's images (not timed) ...", flush=True)
            timed_release(project, Path(scratch) / "one", "default")
            first, where = timed_release(project, Path(scratch) / "two", f"default,{CONTEXT}")
            print(f"two engines, second engine cold: {first:.1f} s  {where}", flush=True)
            for index in range(1, rounds + 1):
                seconds, _ = timed_release(project, Path(scratch) / "one", "default")
                one.append(seconds)
                print(f"round {index}: one engine {seconds:.1f} s", flush=True)
                seconds, where = timed_release(project, Path(scratch) / "two", f"default,{CONTEXT}")
                two.append(seconds)
                print(f"round {index}: two engines {seconds:.1f} s  {where}", flush=True)
    median_one, median_two = statistics.median(one), statistics.median(two)
    ratios = [b / a for a, b in zip(one, two, strict=True)]
    print(
        f"median of {rounds}: one engine {median_one:.1f} s, two engines {median_two:.1f} s, "
        f"two/one = {median_two / median_one:.2f} (range one {min(one):.1f}-{max(one):.1f}, "
        f"two {min(two):.1f}-{max(two):.1f}; per-round two/one {min(ratios):.2f}-"
        f"{max(ratios):.2f})"
    )


if __name__ == "__main__":
    main()

"""What the dispatching `-auto` artifact costs and buys, counted under callgrind.

    .venv/bin/python bench/dispatch.py RELEASE_DIR CRATE_DIR [--flavor cpu]

RELEASE_DIR is a published release (`orchestrator release` with two or more x86-64 levels
of one flavor, e.g. artifacts/minilang-0.1.0); CRATE_DIR is the crate whose gate
workloads are counted (they run from its root, as in the build). Every count runs in the
release's cpu toolchain image (valgrind with the gate's fixed cache geometry, pinned to
one CPU, no network, the release mounted read-only), one workload at a time.

Printed per gate workload, in estimated cycles (model/verdict/callgrind.py): plain `cargo build
--release` (from the portable level's build.json, where the gate counted it), each level's
shipped binary run directly, and the dispatcher starting the level it picks on this
machine; then the dispatcher's own cost (the difference between the dispatched run and
the chosen level run directly, and the dispatcher's instructions with
ORCHESTRATOR_LEVEL=show, which stops where the exec would happen).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from orchestrator.model.verdict.callgrind import CALLGRIND_ARGS, Counts, parse_totals
from orchestrator.plan.gate import COUNT_SCRIPT

WORKDIR = "/build/src"


def _count(image: str, release: Path, crate: Path, argv: list[str], env: dict[str, str]) -> Counts:
    out = "/tmp/count"  # noqa: S108 - the throwaway container's own /tmp
    command = [
        "docker", "run", "--rm", "--network", "none", "--cap-drop", "ALL",
        "-v", f"{release}:/release:ro", "-v", f"{crate}:{WORKDIR}:ro", "-w", WORKDIR,
        *[part for key, value in env.items() for part in ("-e", f"{key}={value}")],
        image, "/bin/sh", "-c", COUNT_SCRIPT, "sh", out, "", "0",
        *CALLGRIND_ARGS, f"--callgrind-out-file={out}/callgrind.%p", *argv,
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(
            f"counting {' '.join(argv)} failed ({done.returncode}):\n{done.stdout}{done.stderr}"
        )
    return parse_totals(done.stdout.splitlines())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("release", type=Path)
    parser.add_argument("crate", type=Path)
    parser.add_argument("--flavor", default="cpu")
    args = parser.parse_args()
    release, crate = args.release.resolve(), args.crate.resolve()
    auto = next(release.glob(f"*-{args.flavor}-auto"), None)
    if auto is None:
        sys.exit(f"{release} holds no *-{args.flavor}-auto folder: release two or more levels")
    record = json.loads((auto / "compose.json").read_text())
    levels = record["levels"]
    portable = json.loads((release / levels[min(levels)]["target"] / "build.json").read_text())
    image = portable["images"]["toolchain"]["reference"]
    binary = record["binaries"][0]
    gate = portable["gate"]
    shown = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "-v", f"{release}:/release:ro", "-e",
         "ORCHESTRATOR_LEVEL=show", image, f"/release/{auto.name}/bin/{binary}"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    picked = dict(part.split("=", 1) for part in shown.split())["level"]
    print(f"image {image}; the dispatcher picks {picked} here ({shown})")
    start = _count(
        image,
        release,
        crate,
        [f"/release/{auto.name}/bin/{binary}"],
        {"ORCHESTRATOR_LEVEL": "show"},
    )
    print(f"dispatcher alone (ORCHESTRATOR_LEVEL=show): {start.instructions:,} instructions")
    header = ["workload", "plain cargo", *[f"{level} direct" for level in levels], "auto"]
    print(" | ".join(header))
    # The gate's workloads of the main binary, as build.json labels them (arguments joined
    # by spaces: one whose arguments hold spaces, or another binary's, is left out).
    for counted in gate["per_workload"]:
        if ": " in counted["workload"]:
            continue
        workload = counted["workload"].split()
        row = [counted["workload"], f"{counted['cycles']['baseline']:,}"]
        direct: dict[str, Counts] = {}
        for level, entry in levels.items():
            path = f"/release/{entry['target']}/{binary}"  # the level's shipped binary
            direct[level] = _count(image, release, crate, [path, *workload], {})
            row.append(f"{direct[level].estimated_cycles:,}")
        dispatched = _count(
            image, release, crate, [f"/release/{auto.name}/bin/{binary}", *workload], {}
        )
        extra = dispatched.estimated_cycles - direct[picked].estimated_cycles
        row.append(f"{dispatched.estimated_cycles:,} ({extra:+,} vs {picked} direct)")
        print(" | ".join(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Does a toolchain image kept in the CI cache (a `docker save` archive) beat building it?

    .venv/bin/python bench/image_cache.py [--flavor cpu] [--runs 2] [--json out.json]

Each run, side by side on this engine: the flavor's toolchain image is built under a
reference of this script's own (`orchestrator/<flavor>:bench-<session>-<tag>`, as
`reproduce` builds fresh images: the shared images are never touched), from the .debs and
rootfs already in the host cache (both paths need those for the lock anyway, so neither
is timed); then saved with `docker save` into a file (what a build job that made the image
pays once), removed, and loaded back with `docker load` (what every later job pays), its
id checked against the saved one, and removed. The CI cache's own upload and download
(actions/cache, GitLab's cache) come on top of save and load and are not measured here.
The base image is imported under the private reference first, untimed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from orchestrator.cli.app import resolve_options  # noqa: E402
from orchestrator.execute.build import prepare_plan  # noqa: E402
from orchestrator.execute.steps.toolchain import plan_toolchain_image  # noqa: E402
from orchestrator.host.bootstrap import fetch_packages, load_package_set  # noqa: E402
from orchestrator.progress.reporter import StepLog  # noqa: E402
from orchestrator.release.lock.reproduce import private_images  # noqa: E402
from orchestrator.runtime.engine import Engine  # noqa: E402
from orchestrator.runtime.images import ensure_base_image, package_set_dir  # noqa: E402


def one_run(
    engine: Engine, config: Path, flavor: str, session: str, log: StepLog
) -> dict[str, float]:
    options = resolve_options(config)
    plan = private_images(prepare_plan(options, flavor), session)
    made: list[str] = []
    try:
        base = ensure_base_image(engine, plan.base, plan.base_image, options.cache_dir, log)
        made.append(plan.base_image.reference)
        debs = package_set_dir(
            plan.base, plan.packages, options.cache_dir, plan.apt_sources, plan.unpack
        )
        if load_package_set(debs) is None:  # downloads are not what is compared: untimed
            fetch_packages(
                plan.base, plan.packages, debs, log, sources=plan.apt_sources, unpack=plan.unpack
            )
        started = time.monotonic()
        image = plan_toolchain_image(
            engine, plan, base, log, cache_dir=options.cache_dir, offline=options.offline
        )
        made.append(plan.image.reference)
        build = time.monotonic() - started
        if not image.built:
            raise SystemExit(f"{plan.image.reference} existed: nothing was built to compare")
        with tempfile.TemporaryDirectory(dir=options.cache_dir) as folder:
            archive = Path(folder) / "image.tar"
            started = time.monotonic()
            engine.save_image(plan.image.reference, archive)
            save = time.monotonic() - started
            size = archive.stat().st_size
            engine.remove_image(plan.image.reference)
            started = time.monotonic()
            engine.load_image(archive)
            load = time.monotonic() - started
        loaded = engine.image(plan.image.reference)
        if loaded is None or loaded.id != image.id:
            raise SystemExit(f"docker load gave {loaded and loaded.id}, not {image.id}")
        return {"build_s": build, "save_s": save, "load_s": load, "archive_bytes": size}
    finally:
        for reference in reversed(made):
            engine.remove_image(reference)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--config", type=Path, default=REPO / "tests/fixtures/ci-release/orchestrator.toml"
    )
    parser.add_argument("--flavor", default="cpu")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    engine = Engine.connect()
    runs = []
    with tempfile.TemporaryFile("w+") as handle:
        log = StepLog(handle, None, None, "bench-image-cache")
        for number in range(1, args.runs + 1):
            result = one_run(
                engine, args.config, args.flavor, f"bench{number}-{engine.session[:8]}", log
            )
            runs.append(result)
            print(
                f"run {number}: build {result['build_s']:.1f} s; save {result['save_s']:.1f} s, "
                f"load {result['load_s']:.1f} s ({result['archive_bytes'] / 1e9:.2f} GB)",
                flush=True,
            )
    summary = {
        key: statistics.median(r[key] for r in runs) for key in ("build_s", "save_s", "load_s")
    }
    print(
        f"median of {len(runs)}: build {summary['build_s']:.1f} s against save "
        f"{summary['save_s']:.1f} s + load {summary['load_s']:.1f} s"
    )
    if args.json:
        args.json.write_text(
            json.dumps({"flavor": args.flavor, "runs": runs, "median": summary}, indent=1)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Run as a process of its own by test_concurrency.py: make sure one base image exists,
exactly as a build's base-image step does (the engine's lock included), and print the
outcome. Its rootfs tarball is already in the cache given, so nothing is downloaded."""

from __future__ import annotations

import sys
from pathlib import Path

from orchestrator.config.resolve.toolchains import load_base_spec
from orchestrator.plan.images import ImagePlan
from orchestrator.progress.reporter import StepLog
from orchestrator.runtime.engine import Engine
from orchestrator.runtime.images import ensure_base_image


def main(reference: str, input_hash: str, cache_dir: str) -> None:
    log = StepLog(sys.stdout, None, None, "base-image")
    plan = ImagePlan(reference, input_hash)
    outcome = ensure_base_image(
        Engine.connect(), load_base_spec(), plan, Path(cache_dir), log, offline=True
    )
    print(f"outcome id={outcome.id} built={outcome.built}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])

"""Training on another machine: `build --train-elsewhere DIR` runs the plan up to the
instrumented build and writes a training bundle (execute/optimize/train_bundle.py); `build
--profiles FILE` brings back what its train.sh wrote, in place of the pgo-train step.

The build host keeps a copy of each bundle's manifest under the plan's profile key, so
profiles are checked against what this machine wrote, not against a manifest that came
back with them.
"""

from __future__ import annotations

import io
import shutil
from collections.abc import Iterable
from pathlib import Path

from orchestrator.errors import BundleError, ProfileError
from orchestrator.execute.optimize.train_bundle import MANIFEST, write_bundle
from orchestrator.execute.optimize.train_gpu import judge_gpu_checks
from orchestrator.execute.optimize.train_profiles import (
    TrainedElsewhere,
    load_manifest,
    read_profiles,
)
from orchestrator.execute.steps.commands import fetch_file, put_file
from orchestrator.execute.steps.pipeline import Pipeline, variant_binary
from orchestrator.host.archive import safe_extract
from orchestrator.model.documents.training_bundle import (
    BundleGpuCheck,
    BundleWorkload,
    TrainingManifest,
)
from orchestrator.model.hashing import sha256_file
from orchestrator.progress.reporter import StepLog
from orchestrator.supply.attest import Signer

TRAINED_HERE = "trained here"


def _bundle_path(container_path: str) -> str:
    """/build/src/x -> src/x: where a container path lies in the bundle."""
    return container_path.removeprefix("/build/").strip("/") or "src"


def kept_manifest(cache_dir: Path, profile_key: str) -> Path:
    return cache_dir / "profiles" / "bundles" / f"{profile_key}.json"


def gpu_checks(pipeline: Pipeline, binaries: Iterable[str]) -> tuple[str, list[BundleGpuCheck]]:
    """A GPU flavor's checks for the bundle: each validation run with its arguments (the
    CPU reference) and with the flavor's gpu_args appended; ("", []) for none (no GPU
    flavor, `gpu = "off"`, or no gpu_args to put a run on the GPU)."""
    plan = pipeline.plan
    settings = pipeline.options.settings_for(plan.flavor)
    if plan.device_code is None or settings.gpu == "off" or not settings.gpu_args:
        return "", []
    shipped = set(binaries)
    checks = [
        BundleGpuCheck(
            index=index,
            binary=f"bin/{name}",
            cpu_args=tuple(run.args),
            gpu_args=(*run.args, *settings.gpu_args),
        )
        for index, run in enumerate(plan.validation_runs)
        if (name := run.binary_or(plan.binary)) in shipped
    ]
    return ("nvidia" if plan.device_code.kind == "cuda" else "amd") if checks else "", checks


def export_bundle(pipeline: Pipeline, dest: Path) -> TrainingManifest:
    """Write the bundle of the instrumented binaries the pgo-instrument step left."""
    plan, box = pipeline.plan, pipeline.box
    if plan.pgo is None:
        raise BundleError("--train-elsewhere needs PGO: this build has it off")
    fetched = pipeline.scratch / "bundle-bin"
    binaries = {
        name: fetch_file(box, variant_binary("pgo-generate", name), fetched / name)
        for name in plan.binaries
    }
    workloads = [
        BundleWorkload(index=index, binary=f"bin/{name}", args=tuple(w.args))
        for index, w in enumerate(plan.workloads)
        if (name := w.binary_or(plan.binary)) in binaries
    ]
    vendor, checks = gpu_checks(pipeline, binaries)
    inputs: dict[str, Path] = {}
    for item in plan.run.inputs:  # each archive unpacks to inputs/<name>
        safe_extract(io.BytesIO(item.archive), pipeline.scratch / "bundle-inputs")
        inputs[item.name] = pipeline.scratch / "bundle-inputs" / "inputs" / item.name
    manifest = write_bundle(
        dest,
        signer=_signer(pipeline),
        identity={
            "package": pipeline.options.binary,
            "version": pipeline.options.version,
            "flavor": plan.flavor,
            "profile_key": plan.pgo.profile_key,
        },
        arch=plan.rust_target.split("-", 1)[0],
        binaries=binaries,
        workloads=workloads,
        crate_dir=pipeline.options.crate_dir,
        inputs=inputs,
        workdir=_bundle_path(plan.run.workdir),
        stdin=_bundle_path(plan.run.stdin) if plan.run.stdin else "",
        environment=plan.run.environment,
        gpu_vendor=vendor,
        gpu_checks=checks,
    )
    kept = kept_manifest(pipeline.options.cache_dir, plan.pgo.profile_key)
    kept.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(dest / MANIFEST, kept)
    return manifest


def _signer(pipeline: Pipeline) -> Signer:
    if pipeline.signer is None:
        raise BundleError("--train-elsewhere signs its manifest: it needs the signing key")
    return pipeline.signer


def import_profiles(pipeline: Pipeline, tar_path: Path, log: StepLog) -> TrainedElsewhere:
    """The pgo-train step for `--profiles`: the checked .profraw files into the raw folder
    that pgo-merge reads, and where they came from for build.json and the lock."""
    pgo = pipeline.plan.pgo
    if pgo is None:
        raise ProfileError("internal: --profiles in a plan without PGO")
    kept = kept_manifest(pipeline.options.cache_dir, pgo.profile_key)
    if not kept.is_file():
        raise BundleError(
            f"this machine wrote no training bundle for this build (profile key "
            f"{pgo.profile_key[:12]}): the profiles cannot be checked",
            hint="Run `orchestrator build --train-elsewhere DIR` with the same config and "
            "sources, train with that bundle, and bring back its profiles.tar.",
        )
    manifest, digest = load_manifest(kept)
    trained = read_profiles(tar_path, manifest, digest, pipeline.scratch / "trained")
    for path in trained.raw_files:
        put_file(pipeline.box, f"{pgo.raw_dir}/{path.parent.name}_{path.name}", path.read_bytes())
    if pipeline.plan.device_code is not None:  # before anything is signed
        pipeline.state.gpu_path = judge_gpu_checks(
            manifest,
            trained,
            tolerance=pipeline.plan.validate_tolerance,
            select=pipeline.plan.validate_select,
            where=tar_path.name,
        )
        log.line(f"gpu path: {pipeline.state.gpu_path}")
    # profiles.tar is unsigned (no key on the trainer): its sha256 names what was merged
    pipeline.state.profile_source = (
        f"trained elsewhere: {trained.summary()}, bundle {digest}, profiles {sha256_file(tar_path)}"
    )
    log.detail = f"{len(trained.raw_files)} .profraw from {tar_path.name} ({trained.summary()})"
    return trained

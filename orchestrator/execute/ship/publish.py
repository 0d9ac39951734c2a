"""`extract` and `publish`: the shipped binary leaves the container, gets its SBOM,
build.json and signature on the host, and moves into artifacts/ in one rename."""

from __future__ import annotations

import datetime as dt
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from orchestrator import __version__
from orchestrator.config.declarations.kinds import Run
from orchestrator.errors import StepFailedError
from orchestrator.execute.optimize.bolt_record import bolt_binaries_record, bolt_binaries_shipped
from orchestrator.execute.optimize.c_code import c_code_record, c_code_shipped
from orchestrator.execute.optimize.variants import keep_variants
from orchestrator.execute.ship.archive_files import generate_archive_files
from orchestrator.execute.ship.archive_stage import (
    ArtifactToPublish,
    PublishSettings,
    stage_archives,
)
from orchestrator.execute.steps.commands import fetch_file
from orchestrator.execute.steps.pipeline import Pipeline
from orchestrator.execute.steps.profiles import ProfileRecord
from orchestrator.host.source import CrateView, crate_identity
from orchestrator.host.staging import commit, fsync_tree, write_checksums
from orchestrator.model.documents.records import (
    ArtifactInfo,
    BinaryFile,
    BoltInfo,
    BuildManifest,
    CrateDependency,
    DebDependency,
    Dependencies,
    EngineRecord,
    FileDigest,
    FlagsInfo,
    GateInfo,
    ImageRecord,
    ImagesInfo,
    InputsInfo,
    PgoInfo,
    PortabilityInfo,
    RootfsDependency,
    RunRecord,
    RunShape,
    SourceIdentity,
    ToolchainInfo,
    write_record,
)
from orchestrator.model.documents.run_logs import BUILD_RUN, LOGS_DIR, split_run
from orchestrator.model.documents.shipped_profile import debug_warning, shipped_profile
from orchestrator.model.hashing import sha256_file
from orchestrator.model.verdict.bolt_binaries import other_profile_name
from orchestrator.model.verdict.callgrind import FORMULA
from orchestrator.plan.c_code import off_candidate
from orchestrator.plan.cargo_flags import RELEASE_PROFILE
from orchestrator.plan.serialize import action_key, cargo_test_record
from orchestrator.progress.reporter import StepLog
from orchestrator.runtime.api import engine_record
from orchestrator.runtime.engine import Engine
from orchestrator.runtime.images import ImageOutcome
from orchestrator.supply.attest import (
    Signer,
    artifact_comment,
    write_release_index,
)
from orchestrator.supply.chain import SignedChain
from orchestrator.supply.sbom import SBOM_FILE, build_sbom

T = TypeVar("T")

# Targets built side by side (several engines) publish one at a time: each publication
# rewrites the release index from what the release folder holds.
_PUBLISHING = threading.Lock()


def _need(value: T | None) -> T:
    if value is None:
        raise StepFailedError("internal: publish runs before a step it depends on")
    return value


def _now() -> str:
    return dt.datetime.now(tz=dt.UTC).isoformat(timespec="seconds")


def _shipped_optimizations(pipeline: Pipeline) -> tuple[bool, bool]:
    """Whether the shipped binary holds PGO and BOLT: the gate (run before extract) may
    ship a less optimized variant than was built."""
    state = pipeline.state
    shipped = state.gate.shipped if state.gate else None  # None: the most optimized ships
    bolt_applied = bool(state.bolt_report and state.bolt_report.get("applied"))
    pgo = state.pgo is not None and shipped not in ("release", off_candidate(pgo=False))
    return pgo, bolt_applied and shipped in (None, "bolt", "pgo-bolt")


def _profiles(pipeline: Pipeline) -> list[tuple[str, ProfileRecord | None]]:
    """The profiles published with the artifact, named for what they are to its binary:
    `pgo.profdata`/`bolt.fdata` when the shipped binary was optimized with them,
    `*.unshipped.*` when it was not. Those are kept because `reproduce` rebuilds every
    variant the gate compared."""
    pgo, bolt = _shipped_optimizations(pipeline)
    state = pipeline.state
    others = bolt_binaries_shipped(pipeline)
    return [
        ("pgo.profdata" if pgo else "pgo.unshipped.profdata", state.pgo),
        ("bolt.fdata" if bolt else "bolt.unshipped.fdata", state.bolt_profile),
        *(
            (other_profile_name(name, shipped=others.get(name, False)), record)
            for name, record in state.bolt_other_profiles.items()
        ),
    ]


def extract(pipeline: Pipeline, log: StepLog) -> None:
    plan, options, state = pipeline.plan, pipeline.options, pipeline.state
    artifact = pipeline.staging / plan.artifact_dir
    artifact.mkdir()
    log.line(f"+ GET /containers/<id>/archive?path={state.shipped}")
    binary = fetch_file(pipeline.box, state.shipped, artifact).rename(artifact / plan.binary)
    others: list[Path] = []
    for name, path in state.others.items():
        log.line(f"+ GET /containers/<id>/archive?path={path}")
        others.append(fetch_file(pipeline.box, path, artifact).rename(artifact / name))
    (artifact / SBOM_FILE).write_text(
        build_sbom(
            name=options.binary,
            cargo_package=options.package_name,
            version=options.version,
            artifact=plan.artifact_dir,
            binary_sha256=sha256_file(binary),
            crates=state.crates,
            toolchain=state.packages,
            timestamp=options.source_date_epoch,
            others=[(other.name, sha256_file(other)) for other in others],
            warn=log.warn,
        )
    )
    state.variants = keep_variants(pipeline, artifact, log)
    state.generated = generate_archive_files(pipeline, artifact, log)
    # The profiles ship with the release: a rebuild can use them instead of retraining.
    profiles = artifact / "profiles"
    for name, record in _profiles(pipeline):
        if record is not None:
            profiles.mkdir(exist_ok=True)
            shutil.copyfile(record.path, profiles / name)
    state.artifact, state.binary = artifact, binary
    state.profile = shipped_profile(pipeline.options.profile, binary)
    if state.profile and (note := debug_warning(state.profile, binary.stat().st_size)):
        log.warn(note)
    size = sum(path.stat().st_size for path in (binary, *others))
    log.detail = f"{size / 1e6:.1f} MB" + (f", {1 + len(others)} binaries" if others else "")


def publish(pipeline: Pipeline, log: StepLog) -> None:
    plan, options, state = pipeline.plan, pipeline.options, pipeline.state
    artifact, binary = _need(state.artifact), _need(state.binary)
    # build.json is signed: how the build went goes to the unsigned logs/run.json beside
    # the step logs, so that two honest builds of these inputs sign the same build.json
    manifest, run = split_run(_manifest(pipeline, binary), plan.artifact_dir)
    write_record(artifact / "build.json", manifest)
    _copy_logs(pipeline.reporter.log_dir, artifact / LOGS_DIR)
    write_record(artifact / BUILD_RUN, run)
    if pipeline.signer is None:  # `build --target`: signed later, by `release assemble`
        handed = _need(pipeline.unsigned_out) / plan.artifact_dir
        handed.parent.mkdir(parents=True, exist_ok=True)
        fsync_tree(artifact)
        artifact.replace(handed)
        state.manifest, state.published = manifest, handed
        log.detail = f"{handed} (unsigned)"
        return
    destination = sign_and_publish(
        ArtifactToPublish(
            folder=artifact,
            name=plan.artifact_dir,
            manifest=manifest,
            source_archive=plan.source.archive,
        ),
        PublishSettings.from_options(options),
        pipeline.signer,
        staging=pipeline.staging,
        say=log.line,
        warn=pipeline.reporter.warn,
    )
    state.manifest, state.published = manifest, destination
    log.detail = str(destination)


def sign_and_publish(
    artifact: ArtifactToPublish,
    settings: PublishSettings,
    signer: Signer,
    *,
    staging: Path,
    say: Callable[[str], None],
    warn: Callable[[str], None],
) -> Path:
    """Sign the binaries, write the folder's SHA256SUMS, make its archive and install.sh,
    rewrite the release index, and move it all into the release at once; where it went.
    The same for a build and for `release assemble`, so both publish the same bytes."""
    folder, manifest = artifact.folder, artifact.manifest
    # Signed on the host, before publication; the key never enters a container.
    for shipped in manifest.artifact.binaries:
        signature = signer.sign(
            folder / shipped.file,
            trusted_comment=artifact_comment(manifest, artifact.name, shipped.file),
        )
        say(
            f"signed {shipped.file} -> {signature.name} with key "
            f"{signer.key.public.id_text} ({signer.source})"
        )
    sums = write_checksums(folder)
    say(sums.read_text().rstrip())
    release_dir = settings.release_dir
    # All or nothing: the release index for the new state is written beside the staged
    # artifact, everything is flushed to disk, and only then renamed into place together.
    index = staging / ".release-index"
    index.mkdir()
    # The archive and installer are staged with the index: they appear with it, or not at all.
    staged = stage_archives(artifact, settings, signer, index, say)
    with _PUBLISHING:
        signed = write_release_index(
            release_dir,
            signer,
            index,
            chain=SignedChain.read(release_dir, signer.key.public),
            incoming=(artifact.name, folder),
            staged=staged,
        )
        fsync_tree(folder)
        fsync_tree(index)
        commit(
            release_dir,
            index=index,
            backup=staging / ".previous",
            artifact=(folder, artifact.name),
        )
    for path in signed.written:
        say(f"release index: wrote {path.name}")
    for entry in signed.left_out:
        warn(f"left out of the release's signature: {entry}")
    return release_dir / artifact.name


def _copy_logs(source: Path, dest: Path) -> None:
    # Not shutil.copytree: it folds a full disk into a shutil.Error without an errno.
    dest.mkdir()
    for log in sorted(source.iterdir()):
        if log.is_file():
            shutil.copyfile(log, dest / log.name)


def _manifest(pipeline: Pipeline, binary: Path) -> BuildManifest:
    """build.json: what was built, from what, how, and what the checks found."""
    options, plan, state = pipeline.options, pipeline.plan, pipeline.state
    base, report, vendor = _need(state.base), _need(state.toolchain), _need(state.vendor)
    settings = options.settings_for(plan.flavor)
    bolt = BoltInfo.model_validate(state.bolt_report) if state.bolt_report else None
    gate = state.gate or GateInfo(
        policy=options.gate_policy,
        min_gain=options.gate_min_gain,
        metric=FORMULA,
        skipped=plan.gate_skipped or None,
    )
    pgo_shipped, bolt_shipped = _shipped_optimizations(pipeline)
    if bolt is not None:
        bolt = bolt.model_copy(
            update={"shipped": bolt_shipped, "binaries": bolt_binaries_record(pipeline)}
        )
    return BuildManifest(
        orchestrator_version=__version__,
        artifact=ArtifactInfo(
            name=options.binary,
            version=options.version,
            flavor=plan.flavor,
            arch=plan.arch,
            target=plan.rust_target,
            file=plan.binary,
            sha256=sha256_file(binary),
            size=binary.stat().st_size,
            other_binaries=[
                BinaryFile(
                    file=name,
                    sha256=sha256_file(binary.parent / name),
                    size=(binary.parent / name).stat().st_size,
                )
                for name in state.others
            ],
            optimizations=[
                name
                for name, on in (
                    # [c_code] mode: lld links Rust and C bitcode in one LTO, unless the
                    # gate shipped the build with the mode off
                    ("lto-fat", not c_code_shipped(pipeline)),
                    ("lto-cross-language", c_code_shipped(pipeline)),
                    ("pgo", pgo_shipped),
                    ("bolt", bolt_shipped),
                )
                if on
            ],
        ),
        toolchain=ToolchainInfo(
            spec=plan.toolchain.flavor_view(plan.flavor, plan.arch), reported=report.as_dict()
        ),
        images=ImagesInfo(base=_image(base), toolchain=_image(pipeline.image)),
        flags=FlagsInfo(
            target_cpu=plan.target_cpu,
            rustflags=list(plan.rustflags),
            release_profile={**RELEASE_PROFILE, **(plan.c_code.profile if plan.c_code else {})},
            features=list(settings.features),
            default_features=settings.default_features,
            variants={
                name: {"cargo": list(v.build.argv), "rustflags": v.rustflags}
                for name, v in plan.variants.items()
            },
            cargo_test=list(plan.test.argv),
            environment={
                k: v for k, v in plan.build.environment.items() if k != "CARGO_ENCODED_RUSTFLAGS"
            },
        ),
        inputs=InputsInfo(
            config=options.config_path.name,
            config_sha256=sha256_file(options.config_path),
            source_archive_sha256=plan.source.archive_sha256,
            cargo_lock_sha256=plan.source.cargo_lock_sha256,
            vendored_crates_sha256=sha256_file(vendor),
            source_date_epoch=options.source_date_epoch,
            workloads=[_run_shape(w) for w in plan.workloads],
        ),
        pgo=PgoInfo(
            profile=state.pgo.as_dict(),
            profile_key=plan.pgo.profile_key if plan.pgo else None,
            coverage=state.coverage.as_dict() if state.coverage else None,
            shipped=pgo_shipped,
            profile_source=str(state.pgo.details.get("profile_source") or "trained here"),
        )
        if state.pgo
        else None,
        bolt=bolt,
        profiling=pipeline.perf.as_dict() | {"container_started": pipeline.profiler_started},
        validation=state.validation,
        variants=state.variants,
        # The publish step is still running while this is written.
        steps=[r.as_dict() for r in pipeline.reporter.results if r.status != "running"],
        dependencies=Dependencies(
            rootfs=RootfsDependency(
                suite=plan.base.suite, sha256=base.labels.get("org.orchestrator.rootfs-sha256")
            ),
            debian_packages=[
                DebDependency(name=p.name, version=p.version, arch=p.arch, sha256=p.sha256)
                for p in state.packages
            ],
            crates=[
                CrateDependency(name=c.name, version=c.version, sha256=c.sha256)
                for c in state.crates
                if c.sha256
            ],
        ),
        profiles={
            name: FileDigest(sha256=record.sha256, size=record.size)
            for name, record in _profiles(pipeline)
            if record is not None
        },
        source=SourceIdentity.model_validate(
            {**crate_identity(CrateView.from_options(options)), "git": plan.source.git}
        ),
        portability=PortabilityInfo.model_validate(
            {
                **state.portability.as_dict(),
                "distros": [r.model_dump() for r in state.distro_runs],
                "other_binaries": state.other_glibc,
            }
        )
        if state.portability
        else None,
        device_code=state.gpu,
        started_at=pipeline.started,
        finished_at=_now(),
        tests=cargo_test_record(plan),
        run=plan.run.as_dict(),
        action_key=action_key(plan, options),
        gate=gate,
        engine=_engine(pipeline),
        reused_steps=dict(state.reused) or None,
        generated=state.generated or None,
        c_code=c_code_record(pipeline, binary),
        cuda_runtime=state.cuda_runtime,
        static_relocations=state.static_relocations,
        gpu_path=state.gpu_path,
        profile=state.profile,
    )


def _engine(pipeline: Pipeline) -> EngineRecord | None:
    engine: Engine | None = pipeline.engine  # None: unit tests that publish without one
    return engine_record(engine) if engine is not None else None


def _run_shape(run: Run) -> RunShape:
    """A run as recorded: its plain argument list unless it names another binary."""
    return RunRecord(binary=run.binary, args=list(run.args)) if run.binary else list(run.args)


def _image(outcome: ImageOutcome) -> ImageRecord:
    return ImageRecord.model_validate(outcome.as_dict())

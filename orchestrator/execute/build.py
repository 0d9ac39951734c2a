"""Execute a BuildPlan: images, toolchain check, crates, builds, PGO, BOLT, validation, publish.

Only `fetch-crates` has a network. Every other container runs with `--network none`, as
the image's non-root user, with all capabilities dropped. The one exception is the
profiling container, which gets only the perf access that `profiling.find_perf_access`
proves it needs. Build and profiling containers share one volume at /build/out.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path

from orchestrator import __version__
from orchestrator.config.options import Options
from orchestrator.config.toolchains import (
    ToolchainReport,
    check_coherence,
    load_base_spec,
    load_toolchain,
)
from orchestrator.errors import (
    OrchestratorError,
    SourceError,
)
from orchestrator.execute.device import check_device_code, check_gpu_targets
from orchestrator.execute.inventory import inventory, portability_report, source_identity
from orchestrator.execute.optimize import BoltOutcome, ProfileRecord, run_bolt, run_pgo
from orchestrator.execute.pipeline import (
    BIN_DIR,
    Pipeline,
    cargo,
    fetch_file,
    put_file,
    run,
    validate_binary,
)
from orchestrator.flavors import get_flavor
from orchestrator.host.source import snapshot, verify_vendor_archive
from orchestrator.host.staging import publish, staging_area, write_checksums, write_json
from orchestrator.host.vault import VaultError
from orchestrator.model.hashing import sha256_file
from orchestrator.model.layout import PATHS
from orchestrator.model.pgo_report import Coverage, missing_functions
from orchestrator.model.portability import Portability
from orchestrator.plan.build_plan import (
    RELEASE_PROFILE,
    BuildPlan,
    make_plan,
)
from orchestrator.plan.dockerfiles import image_packages, render_dockerfile
from orchestrator.progress import Reporter, StepLog
from orchestrator.runtime.engine import Container, ContainerSpec, Engine
from orchestrator.runtime.images import (
    ImageOutcome,
    ensure_base_image,
    ensure_toolchain_image,
)
from orchestrator.supply.attest import Signer, artifact_comment, update_release_index
from orchestrator.supply.sbom import SBOM_FILE, build_sbom

MANIFEST_SCHEMA = "orchestrator/build@1"
HOST_CA_PATH = f"{PATHS.root}/host-ca.crt"
PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy")
_CA_CANDIDATES = ("SSL_CERT_FILE", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE")


def host_ca_bundle() -> Path | None:
    """The CA bundle the host trusts, so the fetch container can cross the same proxy."""
    for variable in _CA_CANDIDATES:
        value = os.environ.get(variable)
        if value and Path(value).is_file():
            return Path(value)
    default = Path("/etc/ssl/certs/ca-certificates.crt")
    return default if default.is_file() else None


def prepare_plan(options: Options, flavor_name: str) -> BuildPlan:
    """Read every input from disk, then plan (the planning itself is pure)."""
    flavor = get_flavor(flavor_name)
    toolchain = load_toolchain(options.toolchain)
    return make_plan(
        options,
        flavor,
        toolchain=toolchain,
        base=load_base_spec(),
        dockerfile=render_dockerfile(flavor, toolchain),
        packages=image_packages(flavor, toolchain),
        source=snapshot(options.crate_dir, options.source_date_epoch),
    )


@dataclass(frozen=True)
class BuildOutcome:
    artifact: Path
    binary: Path
    manifest: dict[str, object]


def check_toolchain(box: Container, plan: BuildPlan, log: StepLog) -> ToolchainReport:
    spec = plan.toolchain

    def version_of(*argv: str) -> str:
        return run(box, argv, log, "toolchain-check", keep_output=True)

    report = check_coherence(
        spec,
        version_of(spec.tool("rustc"), "-vV"),
        version_of(spec.tool("cargo"), "-V"),
        version_of(spec.tool("llvm_profdata"), "--version"),
        version_of(spec.tool("llvm_bolt"), "--version"),
    )
    log.detail = f"LLVM {report.llvm_major} everywhere"
    return report


def fetch_crates(
    engine: Engine,
    plan: BuildPlan,
    image: ImageOutcome,
    options: Options,
    log: StepLog,
    *,
    keep: bool,
) -> Path:
    """Vendor the crates once per Cargo.lock (the only step with a network)."""
    cargo_lock = (options.crate_dir / "Cargo.lock").read_text()
    cache = options.cache_dir / "crates" / f"{plan.source.cargo_lock_sha256}.tar"
    if cache.is_file():
        try:
            count = verify_vendor_archive(cache, cargo_lock)
        except OrchestratorError as exc:
            log.line(f"discarding cached crates: {exc.message}")
            cache.unlink()
        else:
            log.mark_cached(f"{count} crates from cache")
            return cache
    if options.offline:
        raise VaultError(
            f"offline: the vendored crates for Cargo.lock {plan.source.cargo_lock_sha256[:12]} "
            "are not in the cache",
            hint="Import the release's vault first (orchestrator vault import).",
        )
    cache.parent.mkdir(parents=True, exist_ok=True)
    fetch = plan.fetch
    with engine.container(
        ContainerSpec(image.reference, network=True, purpose="fetch"), keep=keep
    ) as box:
        box.put_archive(PATHS.root, plan.source.archive)
        bundle = host_ca_bundle()
        if bundle is not None:
            # Behind a TLS-intercepting proxy the host trusts CAs the image does not.
            log.line(f"+ docker cp {bundle} {HOST_CA_PATH} (the host's trusted CAs)")
            put_file(box, HOST_CA_PATH, bundle.read_bytes())
            fetch = replace(
                fetch, environment={**fetch.environment, "CARGO_HTTP_CAINFO": HOST_CA_PATH}
            )
        for name in PROXY_VARIABLES:
            if os.environ.get(name):
                fetch = replace(fetch, environment={**fetch.environment, name: os.environ[name]})
        run(box, fetch.argv, log, "fetch-crates", environment=fetch.environment)
        with tempfile.NamedTemporaryFile(dir=cache.parent, suffix=".partial", delete=False) as tmp:
            for chunk in box.get_archive(PATHS.vendor):
                tmp.write(chunk)
        partial = Path(tmp.name)
    try:
        count = verify_vendor_archive(partial, cargo_lock)
        partial.replace(cache)
    finally:
        partial.unlink(missing_ok=True)
    log.detail = f"{count} crates vendored"
    return cache


def run_build(
    options: Options,
    plan: BuildPlan,
    engine: Engine,
    reporter: Reporter,
    *,
    signer: Signer,
    keep_containers: bool = False,
    retrain: bool = False,
) -> BuildOutcome:
    steps = {s.name: s for s in plan.steps}
    started = _now()
    with reporter.step("base-image", steps["base-image"].title) as log:
        base = ensure_base_image(
            engine, plan.base, plan.base_image, options.cache_dir, log, offline=options.offline
        )
    with reporter.step("toolchain-image", steps["toolchain-image"].title) as log:
        image = ensure_toolchain_image(
            engine,
            base=plan.base,
            base_image=base,
            plan=plan.image,
            dockerfile=plan.dockerfile,
            packages=plan.packages,
            sources=plan.apt_sources,
            unpack=plan.unpack,
            cache_dir=options.cache_dir,
            log=log,
            offline=options.offline,
        )
    with ExitStack() as stack:
        staging = stack.enter_context(staging_area(options.artifacts_dir, engine.session))
        scratch = stack.enter_context(tempfile.TemporaryDirectory(prefix="orchestrator-"))
        volume = stack.enter_context(engine.volume("out", keep=keep_containers))
        box = stack.enter_context(
            engine.container(
                ContainerSpec(
                    image.reference, environment=plan.build.environment, volumes={volume: PATHS.out}
                ),
                keep=keep_containers,
            )
        )
        pipeline = Pipeline(
            options,
            plan,
            engine,
            reporter,
            image,
            box,
            volume,
            stack,
            keep_containers,
            retrain,
            Path(scratch),
            signer=signer,
            started=started,
        )
        return _execute(pipeline, base, staging)
    raise AssertionError("unreachable")  # pragma: no cover - ExitStack never swallows


def _execute(pipeline: Pipeline, base: ImageOutcome, staging: Path) -> BuildOutcome:
    plan, options, box = pipeline.plan, pipeline.options, pipeline.box
    with pipeline.step("toolchain-check") as log:
        report = check_toolchain(box, plan, log)
    gpu: dict[str, object] | None = None
    if plan.device_code:
        with pipeline.step("gpu-targets") as log:
            gpu = check_gpu_targets(pipeline, plan.device_code, log)
    with pipeline.step("fetch-crates") as log:
        vendor = fetch_crates(
            pipeline.engine, plan, pipeline.image, options, log, keep=pipeline.keep
        )
    shipped, pgo_record, coverage = _build_variants(pipeline, vendor)
    bolt: BoltOutcome | None = None
    unbolted = shipped
    if plan.bolt:
        bolt = run_bolt(pipeline, plan.bolt, shipped)
        shipped = bolt.binary
    validation, report_portability = _check_shipped(pipeline, shipped, gpu)

    with pipeline.step("sbom") as log:
        crates, packages = inventory(pipeline, log)
        log.detail = f"{len(crates)} crates, {len(packages)} toolchain packages"

    with pipeline.step("extract") as log:
        artifact = staging / plan.artifact_dir
        artifact.mkdir()
        log.line(f"+ GET /containers/<id>/archive?path={shipped}")
        binary = fetch_file(box, shipped, artifact).rename(artifact / plan.binary)
        binary_sha = sha256_file(binary)
        (artifact / SBOM_FILE).write_text(
            build_sbom(
                name=options.binary,
                version=options.version,
                artifact=plan.artifact_dir,
                binary_sha256=binary_sha,
                crates=crates,
                toolchain=packages,
                timestamp=options.source_date_epoch,
            )
        )
        variants = _keep_variants(pipeline, artifact, shipped, unbolted, log)
        # The profiles ship with the release: a rebuild can use them instead of retraining.
        profiles = artifact / "profiles"
        for record, name in (
            (pgo_record, "pgo.profdata"),
            (bolt.profile if bolt else None, "bolt.fdata"),
        ):
            if record is not None:
                profiles.mkdir(exist_ok=True)
                shutil.copyfile(record.path, profiles / name)
        log.detail = f"{binary.stat().st_size / 1e6:.1f} MB"

    with pipeline.step("publish") as log:
        manifest = _manifest(
            pipeline=pipeline,
            base=base,
            report=report,
            vendor=vendor,
            binary=binary,
            pgo=pgo_record,
            coverage=coverage,
            bolt=bolt.report if bolt else None,
            validation=validation,
            variants=variants,
        )
        manifest["dependencies"] = {
            "rootfs": {
                "suite": plan.base.suite,
                "sha256": base.labels.get("org.orchestrator.rootfs-sha256"),
            },
            "debian_packages": [p.__dict__ for p in packages],
            "crates": [
                {"name": c.name, "version": c.version, "sha256": c.sha256}
                for c in crates
                if c.sha256
            ],
        }
        manifest["profiles"] = {
            name: {"sha256": record.sha256, "size": record.size}
            for name, record in (
                ("pgo.profdata", pgo_record),
                ("bolt.fdata", bolt.profile if bolt else None),
            )
            if record is not None
        }
        manifest["source"] = source_identity(options.crate_dir)
        manifest["portability"] = report_portability.as_dict()
        manifest["device_code"] = gpu
        manifest["started_at"], manifest["finished_at"] = pipeline.started, _now()
        write_json(artifact / "build.json", manifest)
        shutil.copytree(pipeline.reporter.log_dir, artifact / "logs")
        # Signed on the host, before publication; the key never enters a container.
        signature = pipeline.signer.sign(
            binary, trusted_comment=artifact_comment(manifest, plan.artifact_dir)
        )
        log.line(
            f"signed {binary.name} -> {signature.name} with key "
            f"{pipeline.signer.key.public.id_text} ({pipeline.signer.source})"
        )
        sums = write_checksums(artifact)
        log.line(sums.read_text().rstrip())
        destination = options.artifacts_dir / plan.release_dir / plan.artifact_dir
        publish(artifact, destination)
        for path in update_release_index(destination.parent, pipeline.signer):
            log.line(f"release index: wrote {path.name}")
        log.detail = str(destination)
    return BuildOutcome(destination, destination / plan.binary, manifest)


def _check_shipped(
    pipeline: Pipeline, shipped: str, gpu: dict[str, object] | None
) -> tuple[dict[str, object], Portability]:
    """Device code (GPU flavors), unchanged outputs, and what the binary needs to run."""
    plan = pipeline.plan
    if plan.device_code and gpu is not None:
        with pipeline.step("device-code") as log:
            gpu["binary"] = check_device_code(pipeline, plan.device_code, shipped, log)
    with pipeline.step("validate") as log:
        validation = validate_binary(pipeline, shipped, log, what="the optimized binary")
        log.detail = (
            "outputs identical"
            if validation.get("identical")
            else ("within tolerance" if validation["compared"] else "nothing to compare")
        )
    with pipeline.step("portability") as log:
        report = portability_report(pipeline, shipped, log)
        log.detail = f"glibc {report.glibc_max}, needs {', '.join(report.needed)}"
    return validation, report


def _build_variants(
    pipeline: Pipeline, vendor: Path
) -> tuple[str, ProfileRecord | None, Coverage | None]:
    """Baseline, release, PGO and optimized builds, then the tests; returns the binary."""
    plan, options, box = pipeline.plan, pipeline.options, pipeline.box
    with pipeline.step("build-baseline") as log:
        # Re-snapshot: a source edited since planning must not slip in unrecorded.
        current = snapshot(options.crate_dir, options.source_date_epoch)
        if current.archive_sha256 != plan.source.archive_sha256:
            raise SourceError(
                "the crate's sources changed while the build was starting",
                hint="Run the build again.",
            )
        log.line(f"+ docker cp <source {plan.source.archive_sha256[:12]}> {PATHS.src}")
        box.put_archive(PATHS.root, plan.source.archive)
        log.line(f"+ docker cp <vendored crates {vendor.name[:12]}> {PATHS.vendor}")
        box.put_archive(PATHS.root, vendor.read_bytes())
        run(box, ["mkdir", "-p", BIN_DIR], log, "build-baseline")
        cargo(box, plan.variants["baseline"].build, log, "build-baseline")
        pipeline.copy_binary("baseline", log)
    with pipeline.step("build-release") as log:
        cargo(box, plan.variants["release"].build, log, "build-release")
        shipped = pipeline.copy_binary("release", log)

    pgo_record = run_pgo(pipeline, plan.pgo) if plan.pgo else None
    coverage: Coverage | None = None
    if "optimized" in plan.variants:
        with pipeline.step("build-optimized") as log:
            output = cargo(box, plan.variants["optimized"].build, log, "build-optimized")
            shipped = pipeline.copy_binary("optimized", log)
            if plan.pgo is not None and pgo_record is not None:
                functions = pgo_record.details.get("functions", 0)
                coverage = Coverage(
                    profiled_functions=int(functions) if isinstance(functions, int) else 0,
                    missing_functions=len(missing_functions(output)),
                    max_missing_ratio=plan.pgo.max_missing_ratio,
                )
                log.detail = (
                    f"{coverage.missing_functions} functions without profile "
                    f"({coverage.missing_ratio:.1%})"
                )
                coverage.check()
    with pipeline.step("test") as log:
        cargo(box, plan.test, log, "test")
    return shipped, pgo_record, coverage


def _now() -> str:
    return dt.datetime.now(tz=dt.UTC).isoformat(timespec="seconds")


def _keep_variants(
    pipeline: Pipeline, artifact: Path, shipped: str, unbolted: str, log: StepLog
) -> dict[str, dict[str, object]]:
    """Store every variant's binary for `orchestrator bench`, keyed by the shipped binary."""
    names = {"baseline": f"{BIN_DIR}/baseline", "release": f"{BIN_DIR}/release"}
    if pipeline.plan.pgo:
        names["pgo"] = unbolted
    if shipped != unbolted:
        names["pgo-bolt" if pipeline.plan.pgo else "bolt"] = shipped
    shipped_sha = sha256_file(artifact / pipeline.plan.binary)
    store = pipeline.options.cache_dir / "variants" / shipped_sha
    partial = store.with_name(store.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    described: dict[str, dict[str, object]] = {}
    for name, path in names.items():
        fetched = fetch_file(pipeline.box, path, pipeline.scratch)
        target = partial / name
        shutil.move(fetched, target)
        described[name] = {"sha256": sha256_file(target), "size": target.stat().st_size}
    (partial / "variants.json").write_text(
        json.dumps({"image": pipeline.image.reference, "variants": described}, indent=1) + "\n"
    )
    shutil.rmtree(store, ignore_errors=True)
    partial.replace(store)
    log.line(f"variants for `orchestrator bench` kept in {store}")
    return described


def _manifest(
    *,
    pipeline: Pipeline,
    base: ImageOutcome,
    report: ToolchainReport,
    vendor: Path,
    binary: Path,
    pgo: ProfileRecord | None,
    coverage: Coverage | None,
    bolt: dict[str, object] | None,
    validation: dict[str, object],
    variants: dict[str, dict[str, object]],
) -> dict[str, object]:
    options, plan = pipeline.options, pipeline.plan
    return {
        "schema": MANIFEST_SCHEMA,
        "orchestrator_version": __version__,
        "artifact": {
            "name": options.binary,
            "version": options.version,
            "flavor": plan.flavor,
            "arch": plan.arch,
            "target": plan.rust_target,
            "file": plan.binary,
            "sha256": sha256_file(binary),
            "size": binary.stat().st_size,
            "optimizations": [
                name
                for name, on in (
                    ("lto-fat", True),
                    ("pgo", pgo is not None),
                    ("bolt", bool(bolt and bolt.get("applied"))),
                )
                if on
            ],
        },
        "toolchain": {
            "spec": plan.toolchain.flavor_view(plan.flavor),
            "reported": report.as_dict(),
        },
        "images": {"base": base.as_dict(), "toolchain": pipeline.image.as_dict()},
        "flags": {
            "target_cpu": plan.target_cpu,
            "rustflags": list(plan.rustflags),
            "release_profile": RELEASE_PROFILE,
            "features": list(options.settings_for(plan.flavor).features),
            "default_features": options.settings_for(plan.flavor).default_features,
            "variants": {
                name: {"cargo": list(v.build.argv), "rustflags": v.rustflags}
                for name, v in plan.variants.items()
            },
            "cargo_test": list(plan.test.argv),
            "environment": {
                k: v for k, v in plan.build.environment.items() if k != "CARGO_ENCODED_RUSTFLAGS"
            },
        },
        "inputs": {
            "config": str(options.config_path.name),
            "config_sha256": sha256_file(options.config_path),
            "source_archive_sha256": plan.source.archive_sha256,
            "cargo_lock_sha256": plan.source.cargo_lock_sha256,
            "vendored_crates_sha256": sha256_file(vendor),
            "source_date_epoch": options.source_date_epoch,
            "workloads": [list(w) for w in plan.workloads],
        },
        "pgo": (
            {
                "profile": pgo.as_dict(),
                "profile_key": plan.pgo.profile_key if plan.pgo else None,
                "coverage": coverage.as_dict() if coverage else None,
            }
            if pgo
            else None
        ),
        "bolt": bolt,
        "profiling": pipeline.perf.as_dict()
        | {"container_started": pipeline._profiler is not None},
        "validation": validation,
        "variants": variants,
        # The publish step is still running while this is written.
        "steps": [r.as_dict() for r in pipeline.reporter.results if r.status != "running"],
    }

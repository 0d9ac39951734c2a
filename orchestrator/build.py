"""Execute a BuildPlan: images, toolchain check, crates, cargo build/test, extract, publish.

Only `fetch-crates` has a network; every other container runs with `--network none`, as
the image's non-root user, with all capabilities dropped.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from orchestrator import __version__
from orchestrator.archive import ChunkReader, safe_extract, sha256_file, single_file_tar
from orchestrator.engine import Container, ContainerSpec, Engine
from orchestrator.errors import OrchestratorError, SourceError, StepFailedError
from orchestrator.flavors import get_flavor
from orchestrator.images import ImageOutcome, ensure_base_image, ensure_toolchain_image
from orchestrator.layout import PATHS
from orchestrator.log import Reporter, StepLog
from orchestrator.options import Options
from orchestrator.plan import RELEASE_PROFILE, BuildPlan, CargoCommand, make_plan
from orchestrator.publish import publish, staging_area, write_checksums, write_json
from orchestrator.render import image_packages, render_dockerfile
from orchestrator.source import snapshot, verify_vendor_archive
from orchestrator.toolchain import ToolchainReport, check_coherence, load_base_spec, load_toolchain

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


def _exec(box: Container, command: CargoCommand, log: StepLog, step: str) -> None:
    log.command(
        command.argv,
        {k: v for k, v in command.environment.items() if k != "CARGO_ENCODED_RUSTFLAGS"},
    )
    code = box.exec(command.argv, environment=command.environment, on_output=log.line)
    if code != 0:
        raise StepFailedError(
            f"step {step}: `{' '.join(command.argv[:2])}` exited with {code}",
            hint="The output above (and the step log) says why; nothing was published.",
        )


def _capture(box: Container, argv: list[str], log: StepLog) -> str:
    log.command(argv)
    lines: list[str] = []

    def sink(line: str) -> None:
        lines.append(line)
        log.line(line)

    code = box.exec(argv, on_output=sink)
    if code != 0:
        raise StepFailedError(f"`{' '.join(argv)}` exited with {code} in the toolchain image")
    return "\n".join(lines)


def check_toolchain(box: Container, plan: BuildPlan, log: StepLog) -> ToolchainReport:
    spec = plan.toolchain
    report = check_coherence(
        spec,
        _capture(box, [spec.tool("rustc"), "-vV"], log),
        _capture(box, [spec.tool("cargo"), "-V"], log),
        _capture(box, [spec.tool("llvm_profdata"), "--version"], log),
        _capture(box, [spec.tool("llvm_bolt"), "--version"], log),
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
            box.put_archive(PATHS.root, single_file_tar(HOST_CA_PATH, bundle.read_bytes()))
            fetch = replace(
                fetch, environment={**fetch.environment, "CARGO_HTTP_CAINFO": HOST_CA_PATH}
            )
        for name in PROXY_VARIABLES:
            if os.environ.get(name):
                fetch = replace(fetch, environment={**fetch.environment, name: os.environ[name]})
        _exec(box, fetch, log, "fetch-crates")
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
    keep_containers: bool = False,
) -> BuildOutcome:
    steps = {s.name: s for s in plan.steps}

    def title(name: str) -> str:
        return steps[name].title

    with reporter.step("base-image", title("base-image")) as log:
        base = ensure_base_image(engine, plan.base, plan.base_image, options.cache_dir, log)
    with reporter.step("toolchain-image", title("toolchain-image")) as log:
        image = ensure_toolchain_image(
            engine,
            base=plan.base,
            base_image=base,
            plan=plan.image,
            dockerfile=plan.dockerfile,
            packages=plan.packages,
            cache_dir=options.cache_dir,
            log=log,
        )

    with (
        staging_area(options.artifacts_dir, engine.session) as staging,
        engine.container(
            ContainerSpec(image.reference, environment=plan.build.environment),
            keep=keep_containers,
        ) as box,
    ):
        with reporter.step("toolchain-check", title("toolchain-check")) as log:
            report = check_toolchain(box, plan, log)
        with reporter.step("fetch-crates", title("fetch-crates")) as log:
            vendor = fetch_crates(engine, plan, image, options, log, keep=keep_containers)
        with reporter.step("build", title("build")) as log:
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
            _exec(box, plan.build, log, "build")
        with reporter.step("test", title("test")) as log:
            _exec(box, plan.test, log, "test")
        with reporter.step("extract", title("extract")) as log:
            artifact = staging / plan.artifact_dir
            artifact.mkdir()
            log.line(f"+ GET /containers/<id>/archive?path={plan.binary_in_container}")
            written = safe_extract(ChunkReader(box.get_archive(plan.binary_in_container)), artifact)
            if [p.as_posix() for p in written] != [plan.binary]:
                raise StepFailedError(
                    f"expected exactly {plan.binary} in the archive, got "
                    f"{[p.as_posix() for p in written]}"
                )
            binary = artifact / plan.binary
            log.detail = f"{binary.stat().st_size / 1e6:.1f} MB"

        with reporter.step("publish", title("publish")) as log:
            manifest = _manifest(
                options=options,
                plan=plan,
                base=base,
                image=image,
                report=report,
                vendor=vendor,
                binary=binary,
                reporter=reporter,
            )
            write_json(artifact / "build.json", manifest)
            logs = artifact / "logs"
            shutil.copytree(reporter.log_dir, logs)
            sums = write_checksums(artifact)
            log.line(sums.read_text().rstrip())
            destination = options.artifacts_dir / plan.release_dir / plan.artifact_dir
            publish(artifact, destination)
            log.detail = str(destination)
    return BuildOutcome(destination, destination / plan.binary, manifest)


def _manifest(
    *,
    options: Options,
    plan: BuildPlan,
    base: ImageOutcome,
    image: ImageOutcome,
    report: ToolchainReport,
    vendor: Path,
    binary: Path,
    reporter: Reporter,
) -> dict[str, object]:
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
        },
        "toolchain": {"spec": plan.toolchain.as_dict(), "reported": report.as_dict()},
        "images": {"base": base.as_dict(), "toolchain": image.as_dict()},
        "flags": {
            "target_cpu": options.target_cpu,
            "rustflags": list(plan.rustflags),
            "release_profile": RELEASE_PROFILE,
            "features": list(options.settings_for(plan.flavor).features),
            "default_features": options.settings_for(plan.flavor).default_features,
            "cargo_build": list(plan.build.argv),
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
        },
        # The publish step is still running while this is written.
        "steps": [r.as_dict() for r in reporter.results if r.status != "running"],
    }

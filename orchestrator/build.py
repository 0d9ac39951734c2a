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
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath

from orchestrator import __version__
from orchestrator.archive import ChunkReader, safe_extract, sha256_file, single_file_tar
from orchestrator.attest import Signer, artifact_comment, update_release_index
from orchestrator.bolt import choose_mode, parse_report
from orchestrator.bootstrap import deb_identity, read_manifest
from orchestrator.engine import Container, ContainerSpec, Engine
from orchestrator.errors import (
    BoltError,
    OrchestratorError,
    ProfileError,
    SourceError,
    StepFailedError,
    ValidationError,
)
from orchestrator.flavors import get_flavor
from orchestrator.images import (
    ImageOutcome,
    ensure_base_image,
    ensure_toolchain_image,
    package_set_dir,
)
from orchestrator.layout import PATHS
from orchestrator.log import Reporter, StepLog
from orchestrator.options import Options
from orchestrator.pgo import Coverage, missing_functions, parse_profdata_show
from orchestrator.plan import (
    RELEASE_PROFILE,
    BoltPlan,
    BuildPlan,
    CargoCommand,
    PgoPlan,
    make_plan,
)
from orchestrator.portability import Portability
from orchestrator.portability import parse as parse_portability
from orchestrator.profiling import NO_ACCESS, PerfAccess, find_perf_access
from orchestrator.publish import publish, staging_area, write_checksums, write_json
from orchestrator.render import image_packages, render_dockerfile
from orchestrator.sbom import SBOM_FILE, Crate, DebPackage, build_sbom, crates_from_metadata
from orchestrator.source import registry_crates, snapshot, verify_vendor_archive
from orchestrator.toolchain import ToolchainReport, check_coherence, load_base_spec, load_toolchain
from orchestrator.validate import compare_outputs, render_diff

MANIFEST_SCHEMA = "orchestrator/build@1"
HOST_CA_PATH = f"{PATHS.root}/host-ca.crt"
PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy")
_CA_CANDIDATES = ("SSL_CERT_FILE", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE")
BIN_DIR = f"{PATHS.out}/bin"
PERF_FREQUENCY = "10000"  # samples/s: the default 4000 leaves BOLT asking for more


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


# -- running things in containers ------------------------------------------------------
def _exec(
    box: Container,
    argv: Sequence[str],
    log: StepLog,
    step: str,
    *,
    environment: Mapping[str, str] | None = None,
    keep_output: bool = False,
) -> str:
    """Run a command, logging it as `+ cmd`; raise StepFailedError on a non-zero exit."""
    shown = {k: v for k, v in (environment or {}).items() if k != "CARGO_ENCODED_RUSTFLAGS"}
    if environment and "CARGO_ENCODED_RUSTFLAGS" in environment:
        shown["RUSTFLAGS"] = " ".join(environment["CARGO_ENCODED_RUSTFLAGS"].split("\x1f"))
    log.command(argv, shown)
    lines: list[str] = []

    def sink(line: str) -> None:
        if keep_output:
            lines.append(line)
        log.line(line)

    code = box.exec(argv, environment=environment, on_output=sink)
    if code != 0:
        raise StepFailedError(
            f"step {step}: `{' '.join(PurePosixPath(a).name for a in argv[:2])}` "
            f"exited with {code}",
            hint="The output above (and the step log) says why; nothing was published.",
        )
    return "\n".join(lines)


def _cargo(box: Container, command: CargoCommand, log: StepLog, step: str) -> str:
    return _exec(box, command.argv, log, step, environment=command.environment, keep_output=True)


def _fetch_file(box: Container, path: str, dest_dir: Path) -> Path:
    """Copy one file out of a container through the archive API (checked like any tar)."""
    written = safe_extract(ChunkReader(box.get_archive(path)), dest_dir)
    name = PurePosixPath(path).name
    if [p.as_posix() for p in written] != [name]:
        raise StepFailedError(f"expected only {name} in the archive of {path}, got {written}")
    return dest_dir / name


def _put_file(box: Container, path: str, data: bytes) -> None:
    parent = str(PurePosixPath(path).parent)
    if box.exec(["mkdir", "-p", parent], on_output=lambda _: None) != 0:
        raise StepFailedError(f"cannot create {parent} in the container")
    box.put_archive(parent, single_file_tar(path, data))


def check_toolchain(box: Container, plan: BuildPlan, log: StepLog) -> ToolchainReport:
    spec = plan.toolchain

    def run(*argv: str) -> str:
        return _exec(box, argv, log, "toolchain-check", keep_output=True)

    report = check_coherence(
        spec,
        run(spec.tool("rustc"), "-vV"),
        run(spec.tool("cargo"), "-V"),
        run(spec.tool("llvm_profdata"), "--version"),
        run(spec.tool("llvm_bolt"), "--version"),
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
            _put_file(box, HOST_CA_PATH, bundle.read_bytes())
            fetch = replace(
                fetch, environment={**fetch.environment, "CARGO_HTTP_CAINFO": HOST_CA_PATH}
            )
        for name in PROXY_VARIABLES:
            if os.environ.get(name):
                fetch = replace(fetch, environment={**fetch.environment, name: os.environ[name]})
        _exec(box, fetch.argv, log, "fetch-crates", environment=fetch.environment)
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


# -- profiles ------------------------------------------------------------------------
@dataclass
class ProfileRecord:
    """A stored profile: content hash, size and what we know about it."""

    path: Path
    sha256: str
    size: int
    cached: bool
    details: dict[str, object] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return {
            "sha256": self.sha256,
            "size": self.size,
            "reused_from_cache": self.cached,
            **self.details,
        }


def _store_profile(source: Path, cache: Path, details: dict[str, object]) -> ProfileRecord:
    """Move a fresh profile into the cache atomically, with a sidecar of its hash."""
    cache.parent.mkdir(parents=True, exist_ok=True)
    digest = sha256_file(source)
    partial = cache.with_suffix(".partial")
    shutil.copyfile(source, partial)
    partial.replace(cache)
    meta = {"sha256": digest, "size": cache.stat().st_size, **details}
    cache.with_suffix(".json").write_text(json.dumps(meta, indent=1) + "\n")
    return ProfileRecord(cache, digest, cache.stat().st_size, False, details)


def _load_profile(cache: Path, what: str) -> ProfileRecord | None:
    meta_path = cache.with_suffix(".json")
    if not cache.is_file() or not meta_path.is_file():
        return None
    meta = json.loads(meta_path.read_text())
    digest = sha256_file(cache)
    if digest != meta.get("sha256"):
        # A profile is a release input: silently retraining would change the binary.
        raise ProfileError(
            f"the stored {what} profile {cache} does not match its recorded sha256 "
            f"({digest[:12]} != {str(meta.get('sha256'))[:12]}): it was altered or corrupted",
            hint="Run the build with --retrain to profile again (or remove the file).",
        )
    details = {k: v for k, v in meta.items() if k not in ("sha256", "size")}
    return ProfileRecord(cache, digest, cache.stat().st_size, True, details)


@dataclass
class Pipeline:
    """Everything one build run holds on to while it executes."""

    options: Options
    plan: BuildPlan
    engine: Engine
    reporter: Reporter
    image: ImageOutcome
    box: Container
    volume: str
    stack: ExitStack
    keep: bool
    retrain: bool
    scratch: Path
    signer: Signer
    started: str
    perf: PerfAccess = NO_ACCESS
    _profiler: Container | None = None
    results: dict[str, object] = field(default_factory=dict)

    def step(self, name: str) -> AbstractContextManager[StepLog]:
        title = next(s.title for s in self.plan.steps if s.name == name)
        return self.reporter.step(name, title)

    def profiler(self) -> Container:
        """The profiling container, started once with the least perf access needed."""
        if self._profiler is None:
            if self.plan.bolt is not None and self.plan.bolt.mode != "instrument":
                self.perf = find_perf_access(
                    self.engine, self.image.reference, allowed=self.plan.profiling_privileges
                )
            spec = ContainerSpec(
                self.image.reference,
                privileges=self.perf.privileges,
                volumes={self.volume: PATHS.out},
                purpose="profile",
            )
            self._profiler = self.stack.enter_context(self.engine.container(spec, keep=self.keep))
        return self._profiler

    def copy_binary(self, variant: str, log: StepLog) -> str:
        target = f"{BIN_DIR}/{variant}"
        _exec(self.box, ["cp", self.plan.variants[variant].binary, target], log, variant)
        return target


def _run_workloads(
    pipeline: Pipeline,
    binary: str,
    log: StepLog,
    step: str,
    *,
    environment: Mapping[str, str] | None = None,
    wrap: Sequence[str] = (),
) -> None:
    if not pipeline.plan.workloads:
        raise ProfileError(
            "no training workloads: [train] workloads is empty",
            hint="List argument lists for the binary under [train] workloads in "
            "orchestrator.toml, or build with --no-pgo --no-bolt.",
        )
    box = pipeline.profiler()
    for index, workload in enumerate(pipeline.plan.workloads):
        argv = [part.replace("{index}", str(index)) for part in wrap] + [binary, *workload]
        _exec(box, argv, log, step, environment=environment)


def run_pgo(pipeline: Pipeline, pgo: PgoPlan) -> ProfileRecord:
    plan, options = pipeline.plan, pipeline.options
    cache = options.cache_dir / "profiles" / "pgo" / f"{pgo.profile_key}.profdata"
    stored = None if pipeline.retrain else _load_profile(cache, "PGO")
    if stored is not None:
        for name in ("pgo-instrument", "pgo-train"):
            with pipeline.step(name) as log:
                log.mark_cached(f"profile {stored.sha256[:12]} unchanged inputs")
        with pipeline.step("pgo-merge") as log:
            _put_file(pipeline.box, pgo.merged, stored.path.read_bytes())
            log.mark_cached(f"{stored.size} bytes, sha256 {stored.sha256[:12]}")
        return stored

    with pipeline.step("pgo-instrument") as log:
        _cargo(pipeline.box, plan.variants["pgo-generate"].build, log, "pgo-instrument")
        binary = pipeline.copy_binary("pgo-generate", log)
    with pipeline.step("pgo-train") as log:
        _exec(pipeline.box, ["mkdir", "-p", pgo.raw_dir], log, "pgo-train")
        _run_workloads(
            pipeline,
            binary,
            log,
            "pgo-train",
            environment={"LLVM_PROFILE_FILE": pgo.profile_file_pattern},
        )
    with pipeline.step("pgo-merge") as log:
        listing = _exec(
            pipeline.box,
            ["find", pgo.raw_dir, "-name", "*.profraw", "-type", "f"],
            log,
            "pgo-merge",
            keep_output=True,
        )
        raw_files = [line for line in listing.splitlines() if line.strip()]
        if not raw_files:
            raise ProfileError(
                "training wrote no .profraw file: the instrumented binary never reached exit",
                hint="Workloads must exit normally (a process killed or aborting writes no "
                "profile).",
            )
        _exec(pipeline.box, pgo.merge_argv, log, "pgo-merge")
        summary = parse_profdata_show(
            _exec(pipeline.box, pgo.show_argv, log, "pgo-merge", keep_output=True)
        )
        fetched = _fetch_file(pipeline.box, pgo.merged, pipeline.scratch)
        record = _store_profile(fetched, cache, {"raw_files": len(raw_files), **summary.as_dict()})
        log.detail = (
            f"{len(raw_files)} .profraw -> {record.size} bytes, {summary.functions} functions"
        )
    return record


@dataclass(frozen=True)
class BoltOutcome:
    binary: str  # what to ship: the BOLTed binary, or the input on fallback
    report: dict[str, object]
    profile: ProfileRecord | None


def run_bolt(pipeline: Pipeline, bolt: BoltPlan, optimized: str) -> BoltOutcome:
    """Profile and optimize with BOLT; return the binary to ship and what happened."""
    options = pipeline.options
    tools = bolt.tools
    report: dict[str, object] = {"policy": bolt.policy, "flags": list(bolt.flags)}
    stored: ProfileRecord | None = None
    try:
        with pipeline.step("bolt-profile") as log:
            pipeline.profiler()  # probes perf access first
            choice = choose_mode(bolt.mode, pipeline.perf.capabilities)
            report |= {"mode": choice.mode, "mode_reason": choice.reason}
            log.line(f"BOLT profile mode: {choice.mode} ({choice.reason})")
            binary_sha = _exec(
                pipeline.box, ["sha256sum", optimized], log, "bolt-profile", keep_output=True
            ).split()[0]
            key = f"{binary_sha}-{choice.mode}"
            cache = options.cache_dir / "profiles" / "bolt" / f"{key}.fdata"
            profile = f"{bolt.work_dir}/profile.fdata"
            stored = None if pipeline.retrain else _load_profile(cache, "BOLT")
            if stored is None:
                _collect_bolt_profile(
                    pipeline, bolt, mode=choice.mode, binary=optimized, profile=profile, log=log
                )
                fetched = _fetch_file(pipeline.box, profile, pipeline.scratch)
                stored = _store_profile(fetched, cache, {"mode": choice.mode})
            else:
                _put_file(pipeline.box, profile, stored.path.read_bytes())
                log.mark_cached(f"profile for this exact binary ({binary_sha[:12]})")
            report["profile"] = stored.as_dict()
            log.detail = log.detail or f"mode {choice.mode}, {stored.size} bytes"
        with pipeline.step("bolt-optimize") as log:
            output = f"{BIN_DIR}/optimized.bolt"
            text = _exec(
                pipeline.box,
                [tools["llvm_bolt"], optimized, f"-data={profile}", *bolt.flags, "-o", output],
                log,
                "bolt-optimize",
                keep_output=True,
            )
            coverage = parse_report(text)
            report["coverage"] = coverage.as_dict()
            _validate(pipeline, output, log, what="the BOLT-optimized binary")
            log.detail = (
                f"{coverage.profiled_functions}/{coverage.total_functions} functions "
                f"with profile ({coverage.percent}%)"
            )
    except OrchestratorError as exc:
        if bolt.policy == "require":
            raise BoltError(
                f"BOLT failed and bolt.policy is require: {exc.message}", hint=exc.hint
            ) from exc
        pipeline.reporter.warn(
            f"BOLT FAILED, shipping the binary without BOLT (bolt.policy = fallback): {exc.message}"
        )
        report |= {"applied": False, "fallback_reason": exc.message}
        return BoltOutcome(optimized, report, None)
    report["applied"] = True
    return BoltOutcome(output, report, stored)


def _collect_bolt_profile(
    pipeline: Pipeline, bolt: BoltPlan, *, mode: str, binary: str, profile: str, log: StepLog
) -> None:
    tools, raw = bolt.tools, f"{bolt.work_dir}/raw"
    box = pipeline.box
    _exec(box, ["mkdir", "-p", raw], log, "bolt-profile")
    if mode == "instrument":
        instrumented = f"{bolt.work_dir}/instrumented"
        _exec(
            box,
            [
                tools["llvm_bolt"],
                binary,
                "-instrument",
                f"-instrumentation-file={raw}/profile",
                "-instrumentation-file-append-pid",
                "-o",
                instrumented,
            ],
            log,
            "bolt-profile",
        )
        _run_workloads(pipeline, instrumented, log, "bolt-profile")
    else:
        events = ["-e", "cycles:u", "-j", "any,u"] if mode == "lbr" else ["-e", "cpu-clock:u"]
        wrap = [
            "perf",
            "record",
            *events,
            "-F",
            PERF_FREQUENCY,
            "-o",
            f"{raw}/perf-{{index}}.data",
            "--",
        ]
        _run_workloads(pipeline, binary, log, "bolt-profile", wrap=wrap)
        for index in range(len(pipeline.plan.workloads)):
            argv = [
                tools["perf2bolt"],
                "-p",
                f"{raw}/perf-{index}.data",
                "-o",
                f"{raw}/perf-{index}.fdata",
                binary,
            ]
            if mode == "sample":
                argv.insert(1, "-nl")  # no branch stacks: basic-block samples only
            _exec(box, argv, log, "bolt-profile")
    _exec(
        box,
        ["sh", "-c", f'{tools["merge_fdata"]} {raw}/*.fdata > "$0"', profile],
        log,
        "bolt-profile",
    )


# -- validation ------------------------------------------------------------------------
def _validate(pipeline: Pipeline, binary: str, log: StepLog, *, what: str) -> dict[str, object]:
    command = pipeline.plan.validate_command
    if not command:
        log.line("no validate.command configured: outputs not compared")
        return {"command": [], "compared": False}
    baseline = f"{BIN_DIR}/baseline"
    expected = _exec(pipeline.box, [baseline, *command], log, "validate", keep_output=True)
    got = _exec(pipeline.box, [binary, *command], log, "validate", keep_output=True)
    differences = compare_outputs(expected, got, pipeline.plan.validate_tolerance)
    if differences:
        diff = render_diff(expected, got, expected_name="baseline", got_name=what)
        raise ValidationError(
            f"{what} printed something else than the baseline for "
            f"`{' '.join(command)}` ({len(differences)} line(s) differ):\n{diff}"
        )
    return {
        "command": list(command),
        "compared": True,
        "tolerance": pipeline.plan.validate_tolerance,
        "identical": expected == got,
        "output_lines": len(expected.splitlines()),
    }


# -- the whole build -------------------------------------------------------------------
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
        base = ensure_base_image(engine, plan.base, plan.base_image, options.cache_dir, log)
    with reporter.step("toolchain-image", steps["toolchain-image"].title) as log:
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
    with pipeline.step("validate") as log:
        validation = _validate(pipeline, shipped, log, what="the optimized binary")
        log.detail = (
            "outputs identical"
            if validation.get("identical")
            else ("within tolerance" if validation["compared"] else "nothing to compare")
        )

    with pipeline.step("portability") as log:
        report_portability = _portability(pipeline, shipped, log)
        log.detail = (
            f"glibc {report_portability.glibc_max}, needs {', '.join(report_portability.needed)}"
        )

    with pipeline.step("sbom") as log:
        crates, packages = _inventory(pipeline, log)
        log.detail = f"{len(crates)} crates, {len(packages)} toolchain packages"

    with pipeline.step("extract") as log:
        artifact = staging / plan.artifact_dir
        artifact.mkdir()
        log.line(f"+ GET /containers/<id>/archive?path={shipped}")
        binary = _fetch_file(box, shipped, artifact).rename(artifact / plan.binary)
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
        _exec(box, ["mkdir", "-p", BIN_DIR], log, "build-baseline")
        _cargo(box, plan.variants["baseline"].build, log, "build-baseline")
        pipeline.copy_binary("baseline", log)
    with pipeline.step("build-release") as log:
        _cargo(box, plan.variants["release"].build, log, "build-release")
        shipped = pipeline.copy_binary("release", log)

    pgo_record = run_pgo(pipeline, plan.pgo) if plan.pgo else None
    coverage: Coverage | None = None
    if "optimized" in plan.variants:
        with pipeline.step("build-optimized") as log:
            output = _cargo(box, plan.variants["optimized"].build, log, "build-optimized")
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
        _cargo(box, plan.test, log, "test")
    return shipped, pgo_record, coverage


def _now() -> str:
    return dt.datetime.now(tz=dt.UTC).isoformat(timespec="seconds")


def source_identity(crate_dir: Path) -> dict[str, object]:
    """The git commit the sources come from, and whether the tree had local changes."""

    def git(*args: str) -> str | None:
        try:
            return subprocess.run(
                ["git", "-C", str(crate_dir), *args],
                capture_output=True,
                text=True,
                check=True,
                timeout=20,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--", ".")
    return {"git_commit": commit, "dirty": bool(status) if status is not None else None}


def _portability(pipeline: Pipeline, binary: str, log: StepLog) -> Portability:
    plan, box = pipeline.plan, pipeline.box
    codegen = [f for f in plan.rustflags if f.startswith(("-Ctarget-cpu", "-Ctarget-feature"))]
    return parse_portability(
        target=plan.rust_target,
        target_cpu=pipeline.options.target_cpu,
        version_info=_exec(
            box,
            ["readelf", "--version-info", "--wide", binary],
            log,
            "portability",
            keep_output=True,
        ),
        dynamic=_exec(
            box, ["readelf", "--dynamic", "--wide", binary], log, "portability", keep_output=True
        ),
        rustc_cfg=_exec(
            box,
            [
                plan.toolchain.tool("rustc"),
                "--print",
                "cfg",
                "--target",
                plan.rust_target,
                *codegen,
            ],
            log,
            "portability",
            keep_output=True,
        ),
    )


def _inventory(pipeline: Pipeline, log: StepLog) -> tuple[list[Crate], list[DebPackage]]:
    """What went into the binary (crates) and what built it (Debian packages)."""
    plan, box, options = pipeline.plan, pipeline.box, pipeline.options
    settings = options.settings_for(plan.flavor)
    features = ["--features", ",".join(settings.features)] if settings.features else []
    if not settings.default_features:
        features.append("--no-default-features")
    metadata_path = f"{PATHS.out}/cargo-metadata.json"
    # stdout to a file: cargo's warnings go to stderr and must not corrupt the JSON.
    cargo = [
        plan.toolchain.tool("cargo"),
        "metadata",
        "--format-version",
        "1",
        "--offline",
        "--locked",
        "--manifest-path",
        f"{PATHS.src}/Cargo.toml",
        "--filter-platform",
        plan.rust_target,
        *features,
    ]
    _exec(
        box,
        ["sh", "-c", 'exec "$@" > ' + metadata_path, "sh", *cargo],
        log,
        "sbom",
        environment={"CARGO_HOME": PATHS.cargo_home},
    )
    metadata = json.loads(_fetch_file(box, metadata_path, pipeline.scratch).read_text())
    lock = (options.crate_dir / "Cargo.lock").read_text()
    checksums = {(c.name, c.version): c.checksum for c in registry_crates(lock)}
    crates = crates_from_metadata(metadata, checksums, options.package_name)
    listing = _exec(
        box,
        ["dpkg-query", "--show", "--showformat", "${Package} ${Version} ${Architecture}\n"],
        log,
        "sbom",
        keep_output=True,
    )
    hashes: dict[tuple[str, str, str], str] = {}
    recorded = read_manifest(package_set_dir(plan.base, plan.packages, options.cache_dir))
    for entry in recorded or ():
        hashes[deb_identity(entry.file)] = entry.sha256
    packages = [
        DebPackage(name, version, arch, hashes.get((name, version, arch)))
        for name, version, arch in (line.split() for line in listing.splitlines() if line)
    ]
    return crates, packages


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
        fetched = _fetch_file(pipeline.box, path, pipeline.scratch)
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
        "toolchain": {"spec": plan.toolchain.as_dict(), "reported": report.as_dict()},
        "images": {"base": base.as_dict(), "toolchain": pipeline.image.as_dict()},
        "flags": {
            "target_cpu": options.target_cpu,
            "rustflags": list(plan.rustflags),
            "release_profile": RELEASE_PROFILE,
            "features": list(options.settings_for(plan.flavor).features),
            "default_features": options.settings_for(plan.flavor).default_features,
            "variants": {
                name: {
                    "cargo": list(v.build.argv),
                    "rustflags": v.build.environment["CARGO_ENCODED_RUSTFLAGS"].split("\x1f"),
                }
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

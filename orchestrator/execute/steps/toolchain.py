"""The image steps: base rootfs image, toolchain image, and the toolchain check (one LLVM
major everywhere, and a target-cpu the image's rustc knows)."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.config.resolve.toolchains import check_coherence
from orchestrator.config.suggest import suggest
from orchestrator.errors import ConfigError, StepFailedError
from orchestrator.execute.steps.commands import run
from orchestrator.execute.steps.pipeline import Pipeline
from orchestrator.flavors import get_flavor
from orchestrator.host.cachedir import write_cache_json
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.plan.c_code import check_clang_major
from orchestrator.plan.steps import StepName
from orchestrator.progress.reporter import StepLog
from orchestrator.runtime.engine import Engine
from orchestrator.runtime.images import ImageOutcome, ensure_base_image, ensure_toolchain_image

# <cache>/target-cpus/<image id>-<target>.json: what `rustc --print target-cpus` listed.
TARGET_CPUS_CACHE = "target-cpus"


def base_image(pipeline: Pipeline, log: StepLog) -> None:
    plan, options = pipeline.plan, pipeline.options
    pipeline.state.base = ensure_base_image(
        pipeline.engine, plan.base, plan.base_image, options.cache_dir, log, offline=options.offline
    )


def toolchain_image(pipeline: Pipeline, log: StepLog) -> None:
    plan, options, base = pipeline.plan, pipeline.options, pipeline.state.base
    if base is None:
        raise StepFailedError("internal: the toolchain image step runs after the base image step")
    pipeline.state.image = plan_toolchain_image(
        pipeline.engine, plan, base, log, cache_dir=options.cache_dir, offline=options.offline
    )


def plan_toolchain_image(
    engine: Engine,
    plan: BuildPlan,
    base: ImageOutcome,
    log: StepLog,
    *,
    cache_dir: Path,
    offline: bool,
) -> ImageOutcome:
    """The toolchain image `plan` names, on `engine`, over the base image `base`; its
    .debs and rootfs kept in `cache_dir` (`offline`: taken from there only)."""
    return ensure_toolchain_image(
        engine,
        base=plan.base,
        base_image=base,
        plan=plan.image,
        dockerfile=plan.dockerfile,
        packages=plan.packages,
        sources=plan.apt_sources,
        unpack=plan.unpack,
        cache_dir=cache_dir,
        log=log,
        offline=offline,
    )


def plan_images(
    engine: Engine, plan: BuildPlan, log: StepLog, *, cache_dir: Path, offline: bool
) -> ImageOutcome:
    """The base and toolchain images of `plan` on `engine`, as its image steps make them
    (what a release makes ahead for its next target, and tests that need an image)."""
    base = ensure_base_image(engine, plan.base, plan.base_image, cache_dir, log, offline=offline)
    return plan_toolchain_image(engine, plan, base, log, cache_dir=cache_dir, offline=offline)


def toolchain_check(pipeline: Pipeline, log: StepLog) -> None:
    """rustc, cargo, llvm-profdata and llvm-bolt must report one LLVM major, and rustc
    must know the target-cpu: for a CPU it does not know it only warns, then builds for a
    generic one under the CPU's name."""
    spec, box = pipeline.plan.toolchain, pipeline.box

    def version_of(*argv: str) -> str:
        return run(box, argv, log, StepName.TOOLCHAIN_CHECK, keep_output=True)

    report = check_coherence(
        spec,
        version_of(spec.tool("rustc"), "-vV"),
        version_of(spec.tool("cargo"), "-V"),
        version_of(spec.tool("llvm_profdata"), "--version"),
        version_of(spec.tool("llvm_bolt"), "--version"),
    )
    pipeline.state.toolchain = report
    log.detail = f"LLVM {report.llvm_major} everywhere"
    c_code = pipeline.plan.c_code
    if c_code is not None:  # [c_code] mode: clang's bitcode and profiles meet rustc's
        check_clang_major(c_code, spec, version_of(c_code.cc, "--version"))
        log.detail += f", {c_code.cc} included"
    check_target_cpu(pipeline, log)


def check_target_cpu(pipeline: Pipeline, log: StepLog) -> None:
    """ConfigError, before anything is compiled, for a target-cpu the image's rustc lacks.

    Names every rustc knows (the x86-64 levels, native, generic) need no asking; the
    list of the others is asked once per toolchain image and kept in the cache.
    """
    plan = pipeline.plan
    cpu = plan.target_cpu
    if cpu in get_flavor(plan.flavor).known_cpus:
        return
    known, source = _target_cpus(pipeline, log)
    if cpu not in known:
        match = suggest(cpu, known)
        report = pipeline.state.toolchain
        release = report.rustc.get("release", "") if report is not None else ""
        raise ConfigError(
            f"target-cpu {cpu!r} is not a CPU that rustc {release} knows for {plan.rust_target}"
            + (f"; did you mean {match!r}?" if match else ""),
            hint=f"rustc would only warn and build for a generic CPU. Its {len(known)} CPU "
            f"names are in {source}.",
        )
    log.detail += f"; rustc knows target-cpu {cpu}"


def _target_cpus(pipeline: Pipeline, log: StepLog) -> tuple[list[str], Path]:
    """The CPUs the image's rustc knows for the plan's target, and the file that lists them."""
    plan, image = pipeline.plan, pipeline.image
    name = f"{image.id.removeprefix('sha256:')[:32]}-{plan.rust_target}.json"
    path = pipeline.options.cache_dir / TARGET_CPUS_CACHE / name
    cached = _read_cached(path, image.id, plan.rust_target)
    if cached is not None:
        log.line(f"target CPUs of {plan.rust_target} from {path}")
        return cached, path
    rustc = plan.toolchain.tool("rustc")
    argv = (rustc, "--print", "target-cpus", "--target", plan.rust_target)
    listing = run(pipeline.box, argv, log, StepName.TOOLCHAIN_CHECK, keep_output=True)
    cpus = parse_target_cpus(listing)
    if not cpus:
        raise StepFailedError(
            f"`rustc --print target-cpus --target {plan.rust_target}` listed no CPU",
            hint="The step log shows what it printed.",
        )
    record = {"image": image.id, "target": plan.rust_target, "cpus": cpus}
    write_cache_json(path, record)
    return cpus, path


def _read_cached(path: Path, image_id: str, target: str) -> list[str] | None:
    """The cached list if it is intact and of this very image and target; else None."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # absent or damaged: ask rustc again
    if not isinstance(record, dict) or (record.get("image"), record.get("target")) != (
        image_id,
        target,
    ):
        return None
    cpus = record.get("cpus")
    if not isinstance(cpus, list) or not cpus or not all(isinstance(c, str) for c in cpus):
        return None
    return cpus


def parse_target_cpus(output: str) -> list[str]:
    """CPU names from `rustc --print target-cpus`: the first word of each indented line
    under "Available CPUs for this target:" (some carry a "- description")."""
    cpus = []
    for line in output.splitlines():
        if line[:1].isspace() and line.strip():
            cpus.append(line.split()[0])
    return cpus

"""The image steps: base rootfs image, toolchain image, and the LLVM coherence check."""

from __future__ import annotations

from orchestrator.config.toolchains import check_coherence
from orchestrator.errors import StepFailedError
from orchestrator.execute.pipeline import Pipeline, run
from orchestrator.plan.steps import StepName
from orchestrator.progress import StepLog
from orchestrator.runtime.images import ensure_base_image, ensure_toolchain_image


def base_image(pipeline: Pipeline, log: StepLog) -> None:
    plan, options = pipeline.plan, pipeline.options
    pipeline.state.base = ensure_base_image(
        pipeline.engine, plan.base, plan.base_image, options.cache_dir, log, offline=options.offline
    )


def toolchain_image(pipeline: Pipeline, log: StepLog) -> None:
    plan, options, base = pipeline.plan, pipeline.options, pipeline.state.base
    if base is None:
        raise StepFailedError("internal: the toolchain image step runs after the base image step")
    pipeline.state.image = ensure_toolchain_image(
        pipeline.engine,
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


def toolchain_check(pipeline: Pipeline, log: StepLog) -> None:
    """rustc, cargo, llvm-profdata and llvm-bolt must report one LLVM major."""
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

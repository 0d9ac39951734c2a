"""build.json's `c_code`: how build scripts' C was compiled ([c_code] mode, plan/c_code.py)
and what the shipped binary and the PGO profile show of it."""

from __future__ import annotations

from pathlib import Path

from orchestrator.execute.steps.pipeline import Pipeline
from orchestrator.model.binaries.elf import ElfReadError, comment_strings
from orchestrator.model.documents.records import CCodeInfo


def compiled_by_clang(comment: list[str]) -> bool:
    """Whether a .comment names clang. rustc's own entry says "rustc version", gcc's crt
    files "GCC: (Debian ...)": only code from clang's bitcode leaves "clang version"."""
    return any("clang version" in line for line in comment)


def c_code_shipped(pipeline: Pipeline) -> bool:
    """Whether the shipped binaries were built with [c_code] mode on: it applied, and the
    speed gate did not ship the build with the mode off."""
    gate = pipeline.state.gate
    plan = pipeline.plan
    return plan.c_code is not None and not (plan.c_off and gate and gate.shipped == plan.c_off)


def c_code_record(pipeline: Pipeline, binary: Path) -> CCodeInfo | None:
    """None where [c_code] mode is off; else what it did for this artifact."""
    options, plan = pipeline.options, pipeline.plan
    if options.c_code == "off":
        return None
    c_code = plan.c_code
    if c_code is None:
        return CCodeInfo(mode=options.c_code, applied=False, skipped=plan.c_code_skipped)
    try:
        comment = comment_strings(binary)
    except ElfReadError:
        comment = []
    pgo = pipeline.state.pgo
    functions = pgo.details.get("c_functions") if pgo is not None else None
    return CCodeInfo(
        mode=c_code.mode,
        applied=True,
        cc=c_code.cc,
        cxx=c_code.cxx,
        cflags=list(c_code.cflags),
        rustflags=list(c_code.rustflags),
        compiled_with_clang=compiled_by_clang(comment),
        comment=comment,
        profile_c_functions=[str(f) for f in functions] if isinstance(functions, list) else None,
        off_candidate=plan.c_off or None,
        shipped=c_code_shipped(pipeline),
        off_functions_without_profile=pipeline.state.c_off_missing,
    )

"""`glibc-view`: the sysroot's glibc libraries as the linker would see them in an older glibc.

The toolchain's sysroot holds Debian 11's glibc (2.31). For a floor below it, its libraries
are fetched from the build container, every symbol version newer than the floor is hidden
(model/binaries/elf.py), and they go back into a folder the linker searches first, beside linker
scripts `libc.so`, `libm.so`... that name them. Nothing in the image changes; the folder
lives in the build container only, and the loaded libraries on users' systems are their own.
"""

from __future__ import annotations

from orchestrator.errors import StepFailedError
from orchestrator.execute.steps.commands import fetch_file, output_of, run
from orchestrator.execute.steps.pipeline import Pipeline
from orchestrator.host.packing import single_file_tar
from orchestrator.model.binaries.elf import ElfReadError, hide_versions_above
from orchestrator.plan.portable import GLIBC_LIBRARIES, SysrootPlan
from orchestrator.plan.steps import StepName
from orchestrator.progress.reporter import StepLog


def linker_script(soname: str, sysroot: SysrootPlan) -> str:
    """What `-l<name>` finds in the view folder: the rewritten library (libc also needs its
    static part and the loader, as the sysroot's own libc.so names them)."""
    library = f"{sysroot.view_dir}/{soname}"
    if soname.startswith("libc.so."):
        static = f"{sysroot.root}/usr/lib/{sysroot.multiarch}/libc_nonshared.a"
        loader = f"{sysroot.root}{sysroot.interpreter}"
        return f"GROUP ( {library} {static} AS_NEEDED ( {loader} ) )\n"
    return f"INPUT ( {library} )\n"


def glibc_view(pipeline: Pipeline, log: StepLog) -> None:
    sysroot, box, step = pipeline.plan.sysroot, pipeline.box, StepName.GLIBC_VIEW
    if sysroot is None or not sysroot.view_dir:
        raise StepFailedError("internal: glibc-view planned without a floor below the sysroot")
    run(box, ["mkdir", "-p", sysroot.view_dir], log, step)
    hidden_in_all = 0
    for soname in GLIBC_LIBRARIES:
        linked = f"{sysroot.root}/lib/{sysroot.multiarch}/{soname}"
        real = output_of(box, ["readlink", "-f", linked], log, step)
        local = fetch_file(box, real, pipeline.scratch / "glibc-view")
        try:
            data, hidden = hide_versions_above(local.read_bytes(), sysroot.floor)
        except ElfReadError as exc:
            raise StepFailedError(f"step {step}: {real}: {exc}") from exc
        log.line(f"{soname}: {len(hidden)} definitions above glibc {sysroot.floor} hidden")
        for definition in hidden:
            log.line(f"  {definition}")
        hidden_in_all += len(hidden)
        stem = soname.split(".so", 1)[0]
        script = linker_script(soname, sysroot).encode()
        for name, content in ((soname, data), (f"{stem}.so", script)):
            path = f"{sysroot.view_dir}/{name}"
            box.put_archive(sysroot.view_dir, single_file_tar(path, content))
        log.line(f"+ docker cp <{soname} as glibc {sysroot.floor}> {sysroot.view_dir}")
    log.detail = f"{hidden_in_all} newer symbol versions hidden from the linker"

"""Will the shipped binary start where users run it? Two steps.

`portability` reads the binary's ELF on the host: the glibc symbol versions the loader will
insist on (a build fails when one is above `release.glibc_floor`, naming the symbols), its
DT_NEEDED libraries and the CPU features its code generation assumed.

`distros` runs it in bare containers of an old and a new Debian release (images/distros.toml):
first the loader's own check (`ld.so --list`: every library and symbol version resolves),
then validate.command at the crate's root, whose output must equal the baseline's.
"""

from __future__ import annotations

from orchestrator.errors import PortabilityError, StepFailedError
from orchestrator.execute.steps.commands import fetch_file, run
from orchestrator.execute.steps.pipeline import Pipeline
from orchestrator.execute.verdict.validate import capture
from orchestrator.model.binaries.elf import ElfReadError, loader_needs, version_tuple
from orchestrator.model.binaries.portability import from_loader_needs
from orchestrator.model.documents.records import DistroRun
from orchestrator.model.layout import PATHS
from orchestrator.model.verdict.outputs import compare_captured, render_diff
from orchestrator.plan.portable import DistroPlan, SysrootPlan
from orchestrator.plan.steps import StepName
from orchestrator.progress.reporter import StepLog
from orchestrator.runtime.engine import Container, ContainerSpec
from orchestrator.runtime.images import ensure_base_image

_SHOWN_SYMBOLS = 12


def portability(pipeline: Pipeline, log: StepLog) -> None:
    plan, box, state = pipeline.plan, pipeline.box, pipeline.state
    if not state.shipped:
        raise StepFailedError("internal: portability runs before any binary was built")
    step = StepName.PORTABILITY
    codegen = [f for f in plan.rustflags if f.startswith(("-Ctarget-cpu", "-Ctarget-feature"))]
    rustc_cfg = run(
        box,
        [plan.toolchain.tool("rustc"), "--print", "cfg", "--target", plan.rust_target, *codegen],
        log,
        step,
        keep_output=True,
    )
    needed: list[str] = []  # what each binary needs
    for name, binary in pipeline.shipped().items():
        local = fetch_file(box, binary, pipeline.scratch / "portability" / name)
        try:
            needs = loader_needs(local)
        except ElfReadError as exc:
            raise StepFailedError(f"step {step}: {binary}: {exc}") from exc
        report = from_loader_needs(
            needs,
            target=plan.rust_target,
            target_cpu=plan.target_cpu,
            glibc_floor=plan.glibc_floor,
            rustc_cfg=rustc_cfg,
        )
        if name == plan.binary:
            state.portability = report
        else:
            state.other_glibc[name] = report.glibc_max
        needed += [report.glibc_max] if report.glibc_max else []
        log.line(f"{name} needs glibc {report.glibc_max} (floor {plan.glibc_floor}); DT_NEEDED:")
        for library in report.needed:
            log.line(f"  {library}")
        if report.above_floor:
            shown = list(report.above_floor[:_SHOWN_SYMBOLS])
            if len(report.above_floor) > _SHOWN_SYMBOLS:
                shown.append(f"and {len(report.above_floor) - _SHOWN_SYMBOLS} more")
            raise PortabilityError(
                f"{plan.artifact_dir}/{name} needs glibc {report.glibc_max}, newer than "
                f"release.glibc_floor {plan.glibc_floor}; the loader on an older system "
                "refuses it for: " + ", ".join(shown),
                hint=_floor_hint(plan.glibc_floor, report.glibc_max, plan.sysroot),
            )
    log.detail = f"glibc {max(needed, key=version_tuple, default=None)} <= floor {plan.glibc_floor}"


def _floor_hint(floor: str, needed: str | None, sysroot: SysrootPlan | None) -> str:
    raise_it = (
        f'If your users all have glibc {needed} or newer, set [release] glibc_floor = "{needed}".'
    )
    if sysroot is None:
        return f"The binary links against the image's own glibc. {raise_it}"
    seen = floor if version_tuple(floor) < version_tuple(sysroot.glibc) else sysroot.glibc
    return (
        f"The linker saw glibc {seen}'s symbols, so the newer versions come from elsewhere: "
        "an object or static library a build script links in, compiled against a newer "
        f"glibc (the symbols above name it). {raise_it}"
    )


def distros(pipeline: Pipeline, log: StepLog) -> None:
    plan, state = pipeline.plan, pipeline.state
    if pipeline.options.offline:
        # A reproduction checks bytes; its release already proved where they run.
        log.mark_cached("offline: not run (the distros' root filesystems are not pinned)")
        return
    report = state.portability
    if report is None or not state.shipped:
        raise StepFailedError("internal: the distros step runs after portability")
    results: list[DistroRun] = []
    for distro in plan.distros:
        image = ensure_base_image(
            pipeline.engine,
            distro.base,
            distro.image,
            pipeline.options.cache_dir,
            log,
            offline=pipeline.options.offline,
        )
        spec = ContainerSpec(
            image.reference,
            user="1000:1000",  # nobody's uid there; it needs no account to run
            read_only_volumes={pipeline.volume: PATHS.out, **pipeline.run_volumes()},
            purpose="distro",
            limits=pipeline.limits,  # it runs the crate's binary too
        )
        with pipeline.engine.container(spec, keep=pipeline.keep_containers) as box:
            results.append(_run_in(pipeline, box, distro, report.interpreter, log))
    state.distro_runs = results
    log.cached = False  # an image that existed is not a step that was skipped
    log.detail = "ran on " + ", ".join(f"{d.spec.release} ({d.spec.suite})" for d in plan.distros)


def _check_loader(box: Container, argv: list[str], log: StepLog, title: str) -> None:
    """The loader resolves every library and symbol version and stops before main: its
    refusal ("version `GLIBC_2.39' not found") is the clearest message there is."""
    lines: list[str] = []
    log.command(argv, {})

    def keep(line: str) -> None:
        lines.append(line)
        log.line(line)

    code = box.exec(argv, on_output=keep)
    if code != 0 or any("not found" in line for line in lines):
        raise PortabilityError(
            f"the shipped binary does not load on {title}:\n" + "\n".join(lines[-12:]),
            hint="The portability step's glibc report in the log says what it needs; "
            "raise [release] glibc_floor only if your users have newer systems.",
        )


def _run_in(
    pipeline: Pipeline, box: Container, distro: DistroPlan, interpreter: str, log: StepLog
) -> DistroRun:
    plan, state, step = pipeline.plan, pipeline.state, StepName.DISTROS
    title = distro.spec.title
    log.line(f"-- {title}")
    if interpreter:  # a static binary has no loader to ask
        for binary in pipeline.shipped().values():
            _check_loader(box, [*distro.runner, interpreter, "--list", binary], log, title)
    ran = DistroRun(
        distribution=distro.spec.release,
        suite=distro.spec.suite,
        glibc=distro.spec.glibc,
        image=distro.image.reference,
        loads=True,
        validated=False,
        not_validated=plan.distro_validation or None,
    )
    if plan.distro_validation:
        log.line(f"validate.command not run here: {plan.distro_validation}")
    elif state.expected:
        shipped, runs = pipeline.shipped(), plan.validation_runs
        for index, (check, expected) in enumerate(zip(runs, state.expected, strict=True)):
            name = check.binary_or(plan.binary)
            try:
                got = capture(
                    pipeline,
                    box,
                    shipped[name],
                    check.args,
                    log,
                    name=f"{distro.spec.suite}-shipped-{index}",
                    step=step,
                    runner=distro.runner,
                    out_dir=f"/tmp/{step}",  # noqa: S108 - the throwaway container's own /tmp
                )
            except StepFailedError as exc:
                raise PortabilityError(
                    f"{plan.artifact_dir}: `{check}` failed on {title}: {exc.message}"
                ) from exc
            differences = compare_captured(
                expected, got, plan.validate_tolerance, plan.validate_select
            )
            if differences:
                diff = render_diff(
                    expected, got, expected_name="baseline", got_name=distro.spec.suite
                )
                raise PortabilityError(
                    f"{plan.artifact_dir}: `{check}` printed something else on {title} than "
                    f"the baseline in the build container ({differences}):\n{diff}"
                )
        ran = ran.model_copy(update={"validated": True})
    log.line(f"ok: {title}")
    return ran

"""A target folder as `build --target` hands it over, for the `release assemble` tests:
made by the real publish step (through the fake Engine), its binary a real ELF compiled
here by the host's gcc, and its target.json written as the runner writes it.

`edit_to_match` is what an attacker who controls a runner does after the build: put other
bytes in the folder and rewrite build.json, the SBOM and target.json so that every hash
agrees. The checks must refuse such a folder on what the bytes themselves show.
"""

from __future__ import annotations

import shutil
import subprocess
from contextlib import ExitStack
from pathlib import Path

from orchestrator.config.resolve.options import Options
from orchestrator.host.bootstrap import rootfs_recipe
from orchestrator.model.documents.lockfile import LockedProfile, LockOutput, SharedPins
from orchestrator.model.documents.records import (
    BinaryFile,
    BuildManifest,
    read_record,
    write_record,
)
from orchestrator.model.documents.release_summary import TargetSummary
from orchestrator.model.documents.target_folder import TARGET_RECORD, TargetFolder
from orchestrator.model.hashing import sha256_file
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.plan.serialize import action_key
from orchestrator.release.assemble.binary_checks import planned_rustc
from orchestrator.release.assemble.shard import folder_digests
from orchestrator.release.targets.target import Target
from orchestrator.supply.sbom import SBOM_FILE

from .execute_rig import make_options
from .publish_rig import extract_and_publish, ready_to_publish
from .test_lockfile import lock_for

# A program with no libc (so no glibc symbol versions and no CPUID), whose one loop the
# compiler vectorizes: PMULUDQ (SSE2) at x86-64, PMULLD (SSE4.1) at x86-64-v2, VPMULLD
# (AVX2) at x86-64-v3. Its count of trailing zeros is `rep bsf` (TZCNT's encoding) at
# every level.
ELF_SOURCE = r"""
__asm__(".ident \"rustc version %(rustc)s (0000000 2026-01-01)\"");
int data[256], more[256];
__attribute__((noinline)) int total(const int *a, const int *b, int n) {
    int s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}
void _start(void) {
    long code = (total(data, more, 256) + __builtin_ctz((unsigned)data[1] | 8u)) & 0x7f;
    __asm__ volatile("syscall" :: "a"(60L), "D"(code));
    for (;;) {}
}
"""


def compile_elf(out: Path, *, march: str, rustc: str, flags: tuple[str, ...] = ()) -> Path:
    """A static x86-64 executable for `march` whose .comment says rustc `rustc` made it."""
    compiler = shutil.which("gcc") or shutil.which("cc")
    assert compiler, "the unit tests need the host's C compiler (gcc is on every machine here)"
    source = out.with_suffix(".c")
    source.write_text(ELF_SOURCE % {"rustc": rustc})
    argv = [compiler, "-O3", f"-march={march}", "-static", "-nostdlib", "-ffreestanding"]
    # --eh-frame-hdr: the function table a linker writes for every program but a static one
    argv += ["-fno-pie", "-no-pie", "-Wl,--eh-frame-hdr", *flags, "-o", str(out), str(source)]
    subprocess.run(argv, check=True)
    return out


PINS = SharedPins.model_validate(
    {
        "rootfs_sha256": "2" * 64,
        "mmdebstrap": {"command": ["mmdebstrap", "trixie"], "version": "1.5.6"},
        "vendor_sha256": "1" * 64,
    }
)


def handed_over_folder(options: Options, tmp_path: Path) -> tuple[Path, BuildPlan]:
    """What `build --target` leaves: the finished folder, moved unsigned into out/ (its
    binary the fake Engine's bytes, no ELF)."""
    (tmp_path / "rig").mkdir()
    with ExitStack() as stack:
        rig = ready_to_publish(options, stack, tmp_path / "rig", None)  # type: ignore[arg-type]
        rig.pipeline.unsigned_out = tmp_path / "out"
        extract_and_publish(rig)
    plan = rig.pipeline.plan
    return tmp_path / "out" / plan.artifact_dir, plan


def describe(folder: Path, target: Target, plan: BuildPlan, **changes: object) -> None:
    """target.json as `build --target` writes it for the folder as it is now: the lock's
    outputs and profiles from its files, the pins this plan fixes."""
    manifest = read_record(folder / "build.json", BuildManifest)
    files = changes["files"] if "files" in changes else folder_digests(folder)
    outputs = [
        LockOutput(
            file=name, sha256=sha256_file(folder / name), size=(folder / name).stat().st_size
        )
        for name in plan.binaries
    ]
    base = lock_for(plan).targets[0]
    profiles = {
        name: LockedProfile(sha256=d.sha256, size=d.size, cache_file="pgo/k.profdata", details={})
        for name, d in manifest.profiles.items()
    }
    lock = base.model_copy(
        update={
            "level": target.level,
            "output": outputs[0],
            "other_outputs": outputs[1:],
            "resolved": base.resolved.model_copy(update={"profiles": profiles}),
        }
    )
    recipe = ["mmdebstrap", *rootfs_recipe(plan.base)]
    pins = PINS.model_copy(
        update={"mmdebstrap": PINS.mmdebstrap.model_copy(update={"command": recipe})}
    )
    fields: dict[str, object] = {
        "written_by": "orchestrator test",
        "artifact": plan.artifact_dir,
        "action_key": action_key(plan, target.options),
        "summary": TargetSummary(
            flavor=target.flavor,
            level=target.level,
            artifact=plan.artifact_dir,
            status="ok",
            seconds=1.0,
            size=outputs[0].size,
            sha256=outputs[0].sha256,
            speedup_vs_baseline=None,
            error=None,
            warnings=[],
            engine="current",
        ),
        "lock": lock,
        "pins": pins,
        "files": files,
    } | changes
    write_record(folder / TARGET_RECORD, TargetFolder.model_validate(fields))


def edit_to_match(
    folder: Path, target: Target, plan: BuildPlan, binaries: dict[str, bytes], **changes: object
) -> None:
    """Put `binaries` (name -> bytes) into the folder and make build.json, the SBOM and
    target.json agree with them, as a runner that lies would."""
    manifest = read_record(folder / "build.json", BuildManifest)
    sbom = (folder / SBOM_FILE).read_text()
    known = {b.file: b for b in manifest.artifact.binaries}
    described: list[BinaryFile] = []
    for name, data in binaries.items():
        (folder / name).write_bytes(data)
        (folder / name).chmod(0o755)
        digest = sha256_file(folder / name)
        if name in known:
            sbom = sbom.replace(known[name].sha256, digest)
        described.append(BinaryFile(file=name, sha256=digest, size=len(data)))
    artifact = manifest.artifact
    main = next((b for b in described if b.file == artifact.file), None)
    others = [b for b in artifact.other_binaries if b.file not in binaries]
    others += [b for b in described if b.file != artifact.file]
    update: dict[str, object] = {"other_binaries": others}
    if main is not None:
        update |= {"sha256": main.sha256, "size": main.size}
    manifest = manifest.model_copy(update={"artifact": artifact.model_copy(update=update)})
    write_record(folder / "build.json", manifest)
    (folder / SBOM_FILE).write_text(sbom)
    describe(folder, target, plan, **changes)


def ready_folder(project: Path, tmp_path: Path) -> tuple[Path, Target, BuildPlan]:
    """A handed-over folder whose binary is a real ELF of the plan's level and toolchain,
    with its target.json: one `release assemble` accepts."""
    options = make_options(project, artifacts_dir=tmp_path / "artifacts")
    folder, plan = handed_over_folder(options, tmp_path)
    target = Target("cpu", plan.target_cpu, options)
    rustc = planned_rustc(plan)
    assert rustc is not None
    elf = compile_elf(tmp_path / "elf", march=plan.target_cpu, rustc=rustc)
    edit_to_match(folder, target, plan, {plan.binary: elf.read_bytes()})
    return folder, target, plan

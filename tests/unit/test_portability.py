"""The glibc floor: the ELF reader, the portability step that enforces the floor, and the
distros step that runs the binary in old and new Debian containers (through the fake Engine).

The ELF files are compiled here by the host's C compiler, against the host's glibc (2.36 on
the project's machines): `gettid` is GLIBC_2.30, `pidfd_open` GLIBC_2.36, and a weak
reference keeps its version, which is what makes a Rust binary that spawns processes
need glibc 2.39 when it is linked against Debian 13's.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerDefSection, GNUVerSymSection
from elftools.elf.sections import SymbolTableSection

from orchestrator.config.resolve.toolchains import load_base_spec, load_distros
from orchestrator.errors import PortabilityError, StepFailedError
from orchestrator.execute.steps import sysroot as sysroot_step
from orchestrator.execute.steps.pipeline import BIN_DIR
from orchestrator.execute.verdict import portability
from orchestrator.flavors import get_flavor
from orchestrator.host.bootstrap import rootfs_recipe
from orchestrator.model.binaries.elf import (
    ElfReadError,
    LoaderNeeds,
    hide_versions_above,
    loader_needs,
    read_loader_needs,
    version_tuple,
)
from orchestrator.model.binaries.portability import from_loader_needs
from orchestrator.model.documents.records import PortabilityInfo
from orchestrator.model.verdict.outputs import Captured
from orchestrator.plan.images import base_image_plan
from orchestrator.plan.portable import GLIBC_LIBRARIES, distro_plan
from orchestrator.plan.steps import StepName
from orchestrator.runtime.api import LABEL_INPUT_HASH, ImageInfo
from orchestrator.supply.minisign import SecretKey
from orchestrator.supply.verify import Verifier

from .conftest import plan_for
from .execute_rig import Rig, answers, make_options, make_rig
from .fakes import FakeEngine, Responder

NEEDS_236 = r"""
#define _GNU_SOURCE
#include <stdio.h>
#include <unistd.h>
extern int pidfd_open(pid_t pid, unsigned int flags) __attribute__((weak));
int main(void) {
    printf("%d %d\n", (int)gettid(), pidfd_open ? 1 : 0);
    return 0;
}
"""
PLAIN = '#include <stdio.h>\nint main(void) { puts("hi"); return 0; }\n'


def compile_c(tmp_path: Path, source: str, name: str = "prog") -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    assert compiler, "the unit tests need the host's C compiler (gcc is on every machine here)"
    (tmp_path / f"{name}.c").write_text(source)
    out = tmp_path / name
    subprocess.run([compiler, "-O1", "-o", out, tmp_path / f"{name}.c"], check=True)
    return out


@pytest.fixture(scope="module")
def needs_236(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_c(tmp_path_factory.mktemp("elf"), NEEDS_236)


def test_the_reader_names_versions_symbols_and_weak_references(needs_236: Path) -> None:
    needs = loader_needs(needs_236)
    assert needs.interpreter == "/lib64/ld-linux-x86-64.so.2"
    assert "libc.so.6" in needs.needed
    assert needs.glibc_max == "2.36"
    # numeric order: 2.30 after 2.3 and 2.9 would come after it as text
    assert needs.glibc_above("2.28") == ["2.30", "2.34", "2.36"]
    above = {s.name: s for s in needs.symbols_above("2.28")}
    assert above["gettid"].version == "GLIBC_2.30"
    assert not above["gettid"].weak
    assert above["pidfd_open"].version == "GLIBC_2.36"
    assert above["pidfd_open"].weak  # weak, and the loader still insists on its version
    assert "__libc_start_main" in above
    assert needs.symbols_above("2.36") == []


def test_a_file_that_is_not_elf_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "script").write_bytes(b"#!/bin/sh\necho hi\n")
    with pytest.raises(ElfReadError):
        loader_needs(tmp_path / "script")
    with (tmp_path / "script").open("rb") as stream, pytest.raises(ElfReadError):
        read_loader_needs(stream)


CFG = ['target_arch="x86_64"', 'target_feature="sse2"', 'target_feature="avx2"']


def _rig_with_binary(
    project: Path, stack: ExitStack, tmp_path: Path, binary: Path, **changes: object
) -> Rig:
    engine = FakeEngine(
        responder=answers(("--print cfg", 0, CFG)), missing=lambda _path: binary.read_bytes()
    )
    return make_rig(make_options(project, **changes), stack, tmp_path, engine=engine)


def test_portability_fails_above_the_floor_naming_the_symbols(
    project: Path, stack: ExitStack, tmp_path: Path, needs_236: Path
) -> None:
    rig = _rig_with_binary(project, stack, tmp_path, needs_236, glibc_floor="2.28")
    pipeline = rig.pipeline
    with pytest.raises(StepFailedError, match="before any binary"):
        portability.portability(pipeline, rig.log)
    pipeline.state.shipped = f"{BIN_DIR}/optimized"
    with pytest.raises(PortabilityError) as caught:
        portability.portability(pipeline, rig.log)
    message = caught.value.message
    assert "needs glibc 2.36, newer than release.glibc_floor 2.28" in message
    assert "gettid@GLIBC_2.30" in message
    assert "pidfd_open@GLIBC_2.36 (weak)" in message
    assert 'glibc_floor = "2.36"' in caught.value.hint
    assert caught.value.exit_code == 62
    report = pipeline.state.portability  # recorded even when it fails
    assert report is not None
    assert report.glibc_max == "2.36"


def test_portability_passes_at_or_above_what_the_binary_needs(
    project: Path, stack: ExitStack, tmp_path: Path, needs_236: Path
) -> None:
    rig = _rig_with_binary(project, stack, tmp_path, needs_236, glibc_floor="2.36")
    pipeline = rig.pipeline
    pipeline.state.shipped = f"{BIN_DIR}/optimized"
    portability.portability(pipeline, rig.log)
    report = pipeline.state.portability
    assert report is not None
    assert (report.glibc_floor, report.above_floor) == ("2.36", ())
    assert report.cpu_features == ("avx2", "sse2")
    assert rig.log.detail == "glibc 2.36 <= floor 2.36"
    info = PortabilityInfo.model_validate(report.as_dict())
    assert info.interpreter == "/lib64/ld-linux-x86-64.so.2"


def test_distro_plans_reuse_the_base_image_and_add_qemu_for_a_foreign_architecture() -> None:
    base = load_base_spec()
    bullseye, trixie = load_distros()
    assert (bullseye.suite, trixie.suite) == ("bullseye", base.suite)
    cpu = get_flavor("cpu")
    same = distro_plan(trixie, cpu, base)
    assert same.image == base_image_plan(base)  # no second image of the base's suite
    old = distro_plan(bullseye, cpu, base)
    assert old.image.reference.startswith("orchestrator/distro:bullseye-x86_64-")
    assert old.runner == ()
    arm = distro_plan(bullseye, get_flavor("aarch64"), base)
    assert arm.runner == ("qemu-aarch64-static",)
    assert arm.base.include == ("qemu-user-static", "libc6:arm64")
    recipe = rootfs_recipe(arm.base)
    assert "--architectures=amd64,arm64" in recipe
    assert "--include=qemu-user-static,libc6:arm64" in recipe
    assert recipe[-3] == "bullseye"
    arm_new = distro_plan(trixie, get_flavor("aarch64"), base)
    assert arm_new.runner == ("qemu-aarch64",)
    assert arm_new.image != same.image


def test_the_distros_step_is_planned_and_can_be_turned_off(project: Path) -> None:
    plan = plan_for(make_options(project))
    names = [s.name for s in plan.steps]
    assert names.index(StepName.DISTROS) == names.index(StepName.PORTABILITY) + 1
    assert [d.spec.suite for d in plan.distros] == ["bullseye", "trixie"]
    off = plan_for(make_options(project, distro_check="off"))
    assert StepName.DISTROS not in [s.name for s in off.steps]
    assert off.distros == ()


def _distro_rig(
    project: Path, stack: ExitStack, tmp_path: Path, responder: Responder, stdout: bytes
) -> Rig:
    def read(path: str) -> bytes:
        return stdout if path.endswith(".stdout") else b""

    engine = FakeEngine(responder=responder, missing=read)
    options = make_options(project, validate_command=("greet", "--loud"))
    rig = make_rig(options, stack, tmp_path, engine=engine)
    pipeline = rig.pipeline
    pipeline.state.shipped = f"{BIN_DIR}/optimized"
    pipeline.state.expected = [Captured(b"hello\n", b"")]
    pipeline.state.portability = from_loader_needs(
        LoaderNeeds("/lib64/ld-linux-x86-64.so.2", (), (), ()),
        target="x86_64-unknown-linux-gnu",
        target_cpu="x86-64-v2",
        glibc_floor="2.28",
        rustc_cfg="",
    )
    # Both images exist already (as the images step left them).
    for distro in pipeline.plan.distros:
        engine.images[distro.image.reference] = ImageInfo(
            "sha256:" + distro.image.input_hash,
            (distro.image.reference,),
            {LABEL_INPUT_HASH: distro.image.input_hash},
            1,
        )
    return rig


def test_distros_runs_the_loader_then_validation_in_each_release(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig = _distro_rig(project, stack, tmp_path, answers(), b"hello\n")
    pipeline = rig.pipeline
    portability.distros(pipeline, rig.log)
    assert [r.suite for r in pipeline.state.distro_runs] == ["bullseye", "trixie"]
    assert all(r.loads and r.validated for r in pipeline.state.distro_runs)
    engine = rig.engine
    boxes = [c for c in engine.containers if c.spec.purpose == "distro"]
    assert len(boxes) == 2
    for box in boxes:
        assert box.spec.volumes == {}  # nothing it can write to
        assert set(box.spec.read_only_volumes.values()) == {"/build/out", "/build/src"}
        assert box.spec.network is False
        assert box.argvs[0][1:] == ("--list", f"{BIN_DIR}/optimized")
        validation = next(a for a in box.argvs if "greet" in a)
        assert validation[-3:] == (f"{BIN_DIR}/optimized", "greet", "--loud")
    info = PortabilityInfo.model_validate(
        {
            "target": "t",
            "target_cpu": "c",
            "glibc_max": "2.28",
            "needed": [],
            "cpu_features": [],
            "distros": [r.model_dump() for r in pipeline.state.distro_runs],
        }
    )
    assert info.oldest_distribution == "Debian 11 (bullseye, glibc 2.31)"


def test_distros_fails_when_the_loader_refuses_the_binary(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    refusal = "/build/out/bin/optimized: version `GLIBC_2.39' not found (required by x)"
    rig = _distro_rig(project, stack, tmp_path, answers(("--list", 1, [refusal])), b"hello\n")
    with pytest.raises(PortabilityError, match=r"does not load on Debian 11 \(bullseye"):
        portability.distros(rig.pipeline, rig.log)


def test_distros_fails_when_the_output_differs_there(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig = _distro_rig(project, stack, tmp_path, answers(), b"HELLO\n")
    with pytest.raises(PortabilityError, match="printed something else on Debian 11"):
        portability.distros(rig.pipeline, rig.log)


def test_an_offline_reproduction_skips_the_distros(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    engine = FakeEngine()
    rig = make_rig(make_options(project, offline=True), stack, tmp_path, engine=engine)
    portability.distros(rig.pipeline, rig.log)
    assert engine.containers == []
    assert "offline" in rig.log.detail


def _recorded(glibc_max: str | None, floor: str | None) -> PortabilityInfo:
    return PortabilityInfo(
        target="x86_64-unknown-linux-gnu",
        target_cpu="x86-64-v2",
        glibc_max=glibc_max,
        needed=[],
        cpu_features=[],
        glibc_floor=floor,
    )


def test_verify_reads_the_elf_again_against_the_recorded_floor(
    needs_236: Path, tmp_path: Path
) -> None:
    verifier = Verifier(needs_236.parent, SecretKey.generate().public)
    verifier.glibc(needs_236, _recorded("2.36", "2.36"))
    verifier.glibc(needs_236, _recorded("2.36", "2.28"))  # build.json's floor, not met
    verifier.glibc(needs_236, _recorded("2.31", "2.36"))  # build.json understates it
    verifier.glibc(needs_236, None)  # built before floors: nothing to re-check
    ok, above, understated = verifier.checks
    assert (ok.ok, ok.check, ok.detail) == (True, "glibc", "needs glibc 2.36 <= floor 2.36")
    assert not above.ok
    assert "above its floor 2.28" in above.detail
    assert "gettid@GLIBC_2.30" in above.detail
    assert not understated.ok
    assert understated.detail == "needs glibc 2.36, build.json says 2.31"


def test_distros_is_not_reported_as_cached_when_its_images_exist(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig = _distro_rig(project, stack, tmp_path, answers(), b"hello\n")
    portability.distros(rig.pipeline, rig.log)
    assert "cached: " in rig.text  # the images were there...
    assert rig.log.cached is False  # ...but the binary ran in them
    assert rig.log.detail == "ran on Debian 11 (bullseye), Debian 13 (trixie)"


def test_shipped_variants_link_against_the_sysroot_and_the_baseline_does_not(
    project: Path,
) -> None:
    plan = plan_for(make_options(project, glibc_floor="2.31"))
    assert plan.sysroot is not None
    assert plan.sysroot.glibc == "2.31"
    link = [f for f in plan.variants["release"].rustflags if f.startswith("-Clink-arg=")]
    assert link[:4] == [
        "-Clink-arg=--sysroot=/opt/orchestrator/unpack",
        "-Clink-arg=-B/opt/orchestrator/unpack/usr/lib/x86_64-linux-gnu/",
        "-Clink-arg=-L/opt/orchestrator/unpack/usr/lib/x86_64-linux-gnu",
        "-Clink-arg=-L/opt/orchestrator/unpack/lib/x86_64-linux-gnu",
    ]
    for name in ("pgo-generate", "optimized"):
        assert set(link) <= set(plan.variants[name].rustflags), name
    baseline = plan.variants["baseline"]
    assert not [f for f in baseline.rustflags if "sysroot" in f or f.startswith("-Clink-arg=-L")]
    # C from build scripts: the floor's headers for shipped variants, the image's for the
    # plain baseline (the build container's environment has the variable, so it is cleared).
    cflags = "CFLAGS_x86_64_unknown_linux_gnu"
    assert plan.variants["release"].build.environment[cflags].split() == [
        "--sysroot=/opt/orchestrator/unpack",
        "-isystem",
        "/opt/orchestrator/unpack/usr/include/x86_64-linux-gnu",
        "-isystem",
        "/opt/orchestrator/unpack/usr/include",
    ]
    assert StepName.GLIBC_VIEW not in [s.name for s in plan.steps]  # 2.31 is the sysroot's
    assert baseline.build.environment[cflags] == ""
    assert "libc6:amd64" in plan.unpack
    assert plan.apt_sources.suites == ("bullseye",)


def test_the_aarch64_sysroot_is_arm64_and_a_new_floor_needs_none(project: Path) -> None:
    arm = plan_for(make_options(project), "aarch64")
    assert arm.sysroot is not None
    assert "-Clink-arg=-L/opt/orchestrator/unpack/lib/aarch64-linux-gnu" in arm.rustflags
    assert {"libc6:arm64", "libc6-dev:arm64", "libgcc-s1:arm64"} <= set(arm.unpack)
    assert "CFLAGS_aarch64_unknown_linux_gnu" in arm.build.environment
    new = plan_for(make_options(project, glibc_floor="2.41"))
    assert new.sysroot is None  # the image's own glibc is old enough
    assert not [f for f in new.rustflags if "sysroot" in f]
    assert "CFLAGS_x86_64_unknown_linux_gnu" not in new.build.environment
    assert new.image == plan_for(make_options(project)).image  # the same image either way


# -- the glibc view: the sysroot's libraries as an older glibc ---------------------------
HOST_LIBM = Path("/lib/x86_64-linux-gnu/libm.so.6")  # glibc 2.36 on the project's machines


def _definitions(data: bytes) -> dict[tuple[str, str], bool]:
    """{(symbol, version): visible} of a library's versioned definitions."""
    elf = ELFFile(io.BytesIO(data))
    verdef = elf.get_section_by_name(".gnu.version_d")
    versym = elf.get_section_by_name(".gnu.version")
    dynsym = elf.get_section_by_name(".dynsym")
    assert isinstance(verdef, GNUVerDefSection)
    assert isinstance(versym, GNUVerSymSection)
    assert isinstance(dynsym, SymbolTableSection)
    names = {int(d["vd_ndx"]): str(next(iter(a)).name) for d, a in verdef.iter_versions()}
    found: dict[tuple[str, str], bool] = {}
    for index, symbol in enumerate(dynsym.iter_symbols()):
        raw = int.from_bytes(
            data[versym["sh_offset"] + 2 * index : versym["sh_offset"] + 2 * index + 2], "little"
        )
        if symbol["st_shndx"] != "SHN_UNDEF" and raw & 0x7FFF in names:
            found[str(symbol.name), names[raw & 0x7FFF]] = not raw & 0x8000
    return found


def test_the_view_hides_newer_versions_and_restores_the_old_defaults() -> None:
    original = HOST_LIBM.read_bytes()
    before = _definitions(original)
    assert before["exp", "GLIBC_2.29"] and not before["exp", "GLIBC_2.2.5"]
    patched, hidden = hide_versions_above(original, "2.28")
    assert len(patched) == len(original)
    after = _definitions(patched)
    # exp's default is 2.29 since glibc 2.29; as glibc 2.28 it is the old one again
    assert after["exp", "GLIBC_2.2.5"] and not after["exp", "GLIBC_2.29"]
    assert "exp@GLIBC_2.29" in hidden
    assert all(
        not visible for (_, v), visible in after.items() if v in {"GLIBC_2.29", "GLIBC_2.35"}
    )
    # what was hidden and is not newer stays hidden; what was visible and old stays visible
    for key, visible in before.items():
        version = key[1].removeprefix("GLIBC_")
        if (
            version_tuple(version) <= (2, 28)
            and key[0] != "exp"
            and key[0] not in {h.split("@")[0] for h in hidden}
        ):
            assert after[key] == visible, key
    same, nothing = hide_versions_above(original, "2.36")
    assert (same, nothing) == (original, [])


def _members(tar: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        return {
            m.name: extracted.read()
            for m in archive.getmembers()
            if (extracted := archive.extractfile(m)) is not None
        }


def test_the_glibc_view_step_writes_libraries_and_linker_scripts(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    libm = HOST_LIBM.read_bytes()
    engine = FakeEngine(
        responder=lambda argv: (
            (0, [argv[-1].replace("/libm.so.6", "/libm-2.31.so")])
            if tuple(argv[:2]) == ("readlink", "-f")
            else (0, [])
        ),
        missing=lambda _path: libm,
    )
    rig = make_rig(make_options(project, glibc_floor="2.28"), stack, tmp_path, engine=engine)
    sysroot = rig.pipeline.plan.sysroot
    assert sysroot is not None
    assert sysroot.view_dir == "/build/glibc-2.28"
    assert (
        rig.pipeline.plan.rustflags[
            rig.pipeline.plan.rustflags.index("-Clink-arg=-L/build/glibc-2.28") + 1
        ]
        == "-Clink-arg=--sysroot=/opt/orchestrator/unpack"
    )  # searched before the sysroot
    sysroot_step.glibc_view(rig.pipeline, rig.log)
    put = {p for p, _ in rig.box.puts}
    assert put == {"/build/glibc-2.28"}
    written = {name: data for _, tar in rig.box.puts for name, data in _members(tar).items()}
    assert set(written) == {
        *GLIBC_LIBRARIES,
        "libc.so",
        "libm.so",
        "libpthread.so",
        "libdl.so",
        "librt.so",
        "libutil.so",
    }
    assert written["libc.so"] == (
        b"GROUP ( /build/glibc-2.28/libc.so.6 "
        b"/opt/orchestrator/unpack/usr/lib/x86_64-linux-gnu/libc_nonshared.a "
        b"AS_NEEDED ( /opt/orchestrator/unpack/lib64/ld-linux-x86-64.so.2 ) )\n"
    )
    assert written["libm.so"] == b"INPUT ( /build/glibc-2.28/libm.so.6 )\n"
    assert not _definitions(written["libm.so.6"])["exp", "GLIBC_2.29"]
    assert "exp@GLIBC_2.29" in rig.text


def test_distros_only_asks_the_loader_where_validation_needs_more_than_a_bare_system(
    project: Path,
) -> None:
    load = plan_for(make_options(project, distro_check="load", validate_command=("x",)))
    assert load.distro_validation == "release.distro_check = load"
    assert plan_for(make_options(project, validate_command=())).distro_validation
    runtime = make_options(project, validate_command=("compile",))
    runtime = replace(
        runtime,
        flavor_settings={"cuda": replace(runtime.settings_for("cuda"), kernels="runtime")},
    )
    cuda = plan_for(runtime, "cuda")
    assert "need libnvrtc" in cuda.distro_validation
    assert plan_for(make_options(project, validate_command=("x",))).distro_validation == ""


def test_distros_with_load_only_records_why_it_did_not_validate(
    project: Path, stack: ExitStack, tmp_path: Path
) -> None:
    rig = _distro_rig(project, stack, tmp_path, answers(), b"anything\n")
    rig.pipeline.plan = replace(rig.pipeline.plan, distro_validation="release.distro_check = load")
    portability.distros(rig.pipeline, rig.log)
    runs = rig.pipeline.state.distro_runs
    assert [(r.loads, r.validated, r.not_validated) for r in runs] == [
        (True, False, "release.distro_check = load")
    ] * 2
    assert not [a for box in rig.engine.containers for a in box.argvs if "greet" in a]

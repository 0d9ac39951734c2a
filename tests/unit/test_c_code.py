"""[c_code] mode: build scripts' C compiled by clang with the Rust code (plan/c_code.py)."""

from __future__ import annotations

import struct
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.config.resolve.options import Options, resolve
from orchestrator.config.resolve.toolchains import load_toolchain
from orchestrator.errors import ConfigError, ToolchainMismatchError
from orchestrator.execute.optimize.c_code import c_code_record, compiled_by_clang
from orchestrator.execute.steps.profiles import ProfileRecord
from orchestrator.model.binaries.elf import comment_strings
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.plan.c_code import check_clang_major, profile_c_functions
from orchestrator.plan.step_keys import baseline_key, optimized_key, pgo_key, release_key

from .conftest import plan_for
from .execute_rig import make_options, make_rig

CFLAGS = "CFLAGS_x86_64_unknown_linux_gnu"
CXXFLAGS = "CXXFLAGS_x86_64_unknown_linux_gnu"
LINKING = (
    "-Clinker-plugin-lto",
    "-Clinker=clang-22",
    "-Clink-arg=-fuse-ld=lld",
    "-Clink-arg=--gcc-toolchain=/usr",
)


@pytest.fixture
def options(project: Path) -> Options:
    return resolve(project / "orchestrator.toml", env={"SOURCE_DATE_EPOCH": "1700000000"})


def _mode(options: Options, mode: str) -> Options:
    return replace(options, c_code=mode)


def _env(plan: BuildPlan, variant: str) -> dict[str, str]:
    return dict(plan.variants[variant].build.environment)


def _flags(plan: BuildPlan, variant: str) -> list[str]:
    return plan.variants[variant].rustflags


def test_off_by_default_every_build_compiles_c_with_gcc(options: Options) -> None:
    assert options.c_code == "off"
    plan = plan_for(options)
    assert plan.c_code is None and plan.c_code_skipped == ""
    for name in plan.variants:
        assert _env(plan, name)["CC"] == "gcc"
        assert "-Clinker-plugin-lto" not in _flags(plan, name)
    assert "--all-functions" not in plan.pgo.show_argv  # type: ignore[union-attr]


def test_lto_compiles_c_with_clang_bitcode_in_every_variant_but_the_baseline(
    options: Options,
) -> None:
    plan = plan_for(_mode(options, "lto"))
    assert plan.c_code is not None and plan.c_code.cc == "clang-22"
    baseline = _env(plan, "baseline")
    # Plain cargo, whatever the build container's environment (the shipped variant's) says
    assert (baseline["CC"], baseline["CXX"], baseline["AR"]) == ("gcc", "c++", "ar")
    assert baseline[CFLAGS] == baseline[CXXFLAGS] == ""
    assert not set(LINKING) & set(_flags(plan, "baseline"))
    for name in ("release", "pgo-generate", "optimized"):
        env = _env(plan, name)
        assert (env["CC"], env["CXX"], env["AR"]) == ("clang-22", "clang++-22", "llvm-ar-22")
        # The floor's headers stay first; bitcode, and no profile flags without lto-pgo.
        assert env[CFLAGS].startswith("--sysroot=/opt/orchestrator/unpack ")
        assert env[CFLAGS].endswith(" -flto=thin")
        assert env[CXXFLAGS] == env[CFLAGS]
        assert "-fprofile" not in env[CFLAGS]
        flags = _flags(plan, name)
        assert set(LINKING) <= set(flags)
        # The sysroot's link arguments still reach the linker (the glibc floor holds).
        assert "-Clink-arg=--sysroot=/opt/orchestrator/unpack" in flags
    assert _env(plan, "release")["CC"] == plan.test.environment["CC"] == "clang-22"
    # lld does the whole LTO: rustc's own fat LTO would clash with it under PGO.
    for command in (*(plan.variants[n].build for n in ("release", "optimized")), plan.test):
        assert 'profile.release.lto="off"' in command.argv
        assert 'profile.release.lto="fat"' not in command.argv
    assert 'profile.release.lto="fat"' in plan_for(options).variants["release"].build.argv


def test_lto_pgo_gives_the_c_code_rustcs_profile_flags(options: Options) -> None:
    plan = plan_for(_mode(options, "lto-pgo"))
    assert plan.pgo is not None
    generate = _env(plan, "pgo-generate")[CFLAGS].split()
    assert f"-fprofile-generate={plan.pgo.raw_dir}" in generate
    optimized = _env(plan, "optimized")[CFLAGS].split()
    assert f"-fprofile-use={plan.pgo.merged}" in optimized
    assert not any(f.startswith("-fprofile") for f in _env(plan, "release")[CFLAGS].split())
    # `cargo test` runs with the shipped flags: its C reads the same profile.
    assert f"-fprofile-use={plan.pgo.merged}" in plan.test.environment[CFLAGS].split()
    assert "--all-functions" in plan.pgo.show_argv


def test_without_a_sysroot_the_c_flags_are_clangs_alone(options: Options) -> None:
    plan = plan_for(replace(_mode(options, "lto-pgo"), glibc_floor="2.41"))
    assert plan.sysroot is None
    assert _env(plan, "release")[CFLAGS] == "-flto=thin"
    assert _env(plan, "optimized")[CFLAGS] == f"-flto=thin -fprofile-use={plan.pgo.merged}"  # type: ignore[union-attr]


def test_every_step_key_and_the_profile_key_change_with_the_mode_but_the_baseline(
    options: Options,
) -> None:
    plans = {mode: plan_for(_mode(options, mode)) for mode in ("off", "lto", "lto-pgo")}
    # The baseline names the plain C tools the container's environment would otherwise
    # give it (the shipped variant's): the same key whichever mode is on.
    assert baseline_key(plans["lto"]) == baseline_key(plans["lto-pgo"])
    # The release build reads no profile: lto and lto-pgo build it once.
    assert release_key(plans["off"]) != release_key(plans["lto"])
    assert release_key(plans["lto"]) == release_key(plans["lto-pgo"])
    assert len({pgo_key(p) for p in plans.values()}) == 3
    assert len({optimized_key(p, "c" * 64) for p in plans.values()}) == 3
    assert len({p.pgo.profile_key for p in plans.values()}) == 3  # type: ignore[union-attr]


def test_flavors_without_clang_keep_gcc_and_say_why(options: Options) -> None:
    for flavor in ("cuda", "aarch64"):
        plan = plan_for(_mode(options, "lto"), flavor)
        assert plan.c_code is None
        assert "its C stays gcc's" in plan.c_code_skipped
        assert all(_env(plan, name)["CC"] == "gcc" for name in plan.variants)


def test_the_mode_is_a_setting_with_choices(project: Path) -> None:
    env = {"SOURCE_DATE_EPOCH": "1", "ORCHESTRATOR_C_CODE_MODE": "lto-pgo"}
    assert resolve(project / "orchestrator.toml", env=env).c_code == "lto-pgo"
    (project / "orchestrator.toml").write_text(
        '[package]\ncrate = "crate"\n[c_code]\nmode = "thin"\n'
    )
    with pytest.raises(ConfigError, match="lto-pgo"):
        resolve(project / "orchestrator.toml", env={"SOURCE_DATE_EPOCH": "1"})


def test_only_the_cpu_image_changes_with_clang() -> None:
    """clang is pinned and named for cpu alone: the other flavors' images keep their keys."""
    toolchain = load_toolchain("rustc-web-1.96")
    assert toolchain.packages_for("cpu")["clang-22"] == toolchain.packages["llvm-22"]
    assert "clang-22" not in toolchain.packages_for("cuda")
    assert toolchain.tools_for("cpu")["clang"] == "clang-22"
    assert "clang" not in toolchain.tools_for("cuda")
    assert "flavor_tools" not in toolchain.flavor_view("cuda")
    older = load_toolchain("rustc-1.85")
    assert older.packages_for("cpu")["clang-19"] == older.packages["llvm-19"]
    assert older.tools_for("cpu")["clang"] == "clang-19"


def test_a_flavor_tools_table_names_only_c_tools(tmp_path: Path) -> None:
    text = (Path(__file__).parents[2] / "toolchains" / "rustc-web-1.96.toml").read_text()
    (tmp_path / "bad.toml").write_text(text.replace('llvm_ar = "llvm-ar-22"', 'gdb = "gdb"'))
    with pytest.raises(ConfigError, match="may name only"):
        load_toolchain("bad", tmp_path)


def test_clang_of_another_llvm_major_is_refused(options: Options) -> None:
    plan = plan_for(_mode(options, "lto"))
    assert plan.c_code is not None
    good = "Debian clang version 22.1.8 (1~deb13u5)\nTarget: x86_64-pc-linux-gnu\n"
    assert check_clang_major(plan.c_code, plan.toolchain, good) == 22
    with pytest.raises(ToolchainMismatchError, match="LLVM 19"):
        check_clang_major(plan.c_code, plan.toolchain, "Debian clang version 19.1.7 (3+b1)")
    with pytest.raises(ToolchainMismatchError, match="no version"):
        check_clang_major(plan.c_code, plan.toolchain, "gcc (Debian 14.2.0-19) 14.2.0")


def test_the_profiles_c_functions_are_its_unmangled_names() -> None:
    shown = """Counters:
  fnv1a:
    Hash: 0x0000000000000001
    Counters: 2
  checksum.c;mix:
    Hash: 0x0000000000000002
  _ZN14mixed_language8checksum17h0123456789abcdefE:
    Hash: 0x0000000000000003
  _RNvCs1234_14mixed_language4main:
    Hash: 0x0000000000000004
  main:
    Hash: 0x0000000000000005
Instrumentation level: IR  entry_first = 0
Functions shown: 5
Total functions: 5
"""
    assert profile_c_functions(shown) == ["checksum.c;mix", "fnv1a"]
    assert profile_c_functions("Total functions: 0\n") == []


def test_a_comment_naming_clang_shows_clangs_code(tmp_path: Path) -> None:
    rust_and_gcc = ["GCC: (Debian 14.2.0-19) 14.2.0", "rustc version 1.96.0"]
    assert not compiled_by_clang(rust_and_gcc)
    assert compiled_by_clang([*rust_and_gcc, "Debian clang version 22.1.8 (1~deb13u5)"])
    binary = tmp_path / "tool"
    binary.write_bytes(_elf_with_comment(b"rustc version 1.96.0\0Debian clang version 22.1.8\0"))
    assert comment_strings(binary) == ["rustc version 1.96.0", "Debian clang version 22.1.8"]


def test_build_json_records_the_mode_the_tools_and_what_shows_them(
    project: Path, tmp_path: Path, stack: ExitStack
) -> None:
    binary = tmp_path / "tool"
    binary.write_bytes(_elf_with_comment(b"rustc version 1.96.0\0Debian clang version 22.1\0"))
    off = make_rig(make_options(project), stack, tmp_path)
    assert c_code_record(off.pipeline, binary) is None
    options = make_options(project, c_code="lto-pgo")
    rig = make_rig(options, stack, tmp_path)
    rig.pipeline.state.pgo = ProfileRecord(binary, "0" * 64, 1, False, {"c_functions": ["fnv1a"]})
    record = c_code_record(rig.pipeline, binary)
    assert record is not None
    assert (record.mode, record.applied, record.cc) == ("lto-pgo", True, "clang-22")
    assert record.compiled_with_clang is True and record.profile_c_functions == ["fnv1a"]
    assert "-Clinker-plugin-lto" in record.rustflags and record.cflags == ["-flto=thin"]
    (tmp_path / "gcc-only").write_bytes(_elf_with_comment(b"GCC: (Debian 14.2.0-19) 14.2.0\0"))
    record = c_code_record(rig.pipeline, tmp_path / "gcc-only")
    assert record is not None and record.compiled_with_clang is False
    cuda = make_rig(options, stack, tmp_path, flavor="cuda")
    record = c_code_record(cuda.pipeline, binary)
    assert record is not None and not record.applied and record.cc is None
    assert "its C stays gcc's" in (record.skipped or "")


def _elf_with_comment(comment: bytes) -> bytes:
    """A minimal ELF64 file with a .comment and a section-name table, nothing else."""
    names = b"\0.comment\0.shstrtab\0"
    header_size, section_size = 64, 64
    comment_at = header_size
    names_at = comment_at + len(comment)
    sections_at = names_at + len(names)
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    header = ident + struct.pack(
        "<HHIQQQIHHHHHH", 2, 62, 1, 0, 0, sections_at, 0, header_size, 0, 0, section_size, 3, 2
    )

    def section(name: int, kind: int, offset: int, size: int) -> bytes:
        return struct.pack(
            "<IIQQQQIIQQ", name, kind, 0x30 if kind == 1 else 0, 0, offset, size, 0, 0, 1, 0
        )

    table = (
        bytes(section_size)
        + section(1, 1, comment_at, len(comment))
        + section(10, 3, names_at, len(names))
    )
    return header + comment + names + table

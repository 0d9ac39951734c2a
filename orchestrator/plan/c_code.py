"""C and C++ of build scripts (the cc crate) compiled with the Rust code ([c_code] mode).

With `lto`, every build but the plain cargo baseline compiles that C with the image's
clang of rustc's own LLVM major into LLVM bitcode (`-flto=thin`), and links it with the
Rust code through lld (`-Clinker-plugin-lto`, clang as the linker driver): the link
optimizes both languages together and can inline across them. With `lto-pgo`, the C code
is also instrumented where rustc instruments (`-fprofile-generate`, the same raw folder:
rustc's profiler runtime writes both into one .profraw per process) and optimized with
the same merged profile (`-fprofile-use`). The cc crate does not pass rustc's profile
flags on itself (its LLVM may not be rustc's), so they go into the target's CFLAGS.

Only x86_64 flavors whose toolchain names clang for them ([flavors.<name>.tools]) get
it; the others keep gcc and say why (`skipped`). The baseline stays plain cargo: it names
gcc, c++ and ar, because the build container starts with the shipped variant's
environment.

The mode costs the Rust code rustc's own fat LTO (see `CCodePlan.profile`), so where the
speed gate runs it also gets a build with the mode off (`C_OFF`: rustc's fat LTO, the C
compiled by gcc; with PGO, trained beside the mode's build into one merged profile) and
ships that one when it counts at least gate.min_gain fewer estimated cycles than the best
build with the mode on. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from orchestrator.config.resolve.toolchains import ToolchainSpec
from orchestrator.errors import ToolchainMismatchError
from orchestrator.flavors import Flavor
from orchestrator.plan.gate import GatePlan

# What the baseline (plain cargo) and every build with [c_code] mode off compile C with.
DEFAULT_CC = "gcc"
# The variant built with the mode off beside the others, for the speed gate to judge
C_OFF = "c-off"
# Its instrumented build: trained beside pgo-generate into the same merged profile, since
# a function rustc keeps internal without its fat LTO is named after its module there
C_OFF_GENERATE = "c-off-generate"
# How rustc's symbols start (legacy and v0 mangling), and its unmangled shims
# (__rust_alloc, __rdl_alloc, __rg_oom, rust_eh_personality).
_RUST_PREFIXES = ("_ZN", "_R", "__r", "rust_")
_CLANG_VERSION = re.compile(r"clang version (\d+)\.\d+")
# `llvm-profdata show --all-functions` prints each function's name as "  <name>:".
_SHOWN_FUNCTION = re.compile(r"^  (\S[^\n]*):$", re.M)
_PROFILE_FLAGS = {"-Cprofile-generate=": "-fprofile-generate=", "-Cprofile-use=": "-fprofile-use="}


@dataclass(frozen=True)
class CCodePlan:
    mode: str  # "lto" | "lto-pgo"
    cc: str  # clang-22
    cxx: str  # clang++-22
    ar: str  # llvm-ar-22: indexes the bitcode members of the cc crate's archives
    rustflags: tuple[str, ...]  # added to every variant's but the baseline's
    cflags: tuple[str, ...]  # for C and C++, besides the sysroot's and the profile's
    cflags_variable: str  # CFLAGS_<target>: the one every cc version reads first
    cxxflags_variable: str
    # Over the release profile: lld does all of the LTO, of every crate's bitcode and the
    # C's. rustc's own fat LTO under -Cprofile-use leaves a "CG Profile" module flag that
    # lld's LTO adds a second time, and LLVM 22 rejects the module (rust-lang/rust#162795).
    profile: Mapping[str, str | int | bool] = field(default_factory=lambda: {"lto": "off"})

    def profile_cflags(self, rustflags: Sequence[str]) -> tuple[str, ...]:
        """lto-pgo: the C side of rustc's -Cprofile-generate/-use among `rustflags`, with
        the same folder or .profdata; () with lto, or where rustc reads no profile."""
        if self.mode != "lto-pgo":
            return ()
        return tuple(
            clang + flag.removeprefix(rust)
            for flag in rustflags
            for rust, clang in _PROFILE_FLAGS.items()
            if flag.startswith(rust)
        )

    def environment(self, rustflags: Sequence[str], sysroot_cflags: str) -> dict[str, str]:
        """What a cargo command whose rustflags are `rustflags` is given for its C."""
        flags = " ".join(
            part for part in (sysroot_cflags, *self.cflags, *self.profile_cflags(rustflags)) if part
        )
        return {
            "CC": self.cc,
            "CXX": self.cxx,
            "AR": self.ar,
            self.cflags_variable: flags,
            self.cxxflags_variable: flags,
        }

    def plain_environment(self) -> dict[str, str]:
        """The baseline's: every name `environment` sets, as plain cargo has it (the build
        container starts with the shipped variant's environment, so each is overridden)."""
        return {
            "CC": DEFAULT_CC,
            "CXX": "c++",
            "AR": "ar",
            self.cflags_variable: "",
            self.cxxflags_variable: "",
        }

    def off_environment(self, sysroot_cflags: str) -> dict[str, str]:
        """The build with the mode off (C_OFF): gcc as without the mode, the floor's headers
        for C, and every other name `environment` sets overridden (the container has the
        shipped variant's, which gcc would not understand)."""
        return self.plain_environment() | {self.cflags_variable: sysroot_cflags}

    def as_dict(self) -> dict[str, object]:
        return {
            "mode": self.mode,
            "cc": self.cc,
            "cxx": self.cxx,
            "ar": self.ar,
            "rustflags": list(self.rustflags),
            "cflags": list(self.cflags),
            "profile": dict(self.profile),
        }


def c_code_plan(
    mode: str, flavor: Flavor, toolchain: ToolchainSpec
) -> tuple[CCodePlan | None, str]:
    """(the plan, "") where [c_code] `mode` is on and the flavor can have it; else (None,
    why not: "" when the mode is off)."""
    if mode == "off":
        return None, ""
    if flavor.arch != "x86_64" or flavor.foreign_architectures:
        return None, f"c_code.mode = {mode}: {flavor.name} cross-compiles; its C stays gcc's"
    tools = toolchain.tools_for(flavor.name)
    missing = [name for name in ("clang", "clangxx", "llvm_ar") if name not in tools]
    if missing:
        return None, (
            f"c_code.mode = {mode}: toolchain {toolchain.name} names no {', '.join(missing)} "
            f"for {flavor.name} ([flavors.{flavor.name}.tools]); its C stays gcc's"
        )
    target = flavor.rust_target.replace("-", "_").replace(".", "_")
    return (
        CCodePlan(
            mode=mode,
            cc=tools["clang"],
            cxx=tools["clangxx"],
            ar=tools["llvm_ar"],
            rustflags=(
                "-Clinker-plugin-lto",
                # clang drives the link (as gcc does without it) and hands it to its own
                # LLVM's lld, which reads the bitcode of both languages.
                f"-Clinker={tools['clang']}",
                "-Clink-arg=-fuse-ld=lld",
                # Under the glibc floor's --sysroot, clang would look for gcc's start files
                # and libgcc in the sysroot, which has none: the image's gcc has them.
                "-Clink-arg=--gcc-toolchain=/usr",
            ),
            cflags=("-flto=thin",),
            cflags_variable=f"CFLAGS_{target}",
            cxxflags_variable=f"CXXFLAGS_{target}",
        ),
        "",
    )


def off_candidate(pgo: bool) -> str:
    """The speed gate's name for the C_OFF build: what it is besides the mode being off."""
    return f"{'pgo' if pgo else 'release'}-{C_OFF}"


def judges_c_off(c_code: CCodePlan | None, gate: GatePlan | None) -> bool:
    """Whether the plan builds C_OFF: the mode applies and the speed gate can judge it (a
    reproduction only where its lock says the release shipped it)."""
    if c_code is None or gate is None:
        return False
    return not gate.pinned or gate.pinned.endswith(f"-{C_OFF}")


def profile_c_functions(show_output: str) -> list[str]:
    """The functions of `llvm-profdata show --all-functions` that rustc did not emit: their
    names are unmangled (a C file's static functions come as "<file>;<name>")."""
    names = set()
    for name in _SHOWN_FUNCTION.findall(show_output):
        base = name.rsplit(";", 1)[-1]
        if base != "main" and not base.startswith(_RUST_PREFIXES):
            names.add(name)
    return sorted(names)


def check_clang_major(plan: CCodePlan, toolchain: ToolchainSpec, version_output: str) -> int:
    """The LLVM major of `clang --version`; ToolchainMismatchError unless it is rustc's
    (bitcode and profiles are read by one LLVM major only)."""
    match = _CLANG_VERSION.search(version_output)
    major = int(match.group(1)) if match else None
    if major != toolchain.llvm_major:
        found = f"LLVM {major}" if major else f"no version ({version_output.strip()[:80]!r})"
        raise ToolchainMismatchError(
            f"toolchain {toolchain.name!r} expects LLVM {toolchain.llvm_major}, but "
            f"{plan.cc} (c_code.mode = {plan.mode}) reports {found}",
            hint=f"Name the clang of LLVM {toolchain.llvm_major} under [flavors.<name>.tools] "
            f"in toolchains/{toolchain.name}.toml, or set c_code.mode = off.",
        )
    return major

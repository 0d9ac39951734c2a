from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config.toolchains import (
    available_toolchains,
    check_coherence,
    llvm_version,
    load_base_spec,
    load_toolchain,
    parse_rustc_vv,
)
from orchestrator.errors import ConfigError, ToolchainMismatchError
from orchestrator.host.bootstrap import rootfs_recipe

RUSTC_VV = """rustc 1.96.0 (ac68faa20 2026-05-25) (built from a source tarball)
binary: rustc
commit-hash: ac68faa20c58cbccd01ee7208bf3b6e93a7d7f96
commit-date: 2026-05-25
host: x86_64-unknown-linux-gnu
release: 1.96.0
LLVM version: 22.1.8
"""
PROFDATA_22 = "Debian LLVM version 22.1.8\n  Optimized build.\n"
BOLT_22 = "Debian LLVM version 22.1.8\n  Optimized build.\nBOLT revision <unknown>\n"
BOLT_19 = "Debian LLVM version 19.1.7\n  Optimized build.\nBOLT revision <unknown>\n"


def test_shipped_toolchains_load() -> None:
    assert {"rustc-web-1.96", "rustc-1.85"} <= set(available_toolchains())
    web = load_toolchain("rustc-web-1.96")
    assert web.llvm_major == 22
    assert web.packages["rustc-web"].startswith("1.96.0")
    assert web.tool("llvm_profdata") == "llvm-profdata-22"
    old = load_toolchain("rustc-1.85")
    assert old.llvm_major == 19
    assert old.packages["bolt-19"] == "1:19.1.7-3+b1"


def test_unknown_toolchain_lists_known_ones() -> None:
    with pytest.raises(ConfigError) as caught:
        load_toolchain("rustc-9000")
    assert "rustc-web-1.96" in caught.value.hint


def test_toolchain_file_validation(tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_text(
        'llvm_major = 22\n[tools]\nrustc = "rustc"\n[packages]\nrustc = "latest please"\n'
    )
    with pytest.raises(ConfigError, match=r"\[tools\] must name exactly"):
        load_toolchain("bad", tmp_path)


def test_parse_rustc_vv() -> None:
    parsed = parse_rustc_vv(RUSTC_VV)
    assert parsed["release"] == "1.96.0"
    assert parsed["LLVM version"] == "22.1.8"
    assert parsed["version"].startswith("rustc 1.96.0")
    assert llvm_version(RUSTC_VV) == (22, 1, 8)
    assert llvm_version(BOLT_19) == (19, 1, 7)
    assert llvm_version("no version here") is None


def test_coherent_toolchain_passes() -> None:
    report = check_coherence(
        load_toolchain("rustc-web-1.96"), RUSTC_VV, "cargo 1.96.0", PROFDATA_22, BOLT_22
    )
    assert report.llvm_major == 22
    assert report.rustc["release"] == "1.96.0"


def test_mismatch_names_all_three_versions() -> None:
    with pytest.raises(ToolchainMismatchError) as caught:
        check_coherence(
            load_toolchain("rustc-web-1.96"), RUSTC_VV, "cargo 1.96.0", PROFDATA_22, BOLT_19
        )
    message = caught.value.message
    assert "rustc: LLVM 22.1.8" in message
    assert "llvm-profdata-22: LLVM 22.1.8" in message
    assert "llvm-bolt-22: LLVM 19.1.7" in message
    assert caught.value.exit_code == 30


def test_unparseable_version_is_a_mismatch() -> None:
    with pytest.raises(ToolchainMismatchError, match="llvm-bolt-22: LLVM unknown"):
        check_coherence(
            load_toolchain("rustc-web-1.96"), RUSTC_VV, "cargo", PROFDATA_22, "command not found"
        )


def test_rootfs_recipe_names_everything_that_shapes_the_rootfs() -> None:
    base = load_base_spec()
    recipe = rootfs_recipe(base)
    assert recipe[-3:] == [base.suite, "<rootfs.tar>", base.mirror]
    assert f"--variant={base.variant}" in recipe
    assert f"--components={','.join(base.components)}" in recipe
    # the base rootfs is never multi-arch: foreign architectures belong to a flavor's set
    assert not any(arg.startswith("--architectures") for arg in recipe)

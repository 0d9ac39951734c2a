from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config.resolve.options import resolve
from orchestrator.config.resolve.toolchains import (
    available_toolchains,
    check_coherence,
    check_toolchain_name,
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


# -- a toolchain's name is checked at the door ----------------------------------------
EVIL_NAMES = ["../../../tmp/x/evil", "/tmp/x/evil", "sub/dir", "Rustc-1.85", ".hidden", "-x", ""]


@pytest.mark.parametrize("name", EVIL_NAMES)
def test_a_name_that_is_not_a_plain_name_is_refused_even_if_its_file_exists(
    tmp_path: Path, name: str
) -> None:
    """`toolchain = "../../../tmp/x/evil"` once loaded /tmp/x/evil.toml and tagged an image
    `orchestrator/cpu:../../../...`."""
    shipped = tmp_path / "toolchains"
    shipped.mkdir()
    good = (Path(__file__).parents[2] / "toolchains" / "rustc-web-1.96.toml").read_text()
    (shipped / "rustc-web-1.96.toml").write_text(good)
    (tmp_path / "evil.toml").write_text(good)  # what ../evil would name
    for candidate in (name, "../evil"):
        with pytest.raises(ConfigError, match="is not a toolchain name") as caught:
            load_toolchain(candidate, shipped)
        assert (
            caught.value.hint == f"Known toolchains: rustc-web-1.96; each is a file in {shipped}."
        )


def test_a_plain_name_without_its_file_is_unknown_with_a_suggestion(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"did you mean 'rustc-web-1\.96'") as caught:
        check_toolchain_name("rustc-web-1.69", "build.toolchain")
    assert "rustc-1.85, rustc-web-1.96" in caught.value.hint
    (tmp_path / "Bad Name.toml").write_text("")
    (tmp_path / "ok-1.0.toml").write_text("")
    assert available_toolchains(tmp_path) == ["ok-1.0"]  # never offers a name it refuses


@pytest.mark.parametrize("where", ["file", "env", "alias", "flag"])
def test_resolve_refuses_a_path_as_toolchain_from_any_layer(project: Path, where: str) -> None:
    config = project / "orchestrator.toml"
    evil = "../../../tmp/x/evil"
    env: dict[str, str] = {}
    cli: dict[str, object] = {}
    if where == "file":
        config.write_text(config.read_text() + f'[build]\ntoolchain = "{evil}"\n')
    elif where == "env":
        env["ORCHESTRATOR_BUILD_TOOLCHAIN"] = evil
    elif where == "alias":
        env["ORCHESTRATOR_TOOLCHAIN"] = evil
    else:
        cli["build.toolchain"] = evil
    with pytest.raises(ConfigError, match="is not a toolchain name") as caught:
        resolve(config, env=env, cli=cli)
    assert "build.toolchain" in caught.value.message
    assert {"file": "file orchestrator.toml", "env": "env ORCHESTRATOR_BUILD_TOOLCHAIN"}.get(
        where, "ORCHESTRATOR_TOOLCHAIN" if where == "alias" else "flag --toolchain"
    ) in caught.value.message
    assert "rustc-web-1.96" in caught.value.hint

"""[build] profile: checked against the crate's own profiles, built with by every variant
but the plain baseline (with orchestrator's overrides on that profile, out of its folder),
proposed by init when the crate has a distribution profile, and what the shipped binary
carries reported in build.json."""

from __future__ import annotations

import struct
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.config.init.scaffold import detect, render
from orchestrator.config.resolve.cargo_profiles import (
    check_profile,
    comes_from,
    crate_profiles,
    distribution_profile,
    profile_dir,
)
from orchestrator.config.resolve.options import resolve
from orchestrator.errors import ConfigError
from orchestrator.model.documents.shipped_profile import debug_warning, shipped_profile

from .conftest import plan_for, write_config

PROFILES = """
[profile.release]
debug = 1

[profile.dist]
inherits = "release"
debug = false
strip = true

[profile.fast-dev]
inherits = "dev"

[profile.loop-a]
inherits = "loop-b"

[profile.loop-b]
inherits = "loop-a"
"""


def _crate(project: Path) -> Path:
    crate = project / "crate"
    with (crate / "Cargo.toml").open("a") as manifest:
        manifest.write(PROFILES)
    return crate


def test_profile_folders_follow_cargo() -> None:
    assert [profile_dir(n) for n in ("release", "dev", "test", "bench", "dist")] == [
        "release",
        "debug",
        "debug",
        "release",
        "dist",
    ]


def test_a_profile_must_be_the_crates_and_come_from_release(project: Path) -> None:
    crate = _crate(project)
    profiles = crate_profiles(crate)
    assert comes_from("dist", profiles) == "release"
    assert comes_from("fast-dev", profiles) == "dev"
    assert comes_from("loop-a", profiles) == ""  # a cycle reaches no built-in profile
    check_profile("release", crate, "here")
    check_profile("dist", crate, "here")
    for name, message in (
        ("missing", "has no [profile.missing]"),
        ("fast-dev", "does not build optimised code"),
        ("dev", "does not build optimised code"),
        ("loop-a", "does not build optimised code"),
        ("../x", "is not a Cargo profile name"),
    ):
        with pytest.raises(ConfigError, match=message.replace("[", r"\[")) as raised:
            check_profile(name, crate, "orchestrator.toml: build.profile")
        assert raised.value.exit_code == ConfigError.exit_code
        hint = raised.value.hint or ""
        assert "release" in hint


def test_the_setting_resolves_and_is_checked_where_it_is_set(project: Path) -> None:
    _crate(project)
    assert resolve(project / "orchestrator.toml").profile == "release"
    text = (project / "orchestrator.toml").read_text()
    write_config(project, text + '\n[build]\nprofile = "dist"\n')
    assert resolve(project / "orchestrator.toml").profile == "dist"
    named = r"build.profile \(env ORCHESTRATOR_BUILD_PROFILE\): .* has no \[profile.nope\]"
    with pytest.raises(ConfigError, match=named):
        resolve(project / "orchestrator.toml", env={"ORCHESTRATOR_BUILD_PROFILE": "nope"})


def test_every_variant_but_the_baseline_builds_with_the_profile(project: Path) -> None:
    _crate(project)
    options = replace(resolve(project / "orchestrator.toml"), profile="dist")
    plan = plan_for(options, "cpu")
    baseline = plan.variants["baseline"]
    assert "--release" in baseline.build.argv and "--profile" not in baseline.build.argv
    assert baseline.binary.endswith("/x86_64-unknown-linux-gnu/release/demo")
    for name, variant in plan.variants.items():
        if name == "baseline":
            continue
        argv = variant.build.argv
        assert argv[argv.index("--profile") + 1] == "dist" and "--release" not in argv
        assert 'profile.dist.lto="fat"' in argv and 'profile.release.lto="fat"' not in argv
        assert variant.binary.endswith("/x86_64-unknown-linux-gnu/dist/demo"), name
    for command in (plan.test, plan.test_build):
        assert command.argv[command.argv.index("--profile") + 1] == "dist"
    default = plan_for(replace(options, profile="release"), "cpu")
    assert "--profile" not in default.variants["release"].build.argv
    assert default.variants["release"].binary.endswith("/release/demo")


def test_init_proposes_the_crates_distribution_profile(project: Path) -> None:
    crate = _crate(project)
    found = detect(crate)
    assert found.profile == "dist"
    text = render(found)
    assert 'profile = "dist"' in text
    assert "[profile.dist] inherits release" in text
    assert distribution_profile({"release-lto": {"inherits": "release"}}) == "release-lto"
    assert distribution_profile({"dist": {"inherits": "dev"}}) is None
    plain = render(replace(found, profile=None))
    assert '# profile = "release"' in plain and '\nprofile = "' not in plain


def _elf(sections: dict[str, bytes]) -> bytes:
    """A minimal ELF64 file holding `sections` (name -> bytes) and a section-name table."""
    names = b"\0" + b"".join(n.encode() + b"\0" for n in sections) + b".shstrtab\0"
    data = b"".join(sections.values())
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    table_at = 64 + len(data) + len(names)
    count = len(sections) + 2
    header = ident + struct.pack(
        "<HHIQQQIHHHHHH", 2, 62, 1, 0, 0, table_at, 0, 64, 0, 0, 64, count, count - 1
    )

    def section(name: int, kind: int, offset: int, size: int) -> bytes:
        return struct.pack("<IIQQQQIIQQ", name, kind, 0, 0, offset, size, 0, 0, 1, 0)

    table, offset, name_at = bytes(64), 64, 1
    for name, body in sections.items():
        table += section(name_at, 1, offset, len(body))
        offset += len(body)
        name_at += len(name) + 1
    table += section(name_at, 3, 64 + len(data), len(names))
    return header + data + names + table


def test_build_json_says_what_the_shipped_binary_carries(tmp_path: Path) -> None:
    debug = tmp_path / "debug"
    debug.write_bytes(_elf({".text": b"\x90" * 16, ".debug_info": b"d" * 300, ".symtab": b"s"}))
    shipped = shipped_profile("release", debug)
    assert shipped is not None
    assert shipped.debug_sections == [".debug_info"] and shipped.debug_bytes == 300
    assert shipped.symbols
    warning = debug_warning(shipped, 2_000_000)
    assert warning is not None and "[build] profile" in warning and "'release'" in warning
    stripped = tmp_path / "stripped"
    stripped.write_bytes(_elf({".text": b"\x90" * 16}))
    clean = shipped_profile("dist", stripped)
    assert clean is not None and clean.debug_sections == [] and not clean.symbols
    assert debug_warning(clean, 1000) is None
    script = tmp_path / "script"
    script.write_text("#!/bin/sh\n")
    assert shipped_profile("dist", script) is None

"""[c_code] mode lto-pgo on the mixed-language fixture (its hot loop is C, built by the cc
crate): the C is compiled by the image's clang of rustc's LLVM into the LTO'd binary,
trained with the Rust code, and the build validates and is gated as any other, against a
build of the same binary with the mode off."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import docker
import pytest

from tests.integration.conftest import REPO, managed_containers, orchestrator

pytestmark = pytest.mark.integration

CFLAGS = "CFLAGS_x86_64_unknown_linux_gnu"


def test_mixed_language_c_is_compiled_by_clang_trained_and_gated(
    tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    crate = tmp_path / "mixed-language"
    shutil.copytree(REPO / "tests" / "fixtures" / "mixed-language", crate)
    artifacts = tmp_path / "artifacts"
    run = orchestrator(
        [
            "build",
            "--config",
            str(crate / "orchestrator.toml"),
            "--artifacts-dir",
            str(artifacts),
            "--c-code",
            "lto-pgo",
        ]
    )
    assert run.returncode == 0, run.output
    directory = artifacts / "mixed-language-0.1.0" / "mixed-language-0.1.0-linux-x86_64-cpu"
    manifest = json.loads((directory / "build.json").read_text())
    c_code = manifest["c_code"]
    assert (c_code["mode"], c_code["applied"], c_code["cc"]) == ("lto-pgo", True, "clang-22")
    # clang's bitcode went through the link: its compiler names itself in .comment.
    assert c_code["compiled_with_clang"] is True, c_code["comment"]
    assert any("clang version 22." in line for line in c_code["comment"])
    # The C hot loop was trained with the Rust code: one merged profile holds both.
    assert "fnv1a" in c_code["profile_c_functions"]
    assert manifest["pgo"]["profile"]["functions"] > len(c_code["profile_c_functions"])
    optimized = manifest["flags"]["environment"]
    assert optimized["CC"] == "clang-22"
    assert "-fprofile-use=/build/out/pgo/merged.profdata" in optimized[CFLAGS].split()
    assert "-Clinker-plugin-lto" in manifest["flags"]["variants"]["release"]["rustflags"]
    assert "-Clinker-plugin-lto" not in manifest["flags"]["variants"]["baseline"]["rustflags"]
    assert manifest["validation"]["identical"] is True
    # The glibc floor still holds with clang and lld linking.
    assert manifest["portability"]["above_floor"] == []
    # Gated like every variant: what ships is a counted, validated candidate.
    gate = manifest["gate"]
    assert {"baseline", "release", "pgo"} <= set(gate["variants"])
    assert manifest["variants"][gate["shipped"]]["sha256"] == manifest["artifact"]["sha256"]
    # The mode judged against itself off: rustc's fat LTO and gcc's C, the same profile,
    # counted beside the others; here the hot loop is the C, which gcc makes slower.
    assert c_code["off_candidate"] == "pgo-c-off"
    assert {"pgo-c-off", "pgo-bolt"} <= set(gate["variants"])
    off_flags = manifest["flags"]["variants"]["c-off"]["rustflags"]
    assert "-Clinker-plugin-lto" not in off_flags
    assert "-Cprofile-use=/build/out/pgo/merged.profdata" in off_flags
    # Each variant's ratio to the baseline (geometric mean over the workloads, as decided)
    ratio = {name: 1 - v["gain_vs_baseline"] for name, v in gate["variants"].items()}
    off_saves = 1 - ratio["pgo-c-off"] / ratio[gate["shipped"]]
    assert off_saves < gate["min_gain"], gate["reasons"]
    assert gate["reasons"][-1].startswith("pgo-c-off: "), gate["reasons"]
    assert (
        c_code["shipped"] is True and "lto-cross-language" in manifest["artifact"]["optimizations"]
    )
    assert c_code["off_functions_without_profile"] >= 0
    assert managed_containers(docker_client) == []

"""Release targets, CPU-level naming and the portability report's parsing."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.config.options import FlavorSettings, Options, resolve
from orchestrator.errors import ConfigError
from orchestrator.flavors.cpu import CpuFlavor
from orchestrator.model.portability import parse
from orchestrator.release.run import targets

VERSION_INFO = """Version needs section '.gnu.version_r' contains 2 entries:
 Addr: 0x0000000000000d58  Offset: 0x000d58  Link: 7 (.dynstr)
  000000: Version: 1  File: libgcc_s.so.1  Cnt: 1
  0x0010:   Name: GCC_3.0  Flags: none  Version: 7
  0x0020: Version: 1  File: libc.so.6  Cnt: 9
  0x0030:   Name: GLIBC_2.9  Flags: none  Version: 11
  0x0040:   Name: GLIBC_2.34  Flags: none  Version: 10
  0x0050:   Name: GLIBC_2.3.4  Flags: none  Version: 9
  0x0060:   Name: GLIBC_2.2.5  Flags: none  Version: 2
"""
DYNAMIC = """Dynamic section at offset 0x85d20 contains 30 entries:
  Tag        Type                         Name/Value
 0x0000000000000001 (NEEDED)             Shared library: [libgcc_s.so.1]
 0x0000000000000001 (NEEDED)             Shared library: [libc.so.6]
 0x000000000000000c (INIT)               0x5000
"""
CFG = 'debug_assertions\ntarget_arch="x86_64"\ntarget_feature="sse4.2"\ntarget_feature="popcnt"\n'


def test_portability_report_parsed() -> None:
    report = parse(
        target="x86_64-unknown-linux-gnu",
        target_cpu="x86-64-v2",
        version_info=VERSION_INFO,
        dynamic=DYNAMIC,
        rustc_cfg=CFG,
    )
    assert report.glibc_max == "2.34"  # numeric, not text order: 2.34 > 2.9 > 2.3.4
    assert report.needed == ("libgcc_s.so.1", "libc.so.6")
    assert report.cpu_features == ("popcnt", "sse4.2")
    assert report.glibc_above("2.31")
    assert not report.glibc_above("2.34")


@pytest.fixture
def options(project: Path) -> Options:
    return resolve(project / "orchestrator.toml", env={})


def test_levels_become_targets_with_suffixes(options: Options) -> None:
    flavor = CpuFlavor()
    assert [t.level for t in targets(options, ["cpu"])] == ["x86-64-v2"]
    levelled = replace(
        options,
        flavor_settings={"cpu": FlavorSettings(levels=("x86-64-v2", "x86-64-v3", "znver4"))},
    )
    found = targets(levelled, ["cpu"])
    assert [t.options.target_cpu for t in found] == ["x86-64-v2", "x86-64-v3", "znver4"]
    assert [flavor.artifact_suffix(t.options) for t in found] == ["", "-v3", "-znver4"]


def test_native_is_refused_for_releases(options: Options) -> None:
    native = replace(options, flavor_settings={"cpu": FlavorSettings(levels=("native",))})
    with pytest.raises(ConfigError, match="'native' is refused for releases"):
        targets(native, ["cpu"])


def test_unknown_flavor_in_release(options: Options) -> None:
    with pytest.raises(ConfigError, match="unknown flavor 'amiga'"):
        targets(options, ["cpu", "amiga"])

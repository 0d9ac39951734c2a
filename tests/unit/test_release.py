"""Release targets, CPU-level naming and the portability report's parsing."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.config.resolve.options import FlavorSettings, Options, resolve
from orchestrator.errors import ConfigError
from orchestrator.flavors import FlavorView
from orchestrator.flavors.cpu import CpuFlavor
from orchestrator.release.targets.target import targets


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
    assert [flavor.artifact_suffix(FlavorView.from_options(t.options)) for t in found] == [
        "",
        "-v3",
        "-znver4",
    ]


def test_native_is_refused_for_releases(options: Options) -> None:
    native = replace(options, flavor_settings={"cpu": FlavorSettings(levels=("native",))})
    with pytest.raises(ConfigError, match="'native' is refused for releases"):
        targets(native, ["cpu"])


def test_unknown_flavor_in_release(options: Options) -> None:
    with pytest.raises(ConfigError, match="unknown flavor 'amiga'"):
        targets(options, ["cpu", "amiga"])

"""cyclonedx's own warnings never reach the terminal raw: the one about a dependency graph
that is complete as it is goes unsaid, any other comes back through `warn`."""

from __future__ import annotations

import warnings

import pytest
from cyclonedx.model.bom import Bom
from cyclonedx.output.json import JsonV1Dot6

from orchestrator.supply import sbom
from orchestrator.supply.sbom import DebPackage, build_sbom

GCC = DebPackage("gcc", "4:14.2.0-1", "amd64", "45" * 32)


def test_a_crate_without_dependencies_raises_no_warning() -> None:
    said: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning that escaped would fail here
        build_sbom(
            name="demo",
            cargo_package="demo",
            version="1.2.3",
            artifact="demo-1.2.3-linux-x86_64-cpu",
            binary_sha256="a" * 64,
            crates=[],
            toolchain=[GCC],
            timestamp=0,
            warn=said.append,
        )
    assert said == []


def test_another_library_warning_comes_back_as_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = JsonV1Dot6

    def warning_writer(bom: Bom) -> JsonV1Dot6:
        warnings.warn("serialization omitted due to unsupported HashAlgorithm", stacklevel=1)
        return real(bom)

    monkeypatch.setattr(sbom, "JsonV1Dot6", warning_writer)
    said: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sbom.build_sbom(
            name="demo",
            cargo_package="demo",
            version="1.2.3",
            artifact="demo-1.2.3-linux-x86_64-cpu",
            binary_sha256="a" * 64,
            crates=[],
            toolchain=[GCC],
            timestamp=0,
            warn=said.append,
        )
    assert said == ["SBOM: serialization omitted due to unsupported HashAlgorithm"]


def test_a_socket_closed_by_the_garbage_collector_meanwhile_is_no_sbom_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A ResourceWarning raised while the SBOM is made (another module's unclosed socket
    collected then) says nothing about the SBOM: it is not passed on as one."""
    real = JsonV1Dot6

    def collecting_writer(bom: Bom) -> JsonV1Dot6:
        warnings.warn("unclosed <socket.socket fd=5, family=1>", ResourceWarning, stacklevel=1)
        return real(bom)

    monkeypatch.setattr(sbom, "JsonV1Dot6", collecting_writer)
    said: list[str] = []
    sbom.build_sbom(
        name="demo",
        cargo_package="demo",
        version="1.2.3",
        artifact="demo-1.2.3-linux-x86_64-cpu",
        binary_sha256="a" * 64,
        crates=[],
        toolchain=[GCC],
        timestamp=0,
        warn=said.append,
    )
    assert said == []

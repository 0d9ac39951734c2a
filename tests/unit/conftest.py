from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from orchestrator.config.resolve.options import Options
from orchestrator.config.resolve.toolchains import (
    BaseSpec,
    ToolchainSpec,
    load_base_spec,
    load_distros,
    load_toolchain,
)
from orchestrator.flavors import get_flavor
from orchestrator.host.inputs import pack_inputs
from orchestrator.plan.build_plan import BuildPlan, SourceSnapshot, make_plan
from orchestrator.plan.dockerfiles import image_packages, render_dockerfile


@pytest.fixture(autouse=True)
def _private_config_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cache-seal key (host/cache_seal.py) goes to a folder of the test run's, never to
    the developer's ~/.config; one per test, as a fresh machine would have."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config")))
    monkeypatch.delenv("ORCHESTRATOR_CACHE_KEY", raising=False)


def _fake_source_tar() -> bytes:
    """A crate's top folder as the source snapshot packs it: publication reads its docs."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in (("src/README.md", b"# fake crate\n"), ("src/Cargo.toml", b"")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


# Stands in for the crate's source tar: plans only hash it, publication reads its README.
FAKE_SOURCE = SourceSnapshot(
    archive=_fake_source_tar(), archive_sha256="a" * 64, cargo_lock_sha256="b" * 64
)


def plan_for(
    options: Options,
    flavor_name: str = "cpu",
    *,
    toolchain: ToolchainSpec | None = None,
    base: BaseSpec | None = None,
) -> BuildPlan:
    """What `build.prepare_plan` makes, with a fixed stand-in for the sources."""
    flavor = get_flavor(flavor_name)
    toolchain = toolchain or load_toolchain("rustc-web-1.96")
    return make_plan(
        options,
        flavor,
        toolchain=toolchain,
        base=base or load_base_spec(),
        dockerfile=render_dockerfile(flavor, toolchain),
        packages=image_packages(flavor, toolchain),
        source=FAKE_SOURCE,
        inputs=pack_inputs(options.train_inputs),
        distros=load_distros(),
    )


CARGO_TOML = """\
[package]
name = "demo"
version = "1.2.3"
edition = "2021"
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A minimal project: orchestrator.toml next to a crate with Cargo.toml and Cargo.lock."""
    crate = tmp_path / "crate"
    (crate / "src").mkdir(parents=True)
    (crate / "Cargo.toml").write_text(CARGO_TOML)
    (crate / "Cargo.lock").write_text(
        'version = 4\n\n[[package]]\nname = "demo"\nversion = "1.2.3"\n'
    )
    (crate / "src" / "main.rs").write_text("fn main() {}\n")
    (tmp_path / "orchestrator.toml").write_text(
        '[package]\ncrate = "crate"\n[train]\nworkloads = [["--help"]]\n'
    )
    return tmp_path


def write_config(project: Path, text: str) -> Path:
    path = project / "orchestrator.toml"
    path.write_text(text)
    return path


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    """An ExitStack the test's pipeline enters its containers and folders into."""
    with ExitStack() as exits:
        yield exits

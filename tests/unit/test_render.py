from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config.resolve.toolchains import load_toolchain
from orchestrator.config.resources import repository_root
from orchestrator.errors import ConfigError, StaleRenderError
from orchestrator.flavors import FLAVORS, get_flavor
from orchestrator.flavors.cpu import CpuFlavor
from orchestrator.plan.dockerfiles import DEFAULT_TOOLCHAIN, render_all, render_dockerfile


@pytest.mark.parametrize("flavor", sorted(FLAVORS))
def test_committed_dockerfile_matches_template(flavor: str, request: pytest.FixtureRequest) -> None:
    """Golden files: dockerfiles/ is what a reviewer reads, so it must be what runs."""
    root = repository_root()
    assert root is not None
    golden = root / "dockerfiles" / f"{flavor}.Dockerfile"
    rendered = render_dockerfile(get_flavor(flavor), load_toolchain(DEFAULT_TOOLCHAIN))
    if request.config.getoption("--update-golden"):
        golden.write_text(rendered)
    assert golden.read_text() == rendered, "run `orchestrator render` (or --update-golden)"


def test_rendered_dockerfile_pins_every_package_and_drops_root() -> None:
    toolchain = load_toolchain(DEFAULT_TOOLCHAIN)
    text = render_dockerfile(get_flavor("cpu"), toolchain)
    for package, version in toolchain.packages.items():
        assert f"'{package}={version}'" in text
    assert "FROM scratch" in text
    assert "USER 1000:1000" in text
    assert "offline = true" in text


def test_other_toolchain_renders_its_own_pins() -> None:
    text = render_dockerfile(get_flavor("cpu"), load_toolchain("rustc-1.85"))
    assert "'llvm-19=1:19.1.7-3+b1'" in text
    assert "llvm-22" not in text


def test_check_mode_detects_stale_and_missing(tmp_path: Path) -> None:
    written = render_all(check=False, output_dir=tmp_path)
    assert all(r.changed for r in written)
    assert not any(r.changed for r in render_all(check=True, output_dir=tmp_path))
    (tmp_path / "cpu.Dockerfile").write_text("FROM nothing\n")
    with pytest.raises(StaleRenderError, match=r"cpu\.Dockerfile") as caught:
        render_all(check=True, output_dir=tmp_path)
    assert caught.value.exit_code == 50
    assert (tmp_path / "cpu.Dockerfile").read_text() == "FROM nothing\n"  # check never writes


class _BrokenFlavor(CpuFlavor):
    template = "broken.j2"


def test_undefined_template_variable_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "broken.j2").write_text("FROM {{ no_such_variable }}\n")
    with pytest.raises(ConfigError, match="no_such_variable"):
        render_dockerfile(_BrokenFlavor(), load_toolchain(DEFAULT_TOOLCHAIN), templates=tmp_path)

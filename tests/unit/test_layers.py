"""The package's import direction holds, and the checker would notice if it did not."""

from __future__ import annotations

from pathlib import Path

import orchestrator
from orchestrator.tools.layers import check


def test_the_package_keeps_its_layers() -> None:
    root = Path(orchestrator.__file__).parent
    assert [str(v) for v in check(root)] == []


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "orchestrator"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_pure_module_importing_the_runtime_is_refused(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "model/plan.py": "from orchestrator.runtime.engine import Engine\n",
            "runtime/engine.py": "import docker\n",
        },
    )
    [violation] = check(root)
    assert violation.file.name == "plan.py"
    assert "model must not import orchestrator.runtime.engine" in violation.message


def test_a_lazy_import_of_subprocess_in_config_is_refused(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"config/options.py": "def f():\n    import subprocess\n"})
    [violation] = check(root)
    assert violation.line == 2
    assert "config is pure" in violation.message


def test_an_upward_import_is_refused_and_a_downward_one_allowed(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "execute/build.py": "from orchestrator.release.run import run_release\n",
            "release/run.py": "from orchestrator.execute import build\n",
        },
    )
    assert [v.file.name for v in check(root)] == ["build.py"]


def test_an_unknown_package_must_be_placed_in_the_table(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"misc/helpers.py": "x = 1\n"})
    [violation] = check(root)
    assert "not in the layer table" in violation.message

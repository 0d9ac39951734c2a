"""The package's import direction holds, and the checker would notice if it did not."""

from __future__ import annotations

from graphlib import TopologicalSorter
from pathlib import Path

import pytest

import orchestrator
from orchestrator.tools.layers import (
    KNOWN_CIRCLES,
    MAX_LINES,
    MAX_MODULES,
    ROOMS,
    check,
    check_circles,
    check_lengths,
    check_sizes,
    room_of,
)


def test_the_package_keeps_its_layers() -> None:
    root = Path(orchestrator.__file__).parent
    assert [str(v) for v in check(root)] == []


def test_the_package_has_no_import_circle_but_the_known_ones() -> None:
    root = Path(orchestrator.__file__).parent
    assert [str(v) for v in check_circles(root)] == []
    assert len(KNOWN_CIRCLES) <= 1  # the list only shrinks


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
            "model/layout.py": "from orchestrator.runtime.engine import Engine\n",
            "runtime/engine.py": "import docker\n",
        },
    )
    [violation] = check(root)
    assert violation.file.name == "layout.py"
    assert "model must not import orchestrator.runtime.engine" in violation.message


def test_a_lazy_import_of_subprocess_in_config_is_refused(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"config/resolve/options.py": "def f():\n    import subprocess\n"})
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


def test_a_circle_through_lazy_and_type_checking_imports_is_refused(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "supply/attest.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n"
                "    from orchestrator.supply.chain import SignedChain\n"
            ),
            "supply/chain.py": "def read():\n    from orchestrator.supply.verify import f\n",
            "supply/verify.py": "from orchestrator.supply import attest\n",
            "supply/names.py": "CHECKSUMS = 'SHA256SUMS'\n",
            "supply/other.py": "from orchestrator.supply.names import CHECKSUMS\n",
        },
    )
    [violation] = check_circles(root, known=frozenset())
    assert (violation.file.name, violation.line) == ("attest.py", 3)
    assert "supply.attest -> supply.chain -> supply.verify -> supply.attest" in violation.message
    assert check(root) == []  # one layer: only the circle is wrong


def test_a_known_circle_passes_and_a_stale_entry_is_reported(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "execute/bench.py": "def report():\n    import orchestrator.execute.counts\n",
            "execute/counts.py": "from orchestrator.execute.bench import BENCH_DIR\n",
        },
    )
    circle = frozenset({"execute.bench", "execute.counts"})
    assert check_circles(root, known=frozenset({circle})) == []
    [shorter] = check_circles(root, known=frozenset())
    assert "execute.bench -> execute.counts -> execute.bench" in shorter.message
    (root / "execute/bench.py").write_text("BENCH_DIR = '/build/bench'\n")
    [stale] = check_circles(root, known=frozenset({circle}))
    assert "no longer a circle" in stale.message


def test_a_room_imports_only_the_rooms_below_it(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "execute/steps/pipeline.py": "def f():\n    from orchestrator.execute.ship import x\n",
            "execute/ship/x.py": "from orchestrator.execute.steps.pipeline import f\n",
            "execute/build.py": "from orchestrator.execute import ship, steps\n",
            "execute/misc.py": "x = 1\n",
        },
    )
    messages = sorted((v.file.name, v.line, v.message) for v in check(root))
    assert messages == [
        ("misc.py", 1, "execute/misc is not in the room table of execute"),
        ("pipeline.py", 2, "execute/steps must not import the room execute/ship"),
    ]


@pytest.mark.parametrize("layer", sorted(ROOMS))
def test_the_rooms_of_a_split_package_are_each_in_the_table(layer: str) -> None:
    root = Path(orchestrator.__file__).parent
    rooms = {room_of(path, root) for path in (root / layer).rglob("*.py")}
    assert rooms == set(ROOMS[layer])


@pytest.mark.parametrize("layer", sorted(ROOMS))
def test_the_rooms_of_a_package_import_each_other_one_way(layer: str) -> None:
    rooms = ROOMS[layer]
    assert all(set(allowed) <= set(rooms) for allowed in rooms.values())
    order = list(TopologicalSorter(rooms).static_order())  # CycleError on a circle
    assert set(order) == set(rooms)


def test_no_folder_of_the_package_holds_more_than_the_most_modules() -> None:
    root = Path(orchestrator.__file__).parent
    assert [str(v) for v in check_sizes(root)] == []
    assert MAX_MODULES == 20


def test_a_folder_over_the_most_modules_is_refused_and_init_not_counted(tmp_path: Path) -> None:
    files = {f"release/m{n}.py": "x = 1\n" for n in range(4)}
    files |= {"release/__init__.py": "", "release/rooms/a.py": "", "release/rooms/b.py": ""}
    files |= {f"model/m{n}.py": "" for n in range(3)} | {"errors.py": "", "cli.py": ""}
    root = _tree(tmp_path, files)
    [violation] = check_sizes(root, most=3)
    assert violation.file == root / "release" / "__init__.py"
    assert "orchestrator/release/ holds 4 modules, more than 3" in violation.message
    assert check_sizes(root, most=4) == []  # model/ with 3, release/rooms/ with 2, the top 2
    (root / "model" / "m3.py").write_text("")
    bare, release = check_sizes(root, most=3)
    assert (bare.file, bare.line) == (root / "model", 1)  # no __init__.py: the folder itself
    assert "orchestrator/model/ holds 4 modules" in bare.message
    assert release.file == violation.file


def test_no_module_of_the_package_is_longer_than_the_most_lines(tmp_path: Path) -> None:
    root = Path(orchestrator.__file__).parent
    assert [str(v) for v in check_lengths(root)] == []
    assert MAX_LINES == 450
    files = {"plan/short.py": "x = 1\n" * 5, "plan/long.py": "x = 1\n" * 6, "cli.py": ""}
    tree = _tree(tmp_path, files)
    [violation] = check_lengths(tree, most=5)
    assert (violation.file, violation.line) == (tree / "plan" / "long.py", 6)
    assert "orchestrator/plan/long.py has 6 lines, more than 5" in violation.message
    assert check_lengths(tree, most=6) == []

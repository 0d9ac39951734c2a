"""The import direction of orchestrator's packages, checked over the source's `ast`.

The folders read as the data flow: config -> plan -> execute -> release, with the cli on
top. A package may import only the packages listed for it below (and itself); the pure
ones (config, model, flavors, plan, supply) may also not import anything that talks to
Docker or spawns processes. No two modules may import each other, directly or around a
circle (every import counts: lazy ones and those only for type checking too). Inside a
package split into rooms (sub-packages), a room may import only the rooms listed for it.
No folder holds more than MAX_MODULES modules (its __init__.py aside): past that, a reader
no longer finds a module by its folder, and the folder is split into rooms named for what
they own. No module is longer than MAX_LINES lines: a longer one holds more than one
responsibility, and one of them moves out whole. Run `python -m orchestrator.tools.layers`;
exit 1 names every rule broken.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "orchestrator"
_FOUNDATION = frozenset({"errors"})
# What each top-level module or package of orchestrator may import from orchestrator.
ALLOWED: dict[str, frozenset[str]] = {
    "errors": frozenset(),
    "progress": _FOUNDATION,
    "config": _FOUNDATION,
    "model": _FOUNDATION | {"config"},
    "flavors": _FOUNDATION | {"config", "model"},
    "plan": _FOUNDATION | {"config", "model", "flavors"},
    "supply": _FOUNDATION | {"config", "model"},
    "host": _FOUNDATION | {"progress", "config", "model", "plan"},
    "runtime": _FOUNDATION | {"progress", "config", "model", "flavors", "plan", "host"},
    "execute": _FOUNDATION
    | {"progress", "config", "model", "flavors", "plan", "supply", "host", "runtime"},
    "release": _FOUNDATION
    | {"progress", "config", "model", "flavors", "plan", "supply", "host", "runtime", "execute"},
    "cli": frozenset(
        {"errors", "progress", "config", "model", "flavors", "plan", "supply", "host"}
        | {"runtime", "execute", "release"}
    ),
    # schemas.py publishes the records' JSON Schemas into schemas/ (config locates it)
    "tools": frozenset({"model", "config"}),
    "__main__": frozenset({"cli"}),
    "__init__": frozenset(),
}
# The rooms of a package (sub-packages, and the modules at its top), and which other rooms
# of the same package each may import. execute/'s read as a build goes: the steps' shared
# machinery, then the verdict (validation, the gate), the optimizations (which validate
# their output), shipping, and on top build.py, which maps every step to its room.
_EXECUTE_LOWER = frozenset({"steps", "verdict", "optimize", "ship"})
# model/'s: the helpers every room may use (hashing, layout, printable), then facts read
# from a binary's bytes, the records of the files written (build.json holds binaries'
# facts), and the verdicts (gates, tools' reports) that read those records.
_MODEL_BASE = frozenset({"hashing", "layout", "printable"})
# config/'s: the helpers every room may use (bounded TOML/JSON, did-you-mean, where our own
# files live), then the settings declared, resolving them into Options, and on top init,
# which scaffolds a config from the crate and checks the configured runs against Options.
_CONFIG_BASE = frozenset({"nesting", "suggest", "resources"})
# release/'s: its targets built on engines, then release.lock written from them and a
# rebuild from it (its steps planned by step_plan.py, as the dry run's are), then the
# folders assembled from other machines' targets (pinned as well) and composed around
# the dispatcher; on top run.py, which runs a release and composes its -auto folders,
# with how it ends, and the dry run that reports on it.
_RELEASE_LOWER = frozenset({"targets", "lock", "assemble"})
ROOMS: dict[str, dict[str, frozenset[str]]] = {
    "config": {
        "__init__": frozenset(),
        **dict.fromkeys(_CONFIG_BASE, frozenset()),
        "declarations": _CONFIG_BASE,
        "resolve": _CONFIG_BASE | {"declarations"},
        "init": _CONFIG_BASE | {"declarations", "resolve"},
    },
    "execute": {
        "__init__": frozenset(),
        "steps": frozenset(),
        "verdict": frozenset({"steps"}),
        "optimize": frozenset({"steps", "verdict"}),
        "ship": frozenset({"steps", "verdict", "optimize"}),
        "build": _EXECUTE_LOWER,
        "train_export": _EXECUTE_LOWER | {"build"},
    },
    "model": {
        "__init__": frozenset(),
        **dict.fromkeys(_MODEL_BASE, frozenset()),
        "binaries": _MODEL_BASE,
        "documents": _MODEL_BASE | {"binaries"},
        "verdict": _MODEL_BASE | {"binaries", "documents"},
    },
    "release": {
        "__init__": frozenset(),
        "targets": frozenset(),
        "lock": frozenset({"targets", "step_plan"}),
        "assemble": frozenset({"targets", "lock"}),
        "ending": frozenset({"targets"}),
        "run": _RELEASE_LOWER | {"ending"},
        "step_plan": frozenset(),
        "dry_run": _RELEASE_LOWER | {"ending", "run", "step_plan"},
    },
}
PURE = frozenset({"config", "model", "flavors", "plan", "supply"})
# Modules that run processes or talk to the Docker Engine: never in a pure package.
IMPURE_MODULES = frozenset({"docker", "python_on_whales", "subprocess", "socket", "pty"})
# Import circles known and due to be untied (module names below orchestrator). Each must
# still exist: an entry whose circle is gone fails too, so that the list only shrinks.
KNOWN_CIRCLES: frozenset[frozenset[str]] = frozenset()
MAX_MODULES = 20
MAX_LINES = 450


@dataclass(frozen=True)
class Violation:
    file: Path
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


def _imports(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) of every import, lazy ones inside functions too."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == PACKAGE:
                for alias in node.names:
                    yield node.lineno, f"{PACKAGE}.{alias.name}"
            else:
                yield node.lineno, node.module


def module_of(path: Path, root: Path) -> str:
    """`config.resolve.options` for orchestrator/config/resolve/options.py, `flavors` for
    orchestrator/flavors/__init__.py."""
    parts = path.relative_to(root).with_suffix("").parts
    if len(parts) > 1 and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imported_modules(tree: ast.AST, modules: Collection[str]) -> Iterator[tuple[int, str]]:
    """(line, module below orchestrator) of every import of one of `modules`: for
    `from orchestrator.execute import bench`, the module bench when there is one."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            named = [(alias.name, "") for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            named = [(node.module, alias.name) for alias in node.names]
        else:
            continue
        for module, name in named:
            if not module.startswith(f"{PACKAGE}."):
                continue
            relative = module.removeprefix(f"{PACKAGE}.")
            if f"{relative}.{name}" in modules:
                yield node.lineno, f"{relative}.{name}"
            elif relative in modules:
                yield node.lineno, relative


def _circles(graph: Mapping[str, Mapping[str, int]]) -> list[tuple[list[str], set[str]]]:
    """Each group of modules that reach each other (Tarjan's strongly connected components,
    iteratively), with one circle (a, b, ..., a) through it."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        index[start] = low[start] = len(index)
        stack.append(start)
        work = [(start, iter(sorted(graph[start])))]
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    work.append((target, iter(sorted(graph[target]))))
                elif target in stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group: set[str] = set()
                member = ""
                while member != node:
                    member = stack.pop()
                    group.add(member)
                if len(group) > 1:
                    groups.append(group)
    return [(_circle_through(graph, group), group) for group in groups]


def _circle_through(graph: Mapping[str, Mapping[str, int]], group: set[str]) -> list[str]:
    """The shortest way from the group's first module back to itself, inside the group."""
    first = min(group)
    came_from: dict[str, str] = {}
    frontier = [first]
    while first not in came_from:
        following = []
        for node in frontier:
            for target in sorted(graph[node]):
                if target in group and target not in came_from:
                    came_from[target] = node
                    following.append(target)
        frontier = following
    path = [first]
    while len(path) == 1 or path[-1] != first:
        path.append(came_from[path[-1]])
    return path[::-1]


def check_circles(root: Path, known: frozenset[frozenset[str]] = KNOWN_CIRCLES) -> list[Violation]:
    """Every import circle among the modules of `root` that `known` does not list, and
    every entry of `known` that is no longer a circle."""
    paths = {module_of(path, root): path for path in sorted(root.rglob("*.py"))}
    graph: dict[str, dict[str, int]] = {}
    for module, path in paths.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        edges = graph.setdefault(module, {})
        for line, target in _imported_modules(tree, paths):
            if target != module:
                edges.setdefault(target, line)
    violations = []
    found = set()
    for circle, group in _circles(graph):
        found.add(frozenset(group))
        if group in known:
            continue
        others = sorted(group - set(circle))
        tied = f"; tied in too: {', '.join(others)}" if others else ""
        violations.append(
            Violation(
                paths[circle[0]],
                graph[circle[0]][circle[1]],
                f"import circle: {' -> '.join(circle)}{tied} (move what they share into a "
                "module they all import)",
            )
        )
    for stale in sorted(known - found, key=sorted):
        violations.append(
            Violation(
                Path(__file__),
                1,
                f"KNOWN_CIRCLES lists {', '.join(sorted(stale))}, no longer a circle: remove it",
            )
        )
    return violations


def check_sizes(root: Path, most: int = MAX_MODULES) -> list[Violation]:
    """Every folder of `root` (itself included) with more than `most` modules, __init__.py
    not counted."""
    folders: dict[Path, int] = {}
    for path in root.rglob("*.py"):
        if path.name != "__init__.py":
            folders[path.parent] = folders.get(path.parent, 0) + 1
    return [
        Violation(
            folder / "__init__.py" if (folder / "__init__.py").exists() else folder,
            1,
            f"{folder.relative_to(root.parent)}/ holds {count} modules, more than {most}: split "
            "it into rooms (sub-packages) named for what they own, each placed in ROOMS",
        )
        for folder, count in sorted(folders.items())
        if count > most
    ]


def check_lengths(root: Path, most: int = MAX_LINES) -> list[Violation]:
    """Every module of `root` with more than `most` lines."""
    found = ((path, len(path.read_text().splitlines())) for path in sorted(root.rglob("*.py")))
    return [
        Violation(
            path,
            most + 1,
            f"{path.relative_to(root.parent)} has {lines} lines, more than {most}: move a whole "
            "responsibility into a module of its own",
        )
        for path, lines in found
        if lines > most
    ]


def layer_of(path: Path, root: Path) -> str:
    """`config` for orchestrator/config/resolve/options.py, `errors` for orchestrator/errors.py."""
    relative = path.relative_to(root)
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


def room_of(path: Path, root: Path) -> str:
    """`steps` for orchestrator/execute/steps/pipeline.py, `build` for execute/build.py."""
    parts = path.relative_to(root).parts
    return parts[1] if len(parts) > 2 else Path(parts[1]).stem  # layer/room/x.py: a room


def _room_imports(tree: ast.AST, layer: str) -> Iterator[tuple[int, str]]:
    """(line, room) of every import of a room of `layer`: `from orchestrator.execute import
    build` names the room build, `orchestrator.execute.steps.pipeline` the room steps."""
    package = f"{PACKAGE}.{layer}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == package:
                for alias in node.names:
                    yield node.lineno, alias.name
                continue
            modules = [node.module]
        else:
            continue
        for module in modules:
            if module.startswith(f"{package}."):
                yield node.lineno, module.removeprefix(f"{package}.").split(".")[0]


def check_rooms(path: Path, root: Path, layer: str, tree: ast.AST) -> list[Violation]:
    """The imports by `path` of rooms of its own layer that ROOMS does not allow it."""
    rooms = ROOMS.get(layer)
    if rooms is None or len(path.relative_to(root).parts) < 2:  # a top-level module
        return []
    room = room_of(path, root)
    if room not in rooms:
        return [Violation(path, 1, f"{layer}/{room} is not in the room table of {layer}")]
    return [
        Violation(path, line, f"{layer}/{room} must not import the room {layer}/{target}")
        for line, target in _room_imports(tree, layer)
        if target != room and target not in rooms[room]
    ]


def check(root: Path) -> list[Violation]:
    """Every rule broken by the package at `root` (the folder named orchestrator)."""
    violations: list[Violation] = []
    for path in sorted(root.rglob("*.py")):
        layer = layer_of(path, root)
        if layer not in ALLOWED:
            violations.append(Violation(path, 1, f"{layer} is not in the layer table"))
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        violations.extend(check_rooms(path, root, layer, tree))
        for line, module in _imports(tree):
            parts = module.split(".")
            if parts[0] == PACKAGE and len(parts) > 1:
                target = parts[1]
                if target in (layer, "__version__"):
                    continue
                if target not in ALLOWED[layer]:
                    violations.append(
                        Violation(path, line, f"{layer} must not import {module} ({target})")
                    )
            elif layer in PURE and parts[0] in IMPURE_MODULES:
                violations.append(
                    Violation(path, line, f"{layer} is pure and must not import {module}")
                )
    return violations


def main() -> int:
    root = Path(__file__).resolve().parents[1]
    violations = check(root) + check_circles(root) + check_sizes(root) + check_lengths(root)
    for violation in violations:
        print(violation)
    if violations:
        print(f"{len(violations)} rule(s) of the layering broken", file=sys.stderr)
        return 1
    known = f" but the {len(KNOWN_CIRCLES)} known" if KNOWN_CIRCLES else ""
    print(
        f"layers ok: {len(list(root.rglob('*.py')))} modules, no import circle{known}, no "
        f"folder over {MAX_MODULES} modules, no module over {MAX_LINES} lines"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

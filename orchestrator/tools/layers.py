"""The import direction of orchestrator's packages, checked over the source's `ast`.

The folders read as the data flow: config -> plan -> execute -> release, with the cli on
top. A package may import only the packages listed for it below (and itself); the pure
ones (config, model, flavors, plan, supply) may also not import anything that talks to
Docker or spawns processes. Run `python -m orchestrator.tools.layers`; exit 1 names
every import that breaks a rule.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
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
PURE = frozenset({"config", "model", "flavors", "plan", "supply"})
# Modules that run processes or talk to the Docker Engine: never in a pure package.
IMPURE_MODULES = frozenset({"docker", "python_on_whales", "subprocess", "socket", "pty"})


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


def layer_of(path: Path, root: Path) -> str:
    """`config` for orchestrator/config/options.py, `errors` for orchestrator/errors.py."""
    relative = path.relative_to(root)
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


def check(root: Path) -> list[Violation]:
    """Every rule broken by the package at `root` (the folder named orchestrator)."""
    violations: list[Violation] = []
    for path in sorted(root.rglob("*.py")):
        layer = layer_of(path, root)
        if layer not in ALLOWED:
            violations.append(Violation(path, 1, f"{layer} is not in the layer table"))
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
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
    violations = check(root)
    for violation in violations:
        print(violation)
    if violations:
        print(f"{len(violations)} import(s) break the layering", file=sys.stderr)
        return 1
    print(f"layers ok: {len(list(root.rglob('*.py')))} modules")
    return 0


if __name__ == "__main__":
    sys.exit(main())

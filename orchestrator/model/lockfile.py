"""release.lock: every input of a release, pinned, in a versioned JSON document.

The lock has one entry per target. Each entry separates what the plan decided before
anything ran (`inputs`: recomputed and compared by `orchestrator lock --check`), what
the build resolved (Debian package closure with sha256s, toolchain versions as the tools
reported them, profiles), and what came out (`output`). Every blob it names by sha256
lives in the vault, so `orchestrator reproduce` needs the lockfile and the vault only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator import __version__
from orchestrator.errors import OrchestratorError

LOCK_FILE = "release.lock"
SCHEMA = "orchestrator/lock"
SCHEMA_VERSION = 1


class LockfileError(OrchestratorError):
    exit_code = 53
    default_hint = "Write a new one with `orchestrator release` (or `orchestrator lock`)."


class LockDriftError(OrchestratorError):
    exit_code = 54
    default_hint = (
        "The configuration or sources changed since the lockfile was written. Release "
        "again to pin the new inputs, or restore the old ones."
    )


@dataclass(frozen=True)
class LockedTarget:
    """One target's entry, from its plan and the build.json of its published artifact."""

    level: str
    inputs: dict[str, Any]
    resolved: dict[str, Any]
    output: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "inputs": self.inputs,
            "resolved": self.resolved,
            "output": self.output,
        }


def lock_document(
    *,
    name: str,
    version: str,
    config: Mapping[str, Any],
    source: Mapping[str, Any],
    base: Mapping[str, Any],
    targets: Sequence[LockedTarget],
) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "written_by": f"orchestrator {__version__}",
        "release": {"name": name, "version": version},
        "config": dict(config),
        "source": dict(source),
        "base": dict(base),
        "targets": [t.as_dict() for t in sorted(targets, key=lambda t: t.inputs["artifact"])],
    }


def dumps(document: Mapping[str, Any]) -> str:
    """Stable text: sorted keys, two-space indent, a final newline (diffs stay readable)."""
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def write_lock(path: Path, document: Mapping[str, Any]) -> Path:
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(dumps(document))
    partial.replace(path)
    return path


def read_lock(path: Path) -> dict[str, Any]:
    if path.is_dir():
        path = path / LOCK_FILE
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        raise LockfileError(f"no lockfile at {path}") from None
    except (OSError, ValueError) as exc:
        raise LockfileError(f"{path} is not a readable lockfile: {exc}") from exc
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        raise LockfileError(f"{path} is not an orchestrator lockfile (schema {SCHEMA!r})")
    version = document.get("schema_version")
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise LockfileError(
            f"{path} has lockfile schema version {version!r}; this orchestrator reads up "
            f"to {SCHEMA_VERSION}",
            hint="Use the orchestrator version that wrote it (see written_by), or a newer one.",
        )
    for key in ("release", "config", "source", "base", "targets"):
        if key not in document:
            raise LockfileError(f"{path}: lockfile schema {version} needs a {key!r} entry")
    return document


def blobs(document: Mapping[str, Any]) -> dict[str, str]:
    """Every vault blob the lock names: sha256 -> what it is (for messages and export)."""
    found: dict[str, str] = {}
    base = document["base"]
    if base.get("rootfs_sha256"):
        found[base["rootfs_sha256"]] = f"rootfs {base['suite']}"
    vendor = document["source"].get("vendor_sha256")
    if vendor:
        found[vendor] = "vendored crates"
    for target in document["targets"]:
        resolved = target["resolved"]
        for package in resolved.get("packages", []):
            found[package["sha256"]] = package["file"]
        for name, profile in resolved.get("profiles", {}).items():
            found[profile["sha256"]] = f"{target['inputs']['artifact']}/{name}"
    return found


def drift(document: Mapping[str, Any], current: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Human-readable differences between the locked inputs and the current plans.

    `current` maps artifact names to `plan_inputs` of what the config builds now.
    """
    locked = {t["inputs"]["artifact"]: t["inputs"] for t in document["targets"]}
    changes = [
        f"target {name} is new (not in the lock)" for name in sorted(set(current) - set(locked))
    ]
    changes += [
        f"target {name} is locked but no longer configured"
        for name in sorted(set(locked) - set(current))
    ]
    for name in sorted(set(locked) & set(current)):
        changes += [f"{name}: {line}" for line in _differences(locked[name], current[name])]
    return changes


def _differences(before: object, after: object, path: str = "") -> list[str]:
    """`key changed: old -> new` lines, descending into tables so the key is exact."""
    if isinstance(before, dict) and isinstance(after, dict):
        lines: list[str] = []
        for key in sorted(set(before) | set(after), key=str):
            where = f"{path}.{key}" if path else str(key)
            lines += _differences(before.get(key), after.get(key), where)
        return lines
    if before == after:
        return []
    return [f"{path} changed: {_short(before)} -> {_short(after)}"]


def _short(value: object) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."

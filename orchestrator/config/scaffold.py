"""`orchestrator init`: a first orchestrator.toml, guessed from the crate itself.

What can be known is read from Cargo.toml files (the package or workspace member, its
binaries and features); what cannot (which arguments make a representative workload) is
guessed from the README's examples (`tool ARGS` or `cargo run --release -- ARGS` lines in
code blocks) and, failing that, left as `--help` with a comment saying to replace it.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.config.crate_files import read_toml, workspace_members
from orchestrator.errors import ConfigError


@dataclass(frozen=True)
class Detected:
    crate: str  # relative to the config's folder: "."
    package: str
    member: bool  # a member of a workspace, named with [package] package
    binaries: tuple[str, ...]
    features: tuple[str, ...]
    workload: tuple[str, ...]
    workload_source: str  # where the workload came from, for the comment
    others: tuple[str, ...]  # other members with binaries


def _binaries(manifest: Path, package: dict[str, Any], data: dict[str, Any]) -> list[str]:
    tables = [b for b in data.get("bin", []) if isinstance(b, dict) and "name" in b]
    declared = [b["name"] for b in tables]
    folder = manifest.parent
    main_taken = any(b.get("path") == "src/main.rs" for b in tables)
    implicit = (folder / "src" / "main.rs").is_file() and not main_taken
    if implicit and package["name"] not in declared:
        declared.insert(0, package["name"])
    declared += sorted(p.stem for p in (folder / "src" / "bin").glob("*.rs"))
    return list(dict.fromkeys(declared))


def _packages(
    root: Path, data: dict[str, Any]
) -> list[tuple[dict[str, Any], list[str], dict[str, Any]]]:
    """(package table, binaries, manifest) of the root package (`data`) and every member."""
    found = []
    if isinstance(data.get("package"), dict):
        found.append((data["package"], _binaries(root / "Cargo.toml", data["package"], data), data))
    for manifest in workspace_members(root, data).values():
        member = read_toml(manifest)
        found.append((member["package"], _binaries(manifest, member["package"], member), member))
    return found


_FENCE = re.compile(r"^\s*(```|~~~)")


def _readme_workload(root: Path, binary: str) -> tuple[str, ...]:
    """The first example command line in the README that runs `binary` with arguments."""
    for name in ("README.md", "README", "readme.md"):
        readme = root / name
        if readme.is_file():
            break
    else:
        return ()
    in_code = False
    for line in readme.read_text(errors="replace").splitlines():
        if _FENCE.match(line):
            in_code = not in_code
            continue
        if not in_code:
            continue
        text = line.strip().removeprefix("$ ").strip()
        try:
            words = shlex.split(text, comments=True)
        except ValueError:
            continue
        if words[:4] == ["cargo", "run", "--release", "--"] and len(words) > 4:
            return tuple(words[4:])
        plain = not any(w in {"|", ">", "<", "&&", ";"} for w in words)  # a lone command
        if len(words) > 1 and Path(words[0]).name == binary and plain:
            return tuple(words[1:])
    return ()


def detect(root: Path) -> Detected:
    """What a first config needs, from the crate (or workspace) at `root`."""
    if not (root / "Cargo.toml").is_file():
        raise ConfigError(
            f"{root} has no Cargo.toml",
            hint="Run `orchestrator init` in the folder of your crate or workspace.",
        )
    if not (root / "Cargo.lock").is_file():
        raise ConfigError(
            f"{root} has no Cargo.lock: a release pins its dependencies",
            hint="Run `cargo generate-lockfile` (and commit Cargo.lock), then init again.",
        )
    root_data = read_toml(root / "Cargo.toml")
    packages = [(p, b, d) for p, b, d in _packages(root, root_data) if b]
    if not packages:
        raise ConfigError(
            f"no binary in {root}: orchestrator releases executables",
            hint="A package needs src/main.rs, src/bin/*.rs or a [[bin]] table.",
        )
    package, binaries, data = packages[0]
    member = root_data.get("package", {}).get("name") != package["name"]
    features = tuple(sorted(k for k in (data.get("features") or {}) if k != "default"))
    workload = _readme_workload(root, binaries[0])
    return Detected(
        crate=".",
        package=package["name"],
        member=member,
        binaries=tuple(binaries),
        features=features,
        workload=workload or ("--help",),
        workload_source="the README" if workload else "",
        others=tuple(p["name"] for p, _b, _d in packages[1:]),
    )


def _toml_list(words: tuple[str, ...]) -> str:
    return "[" + ", ".join(_toml_string(w) for w in words) + "]"


def _toml_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render(found: Detected) -> str:
    """The commented orchestrator.toml for `found`; `build --dry-run` accepts it as is."""
    lines = [
        "# orchestrator.toml, written by `orchestrator init`. Every key: README, Configuration.",
        "[package]",
        f"crate = {_toml_string(found.crate)}  # the folder with Cargo.toml and Cargo.lock",
    ]
    if found.member:
        others = f" (others with binaries: {', '.join(found.others)})" if found.others else ""
        lines.append(f"package = {_toml_string(found.package)}  # the workspace member{others}")
    lines.append(f"binary = {_toml_string(found.binaries[0])}")
    if len(found.binaries) > 1:
        every = ", ".join(_toml_string(name) for name in found.binaries)
        lines.append(f"# other binaries of {found.package}: {', '.join(found.binaries[1:])}")
        lines.append(
            f"# binaries = [{every}]  # to ship them all in one artifact; a workload or "
            f'validate run names one as {{ binary = "{found.binaries[1]}", args = [...] }}'
        )
    lines += [
        '# exclude = ["docs"]  # paths left out of the source tarball',
        "",
        "[build]",
        'flavors = ["cpu"]  # also "cuda", "rocm", "aarch64"',
        '# target_cpu = "x86-64-v3"',
        "",
    ]
    if found.features:
        lines += [
            "[flavors.cpu]",
            f"# features = {_toml_list(found.features)}",
            "",
        ]
    source = (
        f"taken from {found.workload_source}"
        if found.workload_source
        else "a placeholder: replace it with a run that does real work"
    )
    lines += [
        "[train]",
        "# Argument lists for the binary; PGO and BOLT learn from these runs. They run at",
        "# the crate's root (relative paths work), read-only, without network.",
        f"workloads = [{_toml_list(found.workload)}]  # {source}",
        '# env = ["KEY=value"]',
        "",
        "[validate]",
        "# Output that must not change between `cargo build --release` and the optimized binary.",
        f"command = {_toml_list(found.workload)}",
        "",
        "[bench]",
        f"command = {_toml_list(found.workload)}",
        "",
        "[test]",
        '# args = ["--", "--skip", "slow_test"]',
        "",
    ]
    return "\n".join(lines)

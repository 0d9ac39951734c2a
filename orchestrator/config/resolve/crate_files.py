"""What orchestrator reads from the crate's own Cargo files: the package (or workspace
member) it releases, with its version, and the rustflags of its `.cargo/config.toml`.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.config.nesting import NestingError, loads_toml
from orchestrator.config.suggest import did_you_mean
from orchestrator.errors import ConfigError


def read_toml(path: Path) -> dict[str, Any]:
    """A TOML file's table; ConfigError naming the file when it is unreadable, not TOML, or
    nested too deeply to read safely."""
    try:
        return loads_toml(path.read_text())
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: not UTF-8 text ({exc.reason})") from None
    except NestingError as exc:
        raise ConfigError(
            f"{path}: not read: its tables or arrays are {exc}",
            hint="A configuration needs a few levels; this file is damaged or hostile.",
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc


@dataclass(frozen=True)
class CrateCargoConfig:
    """The rustflags of the crate's own `.cargo/config.toml`.

    cargo reads that file itself (builds run at the crate's root, so `[env]`, `[alias]`
    and the rest apply), but the flags orchestrator passes in CARGO_ENCODED_RUSTFLAGS
    replace its rustflags: those are read here and put first, before ours.
    """

    build_rustflags: tuple[str, ...] = ()
    target_rustflags: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def rustflags_for(self, triple: str) -> tuple[str, ...]:
        """cargo's own rule: `[target.<triple>] rustflags` when set, else `[build]`'s.
        `[target.'cfg(...)']` tables are not evaluated (they stay inert)."""
        return self.target_rustflags.get(triple, self.build_rustflags)


def read_cargo_package(crate_dir: Path, member: str | None) -> tuple[str, str | None]:
    """(package name, version) of the crate, or of `member` when it is a workspace."""
    manifest = crate_dir / "Cargo.toml"
    data = read_toml(manifest)
    package = data.get("package")
    own = package.get("name") if isinstance(package, dict) else None
    if member is None or member == own:
        if not isinstance(own, str):
            names = ", ".join(sorted(workspace_members(crate_dir, data))) or "none found"
            raise ConfigError(
                f"{manifest} is a workspace root without a [package] of its own",
                hint=f'Name the member to release: [package] package = "NAME" (members: {names}).',
            )
        return own, _version_of(package, data)
    members = workspace_members(crate_dir, data)
    if member not in members:
        raise ConfigError(
            f"{manifest}: package.package = {member!r} is not a member of this workspace; "
            + did_you_mean(member, members)
            + "members: "
            + (", ".join(sorted(members)) or "none")
        )
    member_manifest = members[member]
    member_package = read_toml(member_manifest).get("package", {})
    return member, _version_of(member_package, data)


def _version_of(package: object, root: dict[str, Any]) -> str | None:
    """A literal version, or the workspace's for `version.workspace = true`."""
    version = package.get("version") if isinstance(package, dict) else None
    if isinstance(version, dict) and version.get("workspace") is True:
        inherited = (root.get("workspace") or {}).get("package", {}).get("version")
        return inherited if isinstance(inherited, str) else None
    return version if isinstance(version, str) else None


def workspace_members(crate_dir: Path, data: dict[str, Any]) -> dict[str, Path]:
    """name -> Cargo.toml of every workspace member (globs in `members` expanded)."""
    workspace = data.get("workspace")
    if not isinstance(workspace, dict):
        return {}
    found: dict[str, Path] = {}
    for pattern in workspace.get("members", []):
        if not isinstance(pattern, str):
            continue
        for folder in sorted(crate_dir.glob(pattern)):
            manifest = folder / "Cargo.toml"
            if manifest.is_file():
                name = read_toml(manifest).get("package", {}).get("name")
                if isinstance(name, str):
                    found[name] = manifest
    return found


def _flags(value: object, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(value.split())
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ConfigError(f"{where}: rustflags must be a string or a list of strings")


def read_crate_cargo_config(crate_dir: Path) -> CrateCargoConfig:
    for name in ("config.toml", "config"):
        path = crate_dir / ".cargo" / name
        if path.is_file():
            break
    else:
        return CrateCargoConfig()
    data = read_toml(path)
    build = data.get("build", {})
    build_flags = (
        _flags(build["rustflags"], f"{path}: build.rustflags")
        if isinstance(build, dict) and "rustflags" in build
        else ()
    )
    target_flags = {
        triple: _flags(table["rustflags"], f"{path}: target.{triple}.rustflags")
        for triple, table in (data.get("target") or {}).items()
        if isinstance(table, dict) and "rustflags" in table and not triple.startswith("cfg(")
    }
    return CrateCargoConfig(build_flags, target_flags)

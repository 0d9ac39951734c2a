"""The Cargo profile the shipped variants build with (`[build] profile`), checked against
the crate's own `[profile.*]` tables, and the one `init` proposes.

Cargo reads profiles from the workspace root's Cargo.toml: the folder `package.crate`
names (it holds Cargo.lock). A custom profile must say what it `inherits`; orchestrator
ships only optimised builds, so the profile must come down from `release` (or be it, or
`bench`). Its folder under `target/<triple>/` is its name, but for cargo's own: `dev` and
`test` build into `debug`, `bench` into `release`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orchestrator.config.resolve.crate_files import read_toml
from orchestrator.errors import ConfigError

DEFAULT_PROFILE = "release"
# cargo's built-in profiles and the folder each builds into
BUILT_IN = {"dev": "debug", "test": "debug", "release": "release", "bench": "release"}
# Names crates give the profile they publish from, the most common first
DISTRIBUTION_PROFILES = ("dist", "release-lto", "production")
# cargo: letters, digits, '-' and '_' (it refuses others, and the name becomes a folder)
PROFILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


def profile_dir(name: str) -> str:
    """The folder under target/<triple>/ that profile `name` builds into."""
    return BUILT_IN.get(name, name)


def crate_profiles(crate_dir: Path) -> dict[str, Mapping[str, Any]]:
    """The `[profile.<name>]` tables of the crate's (workspace root's) Cargo.toml."""
    manifest = crate_dir / "Cargo.toml"
    if not manifest.is_file():
        return {}
    profiles = read_toml(manifest).get("profile")
    if not isinstance(profiles, dict):
        return {}
    return {name: table for name, table in profiles.items() if isinstance(table, dict)}


def comes_from(name: str, profiles: Mapping[str, Mapping[str, Any]]) -> str:
    """The built-in profile `name` inherits from, following `inherits` ("" if none is
    reached: a missing parent, a cycle or a profile that names no parent)."""
    seen: set[str] = set()
    while name not in BUILT_IN:
        if name in seen or name not in profiles:
            return ""
        seen.add(name)
        parent = profiles[name].get("inherits")
        if not isinstance(parent, str):
            return ""
        name = parent
    return name


def distribution_profile(profiles: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The crate's distribution profile (`dist`, `release-lto`, `production`) that comes
    from `release`, for `init` to propose; None without one."""
    return next(
        (
            n
            for n in DISTRIBUTION_PROFILES
            if n in profiles and comes_from(n, profiles) == "release"
        ),
        None,
    )


def check_profile(name: str, crate_dir: Path, where: str) -> None:
    """ConfigError unless `name` is a profile of the crate that builds optimised code."""
    if not PROFILE_NAME.fullmatch(name):
        raise ConfigError(
            f"{where}: {name!r} is not a Cargo profile name (letters, digits, '-' and '_')",
            hint='Name a [profile.<name>] of Cargo.toml, or leave build.profile at "release".',
        )
    profiles = crate_profiles(crate_dir)
    custom = sorted(n for n in profiles if n not in BUILT_IN)
    known = ", ".join(["release", *custom])
    if name not in BUILT_IN and name not in profiles:
        raise ConfigError(
            f"{where}: Cargo.toml of {crate_dir} has no [profile.{name}]",
            hint=f"Profiles to choose from: {known}.",
        )
    if comes_from(name, profiles) not in ("release", "bench"):
        raise ConfigError(
            f"{where}: profile {name!r} does not build optimised code: it is, or inherits "
            "from, cargo's dev/test profile (or names no parent to inherit from)",
            hint=f'A shipped binary builds with "release" or a profile with inherits = '
            f'"release". Profiles to choose from: {known}.',
        )

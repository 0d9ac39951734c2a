"""Typos and contradictions outside the config file, refused as the file's own would be:
ORCHESTRATOR_* environment variables that nothing reads, flags given together that cancel
each other, and empty flag values.

The config file's checks (unknown keys, sections, choices) already name what was meant;
these give the environment and the command line the same care, so that a misspelt
variable or `--no-bolt --bolt-mode lbr` fails before any work instead of being ignored.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from orchestrator.config.declarations.kinds import KIND_TEXT
from orchestrator.config.declarations.setting import ENV_PREFIX, Setting
from orchestrator.config.declarations.settings import SETTINGS, SETTINGS_BY_KEY
from orchestrator.config.suggest import suggest
from orchestrator.errors import ConfigError

# ORCHESTRATOR_* variables read by code of their own rather than through a setting's
# declaration, with what they do. A unit test finds every ORCHESTRATOR_ name in the
# source and fails unless it is a setting's variable or listed here.
DIRECT_VARIABLES: dict[str, str] = {
    "ORCHESTRATOR_CONFIG": "the orchestrator.toml to use (as --config)",
    "ORCHESTRATOR_SIGNING_PASSPHRASE": "the passphrase of the signing key",
    "ORCHESTRATOR_CACHE_KEY": "the key that seals the step cache (host/cache_seal.py)",
    "ORCHESTRATOR_ASCII": "ASCII marks instead of ▶ ✓ ✗ in the step lines",
    "ORCHESTRATOR_INSTALL": "the pip requirement in the CI files `orchestrator ci` writes",
    "ORCHESTRATOR_INSTALL_LEVEL": "the CPU level a release's install.sh picks",
    "ORCHESTRATOR_LEVEL": (
        "the CPU level the dispatcher runs (v1-v4), or show (model/binaries/dispatch.py)"
    ),
    "ORCHESTRATOR_GPU_TARGETS": "the GPU targets, set inside GPU build containers",
    "ORCHESTRATOR_BUILD_ID": "a build argument of the image builds",
}


def known_variables(settings: Iterable[Setting] = SETTINGS) -> frozenset[str]:
    """Every ORCHESTRATOR_* variable something reads: each setting's, then the direct ones."""
    names = {name for spec in settings for name in spec.env_names}
    return frozenset(names | set(DIRECT_VARIABLES))


def check_environment(env: Mapping[str, str]) -> None:
    """ConfigError naming every set ORCHESTRATOR_* variable that nothing reads, each with
    the variable it most likely meant. An empty one is skipped: empty means unset."""
    known = known_variables()
    unknown = sorted(n for n, v in env.items() if n.startswith(ENV_PREFIX) and v and n not in known)
    if not unknown:
        return
    described = []
    for name in unknown:  # compared without the prefix they all share
        meant = suggest(name.removeprefix(ENV_PREFIX), [k.removeprefix(ENV_PREFIX) for k in known])
        described.append(name + (f" (did you mean {ENV_PREFIX}{meant}?)" if meant else ""))
    noun = "variable" if len(unknown) == 1 else "variables"
    raise ConfigError(
        f"unknown environment {noun}: {'; '.join(described)}",
        hint="orchestrator reads ORCHESTRATOR_<SECTION>_<KEY> for each setting (`orchestrator "
        "config` lists them) and " + ", ".join(sorted(DIRECT_VARIABLES)) + ". Correct the "
        f"name or unset it: unset {' '.join(unknown)}",
    )


# -- flags ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Conflict:
    """A flag (`switch` set to `value`) that leaves other flags nothing to act on."""

    switch: str  # a dotted key: "bolt.enabled"
    value: object  # the value that turns the others into dead letters: False
    others: Mapping[str, tuple[object, ...]]  # key -> the values that conflict (() = any)
    why: str


CONFLICTS: tuple[Conflict, ...] = (
    Conflict(
        "bolt.enabled",
        False,
        {"bolt.mode": (), "bolt.policy": ()},
        "BOLT is off, so how it profiles and what happens when it fails never apply",
    ),
    Conflict(
        "profiling.privileges",
        False,
        {"profiling.allow_privileged": (True,)},
        "the profiling container asks for no perf access at all, so there is no "
        "--privileged last resort to allow",
    ),
)
# (--no-privileged with --bolt-mode lbr or sample is refused by the plan, whatever set them.)


def flag_text(key: str, value: object) -> str:
    """A flag as it was typed: --no-bolt, --bolt-mode lbr, --target-cpu ''."""
    spec = SETTINGS_BY_KEY[key]
    names = spec.flag_names or (f"<{key}>",)
    if isinstance(value, bool):
        return names[0] if value or len(names) == 1 else names[1]
    return f"{names[0]} {value if value != '' else repr(value)}"


def check_flag_conflicts(cli: Mapping[str, object]) -> None:
    """ConfigError for flags given together that contradict each other. Only flags: a
    config file may keep bolt.mode while a flag turns BOLT off for one build."""
    given = {key: value for key, value in cli.items() if value is not None}
    for conflict in CONFLICTS:
        if given.get(conflict.switch, not conflict.value) != conflict.value:
            continue
        clashing = [
            key
            for key, values in conflict.others.items()
            if key in given and (not values or given[key] in values)
        ]
        if not clashing:
            continue
        switch = flag_text(conflict.switch, conflict.value)
        others = " and ".join(flag_text(key, given[key]) for key in clashing)
        raise ConfigError(
            f"{switch} contradicts {others}: {conflict.why}",
            hint=f"Give {switch} alone, or drop it to use {others}.",
        )


def check_flag_not_empty(key: str, value: object) -> None:
    """ConfigError for an empty text value (`--target-cpu ""`), naming the flag and what it
    takes instead of "expected a string, got str ''"."""
    spec = SETTINGS_BY_KEY.get(key)
    if spec is None or spec.kind not in ("str", "path"):
        return
    if not isinstance(value, str) or value.strip():
        return
    flag = spec.flag_names[0] if spec.flag_names else key
    default = spec.computed if spec.default is None else spec.default
    raise ConfigError(
        f"{flag} is empty: it takes {KIND_TEXT[spec.kind]}, the value of {spec.key} ({spec.help})",
        hint=f"Give a value, or leave {flag} out for the default ({default}).",
    )

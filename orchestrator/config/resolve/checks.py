"""Checks that span several settings, made once the layers are resolved and before any
work: what workloads get, the test switch, the glibc floor, the gate's margin, and the
shipped binaries with the runs that name them."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from orchestrator.config.declarations.kinds import Run
from orchestrator.config.suggest import did_you_mean
from orchestrator.errors import ConfigError

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ENGINE_REQUIREMENT = re.compile(r"[a-z0-9]+:[A-Za-z0-9._/-]+=[^\s]*")
_GLIBC_FLOOR = re.compile(r"2\.[0-9]{1,2}")
# limits.memory: a number of bytes with a binary unit (k, m, g, t; "GiB", "G", "g" alike).
_MEMORY = re.compile(r"([0-9]+)\s*(?:([kmgt])(?:i?b)?|b)?", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
LEAST_PIDS = 64  # cargo and rustc alone hold a few dozen threads
LEAST_MEMORY = 64 << 20
# A training input's name: the last part of its path, which names it at /build/inputs.
_INPUT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]*")


def check_run_settings(path: Path, values: Mapping[str, Any], crate_dir: Path) -> None:
    """What workloads get (env, stdin) and the test switch, checked before any work."""
    for pair in values.get("run_env", ()):
        name, equals, _value = pair.partition("=")
        if not equals or not _ENV_NAME.fullmatch(name):
            raise ConfigError(
                f"{path}: train.env entry {pair!r} is not KEY=VALUE",
                hint='Write each as "NAME=value", e.g. env = ["MODEL=models/tiny.bin"].',
            )
    stdin = values.get("run_stdin", "")
    if stdin:
        relative = PurePosixPath(stdin)
        if relative.is_absolute() or ".." in relative.parts:
            raise ConfigError(
                f"{path}: train.stdin = {stdin!r} must be a path inside the crate",
                hint="Workloads see only the crate's files (at its root), read-only.",
            )
        if not (crate_dir / relative).is_file():
            raise ConfigError(f"{path}: train.stdin = {stdin!r}: no such file in {crate_dir}")
    _check_inputs(path, values.get("train_inputs", ()))
    floor = values.get("glibc_floor", "")
    if floor and not _GLIBC_FLOOR.fullmatch(floor):
        raise ConfigError(
            f"{path}: release.glibc_floor = {floor!r} is not a glibc release like 2.28",
            hint="Name the oldest glibc your users run: 2.17 (RHEL 7), 2.28 (RHEL 8, Debian "
            "10), 2.31 (Debian 11, Ubuntu 20.04), 2.35 (Ubuntu 22.04).",
        )
    for key, attr in (
        ("bolt.min_samples", "bolt_min_samples"),
        ("bolt.sample_repeat", "bolt_sample_repeat"),
        ("engines.jobs", "engine_jobs"),
    ):
        least = 0 if attr == "bolt_min_samples" else 1
        value = values.get(attr, least)  # engines.jobs may be "auto"
        if isinstance(value, int) and value < least:
            raise ConfigError(f"{path}: {key} must be at least {least}, got {values[attr]}")
    _check_limits(path, values)
    _check_select(path, values.get("validate_select", ""))
    min_gain = values.get("gate_min_gain", 0.0)
    if not 0.0 <= min_gain < 1.0:
        raise ConfigError(
            f"{path}: gate.min_gain is a share of estimated cycles, from 0 up to (not "
            f"including) 1; got {min_gain}",
            hint="0.01 asks each optimization to save at least 1% of estimated cycles.",
        )
    for requirement in values.get("engine_require", ()):
        if not _ENGINE_REQUIREMENT.fullmatch(requirement):
            raise ConfigError(
                f"{path}: engines.require: {requirement!r} is not FLAVOR:KEY=VALUE",
                hint='e.g. require = ["cuda:gpu=nvidia"]: cuda builds only on engines '
                "started with `dockerd --label gpu=nvidia`.",
            )
    if not values.get("test_enabled", True) and not values.get("test_reason", "").strip():
        raise ConfigError(
            f"{path}: test.enabled = false needs a reason",
            hint='Say why, e.g. reason = "needs a GPU"; it is recorded in build.json and '
            "shown in the release summary.",
        )


def memory_bytes(text: str) -> int | None:
    """limits.memory in bytes (0: no limit), or None when it is not a size."""
    found = _MEMORY.fullmatch(text.strip())
    if found is None:
        return None
    return int(found.group(1)) * _UNITS[(found.group(2) or "").lower()]


def _check_select(path: Path, select: str) -> None:
    try:
        re.compile(select)
    except re.error as exc:
        raise ConfigError(
            f"{path}: validate.select = {select!r} is not a regular expression: {exc}",
            hint='Write a Python regular expression, e.g. "^token " to compare only the '
            "lines that start with `token `.",
        ) from None


def _check_limits(path: Path, values: Mapping[str, Any]) -> None:
    pids = values.get("limit_pids", 0)
    if 0 < pids < LEAST_PIDS:
        raise ConfigError(
            f"{path}: limits.pids = {pids} is too few for cargo and rustc to start",
            hint=f"Give at least {LEAST_PIDS} (the default is 4096), or 0 for no limit.",
        )
    text = values.get("limit_memory", "0")
    memory = memory_bytes(text)
    if memory is None or 0 < memory < LEAST_MEMORY:
        raise ConfigError(
            f"{path}: limits.memory = {text!r} is not a size of at least 64MiB",
            hint='Write it like "8GiB" or "512MiB" (binary units k, m, g, t), or "0" for no limit.',
        )


def _check_inputs(path: Path, inputs: tuple[Path, ...]) -> None:
    """Each input is named by its path's last part; two of one name would share a mount.
    Whether it exists is checked when it is packed (`reproduce` takes it from the vault)."""
    names = [item.name for item in inputs]
    for item in inputs:
        if not _INPUT_NAME.fullmatch(item.name):
            raise ConfigError(
                f"{path}: train.inputs: {str(item)!r} cannot be named in the container "
                f"(/build/inputs/{item.name})",
                hint="Give the file or folder a plain name: letters, digits, '.', '_', '+', "
                "'-', not starting with '.' or '-'.",
            )
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ConfigError(
            f"{path}: train.inputs: two inputs are named {duplicates[0]!r}; each is mounted "
            f"at /build/inputs/<name>",
            hint="Rename one of them, or list the folder that holds both.",
        )


def resolve_binaries(path: Path, values: dict[str, Any], package_name: str) -> None:
    """package.binary and package.binaries agree, the main binary first; every run names a
    binary the artifact ships (a run naming the main one is written as a plain list)."""
    listed: tuple[str, ...] = values.get("binaries") or ()
    main = values.setdefault("binary", listed[0] if listed else package_name)
    if listed and main not in listed:
        raise ConfigError(
            f"{path}: package.binary {main!r} is not one of package.binaries {list(listed)}",
            hint="List every binary the artifact ships in package.binaries; package.binary "
            "(its first entry when unset) names the artifact.",
        )
    duplicates = sorted({name for name in listed if listed.count(name) > 1})
    if duplicates:
        raise ConfigError(f"{path}: package.binaries names {', '.join(duplicates)} twice")
    binaries = (main, *(name for name in listed if name != main))
    values["binaries"] = binaries
    for key, attr in (
        ("train.workloads", "workloads"),
        ("validate.runs", "validate_runs"),
        ("gate.workloads", "gate_workloads"),
    ):
        runs: list[Run] = []
        for run in values.get(attr, ()):
            if run.binary and run.binary not in binaries:
                raise ConfigError(
                    f"{path}: {key}: {{binary = {run.binary!r}, ...}} is not a binary the "
                    "artifact ships; "
                    + did_you_mean(run.binary, binaries)
                    + "shipped: "
                    + ", ".join(binaries),
                    hint="Add it to package.binaries, or fix the name.",
                )
            runs.append(Run(run.args) if run.binary == main else run)
        values[attr] = tuple(runs)
    unvalidated = [
        name
        for name in binaries[1:]
        if not any(run.binary == name for run in values.get("validate_runs", ()))
    ]
    if values.get("validate_command") and unvalidated:
        raise ConfigError(
            f"{path}: validate.command checks {main}, but no validate.runs entry runs "
            + ", ".join(unvalidated),
            hint="Every shipped binary is compared with its baseline build: add e.g. "
            f'runs = [{{binary = "{unvalidated[0]}", args = ["--version"]}}] under [validate].',
        )


# ci.runners: FLAVOR=LABEL (both builders) or FLAVOR@b=LABEL (the second builder of
# ci.verify), a label as GitHub runner labels and GitLab runner tags are written (no spaces
# or quotes: it is pasted into YAML as a plain word).
_CI_RUNNER = re.compile(r"([a-z0-9]+)(?:@(b))?=([A-Za-z0-9][A-Za-z0-9._:/-]{0,99})")


def check_ci_runners(
    entries: tuple[str, ...], flavors: tuple[str, ...], where: str = "", builder: str = "a"
) -> dict[str, list[str]]:
    """ci.runners as `builder`'s labels by flavor, in the order given; ConfigError naming a
    bad entry (`where`: the config file, to say where it came from). Builder b runs where
    the FLAVOR@b entries say, else where builder a does."""
    labels: dict[str, list[str]] = {}
    second: dict[str, list[str]] = {}
    for entry in entries:
        found = _CI_RUNNER.fullmatch(entry)
        if found is None:
            raise ConfigError(
                f"{where}ci.runners: {entry!r} is not FLAVOR=LABEL or FLAVOR@b=LABEL",
                hint='One label per entry, e.g. runners = ["cuda=self-hosted", "cuda=gpu"]; a '
                "label is letters, digits and . _ : / -; FLAVOR@b=LABEL places the second "
                "builder of ci.verify.",
            )
        flavor, qualifier, label = found.groups()
        if flavor not in flavors:
            raise ConfigError(
                f"{where}ci.runners: {entry!r} names the unknown flavor {flavor!r}; "
                + did_you_mean(flavor, flavors)
                + "known: "
                + ", ".join(flavors)
            )
        into = second if qualifier == "b" else labels
        if label not in into.setdefault(flavor, []):
            into[flavor].append(label)
    if builder == "a":
        return labels
    return {flavor: second.get(flavor) or labels[flavor] for flavor in labels | second}

"""Per-flavor overrides of how the built binaries are run: `[flavors.<name>.train]`,
`.validate`, `.bench`, `.gate` and `.test` tables.

A key of such a table replaces the top-level section's value for that flavor alone (a cuda
build on a builder without GPU trains with other arguments than the cpu build), and
`args_append` adds arguments to every command of its section. A flag or environment
variable of the same top-level key still wins: it is the invocation's own choice, made for
every flavor. `Options.for_flavor` applies them; every plan of a target goes through it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orchestrator.config.declarations.kinds import Run, check_kind, to_run
from orchestrator.config.declarations.settings import SETTINGS, SETTINGS_BY_KEY, check_choice
from orchestrator.config.resolve.checks import check_run_settings, resolve_binaries
from orchestrator.config.suggest import did_you_mean
from orchestrator.errors import ConfigError

# As `FlavorSettings` holds a flavor's tables: (top-level key, value), (section, args).
Overrides = tuple[tuple[str, object], ...]
Appends = tuple[tuple[str, tuple[str, ...]], ...]
OVERRIDE_SECTIONS = ("train", "validate", "bench", "gate", "test")
ARGS_APPEND = "args_append"
APPEND_SECTIONS = ("train", "validate", "bench", "gate")
# Keys one value of which serves every flavor, with why.
SHARED_KEYS: Mapping[str, str] = {
    "train.inputs": "release.lock and the vault keep one set of inputs per release",
}


def override_keys(section: str) -> list[str]:
    """The keys a `[flavors.<name>.<section>]` table takes."""
    names = [s.name for s in SETTINGS if s.section == section and s.key not in SHARED_KEYS]
    return [*names, ARGS_APPEND] if section in APPEND_SECTIONS else names


def table_of(dotted: str) -> str:
    """ "[flavors.cuda.train]" for "flavors.cuda.train.workloads"; "" for any other key."""
    parts = dotted.split(".")
    if len(parts) == 4 and parts[0] == "flavors" and parts[2] in OVERRIDE_SECTIONS:
        return f"[flavors.{parts[1]}.{parts[2]}]"
    return ""


def flatten_override(flavor: str, section: str, table: object, path: Path) -> dict[str, object]:
    """One `[flavors.<flavor>.<section>]` table, checked, as flavors.<flavor>.<section>.<key>
    dotted keys; a wrong key or value names the table."""
    where = f"{path}: [flavors.{flavor}.{section}]"
    if not isinstance(table, dict):
        raise ConfigError(f'{where} must be a table, e.g. args_append = ["--flag"]')
    flat: dict[str, object] = {}
    allowed = override_keys(section)
    for key, value in table.items():
        dotted = f"{section}.{key}"
        target = f"flavors.{flavor}.{dotted}"
        if dotted in SHARED_KEYS:
            raise ConfigError(
                f"{where}: {key} cannot differ per flavor: {SHARED_KEYS[dotted]}",
                hint=f"Set {key} in [{section}] only.",
            )
        if key not in allowed:
            raise ConfigError(
                f"{where}: unknown key '{target}'; "
                + did_you_mean(key, allowed, f"'flavors.{flavor}.{section}.{{}}'")
                + f"[flavors.{flavor}.{section}] takes: "
                + ", ".join(sorted(allowed))
            )
        if key == ARGS_APPEND:
            flat[target] = check_kind(value, "list[str]", f"{where} {key}")
            continue
        spec = SETTINGS_BY_KEY[dotted]
        checked = check_kind(value, spec.kind, f"{where} {key}")
        flat[target] = check_choice(checked, spec, f"{where} {key}")
    return flat


def flavor_tables(values: Mapping[str, object], flavor: str) -> tuple[Overrides, Appends]:
    """One flavor's tables from the layered values, as `FlavorSettings` holds them: (top-level
    key, value) pairs and (section, args_append) pairs."""
    prefix = f"flavors.{flavor}."
    overrides: list[tuple[str, object]] = []
    appends: list[tuple[str, tuple[str, ...]]] = []
    for key, value in values.items():
        if not key.startswith(prefix) or not table_of(key):
            continue
        section, name = key.removeprefix(prefix).split(".", 1)
        if name == ARGS_APPEND:
            appends.append((section, _texts(value)))
        else:
            overrides.append((f"{section}.{name}", _as_options_hold(section, name, value)))
    return tuple(overrides), tuple(appends)


def _texts(value: object) -> tuple[str, ...]:
    return tuple(str(item) for item in value) if isinstance(value, list | tuple) else ()


def _as_options_hold(section: str, name: str, value: object) -> object:
    """A checked TOML-shaped value as `Options` holds it (no path kinds: inputs are shared)."""
    kind = SETTINGS_BY_KEY[f"{section}.{name}"].kind
    if kind == "list[run]":
        return tuple(to_run(item) for item in value) if isinstance(value, list | tuple) else ()
    if kind == "list[str]":
        return _texts(value)
    return float(value) if kind == "float" and isinstance(value, int | float) else value


def _invocation_wins(source: str) -> bool:
    """A flag or an environment variable of the top-level key beats a flavor's table."""
    return source.startswith(("env", "flag"))


def effective_values(
    values: Mapping[str, Any],
    sources: Mapping[str, str],
    overrides: Overrides,
    args_append: Appends,
) -> dict[str, Any]:
    """The `Options` attributes (by name) that a flavor's tables change, from the top-level
    `values` (attribute -> value). Runs naming the main binary become plain argument lists,
    as resolve_binaries writes them. Where [gate] names no workloads of its own the gate
    counts the [train] ones: with the gate's args_append where it has one, else with the
    train's."""
    changed: dict[str, Any] = {
        SETTINGS_BY_KEY[key].attr: value
        for key, value in overrides
        if not _invocation_wins(sources.get(key, "default"))
    }
    main = values.get("binary", "")

    def runs(attr: str, extra: tuple[str, ...] = ()) -> tuple[Run, ...]:
        found: tuple[Run, ...] = changed.get(attr, values.get(attr, ()))
        return tuple(
            Run((*run.args, *extra), "" if run.binary == main else run.binary) for run in found
        )

    appended = dict(args_append)
    if "gate" in appended:
        own = runs("gate_workloads")
        changed["gate_workloads"] = runs("gate_workloads" if own else "workloads", appended["gate"])
    for attr in ("workloads", "validate_runs", "gate_workloads"):
        if attr in changed:
            changed[attr] = runs(attr)
    if "train" in appended:
        changed["workloads"] = runs("workloads", appended["train"])
    if "validate" in appended:
        changed["validate_runs"] = runs("validate_runs", appended["validate"])
    for section, attr in (("validate", "validate_command"), ("bench", "bench_command")):
        command: tuple[str, ...] = tuple(changed.get(attr, values.get(attr, ())))
        if section in appended and command:  # empty: nothing runs, nothing to append to
            changed[attr] = (*command, *appended[section])
    return changed


def check_flavor_values(
    path: Path,
    flavor: str,
    tables: tuple[Overrides, Appends],
    values: Mapping[str, Any],
    sources: Mapping[str, str],
    *,
    where: tuple[str, Path],
) -> None:
    """The checks of the top-level `values`, made again on one flavor's effective values;
    a failure names the flavor's tables. `where`: the package name and the crate folder."""
    if not any(tables):
        return
    flavored = {**values, **effective_values(values, sources, *tables)}
    package_name, crate_dir = where
    if not flavored.get("test_enabled", True) and not flavored.get("test_reason", "").strip():
        raise ConfigError(
            f"{path}: [flavors.{flavor}.test] enabled = false needs a reason",
            hint=f'Add e.g. reason = "needs a GPU" to [flavors.{flavor}.test]; it is recorded '
            "in build.json and shown in the release summary.",
        )
    try:
        resolve_binaries(path, flavored, package_name)
        check_run_settings(path, flavored, crate_dir)
    except ConfigError as error:
        raise ConfigError(
            f"{error.message} (with the [flavors.{flavor}.*] overrides applied)", hint=error.hint
        ) from None


def override_rows(
    flavor: str,
    overrides: Overrides,
    args_append: Appends,
    sources: Mapping[str, str],
) -> list[tuple[str, object, str]]:
    """(flavors.<flavor>.<section>.<key>, value, source) of one flavor's tables, for
    `orchestrator config`; the source says when a flag or variable beats the table."""
    rows: list[tuple[str, object, str]] = []
    entries = [*overrides, *((f"{s}.{ARGS_APPEND}", v) for s, v in args_append)]
    for key, value in sorted(entries, key=lambda entry: entry[0]):
        dotted = f"flavors.{flavor}.{key}"
        source = sources.get(dotted, "default")
        top = sources.get(key, "default")
        rows.append((dotted, value, f"{source}; {top} wins" if _invocation_wins(top) else source))
    return rows

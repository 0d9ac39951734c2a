"""The CPU names a toolchain's rustc knows, recorded beside its toolchain file
(toolchains/target-cpus/<toolchain>.toml), so that a plan checks `--target-cpu` and
`[flavors.<name>] levels` without an image: `--target-cpu skylkae` fails the dry run with a
suggestion. rustc itself would only warn and build for a generic CPU.

A toolchain without a recorded list is checked later, by the toolchain-check step, which
asks the image's rustc (execute/steps/toolchain.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from orchestrator.config.resolve.crate_files import read_toml
from orchestrator.config.resources import resource_dir
from orchestrator.config.suggest import suggest
from orchestrator.errors import ConfigError

TARGET_CPUS_DIR = "target-cpus"  # under toolchains/


@dataclass(frozen=True)
class RecordedCpus:
    """`rustc --print target-cpus --target T` of one toolchain, per target."""

    path: Path
    rustc: str  # the rustc release that printed them: "1.96.0"
    targets: Mapping[str, tuple[str, ...]]


def target_cpus_file(toolchain: str, directory: Path | None = None) -> Path:
    """toolchains/target-cpus/<toolchain>.toml (`toolchain` is a checked name)."""
    return (directory or resource_dir("toolchains")) / TARGET_CPUS_DIR / f"{toolchain}.toml"


def recorded_target_cpus(toolchain: str, directory: Path | None = None) -> RecordedCpus | None:
    """The recorded list of `toolchain`, None when it has none; ConfigError if malformed."""
    path = target_cpus_file(toolchain, directory)
    if not path.is_file():
        return None
    data = read_toml(path)
    rustc = data.get("rustc")
    targets = data.get("targets")
    if set(data) != {"rustc", "targets"} or not isinstance(rustc, str) or not rustc:
        raise ConfigError(f'{path}: expected rustc = "<release>" and a [targets] table only')
    if not isinstance(targets, dict) or not targets:
        raise ConfigError(f"{path}: [targets] must map each target triple to its CPU names")
    checked: dict[str, tuple[str, ...]] = {}
    for target, cpus in targets.items():
        if not isinstance(cpus, list) or not cpus or not all(isinstance(c, str) for c in cpus):
            raise ConfigError(f"{path}: targets.{target} must be a non-empty list of CPU names")
        checked[target] = tuple(cpus)
    return RecordedCpus(path, rustc, checked)


def check_recorded_cpu(
    cpu: str,
    rust_target: str,
    toolchain: str,
    *,
    always_known: tuple[str, ...] = (),
    directory: Path | None = None,
) -> None:
    """ConfigError for a CPU the toolchain's recorded rustc does not know for `rust_target`.

    `always_known` (the flavor's names every rustc takes: x86-64-v3, native, generic) pass
    without a look; so does every CPU of a toolchain or target with no recorded list."""
    if cpu in always_known:
        return
    recorded = recorded_target_cpus(toolchain, directory)
    if recorded is None or rust_target not in recorded.targets:
        return
    known = recorded.targets[rust_target]
    if cpu in known:
        return
    meant = suggest(cpu, known)
    raise ConfigError(
        f"target-cpu {cpu!r} is not a CPU that rustc {recorded.rustc} (toolchain {toolchain}) "
        f"knows for {rust_target}" + (f"; did you mean {meant!r}?" if meant else ""),
        hint=f"rustc would only warn and build for a generic CPU. Its {len(known)} CPU names "
        f"are listed in {recorded.path}.",
    )

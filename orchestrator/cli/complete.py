"""Shell completion (`orchestrator --install-completion`): the words an option or an
argument can take, found from the flavors, the toolchain pins and the project's files.

Each function is typer's `autocompletion=` callback. They run on every Tab press, so they
never touch Docker or run git, and a project that does not resolve (no orchestrator.toml)
still completes what it can: a completion never prints an error.
"""

from __future__ import annotations

from pathlib import Path

import typer

from orchestrator.config.resolve.options import Options, resolve
from orchestrator.config.resolve.toolchains import available_toolchains
from orchestrator.errors import OrchestratorError
from orchestrator.flavors import FLAVORS
from orchestrator.host.staging import CHECKSUMS

DEFAULT_ARTIFACTS = Path("artifacts")  # build.artifacts_dir's default, for a bare folder


def _project(ctx: typer.Context) -> Options | None:
    """The project's options from what is typed so far (--config, --artifacts-dir), if
    they resolve; without git, so the default SOURCE_DATE_EPOCH is the fallback one."""
    config = ctx.params.get("config")
    artifacts = ctx.params.get("artifacts_dir")
    flags = {"build.artifacts_dir": str(artifacts) if artifacts else None}
    try:
        return resolve(config, cli=flags)
    except (OrchestratorError, OSError):
        return None


def complete_flavor() -> list[str]:
    """cpu, cuda, rocm, aarch64."""
    return list(FLAVORS)


def complete_flavor_list(incomplete: str) -> list[str]:
    """`--flavors cpu,cu<Tab>`: the last item of a comma-separated list, without repeats."""
    done, _, _ = incomplete.rpartition(",")
    chosen = done.split(",") if done else []
    prefix = f"{done}," if done else ""
    return [prefix + name for name in FLAVORS if name not in chosen]


def complete_toolchain() -> list[str]:
    """The pins in toolchains/ (rustc-web-1.96, ...)."""
    try:
        return available_toolchains()
    except OSError:
        return []


def complete_target_cpu(ctx: typer.Context) -> list[str]:
    """The CPU levels every rustc knows for the chosen flavor (all flavors when none is
    chosen yet), then the project's own `[flavors.<name>] levels`."""
    flavor = ctx.params.get("flavor")
    names = [flavor] if flavor in FLAVORS else list(FLAVORS)
    cpus = [cpu for name in names for cpu in FLAVORS[name].known_cpus]
    options = _project(ctx)
    if options is not None:
        cpus += [cpu for name in names for cpu in options.settings_for(name).levels]
    return list(dict.fromkeys(cpus))


def _shown(path: Path) -> str:
    """A path as a person would type it here: relative to the current folder if inside."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def complete_release_dir(ctx: typer.Context) -> list[str]:
    """The release folders (they hold SHA256SUMS) in the project's artifacts folder, or
    in ./artifacts outside a project. Nothing matching: the shell completes file names."""
    options = _project(ctx)
    artifacts = options.artifacts_dir if options is not None else DEFAULT_ARTIFACTS.resolve()
    try:
        releases = sorted(p for p in artifacts.iterdir() if (p / CHECKSUMS).is_file())
    except OSError:
        return []
    return [_shown(release) for release in releases]

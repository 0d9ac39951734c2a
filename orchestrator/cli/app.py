"""The typer app, its consoles, the options several commands share, and the ONE place
where an error becomes a message and an exit code.

Commands raise; they never print errors or pick exit codes themselves. `App.command`
wraps every command in `_exit_on_error`, so `orchestrator ...` and typer's test runner
see the same codes.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ParamSpec, TypeVar

import typer
from rich.console import Console

from orchestrator.config.options import Options, default_cache_dir, resolve
from orchestrator.config.settings import flag_specs
from orchestrator.errors import BuildInterruptedError, OrchestratorError
from orchestrator.host.system import git_commit_time

if TYPE_CHECKING:
    from orchestrator.supply.attest import Signer

P = ParamSpec("P")
R = TypeVar("R")

# Without a terminal (CI logs, pipes) rich would wrap tables at 80 columns.
_WIDTH = None if sys.stdout.isatty() else 200
console = Console(highlight=False, width=_WIDTH)
err_console = Console(stderr=True, highlight=False, soft_wrap=True, width=_WIDTH)


def report(error: OrchestratorError) -> None:
    err_console.print(f"[bold red]error:[/] {error.message}")
    if error.hint:
        err_console.print(f"[yellow]hint:[/] {error.hint}")


def _exit_on_error(command: Callable[P, R]) -> Callable[P, R]:
    @functools.wraps(command)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except KeyboardInterrupt:
            error: OrchestratorError = BuildInterruptedError("interrupted")
        except OrchestratorError as raised:
            error = raised
        report(error)
        raise typer.Exit(error.exit_code)

    return run


class App(typer.Typer):
    """A Typer whose commands all exit through `_exit_on_error`."""

    def command(  # type: ignore[override]
        self,
        name: str | None = None,
        **kwargs: Any,  # noqa: ANN401 - typer's own keyword options, passed through
    ) -> Callable[[Callable[P, R]], Callable[P, R]]:
        register = super().command(name, **kwargs)

        def decorator(command: Callable[P, R]) -> Callable[P, R]:
            register(_exit_on_error(command))
            return command

        return decorator


app = App(
    help=(
        "Reproducible, container-based release builds for fast Rust binaries.\n\n"
        "Typical use: `orchestrator doctor` once, then `orchestrator build --flavor cpu`. "
        "Settings come from orchestrator.toml (see `orchestrator config`), overridden by "
        "ORCHESTRATOR_* environment variables and flags."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        "-c",
        help="orchestrator.toml to use (default: search upwards "
        "from the current folder; env ORCHESTRATOR_CONFIG).",
        dir_okay=False,
    ),
]
FlavorOption = Annotated[
    str, typer.Option("--flavor", "-f", help="Flavor to build: cpu, cuda, rocm or aarch64.")
]
AllowDirtyOption = Annotated[
    bool,
    typer.Option(
        "--allow-dirty",
        help="Release from a crate with uncommitted changes (recorded in release.lock; "
        "reproduce then needs --source).",
    ),
]
_FLAGS = flag_specs()


def setting_option(key: str, **extra: Any) -> Any:  # noqa: ANN401 - typer's OptionInfo
    """The typer option of a declared setting: its flag and help come from config/settings."""
    spec = _FLAGS[key]
    return typer.Option(*spec.decls, help=spec.help, **extra)


ToolchainOption = Annotated[str | None, setting_option("build.toolchain")]
TargetCpuOption = Annotated[str | None, setting_option("build.target_cpu")]
ArtifactsOption = Annotated[Path | None, setting_option("build.artifacts_dir")]
CacheOption = Annotated[Path | None, setting_option("build.cache_dir")]


def resolve_options(config: Path | None, flags: Mapping[str, object] | None = None) -> Options:
    """Resolve options; `flags` maps dotted keys to CLI values (None: flag not given)."""
    cli = {k: str(v) if isinstance(v, Path) else v for k, v in (flags or {}).items()}
    return resolve(config, cli=cli, commit_time=git_commit_time)


def cache_root(cache_dir: Path | None) -> Path:
    return (cache_dir or default_cache_dir(os.environ)).expanduser().resolve()


def signer_for(options: Options) -> Signer:
    from orchestrator.supply.attest import resolve_signer

    signer = resolve_signer(
        options.signing_key,
        project_dir=options.project_dir,
        cache_dir=options.cache_dir,
        env=os.environ,
    )
    if signer.throwaway:
        err_console.print(
            "[bold yellow]WARNING: no signing key configured: this release is signed with a "
            f"THROWAWAY key ({signer.source}).[/] Its signatures prove integrity, not origin. "
            "Make a real key with `orchestrator keygen` and set signing.secret_key or "
            "ORCHESTRATOR_SIGNING_KEY."
        )
    return signer

"""The typer app, its consoles, the options several commands share, and the ONE place
where an error becomes a message and an exit code.

Commands raise; they never print errors or pick exit codes themselves. `App.command`
wraps every command in `_exit_on_error`, so `orchestrator ...` and typer's test runner
see the same codes.

Everything printed is plain text: the consoles interpret no rich markup and no emoji
codes, because messages carry paths, config sections (`[flavors.cpu]`) and signed
comments (`inputs:lock:...`) that markup would eat. Colour is given as a style
(`styled()`), never inside the text. Help is click's plain layout, as cargo's reads.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.text import Text
from typer import _click
from typer.core import TyperArgument, TyperCommand

from orchestrator.cli.complete import (
    complete_flavor,
    complete_target_cpu,
    complete_toolchain,
)
from orchestrator.config.declarations.flags import flag_specs
from orchestrator.config.resolve.options import Options, resolve, resolve_cache_dir
from orchestrator.errors import BuildInterruptedError, OrchestratorError, disk_full
from orchestrator.host.system import git_commit_time

if TYPE_CHECKING:
    from orchestrator.supply.attest import Signer

P = ParamSpec("P")
R = TypeVar("R")

# Without a terminal (CI logs, pipes) rich would wrap tables at 80 columns.
_WIDTH = None if sys.stdout.isatty() else 200
console = Console(highlight=False, markup=False, emoji=False, width=_WIDTH)
err_console = Console(
    stderr=True, highlight=False, markup=False, emoji=False, soft_wrap=True, width=_WIDTH
)


def styled(label: str, style: str, rest: str = "") -> Text:
    """`label` in `style`, then `rest` as plain text: "error: <message>" in a colour."""
    return Text.assemble((label, style), rest)


def report(error: OrchestratorError) -> None:
    err_console.print(styled("error:", "bold red", f" {error.message}"))
    if error.hint:
        err_console.print(styled("hint:", "yellow", f" {error.hint}"))


# Set when a command stopped on Ctrl-C, SIGTERM or SIGHUP, after its cleanup has run:
# `main` then leaves at once (see there).
INTERRUPTED = threading.Event()


def _exit_on_error(command: Callable[P, R]) -> Callable[P, R]:
    @functools.wraps(command)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except KeyboardInterrupt:
            error: OrchestratorError = BuildInterruptedError("interrupted")
            INTERRUPTED.set()
        except OrchestratorError as raised:
            error = raised
        except OSError as raised:  # a full disk is the user's to fix, not a traceback
            full = disk_full(raised)
            if full is None:
                raise
            error = full
        report(error)
        raise typer.Exit(error.exit_code)

    return run


def _argument_name(argument: TyperArgument) -> str:
    """RELEASE_DIR, [PATH] or FILE... as click and cargo write arguments (typer: {name})."""
    name = argument.metavar or (argument.name or "").upper()
    name = name if argument.required else f"[{name}]"
    return name + ("..." if argument.nargs != 1 else "")


class PlainCommand(TyperCommand):
    """A command whose help names its arguments as its usage line does: RELEASE_DIR."""

    def collect_usage_pieces(self, ctx: _click.Context) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if isinstance(param, TyperArgument):
                pieces.append(_argument_name(param))
            else:
                pieces.extend(param.get_usage_pieces(ctx))
        return pieces

    def format_options(self, ctx: _click.Context, formatter: _click.HelpFormatter) -> None:
        arguments: list[tuple[str, str]] = []
        options: list[tuple[str, str]] = []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if isinstance(param, TyperArgument):
                arguments.append((_argument_name(param), record[1]))
            else:
                options.append(record)
        for title, rows in (("Arguments", arguments), ("Options", options)):
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


def _help_names() -> dict[str, Any]:
    """Context settings giving cargo's -h beside --help (a fresh dict: click keeps it)."""
    return {"help_option_names": ["-h", "--help"]}


class App(typer.Typer):
    """A Typer whose commands all exit through `_exit_on_error`, with plain click help:
    no rich panels, whose markup would eat `[flavors.cpu]` from the help texts."""

    def __init__(self, **kwargs: Any) -> None:  # noqa: ANN401 - typer's options
        kwargs.setdefault("rich_markup_mode", None)
        kwargs.setdefault("context_settings", _help_names())
        super().__init__(**kwargs)

    def command(  # type: ignore[override]
        self,
        name: str | None = None,
        **kwargs: Any,  # noqa: ANN401 - typer's own keyword options, passed through
    ) -> Callable[[Callable[P, R]], Callable[P, R]]:
        kwargs.setdefault("cls", PlainCommand)
        kwargs.setdefault("context_settings", _help_names())
        register = super().command(name, **kwargs)

        def decorator(command: Callable[P, R]) -> Callable[P, R]:
            register(_exit_on_error(command))
            return command

        return decorator

    def group_command(
        self,
        **kwargs: Any,  # noqa: ANN401 - typer's own keyword options, passed through
    ) -> Callable[[Callable[P, R]], Callable[P, R]]:
        """The group's own command: what `orchestrator GROUP [OPTIONS]` runs when no
        subcommand is named (`release` and `release assemble`)."""
        kwargs.setdefault("invoke_without_command", True)
        kwargs.setdefault("context_settings", _help_names())
        register = super().callback(**kwargs)

        def decorator(command: Callable[P, R]) -> Callable[P, R]:
            register(_exit_on_error(command))
            return command

        return decorator


app = App(
    help=(
        "Reproducible, container-based release builds for fast Rust binaries.\n\n"
        "Typical use: `orchestrator doctor` once, then `orchestrator build --flavor cpu`. "
        "Settings come from orchestrator.toml (see `orchestrator config`), overridden by "
        "ORCHESTRATOR_* environment variables and flags. `orchestrator COMMAND --help` "
        "describes a command; exit codes are listed in docs/exit-codes.md.\n\n"
        "\b\n"
        "Examples:\n"
        "  orchestrator doctor\n"
        "  orchestrator build --flavor cpu --dry-run\n"
        "  orchestrator release && orchestrator verify artifacts/tinyllm-0.1.0\n"
        "  orchestrator --install-completion     # Tab completes flavors, CPUs, releases"
    ),
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        "-c",
        help="orchestrator.toml to use (default: search upwards "
        "from the current folder; env ORCHESTRATOR_CONFIG).",
        metavar="FILE",
        dir_okay=False,
    ),
]


def flavor_option(purpose: str) -> Any:  # noqa: ANN401 - typer's OptionInfo
    """--flavor/-f; `purpose` says what the command does with it."""
    return typer.Option(
        "--flavor",
        "-f",
        help=f"{purpose}: cpu, cuda, rocm or aarch64.",
        metavar="FLAVOR",
        autocompletion=complete_flavor,
    )


FlavorOption = Annotated[str, flavor_option("Flavor to build")]
BenchFlavorOption = Annotated[str, flavor_option("Flavor whose published build to benchmark")]


def allow_dirty_option(what: str) -> Any:  # noqa: ANN401 - typer's OptionInfo
    return typer.Option(
        "--allow-dirty",
        help=f"{what} a crate with uncommitted changes (recorded in release.lock; "
        "reproduce then needs --source).",
    )


AllowDirtyOption = Annotated[bool, allow_dirty_option("Release from")]
LockDirtyOption = Annotated[bool, allow_dirty_option("Pin the inputs of")]
_FLAGS = flag_specs()


def setting_option(
    key: str,
    purpose: str | None = None,
    **extra: Any,  # noqa: ANN401 - typer's own keyword options, passed through
) -> Any:  # noqa: ANN401 - typer's OptionInfo
    """The typer option of a declared setting: its flag, value name and help come from
    config/settings; `purpose` replaces the declared meaning for a command that uses the
    setting differently (bench's --target-cpu picks a build, it builds nothing)."""
    spec = _FLAGS[key]
    help_text = spec.help if purpose is None else spec.help_for(purpose)
    return typer.Option(*spec.decls, help=help_text, metavar=spec.metavar, **extra)


ToolchainOption = Annotated[
    str | None, setting_option("build.toolchain", autocompletion=complete_toolchain)
]
TargetCpuOption = Annotated[
    str | None, setting_option("build.target_cpu", autocompletion=complete_target_cpu)
]
BenchTargetCpuOption = Annotated[
    str | None,
    setting_option(
        "build.target_cpu",
        "the -Ctarget-cpu of the published build to benchmark",
        autocompletion=complete_target_cpu,
    ),
]
ArtifactsOption = Annotated[Path | None, setting_option("build.artifacts_dir")]
CacheOption = Annotated[Path | None, setting_option("build.cache_dir")]


def resolve_options(config: Path | None, flags: Mapping[str, object] | None = None) -> Options:
    """Resolve options; `flags` maps dotted keys to CLI values (None: flag not given)."""
    cli = {k: str(v) if isinstance(v, Path) else v for k, v in (flags or {}).items()}
    return resolve(config, cli=cli, commit_time=git_commit_time)


def cache_root(cache_dir: Path | None) -> Path:
    """The cache of a command without a config: --cache-dir, else its declared variables."""
    return resolve_cache_dir(os.environ, cache_dir)


def sign_release_index(release_dir: Path, signer: Signer, *, vouched: tuple[str, ...] = ()) -> None:
    """Sign the release index again over what the last signature vouches for and what this
    command wrote (`vouched`); say loudly what was left out and why."""
    from orchestrator.execute.ship.release_index import update_release_index

    signed = update_release_index(release_dir, signer, vouched=vouched)
    for entry in signed.left_out:
        err_console.print(styled("warning:", "yellow bold", f" not signed again: {entry}"))


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
            styled(
                "WARNING: no signing key configured: this release is signed with a "
                f"THROWAWAY key ({signer.source}).",
                "bold yellow",
                " Its signatures prove integrity, not origin. Make a real key with "
                "`orchestrator keygen` and set signing.secret_key or ORCHESTRATOR_SIGNING_KEY.",
            )
        )
    return signer

"""The `orchestrator` command line: parse, call, print. Thin: errors become exit codes in
one place (cli/app.py), and each command group lives in a module of its own."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from orchestrator import __version__

# `--help` lists the commands in the order they are registered: build, then bench.
from orchestrator.cli import build  # isort: split

from orchestrator.cli import (
    assemble,
    bench,
    ci,
    images,
    lock,
    maintain,
    release,
    reproduce,
    signing,
)
from orchestrator.cli.app import INTERRUPTED, app, console, err_console
from orchestrator.host.signals import stop_on_signals

__all__ = [
    "app",
    "assemble",
    "bench",
    "build",
    "ci",
    "images",
    "lock",
    "main",
    "maintain",
    "release",
    "reproduce",
    "signing",
]


def _version_callback(value: bool) -> None:
    if value:
        console.print(f"orchestrator {__version__}")
        raise typer.Exit


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version_callback, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """Reproducible, container-based release builds for fast Rust binaries."""


def main() -> None:
    stop_on_signals()  # SIGTERM (CI, docker stop, systemd) and SIGHUP act like Ctrl-C
    try:
        app()
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)
    except SystemExit as leaving:
        if not INTERRUPTED.is_set():
            raise
        # The stop was handled: containers, volumes and staging are gone and the error is
        # printed. Interpreter shutdown could still wait on the Docker exec stream the stop
        # cut short (the daemon may never close it; seen once in CI: 10 minutes), so leave
        # without it.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(leaving.code if isinstance(leaving.code, int) else 130)

"""`orchestrator keygen` and `orchestrator verify`: keys and the checks of a release."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from orchestrator.cli.app import (
    app,
    console,
)
from orchestrator.errors import (
    ConfigError,
)

DEFAULT_KEY = Path("~/.config/orchestrator/signing.key")


@app.command()
def keygen(
    path: Annotated[
        Path, typer.Argument(help="Where to write the secret key; KEY.pub is written next to it.")
    ] = DEFAULT_KEY,
    unencrypted: Annotated[
        bool,
        typer.Option(
            "--unencrypted", help="Do not encrypt the secret key (CI only; protect it otherwise)."
        ),
    ] = False,
) -> None:
    """Make an Ed25519 key pair in minisign's format for signing releases.

    The passphrase comes from ORCHESTRATOR_SIGNING_PASSPHRASE or is asked for. Keys inside a
    repository are refused.

    Example: orchestrator keygen ~/.config/orchestrator/signing.key
    """
    from orchestrator.supply.attest import keygen as make_key

    passphrase: str | None = None
    if not unencrypted:
        passphrase = os.environ.get("ORCHESTRATOR_SIGNING_PASSPHRASE")
        if passphrase is None:
            if not sys.stdin.isatty():
                raise ConfigError(
                    "no passphrase: set ORCHESTRATOR_SIGNING_PASSPHRASE or run in a terminal",
                    hint="Or pass --unencrypted for a CI key you protect otherwise.",
                )
            passphrase = typer.prompt("passphrase", hide_input=True, confirmation_prompt=True)
    public = make_key(path, passphrase=passphrase, cwd=Path.cwd())
    console.print(
        f"secret key: {path.expanduser()} ({'unencrypted' if unencrypted else 'encrypted'})"
    )
    console.print(f"public key: {public}")
    console.print(f"use it:     export ORCHESTRATOR_SIGNING_KEY={path.expanduser()}")


@app.command()
def verify(
    release_dir: Annotated[
        Path, typer.Argument(help="artifacts/<name>-<version>/", exists=True, file_okay=False)
    ],
    key: Annotated[
        Path | None,
        typer.Option(
            "--key",
            "-k",
            help="The publisher's minisign "
            "public key (default: the release's own minisign.pub: integrity only).",
            exists=True,
            dir_okay=False,
        ),
    ] = None,
) -> None:
    """Check a release offline: signatures, checksums, provenance subjects, SBOMs.

    Example: orchestrator verify artifacts/tinyllm-0.1.0 --key signing.pub
    """
    from orchestrator.supply.minisign import VerificationError
    from orchestrator.supply.verify import verify_release

    checks, key_note = verify_release(release_dir, key)
    table = Table(
        "file", "check", "result", "detail", title=f"{release_dir.resolve()} against {key_note}"
    )
    for check in checks:
        table.add_row(
            check.file, check.check, "[green]ok[/]" if check.ok else "[red]FAILED[/]", check.detail
        )
    console.print(table)
    failed = [c for c in checks if not c.ok]
    if failed:
        raise VerificationError(
            f"{len(failed)} check(s) failed: "
            + "; ".join(f"{c.file} ({c.check}): {c.detail}" for c in failed),
            hint="Do not use these files: they are not what was signed.",
        )
    console.print(f"[green]all {len(checks)} checks passed[/]")

"""`orchestrator keygen` and `orchestrator verify`: keys and the checks of a release."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table
from rich.text import Text

from orchestrator.cli.app import (
    app,
    console,
)
from orchestrator.cli.complete import complete_release_dir
from orchestrator.cli.output import emit_json, json_option
from orchestrator.errors import (
    ConfigError,
)

if TYPE_CHECKING:
    from orchestrator.supply.verify import Check

DEFAULT_KEY = Path("~/.config/orchestrator/signing.key")


@app.command()
def keygen(
    path: Annotated[
        Path,
        typer.Argument(
            help="Where to write the secret key. The public key goes beside it, with .pub "
            "in place of KEY's suffix: signing.key -> signing.pub.",
            metavar="KEY",
        ),
    ] = DEFAULT_KEY,
    unencrypted: Annotated[
        bool,
        typer.Option(
            "--unencrypted", help="Do not encrypt the secret key (CI only; protect it otherwise)."
        ),
    ] = False,
) -> None:
    """Make an Ed25519 key pair in minisign's format for signing releases.

    The passphrase comes from ORCHESTRATOR_SIGNING_PASSPHRASE or is asked for. A KEY inside
    a git repository (wherever this runs from) is refused.

    \b
    Examples:
      orchestrator keygen ~/.config/orchestrator/signing.key
      orchestrator keygen --unencrypted ~/ci/signing.key     # CI only
    """
    from orchestrator.supply.attest import check_key_destination
    from orchestrator.supply.attest import keygen as make_key

    if path.suffix == ".pub":  # its public key would be written over it
        raise ConfigError(
            f"{path} ends in .pub, the name its public key would get",
            hint="Name the secret key e.g. signing.key; keygen then writes signing.pub.",
        )
    check_key_destination(path)  # before asking for a passphrase
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
    public = make_key(path, passphrase=passphrase)
    console.print(
        f"secret key: {path.expanduser()} ({'unencrypted' if unencrypted else 'encrypted'})"
    )
    console.print(f"public key: {public}")
    console.print(f"use it:     export ORCHESTRATOR_SIGNING_KEY={path.expanduser()}")
    console.print(f"verify:     orchestrator verify artifacts/<name>-<version> --key {public}")


@app.command()
def verify(
    release_dir: Annotated[
        Path,
        typer.Argument(
            help="The release folder: artifacts/<name>-<version>/.",
            metavar="RELEASE_DIR",
            exists=True,
            file_okay=False,
            autocompletion=complete_release_dir,
        ),
    ],
    key: Annotated[
        Path | None,
        typer.Option(
            "--key",
            "-k",
            help="The publisher's minisign "
            "public key (default: the release's own minisign.pub: integrity only).",
            metavar="FILE",
            exists=True,
            dir_okay=False,
        ),
    ] = None,
    json_output: Annotated[bool, json_option("orchestrator/verify")] = False,
) -> None:
    """Check a release offline: signatures, checksums, provenance subjects, SBOMs.

    \b
    Examples:
      orchestrator verify artifacts/tinyllm-0.1.0 --key signing.pub
      orchestrator verify artifacts/tinyllm-0.1.0     # integrity only: its own key
    """
    from orchestrator.supply.minisign import VerificationError
    from orchestrator.supply.verify import verify_release

    checks, key_note = verify_release(release_dir, key)
    failed = [c for c in checks if not c.ok]
    if json_output:  # a failure still exits 48 after the document, its error on stderr
        from orchestrator.model.documents.reports import VerifyCheck, VerifyReport

        emit_json(
            VerifyReport(
                release_dir=str(release_dir.resolve()),
                key=str(key) if key else None,
                integrity_only=key is None,
                passed=not failed,
                failed=len(failed),
                checks=[
                    VerifyCheck(file=c.file, check=c.check, ok=c.ok, detail=c.detail)
                    for c in checks
                ],
            )
        )
    else:
        _print_checks(checks, f"{release_dir.resolve()} against {key_note}")
    if failed:
        raise VerificationError(
            f"{len(failed)} check(s) failed: "
            + "; ".join(f"{c.file} ({c.check}): {c.detail}" for c in failed),
            hint="Do not use these files: they are not what was signed.",
        )
    if not json_output:
        console.print(f"all {len(checks)} checks passed", style="green")


def _print_checks(checks: Sequence[Check], title: str) -> None:
    table = Table("file", "check", "result", "detail", title=title)
    for check in checks:
        result = Text("ok", "green") if check.ok else Text("FAILED", "red")
        table.add_row(check.file, check.check, result, check.detail)
    console.print(table)

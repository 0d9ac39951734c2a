"""`orchestrator reproduce` and `orchestrator vault`: rebuild a release from its pins."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from orchestrator.cli.app import (
    App,
    CacheOption,
    app,
    cache_root,
    console,
    err_console,
    styled,
)
from orchestrator.cli.complete import complete_release_dir

vault_app = App(
    help="The package vault: every .deb, rootfs, crate archive and profile of a release, "
    "by sha256, under <cache>/vault.\n\n"
    "\b\n"
    "Examples:\n"
    "  orchestrator vault export artifacts/tinyllm-0.1.0 tinyllm-0.1.0-vault.tar\n"
    "  orchestrator vault import tinyllm-0.1.0-vault.tar     # on the rebuilding machine",
    no_args_is_help=True,
)
app.add_typer(vault_app, name="vault")


@vault_app.command("export")
def vault_export(
    release_dir: Annotated[
        Path,
        typer.Argument(
            help="The release folder (has release.lock).",
            metavar="RELEASE_DIR",
            autocompletion=complete_release_dir,
        ),
    ],
    archive: Annotated[Path, typer.Argument(help="The .tar to write.", metavar="ARCHIVE")],
    cache_dir: CacheOption = None,
) -> None:
    """Write one archive with a release's lockfile and every input it names.

    \b
    Examples:
      orchestrator vault export artifacts/tinyllm-0.1.0 tinyllm-0.1.0-vault.tar
    """
    from orchestrator.host.vault import Vault, VaultError
    from orchestrator.model.documents.lockfile import LOCK_FILE, blobs, read_lock

    document = read_lock(release_dir / LOCK_FILE)
    vault = Vault(cache_root(cache_dir) / "vault")
    missing = [what for digest, what in blobs(document).items() if not vault.has(digest)]
    if missing:
        raise VaultError(f"the vault lacks {len(missing)} input(s): {', '.join(missing[:5])}")
    count = vault.export(blobs(document), archive, lockfile=release_dir / LOCK_FILE)
    console.print(f"wrote {archive}: {count} files, {archive.stat().st_size / 1e6:.0f} MB")


@vault_app.command("import")
def vault_import(
    archive: Annotated[
        Path,
        typer.Argument(help="An archive from `orchestrator vault export`.", metavar="ARCHIVE"),
    ],
    cache_dir: CacheOption = None,
    lockfile: Annotated[
        Path | None,
        typer.Option("--lockfile", help="Also write the archive's lockfile here.", metavar="FILE"),
    ] = None,
) -> None:
    """Take a release's inputs into this machine's vault, each checked against its sha256.

    \b
    Examples:
      orchestrator vault import tinyllm-0.1.0-vault.tar
      orchestrator vault import tinyllm-0.1.0-vault.tar --lockfile release.lock
    """
    from orchestrator.host.vault import Vault

    vault = Vault(cache_root(cache_dir) / "vault")
    imported = vault.import_archive(archive, lockfile)
    console.print(f"imported {len(imported)} files into {vault.root}")


@app.command()
def reproduce(
    release: Annotated[
        Path,
        typer.Argument(
            help="A release folder (with release.lock) or a lockfile.",
            metavar="RELEASE",
            autocompletion=complete_release_dir,
        ),
    ],
    source: Annotated[
        Path | None,
        typer.Option(
            "--source",
            help="The crate's sources (default: `git archive` of the locked commit).",
            metavar="DIR",
        ),
    ] = None,
    workdir: Annotated[
        Path | None,
        typer.Option(
            "--workdir",
            help="Where to rebuild (default: <release>.reproduce next to it). Removed and "
            "made afresh only if an earlier reproduce made it; any other non-empty folder is "
            "refused (exit 12).",
            metavar="DIR",
        ),
    ] = None,
    cache_dir: CacheOption = None,
    reuse_images: Annotated[
        bool,
        typer.Option("--reuse-images", help="Use existing images of the same input hash (faster)."),
    ] = False,
    artifact: Annotated[
        list[str] | None,
        typer.Option(
            "--artifact", help="Only this artifact (repeatable); default: all.", metavar="NAME"
        ),
    ] = None,
    key: Annotated[
        Path | None,
        typer.Option(
            "--key",
            help="The publisher's minisign public key: the lockfile must match the SHA256SUMS "
            "it signed (default: the release's own minisign.pub, which proves integrity only).",
            metavar="FILE",
        ),
    ] = None,
    trust_unsigned: Annotated[
        bool,
        typer.Option(
            "--trust-unsigned",
            help="Rebuild a lockfile that no signature covers (a signed one must still match).",
        ),
    ] = False,
    engine: Annotated[
        str | None,
        typer.Option(
            "--engine",
            help="Rebuild on the Docker Engine of this Docker context (default: the current "
            "one); the lock says which engine built each artifact, so this proves the bytes "
            "do not depend on it.",
            metavar="CONTEXT",
        ),
    ] = None,
) -> None:
    """Rebuild every artifact of a release from its lockfile alone, offline; compare bytes.

    First the lockfile is checked against the release's signed SHA256SUMS (exit 48 when
    it was edited, 61 when nothing signed it); nothing is built from a lock that fails.

    The sources go to a fresh folder, the cache is seeded from the vault only, images are
    rebuilt from the vaulted .debs, and no step may download anything. Prints expected and
    actual sha256 per artifact; on a difference, writes a diffoscope report next to the
    rebuilt binary and names the recorded inputs that differ. Exit 0 only if every
    artifact is bit-identical; 55 when bytes differ; when a target could not be rebuilt,
    the code of its error (e.g. 51 for a missing vault blob; the first such target's).

    \b
    Examples:
      orchestrator reproduce artifacts/tinyllm-0.1.0
      orchestrator reproduce artifacts/tinyllm-0.1.0 --key publisher.pub
      orchestrator reproduce artifacts/tinyllm-0.1.0/release.lock --reuse-images
      orchestrator reproduce artifacts/tinyllm-0.1.0 --engine build-box-2
    """
    from orchestrator.errors import SourceError
    from orchestrator.host.cachedir import ensure_cache_dir, prepare_workdir
    from orchestrator.host.vault import Vault
    from orchestrator.model.documents.lockfile import LOCK_FILE
    from orchestrator.release.lock.reproduce import ReproduceMismatchError, read_locked
    from orchestrator.release.lock.reproduce import reproduce as run_reproduce
    from orchestrator.runtime.contexts import resolve_contexts
    from orchestrator.runtime.engine import Engine
    from orchestrator.supply.attest import resolve_signer
    from orchestrator.supply.lock_trust import authenticate_lock

    endpoint = resolve_contexts([engine])[0] if engine else None
    release = release.resolve()
    if source is not None and not (source / "Cargo.toml").is_file():
        raise SourceError(
            f"--source {source}: no Cargo.toml there",
            hint="Pass the folder of the crate the release was built from.",
        )
    folder = release if release.is_dir() else release.parent
    # Its folder resolved, the work folder itself not: a symlink there is refused, never
    # followed (prepare_workdir).
    chosen = (workdir or folder.with_name(folder.name + ".reproduce")).expanduser().absolute()
    named = chosen.name not in ("", "..")  # `/`, `x/..` name no folder of their own
    workdir = chosen.parent.resolve() / chosen.name if named else chosen.resolve()
    cache = cache_root(cache_dir)
    vault = Vault(cache / "vault")
    # Every input is read and checked before anything is written or Docker is asked, the
    # lockfile's signature first: a lock edited after publication builds nothing.
    lock_path = release / LOCK_FILE if release.is_dir() else release
    if lock_path.is_file():  # a missing one is read_locked's error, with its hint
        trust = authenticate_lock(lock_path, key, trust_unsigned=trust_unsigned)
        if trust.origin_checked:
            console.print(trust.note, soft_wrap=True)
        else:
            err_console.print(styled("warning:", "yellow bold", f" {trust.note}"))
    document = read_locked(release, vault, artifact or ())
    prepare_workdir(workdir)  # refuses a folder it did not make
    ensure_cache_dir(cache)
    signer = resolve_signer(None, project_dir=workdir, cache_dir=cache, env={})
    results = run_reproduce(
        document,
        folder,
        connect=lambda: Engine.connect(endpoint),
        vault=vault,
        console=console,
        signer=signer,
        workdir=workdir,
        source_dir=source.resolve() if source else None,
        fresh_images=not reuse_images,
        announce=console.print,
    )
    table = Table("artifact", "expected", "got", "identical", "time", "error", title="reproduction")
    for result in results:
        failure = result.exception
        table.add_row(
            result.artifact,
            result.expected[:16],
            result.got[:16] or "-",
            Text("yes", "green") if result.identical else Text("NO", "red"),
            f"{result.seconds:.0f}s"
            + ("" if result.expected_seconds is None else f" (~{result.expected_seconds:.0f}s)"),
            f"{type(failure).__name__} (exit {failure.exit_code})" if failure else "-",
        )
    console.print(table)
    (workdir / "reproduce.json").write_text(
        json.dumps([r.as_dict() for r in results], indent=2) + "\n"
    )
    for result in results:
        differing = [f"{name} is not bit-identical" for name in result.others_differing]
        for line in [result.error, *result.inputs_differing, *differing]:
            if line:
                err_console.print(styled(f"{result.artifact}:", "yellow", f" {line}"))
        if result.report:
            err_console.print(
                styled(f"{result.artifact}:", "yellow", f" diffoscope report: {result.report}")
            )
    failure = next((r.exception for r in results if r.exception is not None), None)
    if failure is not None:  # not compared at all: that error's own message and exit code
        raise failure
    different = [r.artifact for r in results if not r.identical]
    if different:
        raise ReproduceMismatchError(
            f"{len(different)} of {len(results)} artifacts differ: " + ", ".join(different)
        )
    console.print(
        "the artifact is bit-identical"
        if len(results) == 1
        else f"all {len(results)} artifacts are bit-identical"
    )

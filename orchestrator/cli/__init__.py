"""The `orchestrator` command line: parse, call, print, map errors to exit codes. Thin."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from orchestrator import __version__
from orchestrator.config.options import Options, resolve
from orchestrator.errors import (
    BuildInterruptedError,
    ConfigError,
    DoctorBlockerError,
    OrchestratorError,
)

if TYPE_CHECKING:
    from orchestrator.supply.attest import Signer

app = typer.Typer(
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
# Without a terminal (CI logs, pipes) rich would wrap tables at 80 columns.
_WIDTH = None if sys.stdout.isatty() else 200
console = Console(highlight=False, soft_wrap=True, width=_WIDTH)
err_console = Console(stderr=True, highlight=False, width=_WIDTH)

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
ToolchainOption = Annotated[
    str | None,
    typer.Option(
        "--toolchain",
        help="Pinned toolchain from toolchains/ "
        "(default rustc-web-1.96; env ORCHESTRATOR_TOOLCHAIN).",
    ),
]
TargetCpuOption = Annotated[
    str | None,
    typer.Option(
        "--target-cpu", help="rustc -Ctarget-cpu (default x86-64-v2; env ORCHESTRATOR_TARGET_CPU)."
    ),
]
ArtifactsOption = Annotated[
    Path | None,
    typer.Option(
        "--artifacts-dir",
        help="Where releases are published (default ./artifacts; env ORCHESTRATOR_ARTIFACTS_DIR).",
    ),
]
DEFAULT_KEY = Path("~/.config/orchestrator/signing.key")
CacheOption = Annotated[
    Path | None,
    typer.Option(
        "--cache-dir",
        help="Host cache for rootfs, .debs and crates "
        "(default ~/.cache/orchestrator; env ORCHESTRATOR_CACHE_DIR).",
    ),
]


def _resolve(config: Path | None, flags: Mapping[str, object] | None = None) -> Options:
    """Resolve options; `flags` maps dotted keys to CLI values (None: flag not given)."""
    cli = {k: str(v) if isinstance(v, Path) else v for k, v in (flags or {}).items()}
    from orchestrator.host.system import git_commit_time

    return resolve(config, cli=cli, commit_time=git_commit_time)


def _fail(error: OrchestratorError) -> typer.Exit:
    err_console.print(f"[bold red]error:[/] {error.message}")
    if error.hint:
        err_console.print(f"[yellow]hint:[/] {error.hint}")
    return typer.Exit(error.exit_code)


@app.command()
def build(
    flavor: FlavorOption = "cpu",
    config: ConfigOption = None,
    toolchain: ToolchainOption = None,
    target_cpu: TargetCpuOption = None,
    artifacts_dir: ArtifactsOption = None,
    cache_dir: CacheOption = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the plan; build nothing.")
    ] = False,
    keep_containers: Annotated[
        bool, typer.Option("--keep-containers", help="Leave build containers behind for debugging.")
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose", "-v", help="Stream every command's output, not only the step lines."
        ),
    ] = False,
    pgo: Annotated[
        bool | None,
        typer.Option("--pgo/--no-pgo", help="Profile-guided optimization (default on)."),
    ] = None,
    bolt: Annotated[
        bool | None,
        typer.Option("--bolt/--no-bolt", help="BOLT post-link optimization (default on)."),
    ] = None,
    bolt_mode: Annotated[
        str | None,
        typer.Option(
            "--bolt-mode",
            help="How to profile for BOLT: auto (best available), lbr, sample, instrument.",
        ),
    ] = None,
    bolt_policy: Annotated[
        str | None,
        typer.Option(
            "--bolt-policy",
            help="If BOLT fails: fallback (ship the PGO binary, loudly) or require (fail).",
        ),
    ] = None,
    privileged: Annotated[
        bool | None,
        typer.Option(
            "--privileged/--no-privileged",
            help="Let the profiling container ask for perf access (--no-privileged: never; "
            "BOLT then uses instrumentation).",
        ),
    ] = None,
    retrain: Annotated[
        bool,
        typer.Option("--retrain", help="Profile again even when a stored profile matches."),
    ] = False,
) -> None:
    """Build, test, optimize (PGO, BOLT), validate and publish one flavor into artifacts/.

    Examples:
      orchestrator build --flavor cpu --target-cpu x86-64-v3
      orchestrator build --bolt-mode instrument --bolt-policy require
      orchestrator build --no-pgo --no-bolt     # the plain release profile only
    """
    from orchestrator.execute.build import prepare_plan, run_build
    from orchestrator.progress import Reporter
    from orchestrator.runtime.engine import Engine

    try:
        options = _resolve(
            config,
            {
                "build.toolchain": toolchain,
                "build.target_cpu": target_cpu,
                "build.artifacts_dir": artifacts_dir,
                "build.cache_dir": cache_dir,
                "pgo.enabled": pgo,
                "bolt.enabled": bolt,
                "bolt.mode": bolt_mode,
                "bolt.policy": bolt_policy,
                "profiling.privileges": privileged,
            },
        )
        plan = prepare_plan(options, flavor)
        if dry_run:
            console.print_json(json.dumps(plan.summary()))
            return
        engine = Engine.connect()
        stale = engine.remove_stale_containers() + engine.remove_stale_volumes()
        if stale:
            console.print(f"removed {stale} container(s)/volume(s) left by an earlier run")
        signer = _signer(options)
        reporter = Reporter(console, options.cache_dir / "runs" / engine.session, verbose=verbose)
        console.print(
            f"building {options.binary} {options.version} ({flavor}, "
            f"{plan.toolchain.name}, target-cpu {plan.target_cpu}); "
            f"logs: {reporter.log_dir}"
        )
        try:
            outcome = run_build(
                options,
                plan,
                engine,
                reporter,
                signer=signer,
                keep_containers=keep_containers,
                retrain=retrain,
            )
        except KeyboardInterrupt:
            raise BuildInterruptedError("interrupted") from None
    except OrchestratorError as error:
        raise _fail(error) from None
    console.print(f"[bold green]published[/] {outcome.artifact}")
    console.print(f"  binary  {outcome.binary}")
    console.print(f"  verify  cd {outcome.artifact} && sha256sum -c SHA256SUMS")


@app.command()
def bench(
    flavor: FlavorOption = "cpu",
    config: ConfigOption = None,
    target_cpu: TargetCpuOption = None,
    artifacts_dir: ArtifactsOption = None,
    cache_dir: CacheOption = None,
    runs: Annotated[
        int | None,
        typer.Option("--runs", min=2, help="Timed runs per variant (default bench.runs, 10)."),
    ] = None,
    warmup: Annotated[
        int | None,
        typer.Option(
            "--warmup", min=0, help="Untimed runs per variant first (default bench.warmup, 2)."
        ),
    ] = None,
) -> None:
    """Benchmark a built flavor: plain cargo, release profile, +PGO, +PGO+BOLT, side by side.

    Runs are interleaved (A B C D A B C D ...) in one container of the build's image pinned
    to one CPU. Writes bench.json, bench.md, bench.png and hyperfine.json under
    artifacts/<release>/bench/<artifact>/.

    Example: orchestrator build && orchestrator bench --runs 20
    """
    from orchestrator.execute.bench import bench_cpu, locate, measure, write_report
    from orchestrator.runtime.engine import Engine

    try:
        options = _resolve(
            config,
            {
                "build.target_cpu": target_cpu,
                "build.artifacts_dir": artifacts_dir,
                "build.cache_dir": cache_dir,
                "bench.runs": runs,
                "bench.warmup": warmup,
            },
        )
        if not options.bench_command:
            raise ConfigError(
                "bench.command is empty: nothing to benchmark",
                hint='Set [bench] command = ["bench"] (arguments for the binary).',
            )
        setup = locate(options, flavor)
        engine = Engine.connect()
        cpu = bench_cpu(engine)
        console.print(
            f"benchmarking {setup.artifact.name}: `{' '.join(options.bench_command)}`, "
            f"{options.bench_runs} runs after {options.bench_warmup} warm-up, CPU {cpu}"
        )
        stats = measure(
            engine,
            setup,
            options.bench_command,
            runs=options.bench_runs,
            warmup=options.bench_warmup,
            cpu=cpu,
            progress=console.print,
        )
        output = write_report(
            setup,
            stats,
            options.bench_command,
            cpu=cpu,
            runs=options.bench_runs,
            warmup=options.bench_warmup,
        )
    except OrchestratorError as error:
        raise _fail(error) from None
    table = Table(
        "variant",
        "median",
        "p95",
        "speedup (95% CI)",
        "max RSS",
        "size",
        title=f"{setup.artifact.name}: {' '.join(options.bench_command)}",
    )
    for s in stats:
        table.add_row(
            s.name,
            f"{s.median * 1000:.1f} ms",
            f"{s.p95 * 1000:.1f} ms",
            f"{s.speedup:.3f}x ({s.speedup_ci[0]:.3f}-{s.speedup_ci[1]:.3f})",
            f"{s.max_rss_kb / 1024:.1f} MiB",
            f"{s.size / 1e6:.2f} MB",
        )
    console.print(table)
    console.print(f"report: {output}")


def _signer(options: Options) -> Signer:
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


@app.command()
def release(
    config: ConfigOption = None,
    flavors: Annotated[
        str | None,
        typer.Option(
            "--flavors", help="Comma-separated flavors (default: build.flavors from the config)."
        ),
    ] = None,
    artifacts_dir: ArtifactsOption = None,
    cache_dir: CacheOption = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run", help="Print the plan (targets, images, steps, cache hits); build nothing."
        ),
    ] = False,
    bench_runs: Annotated[
        int,
        typer.Option(
            "--bench-runs",
            min=0,
            help="Quick interleaved runs per target for the speedup column (0: skip).",
        ),
    ] = 3,
    retrain: Annotated[bool, typer.Option("--retrain", help="Profile again everywhere.")] = False,
    allow_dirty: AllowDirtyOption = False,
) -> None:
    """Build every flavor and CPU level of the release, then one summary.

    Targets come from build.flavors and each flavor's levels (e.g. [flavors.cpu] levels =
    ["x86-64-v2", "x86-64-v3"]). A failed target does not stop the others; the exit code
    is 0 only if all succeeded. Writes release.json next to the artifacts, and
    release.lock, which pins every input (their files go into the vault) so that
    `orchestrator reproduce` can rebuild the same bytes.

    Examples:
      orchestrator release --dry-run
      orchestrator release --flavors cpu --bench-runs 0
    """
    from orchestrator.model.layout import release_dir_name
    from orchestrator.release.reproduce import record_release, vault_for
    from orchestrator.release.run import ReleaseIncompleteError, run_release, targets
    from orchestrator.release.run import dry_run as plan_release
    from orchestrator.runtime.engine import Engine
    from orchestrator.supply.attest import update_release_index

    try:
        options = _resolve(
            config, {"build.artifacts_dir": artifacts_dir, "build.cache_dir": cache_dir}
        )
        names = [f for f in flavors.split(",") if f] if flavors else list(options.flavors)
        chosen = targets(options, names)
        if dry_run:
            try:
                engine: Engine | None = Engine.connect()
            except OrchestratorError:
                engine = None  # the plan needs no Docker; cache hits then say "unknown"
            table = Table(
                "target",
                "artifact",
                "image",
                "cached",
                "steps",
                title="release plan (nothing is built)",
            )
            for item in plan_release(options, chosen, engine):
                hits = ", ".join(k for k, v in item.cached.items() if v) or "nothing"
                table.add_row(
                    f"{item.target.flavor} {item.target.level}",
                    item.plan.artifact_dir,
                    item.plan.image.reference,
                    hits if engine else f"{hits} (Docker not reachable)",
                    " ".join(s.name for s in item.plan.steps),
                )
            console.print(table)
            return
        _refuse_dirty(options, allow_dirty=allow_dirty)
        release_dir = options.artifacts_dir / release_dir_name(options.binary, options.version)
        engine = Engine.connect()
        signer = _signer(options)
        results = run_release(
            options,
            chosen,
            engine,
            console,
            signer,
            retrain=retrain,
            bench_runs=bench_runs,
            announce=console.print,
        )
        if any(r.status == "ok" for r in results):
            lock = record_release(options, chosen, release_dir, vault_for(options))
            update_release_index(release_dir, signer)  # SHA256SUMS now covers the lock
            console.print(f"pinned every input in {lock} (files in {vault_for(options).root})")
    except KeyboardInterrupt:
        raise _fail(BuildInterruptedError("interrupted")) from None
    except OrchestratorError as error:
        raise _fail(error) from None
    table = Table(
        "target",
        "status",
        "time",
        "size",
        "speedup",
        "notes",
        title=f"release {options.binary} {options.version}",
    )
    for result in results:
        status = "[green]ok[/]" if result.status == "ok" else f"[red]{result.status}[/]"
        table.add_row(
            result.artifact,
            status,
            f"{result.seconds:.0f}s",
            f"{result.size / 1e6:.2f} MB" if result.size else "-",
            f"{result.speedup:.3f}x" if result.speedup else "-",
            "; ".join([result.error, *result.warnings]).strip("; "),
        )
    console.print(table)
    for result in results:
        for warning in result.warnings:
            err_console.print(f"[bold yellow]warning:[/] {result.artifact}: {warning}")
    failed = [r.artifact for r in results if r.status != "ok"]
    if failed:
        raise _fail(
            ReleaseIncompleteError(
                f"{len(failed)} of {len(results)} targets failed: " + ", ".join(failed)
            )
        )


def _refuse_dirty(options: Options, *, allow_dirty: bool) -> None:
    from orchestrator.errors import SourceError
    from orchestrator.execute.inventory import source_identity

    if source_identity(options.crate_dir).get("dirty") and not allow_dirty:
        raise SourceError(
            f"{options.crate_dir} has uncommitted changes: the release could not be "
            "reproduced from its git commit",
            hint="Commit them, or pass --allow-dirty (release.lock records it).",
        )


@app.command()
def lock(
    config: ConfigOption = None,
    artifacts_dir: ArtifactsOption = None,
    cache_dir: CacheOption = None,
    check: Annotated[
        bool,
        typer.Option(
            "--check", help="Only compare release.lock with the config and sources (exit 54)."
        ),
    ] = False,
    allow_dirty: AllowDirtyOption = False,
) -> None:
    """Pin every input of the published release into release.lock and the vault.

    `orchestrator release` does this itself; run `lock` to re-pin a release built target
    by target with `orchestrator build`. The lockfile (JSON, schema orchestrator/lock@1)
    records the rootfs, every Debian package of every image (name, version, architecture,
    sha256), toolchain versions as the tools reported them, the git commit, Cargo.lock and
    vendored crates, every flag and environment variable, and the profiles by sha256.

    Examples:
      orchestrator lock
      orchestrator lock --check      # in CI: has anything drifted from the lock?
    """
    from orchestrator.model.layout import release_dir_name
    from orchestrator.model.lockfile import LOCK_FILE, LockDriftError, read_lock
    from orchestrator.release.reproduce import check_lock, record_release, vault_for
    from orchestrator.release.run import targets
    from orchestrator.supply.attest import update_release_index

    try:
        options = _resolve(
            config, {"build.artifacts_dir": artifacts_dir, "build.cache_dir": cache_dir}
        )
        release_dir = options.artifacts_dir / release_dir_name(options.binary, options.version)
        chosen = targets(options, list(options.flavors))
        if check:
            changes = check_lock(options, read_lock(release_dir / LOCK_FILE), chosen)
            if changes:
                for change in changes:
                    console.print(f"  {change}")
                raise LockDriftError(
                    f"{release_dir / LOCK_FILE} no longer matches: {len(changes)} difference(s)"
                )
            console.print(f"{release_dir / LOCK_FILE} matches the config and the sources")
            return
        _refuse_dirty(options, allow_dirty=allow_dirty)
        path = record_release(options, chosen, release_dir, vault_for(options))
        update_release_index(release_dir, _signer(options))
    except OrchestratorError as error:
        raise _fail(error) from None
    console.print(f"wrote {path}")


vault_app = typer.Typer(
    help="The package vault: every .deb, rootfs, crate archive and profile of a release, "
    "by sha256, under <cache>/vault.",
    no_args_is_help=True,
)
app.add_typer(vault_app, name="vault")


@vault_app.command("export")
def vault_export(
    release_dir: Annotated[Path, typer.Argument(help="The release folder (has release.lock).")],
    archive: Annotated[Path, typer.Argument(help="The .tar to write.")],
    cache_dir: CacheOption = None,
) -> None:
    """Write one archive with a release's lockfile and every input it names.

    Example: orchestrator vault export artifacts/tinyllm-0.1.0 tinyllm-0.1.0-vault.tar
    """
    from orchestrator.host.vault import Vault, VaultError
    from orchestrator.model.lockfile import LOCK_FILE, blobs, read_lock

    try:
        document = read_lock(release_dir / LOCK_FILE)
        vault = Vault(_cache_root(cache_dir) / "vault")
        missing = [what for digest, what in blobs(document).items() if not vault.has(digest)]
        if missing:
            raise VaultError(f"the vault lacks {len(missing)} input(s): {', '.join(missing[:5])}")
        count = vault.export(blobs(document), archive, lockfile=release_dir / LOCK_FILE)
    except OrchestratorError as error:
        raise _fail(error) from None
    console.print(f"wrote {archive}: {count} files, {archive.stat().st_size / 1e6:.0f} MB")


@vault_app.command("import")
def vault_import(
    archive: Annotated[Path, typer.Argument(help="An archive from `orchestrator vault export`.")],
    cache_dir: CacheOption = None,
    lockfile: Annotated[
        Path | None, typer.Option("--lockfile", help="Also write the archive's lockfile here.")
    ] = None,
) -> None:
    """Take a release's inputs into this machine's vault, each checked against its sha256.

    Example: orchestrator vault import tinyllm-0.1.0-vault.tar --lockfile release.lock
    """
    from orchestrator.host.vault import Vault

    try:
        vault = Vault(_cache_root(cache_dir) / "vault")
        imported = vault.import_archive(archive, lockfile)
    except OrchestratorError as error:
        raise _fail(error) from None
    console.print(f"imported {len(imported)} files into {vault.root}")


def _cache_root(cache_dir: Path | None) -> Path:
    from orchestrator.config.options import default_cache_dir

    return (cache_dir or default_cache_dir(os.environ)).expanduser().resolve()


@app.command()
def reproduce(
    release: Annotated[
        Path, typer.Argument(help="A release folder (with release.lock) or a lockfile.")
    ],
    source: Annotated[
        Path | None,
        typer.Option(
            "--source",
            help="The crate's sources (default: `git archive` of the locked commit).",
        ),
    ] = None,
    workdir: Annotated[
        Path | None,
        typer.Option(
            "--workdir", help="Where to rebuild (default: <release>.reproduce next to it)."
        ),
    ] = None,
    cache_dir: CacheOption = None,
    reuse_images: Annotated[
        bool,
        typer.Option("--reuse-images", help="Use existing images of the same input hash (faster)."),
    ] = False,
    artifact: Annotated[
        list[str] | None,
        typer.Option("--artifact", help="Only this artifact (repeatable); default: all."),
    ] = None,
) -> None:
    """Rebuild every artifact of a release from its lockfile alone, offline; compare bytes.

    The sources go to a fresh folder, the cache is seeded from the vault only, images are
    rebuilt from the vaulted .debs, and no step may download anything. Prints expected and
    actual sha256 per artifact; on a difference, writes a diffoscope report next to the
    rebuilt binary and names the recorded inputs that differ. Exit 0 only if every
    artifact is bit-identical (55 otherwise).

    Example: orchestrator reproduce artifacts/tinyllm-0.1.0
    """
    from orchestrator.host.vault import Vault
    from orchestrator.release.reproduce import ReproduceMismatchError
    from orchestrator.release.reproduce import reproduce as run_reproduce
    from orchestrator.runtime.engine import Engine
    from orchestrator.supply.attest import resolve_signer

    release = release.resolve()
    folder = release if release.is_dir() else release.parent
    workdir = (workdir or folder.with_name(folder.name + ".reproduce")).resolve()
    cache_root = _cache_root(cache_dir)
    try:
        if workdir.exists():
            shutil.rmtree(workdir)
        engine = Engine.connect()
        signer = resolve_signer(None, project_dir=workdir, cache_dir=cache_root, env={})
        results = run_reproduce(
            release,
            engine=engine,
            vault=Vault(cache_root / "vault"),
            console=console,
            signer=signer,
            workdir=workdir,
            source_dir=source.resolve() if source else None,
            fresh_images=not reuse_images,
            announce=console.print,
            only=artifact or (),
        )
    except KeyboardInterrupt:
        raise _fail(BuildInterruptedError("interrupted")) from None
    except OrchestratorError as error:
        raise _fail(error) from None
    table = Table("artifact", "expected", "got", "identical", "time", title="reproduction")
    for result in results:
        table.add_row(
            result.artifact,
            result.expected[:16],
            result.got[:16] or "-",
            "[green]yes[/]" if result.identical else "[red]NO[/]",
            f"{result.seconds:.0f}s",
        )
    console.print(table)
    (workdir / "reproduce.json").write_text(
        json.dumps([r.as_dict() for r in results], indent=2) + "\n"
    )
    for result in results:
        for line in [result.error, *result.inputs_differing]:
            if line:
                err_console.print(f"[yellow]{result.artifact}:[/] {line}")
        if result.report:
            err_console.print(f"[yellow]{result.artifact}:[/] diffoscope report: {result.report}")
    different = [r.artifact for r in results if not r.identical]
    if different:
        raise _fail(
            ReproduceMismatchError(
                f"{len(different)} of {len(results)} artifacts differ: " + ", ".join(different)
            )
        )
    console.print(
        "the artifact is bit-identical"
        if len(results) == 1
        else f"all {len(results)} artifacts are bit-identical"
    )


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

    try:
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
    except OrchestratorError as error:
        raise _fail(error) from None
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

    try:
        checks, key_note = verify_release(release_dir, key)
    except OrchestratorError as error:
        raise _fail(error) from None
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
        raise _fail(
            VerificationError(
                f"{len(failed)} check(s) failed: "
                + "; ".join(f"{c.file} ({c.check}): {c.detail}" for c in failed),
                hint="Do not use these files: they are not what was signed.",
            )
        )
    console.print(f"[green]all {len(checks)} checks passed[/]")


@app.command()
def render(
    check: Annotated[
        bool,
        typer.Option(
            "--check", help="Fail (exit 50) when committed Dockerfiles differ from the templates."
        ),
    ] = False,
) -> None:
    """Render dockerfiles/<flavor>.Dockerfile from images/templates/ (default toolchain).

    Example: orchestrator render --check   # in CI, after editing a template
    """
    from orchestrator.plan.dockerfiles import render_all

    try:
        results = render_all(check=check)
    except OrchestratorError as error:
        raise _fail(error) from None
    for result in results:
        state = "up to date" if not result.changed else ("stale" if check else "written")
        console.print(f"{result.path}: {state}")


@app.command("config")
def show_config(config: ConfigOption = None) -> None:
    """Show every resolved setting and where it came from (default, file, env, flag).

    Example: ORCHESTRATOR_TARGET_CPU=x86-64-v3 orchestrator config
    """
    try:
        options = _resolve(config)
    except OrchestratorError as error:
        raise _fail(error) from None
    table = Table("setting", "value", "from", title=str(options.config_path))
    for key, value, source in options.describe():
        table.add_row(key, value, source)
    console.print(table)


@app.command()
def doctor(config: ConfigOption = None) -> None:
    """Check this host: Docker, BuildKit, disk, privileges, perf in containers, qemu-user.

    Example: orchestrator doctor   # exit code 60 when something blocks builds
    """
    from orchestrator.runtime.doctor import run_checks

    try:
        cache_dir: Path | None = _resolve(config).cache_dir
    except OrchestratorError:
        cache_dir = None  # doctor also helps before any project is set up
    checks = run_checks(cache_dir)
    table = Table("check", "status", "detail")
    colours = {"ok": "green", "warn": "yellow", "fail": "red", "info": "cyan"}
    for check in checks:
        table.add_row(check.name, f"[{colours[check.status]}]{check.status}[/]", check.detail)
    console.print(table)
    blockers = [c.name for c in checks if c.status == "fail"]
    if blockers:
        raise _fail(
            DoctorBlockerError(
                f"blocked by: {', '.join(blockers)}",
                hint="Fix the failing checks above and run `orchestrator doctor` again.",
            )
        )


@app.command()
def clean(
    config: ConfigOption = None,
    images: Annotated[
        bool,
        typer.Option(
            "--images", help="Also remove every orchestrator image (they are rebuilt on demand)."
        ),
    ] = False,
    cache: Annotated[
        bool,
        typer.Option(
            "--cache",
            help="Also empty the host cache (rootfs, .debs, crates, logs); the vault stays.",
        ),
    ] = False,
) -> None:
    """Remove leftover containers and staging folders; optionally images and the cache.

    Example: orchestrator clean --images
    """
    from orchestrator.host.staging import staging_root
    from orchestrator.runtime.engine import Engine

    try:
        options = _resolve(config)
        engine = Engine.connect()
    except OrchestratorError as error:
        raise _fail(error) from None
    containers = engine.managed_containers()
    for container in containers:
        container.remove(force=True)
    volumes = engine.remove_managed_volumes()
    console.print(f"removed {len(containers)} container(s) and {volumes} volume(s)")
    staging = staging_root(options.artifacts_dir)
    if staging.exists():
        shutil.rmtree(staging)
        console.print(f"removed {staging}")
    if images:
        managed = engine.managed_images()
        for image in managed:
            engine.remove_image(image.id)
        console.print(
            f"removed {len(managed)} image(s), {sum(i.size for i in managed) / 1e9:.1f} GB"
        )
    if cache and options.cache_dir.exists():
        # The vault holds what past releases need to be reproduced: not a cache to empty.
        for entry in options.cache_dir.iterdir():
            if entry.name != "vault":
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
        console.print(f"emptied {options.cache_dir} (kept vault/)")


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
    try:
        app()
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)

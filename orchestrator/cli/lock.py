"""`orchestrator lock`: pin the published release's inputs into release.lock and the vault
(`release` does it itself; this re-pins a release built target by target)."""

from __future__ import annotations

from typing import Annotated

import typer

from orchestrator.cli.app import (
    ArtifactsOption,
    CacheOption,
    ConfigOption,
    LockDirtyOption,
    app,
    console,
    resolve_options,
    sign_release_index,
    signer_for,
)
from orchestrator.cli.release_common import refuse_dirty
from orchestrator.config.resolve.options import LOCK_BLOCKER_HINT, lock_blocker
from orchestrator.errors import ConfigError


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
    allow_dirty: LockDirtyOption = False,
) -> None:
    """Pin every input of the published release into release.lock and the vault.

    `orchestrator release` does this itself; run `lock` to re-pin a release built target
    by target with `orchestrator build`. The lockfile (JSON, schema orchestrator/lock@1)
    records the rootfs, every Debian package of every image (name, version, architecture,
    sha256), toolchain versions as the tools reported them, the git commit, Cargo.lock and
    vendored crates, every flag and environment variable, and the profiles by sha256.

    \b
    Examples:
      orchestrator lock
      orchestrator lock --check      # in CI: has anything drifted from the lock?
    """
    from orchestrator.model.documents.lockfile import LOCK_FILE, LockDriftError, read_lock
    from orchestrator.release.lock.reproduce import check_lock, record_release, vault_for
    from orchestrator.release.targets.release_view import ReleaseView
    from orchestrator.release.targets.target import targets
    from orchestrator.supply.chain import check_signing_key

    options = resolve_options(
        config, {"build.artifacts_dir": artifacts_dir, "build.cache_dir": cache_dir}
    )
    release = ReleaseView.from_options(options)
    release_dir = release.release_dir
    chosen = targets(options, list(options.flavors))
    blocker = lock_blocker(options.crate_dir, options.project_dir, options.config_path.name)
    if blocker:
        raise ConfigError(f"cannot lock: {blocker}", hint=LOCK_BLOCKER_HINT)
    if check:
        changes = check_lock(release.crate.config_path, read_lock(release_dir / LOCK_FILE), chosen)
        if changes:
            for change in changes:
                console.print(f"  {change}")
            raise LockDriftError(
                f"{release_dir / LOCK_FILE} no longer matches: {len(changes)} difference(s)"
            )
        console.print(f"{release_dir / LOCK_FILE} matches the config and the sources")
        return
    refuse_dirty(release.crate, allow_dirty=allow_dirty)
    signer = signer_for(options)
    check_signing_key(release_dir, signer.key.public)  # before the lock is written
    path = record_release(release, chosen, release_dir, vault_for(release.cache_dir))
    sign_release_index(release_dir, signer, vouched=(LOCK_FILE,))
    console.print(f"wrote {path}")

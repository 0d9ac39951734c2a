"""`orchestrator release --rebuild-on CONTEXT`: every target built twice, once on this
release's engine and once on another with a cache of its own, and signed only where the
two builds shipped the same bytes (release/assemble/agree.py). Then published exactly as
`release assemble` publishes folders from CI runners, so the release holds the same bytes
as a one-engine release.

The second build never reads the first one's cache: a poisoned cache entry (a profile, a
step's output, the rootfs, the dispatcher) would otherwise make both builds agree on the
poison. The one exception is registry crates, which Cargo.lock's checksums vouch for
whatever cache holds them: they are copied over, each checked, so that a second engine
without a network can build.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from orchestrator.cli.app import (
    console,
    err_console,
    sign_release_index,
    signer_for,
    styled,
)
from orchestrator.config.resolve.options import Options
from orchestrator.errors import ConfigError, DockerUnavailableError, OrchestratorError
from orchestrator.release.assemble.agree import AgreePolicy, settle
from orchestrator.release.assemble.carried_dispatcher import carried_dispatchers
from orchestrator.release.assemble.shard import CheckedFolder
from orchestrator.release.targets.release_view import ReleaseView
from orchestrator.release.targets.target import Target
from orchestrator.supply.attest import Signer

REBUILD_CACHE_SUFFIX = "-rebuild"


def second_cache_dir(first_cache: Path, given: Path | None) -> Path:
    """The second builder's cache: `given`, else a sibling of the first one's
    (`first_cache`); never the first cache itself, nor a folder inside or around it."""
    first = first_cache.resolve()
    second = (given or first.with_name(first.name + REBUILD_CACHE_SUFFIX)).resolve()
    if second == first or second.is_relative_to(first) or first.is_relative_to(second):
        raise ConfigError(
            f"the second builder's cache {second} overlaps the first builder's {first}",
            hint="Pass --rebuild-cache-dir a folder of its own: the second build must not "
            "read what the first one cached.",
        )
    return second


def publish_checked(
    release: ReleaseView,
    checked: Sequence[CheckedFolder],
    policy: AgreePolicy,
    signer: Signer,
    *,
    started: float,
) -> None:
    """Settle the two-builder rule, then sign and publish the folders, compose the -auto
    folders, write release.json and release.lock and sign the release index."""
    from orchestrator.cli.release_common import closing_lines
    from orchestrator.model.documents.lockfile import LOCK_FILE
    from orchestrator.release.assemble.shard import assemble, compose_where_possible
    from orchestrator.release.run import RELEASE_JSON, run_report

    release_dir = release.release_dir
    chosen = settle(checked, policy, console.print)
    carried = carried_dispatchers([(item.path, item.dispatcher) for item in checked])

    def warn(text: str) -> None:
        err_console.print(styled("warning:", "yellow bold", f" {text}"))

    results, lock = assemble(release, chosen, signer, console.print, warn)
    built = [(result, item.plan) for result, item in zip(results, chosen, strict=True)]
    composed = compose_where_possible(
        release, release_dir, built, signer, announce=console.print, warn=warn, carried=carried
    )
    sign_release_index(release_dir, signer, vouched=(RELEASE_JSON, LOCK_FILE, *composed))
    report = run_report(release, results, signer, seconds=time.monotonic() - started, lockfile=lock)
    console.print(f"pinned every input in {lock}")
    closing_lines(report, console)


def release_rebuilt(
    options: Options,
    chosen: Sequence[Target],
    context: str,
    cache_dir: Path | None,
    *,
    bench_runs: int,
    retrain: bool,
    force: bool,
) -> None:
    """Build every target on the release's engine and on `context`, then publish what both
    agree on (`--agree all`)."""
    from orchestrator.cli.release_common import connect_engines
    from orchestrator.host.cachedir import ensure_cache_dir
    from orchestrator.host.staging import staging_area
    from orchestrator.release.assemble.shard import build_target_folder, check_folders_agreeing
    from orchestrator.release.run import plan_targets
    from orchestrator.supply.chain import check_signing_key

    started = time.monotonic()
    second_cache = second_cache_dir(options.cache_dir, cache_dir)
    planned = plan_targets(chosen)
    signer = signer_for(options)  # a wrong key is refused before hours of building
    release_dir = options.artifacts_dir / planned[0][1].release_dir
    check_signing_key(release_dir, signer.key.public)
    first_engine = connect_engines(options.engine_contexts)[0]
    second_engine = connect_engines([context])[0]
    builders = (
        ("first", first_engine, ensure_cache_dir(options.cache_dir)),
        ("second", second_engine, ensure_cache_dir(second_cache)),
    )
    with staging_area(options.artifacts_dir, f"rebuild-{uuid.uuid4().hex[:12]}") as area:
        folders: list[Path] = []
        for label, engine, cache in builders:
            if label == "second":
                _share_registry_crates(options.crate_dir, options.cache_dir, cache)
            for target, plan in planned:
                console.print(
                    f"building {plan.artifact_dir} on {engine.name} "
                    f"({label} builder, cache {cache})"
                )
                own = replace(target, options=replace(target.options, cache_dir=cache))
                try:
                    folder = build_target_folder(
                        own,
                        plan,
                        engine,
                        console,
                        area / label,
                        bench_runs=bench_runs,
                        retrain=retrain,
                        force=force,
                    )
                except Exception as error:  # the SDK's own errors when an engine vanishes
                    if isinstance(error, OrchestratorError) or engine.alive():
                        raise
                    raise DockerUnavailableError(
                        f"the {label} builder's engine {engine.name} stopped answering while "
                        f"it built {plan.artifact_dir}: nothing was signed",
                        hint="Start that engine again (or pass another --rebuild-on), then "
                        "run the release again: steps already built are reused.",
                    ) from None
                folders.append(folder)
        checked = check_folders_agreeing(planned, folders)
        publish_checked(ReleaseView.from_options(options), checked, "all", signer, started=started)


def _share_registry_crates(crate_dir: Path, first_cache: Path, second_cache: Path) -> None:
    """The one thing the second builder takes from the first one's cache: registry crates,
    each checked against Cargo.lock (which vouches for them, not the cache), so that a
    second engine without a network builds too. Everything else it makes itself."""
    from orchestrator.host.crates import share_checked_crates
    from orchestrator.host.source import registry_crates

    crates = registry_crates((crate_dir / "Cargo.lock").read_text())
    shared = share_checked_crates(first_cache, second_cache, crates)
    if shared:
        console.print(
            f"the second builder takes {shared} registry crate(s), each checked against "
            "Cargo.lock; it makes every other input itself"
        )

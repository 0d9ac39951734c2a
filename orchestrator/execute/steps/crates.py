"""`fetch-crates`: vendor the crates of Cargo.lock, the only step with a network.

Registry crates are kept as downloaded (`.crate` archives, host/crates.py) and checked
against Cargo.lock's checksums before every use; the vendor tree is unpacked from them for
each build. Behind a TLS-intercepting proxy the host's CAs and proxy variables are handed to
the fetch container.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from pathlib import Path

from orchestrator.errors import CacheCorruptError
from orchestrator.execute.steps.commands import put_file, run
from orchestrator.execute.steps.pipeline import Pipeline
from orchestrator.host.archive import ChunkReader, safe_extract
from orchestrator.host.crates import missing_crates, take_in, vendor_tar, verified_crate
from orchestrator.host.source import LockedCrate, other_sources, registry_crates
from orchestrator.host.vault import VaultError
from orchestrator.model.layout import PATHS
from orchestrator.plan.steps import StepName
from orchestrator.progress.reporter import StepLog
from orchestrator.runtime.engine import ContainerSpec

HOST_CA_PATH = f"{PATHS.root}/host-ca.crt"
PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy")
_CA_CANDIDATES = ("SSL_CERT_FILE", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE")


def host_ca_bundle() -> Path | None:
    """The CA bundle the host trusts, so the fetch container can cross the same proxy."""
    for variable in _CA_CANDIDATES:
        value = os.environ.get(variable)
        if value and Path(value).is_file():
            return Path(value)
    default = Path("/etc/ssl/certs/ca-certificates.crt")
    return default if default.is_file() else None


def fetch_crates(pipeline: Pipeline, log: StepLog) -> None:
    pipeline.state.vendor = _vendor(pipeline, log)


def _vendor(pipeline: Pipeline, log: StepLog) -> Path:
    """The vendored crates for this build, as a tar in the run's private scratch folder.

    Registry crates are unpacked from their `.crate` archives, each checked against
    Cargo.lock before this use; only missing ones (and git dependencies, which have no
    archive to check) are downloaded, in the one container with a network. Offline (a
    reproduction), the tar seeded from the vault is used: its digest was checked there.
    """
    plan, options = pipeline.plan, pipeline.options
    cargo_lock = (options.crate_dir / "Cargo.lock").read_text()
    crates = registry_crates(cargo_lock)
    git = other_sources(cargo_lock)
    cache = options.cache_dir / "crates" / f"{plan.source.cargo_lock_sha256}.tar"
    private = pipeline.scratch / "vendor.tar"
    if options.offline:
        if not cache.is_file():
            raise VaultError(
                f"offline: the vendored crates for Cargo.lock {plan.source.cargo_lock_sha256[:12]} "
                "are not in the cache",
                hint="Import the release's vault first (orchestrator vault import).",
            )
        shutil.copyfile(cache, private)
        log.mark_cached("vendored crates from the vault")
        return private
    try:
        missing = [c for c in crates if verified_crate(options.cache_dir, c) is None]
    except CacheCorruptError as error:
        log.warn(error.message)  # removed: it is downloaded again below
        missing = missing_crates(options.cache_dir, crates)
    git_tree: Path | None = None
    if missing or git:
        log.line(
            f"downloading {len(missing)} of {len(crates)} registry crate(s)"
            + (f" and {len(git)} from git or other registries" if git else "")
        )
        git_tree = _download(pipeline, log, crates, with_git=bool(git))
    count = vendor_tar(options.cache_dir, crates, private, git_tree=git_tree)
    cache.parent.mkdir(parents=True, exist_ok=True)
    partial = cache.with_name(f".{cache.name}.{pipeline.engine.session}.partial")
    shutil.copyfile(private, partial)  # what `lock` pins into the vault
    partial.replace(cache)
    detail = f"{count} crates, each checked against Cargo.lock"
    if missing or git:
        log.detail = detail
    else:
        log.mark_cached(detail)
    return private


def _download(
    pipeline: Pipeline, log: StepLog, crates: list[LockedCrate], *, with_git: bool
) -> Path | None:
    """Run `cargo vendor` in the fetch container; keep the `.crate` archives it downloaded
    (checked, into the store) and, for git dependencies, its vendored tree."""
    plan, options, engine = pipeline.plan, pipeline.options, pipeline.engine
    fetch = plan.fetch
    spec = ContainerSpec(pipeline.image.reference, network=True, purpose="fetch")
    with engine.container(spec, keep=pipeline.keep_containers) as box:
        box.put_archive(PATHS.root, plan.source.archive)
        bundle = host_ca_bundle()
        if bundle is not None:
            # Behind a TLS-intercepting proxy the host trusts CAs the image does not.
            log.line(f"+ docker cp {bundle} {HOST_CA_PATH} (the host's trusted CAs)")
            put_file(box, HOST_CA_PATH, bundle.read_bytes())
            fetch = replace(
                fetch, environment={**fetch.environment, "CARGO_HTTP_CAINFO": HOST_CA_PATH}
            )
        for name in PROXY_VARIABLES:
            if os.environ.get(name):
                fetch = replace(fetch, environment={**fetch.environment, name: os.environ[name]})
        run(box, fetch.argv, log, StepName.FETCH_CRATES, environment=fetch.environment)
        downloaded = pipeline.scratch / "downloaded"
        downloaded.mkdir(exist_ok=True)
        if crates:
            home = fetch.environment["CARGO_HOME"]
            safe_extract(ChunkReader(box.get_archive(f"{home}/registry/cache")), downloaded)
        taken = take_in(downloaded, options.cache_dir, crates)
        log.line(f"stored {taken} downloaded crate archive(s), each matching Cargo.lock")
        if not with_git:
            return None
        tree = pipeline.scratch / "cargo-vendor.tar"
        with tree.open("wb") as handle:
            for chunk in box.get_archive(PATHS.vendor):
                handle.write(chunk)
        return tree

"""`fetch-crates`: vendor the crates of Cargo.lock, the only step with a network.

The vendored tree is cached per Cargo.lock hash and checked against Cargo.lock's
checksums before every use; behind a TLS-intercepting proxy the host's CAs and proxy
variables are handed to the fetch container.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import replace
from pathlib import Path

from orchestrator.errors import OrchestratorError
from orchestrator.execute.pipeline import Pipeline, put_file, run
from orchestrator.host.source import verify_vendor_archive
from orchestrator.host.vault import VaultError
from orchestrator.model.layout import PATHS
from orchestrator.plan.steps import StepName
from orchestrator.progress import StepLog
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
    """Vendor the crates once per Cargo.lock (the only step with a network)."""
    plan, options, engine = pipeline.plan, pipeline.options, pipeline.engine
    cargo_lock = (options.crate_dir / "Cargo.lock").read_text()
    cache = options.cache_dir / "crates" / f"{plan.source.cargo_lock_sha256}.tar"
    if cache.is_file():
        try:
            count = verify_vendor_archive(cache, cargo_lock)
        except OrchestratorError as exc:
            log.line(f"discarding cached crates: {exc.message}")
            cache.unlink()
        else:
            log.mark_cached(f"{count} crates from cache")
            return cache
    if options.offline:
        raise VaultError(
            f"offline: the vendored crates for Cargo.lock {plan.source.cargo_lock_sha256[:12]} "
            "are not in the cache",
            hint="Import the release's vault first (orchestrator vault import).",
        )
    cache.parent.mkdir(parents=True, exist_ok=True)
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
        with tempfile.NamedTemporaryFile(dir=cache.parent, suffix=".partial", delete=False) as tmp:
            for chunk in box.get_archive(PATHS.vendor):
                tmp.write(chunk)
        partial = Path(tmp.name)
    try:
        count = verify_vendor_archive(partial, cargo_lock)
        partial.replace(cache)
    finally:
        partial.unlink(missing_ok=True)
    log.detail = f"{count} crates vendored"
    return cache

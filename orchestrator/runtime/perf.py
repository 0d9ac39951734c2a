"""The profiling container's perf access: the least grant under which perf works.

Only this container ever gets extra rights. Grants are tried least first, and the first
that supports the best mode wins. The process inside stays uid 1000 with
no-new-privileges, so a granted capability mostly relaxes Docker's seccomp filter for
perf_event_open rather than handing out root powers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from orchestrator.host.cachedir import write_cache_json
from orchestrator.model.bolt_report import PerfCapabilities
from orchestrator.model.hashing import content_hash
from orchestrator.runtime.engine import Engine, Privileges

PERF_OUTPUT = "/tmp/probe.perf.data"  # noqa: S108 - inside a throwaway probe container
LBR_PROBE = ("perf", "record", "-j", "any,u", "-e", "cycles:u", "-o", PERF_OUTPUT, "--", "true")
SAMPLING_PROBE = ("perf", "record", "-e", "cpu-clock:u", "-o", PERF_OUTPUT, "--", "true")
GRANTS = (
    Privileges(cap_add=("PERFMON",)),  # kernel >= 5.8 and an engine that knows the name
    Privileges(cap_add=("SYS_ADMIN",)),  # Docker's seccomp profile then allows perf_event_open
    Privileges(security_opt=("seccomp=unconfined",)),
)
# Only with profiling.allow_privileged (--allow-privileged): every capability, every device.
LAST_RESORT = Privileges(privileged=True)
# perf's words when the grant, not the hardware, is what is missing.
_DENIED = ("not permitted", "permission denied", "perf_event_paranoid", "eacces", "eperm")
PROBE_CACHE = "perf-access"


@dataclass(frozen=True)
class PerfAccess:
    privileges: Privileges
    capabilities: PerfCapabilities

    def as_dict(self) -> dict[str, object]:
        return {
            "granted": self.privileges.describe(),
            "lbr": self.capabilities.lbr,
            "sampling": self.capabilities.sampling,
        }


NO_ACCESS = PerfAccess(Privileges(), PerfCapabilities(lbr=False, sampling=False, grant="none"))


def find_perf_access(
    engine: Engine,
    image: str,
    *,
    allowed: bool,
    allow_privileged: bool = False,
    cache_dir: Path | None = None,
) -> PerfAccess:
    """The least grant giving the best perf mode this engine's hardware can give (or none).

    Grants are tried least first. One under which sampling works but LBR fails for a reason
    other than permissions means the hardware has no LBR (a VM, an AMD host): no bigger grant
    can change that, so the probe stops there. `--privileged` is tried only when allowed.
    The answer is kept per engine, kernel and image under <cache>/perf-access/.
    """
    if not allowed:
        return PerfAccess(Privileges(), PerfCapabilities(False, False, "none (not asked)"))
    grants = (*GRANTS, LAST_RESORT) if allow_privileged else GRANTS
    cached = _cache_file(engine, image, allow_privileged, cache_dir)
    if cached is not None and (known := _read_cached(cached, grants)) is not None:
        return known
    access = _probe(engine, image, grants)
    if cached is not None:
        _write_cached(cached, access)
    return access


def _probe(engine: Engine, image: str, grants: tuple[Privileges, ...]) -> PerfAccess:
    sampling: PerfAccess | None = None
    for grant in grants:
        lbr_code, lbr_output = engine.probe(image, LBR_PROBE, privileges=grant)
        if lbr_code == 0:
            return PerfAccess(grant, PerfCapabilities(True, True, grant.describe()))
        if sampling is None and engine.probe(image, SAMPLING_PROBE, privileges=grant)[0] == 0:
            sampling = PerfAccess(grant, PerfCapabilities(False, True, grant.describe()))
        lbr_denied = any(word in lbr_output.lower() for word in _DENIED)
        if sampling is not None and not lbr_denied:
            return sampling  # LBR fails for want of hardware: sampling is the best there is
    return sampling or NO_ACCESS


def _cache_file(
    engine: Engine, image: str, allow_privileged: bool, cache_dir: Path | None
) -> Path | None:
    if cache_dir is None:
        return None
    info = engine.info()
    engine_id, kernel = str(info.get("ID", "")), str(info.get("KernelVersion", ""))
    if not engine_id or not kernel:
        return None  # no identity to key the answer on: probe every time
    key = content_hash(
        {"engine": engine_id, "kernel": kernel, "image": image, "privileged": allow_privileged}
    )
    return cache_dir / PROBE_CACHE / f"{key[:32]}.json"


def _read_cached(path: Path, grants: tuple[Privileges, ...]) -> PerfAccess | None:
    """The cached answer, if it is well formed and names a grant still on offer."""
    try:
        record = json.loads(path.read_text())
        index = int(record["grant_index"])
        capabilities = PerfCapabilities(
            bool(record["lbr"]), bool(record["sampling"]), str(record["grant"])
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None  # absent or damaged: probe again
    if index == -1:
        return NO_ACCESS
    if not 0 <= index < len(grants):
        return None
    return PerfAccess(grants[index], capabilities)


def _write_cached(path: Path, access: PerfAccess) -> None:
    index = -1 if access == NO_ACCESS else GRANTS_ORDER.index(access.privileges)
    record = {
        "grant_index": index,
        "grant": access.capabilities.grant,
        "lbr": access.capabilities.lbr,
        "sampling": access.capabilities.sampling,
    }
    write_cache_json(path, record)


GRANTS_ORDER = (*GRANTS, LAST_RESORT)

"""The profiling container's perf access: the least grant under which perf works.

Only this container ever gets extra rights. The process inside stays uid 1000 with every
capability dropped and no-new-privileges. Docker's seccomp profile refuses
`perf_event_open` unless the container holds CAP_SYS_ADMIN (Engine 20.10) or CAP_PERFMON
(newer), and CAP_SYS_ADMIN also unlocks `unshare`, `mount` and `setns`: a workload could
make a user namespace and be root in it. So the grant is our own seccomp profile (Docker's
default plus `perf_event_open`, runtime/seccomp.py) with no capability at all: at
perf_event_paranoid <= 2 the kernel lets a process sample its own user space (cpu-clock:u)
without one. CAP_PERFMON is added only where the kernel asks for it (paranoid > 2).
CAP_SYS_ADMIN and seccomp=unconfined are never tried: each unlocks exactly what the
profile keeps shut. `--privileged` remains, only behind --allow-privileged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from orchestrator.host.cachedir import write_cache_json
from orchestrator.model.hashing import content_hash
from orchestrator.model.verdict.bolt_report import PerfCapabilities
from orchestrator.runtime.engine import Engine, Privileges
from orchestrator.runtime.seccomp import PERF_PROFILE, profile_sha256

PERF_OUTPUT = "/tmp/probe.perf.data"  # noqa: S108 - inside a throwaway probe container
LBR_PROBE = ("perf", "record", "-j", "any,u", "-e", "cycles:u", "-o", PERF_OUTPUT, "--", "true")
SAMPLING_PROBE = ("perf", "record", "-e", "cpu-clock:u", "-o", PERF_OUTPUT, "--", "true")
GRANTS = (
    Privileges(seccomp=PERF_PROFILE),  # enough at perf_event_paranoid <= 2
    # paranoid 3 (some distributions' kernels) or 4: kernel >= 5.8, an engine that knows it
    Privileges(seccomp=PERF_PROFILE, cap_add=("PERFMON",)),
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
        """build.json's `profiling` (less `container_started`): what the container got."""
        return {
            "granted": self.privileges.describe(),
            "lbr": self.capabilities.lbr,
            "sampling": self.capabilities.sampling,
            "grant": self.privileges.record().dump(),
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
    cached = _cache_file(engine, image, grants, cache_dir)
    if cached is not None and (known := _read_cached(cached, grants)) is not None:
        return known
    access = _probe(engine, image, grants)
    if cached is not None:
        _write_cached(cached, access, grants)
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
    engine: Engine, image: str, grants: tuple[Privileges, ...], cache_dir: Path | None
) -> Path | None:
    """Keyed by engine, kernel, image and the grants on offer (the profile's exact bytes
    included): a changed grant list or profile is probed afresh, never read back."""
    if cache_dir is None:
        return None
    info = engine.info()
    engine_id, kernel = str(info.get("ID", "")), str(info.get("KernelVersion", ""))
    if not engine_id or not kernel:
        return None  # no identity to key the answer on: probe every time
    offered = [g.describe() for g in grants]
    profiles = {n: profile_sha256(n) for n in sorted({g.seccomp for g in grants if g.seccomp})}
    key = content_hash(
        {
            "engine": engine_id,
            "kernel": kernel,
            "image": image,
            "grants": offered,
            "seccomp": profiles,
        }
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
    if not 0 <= index < len(grants) or grants[index].describe() != capabilities.grant:
        return None  # not the grant it says it is: probe again
    return PerfAccess(grants[index], capabilities)


def _write_cached(path: Path, access: PerfAccess, grants: tuple[Privileges, ...]) -> None:
    index = -1 if access == NO_ACCESS else grants.index(access.privileges)
    record = {
        "grant_index": index,
        "grant": access.capabilities.grant,
        "lbr": access.capabilities.lbr,
        "sampling": access.capabilities.sampling,
    }
    write_cache_json(path, record)

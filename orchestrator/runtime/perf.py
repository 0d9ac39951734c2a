"""The profiling container's perf access: the least grant under which perf works.

Only this container ever gets extra rights. Grants are tried least first, and the first
that supports the best mode wins. The process inside stays uid 1000 with
no-new-privileges, so a granted capability mostly relaxes Docker's seccomp filter for
perf_event_open rather than handing out root powers.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.model.bolt_report import PerfCapabilities
from orchestrator.runtime.engine import Engine, Privileges

PERF_OUTPUT = "/tmp/probe.perf.data"  # noqa: S108 - inside a throwaway probe container
LBR_PROBE = ("perf", "record", "-j", "any,u", "-e", "cycles:u", "-o", PERF_OUTPUT, "--", "true")
SAMPLING_PROBE = ("perf", "record", "-e", "cpu-clock:u", "-o", PERF_OUTPUT, "--", "true")
GRANTS = (
    Privileges(cap_add=("PERFMON",)),  # kernel >= 5.8 and an engine that knows the name
    Privileges(cap_add=("SYS_ADMIN",)),  # Docker's seccomp profile then allows perf_event_open
    Privileges(security_opt=("seccomp=unconfined",)),
    Privileges(privileged=True),
)


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


def find_perf_access(engine: Engine, image: str, *, allowed: bool) -> PerfAccess:
    """Probe each grant; return the least one giving the best perf mode (or none)."""
    if not allowed:
        return PerfAccess(Privileges(), PerfCapabilities(False, False, "none (not asked)"))
    sampling: PerfAccess | None = None
    for grant in GRANTS:
        if engine.probe(image, LBR_PROBE, privileges=grant)[0] == 0:
            return PerfAccess(grant, PerfCapabilities(True, True, grant.describe()))
        if sampling is None and engine.probe(image, SAMPLING_PROBE, privileges=grant)[0] == 0:
            sampling = PerfAccess(grant, PerfCapabilities(False, True, grant.describe()))
    return sampling or NO_ACCESS

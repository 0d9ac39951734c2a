"""The speed gate's part of the plan: whether it runs, on what, and the command it runs."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.config.declarations.kinds import Run
from orchestrator.config.resolve.options import Options
from orchestrator.flavors import Flavor
from orchestrator.model.layout import PATHS
from orchestrator.model.verdict.callgrind import CALLGRIND_ARGS, FORMULA

# Runs one workload under callgrind, pinned to one CPU the container may use (so a program
# sizing its thread pool by the CPUs it sees always sees one: the counts do not depend on
# the machine): the slot-th of them, so that runs side by side get a core each. Stdin from
# a file or /dev/null, the program's own output discarded. Prints the `events:` and
# `summary:` lines of every process's output file.
# $1: output folder, $2: stdin file ("" for none), $3: slot, then the command.
COUNT_SCRIPT = (
    'd=$1; i=${2:-/dev/null}; s=${3:-0}; shift 3; rm -rf "$d"; mkdir -p "$d"; all=""; '
    "for r in $(taskset -pc $$ 2>/dev/null | sed 's/.*: //' | tr ',' ' '); do "
    'all="$all $(seq "${r%-*}" "${r#*-}")"; done; n=$(echo $all | wc -w); cpu=""; '
    '[ "$n" -gt 0 ] && cpu=$(echo $all | tr " " "\\n" | sed -n "$((s % n + 1))p"); '
    'pin=""; [ -n "$cpu" ] && pin="taskset -c $cpu"; '
    '$pin valgrind "$@" < "$i" > /dev/null 2> "$d/stderr"; c=$?; '
    'if [ "$c" != 0 ]; then tail -n 20 "$d/stderr"; exit "$c"; fi; '
    "grep -h -E '^(events|summary):' \"$d\"/callgrind.*"
)


def callgrind_argv(out_dir: str, stdin: str, command: list[str], *, slot: int = 0) -> list[str]:
    """The whole command that counts one run of `command` (writes into out_dir) on the
    slot-th CPU of the container's."""
    return [
        "/bin/sh",
        "-c",
        COUNT_SCRIPT,
        "sh",
        out_dir,
        stdin,
        str(slot),
        *CALLGRIND_ARGS,
        f"--callgrind-out-file={out_dir}/callgrind.%p",
        *command,
    ]


@dataclass(frozen=True)
class GatePlan:
    policy: str  # best | require-all
    min_gain: float
    workloads: tuple[Run, ...]  # what is counted, each once per variant
    work_dir: str
    metric: str = FORMULA
    pinned: str = ""  # reproduce: ship this variant, as the release did; nothing is counted
    # reproduce: the binaries the release's BOLT variant shipped unBOLTed (gate verdicts)
    pinned_unbolted: tuple[str, ...] = ()


@dataclass(frozen=True)
class GateSettings:
    """What the speed gate reads of the settings: [gate] policy and min_gain, the workloads
    it counts ([gate] workloads, else [train] workloads), and what a reproduction pins.
    Built once from a target's options (`from_options`) by the plan."""

    policy: str  # best | require-all | off
    min_gain: float
    workloads: tuple[Run, ...]
    pinned: str = ""
    pinned_unbolted: tuple[str, ...] = ()

    @classmethod
    def from_options(cls, options: Options) -> GateSettings:
        return cls(
            policy=options.gate_policy,
            min_gain=options.gate_min_gain,
            workloads=options.gate_workloads or options.workloads,
            pinned=options.gate_pinned,
            pinned_unbolted=options.gate_pinned_unbolted,
        )


def gate_plan(
    settings: GateSettings, flavor: Flavor, *, optimized: bool
) -> tuple[GatePlan | None, str]:
    """The gate's plan, or None and why it does not run. `optimized`: PGO or BOLT makes a
    candidate besides the release build."""
    if settings.policy == "off":
        return None, "gate.policy is off: the most optimized variant ships unmeasured"
    if flavor.runner:
        return None, (
            f"the {flavor.name} binaries run under {flavor.runner[0]} here, where callgrind "
            "cannot count them: the most optimized variant ships unmeasured"
        )
    if not optimized:
        return None, "one candidate (no PGO, no BOLT): nothing to choose between"
    if not settings.workloads:
        return None, "no workloads to count ([gate] workloads and [train] workloads are empty)"
    plan = GatePlan(
        policy=settings.policy,
        min_gain=settings.min_gain,
        workloads=settings.workloads,
        work_dir=f"{PATHS.out}/gate",
        pinned=settings.pinned,
        pinned_unbolted=settings.pinned_unbolted,
    )
    return plan, ""

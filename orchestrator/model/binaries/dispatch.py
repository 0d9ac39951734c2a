"""What the dispatcher (execute/ship/dispatcher.c) and the folder around it agree on: which CPU
levels it can choose between, where each level's binary lies beside it, the variable that
forces or shows its choice, and the exit statuses of its own.

`bin/<binary>` is the dispatcher; `libexec/<binary>/<binary>-<level>` are the level targets'
shipped binaries, byte-equal. The dispatcher reads its own real path (/proc/self/exe), so
a link to bin/<binary> from anywhere on PATH still finds libexec/.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath

# rustc's CPU name of each level -> the ORCHESTRATOR_LEVEL value that forces it, lowest first.
# The dispatcher checks the psABI's feature bits (and the kernel's XCR0 for YMM/ZMM state).
DISPATCH_LEVELS: dict[str, str] = {
    "x86-64": "v1",
    "x86-64-v2": "v2",
    "x86-64-v3": "v3",
    "x86-64-v4": "v4",
}
LEVEL_VARIABLE = "ORCHESTRATOR_LEVEL"  # v1..v4 forces a level; "show" prints the choice
SHOW = "show"

# The dispatcher's own exit statuses (the program's pass through the exec unchanged).
EXIT_NO_SELF = 123  # /proc/self/exe could not be read
EXIT_BAD_LEVEL = 124  # ORCHESTRATOR_LEVEL holds none of v1..v4, show
EXIT_CPU_LACKS = 125  # the forced level needs instructions this CPU (or its kernel) lacks
EXIT_EXEC_FAILED = 126  # the chosen binary exists but could not be executed
EXIT_MISSING = 127  # no binary for the CPU's level or below (or for the forced one)


def libexec_path(binary: str, level: str) -> PurePosixPath:
    """Where the dispatcher looks for `binary` built for `level`, relative to the folder
    that holds bin/."""
    return PurePosixPath("libexec", binary, f"{binary}-{level}")


def dispatch_levels(levels: Iterable[str]) -> tuple[str, ...]:
    """The levels among `levels` that the dispatcher can choose between, lowest first."""
    wanted = set(levels)
    return tuple(level for level in DISPATCH_LEVELS if level in wanted)


@dataclass(frozen=True)
class Choice:
    """One line of `ORCHESTRATOR_LEVEL=show`: the level it would run, the CPU's own best
    level, and the binary's path."""

    level: str
    cpu: str
    path: str


def parse_show(line: str) -> Choice:
    """`level=x86-64-v3 cpu=x86-64-v4 path=/opt/x/libexec/x/x-x86-64-v3` as a Choice;
    ValueError for anything else."""
    fields = dict(word.partition("=")[::2] for word in line.strip().split(" ", 2))
    if set(fields) != {"level", "cpu", "path"}:
        raise ValueError(f"not a line of {LEVEL_VARIABLE}={SHOW}: {line!r}")
    return Choice(fields["level"], fields["cpu"], fields["path"])

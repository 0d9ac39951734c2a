"""compose.json: the record of a composed `<artifact>-auto` folder, which ships no build of
its own: the dispatcher in bin/, each level target's shipped binaries in libexec/ (byte-equal
copies), and where each came from. `verify` checks the copies against the level folders."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from orchestrator.model.binaries.dispatch import libexec_path
from orchestrator.model.documents.records import FileName, Record

COMPOSE_JSON = "compose.json"
AUTO_SUFFIX = "-auto"
# The dispatcher's rule, as users read it in compose.json (execute/ship/dispatcher.c does it).
DISPATCH_RULE = (
    "run the highest level present in libexec/ whose instructions this CPU and kernel "
    "support (cpuid, xgetbv); ORCHESTRATOR_LEVEL=v1..v4 forces one, =show prints the choice"
)


class DispatcherInfo(Record):
    """The dispatcher in bin/: its bytes, and what built it (reproduce builds it again)."""

    sha256: str
    size: int
    image: str  # the toolchain image it was compiled in
    source_sha256: str  # of execute/ship/dispatcher.c
    command: list[str]  # gcc, as run in the container


class ComposedLevel(Record):
    """One level of the composed folder: the target folder it was copied from, and the
    sha256 of each binary (binary name -> sha256) as that folder ships it."""

    target: FileName  # the level's artifact folder, beside this one in the release
    binaries: dict[FileName, str]


class LevelDecision(Record):
    """Whether one built level ships in the composed folder, and the gate's counts that
    decided it (model/verdict/level_map.py): a level counting no fewer estimated cycles than the
    highest level kept below it is left out, and its CPUs run that one."""

    target: FileName  # the level's artifact folder (published either way)
    kept: bool
    reason: str  # "kept: 2.1% fewer estimated cycles than x86-64-v2 (...)", "left out: ..."
    against: str | None = None  # the kept level below it that it was compared with
    workloads: int = 0  # the gate workloads both counted (0: not compared)
    cycles: int | None = None  # its shipped binary's estimated cycles, summed over them
    against_cycles: int | None = None  # the same of the level compared with
    ratio: float | None = None  # geometric mean of the per-workload ratios (< 1: fewer)


class ComposeRecord(Record):
    """compose.json of `<crate>-<version>-linux-x86_64-<flavor>-auto/`."""

    SCHEMA = "orchestrator/compose"
    VERSION = 1

    schema_: Literal["orchestrator/compose"] = Field("orchestrator/compose", alias="schema")
    schema_version: Literal[1] = 1
    name: str
    version: str
    flavor: str
    binaries: list[FileName]  # each is bin/<binary>, the dispatcher
    # rustc's CPU name (x86-64-v3) -> where it came from: the levels that ship (kept)
    levels: dict[str, ComposedLevel]
    dispatcher: DispatcherInfo
    rule: str = DISPATCH_RULE
    # the crate's README, licences and the files they name, beside bin/ (path -> sha256),
    # as every level's archive carries them; none in folders composed before they were
    docs: dict[str, str] = Field(default_factory=dict)
    # every level built, kept or left out, with the counts that decided it; none in
    # folders composed before levels were judged (every built level shipped)
    decisions: dict[str, LevelDecision] = Field(default_factory=dict)


def composed_digests(record: ComposeRecord) -> dict[str, str]:
    """path in the composed folder -> sha256 of every binary it holds: bin/<binary> the
    dispatcher, libexec/<binary>/<binary>-<level> each level's copy."""
    expected = {f"bin/{b}": record.dispatcher.sha256 for b in record.binaries}
    for level, source in record.levels.items():
        for binary in record.binaries:
            expected[libexec_path(binary, level).as_posix()] = source.binaries.get(binary, "")
    return expected

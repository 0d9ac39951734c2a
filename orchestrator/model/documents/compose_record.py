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
    levels: dict[str, ComposedLevel]  # rustc's CPU name (x86-64-v3) -> where it came from
    dispatcher: DispatcherInfo
    rule: str = DISPATCH_RULE
    # the crate's README, licences and the files they name, beside bin/ (path -> sha256),
    # as every level's archive carries them; none in folders composed before they were
    docs: dict[str, str] = Field(default_factory=dict)


def composed_digests(record: ComposeRecord) -> dict[str, str]:
    """path in the composed folder -> sha256 of every binary it holds: bin/<binary> the
    dispatcher, libexec/<binary>/<binary>-<level> each level's copy."""
    expected = {f"bin/{b}": record.dispatcher.sha256 for b in record.binaries}
    for level, source in record.levels.items():
        for binary in record.binaries:
            expected[libexec_path(binary, level).as_posix()] = source.binaries.get(binary, "")
    return expected

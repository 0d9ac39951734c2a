"""The declaration types of orchestrator.toml: a `Setting` (one key, and everything derived
from it) and a `FlavorKey` (one key of a `[flavors.<name>]` table)."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.config.declarations.kinds import Kind, Value

ENV_PREFIX = "ORCHESTRATOR_"


@dataclass(frozen=True)
class Setting:
    """One key of orchestrator.toml and everything derived from it."""

    key: str  # dotted: "build.target_cpu"
    kind: Kind
    default: Value | None  # None: computed at resolve time (see `computed`) or unset
    help: str
    attr: str  # the `Options` attribute it fills
    flag: str | None = None  # "--target-cpu"; bools: "--pgo/--no-pgo"
    choices: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()  # older environment variables, still accepted
    computed: str = ""  # what a None default means: "the package name"

    @property
    def section(self) -> str:
        return self.key.split(".", 1)[0]

    @property
    def name(self) -> str:
        return self.key.split(".", 1)[1]

    @property
    def env(self) -> str:
        """The canonical environment variable: ORCHESTRATOR_<SECTION>_<KEY>."""
        return ENV_PREFIX + self.key.replace(".", "_").upper()

    @property
    def env_names(self) -> tuple[str, ...]:
        """Every variable read, the canonical one first (it wins when several are set)."""
        return (self.env, *self.aliases)

    @property
    def flag_names(self) -> tuple[str, ...]:
        """("--target-cpu",) or ("--pgo", "--no-pgo"); () when the setting has no flag."""
        return tuple(self.flag.split("/")) if self.flag else ()


@dataclass(frozen=True)
class FlavorKey:
    """One key of a `[flavors.<name>]` table (no environment variable, no flag)."""

    name: str
    kind: Kind
    default: Value
    help: str

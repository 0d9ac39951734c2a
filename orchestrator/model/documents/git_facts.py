"""What build scripts may ask `git` about the commit a release is built from.

Build scripts of released CLIs embed the commit in `--version` (`git rev-parse --short
HEAD`, `git describe`, vergen-gitcl, shadow-rs's command mode). The build container holds
a snapshot of the sources, not a repository: a real `.git` would make the outputs depend
on the checkout (packs, reflogs, other branches). Instead the host reads these facts once
at plan time, the plan, build.json and release.lock record them, and a `git` shim in the
build container (plan/git_shim.py) answers from them alone. `reproduce` takes them from
the lock, so it rebuilds the same bytes without any repository.

Commit times and names are kept as git prints them (`placeholders`), not recomputed:
`%cd` is in the committer's own time zone, which no formula in the container could know.
`abbrev` is the checkout's own abbreviation length (git grows it with the repository), so
`--short` prints what a `cargo build` in the checkout embeds.

`dirty` is what the build saw: False for a release (it refuses local changes besides the
config), True for a build of a changed tree (`build`, `release --allow-dirty`), so that
`describe --dirty` never calls such a binary clean. The facts are inputs of every cargo
step's key and of the action key: a new commit rebuilds even where only the config
changed, since a build script may embed the commit. (vergen-gitcl takes its commit dates
from SOURCE_DATE_EPOCH, which every cargo step sets: the commit time unless configured.)
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

# SHA-1 (40) or SHA-256 (64) object names, as in release.lock.
CommitId = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{40}(?:[0-9a-f]{24})?$")]

# `git log -1 --format=...` placeholders recorded at plan time, in this order; the shim
# prints any other placeholder verbatim, as git does with one it does not know.
PLACEHOLDERS = (
    "H",  # commit id
    "h",  # abbreviated commit id
    "T",  # tree id
    "t",  # abbreviated tree id
    "P",  # parent ids
    "p",  # abbreviated parent ids
    "an",  # author name
    "ae",  # author email
    "ad",  # author date (git's default format, the author's time zone)
    "aI",  # author date, strict ISO 8601
    "ai",  # author date, ISO-like
    "as",  # author date, YYYY-MM-DD
    "at",  # author date, unix time
    "cn",  # committer name
    "ce",  # committer email
    "cd",  # committer date
    "cI",  # committer date, strict ISO 8601 (vergen's COMMIT_TIMESTAMP)
    "ci",  # committer date, ISO-like
    "cs",  # committer date, YYYY-MM-DD (vergen's COMMIT_DATE)
    "ct",  # committer date, unix time
    "s",  # subject (vergen's COMMIT_MESSAGE)
)


class _Fact(BaseModel):
    """Like model/documents/record_io.py's Record (strict keys, immutable), but with no schema: a
    part of build.json and release.lock, never a file of its own."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def dump(self) -> dict[str, object]:
        return self.model_dump(mode="json")


class DescribeTag(_Fact):
    """The nearest tag `git describe` finds and how many commits HEAD is past it."""

    name: str
    distance: int = Field(ge=0)


class GitFacts(_Fact):
    """The locked commit as build scripts see it through the shim."""

    commit: CommitId
    abbrev: int = Field(ge=4, le=64)  # length of `git rev-parse --short HEAD` in the checkout
    commit_time: int  # committer time, unix seconds (%ct)
    branch: str | None  # `git rev-parse --abbrev-ref HEAD`; None when HEAD is detached
    commit_count: int = Field(ge=1)  # `git rev-list --count HEAD`
    # Nearest tag of any kind (`describe --tags`) and nearest annotated one (`describe`)
    tag: DescribeTag | None
    annotated_tag: DescribeTag | None
    # Local changes besides the config (release refuses them unless --allow-dirty)
    dirty: bool
    placeholders: dict[str, str]  # PLACEHOLDERS -> what `git log -1 --format=%X` printed

    def short(self, length: int | None = None) -> str:
        return self.commit[: self.abbrev if length is None else max(4, length)]

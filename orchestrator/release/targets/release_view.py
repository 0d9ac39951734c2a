"""What a release reads of the settings, the same for all its targets (`ReleaseView`), and
what it reads of the engines' settings (`EngineSettings`).

Built once from `Options` where a command starts (cli/), so that the release's rooms
(targets, lock, assemble, run, dry run) depend on these fields alone; each target's own
settings travel in its `Target.options` and its plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from orchestrator.config.resolve.options import FlavorSettings, Options
from orchestrator.execute.ship.archive_stage import PublishSettings
from orchestrator.host.source import CrateView


@dataclass(frozen=True)
class EngineSettings:
    """`[engines]`: the Docker contexts a release builds on, the targets each builds at a
    time, whether images are made ahead, and what each flavor requires of an engine."""

    contexts: tuple[str, ...]
    jobs: int | str  # a count, or "auto"
    prefetch: bool
    require: tuple[str, ...]

    @classmethod
    def from_options(cls, options: Options) -> EngineSettings:
        return cls(
            contexts=options.engine_contexts,
            jobs=options.engine_jobs,
            prefetch=options.engine_prefetch,
            require=options.engine_require,
        )


@dataclass(frozen=True)
class ReleaseView:
    """The release's name and version, where it is published, the cache, the timestamp its
    archives carry, which flavors compose an -auto folder, the crate it is built from
    (and the config's folder, which release.lock records it against), the engines, and
    what publication reads ([archive])."""

    cache_dir: Path
    dispatch: Mapping[str, bool]  # flavors.<name>.dispatch: its x86-64 levels composed
    project_dir: Path
    crate: CrateView
    engines: EngineSettings
    # What each target's folder is published with; also the release's name, version,
    # folder and archive timestamp (the properties below read them from here)
    publishing: PublishSettings
    offline: bool = False  # reproduce: every image input from the cache or the vault

    @classmethod
    def from_options(cls, options: Options) -> ReleaseView:
        return cls(
            cache_dir=options.cache_dir,
            dispatch={name: flavor.dispatch for name, flavor in options.flavor_settings.items()},
            project_dir=options.project_dir,
            crate=CrateView.from_options(options),
            engines=EngineSettings.from_options(options),
            publishing=PublishSettings.from_options(options),
            offline=options.offline,
        )

    def dispatches(self, flavor: str) -> bool:
        """Whether `flavor`'s levels are composed into an -auto folder."""
        return self.dispatch.get(flavor, FlavorSettings().dispatch)

    @property
    def binary(self) -> str:
        return self.publishing.binary

    @property
    def version(self) -> str:
        return self.publishing.version

    @property
    def artifacts_dir(self) -> Path:
        return self.publishing.artifacts_dir

    @property
    def source_date_epoch(self) -> int:
        return self.publishing.source_date_epoch

    @property
    def release_dir(self) -> Path:
        """<artifacts>/<binary>-<version>: the release's folder."""
        return self.publishing.release_dir

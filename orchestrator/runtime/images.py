"""Make sure the base and toolchain images exist, building them only when their inputs changed.

An image's tag and its `org.orchestrator.input-hash` label both come from the hash of
everything that goes into it, so "is it up to date?" is one lookup.

Runs on one engine build each image once: the build happens under the engine's lock for
that reference (runtime/imagelock.py), and a run that waited for another's build looks
again and uses the image it finds. So a tag, once made, is never moved to another image
while a concurrent run's containers use it.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from orchestrator.config.resolve.toolchains import AptSources, BaseSpec
from orchestrator.errors import CacheCorruptError, ImageBuildError
from orchestrator.host.bootstrap import (
    PackageSet,
    fetch_packages,
    load_package_set,
    make_rootfs,
)
from orchestrator.host.scratch import scratch_dir
from orchestrator.host.vault import VaultError
from orchestrator.model.hashing import content_hash, sha256_file
from orchestrator.plan.images import ImagePlan
from orchestrator.progress.reporter import StepLog
from orchestrator.runtime.engine import LABEL_INPUT_HASH, Engine

LABEL_ROOTFS_SHA = "org.orchestrator.rootfs-sha256"
LABEL_PACKAGES_SHA = "org.orchestrator.packages-sha256"
FLATTEN_LOST = "FLATTEN-LOST-FILES"  # printed by the check in toolchain.Dockerfile.j2
FLATTEN_ATTEMPTS = 3
# apt's words when a pinned package needs a newer version of one the base rootfs holds:
# the base was made before the mirror's last point release.
_STALE_BASE = re.compile(r"Depends: (\S+) \(= ([^)]+)\) but (\S+) is to be installed")


@dataclass(frozen=True)
class ImageOutcome:
    reference: str
    id: str
    input_hash: str
    built: bool
    labels: Mapping[str, str]

    def as_dict(self) -> dict[str, object]:
        return {
            "reference": self.reference,
            "id": self.id,
            "input_hash": self.input_hash,
            "built_this_run": self.built,
            "labels": {
                k: v
                for k, v in self.labels.items()
                if k.startswith("org.orchestrator.")
                and k.rsplit(".", 1)[-1] not in ("session", "pid", "host")
            },
        }


def _remove_superseded(engine: Engine, plan: ImagePlan, log: StepLog) -> None:
    """Drop older images of the same family (repository and tag prefix) than `plan`.

    Toolchain images are flattened (FROM scratch), so no image depends on another's
    layers; without this, every pin or template change would leave gigabytes behind.
    """
    family = plan.reference[: -len(plan.input_hash[:16])]
    freed = 0
    for image in engine.managed_images():
        if plan.reference in image.tags:
            continue
        if any(tag.startswith(family) for tag in image.tags):
            # Another run may still build with it (older pins): it goes on a later run.
            if not engine.remove_image(image.id, unused_only=True):
                log.line(f"kept superseded image {', '.join(image.tags)}: a container uses it")
                continue
            freed += image.size
            log.line(f"removed superseded image {', '.join(image.tags)}")
    if freed:
        log.line(f"freed {freed / 1e9:.2f} GB of superseded images")


def _existing(engine: Engine, plan: ImagePlan) -> ImageOutcome | None:
    info = engine.image(plan.reference)
    if info is None:
        return None
    if info.labels.get(LABEL_INPUT_HASH) != plan.input_hash:
        # Same tag, other inputs: someone tagged by hand. Never trust it.
        engine.remove_image(plan.reference)
        return None
    return ImageOutcome(plan.reference, info.id, plan.input_hash, False, info.labels)


def ensure_base_image(
    engine: Engine,
    base: BaseSpec,
    plan: ImagePlan,
    cache_dir: Path,
    log: StepLog,
    *,
    offline: bool = False,
) -> ImageOutcome:
    outcome = _once_per_engine(
        engine, plan, log, lambda: _import_base(engine, base, plan, cache_dir, log, offline=offline)
    )
    if outcome.built or offline or _rootfs_tarball(cache_dir, plan).is_file():
        return outcome
    return _rootfs_for_existing(engine, base, plan, cache_dir, log, outcome=outcome)


def _rootfs_tarball(cache_dir: Path, plan: ImagePlan) -> Path:
    return cache_dir / "rootfs" / f"{plan.input_hash}.tar"


def _rootfs_for_existing(
    engine: Engine,
    base: BaseSpec,
    plan: ImagePlan,
    cache_dir: Path,
    log: StepLog,
    *,
    outcome: ImageOutcome,
) -> ImageOutcome:
    """The base image is on the engine but its rootfs is not in this cache (it was made
    under another cache directory, or the cache was cleared): a release could not pin it.
    Make the rootfs here; mmdebstrap is reproducible, so it is the image's own, and where
    it is not, the image is imported again from it, so that what a lock pins is what runs."""
    tarball = _rootfs_tarball(cache_dir, plan)
    log.line(f"{plan.reference} exists, but its rootfs is not in {cache_dir}: making it here")
    log.cached = False  # work was done: the step line says what, not "exists"
    digest = make_rootfs(base, tarball, log)
    if digest == outcome.labels.get(LABEL_ROOTFS_SHA):
        log.line(f"rootfs {tarball}: sha256 {digest}, the image's own")
        log.detail = f"{plan.reference} exists; its rootfs made again in this cache"
        return outcome
    log.line(
        f"rootfs {tarball}: sha256 {digest}, not the image's "
        f"({outcome.labels.get(LABEL_ROOTFS_SHA) or 'unrecorded'}): importing it again"
    )
    with engine.image_lock(plan.reference, on_wait=log.line):
        return _import_base(engine, base, plan, cache_dir, log, offline=False)


def _once_per_engine(
    engine: Engine, plan: ImagePlan, log: StepLog, make: Callable[[], ImageOutcome]
) -> ImageOutcome:
    """The image `plan` names: found on the engine, or made by `make` under the engine's
    lock for that reference (another run making it meanwhile is waited for, then used)."""
    existing = _existing(engine, plan)
    if existing is not None:
        log.mark_cached(f"{plan.reference} exists")
        return existing
    with engine.image_lock(plan.reference, on_wait=log.line) as waited:
        existing = _existing(engine, plan)
        if existing is not None:  # another run made it while this one waited
            log.mark_cached(f"{plan.reference} made by another run meanwhile")
            return existing
        if waited:
            log.line(f"the other run left no {plan.reference}: making it here")
        return make()


def _import_base(
    engine: Engine,
    base: BaseSpec,
    plan: ImagePlan,
    cache_dir: Path,
    log: StepLog,
    *,
    offline: bool,
) -> ImageOutcome:
    tarball = _rootfs_tarball(cache_dir, plan)
    if tarball.is_file():  # written atomically: present means complete
        digest = sha256_file(tarball)
        log.line(f"reusing rootfs {tarball} (sha256 {digest})")
    elif offline:
        raise VaultError(
            f"offline: the base rootfs {tarball.name} is not in the cache",
            hint="Import the release's vault first (orchestrator vault import).",
        )
    else:
        digest = make_rootfs(base, tarball, log)
    log.line(f"rootfs {tarball}: sha256 {digest}")
    labels = {LABEL_INPUT_HASH: plan.input_hash, LABEL_ROOTFS_SHA: digest}
    log.line(f"+ docker import {tarball} {plan.reference}")
    image_id = engine.import_rootfs(tarball, plan.reference, labels)
    _remove_superseded(engine, plan, log)
    info = engine.image(plan.reference)
    return ImageOutcome(
        plan.reference, image_id, plan.input_hash, True, info.labels if info else labels
    )


def package_set_dir(
    base: BaseSpec,
    packages: Mapping[str, str],
    cache_dir: Path,
    sources: AptSources,
    unpack: Mapping[str, str],
) -> Path:
    key: dict[str, object] = {"base": base.as_dict(), "packages": dict(packages)}
    if sources != AptSources():
        key["sources"] = sources.as_dict()
    if unpack:
        key["unpack"] = dict(unpack)
    return cache_dir / "packages" / content_hash(key)


def _package_set(
    base: BaseSpec,
    packages: Mapping[str, str],
    cache_dir: Path,
    log: StepLog,
    *,
    sources: AptSources,
    unpack: Mapping[str, str],
    offline: bool,
) -> PackageSet:
    directory = package_set_dir(base, packages, cache_dir, sources, unpack)
    try:
        cached = load_package_set(directory)
    except CacheCorruptError as exc:
        log.warn(f"discarding corrupt package cache: {exc.message}")
        shutil.rmtree(directory, ignore_errors=True)
        cached = None
    if cached is not None:
        log.line(f"using {len(cached.files)} cached packages from {directory}")
        return cached
    if offline:
        raise VaultError(
            f"offline: the package set {directory.name} is not in the cache",
            hint="Import the release's vault first (orchestrator vault import).",
        )
    return fetch_packages(base, packages, directory, log, sources=sources, unpack=unpack)


def ensure_toolchain_image(
    engine: Engine,
    *,
    base: BaseSpec,
    base_image: ImageOutcome,
    plan: ImagePlan,
    dockerfile: str,
    packages: Mapping[str, str],
    sources: AptSources,
    unpack: Mapping[str, str],
    cache_dir: Path,
    log: StepLog,
    offline: bool = False,
) -> ImageOutcome:
    outcome = _once_per_engine(
        engine,
        plan,
        log,
        lambda: _build_toolchain(
            engine,
            base=base,
            base_image=base_image,
            plan=plan,
            dockerfile=dockerfile,
            packages=packages,
            sources=sources,
            unpack=unpack,
            cache_dir=cache_dir,
            log=log,
            offline=offline,
        ),
    )
    if not offline:
        # The lock pins the image's .debs from this cache: an image another cache's build
        # made (the same engine, another cache folder) still needs them here.
        held = _package_set(
            base, packages, cache_dir, log, sources=sources, unpack=unpack, offline=False
        )
        recorded = outcome.labels.get(LABEL_PACKAGES_SHA)
        if recorded and recorded != held.digest:
            log.warn(
                f"the image {plan.reference} was built from other .debs ({recorded[:12]}) than "
                f"this cache holds ({held.digest[:12]}): a lock would pin these; remove the "
                "image (orchestrator clean --images) to build it from them"
            )
    return outcome


def _build_toolchain(
    engine: Engine,
    *,
    base: BaseSpec,
    base_image: ImageOutcome,
    plan: ImagePlan,
    dockerfile: str,
    packages: Mapping[str, str],
    sources: AptSources,
    unpack: Mapping[str, str],
    cache_dir: Path,
    log: StepLog,
    offline: bool,
) -> ImageOutcome:
    package_set = _package_set(
        base, packages, cache_dir, log, sources=sources, unpack=unpack, offline=offline
    )
    with scratch_dir(cache_dir, "context") as context:
        (context / "Dockerfile").write_text(dockerfile)
        debs = context / "packages"
        debs.mkdir()
        for entry in package_set.files:
            source = package_set.directory / entry.file
            (debs / entry.file).parent.mkdir(exist_ok=True)
            try:
                (debs / entry.file).hardlink_to(source)  # no copy of ~250 MB when possible
            except OSError:
                shutil.copy2(source, debs / entry.file)
            if sha256_file(debs / entry.file) != entry.sha256:
                raise CacheCorruptError(f"{source} changed while preparing the build context")
        labels = {LABEL_INPUT_HASH: plan.input_hash, LABEL_PACKAGES_SHA: package_set.digest}
        log.line(
            f"+ docker build --network none --build-arg BASE_IMAGE={base_image.reference} "
            f"-t {plan.reference} {context}"
        )
        stale: list[re.Match[str]] = []
        for attempt in range(1, FLATTEN_ATTEMPTS + 1):
            lost: list[str] = []

            def output(line: str, lost: list[str] = lost) -> None:
                if FLATTEN_LOST in line:
                    lost.append(line)
                if found := _STALE_BASE.search(line):
                    stale.append(found)
                log.line(line)

            try:
                image_id = engine.build_image(
                    context,
                    plan.reference,
                    buildargs={"BASE_IMAGE": base_image.reference},
                    labels=labels,
                    on_output=output,
                )
                break
            except ImageBuildError as error:
                if stale:
                    package, wanted, present = stale[0].groups()
                    raise ImageBuildError(
                        f"building {plan.reference}: the pinned packages need {package} "
                        f"{wanted}, but the base image {base_image.reference} holds {present}: "
                        "it was made before the mirror's last point release",
                        hint="Make the base again: `orchestrator clean --images` and remove "
                        "<cache>/rootfs, then build (and update toolchains/*.toml pins).",
                    ) from error
                # The image's own check found files lost while flattening: build again.
                if not lost or attempt == FLATTEN_ATTEMPTS:
                    raise
                log.line(f"attempt {attempt}: the flattened image lost files; building again")
    _remove_superseded(engine, plan, log)
    info = engine.image(plan.reference)
    if info is None:
        raise ImageBuildError(f"{plan.reference} vanished right after it was built")
    log.detail = f"built, {info.size / 1e9:.2f} GB"
    return ImageOutcome(plan.reference, image_id, plan.input_hash, True, info.labels)

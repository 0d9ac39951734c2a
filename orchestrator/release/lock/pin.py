"""Pin a release: put every input blob in the vault and write release.lock.

`record_release` runs after `orchestrator release` (and for `orchestrator lock`);
`check_lock` compares a lockfile with what the configuration would build now.
`release/lock/reproduce.py` rebuilds from what is pinned here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from orchestrator.execute.build import prepare_plan
from orchestrator.host.bootstrap import (
    MANIFEST,
    deb_identity,
    read_manifest,
    recipe_file,
    rootfs_recipe,
)
from orchestrator.host.source import crate_identity, registry_crates
from orchestrator.host.system import git
from orchestrator.host.vault import Vault
from orchestrator.model.documents.lockfile import (
    LOCK_FILE,
    LockDocument,
    LockedBolt,
    LockedGate,
    LockedPackage,
    LockedProfile,
    LockedTarget,
    LockfileError,
    LockInputArchive,
    LockInputs,
    LockLimits,
    LockOutput,
    LockResolved,
    RootfsRecipe,
    SharedPins,
    drift,
    lock_document,
    write_lock,
)
from orchestrator.model.documents.records import BuildManifest, read_record
from orchestrator.model.hashing import sha256_file
from orchestrator.model.verdict.bolt_binaries import binary_of_profile
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.plan.serialize import plan_inputs
from orchestrator.release.targets.release_view import ReleaseView
from orchestrator.release.targets.sources_at_start import SourcesAtStart
from orchestrator.release.targets.target import Target
from orchestrator.runtime.images import package_set_dir
from orchestrator.supply.archives import ZIP_SUFFIX, archive_name


def vault_for(cache_dir: Path) -> Vault:
    """The vault of the cache at `cache_dir`: every blob a lock pins, by its sha256."""
    return Vault(cache_dir / "vault")


# -- writing the lock ---------------------------------------------------------------
def locked_target(
    target: Target,
    plan: BuildPlan,
    manifest: BuildManifest,
    artifact: Path,
    vault: Vault,
    *,
    archive: Path | None,
) -> LockedTarget:
    """A target's lock entry: its plan's inputs, what resolved them (the .debs and profiles,
    put in the vault), and its outputs; `archive` is its <artifact>.tar.xz, if any."""
    options = target.options
    built = {
        "toolchain image": manifest.images.toolchain.input_hash,
        "sources": manifest.inputs.source_archive_sha256,
    }
    planned = {"toolchain image": plan.image.input_hash, "sources": plan.source.archive_sha256}
    stale = [what for what in built if built[what] != planned[what]]
    if stale:
        raise LockfileError(
            f"{plan.artifact_dir} was built from other {' and '.join(stale)} than the config "
            "gives now: a lock of it would pin inputs it was not built from",
            hint="Build it again (orchestrator release), then lock.",
        )
    set_dir = package_set_dir(
        plan.base, plan.packages, options.cache_dir, plan.apt_sources, plan.unpack
    )
    recorded = read_manifest(set_dir)
    if recorded is None:
        raise LockfileError(
            f"the .debs that built {plan.artifact_dir} are no longer in {set_dir}",
            hint=f"Rebuild it (orchestrator build --flavor {plan.flavor}) and lock again.",
        )
    packages = []
    for entry in recorded:
        name, version, arch = deb_identity(entry.file)
        vault.put(set_dir / entry.file, expected=entry.sha256)
        packages.append(
            LockedPackage(
                name=name,
                version=version,
                arch=arch,
                file=entry.file,
                sha256=entry.sha256,
                size=entry.size,
            )
        )
    profiles: dict[str, LockedProfile] = {}
    bolt = manifest.bolt
    for name, record in manifest.profiles.items():
        digest = vault.put(artifact / "profiles" / name, expected=record.sha256)
        if name.startswith("pgo.") and plan.pgo:  # pgo.profdata or pgo.unshipped.profdata
            stored = manifest.pgo.profile if manifest.pgo else {}
            key = f"pgo/{plan.pgo.profile_key}.profdata"
        else:  # the main binary's (bolt.fdata) or another one's (bolt-<binary>.fdata)
            other = bolt.binaries.get(binary_of_profile(name)) if bolt else None
            stored = (other.profile if other else bolt.profile if bolt else None) or {}
            key = f"bolt/{stored.get('cache_key')}.fdata"
        profiles[name] = LockedProfile(
            sha256=digest,
            size=record.size,
            cache_file=key,
            # what the build knew about it (function counts, BOLT mode), as the cache has it
            details={
                k: v for k, v in stored.items() if k not in ("sha256", "size", "reused_from_cache")
            },
        )
    resolved = LockResolved(
        packages=packages,
        package_set_sha256=sha256_file(set_dir / MANIFEST),
        toolchain_reported=manifest.toolchain.reported,
        gpu_compiler=(manifest.device_code or {}).get("compiler"),
        profiles=profiles,
        bolt=LockedBolt(mode=bolt.mode, applied=bolt.applied) if bolt else None,
        gate=_locked_gate(manifest),
    )
    output = LockOutput(
        file=manifest.artifact.file, sha256=manifest.artifact.sha256, size=manifest.artifact.size
    )
    others = [
        LockOutput(file=b.file, sha256=b.sha256, size=b.size)
        for b in manifest.artifact.other_binaries
    ]
    return LockedTarget(
        level=target.level,
        inputs=LockInputs.model_validate(plan_inputs(plan)),
        resolved=resolved,
        output=output,
        other_outputs=others,
        archive=LockOutput(
            file=archive.name, sha256=sha256_file(archive), size=archive.stat().st_size
        )
        if archive is not None
        else None,
        built_on=manifest.engine,
    )


def archive_outputs(release_dir: Path, artifact: str) -> dict[str, LockOutput | None]:
    """The lock entries of an artifact's archives beside its folder (None: not written)."""

    def output(path: Path) -> LockOutput | None:
        if not path.is_file():
            return None
        return LockOutput(file=path.name, sha256=sha256_file(path), size=path.stat().st_size)

    return {
        "archive": output(release_dir / archive_name(artifact)),
        "archive_zip": output(release_dir / archive_name(artifact, ZIP_SUFFIX)),
    }


def record_release(
    release: ReleaseView,
    chosen: Sequence[Target],
    release_dir: Path,
    vault: Vault,
    *,
    planned: Sequence[tuple[Target, BuildPlan]] | None = None,
    at_start: SourcesAtStart | None = None,
) -> Path:
    """Write release.lock for the published targets of `chosen`; fill the vault.

    A release passes the plans it built from (`planned`) and the sources as they were
    when it planned them (`at_start`): the lock then pins what was built, even if the
    checkout changed while the targets built. Without them (`orchestrator lock`) the
    targets are planned again from the checkout as it is."""
    locked: list[LockedTarget] = []
    plans: list[BuildPlan] = []
    pairs = planned or [(t, prepare_plan(t.options, t.flavor)) for t in chosen]
    for target, plan in pairs:
        artifact = release_dir / plan.artifact_dir
        if not (artifact / "build.json").is_file():
            continue  # failed or never built: not part of the release
        manifest = read_record(artifact / "build.json", BuildManifest)
        archive = artifact.parent / archive_name(artifact.name)
        locked.append(
            locked_target(
                target,
                plan,
                manifest,
                artifact,
                vault,
                archive=archive if archive.is_file() else None,
            ).model_copy(update=archive_outputs(release_dir, artifact.name))
        )
        plans.append(plan)
    if not locked:
        raise LockfileError(
            f"{release_dir} holds no published artifact of the configured targets",
            hint="Run `orchestrator release` first.",
        )
    return write_release_lock(
        release,
        plans[0],
        shared_pins(release.cache_dir, plans[0], vault),
        locked,
        release_dir,
        at_start=at_start,
    )


def shared_pins(cache_dir: Path, plan: BuildPlan, vault: Vault) -> SharedPins:
    """What every target of a release shares in its lock (the base rootfs, the vendored
    crates, the training inputs), each put in the vault from this machine's cache
    (`cache_dir`)."""
    rootfs = cache_dir / "rootfs" / f"{plan.base_image.input_hash}.tar"
    if not rootfs.is_file():
        raise LockfileError(
            f"the base rootfs tarball {rootfs} is no longer in the cache",
            hint="Remove the base image (orchestrator clean --images) and release again.",
        )
    vendor = cache_dir / "crates" / f"{plan.source.cargo_lock_sha256}.tar"
    if not vendor.is_file():
        raise LockfileError(
            f"the vendored crates {vendor} are no longer in the cache",
            hint="Release again (orchestrator release): it vendors them afresh.",
        )
    rootfs_sha256 = vault.put(rootfs)
    return SharedPins(
        rootfs_sha256=rootfs_sha256,
        mmdebstrap=RootfsRecipe.model_validate(_rootfs_recipe(plan, rootfs, rootfs_sha256)),
        vendor_sha256=vault.put(vendor),
        inputs=[
            LockInputArchive(
                name=item.name,
                sha256=vault.put_bytes(item.archive, f"{item.name}.tar"),
                size=len(item.archive),
            )
            for item in plan.run.inputs
        ],
    )


def write_release_lock(
    release: ReleaseView,
    plan: BuildPlan,
    pins: SharedPins,
    locked: Sequence[LockedTarget],
    release_dir: Path,
    *,
    at_start: SourcesAtStart | None = None,
) -> Path:
    """release.lock from the targets' entries and what they share, for the sources of the
    checkout `release` reads (the same for every target), as they were `at_start` of the
    release when given."""
    crate = release.crate
    identity = at_start.identity if at_start else crate_identity(crate)
    if not crate.crate_dir.is_relative_to(release.project_dir):
        raise LockfileError(
            f"the crate {crate.crate_dir} lies outside {release.project_dir}: a lockfile "
            "records it relative to the config file",
            hint="Keep orchestrator.toml in the crate's repository, at or above the crate.",
        )
    cargo_lock = at_start.cargo_lock if at_start else (crate.crate_dir / "Cargo.lock").read_text()
    config_text = at_start.config_text if at_start else crate.config_path.read_text()
    config_sha256 = at_start.config_sha256 if at_start else sha256_file(crate.config_path)
    document = lock_document(
        name=release.binary,
        version=release.version,
        config={
            "file": crate.config_path.name,
            "sha256": config_sha256,
            "text": config_text,
        },
        source={
            **identity,
            "repository_path": _repository_path(release),
            "crate": crate.crate_dir.relative_to(release.project_dir).as_posix(),
            "source_date_epoch": crate.source_date_epoch,
            "source_archive_sha256": plan.source.archive_sha256,
            "cargo_lock_sha256": plan.source.cargo_lock_sha256,
            "vendor_sha256": pins.vendor_sha256,
            "crates": [c.__dict__ for c in registry_crates(cargo_lock)],
            "exclude": list(crate.source_exclude),
            "inputs": [item.dump() for item in pins.inputs],
            "git": plan.source.git.dump() if plan.source.git is not None else None,
        },
        base={
            **plan.base.as_dict(),
            "mmdebstrap": pins.mmdebstrap.dump(),
            "rootfs_sha256": pins.rootfs_sha256,
        },
        targets=locked,
        # Settings of this run, like every target's: `reproduce` runs under the same.
        limits=LockLimits(pids=plan.limit_pids, memory=plan.limit_memory),
    )
    return write_lock(release_dir / LOCK_FILE, document)


def _rootfs_recipe(plan: BuildPlan, tarball: Path, digest: str) -> dict[str, Any]:
    """How the rootfs was made: the command, and mmdebstrap's version where it was recorded.

    A record that names another sha256 belongs to an earlier tarball (this one came from a
    vault), so it says nothing about this one.
    """
    record = recipe_file(tarball)
    made = json.loads(record.read_text()) if record.is_file() else {}
    if made.get("sha256") != digest:
        made = {}
    return {
        "command": made.get("command") or ["mmdebstrap", *rootfs_recipe(plan.base)],
        "version": made.get("mmdebstrap_version"),
    }


def _repository_path(release: ReleaseView) -> str | None:
    """The config file's path inside its git repository (for `git archive`)."""
    prefix = git(release.project_dir, "rev-parse", "--show-prefix")
    if prefix is None:
        return None
    return (Path(prefix) / release.crate.config_path.name).as_posix()


def check_lock(config_path: Path, document: LockDocument, chosen: Sequence[Target]) -> list[str]:
    """Differences between the lock and what the configuration would build now."""
    current = {}
    for target in chosen:
        plan = prepare_plan(target.options, target.flavor)
        current[plan.artifact_dir] = plan_inputs(plan)
    changes = drift(document, current)
    if document.config.sha256 != sha256_file(config_path):
        changes.insert(0, f"{config_path.name} changed since the lock was written")
    return changes


def _locked_gate(manifest: BuildManifest) -> LockedGate | None:
    """The variant the speed gate shipped: a reproduction ships the same one, uncounted."""
    gate = manifest.gate
    if gate is None or gate.shipped is None:
        return None
    bolted = manifest.bolt.binaries if manifest.bolt else {}
    # The binaries its BOLT variant ships unBOLTed (each gated on its own workloads)
    unbolted = sorted(name for name, b in bolted.items() if b.applied and b.kept is False)
    return LockedGate(shipped=gate.shipped, policy=gate.policy, unbolted=unbolted)

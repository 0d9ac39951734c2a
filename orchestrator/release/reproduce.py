"""Pin a release (release.lock + vault) and rebuild it from the pins, offline, bit for bit.

`record_release` runs after `orchestrator release`: it puts every input blob in the vault
and writes release.lock. `reproduce` reads a lockfile, lays the sources out in a fresh
folder, seeds a fresh cache from the vault only (rootfs, .debs, crates, profiles), builds
every target in fresh images and containers with `offline` set, so nothing can be
downloaded, and compares each binary with its recorded sha256.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console

from orchestrator.config.options import Options, resolve
from orchestrator.errors import OrchestratorError, SourceError
from orchestrator.execute.build import prepare_plan, run_build
from orchestrator.host.system import source_identity
from orchestrator.host.bootstrap import (
    MANIFEST,
    deb_identity,
    read_manifest,
    recipe_file,
    rootfs_recipe,
)
from orchestrator.host.source import registry_crates
from orchestrator.host.system import git
from orchestrator.host.vault import Vault
from orchestrator.model.hashing import sha256_file
from orchestrator.model.lockfile import (
    LOCK_FILE,
    LockedTarget,
    LockfileError,
    blobs,
    drift,
    lock_document,
    read_lock,
    write_lock,
)
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.plan.serialize import plan_inputs
from orchestrator.progress import Reporter
from orchestrator.release.run import Target, targets
from orchestrator.runtime.engine import Engine
from orchestrator.runtime.images import package_set_dir
from orchestrator.supply.attest import Signer


class ReproduceMismatchError(OrchestratorError):
    exit_code = 55
    default_hint = (
        "The table says which artifacts differ; the diffoscope reports say where, and the "
        "lines above name any recorded input that differed."
    )


def vault_for(options: Options) -> Vault:
    return Vault(options.cache_dir / "vault")


# -- writing the lock ---------------------------------------------------------------
def _locked_target(
    target: Target, plan: BuildPlan, manifest: dict[str, Any], artifact: Path, vault: Vault
) -> LockedTarget:
    options = target.options
    built = {
        "toolchain image": manifest["images"]["toolchain"]["input_hash"],
        "sources": manifest["inputs"]["source_archive_sha256"],
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
            {
                "name": name,
                "version": version,
                "arch": arch,
                "file": entry.file,
                "sha256": entry.sha256,
                "size": entry.size,
            }
        )
    profiles: dict[str, dict[str, Any]] = {}
    bolt = manifest.get("bolt") or {}
    for name, record in (manifest.get("profiles") or {}).items():
        digest = vault.put(artifact / "profiles" / name, expected=record["sha256"])
        if name == "pgo.profdata" and plan.pgo:
            stored = (manifest.get("pgo") or {}).get("profile", {})
            key = f"pgo/{plan.pgo.profile_key}.profdata"
        else:
            stored = bolt.get("profile", {})
            key = f"bolt/{stored.get('cache_key')}.fdata"
        profiles[name] = {
            "sha256": digest,
            "size": record["size"],
            "cache_file": key,
            # what the build knew about it (function counts, BOLT mode), as the cache has it
            "details": {
                k: v for k, v in stored.items() if k not in ("sha256", "size", "reused_from_cache")
            },
        }
    device = manifest.get("device_code") or {}
    resolved = {
        "packages": packages,
        "package_set_sha256": sha256_file(set_dir / MANIFEST),
        "toolchain_reported": manifest["toolchain"]["reported"],
        "gpu_compiler": device.get("compiler"),
        "profiles": profiles,
        "bolt": {"mode": bolt.get("mode"), "applied": bolt.get("applied")} if bolt else None,
    }
    output = {
        "file": manifest["artifact"]["file"],
        "sha256": manifest["artifact"]["sha256"],
        "size": manifest["artifact"]["size"],
    }
    return LockedTarget(target.level, plan_inputs(plan), resolved, output)


def record_release(
    options: Options, chosen: Sequence[Target], release_dir: Path, vault: Vault
) -> Path:
    """Write release.lock for the published targets of `chosen`; fill the vault."""
    locked: list[LockedTarget] = []
    plans: list[BuildPlan] = []
    for target in chosen:
        plan = prepare_plan(target.options, target.flavor)
        artifact = release_dir / plan.artifact_dir
        if not (artifact / "build.json").is_file():
            continue  # failed or never built: not part of the release
        manifest = json.loads((artifact / "build.json").read_text())
        locked.append(_locked_target(target, plan, manifest, artifact, vault))
        plans.append(plan)
    if not locked:
        raise LockfileError(
            f"{release_dir} holds no published artifact of the configured targets",
            hint="Run `orchestrator release` first.",
        )
    plan = plans[0]
    rootfs = options.cache_dir / "rootfs" / f"{plan.base_image.input_hash}.tar"
    if not rootfs.is_file():
        raise LockfileError(
            f"the base rootfs tarball {rootfs} is no longer in the cache",
            hint="Remove the base image (orchestrator clean --images) and release again.",
        )
    vendor = options.cache_dir / "crates" / f"{plan.source.cargo_lock_sha256}.tar"
    if not vendor.is_file():
        raise LockfileError(f"the vendored crates {vendor} are no longer in the cache")
    rootfs_sha256 = vault.put(rootfs)
    identity = source_identity(options.crate_dir)
    if not options.crate_dir.is_relative_to(options.project_dir):
        raise LockfileError(
            f"the crate {options.crate_dir} lies outside {options.project_dir}: a lockfile "
            "records it relative to the config file",
            hint="Keep orchestrator.toml in the crate's repository, at or above the crate.",
        )
    cargo_lock = (options.crate_dir / "Cargo.lock").read_text()
    document = lock_document(
        name=options.binary,
        version=options.version,
        config={
            "file": options.config_path.name,
            "sha256": sha256_file(options.config_path),
            "text": options.config_path.read_text(),
        },
        source={
            **identity,
            "repository_path": _repository_path(options),
            "crate": options.crate_dir.relative_to(options.project_dir).as_posix(),
            "source_date_epoch": options.source_date_epoch,
            "source_archive_sha256": plan.source.archive_sha256,
            "cargo_lock_sha256": plan.source.cargo_lock_sha256,
            "vendor_sha256": vault.put(vendor),
            "crates": [c.__dict__ for c in registry_crates(cargo_lock)],
        },
        base={
            **plan.base.as_dict(),
            "mmdebstrap": _rootfs_recipe(plan, rootfs, rootfs_sha256),
            "rootfs_sha256": rootfs_sha256,
        },
        targets=locked,
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


def _repository_path(options: Options) -> str | None:
    """The config file's path inside its git repository (for `git archive`)."""
    prefix = git(options.project_dir, "rev-parse", "--show-prefix")
    if prefix is None:
        return None
    return (Path(prefix) / options.config_path.name).as_posix()


def check_lock(options: Options, document: dict[str, Any], chosen: Sequence[Target]) -> list[str]:
    """Differences between the lock and what the configuration would build now."""
    current = {}
    for target in chosen:
        plan = prepare_plan(target.options, target.flavor)
        current[plan.artifact_dir] = plan_inputs(plan)
    changes = drift(document, current)
    if document["config"].get("sha256") != sha256_file(options.config_path):
        changes.insert(0, f"{options.config_path.name} changed since the lock was written")
    return changes


# -- reproducing --------------------------------------------------------------------
@dataclass
class Reproduced:
    artifact: str
    expected: str
    got: str = ""
    seconds: float = 0.0
    error: str = ""
    inputs_differing: list[str] = field(default_factory=list)
    report: Path | None = None

    @property
    def identical(self) -> bool:
        return bool(self.got) and self.got == self.expected

    def as_dict(self) -> dict[str, object]:
        return {
            "artifact": self.artifact,
            "expected_sha256": self.expected,
            "got_sha256": self.got or None,
            "identical": self.identical,
            "seconds": round(self.seconds, 1),
            "error": self.error or None,
            "inputs_differing": self.inputs_differing,
            "diffoscope_report": str(self.report) if self.report else None,
        }


def lay_out_sources(document: dict[str, Any], workdir: Path, source_dir: Path | None) -> Path:
    """The config and the crate in a fresh folder; returns the config's path there.

    The crate comes from `source_dir` when given, else from `git archive` of the locked
    commit in the repository this command runs in.
    """
    source = document["source"]
    config: Path = workdir / str(document["config"]["file"])
    workdir.mkdir(parents=True, exist_ok=True)
    config.write_text(document["config"]["text"])
    crate = workdir / str(source["crate"])
    if source_dir is not None:
        shutil.copytree(source_dir, crate, ignore=shutil.ignore_patterns("target", ".git"))
        return config
    commit, repository_path = source.get("git_commit"), source.get("repository_path")
    root = git(Path.cwd(), "rev-parse", "--show-toplevel")
    if not commit or repository_path is None or root is None:
        raise SourceError(
            "the lockfile names no git commit, or this folder is not in its repository",
            hint="Run reproduce inside the project's repository, or pass --source <crate dir>.",
        )
    if source.get("dirty"):
        raise SourceError(
            f"the release was built from a dirty tree (changes on top of {commit[:12]}): "
            "its sources are not in git",
            hint="Pass --source <crate dir> with exactly those sources.",
        )
    crate_in_repo = (Path(repository_path).parent / source["crate"]).as_posix()
    archive = subprocess.run(
        ["git", "-C", root, "archive", "--format=tar", commit, "--", crate_in_repo],
        capture_output=True,
        check=False,
    )
    if archive.returncode != 0:
        raise SourceError(
            f"git archive {commit[:12]} failed: {archive.stderr.decode().strip()}",
            hint="Fetch the commit (git fetch) or pass --source <crate dir>.",
        )
    with tempfile.TemporaryDirectory() as tmp:
        tar_path = Path(tmp) / "src.tar"
        tar_path.write_bytes(archive.stdout)
        with tarfile.open(tar_path) as tar:
            tar.extractall(Path(tmp) / "tree", filter="data")
        shutil.copytree(Path(tmp) / "tree" / crate_in_repo, crate)
    return config


def seed_cache(
    document: dict[str, Any], plan: BuildPlan, target: dict[str, Any], cache: Path, vault: Vault
) -> None:
    """Put every locked input of one target where the build looks for it, from the vault."""
    base, source, resolved = document["base"], document["source"], target["resolved"]
    vault.materialize(base["rootfs_sha256"], cache / "rootfs" / f"{plan.base_image.input_hash}.tar")
    vault.materialize(
        source["vendor_sha256"], cache / "crates" / f"{source['cargo_lock_sha256']}.tar"
    )
    set_dir = package_set_dir(plan.base, plan.packages, cache, plan.apt_sources, plan.unpack)
    entries = []
    for package in resolved["packages"]:
        vault.materialize(package["sha256"], set_dir / package["file"])
        entries.append(
            {"file": package["file"], "sha256": package["sha256"], "size": package["size"]}
        )
    (set_dir / MANIFEST).write_text(json.dumps(entries, indent=1) + "\n")
    for profile in resolved.get("profiles", {}).values():
        path = cache / "profiles" / profile["cache_file"]
        vault.materialize(profile["sha256"], path)
        meta = {
            "sha256": profile["sha256"],
            "size": profile["size"],
            **profile.get("details", {}),
        }
        path.with_suffix(".json").write_text(json.dumps(meta, indent=1) + "\n")


def differing_inputs(
    document: dict[str, Any], target: dict[str, Any], plan: BuildPlan
) -> list[str]:
    name = target["inputs"]["artifact"]
    changes = drift({"targets": [target]}, {name: plan_inputs(plan)})
    if plan.source.archive_sha256 != document["source"]["source_archive_sha256"]:
        changes.insert(0, f"{name}: the source tree differs from the locked one")
    return changes


def diffoscope_report(expected: Path, got: Path, report: Path, log: Callable[[str], None]) -> Path:
    """diffoscope's text report (installing Debian's diffoscope-minimal when missing)."""
    tool = shutil.which("diffoscope") or _install_diffoscope(log)
    if tool is None:
        differing = sum(
            a != b for a, b in zip(expected.read_bytes(), got.read_bytes(), strict=False)
        )
        report.write_text(
            "diffoscope could not be installed; byte comparison instead:\n"
            f"{expected}: {expected.stat().st_size} bytes\n{got}: {got.stat().st_size} bytes\n"
            f"{differing} differing bytes in the common length\n"
        )
        return report
    subprocess.run(
        [tool, "--text", str(report), str(expected), str(got)], check=False, capture_output=True
    )
    return report


def _install_diffoscope(log: Callable[[str], None]) -> str | None:
    apt = shutil.which("apt-get")
    if apt is None:
        return None
    log("installing diffoscope-minimal (apt-get) for the difference report")
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    for argv in (
        [*sudo, apt, "update", "-qq"],
        [*sudo, apt, "install", "-y", "-qq", "diffoscope-minimal"],
    ):
        if (
            subprocess.run(
                argv,
                capture_output=True,
                check=False,
                env={"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
            ).returncode
            != 0
        ):
            return None
    return shutil.which("diffoscope")


@dataclass(frozen=True)
class ReproduceRun:
    """What every target's reproduction shares."""

    document: dict[str, Any]
    release_dir: Path
    engine: Engine
    vault: Vault
    console: Console
    signer: Signer
    cache: Path
    fresh_images: bool
    announce: Callable[[str], None]
    removed_images: set[str] = field(default_factory=set)


def reproduce(
    lock_path: Path,
    *,
    engine: Engine,
    vault: Vault,
    console: Console,
    signer: Signer,
    workdir: Path,
    source_dir: Path | None,
    fresh_images: bool,
    announce: Callable[[str], None],
    only: Sequence[str] = (),
) -> list[Reproduced]:
    document = read_lock(lock_path)
    known = {t["inputs"]["artifact"] for t in document["targets"]}
    unknown = sorted(set(only) - known)
    if unknown:
        raise LockfileError(
            f"not in the lockfile: {', '.join(unknown)}",
            hint="It locks: " + ", ".join(sorted(known)),
        )
    if only:
        document = {
            **document,
            "targets": [t for t in document["targets"] if t["inputs"]["artifact"] in only],
        }
    missing = [
        f"{what} ({digest[:12]})"
        for digest, what in blobs(document).items()
        if not vault.has(digest)
    ]
    if missing:
        raise LockfileError(
            f"the vault lacks {len(missing)} input(s) of this release: " + ", ".join(missing[:5]),
            hint="Import the release's vault archive: orchestrator vault import <archive>.",
        )
    config = lay_out_sources(document, workdir / "src", source_dir)
    cache = workdir / "cache"
    options = resolve(
        config,
        env={"SOURCE_DATE_EPOCH": str(document["source"]["source_date_epoch"])},
        cli={"build.artifacts_dir": str(workdir / "artifacts"), "build.cache_dir": str(cache)},
        cwd=config.parent,
    )
    configured: dict[str, tuple[Target, BuildPlan]] = {}
    flavors = sorted({t["inputs"]["flavor"] for t in document["targets"]})
    for target in targets(replace(options, offline=True), flavors):
        plan = prepare_plan(target.options, target.flavor)
        configured.setdefault(plan.artifact_dir, (target, plan))
    run = ReproduceRun(
        document,
        lock_path if lock_path.is_dir() else lock_path.parent,
        engine,
        vault,
        console,
        signer,
        cache,
        fresh_images,
        announce,
    )
    results = []
    for entry in sorted(document["targets"], key=lambda t: str(t["inputs"]["artifact"])):
        name = entry["inputs"]["artifact"]
        result = Reproduced(name, entry["output"]["sha256"])
        results.append(result)
        if name not in configured:
            result.error = "the locked config no longer yields this target"
            continue
        _reproduce_one(run, entry, *configured[name], result)
    return results


def _reproduce_one(
    run: ReproduceRun, entry: dict[str, Any], target: Target, plan: BuildPlan, result: Reproduced
) -> None:
    result.inputs_differing = differing_inputs(run.document, entry, plan)
    locked_mode = (entry["resolved"].get("bolt") or {}).get("mode")
    if plan.bolt is not None and locked_mode and plan.bolt.mode != locked_mode:
        # `auto` picks a BOLT mode from what perf can do on this machine; the release's
        # choice is a resolved input, and its profile is keyed by it.
        target = replace(target, options=replace(target.options, bolt_mode=locked_mode))
        plan = prepare_plan(target.options, target.flavor)
    seed_cache(run.document, plan, entry, run.cache, run.vault)
    if run.fresh_images:
        for reference in (plan.base_image.reference, plan.image.reference):
            if reference not in run.removed_images:
                run.engine.remove_image(reference)
                run.removed_images.add(reference)
    run.announce(f"reproducing {result.artifact}")
    reporter = Reporter(run.console, run.cache / "runs" / run.engine.session / result.artifact)
    started = time.monotonic()
    try:
        outcome = run_build(target.options, plan, run.engine, reporter, signer=run.signer)
    except OrchestratorError as error:
        result.error = error.message.splitlines()[0]
        return
    finally:
        result.seconds = time.monotonic() - started
    result.got = sha256_file(outcome.binary)
    expected = run.release_dir / result.artifact / entry["output"]["file"]
    if not result.identical and expected.is_file():
        report = outcome.artifact.parent.parent / f"{result.artifact}.diffoscope.txt"
        result.report = diffoscope_report(expected, outcome.binary, report, run.announce)

"""`build --train-elsewhere DIR`: the training bundle, written whole or not at all.

The bundle holds the instrumented binaries (bin/), the files the workloads name (src/ for
the crate's, inputs/<name>/ for `[train] inputs`), train.sh and manifest.json, signed. It
is written into a hidden folder beside DIR and renamed into place, so DIR either holds a
complete bundle or does not exist.
"""

from __future__ import annotations

import posixpath
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath

from orchestrator.config.init.run_files import path_arguments
from orchestrator.errors import BundleError
from orchestrator.execute.optimize.train_script import render_train_sh
from orchestrator.model.documents.training_bundle import (
    BundleFile,
    BundleGpuCheck,
    BundleWorkload,
    TrainingManifest,
)
from orchestrator.model.hashing import sha256_bytes, sha256_file
from orchestrator.supply.attest import Signer

MANIFEST = "manifest.json"
TRAIN_SH = "train.sh"
_SRC, _INPUTS = PurePosixPath("/build/src"), PurePosixPath("/build/inputs")
_MAX_DATA_FILES = 10_000  # a workload naming a huge folder is a mistake, not a bundle


def workload_files(
    args: Iterable[str], crate_dir: Path, inputs: Mapping[str, Path]
) -> Iterator[tuple[str, Path]]:
    """(bundle path, host path) of each file the arguments name, as run_files judges paths;
    a folder brings its files. Paths outside the crate and the inputs are the machine's."""
    for value in path_arguments(args):
        path = PurePosixPath(posixpath.normpath(posixpath.join(_SRC, value)))
        if path.is_relative_to(_SRC) and path != _SRC:
            rel, host = path.relative_to(_SRC), crate_dir
            prefix = "src"
        elif path.is_relative_to(_INPUTS) and path != _INPUTS:
            first, *rest = path.relative_to(_INPUTS).parts
            if first not in inputs:
                continue
            rel, host = PurePosixPath(*rest) if rest else PurePosixPath(), inputs[first]
            prefix = f"inputs/{first}"
        else:
            continue
        found = host.joinpath(*rel.parts)
        if found.is_file():
            yield f"{prefix}/{rel}", found
        elif found.is_dir():
            for inner in sorted(p for p in found.rglob("*") if p.is_file()):
                yield f"{prefix}/{(rel / inner.relative_to(found).as_posix())}", inner


def _bundle_file(folder: Path, path: str, source: Path) -> BundleFile:
    target = folder / path
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    target.chmod(0o755 if path.startswith("bin/") else 0o644)
    try:
        return BundleFile(path=path, sha256=sha256_file(target), size=target.stat().st_size)
    except ValueError as error:
        raise BundleError(
            f"cannot put {source} into a training bundle as {path!r}: {error}"
        ) from None


def _check_count(count: int) -> None:
    if count > _MAX_DATA_FILES:
        raise BundleError(f"the workloads name {count} files; at most {_MAX_DATA_FILES}")


def write_bundle(
    dest: Path,
    *,
    signer: Signer,
    identity: Mapping[str, str],  # package, version, flavor, profile_key
    arch: str,
    binaries: Mapping[str, Path],  # name -> the instrumented binary on this machine
    workloads: Sequence[BundleWorkload],
    crate_dir: Path,
    inputs: Mapping[str, Path],
    workdir: str = "src",
    stdin: str = "",  # a bundle path
    environment: Mapping[str, str] | None = None,
    gpu_vendor: str = "",  # nvidia | amd: a GPU flavor's bundle checks its GPU path
    gpu_checks: Sequence[BundleGpuCheck] = (),
) -> TrainingManifest:
    """Write the bundle into `dest` (which must not exist yet) and return its manifest."""
    if dest.exists() or dest.is_symlink():
        raise BundleError(
            f"{dest} exists: a training bundle is written into a new folder",
            hint="Name a folder that does not exist yet, or remove the old bundle.",
        )
    if bool(gpu_vendor) != bool(gpu_checks) or gpu_vendor not in ("", "nvidia", "amd"):
        raise BundleError(f"internal: GPU checks {len(gpu_checks)} for vendor {gpu_vendor!r}")
    runs: list[BundleWorkload | BundleGpuCheck] = [*workloads, *gpu_checks]
    missing = [w.binary for w in runs if w.binary.removeprefix("bin/") not in binaries]
    if missing:
        raise BundleError(f"workloads run {', '.join(sorted(set(missing)))}, not in the bundle")
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.partial-"))
    try:
        bins = tuple(_bundle_file(partial, f"bin/{name}", binaries[name]) for name in binaries)
        wanted: dict[str, Path] = {}
        for workload in workloads:
            wanted.update(workload_files(workload.args, crate_dir, inputs))
        for check in gpu_checks:
            wanted.update(workload_files(check.cpu_args + check.gpu_args, crate_dir, inputs))
        if stdin.startswith(("src/", "inputs/")):
            wanted.setdefault(stdin, crate_dir / stdin.removeprefix("src/"))
        _check_count(len(wanted))
        data = tuple(_bundle_file(partial, path, wanted[path]) for path in sorted(wanted))
        (partial / workdir).mkdir(parents=True, exist_ok=True)  # the runs start there
        script = render_train_sh(
            arch=arch,
            title=" ".join(identity.values()),
            files=bins + data,
            workloads=workloads,
            workdir=workdir,
            stdin=stdin,
            environment=environment or {},
            gpu_vendor=gpu_vendor,
            gpu_checks=gpu_checks,
        )
        (partial / TRAIN_SH).write_text(script)
        (partial / TRAIN_SH).chmod(0o755)
        manifest = TrainingManifest(
            package=identity["package"],
            version=identity["version"],
            flavor=identity["flavor"],
            profile_key=identity["profile_key"],
            arch=arch,
            binaries=bins,
            data=data,
            workloads=tuple(workloads),
            workdir=workdir,
            stdin=stdin,
            environment=dict(environment or {}),
            train_sh_sha256=sha256_bytes(script.encode()),
            gpu_vendor=gpu_vendor,
            gpu_checks=tuple(gpu_checks),
        )
        text = manifest.model_dump_json(by_alias=True, indent=2) + "\n"
        (partial / MANIFEST).write_text(text)
        signer.sign(
            partial / MANIFEST,
            trusted_comment=f"training bundle {identity['package']} {identity['version']} "
            f"{identity['flavor']} sha256 {sha256_bytes(text.encode())}",
        )
        partial.chmod(0o755)
        partial.rename(dest)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return manifest

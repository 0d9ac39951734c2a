"""Host-side Debian work: the base root filesystem and the pinned .deb sets, via mmdebstrap.

Both run on the host, never in a container, so image builds need no network at all.
Outputs land in the cache through a temporary name and an atomic rename: an
interrupted run leaves no half-written tarball or package folder behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from orchestrator.config.resolve.toolchains import AptSources, BaseSpec
from orchestrator.errors import BootstrapError, CacheCorruptError
from orchestrator.model.hashing import sha256_file
from orchestrator.progress.reporter import StepLog

MANIFEST = "manifest.json"


def _mmdebstrap() -> str:
    path = shutil.which("mmdebstrap")
    if path is None:
        raise BootstrapError(
            "mmdebstrap is not installed on this host",
            hint="Install it with `apt-get install mmdebstrap` (Debian/Ubuntu); "
            "`make release` and .ci/run do this for you.",
        )
    return path


def _mode() -> str:
    # root mode is the fastest and needs no user namespaces; others need unshare.
    return "root" if os.geteuid() == 0 else "unshare"


def _run(argv: Sequence[str], log: StepLog, env: Mapping[str, str]) -> None:
    log.command(argv, {k: v for k, v in env.items() if k == "SOURCE_DATE_EPOCH"})
    with subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **env},
    ) as process:
        for line in process.stdout or ():
            log.line(line.rstrip("\n"))
        code = process.wait()
    if code != 0:
        raise BootstrapError(
            f"{Path(argv[0]).name} exited with {code}",
            hint="The step log shows apt's output; a pinned version that the mirror no "
            "longer carries must be updated in toolchains/<name>.toml.",
        )


def _common_args(
    spec: BaseSpec, components: Sequence[str] = (), architectures: Sequence[str] = ()
) -> list[str]:
    args = [
        f"--variant={spec.variant}",
        f"--mode={_mode()}",
        f"--components={','.join(dict.fromkeys([*spec.components, *components]))}",
        "--aptopt=Acquire::Retries=3",
    ]
    if architectures:
        # the first is the native one; the others become dpkg foreign architectures
        args.append(f"--architectures={','.join(['amd64', *architectures])}")
    return args


def rootfs_recipe(spec: BaseSpec, output: str = "<rootfs.tar>") -> list[str]:
    """The mmdebstrap command line (without the program) that makes the base rootfs."""
    args = _common_args(spec, architectures=spec.architectures)
    if spec.include:
        args.append(f"--include={','.join(spec.include)}")
    return [*args, spec.suite, output, spec.mirror]


def recipe_file(tarball: Path) -> Path:
    """Where make_rootfs records how a tarball was made (mmdebstrap version, command)."""
    return tarball.with_suffix(".json")


def make_rootfs(spec: BaseSpec, dest: Path, log: StepLog) -> str:
    """Write the base rootfs tarball to `dest` atomically; return its sha256.

    Next to it goes a small JSON record of the mmdebstrap version and command line, which
    release.lock carries (the tarball itself is pinned by sha256).
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    program = _mmdebstrap()
    version = subprocess.run(
        [program, "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".rootfs-") as tmp:
        partial = Path(tmp) / "rootfs.tar"
        _run(
            [program, *rootfs_recipe(spec, str(partial))],
            log,
            {"SOURCE_DATE_EPOCH": str(spec.source_date_epoch)},
        )
        digest = sha256_file(partial)
        record = {
            "mmdebstrap_version": version,
            "command": ["mmdebstrap", *rootfs_recipe(spec)],
            "sha256": digest,
        }
        (Path(tmp) / "recipe.json").write_text(json.dumps(record, indent=1) + "\n")
        (Path(tmp) / "recipe.json").replace(recipe_file(dest))
        partial.replace(dest)
    return digest


@dataclass(frozen=True)
class PackageFile:
    file: str
    sha256: str
    size: int


@dataclass(frozen=True)
class PackageSet:
    directory: Path
    files: tuple[PackageFile, ...]

    @property
    def digest(self) -> str:
        """One hash for the whole set: the sha256 of its manifest lines."""
        lines = "".join(f"{f.sha256}  {f.file}\n" for f in self.files)
        return hashlib.sha256(lines.encode()).hexdigest()


UNPACK_DIR = "unpack"  # package-set subfolder of .debs to unpack, not install


def fetch_packages(
    spec: BaseSpec,
    packages: Mapping[str, str],
    dest: Path,
    log: StepLog,
    *,
    sources: AptSources = AptSources(),
    unpack: Mapping[str, str] | None = None,
) -> PackageSet:
    """Download every .deb that installing `packages` (exact versions) on the base needs,
    plus the single .debs of `unpack` (without dependencies) into an unpack/ subfolder."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    include = ",".join(f"{name}={version}" for name, version in sorted(packages.items()))
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".packages-") as tmp:
        debs = Path(tmp) / "debs"
        (debs / UNPACK_DIR).mkdir(parents=True)
        hooks = [f"--customize-hook=sync-out /var/cache/apt/archives {debs}"]
        if unpack:
            wanted = " ".join(f"{name}={version}" for name, version in sorted(unpack.items()))
            inside = f"/var/cache/orchestrator-{UNPACK_DIR}"
            hooks += [
                f'--customize-hook=mkdir -p "$1{inside}"',
                f'--customize-hook=chroot "$1" sh -c "cd {inside} && apt-get download {wanted}"',
                f"--customize-hook=sync-out {inside} {debs / UNPACK_DIR}",
            ]
        _run(
            [
                _mmdebstrap(),
                *_common_args(spec, sources.components, sources.architectures),
                f"--include={include}",
                # keep what apt downloaded and copy it out, instead of a rootfs
                "--skip=download/empty",
                *hooks,
                spec.suite,
                "/dev/null",
                spec.mirror,
                # Older suites (a sysroot's glibc) as sources.list lines beside the base's: only
                # `apt-get download` of exact versions takes anything from them.
                *(
                    f"deb {spec.mirror} {suite} {' '.join(spec.components)}"
                    for suite in sources.suites
                ),
            ],
            log,
            {"SOURCE_DATE_EPOCH": str(spec.source_date_epoch)},
        )
        found = [*sorted(debs.glob("*.deb")), *sorted((debs / UNPACK_DIR).glob("*.deb"))]
        files = tuple(
            PackageFile(p.relative_to(debs).as_posix(), sha256_file(p), p.stat().st_size)
            for p in found
        )
        if not files:
            raise BootstrapError("mmdebstrap downloaded no packages")
        if len(list((debs / UNPACK_DIR).glob("*.deb"))) != len(unpack or {}):
            raise BootstrapError(
                f"apt-get download fetched other files than {sorted(unpack or {})}"
            )
        for stray in debs.iterdir():
            if stray.suffix != ".deb" and stray.name != UNPACK_DIR:
                _remove(stray)
        (debs / MANIFEST).write_text(json.dumps([f.__dict__ for f in files], indent=1) + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        debs.replace(dest)
    log.line(f"{len(files)} packages, {sum(f.size for f in files) / 1e6:.0f} MB in {dest}")
    return PackageSet(dest, files)


def deb_identity(file_name: str) -> tuple[str, str, str]:
    """(name, version, arch) from a Debian archive file name, e.g. gcc_4%3a14.2.0-1_amd64.deb."""
    stem = Path(file_name).name.removesuffix(".deb")
    name, version, arch = stem.split("_")
    return name, unquote(version), arch


def read_manifest(directory: Path) -> tuple[PackageFile, ...] | None:
    """The recorded files of a package set, without re-hashing them (for reports)."""
    manifest = directory / MANIFEST
    if not manifest.is_file():
        return None
    entries = json.loads(manifest.read_text())
    return tuple(PackageFile(str(e["file"]), str(e["sha256"]), int(e["size"])) for e in entries)


def load_package_set(directory: Path) -> PackageSet | None:
    """A cached package set, verified file by file; None if there is none."""
    manifest = directory / MANIFEST
    if not manifest.is_file():
        return None
    try:
        entries = json.loads(manifest.read_text())
        files = tuple(
            PackageFile(str(e["file"]), str(e["sha256"]), int(e["size"])) for e in entries
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise CacheCorruptError(f"{manifest} is unreadable: {exc}") from exc
    for entry in files:
        path = directory / entry.file
        if not path.is_file() or sha256_file(path) != entry.sha256:
            raise CacheCorruptError(
                f"cached package {path} is missing or does not match its recorded sha256",
                hint=f"Remove {directory} and run again; it will be downloaded afresh.",
            )
    return PackageSet(directory, files)


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()

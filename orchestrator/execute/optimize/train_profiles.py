"""`build --profiles FILE`: a profiles.tar that train.sh wrote on another machine, checked
before llvm-profdata sees a byte of it.

It is untrusted: read through host/archive.py's guarded reader, it may hold only
machine.txt and w<index>/*.profraw for the manifest's workloads, within size bounds, and
every workload must have left a profile. machine.txt must name the manifest's architecture.
A GPU flavor's gpu/ outputs are kept as bytes for execute/optimize/train_gpu.py to judge.
"""

from __future__ import annotations

import re
import stat
import tarfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from pydantic import ValidationError

from orchestrator.errors import BundleError, UnsafeArchiveError
from orchestrator.execute.optimize.train_script import GPU_DIR, GPU_SUMS, MACHINE_TXT
from orchestrator.host.archive import ArchiveLimits, MemberCheck, copy_exactly, reading_tar
from orchestrator.model.documents.training_bundle import TrainingManifest
from orchestrator.model.hashing import sha256_bytes

PROFILE_LIMITS = ArchiveLimits(max_entries=20_000, max_total_bytes=8 << 30, max_expansion=1)
_MAX_MACHINE_TXT = 4096
_RAW = re.compile(r"w(0|[1-9][0-9]{0,5})/[A-Za-z0-9_.+-]{1,200}\.profraw")
_FOLDER = re.compile(r"w(0|[1-9][0-9]{0,5})")
_GPU_FILE = re.compile(rf"{GPU_DIR}/([cg](0|[1-9][0-9]{{0,5}})\.(out|err|exit)|{GPU_SUMS})")
_MAX_GPU_FILE = 16 << 20  # one run's stdout or stderr: validation output, not data


@dataclass(frozen=True)
class TrainedElsewhere:
    raw_files: tuple[Path, ...]  # on this machine, under the destination folder
    machine: dict[str, str]  # machine.txt: arch, cpu and gpu when it had one
    gpu_files: dict[str, bytes] = field(default_factory=dict)  # gpu/<name> -> its bytes

    def summary(self) -> str:
        return ", ".join(
            f"{key} {value}" for key, value in self.machine.items() if value and key != "gpu_check"
        )


def load_manifest(path: Path) -> tuple[TrainingManifest, str]:
    """The bundle's manifest.json and its sha256 (what build.json's profile_source names)."""
    try:
        data = path.read_bytes()
        return TrainingManifest.model_validate_json(data), sha256_bytes(data)
    except OSError as error:
        raise BundleError(f"cannot read the training manifest {path}: {error.strerror}") from None
    except ValidationError as error:
        raise BundleError(f"{path} is no training manifest: {error.errors()[0]['msg']}") from None


def _machine(text: bytes, manifest: TrainingManifest, bundle: str) -> dict[str, str]:
    try:
        lines = text.decode().splitlines()
    except UnicodeDecodeError:
        raise BundleError(f"{MACHINE_TXT} in the profiles is not UTF-8 text") from None
    facts: dict[str, str] = {}
    for line in lines:
        key, colon, value = line.partition(":")
        if (
            colon
            and key in ("arch", "cpu", "gpu", "gpu_check", "bundle")
            and value.strip().isprintable()
        ):
            facts[key] = value.strip()
    if facts.get("arch") != manifest.arch:
        raise BundleError(
            f"the profiles were trained on {facts.get('arch') or 'an unnamed architecture'}; "
            f"the bundle is for {manifest.arch}",
            hint="Run train.sh on a machine of the bundle's architecture.",
        )
    if facts.pop("bundle", "") != bundle:
        raise BundleError(
            f"the profiles were trained from another bundle than manifest {bundle[:12]}",
            hint="Bring back the profiles.tar that this build's bundle wrote.",
        )
    return facts


def _admit_name(
    member: tarfile.TarInfo, name: str, expected: set[int], label: str, tar_path: Path
) -> None:
    """Only what train.sh writes: machine.txt, w<index>/*.profraw of the manifest's
    workloads, and a GPU flavor's gpu/ outputs."""
    if member.isdir() and (_FOLDER.fullmatch(name) or name == GPU_DIR):
        return
    if member.isfile() and _GPU_FILE.fullmatch(name):
        return
    if not member.isfile() or not (name == MACHINE_TXT or _RAW.fullmatch(name)):
        raise UnsafeArchiveError(
            f"refusing {label}: {name!r} is neither {MACHINE_TXT} nor w<index>/*.profraw"
        )
    if name != MACHINE_TXT and int(PurePosixPath(name).parts[0][1:]) not in expected:
        raise BundleError(f"{tar_path} holds {name}, of no workload in the manifest")


def read_profiles(
    tar_path: Path, manifest: TrainingManifest, bundle: str, dest: Path
) -> TrainedElsewhere:
    """Check `tar_path` against the manifest (`bundle`: its sha256, which train.sh writes
    into machine.txt) and extract its .profraw files into `dest`."""
    label = f"profiles {tar_path.name}"
    expected = {workload.index for workload in manifest.workloads}
    try:
        stored = tar_path.stat().st_size
    except OSError as error:
        raise BundleError(f"cannot read {tar_path}: {error.strerror}") from None
    raw: list[Path] = []
    gpu_files: dict[str, bytes] = {}
    machine: bytes | None = None
    with reading_tar(tar_path, label=label, limits=PROFILE_LIMITS) as tar:
        check = MemberCheck(PROFILE_LIMITS, label=label, stored_bytes=stored)
        admitted = [(member, check.admit(member)) for member in tar]
        for member, rel in admitted:
            _admit_name(member, rel.as_posix(), expected, label, tar_path)
        for member, rel in admitted:
            source = tar.extractfile(member) if member.isfile() else None
            if source is None:
                continue
            if rel.as_posix() == MACHINE_TXT:
                if member.size > _MAX_MACHINE_TXT:
                    raise BundleError(f"{MACHINE_TXT} in {tar_path} is over {_MAX_MACHINE_TXT} B")
                machine = source.read(member.size)
                continue
            if _GPU_FILE.fullmatch(rel.as_posix()):
                if member.size > _MAX_GPU_FILE:
                    raise BundleError(f"{rel} in {tar_path} is over {_MAX_GPU_FILE} B")
                gpu_files[rel.name] = source.read(member.size)
                continue
            target = dest / rel.as_posix()
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("wb") as out:
                copy_exactly(source, out, member)
            target.chmod(stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH)
            raw.append(target)
    if machine is None:
        raise BundleError(f"{tar_path} has no {MACHINE_TXT}: it is not what train.sh writes")
    facts = _machine(machine, manifest, bundle)
    trained = {int(path.parent.name[1:]) for path in raw}
    untrained = [w for w in manifest.workloads if w.index not in trained]
    if untrained:
        named = "; ".join(f"{w.index}: {w.binary} {' '.join(w.args)}".strip() for w in untrained)
        raise BundleError(
            f"{tar_path} has no profile of workload(s) {named}",
            hint="Run train.sh to its end: it writes profiles.tar only when every workload ran.",
        )
    return TrainedElsewhere(tuple(raw), facts, gpu_files)

"""One target folder from a runner, checked against this checkout's plan before anything
of it is signed (`release assemble`).

Nothing the folder says about itself is taken on its word. target.json, build.json and the
SBOM are read as claims and compared with what the plan gives:

- the folder holds only the files its plan makes: the plan's binaries by name, build.json
  and the SBOM, logs/*.log and logs/run.json (never signed), the profiles the plan's PGO
  and BOLT write, the [[archive.generate]] files; each a regular file read safely
  (release/assemble/folder_files.py), within the size limit of its kind, with the sha256 target.json
  lists;
- the lock entry's inputs are the plan's own (plan/serialize.py plan_inputs), field by
  field, and so are the pins the plan fixes (the training inputs, the mmdebstrap command);
  its outputs are the files' own sha256 and size;
- build.json and the SBOM name the plan's binaries, flavor, target, CPU level, flags and
  sources, with the files' own sha256;
- every binary passes the checks that need no build (release/assemble/binary_checks.py).

`check_folder` checks one folder on its own; release/assemble/shard.py's `check_folders` checks a
release's set (one folder per target, the pins shared).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from orchestrator import __version__
from orchestrator.config.nesting import loads_json
from orchestrator.host.bootstrap import rootfs_recipe
from orchestrator.model.documents.lockfile import (
    LockedTarget,
    LockInputArchive,
    LockInputs,
    LockOutput,
    SharedPins,
)
from orchestrator.model.documents.records import BuildManifest, Record, RecordError, parse_record
from orchestrator.model.documents.release_summary import TargetSummary
from orchestrator.model.documents.run_logs import is_build_log
from orchestrator.model.documents.target_folder import TARGET_RECORD, TargetFolder
from orchestrator.model.printable import printable, printable_list
from orchestrator.model.verdict.bolt_binaries import other_profile_name
from orchestrator.plan.build_plan import BuildPlan
from orchestrator.plan.serialize import action_key, plan_inputs
from orchestrator.release.assemble.assemble_errors import AssembleError, TargetFolderError
from orchestrator.release.assemble.binary_checks import MAX_BINARY_BYTES, check_binary
from orchestrator.release.assemble.carried_dispatcher import (
    CARRIED_FILE,
    Carried,
    carries_dispatcher,
    check_carried,
)
from orchestrator.release.assemble.dispatcher_cache import MAX_DISPATCHER_BYTES
from orchestrator.release.assemble.folder_files import (
    MAX_FILES,
    digest_checked,
    list_files,
    read_checked,
    shown,
)
from orchestrator.release.targets.target import Target
from orchestrator.supply.archives import GENERATED_DIR
from orchestrator.supply.sbom import SBOM_FILE, sbom_binaries

MANIFEST = "build.json"
MAX_RECORD_BYTES = 64 << 20  # target.json, build.json, the SBOM
MAX_LOG_BYTES = 64 << 20
MAX_GENERATED_BYTES = 64 << 20
MAX_PROFILE_BYTES = 2 << 30
MAX_FOLDER_BYTES = 8 << 30
LIMITS = {
    "binary": MAX_BINARY_BYTES,
    "record": MAX_RECORD_BYTES,
    "log": MAX_LOG_BYTES,
    "profile": MAX_PROFILE_BYTES,
    "generated": MAX_GENERATED_BYTES,
    "dispatcher": MAX_DISPATCHER_BYTES,
}


@dataclass(frozen=True)
class CheckedFolder:
    """A target folder that matched this checkout's plan. `record` is target.json with
    what the plan fixes put back from the plan (lock inputs, pins, outputs) and its
    summary's text escaped; `files` is every file's sha256 as read here."""

    path: Path
    record: TargetFolder
    manifest: BuildManifest
    target: Target
    plan: BuildPlan
    files: dict[str, str]
    dispatcher: Carried | None = None  # the dispatcher it carries, checked


R = TypeVar("R", bound=Record)


def _parse(data: bytes, model: type[R], where: str) -> R:
    try:
        document = loads_json(data.decode())  # nesting bounded: a ValueError
    except (UnicodeDecodeError, ValueError) as error:
        raise TargetFolderError(f"{where}: not readable JSON: {printable(str(error))}") from None
    try:
        return parse_record(document, model, where)
    except RecordError as error:
        raise TargetFolderError(f"{where} is not valid: {printable(error.message)}") from None


def read_target_record(folder: Path) -> TargetFolder:
    """target.json of `folder`, read safely: never through a link, never blocking."""
    if folder.is_symlink() or not folder.is_dir():
        raise TargetFolderError(f"{folder} is not a folder (a link is refused too)")
    data = read_checked(folder / TARGET_RECORD, MAX_RECORD_BYTES, TARGET_RECORD)
    record: TargetFolder = _parse(
        data, TargetFolder, f"{folder} is not a target folder: {TARGET_RECORD}"
    )
    if len(record.files) > MAX_FILES:
        raise TargetFolderError(f"{folder}: {TARGET_RECORD} lists more than {MAX_FILES} files")
    return record


def profile_names(plan: BuildPlan) -> set[str]:
    """The profiles/ files a build of `plan` may leave."""
    names: set[str] = set()
    if plan.pgo is not None:
        names |= {"pgo.profdata", "pgo.unshipped.profdata"}
    if plan.bolt is not None:
        names |= {"bolt.fdata", "bolt.unshipped.fdata"}
        for binary in plan.binaries[1:]:
            names |= {other_profile_name(binary, shipped=s) for s in (True, False)}
    return names


def planned_kind(relative: str, target: Target, plan: BuildPlan) -> str | None:
    """What kind of file of the plan `relative` is (binary, record, log, profile,
    generated, the carried dispatcher), or None when the plan makes no such file."""
    folder, _, rest = relative.partition("/")
    if relative == CARRIED_FILE and carries_dispatcher(target, plan):
        return "dispatcher"
    if not rest:
        if relative in plan.binaries:
            return "binary"
        return "record" if relative in (MANIFEST, SBOM_FILE) else None
    if is_build_log(relative):  # logs/*.log and logs/run.json: unsigned, how it went
        return "log"
    if folder == "profiles" and rest in profile_names(plan):
        return "profile"
    generated = {entry.path for entry in target.options.archive_generate}
    return "generated" if folder == GENERATED_DIR and rest in generated else None


def _digests(folder: Path, target: Target, plan: BuildPlan) -> dict[str, tuple[str, int]]:
    """(sha256, size) of every file of the folder but target.json: each one the plan
    makes, within its kind's size limit and the folder's."""
    found: dict[str, tuple[str, int]] = {}
    total = 0
    for relative in list_files(folder):
        if relative == TARGET_RECORD:
            continue
        kind = planned_kind(relative, target, plan)
        if kind is None:
            raise TargetFolderError(
                f"{folder}: {shown(relative)} is not a file that the plan of {plan.artifact_dir} "
                "makes (its binaries are " + ", ".join(plan.binaries) + ")"
            )
        found[relative] = digest_checked(folder / relative, LIMITS[kind], relative)
        total += found[relative][1]
        if total > MAX_FOLDER_BYTES:
            raise TargetFolderError(f"{folder} holds more than {MAX_FOLDER_BYTES} bytes")
    return found


def _compare_listed(
    folder: Path, record: TargetFolder, present: dict[str, tuple[str, int]]
) -> None:
    listed = record.files
    problems = [
        *(f"{shown(n)} was added" for n in sorted(set(present) - set(listed))),
        *(f"{shown(n)} is missing" for n in sorted(set(listed) - set(present))),
        *(
            f"{shown(n)} changed"
            for n in sorted(present.keys() & listed.keys())
            if present[n][0] != listed[n]
        ),
    ]
    if problems:
        raise TargetFolderError(
            f"{folder} is not as `build --target` left it: "
            + "; ".join(problems[:5])
            + (f" (and {len(problems) - 5} more)" if len(problems) > 5 else "")
        )


def _differing(claimed: Record, derived: Record, prefix: str) -> list[str]:
    """The fields (prefix.name) where a record from the folder differs from the plan's."""
    ours, theirs = derived.dump(), claimed.dump()
    return [
        f"{prefix}.{key}"
        for key in sorted(ours.keys() | theirs.keys())
        if ours.get(key) != theirs.get(key)
    ]


def _refuse_fields(folder: Path, what: str, fields: list[str]) -> None:
    if fields:
        raise AssembleError(
            f"{folder}: {what} differs from what this checkout's plan gives, in "
            + ", ".join(fields),
            hint="Someone or something changed the folder's record after the build, or it was "
            "built from another checkout: build the target again from this one.",
        )


def derived_pins(plan: BuildPlan, claimed: SharedPins) -> SharedPins:
    """The pins with what the plan fixes put back: the training inputs' archives and the
    mmdebstrap command. The rootfs and vendored crates' sha256 come from a build: they are
    compared between the folders (release/assemble/shard.py)."""
    return claimed.model_copy(
        update={
            "inputs": [
                LockInputArchive(name=i.name, sha256=i.sha256, size=len(i.archive))
                for i in plan.run.inputs
            ],
            "mmdebstrap": claimed.mmdebstrap.model_copy(
                update={"command": ["mmdebstrap", *rootfs_recipe(plan.base)]}
            ),
        }
    )


def _derived_lock(
    folder: Path,
    record: TargetFolder,
    target: Target,
    plan: BuildPlan,
    files: dict[str, tuple[str, int]],
) -> LockedTarget:
    """The lock entry as the plan and the checked files give it, once the folder's own
    agrees with it field by field."""
    claimed = record.lock
    outputs = [
        LockOutput(file=name, sha256=files[name][0], size=files[name][1]) for name in plan.binaries
    ]
    derived = claimed.model_copy(
        update={
            "level": target.level,
            "inputs": LockInputs.model_validate(plan_inputs(plan)),
            "output": outputs[0],
            "other_outputs": outputs[1:],
            "archive": None,
            "archive_zip": None,
        }
    )
    fields = _differing(claimed.inputs, derived.inputs, "lock.inputs")
    fields += [
        f"lock.{name}"
        for name in ("level", "output", "other_outputs", "archive", "archive_zip")
        if getattr(claimed, name) != getattr(derived, name)
    ]
    for name, profile in claimed.resolved.profiles.items():
        if files.get(f"profiles/{name}", ("", 0))[0] != profile.sha256:
            fields.append(f"lock.resolved.profiles.{shown(name)}")
    # the image's installed .debs, and the ones unpacked into it (unpack/: a sysroot's
    # libc6-dev of another version than the image's own, under the same name)
    for planned, unpacked in ((plan.packages, False), (plan.unpack, True)):
        resolved = {  # the plan names an unpacked .deb with its architecture
            f"{p.name}:{p.arch}" if unpacked else p.name: p.version
            for p in claimed.resolved.packages
            if p.file.startswith("unpack/") == unpacked
        }
        fields += [
            f"lock.resolved.packages.{'unpack/' if unpacked else ''}{name}"
            for name, version in planned.items()
            if name in resolved and resolved[name] != version
        ]
    fields += _differing(record.pins, derived_pins(plan, record.pins), "pins")
    _refuse_fields(folder, TARGET_RECORD, fields)
    return derived


def _check_manifest(
    folder: Path,
    manifest: BuildManifest,
    target: Target,
    plan: BuildPlan,
    files: dict[str, tuple[str, int]],
) -> None:
    """build.json's claims that the plan fixes, and its hashes against the files."""
    artifact, flags, inputs = manifest.artifact, manifest.flags, manifest.inputs
    claims: dict[str, tuple[object, object]] = {
        "artifact.binaries": ([b.file for b in artifact.binaries], list(plan.binaries)),
        "artifact.flavor": (artifact.flavor, plan.flavor),
        "artifact.arch": (artifact.arch, plan.arch),
        "artifact.target": (artifact.target, plan.rust_target),
        "flags.target_cpu": (flags.target_cpu, plan.target_cpu),
        "flags.rustflags": (flags.rustflags, list(plan.rustflags)),
        "inputs.source_archive_sha256": (inputs.source_archive_sha256, plan.source.archive_sha256),
        "inputs.cargo_lock_sha256": (inputs.cargo_lock_sha256, plan.source.cargo_lock_sha256),
        "action_key": (manifest.action_key, action_key(plan, target.options)),
    }
    if manifest.portability is not None:
        claims["portability.target_cpu"] = (manifest.portability.target_cpu, plan.target_cpu)
        claims["portability.glibc_floor"] = (manifest.portability.glibc_floor, plan.glibc_floor)
    fields = [f"build.json {key}" for key, (said, planned) in claims.items() if said != planned]
    _refuse_fields(folder, MANIFEST, fields)
    hashes = [
        *((b.file, b.sha256, b.size) for b in artifact.binaries),
        *((f"profiles/{n}", d.sha256, d.size) for n, d in manifest.profiles.items()),
        *((f"{GENERATED_DIR}/{g.path}", g.sha256, g.size) for g in manifest.generated or ()),
    ]
    wrong = [name for name, sha256, size in hashes if files.get(name) != (sha256, size)]
    profiles = {n.removeprefix("profiles/") for n in files if n.startswith("profiles/")}
    wrong += sorted(f"profiles/{n} (not in build.json)" for n in profiles - set(manifest.profiles))
    generated = {
        (g.path, g.binary_or(plan.binary), tuple(g.args)) for g in target.options.archive_generate
    }
    recorded = {(g.path, g.binary, tuple(g.args)) for g in manifest.generated or ()}
    if generated != recorded:
        wrong.append("generated (not the [[archive.generate]] entries of the config)")
    if wrong:
        raise TargetFolderError(
            f"{folder}: build.json does not describe the files beside it: "
            + ", ".join(shown(name) for name in wrong[:5])
        )


def _check_sbom(folder: Path, plan: BuildPlan, files: dict[str, tuple[str, int]]) -> None:
    text = read_checked(folder / SBOM_FILE, MAX_RECORD_BYTES, SBOM_FILE).decode("utf-8", "replace")
    try:
        loads_json(text)  # nesting bounded before sbom_binaries parses it again
        recorded = sbom_binaries(text)
    except (ValueError, AttributeError, TypeError) as error:
        raise TargetFolderError(
            f"{folder}: {SBOM_FILE} is not readable: {printable(str(error))}"
        ) from None
    planned = {name: files[name][0] for name in plan.binaries}
    if recorded != planned:
        listed = ", ".join(
            f"{printable(n)} ({printable(str(d))[:12]})" for n, d in recorded.items()
        )
        raise TargetFolderError(
            f"{folder}: {SBOM_FILE} does not describe the plan's binaries "
            f"({', '.join(plan.binaries)}) with their sha256: it lists {listed}"
        )


def _summary(
    record: TargetFolder, target: Target, plan: BuildPlan, main: tuple[str, int], glibc: str | None
) -> TargetSummary:
    """The release summary of the folder: what the checks know put back, the rest (a
    runner's words) escaped, since it reaches the signer's terminal."""
    said = record.summary
    if (said.artifact, said.flavor, said.level, said.status) != (
        plan.artifact_dir,
        target.flavor,
        target.level,
        "ok",
    ):
        raise AssembleError(
            f"{plan.artifact_dir}: target.json's summary describes "
            f"{printable(said.artifact)} ({printable(said.flavor)}, {printable(said.level)}, "
            f"{said.status}), not this target's successful build"
        )

    def text(value: str | None) -> str | None:
        return None if value is None else printable(value, 2000)

    return said.model_copy(
        update={
            "sha256": main[0],
            "size": main[1],
            "rust_target": plan.rust_target,
            "glibc": glibc,
            "error": None,
            "error_class": None,
            "exit_code": None,
            "warnings": printable_list(said.warnings, 2000),
            "moved_from": printable_list(said.moved_from, 2000),
            **{
                name: text(getattr(said, name))
                for name in (
                    "speedup_note",
                    "oldest_distribution",
                    "shipped_variant",
                    "bolt",
                    "cuda_runtime",
                    "gpu_path",
                    "engine",
                )
            },
        }
    )


def plan_of(
    record: TargetFolder, folder: Path, planned: Sequence[tuple[Target, BuildPlan]]
) -> tuple[Target, BuildPlan]:
    plans = {plan.artifact_dir: (target, plan) for target, plan in planned}
    if record.artifact not in plans:
        raise AssembleError(
            f"{folder} holds {printable(record.artifact)}, which is not a target of this "
            f"release ({', '.join(plans)})"
        )
    return plans[record.artifact]


def check_folder(folder: Path, planned: Sequence[tuple[Target, BuildPlan]]) -> CheckedFolder:
    """`folder` checked on its own against the plan of the target it holds (one of
    `planned`): TargetFolderError (69), AssembleError (70) or UnplannedBinaryError (71)
    naming the first thing that is not as the plan makes it."""
    record = read_target_record(folder)
    target, plan = plan_of(record, folder, planned)
    if record.action_key != action_key(plan, target.options):
        raise AssembleError(
            f"{folder} was built from another plan than this checkout makes for "
            f"{record.artifact} (another commit, config, toolchain or "
            f"{printable(record.written_by)} against orchestrator {__version__})",
            hint="Build it again from this checkout, or assemble in the checkout it came from.",
        )
    files = _digests(folder, target, plan)
    _compare_listed(folder, record, files)
    manifest: BuildManifest = _parse(
        read_checked(folder / MANIFEST, MAX_RECORD_BYTES, MANIFEST),
        BuildManifest,
        f"{folder}/{MANIFEST}",
    )
    _check_manifest(folder, manifest, target, plan, files)
    _check_sbom(folder, plan, files)
    lock = _derived_lock(folder, record, target, plan, files)
    facts = [check_binary(folder / name, name, plan) for name in plan.binaries]
    checked = record.model_copy(
        update={
            "lock": lock,
            "pins": derived_pins(plan, record.pins),
            "summary": _summary(record, target, plan, files[plan.binary], facts[0].glibc_max),
            "written_by": printable(record.written_by, 200),
        }
    )
    digests = {n: d for n, (d, _) in files.items()}
    carried = check_carried(folder, record.dispatcher, plan, digests)
    return CheckedFolder(folder, checked, manifest, target, plan, digests, carried)

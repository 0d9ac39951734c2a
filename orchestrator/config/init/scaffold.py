"""`orchestrator init`: a first orchestrator.toml, guessed from the crate itself.

What can be known is read from Cargo.toml files (the package or workspace member, its
binaries and features); which arguments make a representative workload is found by
reading the crate (config/init/workload_scan.py: README and docs examples, scripts, the
integration tests, the binary's clap arguments filled with the tree's data files). What
could not be found is written as a marked placeholder (config/init/run_files.py), which
`build --dry-run` warns about and `release` refuses.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.config.init.run_files import placeholder
from orchestrator.config.init.workload_scan import Proposal, find_workloads
from orchestrator.config.resolve.cargo_profiles import crate_profiles, distribution_profile
from orchestrator.config.resolve.crate_files import read_toml, workspace_members
from orchestrator.errors import ConfigError


@dataclass(frozen=True)
class Detected:
    crate: str  # relative to the config's folder: "."
    package: str
    member: bool  # a member of a workspace, named with [package] package
    binaries: tuple[str, ...]
    features: tuple[str, ...]
    proposal: Proposal
    others: tuple[str, ...]  # other members with binaries
    # The crate's distribution profile ([profile.dist] inheriting release, ...), or None
    profile: str | None = None

    @property
    def workloads(self) -> tuple[tuple[str, ...], ...]:
        """The proposed runs, or one placeholder run when none was found."""
        if self.proposal.workloads:
            return tuple(c.args for c in self.proposal.workloads)
        return (self.placeholder_run,)

    @property
    def placeholder_run(self) -> tuple[str, ...]:
        shape = self.proposal.shape
        if not shape:
            return (placeholder("the arguments of a run that does real work"),)
        return tuple(
            placeholder(f"a value for {word[1:-1]}") if word.startswith("<") else word
            for word in shape
        )


def _binaries(manifest: Path, package: dict[str, Any], data: dict[str, Any]) -> list[str]:
    tables = [b for b in data.get("bin", []) if isinstance(b, dict) and "name" in b]
    declared = [b["name"] for b in tables]
    folder = manifest.parent
    main_taken = any(b.get("path") == "src/main.rs" for b in tables)
    implicit = (folder / "src" / "main.rs").is_file() and not main_taken
    if implicit and package["name"] not in declared:
        declared.insert(0, package["name"])
    declared += sorted(p.stem for p in (folder / "src" / "bin").glob("*.rs"))
    return list(dict.fromkeys(declared))


def _main_file(folder: Path, binary: str, data: dict[str, Any], package: str) -> Path | None:
    """The source file of `binary`'s main function, where its clap struct usually is."""
    for table in data.get("bin", []):
        if isinstance(table, dict) and table.get("name") == binary and table.get("path"):
            return folder / str(table["path"])
    if binary == package and (folder / "src" / "main.rs").is_file():
        return folder / "src" / "main.rs"
    for candidate in (
        folder / "src" / "bin" / f"{binary}.rs",
        folder / "src" / "bin" / binary / "main.rs",
    ):
        if candidate.is_file():
            return candidate
    return None


def _packages(
    root: Path, data: dict[str, Any]
) -> list[tuple[dict[str, Any], list[str], dict[str, Any], Path]]:
    """(package table, binaries, manifest, folder) of the root package (`data`) and every
    member."""
    found = []
    if isinstance(data.get("package"), dict):
        binaries = _binaries(root / "Cargo.toml", data["package"], data)
        found.append((data["package"], binaries, data, root))
    for manifest in workspace_members(root, data).values():
        member = read_toml(manifest)
        binaries = _binaries(manifest, member["package"], member)
        found.append((member["package"], binaries, member, manifest.parent))
    return found


def detect(root: Path) -> Detected:
    """What a first config needs, from the crate (or workspace) at `root`."""
    if not (root / "Cargo.toml").is_file():
        raise ConfigError(
            f"{root} has no Cargo.toml",
            hint="Run `orchestrator init` in the folder of your crate or workspace.",
        )
    if not (root / "Cargo.lock").is_file():
        raise ConfigError(
            f"{root} has no Cargo.lock: a release pins its dependencies",
            hint="Run `cargo generate-lockfile` (and commit Cargo.lock), then init again.",
        )
    root_data = read_toml(root / "Cargo.toml")
    packages = [(p, b, d, f) for p, b, d, f in _packages(root, root_data) if b]
    if not packages:
        raise ConfigError(
            f"no binary in {root}: orchestrator releases executables",
            hint="A package needs src/main.rs, src/bin/*.rs or a [[bin]] table.",
        )
    package, binaries, data, folder = packages[0]
    member = root_data.get("package", {}).get("name") != package["name"]
    features = tuple(sorted(k for k in (data.get("features") or {}) if k != "default"))
    main_file = _main_file(folder, binaries[0], data, package["name"])
    proposal = find_workloads(root, folder, binaries[0], main_file)
    return Detected(
        crate=".",
        package=package["name"],
        member=member,
        binaries=tuple(binaries),
        features=features,
        proposal=proposal,
        others=tuple(p["name"] for p, _b, _d, _f in packages[1:]),
        profile=distribution_profile(crate_profiles(root)),
    )


def _toml_list(words: tuple[str, ...]) -> str:
    return "[" + ", ".join(_toml_string(w) for w in words) + "]"


def _toml_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render(found: Detected) -> str:
    """The commented orchestrator.toml for `found`; `build --dry-run` accepts it as is."""
    lines = [
        "# orchestrator.toml, written by `orchestrator init`. Every key: README, Configuration.",
        "[package]",
        f"crate = {_toml_string(found.crate)}  # the folder with Cargo.toml and Cargo.lock",
    ]
    if found.member:
        others = f" (others with binaries: {', '.join(found.others)})" if found.others else ""
        lines.append(f"package = {_toml_string(found.package)}  # the workspace member{others}")
    lines.append(f"binary = {_toml_string(found.binaries[0])}")
    if len(found.binaries) > 1:
        every = ", ".join(_toml_string(name) for name in found.binaries)
        lines.append(f"# other binaries of {found.package}: {', '.join(found.binaries[1:])}")
        lines.append(
            f"# binaries = [{every}]  # to ship them all in one artifact; a workload or "
            f'validate run names one as {{ binary = "{found.binaries[1]}", args = [...] }}'
        )
    lines += [
        '# exclude = ["docs"]  # paths left out of the source tarball',
        "",
        "[build]",
        'flavors = ["cpu"]  # also "cuda", "rocm", "aarch64"',
        '# target_cpu = "x86-64-v3"',
        *_profile_lines(found.profile),
        "",
    ]
    if found.features:
        lines += [
            "[flavors.cpu]",
            f"# features = {_toml_list(found.features)}",
            "",
        ]
    lines += _run_sections(found)
    lines += [
        "[test]",
        '# args = ["--", "--skip", "slow_test"]',
        "",
    ]
    return "\n".join(lines)


def _profile_lines(profile: str | None) -> list[str]:
    """[build] profile: the crate's distribution profile when it has one."""
    if profile is None:
        return ['# profile = "release"  # the Cargo profile the shipped binaries build with']
    return [
        f"# Cargo.toml's [profile.{profile}] inherits release: the profile the crate "
        "publishes from (its debug and strip settings hold; without this line: release)",
        f"profile = {_toml_string(profile)}",
    ]


def _train_lines(found: Detected) -> list[str]:
    proposal = found.proposal
    lines = [
        "[train]",
        "# Argument lists for the binary; PGO and BOLT learn from these runs. They run at",
        "# the crate's root (relative paths work), read-only, without network; data from",
        "# outside the crate goes in `inputs` and is read at /build/inputs/<name>.",
    ]
    if proposal.workloads:
        lines += [
            "# Found by `orchestrator init`: each names only files of this tree and does more",
            "# than --help/--version; none asks for sleep, dates, randomness or the network,",
            "# is interactive, needs a GPU or samples without a seed, as far as its words",
            "# tell. Same output twice? Not checked (nothing was built): the",
            "# build's validation compares the runs of [validate] between its binaries.",
        ]
        runs = [(c.args, f"from {c.source}", c.note) for c in proposal.workloads]
    else:
        lines += [
            "# PLACEHOLDER: init found no run that works (see the notes below). Replace it;",
            "# `build --dry-run` warns and `release` refuses while it is here.",
        ]
        runs = [(found.placeholder_run, "PLACEHOLDER", "")]
    if len(runs) == 1:
        args, comment, note = runs[0]
        lines += [f"# {note}"] if note else []
        lines.append(f"workloads = [{_toml_list(args)}]  # {comment}")
    else:
        lines.append("workloads = [")
        for args, comment, note in runs:
            lines += [f"  # {note}"] if note else []
            lines.append(f"  {_toml_list(args)},  # {comment}")
        lines.append("]")
    for rejected in proposal.rejected[:12]:
        lines.append(
            f"# not proposed, from {rejected.candidate.source}: "
            f"{_toml_list(rejected.candidate.args)}: {rejected.reason}"
        )
    lines += ['# env = ["KEY=value"]', '# inputs = ["../data/big-input.csv"]', ""]
    return lines


def _run_sections(found: Detected) -> list[str]:
    first = found.workloads[0]
    marked = "  # PLACEHOLDER: replace it" if not found.proposal.workloads else ""
    return [
        *_train_lines(found),
        "[validate]",
        "# Output that must not change between `cargo build --release` and the optimized binary.",
        f"command = {_toml_list(first)}{marked}",
        "",
        "[bench]",
        f"command = {_toml_list(first)}{marked}",
        "",
    ]

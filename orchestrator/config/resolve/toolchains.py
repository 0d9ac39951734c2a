"""Pinned toolchains (toolchains/*.toml), the base rootfs spec, and LLVM coherence checks."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.config.resolve.crate_files import read_toml
from orchestrator.config.resources import resource_dir
from orchestrator.config.suggest import did_you_mean
from orchestrator.errors import ConfigError, ToolchainMismatchError

TOOL_NAMES = ("rustc", "cargo", "llvm_profdata", "llvm_bolt", "perf2bolt", "merge_fdata")
# What compiles build scripts' C and C++ with the Rust code ([c_code] mode): named per
# flavor ([flavors.<name>.tools]), so that only the images that install it change.
C_TOOL_NAMES = ("clang", "clangxx", "llvm_ar")
# A Debian package name (optionally with a foreign architecture, `libfoo:arm64`) and a
# version as dpkg accepts them; keeps shell quoting trivial.
_PACKAGE_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]+(:[a-z0-9]+)?$")
_VERSION_RE = re.compile(r"^[0-9A-Za-z.+~:-]+$")
_LLVM_VERSION_RE = re.compile(r"LLVM version:?\s+(\d+)\.(\d+)\.(\d+)")
# A toolchain's name: its file in toolchains/ and part of image tags, never a path.
TOOLCHAIN_NAME = re.compile(r"[a-z0-9][a-z0-9.-]*")


# The dpkg architecture of each target architecture a flavor builds for.
DPKG_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}


@dataclass(frozen=True)
class SysrootSpec:
    """An older glibc to link against ([sysroot] of a toolchain file): its suite's packages,
    unpacked for the flavor's architecture."""

    suite: str
    glibc: str
    packages: Mapping[str, str]

    def as_dict(self) -> dict[str, object]:
        return {"suite": self.suite, "glibc": self.glibc, "packages": dict(self.packages)}


@dataclass(frozen=True)
class ToolchainSpec:
    name: str
    description: str
    llvm_major: int
    tools: Mapping[str, str]
    packages: Mapping[str, str]  # Debian package -> exact version
    # per flavor, the packages it adds on top (CUDA, HIP, cross compiler, arm64 std)
    flavor_packages: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # per flavor, packages whose files are unpacked under layout.UNPACK_ROOT, not installed
    flavor_unpack: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    sysroot: SysrootSpec | None = None
    # per flavor, the C tools of C_TOOL_NAMES its image has (clang of rustc's LLVM major)
    flavor_tools: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    @property
    def glibc(self) -> str:
        """The image's own glibc release (its libc6-dev pin), e.g. "2.41"."""
        version = self.packages.get("libc6-dev", "")
        return version.split("-", 1)[0].split(":")[-1]

    def tool(self, name: str) -> str:
        return self.tools[name]

    def tools_for(self, flavor: str) -> dict[str, str]:
        """The toolchain's tools and the flavor's own (clang, where its image has it)."""
        return {**self.tools, **self.flavor_tools.get(flavor, {})}

    def packages_for(self, flavor: str) -> dict[str, str]:
        """Every pin of the flavor's image: the toolchain's plus the flavor's own."""
        if flavor not in self.flavor_packages:
            raise ConfigError(
                f"toolchain {self.name!r} has no pins for flavor {flavor!r}",
                hint=f"Add a [flavors.{flavor}.packages] table to toolchains/{self.name}.toml, "
                "or build this flavor with a toolchain that has one.",
            )
        extra = self.flavor_packages[flavor]
        clash = sorted(p for p in extra if p in self.packages and self.packages[p] != extra[p])
        if clash:
            raise ConfigError(
                f"toolchains/{self.name}.toml: flavor {flavor} re-pins {', '.join(clash)} "
                "to another version than the toolchain's"
            )
        return dict(sorted({**self.packages, **extra}.items()))

    def unpack_for(self, flavor: str, arch: str = "x86_64") -> dict[str, str]:
        """What the flavor's image unpacks: its own pins, and the sysroot for `arch`."""
        unpack = dict(self.flavor_unpack.get(flavor, {}))
        if self.sysroot is not None:
            dpkg_arch = DPKG_ARCH[arch]
            unpack |= {f"{name}:{dpkg_arch}": v for name, v in self.sysroot.packages.items()}
        return dict(sorted(unpack.items()))

    def flavor_view(self, flavor: str, arch: str = "x86_64") -> dict[str, object]:
        """What one flavor's image is made of: a change to another flavor's pins must
        not change this flavor's image hash (and rebuild a 6 GB CUDA image)."""
        return {
            "name": self.name,
            "description": self.description,
            "llvm_major": self.llvm_major,
            "tools": self.tools_for(flavor),
            "packages": self.packages_for(flavor),
            "unpack": self.unpack_for(flavor, arch),
        }

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "description": self.description,
            "llvm_major": self.llvm_major,
            "tools": dict(self.tools),
            "packages": dict(sorted(self.packages.items())),
            "flavor_packages": {
                name: dict(sorted(pins.items()))
                for name, pins in sorted(self.flavor_packages.items())
            },
            "flavor_unpack": {
                name: dict(sorted(pins.items()))
                for name, pins in sorted(self.flavor_unpack.items())
            },
            # absent without any: keys of toolchains written before stay the same
            **(
                {
                    "flavor_tools": {
                        name: dict(sorted(tools.items()))
                        for name, tools in sorted(self.flavor_tools.items())
                    }
                }
                if self.flavor_tools
                else {}
            ),
            "sysroot": self.sysroot.as_dict() if self.sysroot else None,
        }


@dataclass(frozen=True)
class AptSources:
    """Where a flavor's packages come from beyond the base: components, foreign arches."""

    components: tuple[str, ...] = ()
    architectures: tuple[str, ...] = ()
    suites: tuple[str, ...] = ()  # other suites of the mirror (the sysroot's older glibc)

    def as_dict(self) -> dict[str, list[str]]:
        described = {
            "components": list(self.components),
            "architectures": list(self.architectures),
        }
        if self.suites:  # absent when unused: keys of images made before stay the same
            described["suites"] = list(self.suites)
        return described


@dataclass(frozen=True)
class BaseSpec:
    suite: str
    mirror: str
    variant: str
    components: tuple[str, ...]
    source_date_epoch: int
    # Extra packages and dpkg foreign architectures (the distro images that run an aarch64
    # binary under qemu); left out of `as_dict` when empty, so base image keys stay as they were.
    include: tuple[str, ...] = ()
    architectures: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, object]:
        described: dict[str, object] = {
            "suite": self.suite,
            "mirror": self.mirror,
            "variant": self.variant,
            "components": list(self.components),
            "source_date_epoch": self.source_date_epoch,
        }
        if self.include:
            described["include"] = list(self.include)
        if self.architectures:
            described["architectures"] = list(self.architectures)
        return described


def _table(data: Mapping[str, object], key: str, path: Path) -> Mapping[str, object]:
    value = data.get(key)
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: [{key}] must be a table")
    return value


def available_toolchains(directory: Path | None = None) -> list[str]:
    directory = directory or resource_dir("toolchains")
    return sorted(p.stem for p in directory.glob("*.toml") if TOOLCHAIN_NAME.fullmatch(p.stem))


def check_toolchain_name(name: str, where: str, directory: Path | None = None) -> Path:
    """The file of toolchain `name` in toolchains/; ConfigError unless the name is a plain
    one naming a file there. The name becomes a file path and an image tag: a path
    (`../../tmp/x/evil`) must never reach either."""
    directory = directory or resource_dir("toolchains")
    known = available_toolchains(directory)
    hint = "Known toolchains: " + (", ".join(known) or f"none (no .toml file in {directory})")
    if not TOOLCHAIN_NAME.fullmatch(name):
        raise ConfigError(
            f"{where}: {name!r} is not a toolchain name (lower-case letters, digits, '.' "
            "and '-', starting with a letter or digit)",
            hint=hint + f"; each is a file in {directory}.",
        )
    path = directory / f"{name}.toml"
    if name not in known or not path.is_file():
        guess = did_you_mean(name, known).strip()
        raise ConfigError(
            f"{where}: unknown toolchain {name!r}: no {path}" + (f"; {guess}" if guess else ""),
            hint=hint + ".",
        )
    return path


def load_toolchain(name: str, directory: Path | None = None) -> ToolchainSpec:
    path = check_toolchain_name(name, "toolchain", directory)
    data = read_toml(path)
    allowed = {"description", "llvm_major", "tools", "packages", "flavors", "sysroot"}
    unknown = set(data) - allowed
    if unknown:
        raise ConfigError(f"{path}: unknown keys {sorted(unknown)}; expected {sorted(allowed)}")
    llvm_major = data.get("llvm_major")
    if not isinstance(llvm_major, int) or isinstance(llvm_major, bool) or llvm_major <= 0:
        raise ConfigError(f"{path}: llvm_major: expected a positive integer, got {llvm_major!r}")
    tools = _table(data, "tools", path)
    missing = [t for t in TOOL_NAMES if not isinstance(tools.get(t), str)]
    if missing or set(tools) - set(TOOL_NAMES):
        raise ConfigError(f"{path}: [tools] must name exactly {list(TOOL_NAMES)} as strings")
    packages = _pins(_table(data, "packages", path), "packages", path)
    flavors = data.get("flavors", {})
    if not isinstance(flavors, dict):
        raise ConfigError(f"{path}: [flavors] must be a table of [flavors.<name>] tables")
    flavor_packages: dict[str, dict[str, str]] = {}
    flavor_unpack: dict[str, dict[str, str]] = {}
    flavor_tools: dict[str, dict[str, str]] = {}
    for flavor, table in flavors.items():
        if (
            not isinstance(table, dict)
            or "packages" not in table
            or set(table)
            - {
                "packages",
                "unpack",
                "tools",
            }
        ):
            raise ConfigError(
                f"{path}: [flavors.{flavor}] must hold a packages table (and may hold unpack "
                "and tools)"
            )
        where = f"flavors.{flavor}"
        if "tools" in table:
            flavor_tools[flavor] = _flavor_tools(_table(table, "tools", path), where, path)
        flavor_packages[flavor] = _pins(_table(table, "packages", path), f"{where}.packages", path)
        if "unpack" in table:
            unpack = _pins(_table(table, "unpack", path), f"{where}.unpack", path)
            if any(":" not in name for name in unpack):
                raise ConfigError(
                    f"{path}: {where}.unpack names packages with their architecture "
                    '(e.g. "libbolt-22-dev:arm64")'
                )
            flavor_unpack[flavor] = unpack
    return ToolchainSpec(
        name=name,
        description=str(data.get("description", name)),
        llvm_major=llvm_major,
        tools={k: str(v) for k, v in tools.items()},
        packages=packages,
        flavor_packages=flavor_packages,
        flavor_unpack=flavor_unpack,
        sysroot=_sysroot(data, path),
        flavor_tools=flavor_tools,
    )


def _flavor_tools(table: Mapping[str, object], where: str, path: Path) -> dict[str, str]:
    unknown = sorted(set(table) - set(C_TOOL_NAMES))
    if unknown or not all(isinstance(v, str) and _PACKAGE_RE.match(v) for v in table.values()):
        raise ConfigError(
            f"{path}: [{where}.tools] may name only {list(C_TOOL_NAMES)}, as program names"
            + (f"; unknown: {unknown}" if unknown else "")
        )
    return {k: str(v) for k, v in table.items()}


_SUITE_RE = re.compile(r"^[a-z]+$")


def _sysroot(data: Mapping[str, object], path: Path) -> SysrootSpec | None:
    if "sysroot" not in data:
        return None
    table = _table(data, "sysroot", path)
    suite, glibc = table.get("suite"), table.get("glibc")
    if not isinstance(suite, str) or not _SUITE_RE.match(suite):
        raise ConfigError(f"{path}: [sysroot] suite must name a Debian suite, e.g. bullseye")
    if not isinstance(glibc, str) or not re.fullmatch(r"2\.[0-9]+", glibc):
        raise ConfigError(f"{path}: [sysroot] glibc must be its glibc release, e.g. 2.31")
    packages = _pins(_table(table, "packages", path), "sysroot.packages", path)
    if any(":" in name for name in packages):
        raise ConfigError(f"{path}: sysroot.packages are named without an architecture")
    return SysrootSpec(suite, glibc, packages)


def _pins(table: Mapping[str, object], where: str, path: Path) -> dict[str, str]:
    for package, version in table.items():
        if not _PACKAGE_RE.match(package):
            raise ConfigError(f"{path}: {where}: {package!r} is not a Debian package name")
        if not isinstance(version, str) or not _VERSION_RE.match(version):
            raise ConfigError(
                f"{path}: {where}.{package}: expected an exact Debian version string, "
                f"got {version!r}"
            )
    return {k: str(v) for k, v in table.items()}


def load_base_spec(path: Path | None = None) -> BaseSpec:
    path = path or resource_dir("images") / "base.toml"
    data = read_toml(path)
    try:
        return BaseSpec(
            suite=str(data["suite"]),
            mirror=str(data["mirror"]),
            variant=str(data["variant"]),
            components=tuple(str(c) for c in data["components"]),
            source_date_epoch=int(data["source_date_epoch"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{path}: invalid base spec: {exc}") from exc


@dataclass(frozen=True)
class DistroSpec:
    """A Debian release the `distros` step runs shipped binaries in (images/distros.toml)."""

    suite: str
    release: str  # "Debian 11"
    glibc: str
    emulator_package: str  # qemu-user for a foreign-architecture binary
    emulator_suffix: str  # qemu-aarch64<suffix> is the program

    @property
    def title(self) -> str:
        return f"{self.release} ({self.suite}, glibc {self.glibc})"


def load_distros(path: Path | None = None) -> tuple[DistroSpec, ...]:
    path = path or resource_dir("images") / "distros.toml"
    entries = read_toml(path).get("distros")
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{path}: [[distros]] must list at least one Debian release")
    try:
        return tuple(
            DistroSpec(
                suite=str(entry["suite"]),
                release=str(entry["release"]),
                glibc=str(entry["glibc"]),
                emulator_package=str(entry["emulator_package"]),
                emulator_suffix=str(entry["emulator_suffix"]),
            )
            for entry in entries
        )
    except (KeyError, TypeError) as exc:
        raise ConfigError(f"{path}: invalid [[distros]] entry: {exc}") from exc


def llvm_version(text: str) -> tuple[int, int, int] | None:
    match = _LLVM_VERSION_RE.search(text)
    if match is None:
        return None
    major, minor, patch = (int(g) for g in match.groups())
    return major, minor, patch


def parse_rustc_vv(text: str) -> dict[str, str]:
    """`rustc -vV` as a dict: the first line under "version", then its `key: value` lines."""
    lines = text.strip().splitlines()
    result: dict[str, str] = {"version": lines[0].strip()} if lines else {}
    for line in lines[1:]:
        key, sep, value = line.partition(":")
        if sep:
            result[key.strip()] = value.strip()
    return result


@dataclass(frozen=True)
class ToolchainReport:
    rustc: dict[str, str]
    cargo: str
    llvm_profdata: str
    llvm_bolt: str
    llvm_major: int

    def as_dict(self) -> dict[str, object]:
        return {
            "rustc": self.rustc,
            "cargo": self.cargo,
            "llvm_profdata": self.llvm_profdata,
            "llvm_bolt": self.llvm_bolt,
            "llvm_major": self.llvm_major,
        }


def check_coherence(
    spec: ToolchainSpec, rustc_vv: str, cargo_v: str, profdata_v: str, bolt_v: str
) -> ToolchainReport:
    """All three must report the toolchain's LLVM major; otherwise say what each has."""
    rustc = parse_rustc_vv(rustc_vv)
    found = {
        "rustc": llvm_version(rustc_vv),
        spec.tool("llvm_profdata"): llvm_version(profdata_v),
        spec.tool("llvm_bolt"): llvm_version(bolt_v),
    }
    described = ", ".join(
        f"{tool}: LLVM {'.'.join(map(str, v)) if v else 'unknown'}" for tool, v in found.items()
    )
    majors = {v[0] if v else None for v in found.values()}
    if majors != {spec.llvm_major}:
        raise ToolchainMismatchError(
            f"toolchain {spec.name!r} expects LLVM {spec.llvm_major}, but the image has {described}"
        )
    return ToolchainReport(
        rustc=rustc,
        cargo=cargo_v.strip(),
        llvm_profdata=profdata_v.strip().splitlines()[0] if profdata_v.strip() else "",
        llvm_bolt=" ".join(bolt_v.strip().splitlines()[:2]),
        llvm_major=spec.llvm_major,
    )

"""The pure plan: from resolved options to named, content-hashed steps. No Docker, no I/O.

Everything that can change the output is an input here, hashed; the executor only
follows the plan. `orchestrator build --dry-run` prints it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass

from orchestrator.flavors import Flavor
from orchestrator.layout import PATHS, artifact_dir_name, release_dir_name
from orchestrator.options import Options
from orchestrator.toolchain import BaseSpec, ToolchainSpec

IMAGE_REPOSITORY = "orchestrator"

# The seeds' release profile, injected with `cargo --config` so the user's Cargo.toml
# is never edited.
RELEASE_PROFILE: dict[str, str | int | bool] = {
    "lto": "fat",
    "codegen-units": 1,
    "panic": "abort",
    "opt-level": 3,
    "incremental": False,
}


def content_hash(value: object) -> str:
    """sha256 of the canonical JSON form of `value`."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class SourceSnapshot:
    """The crate's files as a deterministic tar, and the hashes that identify them."""

    archive: bytes
    archive_sha256: str
    cargo_lock_sha256: str


@dataclass(frozen=True)
class ImagePlan:
    reference: str
    input_hash: str


@dataclass(frozen=True)
class CargoCommand:
    argv: tuple[str, ...]
    environment: Mapping[str, str]


@dataclass(frozen=True)
class Step:
    name: str
    title: str
    network: bool = False


@dataclass(frozen=True)
class BuildPlan:
    flavor: str
    arch: str
    rust_target: str
    toolchain: ToolchainSpec
    base: BaseSpec
    base_image: ImagePlan
    image: ImagePlan
    dockerfile: str
    packages: Mapping[str, str]
    source: SourceSnapshot
    rustflags: tuple[str, ...]
    fetch: CargoCommand
    build: CargoCommand
    test: CargoCommand
    binary_in_container: str
    binary: str
    release_dir: str
    artifact_dir: str
    steps: tuple[Step, ...]

    def summary(self) -> dict[str, object]:
        """What build.json and --dry-run show about the plan."""
        return {
            "flavor": self.flavor,
            "arch": self.arch,
            "rust_target": self.rust_target,
            "toolchain": self.toolchain.name,
            "base_image": {
                "reference": self.base_image.reference,
                "input_hash": self.base_image.input_hash,
            },
            "image": {"reference": self.image.reference, "input_hash": self.image.input_hash},
            "source_archive_sha256": self.source.archive_sha256,
            "cargo_lock_sha256": self.source.cargo_lock_sha256,
            "rustflags": list(self.rustflags),
            "build": list(self.build.argv),
            "test": list(self.test.argv),
            "environment": dict(self.build.environment),
            "artifact": f"{self.release_dir}/{self.artifact_dir}",
            "steps": [s.name for s in self.steps],
        }


def base_image_plan(base: BaseSpec) -> ImagePlan:
    digest = content_hash({"kind": "base-rootfs", "spec": base.as_dict()})
    return ImagePlan(f"{IMAGE_REPOSITORY}/base:{base.suite}-{digest[:16]}", digest)


def toolchain_image_plan(
    flavor: Flavor, toolchain: ToolchainSpec, dockerfile: str, base_image: ImagePlan
) -> ImagePlan:
    digest = content_hash(
        {
            "kind": "toolchain-image",
            "flavor": flavor.name,
            "toolchain": toolchain.as_dict(),
            "dockerfile": dockerfile,
            "base": base_image.input_hash,
        }
    )
    return ImagePlan(f"{IMAGE_REPOSITORY}/{flavor.name}:{toolchain.name}-{digest[:16]}", digest)


def _profile_args() -> list[str]:
    args: list[str] = []
    for key, value in RELEASE_PROFILE.items():
        rendered = json.dumps(value)  # TOML and JSON agree on strings, ints and booleans
        args += ["--config", f"profile.release.{key}={rendered}"]
    return args


def make_plan(
    options: Options,
    flavor: Flavor,
    *,
    toolchain: ToolchainSpec,
    base: BaseSpec,
    dockerfile: str,
    packages: Mapping[str, str],
    source: SourceSnapshot,
) -> BuildPlan:
    flavor.validate(options)
    base_image = base_image_plan(base)
    image = toolchain_image_plan(flavor, toolchain, dockerfile, base_image)
    settings = options.settings_for(flavor.name)
    release_dir = release_dir_name(options.binary, options.version)

    rustflags = (
        *flavor.rustflags(options),
        # Paths in panic messages and debug info must not depend on where we built.
        f"--remap-path-prefix={PATHS.src}={release_dir}",
        f"--remap-path-prefix={PATHS.vendor}=crates",
        f"--remap-path-prefix={PATHS.cargo_home}=cargo-home",
    )
    environment = {
        "SOURCE_DATE_EPOCH": str(options.source_date_epoch),
        # \x1f-separated: flags survive spaces, unlike RUSTFLAGS
        "CARGO_ENCODED_RUSTFLAGS": "\x1f".join(rustflags),
        "CARGO_HOME": PATHS.cargo_home,
        "TZ": "UTC",
        "LC_ALL": "C.UTF-8",
    }
    feature_args: list[str] = []
    if not settings.default_features:
        feature_args.append("--no-default-features")
    if settings.features:
        feature_args += ["--features", ",".join(settings.features)]
    common = [
        "--release",
        "--offline",
        "--locked",
        "--manifest-path",
        f"{PATHS.src}/Cargo.toml",
        "--target",
        flavor.rust_target,
        "--target-dir",
        PATHS.target,
        *feature_args,
        *_profile_args(),
    ]
    build = CargoCommand(
        (toolchain.tool("cargo"), "build", "--bin", options.binary, *common), environment
    )
    test = CargoCommand((toolchain.tool("cargo"), "test", *common), environment)
    fetch = CargoCommand(
        (
            toolchain.tool("cargo"),
            "vendor",
            "--locked",
            "--versioned-dirs",
            "--manifest-path",
            f"{PATHS.src}/Cargo.toml",
            PATHS.vendor,
        ),
        # A clean CARGO_HOME: the image's one points cargo at the (empty) vendor folder.
        {"CARGO_HOME": f"{PATHS.root}/fetch-home", "TZ": "UTC", "LC_ALL": "C.UTF-8"},
    )
    steps = (
        Step("base-image", f"base rootfs image {base_image.reference}"),
        Step("toolchain-image", f"toolchain image {image.reference}"),
        Step("toolchain-check", "rustc, llvm-profdata and llvm-bolt share one LLVM major"),
        Step("fetch-crates", "vendor crates listed in Cargo.lock", network=True),
        Step("build", f"cargo build --release ({flavor.rust_target})"),
        Step("test", "cargo test --release"),
        Step("extract", f"copy {options.binary} out of the container"),
        Step("publish", "checksums, build.json, atomic move into artifacts/"),
    )
    return BuildPlan(
        flavor=flavor.name,
        arch=flavor.arch,
        rust_target=flavor.rust_target,
        toolchain=toolchain,
        base=base,
        base_image=base_image,
        image=image,
        dockerfile=dockerfile,
        packages=dict(packages),
        source=source,
        rustflags=tuple(rustflags),
        fetch=fetch,
        build=build,
        test=test,
        binary_in_container=f"{PATHS.target}/{flavor.rust_target}/release/{options.binary}",
        binary=options.binary,
        release_dir=release_dir,
        artifact_dir=artifact_dir_name(options.binary, options.version, flavor.arch, flavor.name),
        steps=steps,
    )


__all__ = [
    "RELEASE_PROFILE",
    "BuildPlan",
    "CargoCommand",
    "ImagePlan",
    "SourceSnapshot",
    "Step",
    "base_image_plan",
    "content_hash",
    "make_plan",
    "toolchain_image_plan",
]

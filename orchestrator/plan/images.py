"""The images a plan names: each by a reference whose tag ends in its inputs' hash."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.config.resolve.toolchains import AptSources, BaseSpec, ToolchainSpec
from orchestrator.flavors import Flavor
from orchestrator.model.hashing import content_hash

IMAGE_REPOSITORY = "orchestrator"


@dataclass(frozen=True)
class ImagePlan:
    reference: str
    input_hash: str


def base_image_plan(base: BaseSpec) -> ImagePlan:
    digest = content_hash({"kind": "base-rootfs", "spec": base.as_dict()})
    return ImagePlan(f"{IMAGE_REPOSITORY}/base:{base.suite}-{digest[:16]}", digest)


def apt_sources(flavor: Flavor, toolchain: ToolchainSpec) -> AptSources:
    return AptSources(
        components=tuple(c for c in flavor.apt_components if c != "main"),
        architectures=flavor.foreign_architectures,
        suites=(toolchain.sysroot.suite,) if toolchain.sysroot else (),
    )


def toolchain_image_plan(
    flavor: Flavor, toolchain: ToolchainSpec, dockerfile: str, base_image: ImagePlan
) -> ImagePlan:
    key: dict[str, object] = {
        "kind": "toolchain-image",
        "flavor": flavor.name,
        "toolchain": toolchain.flavor_view(flavor.name, flavor.arch),
        "dockerfile": dockerfile,
        "base": base_image.input_hash,
    }
    if apt_sources(flavor, toolchain) != AptSources():
        key["apt_sources"] = apt_sources(flavor, toolchain).as_dict()
    digest = content_hash(key)
    return ImagePlan(f"{IMAGE_REPOSITORY}/{flavor.name}:{toolchain.name}-{digest[:16]}", digest)

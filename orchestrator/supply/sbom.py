"""CycloneDX SBOMs: the crates compiled into an artifact, and the toolchain that built it.

The artifact itself is `metadata.component`, identified by the purl of the cargo package
it is built from (`pkg:cargo/<package>@<version>`: purl's cargo type, no namespace) and
by its sha256; `metadata.tools` names orchestrator and its version, which made the SBOM.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cyclonedx.model import HashAlgorithm, HashType, Property
from cyclonedx.model.bom import Bom
from cyclonedx.model.component import Component, ComponentScope, ComponentType
from cyclonedx.model.license import LicenseExpression
from cyclonedx.output.json import JsonV1Dot6
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from packageurl import PackageURL

from orchestrator import __version__
from orchestrator.errors import SbomError

SBOM_FILE = "sbom.cdx.json"
# SBOMs of the same inputs must be the same bytes: the serial number is derived, not random.
_NAMESPACE = uuid.UUID("6f1b2c1e-5d0a-4b59-9a0e-0f6a7c3d2b10")


@dataclass(frozen=True)
class Crate:
    name: str
    version: str
    license: str | None
    sha256: str | None  # the .crate checksum from Cargo.lock (registry crates)
    source: str | None


@dataclass(frozen=True)
class DebPackage:
    name: str
    version: str
    arch: str
    sha256: str | None


def crates_from_metadata(
    metadata: Mapping[str, Any], checksums: Mapping[tuple[str, str], str], root_name: str
) -> list[Crate]:
    """Crates in the resolved graph for the build's target and features (root excluded):
    those the root package reaches, so a workspace's other members and their dependencies
    are not listed as inside this binary."""
    packages = {p["id"]: p for p in metadata.get("packages", [])}
    resolve = metadata.get("resolve") or {}
    nodes = {node["id"]: node for node in resolve.get("nodes", [])}
    ids = _reachable(nodes, packages, root_name) or list(nodes) or list(packages)
    crates = []
    for package_id in ids:
        package = packages.get(package_id)
        if package is None or (package["name"] == root_name and package.get("source") is None):
            continue
        key = (package["name"], package["version"])
        crates.append(
            Crate(
                package["name"],
                package["version"],
                package.get("license"),
                checksums.get(key),
                package.get("source"),
            )
        )
    return sorted(crates, key=lambda c: (c.name, c.version))


def _reachable(nodes: Mapping[str, Any], packages: Mapping[str, Any], root_name: str) -> list[str]:
    """Package ids the root package depends on, directly or not; [] without a root."""
    roots = [
        package_id
        for package_id, package in packages.items()
        if package["name"] == root_name and package.get("source") is None and package_id in nodes
    ]
    seen: set[str] = set()
    pending = list(roots)
    while pending:
        package_id = pending.pop()
        if package_id in seen:
            continue
        seen.add(package_id)
        pending.extend(nodes.get(package_id, {}).get("dependencies", []))
    return sorted(seen)


# The role of a component that is one more binary of the artifact, not a dependency.
SHIPPED_BINARY = "shipped-binary"


def build_sbom(
    *,
    name: str,
    cargo_package: str,
    version: str,
    artifact: str,
    binary_sha256: str,
    crates: Sequence[Crate],
    toolchain: Sequence[DebPackage],
    timestamp: int,
    others: Sequence[tuple[str, str]] = (),
    warn: Callable[[str], object] = lambda _text: None,
) -> str:
    """The SBOM as CycloneDX 1.6 JSON, checked against the schema before it is returned.
    The library's own warnings go to `warn` as one line each, never raw to the terminal.

    `name` is the main shipped binary, `cargo_package` the package it is built from,
    `others` (name, sha256) the other binaries the artifact ships, built from the same crates.
    """
    with warnings.catch_warnings(record=True) as raised:
        warnings.simplefilter("always")
        bom = Bom(serial_number=uuid.uuid5(_NAMESPACE, f"{artifact}:{binary_sha256}"))
        bom.metadata.timestamp = dt.datetime.fromtimestamp(timestamp, tz=dt.UTC)
        bom.metadata.tools.components.add(
            Component(
                type=ComponentType.APPLICATION,
                name="orchestrator",
                version=__version__,
                bom_ref=f"tool:orchestrator@{__version__}",
            )
        )
        root = Component(
            type=ComponentType.APPLICATION,
            name=name,
            version=version,
            bom_ref=f"artifact:{artifact}",
            purl=PackageURL("cargo", name=cargo_package, version=version),
            hashes=[HashType(alg=HashAlgorithm.SHA_256, content=binary_sha256)],
            properties=[Property(name="orchestrator:artifact", value=artifact)],
        )
        bom.metadata.component = root
        compiled = []
        for crate in crates:
            component = Component(
                type=ComponentType.LIBRARY,
                name=crate.name,
                version=crate.version,
                bom_ref=f"crate:{crate.name}@{crate.version}",
                purl=PackageURL("cargo", name=crate.name, version=crate.version),
                licenses=[LicenseExpression(crate.license)] if crate.license else [],
                hashes=[HashType(alg=HashAlgorithm.SHA_256, content=crate.sha256)]
                if crate.sha256
                else [],
                scope=ComponentScope.REQUIRED,
            )
            bom.components.add(component)
            compiled.append(component)
        for package in toolchain:
            bom.components.add(
                Component(
                    type=ComponentType.LIBRARY,
                    name=package.name,
                    version=package.version,
                    bom_ref=f"deb:{package.name}@{package.version}:{package.arch}",
                    purl=PackageURL(
                        "deb",
                        namespace="debian",
                        name=package.name,
                        version=package.version,
                        qualifiers={"arch": package.arch},
                    ),
                    hashes=[HashType(alg=HashAlgorithm.SHA_256, content=package.sha256)]
                    if package.sha256
                    else [],
                    # Built with, not shipped in, the binary.
                    scope=ComponentScope.EXCLUDED,
                    properties=[Property(name="orchestrator:role", value="toolchain")],
                )
            )
        shipped = []
        for other, digest in others:
            component = Component(
                type=ComponentType.APPLICATION,
                name=other,
                version=version,
                bom_ref=f"binary:{other}",
                hashes=[HashType(alg=HashAlgorithm.SHA_256, content=digest)],
                properties=[Property(name="orchestrator:role", value=SHIPPED_BINARY)],
            )
            bom.components.add(component)
            bom.register_dependency(component, compiled)
            shipped.append(component)
        bom.register_dependency(root, [*compiled, *shipped])
        text = JsonV1Dot6(bom).output_as_string(indent=2)
    for caught in raised:
        if issubclass(caught.category, ResourceWarning):
            continue  # the garbage collector closing another module's socket meanwhile
        message = str(caught.message)
        # A crate without dependencies has none to list: the graph is complete as it is
        # (the toolchain's packages are built with, not shipped in, the binary).
        if not message.startswith("The Component this BOM is describing"):
            warn(f"SBOM: {message}")
    errors = JsonStrictValidator(SchemaVersion.V1_6).validate_str(text)
    if errors is not None:
        raise SbomError(f"generated SBOM is not valid CycloneDX 1.6: {errors}")
    # Stable bytes for the same inputs: sort keys once more (the library orders sets).
    return json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"


def sbom_binaries(text: str) -> dict[str, str | None]:
    """The sha256 the SBOM records for each shipped binary, the main one included."""
    data = json.loads(text)
    root = data.get("metadata", {}).get("component", {})
    found: dict[str, str | None] = {}
    for component in [root, *data.get("components", [])]:
        roles = {p.get("value") for p in component.get("properties", [])}
        if component is root or SHIPPED_BINARY in roles:
            hashes = {h.get("alg"): h.get("content") for h in component.get("hashes", [])}
            found[str(component.get("name", ""))] = hashes.get("SHA-256")
    return found


def sbom_subject(text: str) -> tuple[str, str | None]:
    """(artifact name, sha256) that an SBOM describes."""
    data = json.loads(text)
    component = data.get("metadata", {}).get("component", {})
    hashes = {h.get("alg"): h.get("content") for h in component.get("hashes", [])}
    artifact = next(
        (
            p.get("value")
            for p in component.get("properties", [])
            if p.get("name") == "orchestrator:artifact"
        ),
        component.get("name", ""),
    )
    return str(artifact), hashes.get("SHA-256")

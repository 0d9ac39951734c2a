"""SLSA provenance v1 in an in-toto Statement v1, made from the artifacts' build.json files.

Pure: it reads manifests that the builds wrote and returns data. Signing it into a DSSE
envelope is sign.dsse_sign's job. It is a function of what was built and from what, never of
how a run went: no start or end times, step timings or engine, which differ between two
honest builders of the same inputs (they are in each folder's unsigned logs/run.json).
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator import __version__
from orchestrator.model.documents.records import BuildManifest

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
BUILD_TYPE = "urn:orchestrator:build-type:container-release:v1"
BUILDER_ID = "urn:orchestrator:builder:container"


def _dependency(uri: str, sha256: str | None, name: str | None = None) -> dict[str, object]:
    entry: dict[str, object] = {"uri": uri}
    if sha256:
        entry["digest"] = {"sha256": sha256}
    if name:
        entry["name"] = name
    return entry


def resolved_dependencies(manifest: BuildManifest) -> list[dict[str, object]]:
    deps: list[dict[str, object]] = []
    inputs, dependencies = manifest.inputs, manifest.dependencies
    rootfs = dependencies.rootfs
    deps.append(
        _dependency(
            f"debian:{rootfs.suite}:rootfs", rootfs.sha256, "base root filesystem (mmdebstrap)"
        )
    )
    deps.append(
        _dependency(
            "source:crate-archive",
            inputs.source_archive_sha256,
            "the crate's sources as a deterministic tar",
        )
    )
    deps.append(_dependency("source:Cargo.lock", inputs.cargo_lock_sha256))
    for package in dependencies.debian_packages:
        deps.append(
            _dependency(
                f"pkg:deb/debian/{package.name}@{package.version}?arch={package.arch}",
                package.sha256,
            )
        )
    for crate in dependencies.crates:
        deps.append(_dependency(f"pkg:cargo/{crate.name}@{crate.version}", crate.sha256))
    for name, record in manifest.profiles.items():
        deps.append(_dependency(f"profile:{name}", record.sha256, name))
    return deps


def statement(
    *,
    release: str,
    artifacts: Sequence[tuple[str, BuildManifest]],  # (artifact folder, its build.json)
    files: Sequence[tuple[str, str]] = (),  # release-level outputs (archives): name, sha256
) -> dict[str, object]:
    """One statement for the release: every artifact a subject, every input a dependency."""
    subjects: list[dict[str, object]] = []
    dependencies: dict[str, dict[str, object]] = {}
    flavors = []
    first = artifacts[0][1] if artifacts else None
    for folder, manifest in artifacts:
        artifact = manifest.artifact
        subjects.extend(
            {"name": f"{folder}/{binary.file}", "digest": {"sha256": binary.sha256}}
            for binary in artifact.binaries
        )
        flavors.append(artifact.flavor)
        for dep in resolved_dependencies(manifest):
            dependencies[f"{dep['uri']}#{dep.get('digest')}"] = dep
    subjects.extend({"name": name, "digest": {"sha256": digest}} for name, digest in files)
    return {
        "_type": STATEMENT_TYPE,
        "subject": subjects,
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {
                    "release": release,
                    "config": first.inputs.config if first else None,
                    "config_sha256": first.inputs.config_sha256 if first else None,
                    "flavors": sorted(set(flavors)),
                    "source": first.source.dump() if first else {},
                },
                "internalParameters": {
                    folder: {
                        "toolchain": manifest.toolchain.spec.get("name"),
                        "target_cpu": manifest.flags.target_cpu,
                        "rustflags": manifest.flags.rustflags,
                        "release_profile": manifest.flags.release_profile,
                        "optimizations": manifest.artifact.optimizations,
                    }
                    for folder, manifest in artifacts
                },
                "resolvedDependencies": [dependencies[k] for k in sorted(dependencies)],
            },
            "runDetails": {
                "builder": {"id": BUILDER_ID, "version": {"orchestrator": __version__}},
                "metadata": {"invocationId": release},
                "byproducts": [
                    {"name": f"{folder}/build.json", "uri": f"file:{folder}/build.json"}
                    for folder, _manifest in artifacts
                ],
            },
        },
    }

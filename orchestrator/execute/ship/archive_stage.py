"""A target's archives as publication stages them: `<artifact>.tar.xz`, the `.zip` when
archive.formats asks, and install.sh, each signed, written beside the release index so that
they appear with it. The same for a build and for `release assemble`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.config.resolve.archive_include import check_include_pattern, included_files
from orchestrator.config.resolve.options import Options
from orchestrator.errors import PublishError
from orchestrator.model.documents.records import BuildManifest
from orchestrator.model.hashing import content_hash, sha256_bytes
from orchestrator.model.layout import release_dir_name
from orchestrator.supply.archive_docs import crate_docs
from orchestrator.supply.archives import (
    GENERATED_DIR,
    ZIP_SUFFIX,
    archive_name,
    write_archive,
)
from orchestrator.supply.attest import Signer
from orchestrator.supply.installer import INSTALLER, render_installer
from orchestrator.supply.zip_archive import write_zip


@dataclass(frozen=True)
class PublishSettings:
    """What publication reads of the settings: the release's name, version and folder, the
    timestamp its archives carry, and [archive] formats and include. Built once from
    `Options` by the publish step, or as a part of the release's view (`release assemble`)."""

    binary: str
    version: str
    artifacts_dir: Path
    source_date_epoch: int
    archive_formats: tuple[str, ...]
    archive_include: tuple[str, ...]

    @classmethod
    def from_options(cls, options: Options) -> PublishSettings:
        return cls(
            binary=options.binary,
            version=options.version,
            artifacts_dir=options.artifacts_dir,
            source_date_epoch=options.source_date_epoch,
            archive_formats=options.archive_formats,
            archive_include=options.archive_include,
        )

    @property
    def release_dir(self) -> Path:
        """<artifacts>/<binary>-<version>: the release's folder."""
        return self.artifacts_dir / release_dir_name(self.binary, self.version)


@dataclass(frozen=True)
class ArtifactToPublish:
    """A finished, unsigned artifact folder: `folder` (under staging) becomes
    <release>/<name>/ with its signatures; its archive's docs come from `source_archive`."""

    folder: Path
    name: str
    manifest: BuildManifest
    source_archive: bytes  # the crate's planned source snapshot (a tar)


def stage_archives(
    artifact: ArtifactToPublish,
    settings: PublishSettings,
    signer: Signer,
    index: Path,
    say: Callable[[str], None],
) -> list[str]:
    """Write `<artifact>.tar.xz` (and `.zip` when archive.formats asks) and install.sh, each
    signed, into the staged index folder; their release-relative names."""
    manifest = artifact.manifest
    top, mtime = artifact.name, settings.source_date_epoch
    binaries = [artifact.folder / b.file for b in manifest.artifact.binaries]
    docs, extras = (
        crate_docs(artifact.source_archive),
        archive_extras(artifact, settings.archive_include),
    )
    archives = [
        write_archive(
            index / archive_name(top),
            top=top,
            binaries=binaries,
            docs=docs,
            mtime=mtime,
            extras=extras,
        )
    ]
    if "zip" in settings.archive_formats:
        zipped = index / archive_name(top, ZIP_SUFFIX)
        archives.append(
            write_zip(zipped, top=top, binaries=binaries, docs=docs, mtime=mtime, extras=extras)
        )
    installer = index / INSTALLER
    installer.write_text(render_installer(settings.binary, settings.version))
    installer.chmod(0o755)
    inputs = content_hash(manifest.inputs.dump())[:16]
    written = []
    for path in (*archives, installer):
        comment = f"orchestrator: {path.name} {settings.binary} {settings.version} inputs:{inputs}"
        written += [path.name, signer.sign(path, trusted_comment=comment).name]
    sizes = ", ".join(f"{path.name}: {path.stat().st_size} bytes" for path in archives)
    say(f"archives {sizes}; {INSTALLER}")
    return written


def archive_extras(artifact: ArtifactToPublish, include: Sequence[str]) -> list[tuple[str, bytes]]:
    """The [archive] files: archive.include's (`include`) from the source snapshot, then
    the generated ones build.json records, read back from the artifact folder (checked: a
    folder handed over by `build --target` is untrusted until its bytes match the record)."""
    extras = included_files(artifact.source_archive, include)
    for generated in artifact.manifest.generated or ():
        check_include_pattern(generated.path, "build.json: generated")
        path = artifact.folder / GENERATED_DIR / generated.path
        data = path.read_bytes() if _inside(artifact.folder, path) else b""
        if sha256_bytes(data) != generated.sha256:
            raise PublishError(
                f"{artifact.name}/{GENERATED_DIR}/{generated.path} is missing or is not the "
                "file build.json records",
                hint="Build the target again; never edit an artifact folder by hand.",
            )
        extras.append((generated.path, data))
    return extras


def _inside(folder: Path, path: Path) -> bool:
    """`path` is a plain file of `folder`, reached through no link (a symlinked folder on
    the way would pack, and sign, a file from anywhere on this machine)."""
    if not path.is_file():
        return False
    current = path
    while current != folder:
        if current.is_symlink():
            return False
        current = current.parent
    return path.resolve().is_relative_to(folder.resolve())

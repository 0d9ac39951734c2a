"""`orchestrator ci`: the CI file that builds a release across runners and assembles it once.

Two providers. GitHub Actions (.github/workflows/release.yml): on a version tag, a `plan`
job runs `release --dry-run --json` and emits the targets as a matrix; one `build` job per
target (on the runner labels `ci.runners` names for its flavor, else ubuntu-latest) builds
an unsigned target folder with `build --target`; one `assemble` job, the only one that
sees the signing key, runs `release assemble`, `verify`, and uploads the release files to
the GitHub Release. GitLab CI (.gitlab-ci.yml): the same three stages, one build job per
flavor with a `parallel:matrix` over its CPU levels (GitLab's matrix is fixed when the
pipeline starts, so the plan job checks that the file still lists the config's targets),
Docker-in-Docker for the builds, and the generic package registry for the files.

`ci.verify` adds a second builder ("b"): every target ("rebuild") or one chosen from the
tag's hash ("rebuild-one") is built again on a runner of its own (`FLAVOR@b=LABEL` in
ci.runners), with a cache of its own, and assemble signs only folders that agree byte for
byte (`release assemble --agree`). The build jobs cache the vendored crates (checked
against Cargo.lock on use) and stored profiles (sealed with the CI secret
ORCHESTRATOR_CACHE_KEY), never built binaries: docs/trust.md says why.

The text is made from the resolved options (pure: no process, no network): what both
providers share is here, each file's text in supply/github_workflow.py and
supply/gitlab_ci.py; the CLI writes it, or with `--check` compares it with the file on disk.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator import __version__
from orchestrator.config.resolve.checks import check_ci_runners
from orchestrator.config.resolve.ci_install import install_requirement
from orchestrator.config.resolve.options import KNOWN_FLAVORS, Options
from orchestrator.errors import ConfigError, OrchestratorError

DEFAULT_OUTPUTS = {"github": ".github/workflows/release.yml", "gitlab": ".gitlab-ci.yml"}
# The GitHub Actions each job uses, pinned by full commit SHA (a tag can be moved); the
# comment names the release the SHA is.
ACTIONS = {
    "checkout": ("actions/checkout", "11bd71901bbe5b1630ceea73d27597364c9af683", "v4.2.2"),
    "setup-python": ("actions/setup-python", "a26af69be951a213d495a4c3e4e4022e16d87065", "v5.6.0"),
    "cache": ("actions/cache", "5a3ec84eff668545956fd18022155c47e93e2684", "v4.2.3"),
    "upload-artifact": (
        "actions/upload-artifact",
        "ea165f8d65b6e75b540449e92b4886f43607fa02",
        "v4.6.2",
    ),
    "download-artifact": (
        "actions/download-artifact",
        "d3f86a106a0bac45b974a628896c90dbdf5c8093",
        "v4.3.0",
    ),
}
# The secrets (GitHub) or CI/CD variables (GitLab) the jobs read: the minisign secret key's
# text (GitLab: a File variable) and, for an encrypted key, its passphrase (assemble only);
# the key that seals the build jobs' cached profiles (host/cache_seal.py reads it).
CI_SECRETS = {
    "key": "MINISIGN_SECRET_KEY",
    "passphrase": "MINISIGN_PASSPHRASE",
    "cache": "ORCHESTRATOR_CACHE_KEY",
}
# What each ci.verify adds to `release assemble`: the folders of two builders must agree.
AGREE = {"off": "", "rebuild": " --agree all", "rebuild-one": " --agree one"}
# What the build jobs keep in the CI cache, below the orchestrator cache folder: the
# crates are checked against Cargo.lock's checksums before use and the profiles' records
# are sealed, so a tag's build may restore them; the step cache (built binaries), the
# rootfs and the .debs are never restored (a tag build makes them itself).
CACHED_FOLDERS = ("crates", "profiles")
# The toolchain image's archive (`orchestrator images save`), outside the orchestrator cache.
# The image is the compiler, so a tag's build (whose binaries are signed) restores it only
# where a second builder checks the result: builder a of ci.verify = "rebuild", whose
# builder b always builds its images from Debian's archive; a compiler forged into the
# cache then makes bytes that b's do not, and assemble refuses to sign (docs/trust.md).
IMAGE_DIR = "~/.cache/orchestrator-images"
IMAGE_RESTORE_IF = {
    "off": "github.ref_type != 'tag'",
    "rebuild": "github.ref_type != 'tag' || matrix.target.builder == 'a'",
    "rebuild-one": "github.ref_type != 'tag'",
}
IMAGE_RULE = {
    "off": "A tag's build makes it: no second builder checks the binaries it signs.",
    "rebuild": "A tag's build restores it for builder a only; b makes its own (they must agree).",
    "rebuild-one": "A tag's build makes it: the second builder checks one target only.",
}
_REPO_PATH = re.compile(r"[A-Za-z0-9._/+-]+")


class WorkflowFileError(OrchestratorError):
    """`orchestrator ci`: the CI file on disk is not the one it would write."""

    exit_code = 67
    summary = (
        "`ci`: the CI file differs from what would be generated (`--check`), exists and "
        "differs (overwritten only with `--force`), or cannot be written"
    )
    default_hint = (
        "Run `orchestrator ci PROVIDER` with the same options to write it again, or "
        "`--output` to write it elsewhere."
    )


@dataclass(frozen=True)
class CiSpec:
    """Everything the generated file depends on, paths relative to the repository root."""

    config: str  # orchestrator.toml, relative to the repository root
    install_spec: str  # what `pip install` gets on the runner
    toolchain: str
    cache_files: tuple[str, ...]  # files whose content keys the cache
    # builder ("a", "b") -> flavor -> runner labels (GitHub) / tags (GitLab)
    runners: Mapping[str, Mapping[str, tuple[str, ...]]]
    levels: Mapping[str, tuple[str, ...]]  # flavor -> CPU levels `release` builds, in order
    public_key: str | None  # the minisign public key (in the repository) verify checks with
    verify: str = "off"  # ci.verify
    install_flag: str | None = None  # --install, when given (the command that rewrites it)

    @property
    def builders(self) -> tuple[str, ...]:
        return ("a",) if self.verify == "off" else ("a", "b")


def repository_root(start: Path) -> Path:
    """The git work tree holding `start` (a folder with .git), else `start` itself."""
    start = start.resolve()
    return next((d for d in (start, *start.parents) if (d / ".git").exists()), start)


def default_output(provider: str, root: Path) -> Path:
    return root / DEFAULT_OUTPUTS[provider]


def _relative(path: Path, root: Path, what: str) -> str:
    try:
        relative = path.resolve().relative_to(root)
    except ValueError:
        raise ConfigError(
            f"{what} {path} is outside the repository {root} that CI checks out",
            hint="Keep orchestrator.toml and the crate in the repository the workflow runs in.",
        ) from None
    text = relative.as_posix()
    if not _REPO_PATH.fullmatch(text):
        raise ConfigError(
            f"{what} {text!r}: a path in a CI file may hold only letters, digits and . _ / + -"
        )
    return text


@dataclass(frozen=True)
class CiSettings:
    """What the CI file reads of the settings: the config and the crate whose files CI
    caches, the toolchain, and ci.install, ci.runners and ci.verify."""

    config_path: Path
    crate_dir: Path
    toolchain: str
    ci_install: str
    ci_runners: tuple[str, ...]
    ci_verify: str

    @classmethod
    def from_options(cls, options: Options) -> CiSettings:
        return cls(
            config_path=options.config_path,
            crate_dir=options.crate_dir,
            toolchain=options.toolchain,
            ci_install=options.ci_install,
            ci_runners=options.ci_runners,
            ci_verify=options.ci_verify,
        )


def ci_spec(
    settings: CiSettings,
    levels: Mapping[str, Sequence[str]],
    *,
    root: Path,
    install: str | None = None,
    public_key: Path | None = None,
) -> CiSpec:
    """The inputs of the CI file for the project `settings` come from, in the repository at
    `root`; `levels` are the targets of the release, by flavor; `install` (--install)
    replaces ci.install."""
    requirement = install_requirement(
        settings.ci_install if install is None else install,
        "ci.install" if install is None else "--install",
    )
    crate = settings.crate_dir
    files = [
        _relative(settings.config_path, root, "the config"),
        *(
            _relative(crate / name, root, "the crate file")
            for name in ("Cargo.toml", "Cargo.lock", "rust-toolchain.toml", "rust-toolchain")
            if (crate / name).is_file()
        ),
    ]
    pinned = root / "toolchains" / f"{settings.toolchain}.toml"  # a checkout of orchestrator
    if pinned.is_file():
        files.append(_relative(pinned, root, "the toolchain"))
    key = None
    if public_key is not None:
        if not public_key.is_file():
            raise ConfigError(
                f"--public-key {public_key}: no such file",
                hint="Commit the public half of the signing key (`orchestrator keygen` writes "
                "it beside the secret key) and name it here.",
            )
        key = _relative(public_key, root, "the public key")
    runners = {
        builder: {
            flavor: tuple(labels)
            for flavor, labels in check_ci_runners(
                settings.ci_runners, KNOWN_FLAVORS, builder=builder
            ).items()
        }
        for builder in ("a", "b")
    }
    return CiSpec(
        config=files[0],
        install_spec=requirement,
        toolchain=settings.toolchain,
        cache_files=tuple(files),
        runners=runners,
        levels={flavor: tuple(found) for flavor, found in levels.items()},
        public_key=key,
        verify=settings.ci_verify,
        install_flag=None if install is None else install.strip(),
    )


def yaml_quote(text: str) -> str:
    """`text` as a YAML double-quoted scalar (JSON's string syntax is YAML's)."""
    return json.dumps(text)


def pinned_action(name: str, part: str = "") -> str:
    """`owner/repo[/part]@SHA # version`: an action pinned by commit (`part`: a sub-action,
    as actions/cache/restore, of the same commit)."""
    repository, sha, version = ACTIONS[name]
    return f"{repository}{'/' + part if part else ''}@{sha} # {version}"


def command_line(provider: str, spec: CiSpec) -> str:
    """The command that writes this file again (run at the repository root)."""
    words = ["orchestrator", "ci", provider]
    if spec.config != "orchestrator.toml":  # not the one found from the root
        words += ["--config", spec.config]
    if spec.install_flag:
        words += ["--install", spec.install_flag]
    if spec.public_key:
        words += ["--public-key", spec.public_key]
    return shlex.join(words)


def file_header(provider: str, spec: CiSpec, what: str) -> str:
    return (
        f"# {what}\n"
        f"# Written by `{command_line(provider, spec)}` (orchestrator {__version__}) from "
        f"{spec.config}:\n"
        "# change the config and run it again rather than editing this file; the same command\n"
        "# with --check fails while this file differs from what it would write.\n"
    )


def fill(template: str, replacements: Mapping[str, str]) -> str:
    for marker, value in replacements.items():
        template = template.replace(marker, value)
    left = re.search(r"@[A-Z_]+@", template)
    if left:  # a marker without a value is a bug here, not the user's
        raise AssertionError(f"unfilled marker {left.group()} in a CI template")
    return template


def write_workflow(path: Path, text: str, *, force: bool, check: bool) -> str:
    """Write `text` to `path` (or with `check` compare only): "up to date", "written" or
    WorkflowFileError when the file is stale (check), differs (no force) or unwritable."""
    try:
        current = path.read_text() if path.is_file() else None
    except (OSError, UnicodeDecodeError) as error:
        raise WorkflowFileError(f"cannot read {path}: {error}") from None
    if current == text:
        return "up to date"
    if check:
        raise WorkflowFileError(
            f"{path} is stale: it differs from what `orchestrator ci` writes"
            if current is not None
            else f"{path} does not exist",
        )
    if current is not None and not force:
        raise WorkflowFileError(
            f"{path} exists and differs from what would be written: not overwritten",
            hint="Look at the difference (`--check` says whether there is one); --force "
            "replaces the file, --output writes elsewhere.",
        )
    if path.exists() and not path.is_file():
        raise WorkflowFileError(f"{path} exists and is not a file")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        staged = path.with_name(f".{path.name}.new")
        staged.write_text(text)
        staged.replace(path)
    except OSError as error:
        raise WorkflowFileError(
            f"cannot write {path}: {error.strerror or error}",
            hint="Choose a folder you can write to with --output.",
        ) from None
    return "written"

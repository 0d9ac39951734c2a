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

The text is made here from the resolved options (pure: no process, no network); the CLI
writes it, or with `--check` compares it with the file on disk.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator import __version__
from orchestrator.config.checks import check_ci_runners
from orchestrator.config.options import KNOWN_FLAVORS, Options
from orchestrator.config.resources import DISTRIBUTION
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
# The secrets (GitHub) or CI/CD variables (GitLab) the assemble job reads: the minisign
# secret key's text (GitLab: a File variable) and, for an encrypted key, its passphrase.
CI_SECRETS = {"key": "MINISIGN_SECRET_KEY", "passphrase": "MINISIGN_PASSPHRASE"}
# What a pip requirement may look like here: one line, no quotes (it goes into YAML and a
# double-quoted shell word).
_INSTALL_SPEC = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._+=<>!~,;:@/\[\]-]*")
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
    runners: Mapping[str, tuple[str, ...]]  # flavor -> runner labels (GitHub) / tags (GitLab)
    levels: Mapping[str, tuple[str, ...]]  # flavor -> CPU levels `release` builds, in order
    public_key: str | None  # the minisign public key (in the repository) verify checks with


def repository_root(start: Path) -> Path:
    """The git work tree holding `start` (a folder with .git), else `start` itself."""
    start = start.resolve()
    return next((d for d in (start, *start.parents) if (d / ".git").exists()), start)


def default_output(provider: str, root: Path) -> Path:
    return root / DEFAULT_OUTPUTS[provider]


def default_install_spec() -> str:
    return f"{DISTRIBUTION}=={__version__}"


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


def ci_spec(
    options: Options,
    levels: Mapping[str, Sequence[str]],
    *,
    root: Path,
    install_spec: str | None = None,
    public_key: Path | None = None,
) -> CiSpec:
    """The inputs of the CI file for the project `options` resolves, in the repository at
    `root`; `levels` are the targets of the release, by flavor."""
    spec = default_install_spec() if install_spec is None else install_spec.strip()
    if not _INSTALL_SPEC.fullmatch(spec):
        raise ConfigError(
            f"--install-spec {install_spec!r} is not a pip requirement this can write into "
            "a CI file (one line, no quotes or $)",
            hint=f"e.g. {default_install_spec()} or 'rust-release-orchestrator @ "
            "git+https://example.com/orchestrator@v0.1.0'.",
        )
    crate = options.crate_dir
    files = [
        _relative(options.config_path, root, "the config"),
        *(
            _relative(crate / name, root, "the crate file")
            for name in ("Cargo.toml", "Cargo.lock", "rust-toolchain.toml", "rust-toolchain")
            if (crate / name).is_file()
        ),
    ]
    pinned = root / "toolchains" / f"{options.toolchain}.toml"  # a checkout of orchestrator
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
    runners = check_ci_runners(options.ci_runners, KNOWN_FLAVORS)
    return CiSpec(
        config=files[0],
        install_spec=spec,
        toolchain=options.toolchain,
        cache_files=tuple(files),
        runners={flavor: tuple(labels) for flavor, labels in runners.items()},
        levels={flavor: tuple(found) for flavor, found in levels.items()},
        public_key=key,
    )


def _q(text: str) -> str:
    """`text` as a YAML double-quoted scalar (JSON's string syntax is YAML's)."""
    return json.dumps(text)


def _uses(name: str, part: str = "") -> str:
    """`owner/repo[/part]@SHA # version`: an action pinned by commit (`part`: a sub-action,
    as actions/cache/restore, of the same commit)."""
    repository, sha, version = ACTIONS[name]
    return f"{repository}{'/' + part if part else ''}@{sha} # {version}"


def command_line(provider: str, spec: CiSpec) -> str:
    """The command that writes this file again (run at the repository root)."""
    words = ["orchestrator", "ci", provider]
    if spec.config != "orchestrator.toml":  # not the one found from the root
        words += ["--config", spec.config]
    if spec.install_spec != default_install_spec():
        words += ["--install-spec", spec.install_spec]
    if spec.public_key:
        words += ["--public-key", spec.public_key]
    return shlex.join(words)


def _header(provider: str, spec: CiSpec, what: str) -> str:
    return (
        f"# {what}\n"
        f"# Written by `{command_line(provider, spec)}` (orchestrator {__version__}) from "
        f"{spec.config}:\n"
        "# change the config and run it again rather than editing this file; the same command\n"
        "# with --check fails while this file differs from what it would write.\n"
    )


_GITHUB = """\
@HEADER@#
# On a version tag (v1.2.3, the version the config releases): `plan` lists the targets,
# one `build` job per target builds it unsigned, and `assemble`, the only job that sees the
# signing key, signs the release, verifies it and uploads it to the GitHub Release.
# Run by hand (workflow_dispatch), it plans and builds without publishing.
# Secrets: @SECRET@ (the text of the minisign secret key) and, for an
# encrypted key, @PASSPHRASE@.
name: release

on:
  push:
    tags:
      - "v*"
  workflow_dispatch:

permissions: {}

concurrency:
  group: release-${{ github.ref }}
  cancel-in-progress: false

env:
  ORCHESTRATOR_INSTALL: @INSTALL@
  ORCHESTRATOR_CONFIG: @CONFIG@
  ORCHESTRATOR_CACHE_DIR: ~/.cache/orchestrator  # what the build jobs cache, whatever the config
  PIP_DISABLE_PIP_VERSION_CHECK: "1"

jobs:
  plan:
    name: plan
    runs-on: ubuntu-latest
    permissions:
      contents: read
    outputs:
      targets: ${{ steps.plan.outputs.targets }}
    steps:
      - uses: @CHECKOUT@
        with:
          persist-credentials: false
      - uses: @SETUP_PYTHON@
        with:
          python-version: "3.12"
      - name: Install orchestrator
        run: python -m pip install "$ORCHESTRATOR_INSTALL"
      - name: Plan the release
        id: plan
        env:
          # flavor -> runner labels (ci.runners); a flavor not named here builds on ubuntu-latest
          RUNNERS: @RUNNERS@
        run: |
          orchestrator release --dry-run --json > "$RUNNER_TEMP/plan.json"
          python - "$RUNNER_TEMP/plan.json" <<'EOF'
          import json, os, sys
          plan = json.load(open(sys.argv[1]))
          tag = os.environ["GITHUB_REF_NAME"] if os.environ["GITHUB_REF_TYPE"] == "tag" else ""
          if tag and tag != "v" + plan["version"]:
              print(f"::error::tag {tag} is not v{plan['version']}: the config releases that")
              sys.exit(1)
          runners = json.loads(os.environ["RUNNERS"])
          targets = [
              {key: target[key] for key in ("artifact", "flavor", "level")}
              | {"runner": runners.get(target["flavor"], ["ubuntu-latest"])}
              for target in plan["targets"]
          ]
          with open(os.environ["GITHUB_OUTPUT"], "a") as output:
              output.write("targets=" + json.dumps(targets, separators=(",", ":")) + "\\n")
          for target in targets:
              print(target["artifact"], "on", ", ".join(target["runner"]))
          EOF

  build:
    name: build ${{ matrix.target.artifact }}
    needs: plan
    runs-on: ${{ matrix.target.runner }}
    permissions:
      contents: read
    strategy:
      fail-fast: false
      matrix:
        target: ${{ fromJSON(needs.plan.outputs.targets) }}
    steps:
      - uses: @CHECKOUT@
        with:
          persist-credentials: false
      - uses: @SETUP_PYTHON@
        with:
          python-version: "3.12"
      - name: Install orchestrator and mmdebstrap
        run: |
          python -m pip install "$ORCHESTRATOR_INSTALL"
          sudo apt-get update -qq
          sudo apt-get install -y -qq --no-install-recommends mmdebstrap uidmap
          # mmdebstrap --mode=unshare needs user namespaces, which Ubuntu 24.04 restricts
          if [ -e /proc/sys/kernel/apparmor_restrict_unprivileged_userns ]; then
            sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0
          fi
      # The vault and stored PGO/BOLT profiles: files named by their sha256 or by the hash
      # of what made them, so a stale entry is never used, only not found. A tag's build
      # only reads the cache: it is written by runs on other refs (run this workflow by hand
      # on the default branch), and a tag's run sees only its own and the default branch's
      # entries, which only those who can push there can write.
      - name: Restore the vault and stored profiles
        id: cache
        uses: @CACHE_RESTORE@
        with:
          path: |
            ~/.cache/orchestrator/vault
            ~/.cache/orchestrator/profiles
          key: @CACHE_KEY@${{ hashFiles(@CACHE_FILES@) }}
          restore-keys: |
            @CACHE_KEY@
      - name: Check the runner
        run: orchestrator doctor || echo "::warning::orchestrator doctor found a blocker"
      - name: Build ${{ matrix.target.artifact }}
        env:
          ARTIFACT: ${{ matrix.target.artifact }}
        run: |
          orchestrator build --target "$ARTIFACT" --out "$RUNNER_TEMP/targets"
          # a tar keeps the modes that upload-artifact would drop
          tar -cf "$RUNNER_TEMP/$ARTIFACT.tar" -C "$RUNNER_TEMP/targets" "$ARTIFACT"
      - uses: @UPLOAD@
        with:
          name: target-${{ matrix.target.artifact }}
          path: ${{ runner.temp }}/${{ matrix.target.artifact }}.tar
          if-no-files-found: error
          retention-days: 7
      - name: Save the vault and stored profiles
        if: github.ref_type != 'tag' && steps.cache.outputs.cache-hit != 'true'
        uses: @CACHE_SAVE@
        with:
          path: |
            ~/.cache/orchestrator/vault
            ~/.cache/orchestrator/profiles
          key: @CACHE_KEY@${{ hashFiles(@CACHE_FILES@) }}

  assemble:
    name: sign and publish
    needs: build
    if: github.ref_type == 'tag'
    runs-on: ubuntu-latest
    environment: release
    permissions:
      contents: write  # create the GitHub Release and upload its files
    steps:
      - uses: @CHECKOUT@
        with:
          persist-credentials: false
      - uses: @SETUP_PYTHON@
        with:
          python-version: "3.12"
      - name: Install orchestrator
        run: python -m pip install "$ORCHESTRATOR_INSTALL"
      - uses: @DOWNLOAD@
        with:
          pattern: target-*
          path: ${{ runner.temp }}/downloads
          merge-multiple: true
      - name: Assemble and sign the release
        id: assemble
        env:
          SECRET_KEY: ${{ secrets.@SECRET@ }}
          PASSPHRASE: ${{ secrets.@PASSPHRASE@ }}
          ORCHESTRATOR_ARTIFACTS_DIR: ${{ runner.temp }}/artifacts
        run: |
          if [ -z "$SECRET_KEY" ]; then
            echo "::error::set the secret @SECRET@ to the minisign secret key (orchestrator keygen)"
            exit 1
          fi
          mkdir -p "$RUNNER_TEMP/targets"
          for folder in "$RUNNER_TEMP"/downloads/*.tar; do
            tar -xf "$folder" -C "$RUNNER_TEMP/targets"
          done
          key="$RUNNER_TEMP/signing.key"
          trap 'rm -f "$key"' EXIT
          (umask 077 && printf '%s\\n' "$SECRET_KEY" > "$key")
          export ORCHESTRATOR_SIGNING_KEY="$key"
          if [ -n "$PASSPHRASE" ]; then
            export ORCHESTRATOR_SIGNING_PASSPHRASE="$PASSPHRASE"
          fi
          orchestrator release assemble "$RUNNER_TEMP"/targets/*
          release_dir=$(orchestrator release --dry-run --json \\
            | python -c 'import json, sys; print(json.load(sys.stdin)["release_dir"])')
          echo "release_dir=$release_dir" >> "$GITHUB_OUTPUT"
      - name: Verify the release
        env:
          RELEASE_DIR: ${{ steps.assemble.outputs.release_dir }}
        run: orchestrator verify "$RELEASE_DIR"@VERIFY_KEY@
      - name: Upload to the GitHub Release
        env:
          GH_TOKEN: ${{ github.token }}
          GH_REPO: ${{ github.repository }}
          TAG: ${{ github.ref_name }}
          RELEASE_DIR: ${{ steps.assemble.outputs.release_dir }}
        run: |
          cd "$RELEASE_DIR"
          set --
          for file in ./*.tar.xz ./*.tar.xz.minisig install.sh install.sh.minisig SHA256SUMS \\
              SHA256SUMS.minisig provenance.intoto.jsonl provenance.intoto.jsonl.minisig \\
              release.lock release.lock.minisig minisign.pub; do
            if [ -f "$file" ]; then set -- "$@" "$file"; fi
          done
          if ! gh release view "$TAG" > /dev/null 2>&1; then
            gh release create "$TAG" --verify-tag --title "$TAG" \\
              --notes "Install: download install.sh and run: sh install.sh --from https://github.com/$GH_REPO/releases/download/$TAG"
          fi
          gh release upload "$TAG" "$@" --clobber
"""


def render_github(spec: CiSpec) -> str:
    """.github/workflows/release.yml for `spec`."""
    runners = {flavor: list(labels) for flavor, labels in sorted(spec.runners.items())}
    verify_key = f" --key {spec.public_key}" if spec.public_key else ""
    replacements = {
        "@HEADER@": _header(
            "github", spec, "GitHub Actions: build the release across runners, sign once."
        ),
        "@SECRET@": CI_SECRETS["key"],
        "@PASSPHRASE@": CI_SECRETS["passphrase"],
        "@INSTALL@": _q(spec.install_spec),
        "@CONFIG@": _q(spec.config),
        "@CACHE_KEY@": (
            f"orchestrator-{spec.toolchain}-${{{{ matrix.target.flavor }}}}-"
            "${{ matrix.target.level }}-"
        ),
        "@RUNNERS@": "'" + json.dumps(runners, separators=(",", ":")) + "'",
        "@CACHE_FILES@": ", ".join(f"'{path}'" for path in spec.cache_files),
        "@VERIFY_KEY@": verify_key,
        "@CHECKOUT@": _uses("checkout"),
        "@SETUP_PYTHON@": _uses("setup-python"),
        "@CACHE_RESTORE@": _uses("cache", "restore"),
        "@CACHE_SAVE@": _uses("cache", "save"),
        "@UPLOAD@": _uses("upload-artifact"),
        "@DOWNLOAD@": _uses("download-artifact"),
    }
    return _fill(_GITHUB, replacements)


_GITLAB_HEAD = """\
@HEADER@#
# On a version tag (v1.2.3, the version the config releases): `plan` lists the targets and
# checks that this file still builds them, one build job per target (parallel:matrix over
# each flavor's CPU levels) builds it unsigned in Docker-in-Docker, and `assemble`, the only
# job that reads the signing key, signs, verifies and uploads the release to the project's
# generic package registry (packages/generic/NAME/VERSION/FILE).
# CI/CD variables: @SECRET@ (type File, protected, the minisign secret key) and, for
# an encrypted key, @PASSPHRASE@ (masked, protected); protect the v* tags so
# that tag pipelines see them.
# The build jobs need a runner that allows privileged containers with a /certs/client
# volume (Docker-in-Docker with TLS).
workflow:
  rules:
    - if: $CI_COMMIT_TAG =~ /^v/

stages:
  - plan
  - build
  - assemble

variables:
  ORCHESTRATOR_INSTALL: @INSTALL@
  ORCHESTRATOR_CONFIG: @CONFIG@
  PIP_DISABLE_PIP_VERSION_CHECK: "1"
  # the targets this file builds, one "FLAVOR LEVEL" a line, which `plan` checks
  EXPECTED_TARGETS: @EXPECTED@

default:
  image: python:3.12-bookworm
  before_script:
    - python -m pip install --quiet "$ORCHESTRATOR_INSTALL"
    # what the jobs write into the checkout must not make the crate look edited
    - printf '%s\\n' /.orchestrator/ /.orchestrator-cache/ >> .git/info/exclude
    # field FILE KEY: one value of a JSON document (the plan)
    - |
      field() {
        python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$@"
      }

plan:
  stage: plan
  script:
    - mkdir -p .orchestrator
    - orchestrator release --dry-run --json > .orchestrator/plan.json
    - |
      python3 - <<'EOF'
      import json, os, sys
      plan = json.load(open(".orchestrator/plan.json"))
      tag = os.environ.get("CI_COMMIT_TAG", "")
      if tag and tag != "v" + plan["version"]:
          sys.exit(f"tag {tag} is not v{plan['version']}, the version the config releases")
      found = sorted(f"{t['flavor']} {t['level']}" for t in plan["targets"])
      expected = sorted(os.environ["EXPECTED_TARGETS"].split("\\n"))
      if found != expected:
          sys.exit(f"the config releases {found}, this file builds {expected}: "
                   "write it again with `@COMMAND@`")
      for target in plan["targets"]:
          print(target["artifact"])
      EOF
  artifacts:
    paths:
      - .orchestrator/plan.json
    expire_in: 1 week
"""

_GITLAB_BUILD = """\

build-@FLAVOR@:
  stage: build
  needs:
    - plan
@TAGS@  services:
    - name: docker:27-dind
      alias: docker
  variables:
    FLAVOR: @FLAVOR@
    DOCKER_HOST: tcp://docker:2376
    DOCKER_TLS_CERTDIR: /certs
    DOCKER_TLS_VERIFY: "1"
    DOCKER_CERT_PATH: /certs/client
    ORCHESTRATOR_CACHE_DIR: $CI_PROJECT_DIR/.orchestrator-cache
  parallel:
    matrix:
      - LEVEL:
@LEVELS@  # the vault and stored PGO/BOLT profiles (named by content or by what made them)
  cache:
    key:
      files:
@CACHE_FILES@      prefix: orchestrator-@TOOLCHAIN@-$FLAVOR-$LEVEL
    paths:
      - .orchestrator-cache/vault
      - .orchestrator-cache/profiles
  script:
    - apt-get update -qq
    - apt-get install -y -qq --no-install-recommends mmdebstrap
    - >-
      artifact=$(python3 -c 'import json, sys;
      print(next(t["artifact"] for t in json.load(open(".orchestrator/plan.json"))["targets"]
      if t["flavor"] == sys.argv[1] and t["level"] == sys.argv[2]))' "$FLAVOR" "$LEVEL")
    - orchestrator build --target "$artifact" --out .orchestrator/targets
    # a tar keeps the files' modes
    - tar -cf ".orchestrator/$artifact.tar" -C .orchestrator/targets "$artifact"
  artifacts:
    paths:
      - .orchestrator/*.tar
    expire_in: 1 week
"""

_GITLAB_ASSEMBLE = """\

assemble:
  stage: assemble
  needs:
    - plan
@NEEDS@  rules:
    - if: $CI_COMMIT_TAG && $CI_COMMIT_REF_PROTECTED == "true"
  script:
    - |
      if [ -z "${@SECRET@:-}" ] || [ ! -f "$@SECRET@" ]; then
        echo "set the CI/CD variable @SECRET@ (type File, protected) to the minisign secret key" >&2
        exit 1
      fi
    - mkdir -p .orchestrator/unpacked
    - for folder in .orchestrator/*.tar; do tar -xf "$folder" -C .orchestrator/unpacked; done
    - export ORCHESTRATOR_SIGNING_KEY="$@SECRET@"
    - if [ -n "${@PASSPHRASE@:-}" ]; then export ORCHESTRATOR_SIGNING_PASSPHRASE="$@PASSPHRASE@"; fi
    - export ORCHESTRATOR_ARTIFACTS_DIR="$CI_PROJECT_DIR/.orchestrator/artifacts"
    - orchestrator release assemble .orchestrator/unpacked/*
    - unset ORCHESTRATOR_SIGNING_KEY ORCHESTRATOR_SIGNING_PASSPHRASE
    - orchestrator release --dry-run --json > .orchestrator/assembled.json
    - release_dir=$(field .orchestrator/assembled.json release_dir)
    - orchestrator verify "$release_dir"@VERIFY_KEY@
    - name=$(field .orchestrator/plan.json name)
    - version=$(field .orchestrator/plan.json version)
    - |
      registry="$CI_API_V4_URL/projects/$CI_PROJECT_ID/packages/generic/$name/$version"
      cd "$release_dir"
      for file in ./*.tar.xz ./*.tar.xz.minisig install.sh install.sh.minisig SHA256SUMS \\
          SHA256SUMS.minisig provenance.intoto.jsonl provenance.intoto.jsonl.minisig \\
          release.lock release.lock.minisig minisign.pub; do
        if [ -f "$file" ]; then
          curl --fail-with-body --silent --show-error --header "JOB-TOKEN: $CI_JOB_TOKEN" \\
            --upload-file "$file" "$registry/${file#./}"
        fi
      done
      echo "published to $registry (install: sh install.sh --from $registry)"
"""


def render_gitlab(spec: CiSpec) -> str:
    """.gitlab-ci.yml for `spec`."""
    expected = "\n".join(
        f"{flavor} {level}" for flavor, levels in spec.levels.items() for level in levels
    )
    head = _fill(
        _GITLAB_HEAD,
        {
            "@HEADER@": _header(
                "gitlab", spec, "GitLab CI: build the release across runners, sign once."
            ),
            "@SECRET@": CI_SECRETS["key"],
            "@PASSPHRASE@": CI_SECRETS["passphrase"],
            "@INSTALL@": _q(spec.install_spec),
            "@CONFIG@": _q(spec.config),
            "@EXPECTED@": _q(expected),
            "@COMMAND@": command_line("gitlab", spec),
        },
    )
    # GitLab keys a cache by at most two files: the lock and the config decide the most.
    lock = [
        path for path in spec.cache_files if path.endswith("/Cargo.lock") or path == "Cargo.lock"
    ]
    key_files = [spec.config, *lock][:2]
    builds = "".join(
        _fill(
            _GITLAB_BUILD,
            {
                "@FLAVOR@": flavor,
                "@TAGS@": (
                    "  tags:\n" + "".join(f"    - {_q(tag)}\n" for tag in spec.runners[flavor])
                    if spec.runners.get(flavor)
                    else ""
                ),
                "@LEVELS@": "".join(f"          - {_q(level)}\n" for level in levels),
                "@CACHE_FILES@": "".join(f"          - {_q(path)}\n" for path in key_files),
                "@TOOLCHAIN@": spec.toolchain,
            },
        )
        for flavor, levels in spec.levels.items()
    )
    assemble = _fill(
        _GITLAB_ASSEMBLE,
        {
            "@NEEDS@": "".join(f"    - build-{flavor}\n" for flavor in spec.levels),
            "@SECRET@": CI_SECRETS["key"],
            "@PASSPHRASE@": CI_SECRETS["passphrase"],
            "@VERIFY_KEY@": f" --key {spec.public_key}" if spec.public_key else "",
        },
    )
    return head + builds + assemble


def _fill(template: str, replacements: Mapping[str, str]) -> str:
    for marker, value in replacements.items():
        template = template.replace(marker, value)
    left = re.search(r"@[A-Z_]+@", template)
    if left:  # a marker without a value is a bug here, not the user's
        raise AssertionError(f"unfilled marker {left.group()} in a CI template")
    return template


def render(provider: str, spec: CiSpec) -> str:
    return render_github(spec) if provider == "github" else render_gitlab(spec)


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

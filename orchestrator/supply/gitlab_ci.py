""".gitlab-ci.yml (`orchestrator ci gitlab`): the same three stages as GitHub's workflow,
one build job per flavor with a `parallel:matrix` over its CPU levels (fixed when the
pipeline starts, so the plan job checks that the file still lists the config's targets),
Docker-in-Docker for the builds, and the generic package registry for the files."""

from __future__ import annotations

import hashlib

from orchestrator.supply.workflows import (
    AGREE,
    CACHED_FOLDERS,
    CI_SECRETS,
    CiSpec,
    command_line,
    file_header,
    fill,
    yaml_quote,
)

_GITLAB_HEAD = """\
@HEADER@#
# On a version tag (v1.2.3, the version the config releases): `plan` lists the targets and
# checks that this file still builds them, one build job per target (parallel:matrix over
# each flavor's CPU levels) builds it unsigned in Docker-in-Docker, and `assemble`, the only
# job that reads the signing key, signs, verifies and uploads the release to the project's
# generic package registry (packages/generic/NAME/VERSION/FILE).
# CI/CD variables: @SECRET@ (type File, protected, the minisign secret key) and, for
# an encrypted key, @PASSPHRASE@ (masked, protected); @CACHE_SECRET@ (masked,
# protected, any long random text) seals the build jobs' cached profiles so that a runner
# uses what another stored; protect the v* tags so that tag pipelines see them.@VERIFY_NOTE@
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
  # What the jobs hand on goes below .orchestrator/ in the checkout (artifacts must be
  # there); as orchestrator's artifacts folder it is never read as the crate's sources.
  ORCHESTRATOR_ARTIFACTS_DIR: $CI_PROJECT_DIR/.orchestrator
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
      import hashlib, json, os, sys
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
@CHOOSE@      EOF
  artifacts:
    paths:
      - .orchestrator/plan.json
@PLAN_ARTIFACTS@    expire_in: 1 week
"""

_GITLAB_BUILD = """\

@JOB@:
  stage: build
  needs:
    - plan
@TAGS@  services:
    - name: docker:27-dind
      alias: docker
  variables:
    FLAVOR: @FLAVOR@
    BUILDER: @BUILDER@
    DOCKER_HOST: tcp://docker:2376
    DOCKER_TLS_CERTDIR: /certs
    DOCKER_TLS_VERIFY: "1"
    DOCKER_CERT_PATH: /certs/client
    ORCHESTRATOR_CACHE_DIR: $CI_PROJECT_DIR/.orchestrator-cache
  parallel:
    matrix:
      - LEVEL:
@LEVELS@  # the vendored crates (checked against Cargo.lock on use) and stored PGO/BOLT profiles
  # (sealed with @CACHE_SECRET@), apart for each builder; never the step cache: a
  # release's binaries are all compiled by its own build jobs (docs/trust.md)
  cache:
    - key:
        files:
@CACHE_FILES@        prefix: orchestrator-@TOOLCHAIN@-$FLAVOR-$LEVEL-$BUILDER
      paths:
@CACHE_PATHS@@IMAGE_CACHE@  script:
    - apt-get update -qq
    - apt-get install -y -qq --no-install-recommends mmdebstrap
    - >-
      artifact=$(python3 -c 'import json, sys;
      print(next(t["artifact"] for t in json.load(open(".orchestrator/plan.json"))["targets"]
      if t["flavor"] == sys.argv[1] and t["level"] == sys.argv[2]))' "$FLAVOR" "$LEVEL")
@SKIP@    - |
      if [ -z "${@CACHE_SECRET@:-}" ]; then
        echo "warning: no CI/CD variable @CACHE_SECRET@: no restored profile is used"
      fi
@IMAGE_LOAD@    - orchestrator build --target "$artifact" --out .orchestrator/targets
@IMAGE_SAVE@    # a tar keeps the files' modes
    - tar -cf ".orchestrator/$artifact-$BUILDER.tar" -C .orchestrator/targets "$artifact"
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
    # one folder per builder's archive: two builders' folders have the same name
    - |
      for archive in .orchestrator/*.tar; do
        folder=".orchestrator/unpacked/$(basename "$archive" .tar)"
        mkdir -p "$folder"
        tar -xf "$archive" -C "$folder"
      done
    - export ORCHESTRATOR_SIGNING_KEY="$@SECRET@"
    - if [ -n "${@PASSPHRASE@:-}" ]; then export ORCHESTRATOR_SIGNING_PASSPHRASE="$@PASSPHRASE@"; fi
    - orchestrator release assemble@AGREE@ .orchestrator/unpacked/*/*
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


# rebuild-one: the plan picks the target the tag's name hashes to (as GitHub's plan job
# does), and the second builder's jobs of every other target end at once.
_CHOOSE = """\
      digest = hashlib.sha256(os.environ["CI_COMMIT_REF_NAME"].encode()).hexdigest()
      chosen = plan["targets"][int(digest, 16) % len(plan["targets"])]["artifact"]
      with open(".orchestrator/rebuild-one", "w") as again:
          again.write(chosen + "\\n")
      print("built again by builder b:", chosen)
"""
# The toolchain image's archive (`orchestrator images`), inside the cache folder (which is
# never read as the crate's sources), keyed by the config and the orchestrator installed;
# an archive of another image there is not loaded (its name is the image's own key) and is
# replaced. Every GitLab job here is a tag's build, whose binaries are signed: only builder
# a of ci.verify = "rebuild" restores the image (the compiler), because builder b makes its
# own and the two must agree (supply/workflows.py IMAGE_RESTORE_IF, docs/trust.md).
_IMAGE_CACHE = """\
    # the toolchain image (docker save), only here: builder b makes its own
    - key:
        files:
          - @CONFIG@
        prefix: orchestrator-image-@TOOLCHAIN@-$FLAVOR-$BUILDER-@INSTALLED@
      paths:
        - @IMAGE_FOLDER@
"""
IMAGE_FOLDER = ".orchestrator-cache/image-archive"


def _image_cache(spec: CiSpec, builder: str) -> dict[str, str]:
    if spec.verify != "rebuild" or builder != "a":
        return {"@IMAGE_CACHE@": "", "@IMAGE_LOAD@": "", "@IMAGE_SAVE@": ""}
    cache = fill(
        _IMAGE_CACHE,
        {
            "@CONFIG@": yaml_quote(spec.config),
            "@TOOLCHAIN@": spec.toolchain,
            "@INSTALLED@": hashlib.sha256(spec.install_spec.encode()).hexdigest()[:16],
            "@IMAGE_FOLDER@": IMAGE_FOLDER,
        },
    )
    command = f'orchestrator images %s {IMAGE_FOLDER} --target "$artifact"\n'
    return {
        "@IMAGE_CACHE@": cache,
        "@IMAGE_LOAD@": "    - " + command % "load",
        "@IMAGE_SAVE@": "    - " + command % "save",
    }


_SKIP = """\
    - |
      if [ "$artifact" != "$(cat .orchestrator/rebuild-one)" ]; then
        echo "rebuild-one: $(cat .orchestrator/rebuild-one) is built again, not $artifact"
        exit 0
      fi
"""


def render_gitlab(spec: CiSpec) -> str:
    """.gitlab-ci.yml for `spec`."""
    expected = "\n".join(
        f"{flavor} {level}" for flavor, levels in spec.levels.items() for level in levels
    )
    verify_note = (
        ""
        if spec.verify == "off"
        else "\n# ci.verify = "
        + spec.verify
        + ": the build-FLAVOR-b jobs build "
        + ("every target" if spec.verify == "rebuild" else "one target, chosen from the tag")
        + "\n# again, and assemble signs only folders that agree byte for byte."
    )
    head = fill(
        _GITLAB_HEAD,
        {
            "@HEADER@": file_header(
                "gitlab", spec, "GitLab CI: build the release across runners, sign once."
            ),
            "@SECRET@": CI_SECRETS["key"],
            "@PASSPHRASE@": CI_SECRETS["passphrase"],
            "@CACHE_SECRET@": CI_SECRETS["cache"],
            "@VERIFY_NOTE@": verify_note,
            "@INSTALL@": yaml_quote(spec.install_spec),
            "@CONFIG@": yaml_quote(spec.config),
            "@EXPECTED@": yaml_quote(expected),
            "@COMMAND@": command_line("gitlab", spec),
            "@CHOOSE@": _CHOOSE if spec.verify == "rebuild-one" else "",
            "@PLAN_ARTIFACTS@": (
                "      - .orchestrator/rebuild-one\n" if spec.verify == "rebuild-one" else ""
            ),
        },
    )
    # GitLab keys a cache by at most two files: the lock and the config decide the most.
    lock = [
        path for path in spec.cache_files if path.endswith("/Cargo.lock") or path == "Cargo.lock"
    ]
    key_files = [spec.config, *lock][:2]
    jobs = [
        (f"build-{flavor}" + ("" if builder == "a" else f"-{builder}"), flavor, builder)
        for builder in spec.builders
        for flavor in spec.levels
    ]
    builds = "".join(
        fill(
            _GITLAB_BUILD,
            {
                "@JOB@": job,
                "@FLAVOR@": flavor,
                "@BUILDER@": builder,
                "@TAGS@": (
                    "  tags:\n"
                    + "".join(f"    - {yaml_quote(tag)}\n" for tag in spec.runners[builder][flavor])
                    if spec.runners[builder].get(flavor)
                    else ""
                ),
                "@LEVELS@": "".join(
                    f"          - {yaml_quote(level)}\n" for level in spec.levels[flavor]
                ),
                "@CACHE_FILES@": "".join(f"          - {yaml_quote(path)}\n" for path in key_files),
                "@CACHE_PATHS@": "".join(
                    f"        - .orchestrator-cache/{folder}\n" for folder in CACHED_FOLDERS
                ),
                **_image_cache(spec, builder),
                "@CACHE_SECRET@": CI_SECRETS["cache"],
                "@TOOLCHAIN@": spec.toolchain,
                "@SKIP@": _SKIP if builder == "b" and spec.verify == "rebuild-one" else "",
            },
        )
        for job, flavor, builder in jobs
    )
    assemble = fill(
        _GITLAB_ASSEMBLE,
        {
            "@NEEDS@": "".join(f"    - {job}\n" for job, _, _ in jobs),
            "@SECRET@": CI_SECRETS["key"],
            "@PASSPHRASE@": CI_SECRETS["passphrase"],
            "@AGREE@": AGREE[spec.verify],
            "@VERIFY_KEY@": f" --key {spec.public_key}" if spec.public_key else "",
        },
    )
    return head + builds + assemble

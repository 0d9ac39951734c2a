"""GitHub Actions' release.yml (`orchestrator ci github`): a `plan` job emits the targets as
a matrix, one `build` job per target builds an unsigned target folder on the runner labels
`ci.runners` names for its flavor (else ubuntu-latest), and `assemble`, the only job that
sees the signing key, signs, verifies and uploads to the GitHub Release."""

from __future__ import annotations

import json

from orchestrator.supply.workflows import (
    AGREE,
    CACHED_FOLDERS,
    CI_SECRETS,
    IMAGE_DIR,
    IMAGE_RESTORE_IF,
    IMAGE_RULE,
    CiSpec,
    file_header,
    fill,
    pinned_action,
    yaml_quote,
)

_GITHUB = """\
@HEADER@#
# On a version tag (v1.2.3, the version the config releases): `plan` lists the targets,
# one `build` job per target builds it unsigned, and `assemble`, the only job that sees the
# signing key, signs the release, verifies it and uploads it to the GitHub Release.
# Run by hand (workflow_dispatch), it plans and builds without publishing.
# Secrets: @SECRET@ (the text of the minisign secret key) and, for an
# encrypted key, @PASSPHRASE@, in the environment `release` (assemble's);
# @CACHE_SECRET@ (any long random text), in the environment `build`, seals the
# build jobs' cached profiles so that a runner uses what another stored.@VERIFY_NOTE@
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
          # builder -> flavor -> runner labels (ci.runners); elsewhere ubuntu-latest
          RUNNERS: @RUNNERS@
          # ci.verify: off, rebuild (every target twice) or rebuild-one (one, from the tag)
          VERIFY: @VERIFY@
        run: |
          orchestrator release --dry-run --json > "$RUNNER_TEMP/plan.json"
          python - "$RUNNER_TEMP/plan.json" <<'EOF'
          import hashlib, json, os, sys
          plan = json.load(open(sys.argv[1]))
          tag = os.environ["GITHUB_REF_NAME"] if os.environ["GITHUB_REF_TYPE"] == "tag" else ""
          if tag and tag != "v" + plan["version"]:
              print(f"::error::tag {tag} is not v{plan['version']}: the config releases that")
              sys.exit(1)
          runners = json.loads(os.environ["RUNNERS"])
          again = {"off": [], "rebuild": plan["targets"]}.get(os.environ["VERIFY"])
          if again is None:  # rebuild-one: the target the ref's name hashes to
              digest = hashlib.sha256(os.environ["GITHUB_REF_NAME"].encode()).hexdigest()
              again = [plan["targets"][int(digest, 16) % len(plan["targets"])]]
          targets = [
              {key: target[key] for key in ("artifact", "flavor", "level", "image")}
              | {"builder": builder}
              | {"runner": runners[builder].get(target["flavor"], ["ubuntu-latest"])}
              for builder, chosen in (("a", plan["targets"]), ("b", again))
              for target in chosen
          ]
          with open(os.environ["GITHUB_OUTPUT"], "a") as output:
              output.write("targets=" + json.dumps(targets, separators=(",", ":")) + "\\n")
          for target in targets:
              print(target["artifact"], "by", target["builder"], "on", ", ".join(target["runner"]))
          EOF

  build:
    name: build ${{ matrix.target.artifact }} (${{ matrix.target.builder }})
    needs: plan
    runs-on: ${{ matrix.target.runner }}
    environment: build  # where @CACHE_SECRET@ lives
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
      # The vendored crates (each checked against Cargo.lock before use) and the stored
      # PGO/BOLT profiles (sealed with @CACHE_SECRET@; one without a valid seal is
      # made again), kept apart for each builder. Never the step cache: a release's
      # binaries are all compiled by its own build jobs (docs/trust.md).
      - name: Restore the crates and stored profiles
        id: cache
        uses: @CACHE_RESTORE@
        with:
          path: |
@CACHE_PATHS@          key: @CACHE_KEY@${{ hashFiles(@CACHE_FILES@) }}
          restore-keys: |
            @CACHE_KEY@
      # The toolchain image (the compiler) as a `docker save` archive, keyed by the hash of
      # its pinned inputs (its tag); `images load` uses it only when it is sealed with
      # @CACHE_SECRET@ and is the planned image, else the build makes it.
      # @IMAGE_RULE@
      - name: Restore the toolchain image
        id: image
        if: @IMAGE_IF@
        uses: @CACHE_RESTORE@
        with:
          path: @IMAGE_DIR@
          key: @IMAGE_KEY@
      - name: Load the toolchain image
        if: steps.image.outputs.cache-hit == 'true'
        env:
          ARTIFACT: ${{ matrix.target.artifact }}
          ORCHESTRATOR_CACHE_KEY: ${{ secrets.@CACHE_SECRET@ }}
        run: orchestrator images load @IMAGE_DIR@ --target "$ARTIFACT"
      - name: Check the runner
        run: orchestrator doctor || echo "::warning::orchestrator doctor found a blocker"
      - name: Build ${{ matrix.target.artifact }}
        env:
          ARTIFACT: ${{ matrix.target.artifact }}
          BUILDER: ${{ matrix.target.builder }}
          ORCHESTRATOR_CACHE_KEY: ${{ secrets.@CACHE_SECRET@ }}
        run: |
          if [ -z "$ORCHESTRATOR_CACHE_KEY" ]; then
            echo "::warning::no secret @CACHE_SECRET@: no restored profile is used"
          fi
          orchestrator build --target "$ARTIFACT" --out "$RUNNER_TEMP/targets"
          # a tar keeps the modes that upload-artifact would drop
          tar -cf "$RUNNER_TEMP/$ARTIFACT-$BUILDER.tar" -C "$RUNNER_TEMP/targets" "$ARTIFACT"
      - uses: @UPLOAD@
        with:
          name: target-${{ matrix.target.artifact }}-${{ matrix.target.builder }}
          path: ${{ runner.temp }}/${{ matrix.target.artifact }}-${{ matrix.target.builder }}.tar
          if-no-files-found: error
          retention-days: 7
      - name: Save the toolchain image
        if: (@IMAGE_IF@) && steps.image.outputs.cache-hit != 'true'
        env:
          ARTIFACT: ${{ matrix.target.artifact }}
          ORCHESTRATOR_CACHE_KEY: ${{ secrets.@CACHE_SECRET@ }}
        run: orchestrator images save @IMAGE_DIR@ --target "$ARTIFACT"
      - name: Keep the toolchain image
        if: (@IMAGE_IF@) && steps.image.outputs.cache-hit != 'true'
        uses: @CACHE_SAVE@
        with:
          path: @IMAGE_DIR@
          key: @IMAGE_KEY@
      # Saved from every ref, tags included: a ref's entries are restored by later runs of
      # that ref (a tag's re-run) and, from the default branch, by every ref.
      - name: Save the crates and stored profiles
        if: steps.cache.outputs.cache-hit != 'true'
        uses: @CACHE_SAVE@
        with:
          path: |
@CACHE_PATHS@          key: @CACHE_KEY@${{ hashFiles(@CACHE_FILES@) }}

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
          # one folder per builder's archive: two builders' folders have the same name
          for archive in "$RUNNER_TEMP"/downloads/*.tar; do
            folder="$RUNNER_TEMP/targets/$(basename "$archive" .tar)"
            mkdir -p "$folder"
            tar -xf "$archive" -C "$folder"
          done
          key="$RUNNER_TEMP/signing.key"
          trap 'rm -f "$key"' EXIT
          (umask 077 && printf '%s\\n' "$SECRET_KEY" > "$key")
          export ORCHESTRATOR_SIGNING_KEY="$key"
          if [ -n "$PASSPHRASE" ]; then
            export ORCHESTRATOR_SIGNING_PASSPHRASE="$PASSPHRASE"
          fi
          orchestrator release assemble@AGREE@ "$RUNNER_TEMP"/targets/*/*
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
    runners = {
        builder: {flavor: list(labels) for flavor, labels in sorted(spec.runners[builder].items())}
        for builder in spec.builders
    }
    verify_key = f" --key {spec.public_key}" if spec.public_key else ""
    verify_note = (
        ""
        if spec.verify == "off"
        else "\n# ci.verify = "
        + spec.verify
        + ": a second builder (b) builds "
        + ("every target" if spec.verify == "rebuild" else "one target, chosen from the tag")
        + "\n# again, and assemble signs only folders that agree byte for byte."
    )
    replacements = {
        "@HEADER@": file_header(
            "github", spec, "GitHub Actions: build the release across runners, sign once."
        ),
        "@VERIFY_NOTE@": verify_note,
        "@SECRET@": CI_SECRETS["key"],
        "@PASSPHRASE@": CI_SECRETS["passphrase"],
        "@CACHE_SECRET@": CI_SECRETS["cache"],
        "@INSTALL@": yaml_quote(spec.install_spec),
        "@CONFIG@": yaml_quote(spec.config),
        "@CACHE_KEY@": (
            f"orchestrator-{spec.toolchain}-${{{{ matrix.target.flavor }}}}-"
            "${{ matrix.target.level }}-${{ matrix.target.builder }}-"
        ),
        "@CACHE_PATHS@": "".join(
            f"            ~/.cache/orchestrator/{folder}\n" for folder in CACHED_FOLDERS
        ),
        "@RUNNERS@": "'" + json.dumps(runners, separators=(",", ":")) + "'",
        "@VERIFY@": yaml_quote(spec.verify),
        "@IMAGE_IF@": IMAGE_RESTORE_IF[spec.verify],
        "@IMAGE_RULE@": IMAGE_RULE[spec.verify],
        "@IMAGE_DIR@": IMAGE_DIR,
        "@IMAGE_KEY@": (
            "orchestrator-image-${{ matrix.target.builder }}-${{ matrix.target.image }}"
        ),
        "@AGREE@": AGREE[spec.verify],
        "@CACHE_FILES@": ", ".join(f"'{path}'" for path in spec.cache_files),
        "@VERIFY_KEY@": verify_key,
        "@CHECKOUT@": pinned_action("checkout"),
        "@SETUP_PYTHON@": pinned_action("setup-python"),
        "@CACHE_RESTORE@": pinned_action("cache", "restore"),
        "@CACHE_SAVE@": pinned_action("cache", "save"),
        "@UPLOAD@": pinned_action("upload-artifact"),
        "@DOWNLOAD@": pinned_action("download-artifact"),
    }
    return fill(_GITHUB, replacements)

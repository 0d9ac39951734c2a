"""GitHub Actions' release.yml (`orchestrator ci github`): a `plan` job emits the targets as
a matrix, one `build` job per target builds an unsigned target folder on the runner labels
`ci.runners` names for its flavor (else ubuntu-latest), and `assemble`, the only job that
sees the signing key, signs, verifies and uploads to the GitHub Release."""

from __future__ import annotations

import json

from orchestrator.supply.workflows import (
    CI_SECRETS,
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
        "@HEADER@": file_header(
            "github", spec, "GitHub Actions: build the release across runners, sign once."
        ),
        "@SECRET@": CI_SECRETS["key"],
        "@PASSPHRASE@": CI_SECRETS["passphrase"],
        "@INSTALL@": yaml_quote(spec.install_spec),
        "@CONFIG@": yaml_quote(spec.config),
        "@CACHE_KEY@": (
            f"orchestrator-{spec.toolchain}-${{{{ matrix.target.flavor }}}}-"
            "${{ matrix.target.level }}-"
        ),
        "@RUNNERS@": "'" + json.dumps(runners, separators=(",", ":")) + "'",
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

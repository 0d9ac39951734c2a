"""train.sh of a training bundle: a POSIX script (dash runs it) that needs no Docker, no
orchestrator and no more than a bare PATH's uname, sha256sum, grep, tar and coreutils.

It refuses another architecture, checks every file against the sha256 of manifest.json
(written into the script, which the manifest hashes in turn), runs each workload with
LLVM_PROFILE_FILE in raw/w<index>/, names a workload that fails or leaves no profile, and
writes profiles.tar (raw/w<index>/*.profraw and machine.txt) through a rename.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from orchestrator.errors import ConfigError
from orchestrator.model.training_bundle import BundleFile, BundleWorkload

# /build/src and /build/inputs in an argument become the bundle's src/ and inputs/.
_CONTAINER_ROOT = re.compile(r"/build/(src|inputs)(?=/|$)")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
PROFILES_TAR = "profiles.tar"
MACHINE_TXT = "machine.txt"


def quote(text: str) -> str:
    """One shell word, whatever `text` holds."""
    return "'" + text.replace("'", "'\\''") + "'"


def bundle_word(argument: str) -> str:
    """An argument as a shell word, its /build/src and /build/inputs pointing into the bundle."""
    pieces: list[str] = []
    last = 0
    for found in _CONTAINER_ROOT.finditer(argument):
        if found.start() > last:
            pieces.append(quote(argument[last : found.start()]))
        pieces.append(f'"$root"/{found.group(1)}')
        last = found.end()
    if last < len(argument) or not pieces:
        pieces.append(quote(argument[last:]))
    return "".join(pieces)


def render_train_sh(
    *,
    arch: str,
    title: str,
    files: Sequence[BundleFile],
    workloads: Sequence[BundleWorkload],
    workdir: str,
    stdin: str,
    environment: Mapping[str, str],
) -> str:
    """The script's text; `title` says which build it trains, for whoever reads it."""
    for name in environment:
        if not _ENV_NAME.fullmatch(name):
            raise ConfigError(f"[train] env name {name!r} is no shell variable name")
    sums = "\n".join(f"{file.sha256}  {file.path}" for file in files)
    exports = "".join(f"export {name}={quote(value)}\n" for name, value in environment.items())
    feed = f' < "$root"/{stdin}' if stdin else " < /dev/null"
    runs = "".join(
        f"train {w.index} {quote(w.binary)} " + " ".join(bundle_word(arg) for arg in w.args) + "\n"
        for w in workloads
    )
    return f"""#!/bin/sh
# Written by orchestrator (build --train-elsewhere): {title.replace(chr(10), " ")}
# Run it as `sh train.sh` in a copy of this folder on a {arch} Linux machine; it writes
# {PROFILES_TAR} beside itself, for `orchestrator build --profiles {PROFILES_TAR}`.
set -eu
cd "$(dirname "$0")"
root=$(pwd)
machine=$(uname -m)
if [ "$machine" != {quote(arch)} ]; then
  echo "train.sh: this bundle is for {arch} machines; this one is $machine" >&2
  exit 3
fi
if ! sha256sum -c --quiet --strict <<'SUMS'
{sums}
SUMS
then
  echo "train.sh: the files above differ from manifest.json; refusing to train" >&2
  exit 4
fi
work="$root/.train.$$"
rm -rf "$work"
mkdir -p "$work/raw"
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
chmod 755 "$root"/bin/*
{exports}
train() {{
  index=$1
  binary=$2
  shift 2
  mkdir "$work/raw/w$index"
  status=0
  (cd "$root"/{quote(workdir)} && LLVM_PROFILE_FILE="$work/raw/w$index/%m_%p.profraw" \\
    exec "$root/$binary" "$@"{feed}) > /dev/null || status=$?
  if [ "$status" -ne 0 ]; then
    echo "train.sh: workload $index ($binary $*) exited with $status" >&2
    exit 5
  fi
  for found in "$work/raw/w$index"/*.profraw; do
    [ -f "$found" ] && return 0
  done
  echo "train.sh: workload $index ($binary $*) wrote no .profraw file" >&2
  exit 5
}}
{runs}
{{
  echo "arch: $machine"
  bundle=$(sha256sum manifest.json)
  echo "bundle: ${{bundle%% *}}"
  cpu=$(grep -m1 -E '^(model name|Hardware|CPU part)' /proc/cpuinfo || true)
  echo "cpu: ${{cpu#*: }}"
  if command -v nvidia-smi > /dev/null 2>&1; then
    gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true)
    echo "gpu: $(echo "$gpu" | head -n1)"
  fi
}} > "$work/raw/{MACHINE_TXT}"
(cd "$work/raw" && tar -cf "$work/{PROFILES_TAR}" {MACHINE_TXT} w*)
mv "$work/{PROFILES_TAR}" "$root/{PROFILES_TAR}"
echo "train.sh: wrote $root/{PROFILES_TAR}"
"""

"""train.sh of a training bundle: a POSIX script (dash runs it) that needs no Docker, no
orchestrator and no more than a bare PATH's uname, sha256sum, grep, tar and coreutils.

It refuses another architecture, checks every file against the sha256 of manifest.json
(written into the script, which the manifest hashes in turn), runs each workload with
LLVM_PROFILE_FILE in raw/w<index>/, names a workload that fails or leaves no profile, and
writes profiles.tar (raw/w<index>/*.profraw and machine.txt) through a rename. A GPU
flavor's bundle also runs its validation runs with the CPU reference arguments and with
the GPU arguments where the machine has a GPU, into gpu/ (execute/optimize/train_gpu.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from orchestrator.errors import ConfigError
from orchestrator.model.documents.training_bundle import BundleFile, BundleGpuCheck, BundleWorkload

# /build/src and /build/inputs in an argument become the bundle's src/ and inputs/.
_CONTAINER_ROOT = re.compile(r"/build/(src|inputs)(?=/|$)")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
PROFILES_TAR = "profiles.tar"
MACHINE_TXT = "machine.txt"
GPU_DIR = "gpu"
GPU_SUMS = "SHA256SUMS"
NO_GPU = "not exercised: no GPU on this machine"
# How train.sh decides the machine has a GPU of the bundle's vendor.
_GPU_PROBE = {
    "nvidia": "command -v nvidia-smi > /dev/null 2>&1 && "
    "nvidia-smi -L 2> /dev/null | grep -q '^GPU '",
    "amd": "[ -e /dev/kfd ]",
}
_AMD_FACT = 'echo "gpu: an AMD GPU (/dev/kfd), driver not queried"'


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
    gpu_vendor: str = "",
    gpu_checks: Sequence[BundleGpuCheck] = (),
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
    gpu = _gpu_section(workdir, gpu_vendor, gpu_checks)
    amd_fact = f"  [ -e /dev/kfd ] && {_AMD_FACT}\n" if gpu_checks and gpu_vendor == "amd" else ""
    gpu_fact = '  echo "gpu_check: $gpu_check"\n' if gpu_checks else ""
    gpu_member = f" {GPU_DIR}" if gpu_checks else ""
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
{gpu}
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
{amd_fact}{gpu_fact}}} > "$work/raw/{MACHINE_TXT}"
(cd "$work/raw" && tar -cf "$work/{PROFILES_TAR}" {MACHINE_TXT} w*{gpu_member})
mv "$work/{PROFILES_TAR}" "$root/{PROFILES_TAR}"
echo "train.sh: wrote $root/{PROFILES_TAR}"
"""


def _gpu_section(workdir: str, vendor: str, checks: Sequence[BundleGpuCheck]) -> str:
    """The GPU validation: each check's CPU reference run and GPU run, stdout, stderr and
    exit status into gpu/[cg]<index>.{out,err,exit}, with their sha256 in gpu/SHA256SUMS.
    A failing run is recorded, not fatal: `build --profiles` judges it. Their profiles go
    to a folder of their own, never into the training profiles."""
    if not checks:
        return ""
    runs = "".join(
        f"  check {side} {c.index} {quote(c.binary)} "
        + " ".join(bundle_word(arg) for arg in args)
        + "\n"
        for c in checks
        for side, args in (("c", c.cpu_args), ("g", c.gpu_args))
    )
    return f"""mkdir "$work/raw/{GPU_DIR}" "$work/gpuprof"
check() {{
  side=$1
  index=$2
  binary=$3
  shift 3
  status=0
  (cd "$root"/{quote(workdir)} && LLVM_PROFILE_FILE="$work/gpuprof/%m_%p.profraw" \\
    exec "$root/$binary" "$@" < /dev/null) > "$work/raw/{GPU_DIR}/$side$index.out" \\
    2> "$work/raw/{GPU_DIR}/$side$index.err" || status=$?
  echo "$status" > "$work/raw/{GPU_DIR}/$side$index.exit"
  echo "train.sh: gpu check $side$index ($binary $*) exited with $status" >&2
}}
if {_GPU_PROBE[vendor]}; then
  gpu_check=ran
{runs}  (cd "$work/raw/{GPU_DIR}" && sha256sum -- *.out *.err *.exit > {GPU_SUMS})
else
  gpu_check={quote(NO_GPU)}
  echo "train.sh: {NO_GPU}; the GPU path is not checked" >&2
fi
"""

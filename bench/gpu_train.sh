#!/bin/sh
# For a person on a GPU machine, with a training bundle of a GPU flavor (`orchestrator build
# --flavor cuda --train-elsewhere DIR`, copied there). Two steps, with a build between:
#
#   sh bench/gpu_train.sh train BUNDLE
#       runs the bundle's train.sh (the training workloads, and the GPU validation where
#       nvidia-smi lists a GPU) and shows machine.txt; bring BUNDLE/profiles.tar back to
#       the build host for `orchestrator build --flavor cuda --profiles profiles.tar`.
#   sh bench/gpu_train.sh time [-n RUNS] [-C DIR] CPU_TRAINED GPU_TRAINED -- ARGS...
#       times `BINARY ARGS...` (ARGS should put it on the GPU, e.g. --backend cuda) for the
#       binary of the build trained in place (on the CPU) and the one built with
#       --profiles (trained on the GPU), RUNS times each (default 11), interleaved so that
#       drift hits both alike, from DIR (default: the current folder).
#
# `time` prints each binary's median wall time with a 95% confidence interval of the median
# and the ratio GPU-trained / CPU-trained: the median of the per-pair ratios, with its 95%
# interval (order statistics: no distribution assumed; below 6 runs the interval is the
# whole range). An interval that holds 1.000 shows no difference. The time is the whole
# process's (start-up, CUDA context, kernels and the host code around them), stdout and
# stderr thrown away, in microseconds from `date +%s%N`. Needs POSIX sh, GNU date, awk.
set -eu
usage() {
  echo "usage: sh bench/gpu_train.sh train BUNDLE" >&2
  echo "       sh bench/gpu_train.sh time [-n RUNS] [-C DIR] CPU_TRAINED GPU_TRAINED -- ARGS..." >&2
  exit 2
}

train() {
  [ $# -eq 1 ] || usage
  [ -f "$1/train.sh" ] || {
    echo "gpu_train.sh: $1 has no train.sh: not a training bundle" >&2
    exit 2
  }
  bundle=$(cd "$1" && pwd)
  echo "== sh train.sh in $bundle"
  sh "$bundle/train.sh"
  echo "== machine.txt"
  tar -xOf "$bundle/profiles.tar" machine.txt
  echo "bring back $bundle/profiles.tar: orchestrator build --flavor F --profiles profiles.tar"
}

run_one() {
  # one timed run, in microseconds, of "$@" from $dir
  start=$(date +%s%N)
  if ! (cd "$dir" && exec "$@") > /dev/null 2>&1; then
    echo "gpu_train.sh: $* failed (from $dir)" >&2
    exit 1
  fi
  end=$(date +%s%N)
  echo $(((end - start) / 1000))
}

summary() {
  # $1: one value per line; prints the median and its 95% interval, the ranks
  # n/2 -+ 1.96 sqrt(n)/2 rounded, within [1, n]
  sort -g "$1" | awk -v label="$2" -v unit="$3" -v scale="$4" '
    { v[NR] = $1 / scale }
    END {
      n = NR
      med = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
      h = 1.96 * sqrt(n) / 2
      lo = int(n / 2 - h + 0.5); hi = int(1 + n / 2 + h + 0.5)
      if (lo < 1) lo = 1
      if (hi > n) hi = n
      printf "%-28s median %10.3f%s  95%% CI [%.3f, %.3f]  (n=%d)\n", \
        label, med, unit, v[lo], v[hi], n
    }'
}

time_both() {
  runs=11
  dir=.
  while [ $# -gt 0 ]; do
    case $1 in
      -n) [ $# -ge 2 ] || usage; runs=$2; shift 2 ;;
      -C) [ $# -ge 2 ] || usage; dir=$2; shift 2 ;;
      *) break ;;
    esac
  done
  case $runs in '' | *[!0-9]* | 0) echo "gpu_train.sh: -n takes a count of runs, >= 1" >&2; exit 2 ;; esac
  if [ $# -lt 3 ] || [ "$3" != -- ]; then usage; fi
  [ -d "$dir" ] || { echo "gpu_train.sh: no folder $dir" >&2; exit 2; }
  for binary in "$1" "$2"; do
    if [ ! -f "$binary" ] || [ ! -x "$binary" ]; then
      echo "gpu_train.sh: $binary is no executable file" >&2
      exit 2
    fi
  done
  cpu_bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
  gpu_bin=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
  shift 3
  if ! { command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi -L 2> /dev/null | grep -q '^GPU '; }; then
    echo "gpu_train.sh: warning: nvidia-smi lists no GPU here: this times no GPU path" >&2
  fi
  times=$(mktemp -d)
  trap 'rm -rf "$times"' EXIT
  echo "== warm-up: one run of each"
  run_one "$cpu_bin" "$@" > /dev/null
  run_one "$gpu_bin" "$@" > /dev/null
  echo "== $runs runs each, interleaved: BINARY $* (from $dir)"
  i=1
  while [ "$i" -le "$runs" ]; do
    c=$(run_one "$cpu_bin" "$@")
    g=$(run_one "$gpu_bin" "$@")
    echo "$c" >> "$times/cpu"
    echo "$g" >> "$times/gpu"
    awk -v c="$c" -v g="$g" 'BEGIN { printf "%.6f\n", (c > 0 ? g / c : 1) }' >> "$times/ratio"
    i=$((i + 1))
  done
  summary "$times/cpu" "cpu-trained" " ms" 1000
  summary "$times/gpu" "gpu-trained" " ms" 1000
  summary "$times/ratio" "ratio gpu-/cpu-trained" "" 1
}

[ $# -ge 1 ] || usage
command=$1
shift
case $command in
  train) train "$@" ;;
  time) time_both "$@" ;;
  *) usage ;;
esac

#!/bin/sh
# On a GPU machine, with a training bundle of a GPU flavor (`build --train-elsewhere DIR`):
# trains with it (`sh train.sh`, which also runs the GPU validation and writes
# profiles.tar), then, given a CPU-trained and a GPU-trained optimized binary, times one
# GPU command of each N times, interleaved so that drift hits both alike, and prints each
# binary's median wall time with a 95% confidence interval of the median (order statistics,
# no distribution assumed) and the ratio of the medians. See docs/pgo-bolt.md.
#
#   sh bench/gpu_train.sh [-n RUNS] BUNDLE [CPU_TRAINED GPU_TRAINED -- ARGS...]
#
# What is timed: the whole process (start-up, CUDA context, kernels and the host code
# around them) from the bundle's src/, stdout and stderr thrown away, in ms (date +%s%N).
set -eu
runs=11
if [ "${1:-}" = -n ]; then
  runs=$2
  shift 2
fi
if [ $# -lt 1 ]; then
  echo "usage: sh bench/gpu_train.sh [-n RUNS] BUNDLE [CPU_TRAINED GPU_TRAINED -- ARGS...]" >&2
  exit 2
fi
bundle=$(cd "$1" && pwd)
shift
echo "== sh train.sh in $bundle"
sh "$bundle/train.sh"
tar -xOf "$bundle/profiles.tar" machine.txt
if [ $# -eq 0 ]; then
  echo "no binaries given: trained only; bring back $bundle/profiles.tar"
  exit 0
fi
if [ $# -lt 3 ] || [ "$3" != -- ]; then
  echo "gpu_train.sh: after BUNDLE, give CPU_TRAINED GPU_TRAINED -- ARGS..." >&2
  exit 2
fi
cpu_bin=$(realpath "$1")
gpu_bin=$(realpath "$2")
shift 3
times=$(mktemp -d)
trap 'rm -rf "$times"' EXIT
run_one() {
  binary=$1
  shift
  start=$(date +%s%N)
  if ! (cd "$bundle/src" && exec "$binary" "$@") > /dev/null 2>&1; then
    echo "gpu_train.sh: $binary $* failed" >&2
    exit 1
  fi
  end=$(date +%s%N)
  echo $(((end - start) / 1000000))
}
echo "== warm-up: one run of each"
run_one "$cpu_bin" "$@" > /dev/null
run_one "$gpu_bin" "$@" > /dev/null
i=1
while [ "$i" -le "$runs" ]; do
  run_one "$cpu_bin" "$@" >> "$times/cpu"
  run_one "$gpu_bin" "$@" >> "$times/gpu"
  i=$((i + 1))
done
summary() {
  # median and the ranks of its 95% interval, n/2 -+ 1.96 sqrt(n)/2 rounded, within [1, n]
  # (below 6 runs that is the whole range); the median also goes to $1.median
  sort -n "$1" | awk -v label="$2" -v keep="$1.median" '
    { v[NR] = $1 }
    END {
      n = NR
      med = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
      h = 1.96 * sqrt(n) / 2
      lo = int(n / 2 - h + 0.5); hi = int(1 + n / 2 + h + 0.5)
      if (lo < 1) lo = 1
      if (hi > n) hi = n
      printf "%-12s median %9.1f ms  95%% CI of the median [%d, %d] ms  (n=%d, min %d, max %d)\n", \
        label, med, v[lo], v[hi], n, v[1], v[n]
      print med > keep
    }'
}
echo "== $runs runs each, interleaved: $* (from $bundle/src)"
summary "$times/cpu" cpu-trained
summary "$times/gpu" gpu-trained
awk -v c="$(cat "$times/cpu.median")" -v g="$(cat "$times/gpu.median")" \
  'BEGIN { if (c > 0) printf "gpu-trained / cpu-trained median: %.3f\n", g / c }'

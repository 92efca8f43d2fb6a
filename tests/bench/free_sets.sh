#!/usr/bin/env bash
# Benchmark (not a test) of the caching allocator's free sets at their
# largest: DeepSeek-V3 (models/deepseek-v3.json) with each routed
# expert's width one more than its own (moe_intermediate_size 2049), so
# that every one of its 31,455 weight tensors, and in PyTorch's own loop
# (zero = 0) every gradient and moment the first step makes, leaves a
# split-off remainder: 10^5 free blocks in one set. Runs one GPU, then
# two with --ranks all (each rank's allocator a clone of its slot's), and
# prints wall time and peak RSS of each (the job does not fit: vsim
# exits 3, which is expected here).
# Usage: tests/bench/free_sets.sh [path/to/vsim]
# Build with -DCMAKE_BUILD_TYPE=Release for figures worth comparing.
set -euo pipefail
cd "$(dirname "$0")/../.."
vsim=${1:-build/vsim}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
sed 's/"moe_intermediate_size": 2048/"moe_intermediate_size": 2049/' \
  models/deepseek-v3.json > "$tmp/deepseek-2049.json"
grep -q '"moe_intermediate_size": 2049' "$tmp/deepseek-2049.json" || {
  echo "free_sets.sh: models/deepseek-v3.json has no moe_intermediate_size 2048" >&2
  exit 1
}
sed "s|../models/deepseek-v3.json|$tmp/deepseek-2049.json|" \
  workloads/deepseek-v3.ini > "$tmp/deepseek-2049.ini"

# run LABEL GPUS ARGS...: one simulation, PyTorch's own loop on GPUS
run() {
  local label=$1 gpus=$2; shift 2
  local rc=0
  /usr/bin/time -f "%e %M" -o "$tmp/time" "$vsim" run "$tmp/deepseek-2049.ini" \
    --gpus "$gpus" --set parallel.zero=0 --set parallel.pp=1 \
    --set parallel.ep=1 --set parallel.dp="$gpus" \
    --set training.global_batch="$gpus" "$@" > /dev/null || rc=$?
  [ "$rc" = 0 ] || [ "$rc" = 3 ] || { echo "free_sets.sh: vsim exited $rc" >&2; exit 1; }
  # (the first line says the exit status when it is not 0)
  tail -n 1 "$tmp/time" |
    awk -v l="$label" '{printf "%s: %.2f s, peak RSS %.0f MB\n", l, $1, $2 / 1024}'
}
run "1 GPU" 1
run "2 GPUs, --ranks all" 2 --ranks all

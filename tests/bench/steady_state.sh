#!/usr/bin/env bash
# Benchmark (not a test) of what plan's bounded screening rests on (issue
# 19: "extend the rest by proof, not estimate"): how a 1F1B step grows with
# its micro-batches once the pipeline is full, measured on whole
# simulations of the MT-NLG 530B search's layouts (tests/bench/
# mtnlg-530b-search.ini, H100 nodes, full recompute, sequence parallel).
#   1. An even split (tp 8, pp 35, 3 layers a stage): the time each further
#      micro-batch adds, in ns, from pp + 1 micro-batches on.
#   2. An uneven split (tp 8, pp 16, 105 layers as 6,6,6,6,7 x 9,6,6,6, as
#      plan splits them): the same, over 3 x pp micro-batches, and the step
#      that plan's extrapolation from pp and 2 x pp gives for 3 x pp.
#   3. The caching allocator (tp 2, dp 84, ZeRO-3, pp 1): peak reserved
#      bytes by micro-batches per step.
# Usage: tests/bench/steady_state.sh [path/to/vsim]
set -euo pipefail
cd "$(dirname "$0")/../.."
vsim=${1:-build/vsim}
search=tests/bench/mtnlg-530b-search.ini
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# run GPUS GLOBAL_BATCH SETS...: a whole simulation, its summary.csv in
# $tmp/out; column NAME: that column of the worst rank's row (the largest
# peak_reserved_bytes)
run() {
  local gpus=$1 gb=$2; shift 2
  rm -rf "$tmp/out"
  "$vsim" run "$search" --gpus "$gpus" --set training.global_batch="$gb" \
    --set training.checkpointing=full "$@" --csv "$tmp/out" > /dev/null
}
column() {
  python3 - "$tmp/out/summary.csv" "$1" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
worst = max(rows, key=lambda r: int(r["peak_reserved_bytes"]))
print(worst[sys.argv[2]])
EOF
}
ns() { python3 -c "print(round(float('$1') * 1e9))"; }

even=(--set parallel.tp=8 --set parallel.pp=35 --set parallel.sequence_parallel=true)
prev=""
line="even split, pp 35: ns each micro-batch adds from m = 36:"
for m in $(seq 36 44); do
  run 280 "$m" "${even[@]}"
  t=$(ns "$(column step_time_s)")
  [ -n "$prev" ] && line="$line $((t - prev))"
  prev=$t
done
echo "$line"

# shellcheck disable=SC2054 # the commas are pp_layers' own
uneven=(--set parallel.tp=8 --set parallel.pp=16 --set parallel.sequence_parallel=true
        --set parallel.pp_layers=6,6,6,6,7,7,7,7,7,7,7,7,7,6,6,6)
declare -A step
line="uneven split, pp 16: ns each micro-batch adds from m = 17:"
prev=""
for m in $(seq 16 48); do
  run 128 "$m" "${uneven[@]}"
  t=$(ns "$(column step_time_s)")
  step[$m]=$t
  [ -n "$prev" ] && line="$line $((t - prev))"
  prev=$t
done
echo "$line"
python3 -c "
a, b, c = ${step[16]}, ${step[32]}, ${step[48]}
x = a + (48 - 16) / 16 * (b - a)
print(f'uneven split, pp 16, 48 micro-batches: {c} ns simulated, {x:.0f} ns '
      f'extrapolated from 16 and 32 ({100 * (x - c) / c:+.4f}%)')"

line="caching allocator, pp 1, ZeRO-3: peak reserved bytes at m ="
for m in 1 2 3 4 6 8 15; do
  run 168 $((168 * m)) --set parallel.tp=2 --set parallel.pp=1 \
    --set parallel.zero=3 --set training.micro_batch=2 \
    --set parallel.sequence_parallel=true
  line="$line $m: $(column peak_reserved_bytes)"
done
echo "$line"

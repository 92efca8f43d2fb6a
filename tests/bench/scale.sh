#!/usr/bin/env bash
# Benchmark (not a test) of issue 19's scale figures, on this machine:
#   1. the MT-NLG 530B search (tests/bench/mtnlg-530b-search.ini, plan on
#      up to 5128 H100s): layouts, wall time, time per layout, peak RSS;
#      with --reference 'CMD' and --reference-layouts N, CMD is timed the
#      same way (e.g. Calculon's search of the same space) and the ratio of
#      the times per layout printed;
#   2. Llama-3 405B with --ranks all on 1024, 4096 and 16,384 GPUs (tp 8,
#      pp 16): wall time, peak RSS, events per second (bench_run);
#   3. a step of 16,384 micro-batches (Llama-2-7B on 8 GPUs): wall, RSS;
#   4. stage mode: Llama-3 405B on 16,384 GPUs (one rank per stage).
# Usage: tests/bench/scale.sh [path/to/vsim] [--jobs N] [--skip-search]
#                             [--reference 'CMD' --reference-layouts N]
# Build with -DCMAKE_BUILD_TYPE=Release for figures worth comparing.
set -euo pipefail
cd "$(dirname "$0")/../.."
vsim=build/vsim jobs=2 ref="" ref_layouts=0 search=1
[ $# -gt 0 ] && [ "${1#--}" = "$1" ] && { vsim=$1; shift; }
while [ $# -gt 0 ]; do
  case $1 in
    --jobs) jobs=$2; shift 2 ;;
    --skip-search) search=0; shift ;;
    --reference) ref=$2; shift 2 ;;
    --reference-layouts) ref_layouts=$2; shift 2 ;;
    *) echo "scale.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
bench=$(dirname "$vsim")/tests/bench/bench_run
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# timed CMD...: runs it, prints "wall_s rss_kb" of the last line of
# /usr/bin/time into $tmp/time, its stdout into $tmp/out
timed() {
  /usr/bin/time -f "%e %M" -o "$tmp/time" "$@" > "$tmp/out"
}
wall() { cut -d' ' -f1 "$tmp/time"; }
rss_mb() { awk '{printf "%.0f", $2 / 1024}' "$tmp/time"; }

if [ "$search" = 1 ]; then
  timed "$vsim" plan tests/bench/mtnlg-530b-search.ini --max-gpus 5128 \
    --jobs "$jobs" --csv "$tmp/plan.csv"
  layouts=$(sed -n '2s/ layouts simulated.*//p' "$tmp/out")
  per=$(python3 -c "print(f'{1e3 * $(wall) / $layouts:.2f}')")
  echo "530B search: vsim plan, $layouts layouts in $(wall) s on $jobs" \
       "thread(s): $per ms a layout, peak RSS $(rss_mb) MB"
  if [ -n "$ref" ] && [ "$ref_layouts" -gt 0 ]; then
    timed sh -c "$ref"
    rper=$(python3 -c "print(f'{1e3 * $(wall) / $ref_layouts:.2f}')")
    echo "530B search: reference, $ref_layouts layouts in $(wall) s:" \
         "$rper ms a layout, peak RSS $(rss_mb) MB; vsim / reference per" \
         "layout: $(python3 -c "print(f'{$per / $rper:.3f}')")"
  fi
fi
# bench_run's own wall time (the best of its repetitions) and events
best() { sed -n 's/.*wall *\([0-9.]*\) s (best of \([0-9]*\)).*/\1 s (best of \2)/p' "$tmp/out"; }
for g in 1024 4096 16384; do
  timed "$bench" workloads/llama3-405b.ini "$g" all
  echo "--ranks all, Llama-3 405B on $g GPUs: $(best), peak RSS" \
       "$(rss_mb) MB, $(sed -n 's/.* events *\([0-9]*\) .*/\1/p' "$tmp/out")" \
       "events at $(sed -n 's/.*) *\([0-9.e+]*\) events\/s.*/\1/p' "$tmp/out") a second"
done
timed "$bench" workloads/llama3-405b.ini 16384 stage
echo "stage mode, Llama-3 405B on 16384 GPUs: $(best), peak RSS $(rss_mb) MB"
timed "$vsim" run workloads/llama2-7b.ini --gpus 8 \
  --set training.global_batch=131072 --set training.micro_batch=1
echo "16,384 micro-batches (Llama-2-7B, 8 GPUs): $(wall) s, peak RSS" \
     "$(rss_mb) MB"

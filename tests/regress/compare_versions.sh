#!/usr/bin/env bash
# Development check (not part of ctest): runs two vsim binaries on every
# workload in workloads/ and tests/data/ and on variants that exercise each
# mechanism (ZeRO stages, checkpointing, pipeline schedules, sequence
# parallelism, eager attention, fp32/fp8, the exact allocator, every rank),
# then compares their CSV exports:
#   - memory columns of summary.csv and timeline.csv must be byte-identical;
#     a timeline whose events are the same per rank but in another order
#     (op times changed, so streams and stages interleave differently) is
#     reported as reordered, not as a difference;
#   - step times are listed side by side (changes must be explained).
# The CSVs of a case whose memory matches are deleted once compared (a full
# run would otherwise leave tens of GB); those of a differing case stay.
# Usage: tests/regress/compare_versions.sh OLD_VSIM NEW_VSIM [OUT_DIR]
# Exit 0 when every memory column matches, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/../.."
old=$1 new=$2 out=${3:-${TMPDIR:-/tmp}/vsim-compare}
rm -rf "$out"; mkdir -p "$out"
cases=()
for w in workloads/*.ini workloads/validation/*.ini tests/data/*.ini; do
  cases+=("$w|")
done
small=tests/data/gpt-small.ini
for v in "training.checkpointing=selective" "training.checkpointing=full" \
         "parallel.zero=0" "parallel.zero=1" "parallel.zero=2" \
         "training.attention=eager" "training.precision=fp32" \
         "runtime.allocator=exact" "training.precision=fp8"; do
  cases+=("$small|--set $v")
done
seven=workloads/llama2-7b.ini
for v in "--gpus 8 --set parallel.tp=2 --set parallel.sequence_parallel=true" \
         "--gpus 8 --set parallel.pp=4 --set parallel.zero=1" \
         "--gpus 8 --set parallel.pp=2 --set parallel.schedule=gpipe --set parallel.zero=1" \
         "--gpus 8 --set parallel.pp=2 --set parallel.schedule=interleaved --set parallel.virtual_stages=2 --set parallel.zero=1" \
         "--gpus 8 --set parallel.tp=2 --set parallel.pp=2 --set parallel.zero=1 --ranks all" \
         "--gpus 8 --set training.checkpointing=full --set parallel.zero=2" \
         "--gpus 16 --set parallel.tp=2 --set parallel.zero=3 --set training.checkpointing=selective --set training.attention=eager"; do
  cases+=("$seven|$v")
done
fail=0; reordered=0; i=0
printf '%-60s %14s %14s %8s\n' case step_old_s step_new_s change
for c in "${cases[@]}"; do
  w=${c%%|*}; args=${c#*|}; i=$((i + 1))
  for which in old new; do
    bin=$old; [ $which = new ] && bin=$new
    # shellcheck disable=SC2086
    "$bin" run "$w" $args --csv "$out/$i.$which" >"$out/$i.$which.txt" 2>&1
    echo $? >"$out/$i.$which.rc"
  done
  if ! cmp -s "$out/$i.old.rc" "$out/$i.new.rc"; then
    echo "DIFFERENT EXIT STATUS: $w $args"; fail=1; continue
  fi
  [ -f "$out/$i.old/summary.csv" ] || { echo "no csv: $w $args ($(head -c 200 "$out/$i.old.txt"))"; continue; }
  # summary: every column except the times (peak_time_s, step_time_s)
  for f in summary; do
    cut -d, -f1-16,18 "$out/$i.old/$f.csv" >"$out/$i.o.$f"
    cut -d, -f1-16,18 "$out/$i.new/$f.csv" >"$out/$i.n.$f"
  done
  # timeline: every column except time_s
  cut -d, -f2- "$out/$i.old/timeline.csv" >"$out/$i.o.timeline"
  cut -d, -f2- "$out/$i.new/timeline.csv" >"$out/$i.n.timeline"
  same=1
  if ! cmp -s "$out/$i.o.summary" "$out/$i.n.summary"; then
    echo "MEMORY DIFFERS in summary.csv: $w $args"; fail=1; same=0
  fi
  if ! cmp -s "$out/$i.o.timeline" "$out/$i.n.timeline"; then
    # A change of op times may reorder events between streams or stages
    # (a receive lands before or after a local op), which changes the
    # running totals of the rows but not what is allocated: then every
    # rank has the same (op, category, delta) events, only in another order.
    cut -d, -f1-4 "$out/$i.o.timeline" | sort >"$out/$i.o.events"
    cut -d, -f1-4 "$out/$i.n.timeline" | sort >"$out/$i.n.events"
    if cmp -s "$out/$i.o.events" "$out/$i.n.events"; then
      echo "timeline.csv reordered (same events per rank, times moved): $w $args"
      reordered=1
    else
      echo "MEMORY DIFFERS in timeline.csv: $w $args"; fail=1; same=0
    fi
  fi
  so=$(awk -F, 'NR>1{if($19>m)m=$19}END{printf "%.6f", m}' "$out/$i.old/summary.csv")
  sn=$(awk -F, 'NR>1{if($19>m)m=$19}END{printf "%.6f", m}' "$out/$i.new/summary.csv")
  ch=$(awk -v a="$so" -v b="$sn" 'BEGIN{if(a>0)printf "%+.2f%%", 100*(b-a)/a}')
  printf '%-60s %14s %14s %8s\n' "$(basename "$w") ${args:0:45}" "$so" "$sn" "$ch"
  # a case whose memory matches keeps only its reports: its CSVs run to
  # gigabytes (every rank of a 16k-GPU job), and a full run to tens of GB
  if [ $same = 1 ]; then
    rm -rf "$out/$i.old" "$out/$i.new" "$out/$i.o.timeline" "$out/$i.n.timeline" \
      "$out/$i.o.events" "$out/$i.n.events"
  fi
done
if [ $fail != 0 ]; then
  echo "memory columns: DIFFERENCES (see above)"
elif [ $reordered != 0 ]; then
  echo "memory columns: summary identical; timelines identical or reordered only (see above)"
else
  echo "memory columns: identical in every case"
fi
exit $fail

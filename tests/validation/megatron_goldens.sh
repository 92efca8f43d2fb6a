#!/usr/bin/env bash
# vsim next to Megatron-LM's functional-test golden values for the GPT-3
# 7B memory/speed cases (shared/reference/frameworks.md 3.4; NVIDIA/
# Megatron-LM tests/functional_tests/test_cases/gpt/gpt3_7b_{tp4_pp1,
# tp1_pp4}_memory_speed: model_config.yaml and golden_values_dev_dgx_h100
# .json). Not a test: prints a Markdown table; nothing in vsim is set from
# these figures. The model: 32 layers, h 4096, 32 heads in 8 query groups,
# FFN 4h GELU, learned positions, untied embeddings, vocab 131072 + EOD
# padded to 128 x tp; seq 8192, bf16, Transformer Engine (flash), the
# distributed optimizer (framework = megatron: fp32 main grads), Adam,
# Megatron's default dropout 0.1, no recompute, no sequence parallelism,
# gradients reduced during backward (--overlap-grad-reduce), each weight
# gradient added into the fp32 main gradient by a kernel of its own
# (--no-gradient-accumulation-fusion), 8 H100s.
# mem-allocated is read after the step, max-allocated is the
# step's peak (later iterations: Adam's states exist); the goldens come
# from one rank, most likely the last (tensorboard's writer), so vsim's
# last rank is shown, and its first.
# A second table puts vsim's step time next to the goldens'
# iteration-time on H100 and A100 (golden_values_dev_dgx_{h100,a100}.json
# at Megatron-LM 6e091e1 and adc69db: the median of the logged steps from
# step 4 on, the first ones being warm-up), as a report. The tests run
# settings vsim does not model and which cost time: --deterministic-mode
# with NVTE_ALLOW_NONDETERMINISTIC_ALGO=0 (deterministic fused-attention
# backward), NCCL_ALGO=Ring, and the parameter-norm and zero-count
# logging of every logged step.
# With --check (ctest's megatron_goldens_test) it exits 1 when the last
# rank's max-allocated is off the golden by more than 3%, issue 14's
# criterion (mem-allocated is reported, not checked: see README).
# Usage: tests/validation/megatron_goldens.sh [--check] [path/to/vsim]
set -euo pipefail
check=0
if [ "${1:-}" = --check ]; then check=1; shift; fi
vsim=${1:-build/vsim}
case $vsim in /*) ;; *) vsim=$PWD/$vsim ;; esac
cd "$(dirname "$0")/../.."
. tests/validation/common.sh  # step_seconds
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

model='[model]
arch = gpt
layers = 32
hidden = 4096
heads = 32
kv_heads = 8
ffn_hidden = 16384
vocab = 131073
vocab_divisible_by = 128
seq_len = 8192
tied_embeddings = false
[training]
framework = megatron
precision = bf16
optimizer = adam
checkpointing = none
attention = flash
grad_accumulation_fusion = false
global_batch = 8
[runtime]
reserve = 0'

status=0
echo "| case | rank | mem-allocated: golden | vsim model states | diff | max-allocated: golden | vsim peak | diff |"
echo "|---|---|---|---|---|---|---|---|"
# name micro parallel-sets golden-allocated golden-max
while read -r name mb sets alloc max; do
  printf '%s\n' "$model" > "$tmp/$name.ini"
  args=()
  IFS=, read -ra kv <<< "$sets"
  for s in "${kv[@]}"; do args+=(--set "$s"); done
  "$vsim" run "$tmp/$name.ini" --gpus 8 --ranks all --set training.micro_batch="$mb" \
    "${args[@]}" --csv "$tmp/$name" > /dev/null
  python3 - "$tmp/$name/summary.csv" "$name" "$alloc" "$max" "$check" <<'PY' || status=1
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
name, alloc, peak = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
for r in (rows[-1], rows[0]):
    ms, pk = int(r["model_states_bytes"]), int(r["peak_allocated_bytes"])
    print(f"| {name} | {r['rank']} | {alloc / 1e9:.3f} GB | {ms / 1e9:.3f} GB | "
          f"{100 * (ms - alloc) / alloc:+.1f}% | {peak / 1e9:.3f} GB | {pk / 1e9:.3f} GB | "
          f"{100 * (pk - peak) / peak:+.1f}% |")
last = int(rows[-1]["peak_allocated_bytes"])
if sys.argv[5] == "1" and abs(last - peak) > 0.03 * peak:
    print(f"MISMATCH {name}: last rank's max-allocated {last} B, golden {peak} B")
    sys.exit(1)
PY
done <<'CASES'
tp4_pp1 2 parallel.tp=4,parallel.zero=1,parallel.overlap_grad_reduce=true 20663519232 57143791616
tp1_pp4 1 parallel.pp=4,parallel.schedule=interleaved,parallel.virtual_stages=8,parallel.zero=1,parallel.overlap_grad_reduce=true 24809000000 60721000000
CASES

echo
echo "| case | GPU | iteration-time: golden | vsim step | error |"
echo "|---|---|---|---|---|"
# name micro parallel-sets topology golden-iteration-time-s
while read -r name mb sets topo golden; do
  args=()
  IFS=, read -ra kv <<< "$sets"
  for s in "${kv[@]}"; do args+=(--set "$s"); done
  t=$("$vsim" run "$tmp/$name.ini" --gpus 8 --topology "topologies/$topo.ini" \
      --set training.micro_batch="$mb" "${args[@]}" | step_seconds)
  python3 -c "t, g = $t, $golden
print(f'| $name | $topo | {g:.3f} s | {t:.3f} s | {100 * (t - g) / g:+.1f}% |')"
done <<'CASES'
tp4_pp1 2 parallel.tp=4,parallel.zero=1,parallel.overlap_grad_reduce=true h100-sxm-8x 1.11493
tp1_pp4 1 parallel.pp=4,parallel.schedule=interleaved,parallel.virtual_stages=8,parallel.zero=1,parallel.overlap_grad_reduce=true h100-sxm-8x 1.15017
tp4_pp1 2 parallel.tp=4,parallel.zero=1,parallel.overlap_grad_reduce=true a100-sxm-80g-8x 2.58685
tp1_pp4 1 parallel.pp=4,parallel.schedule=interleaved,parallel.virtual_stages=8,parallel.zero=1,parallel.overlap_grad_reduce=true a100-sxm-80g-8x 2.94236
CASES
exit $status

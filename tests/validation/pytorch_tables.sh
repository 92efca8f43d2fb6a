#!/usr/bin/env bash
# vsim next to published training runs in eager PyTorch (no torch.compile,
# no Float8; kernels = eager), two tables:
#
# 1. torchtitan's FSDP runs of Llama 3.1 8B without
# torch.compile or Float8: benchmarks/llama3_h100_202412_torchtitan.md
# (pytorch/torchtitan; torch 1963fc8, torchtitan 9dec370, December 2024),
# Table 1 (8 GPUs, local batch 2, global 16) and Table 3 (128 GPUs, local
# batch 2, global 256), row "FSDP": selective (op-level) activation
# checkpointing, seq 8192, bf16 parameters and fp32 reductions, i.e.
# workloads/torchtitan-llama3-8b.ini with its local batch set to 2.
# TPS/GPU is read at iteration 90; Memory is max_reserved, the largest
# over the GPUs. torchtitan 9dec370 stepped AdamW with foreach = not
# --optimizer.fused, a flag off by default (torchtitan/optimizer.py,
# config_manager.py): optimizer_impl = foreach here and in tables 3 and
# 4, where the preset keeps the fused step torchtitan defaults to now.
# Not a test: prints a Markdown table; nothing in vsim is set from these
# figures. The GPUs are Grand Teton's H100s: 96 GB HBM2e at 2.4 TB/s, 500
# W, 400 Gb/s RDMA per GPU; the benchmark says their peak lies "between
# SXM and NVL", so each row runs twice, at the SXM's bf16 peak (989
# TFLOP/s, topologies/h100-sxm-8x.ini) and the NVL's (835, NVIDIA H100
# NVL datasheet), with 2.4 TB/s of HBM, 96 GB, and 50 GB/s of network a
# GPU. torchtitan's numbers run eager PyTorch (kernels = eager, the
# fsdp2 preset's choice).
#
# 2. torchtune's "Optimization flags" table (README.md, added in
# 1814feb17, November 2024): full_finetune_single_device, Llama 3.2 3B
# (28 layers, hidden 3072, 24 heads, 8 KV heads, FFN 8192, vocabulary
# 128256, tied embeddings: its config.json), batch 2 of packed 4096-token
# sequences, bf16 weights without a master copy (AdamW's states
# zeros_like the weights), no activation checkpointing, the standard
# cross entropy, one A100 (80 GB: the 60 GiB peak); row "+ Packed
# Dataset", the last before compile: 7075 tokens/s and 60.0 GiB of
# "Peak Memory Active" (active_bytes.all.peak, vsim's peak allocated).
# vsim runs it as framework = hf: PyTorch's own loop and optimizer with
# gradients set to None after each step, as torchtune's recipe does; its
# rotary embedding is priced as Hugging Face's rotate_half (torchtune's
# own stacks the rotated halves, more kernels).
#
# 3. torchtitan's compiled float8 run of Llama 3.1 70B (the same
# benchmark, Table 4, row "FSDP + TP", shared/reference/frameworks.md
# 4.4): 256 of the same H100s, FSDP 32 x TP 8 with sequence parallelism,
# local batch 16 (global 512) of 8192 tokens, full activation
# checkpointing, torch.compile (kernels = fused) and Float8 linears
# (precision = fp8 under framework = fsdp2: torchao's Float8Linear,
# tensorwise, with its tensor-parallel plan); 829 tokens/s a GPU and
# 71.9 GiB of max_reserved (vsim's peak reserved). torchtitan 9dec370
# used torchao eab345c, before 0.9: its tensorwise linears saved FP8
# copies where vsim models 0.9's 16-bit inputs (moot under full
# checkpointing, which keeps only the layers' inputs).
# Usage: tests/validation/pytorch_tables.sh [path/to/vsim]
set -euo pipefail
vsim=${1:-build/vsim}
case $vsim in /*) ;; *) vsim=$PWD/$vsim ;; esac
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

hardware=(--set topology.gpu.hbm_bandwidth=2.4TB/s
          --set topology.gpu.memory=96GB
          --set topology.network.inter_bandwidth=50GB/s)

# run NAME GPUS GLOBAL PEAK: vsim's step time in seconds and its largest
# peak reserved bytes, space-separated
run() {
  local dir=$tmp/$1-$4
  "$vsim" run workloads/torchtitan-llama3-8b.ini --gpus "$2" \
    --set parallel.dp="$2" --set training.micro_batch=2 \
    --set training.global_batch="$3" --set training.optimizer_impl=foreach \
    --set topology.gpu.peak_tflops_bf16="$4" "${hardware[@]}" \
    --csv "$dir" > "$dir.out"
  python3 - "$dir/summary.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
print(rows[0]["step_time_s"], max(int(r["peak_reserved_bytes"]) for r in rows))
PY
}

echo "| run | GPUs | published TPS/GPU | vsim at 989 / 835 TFLOP/s | error | published GiB | vsim GiB | error |"
echo "|---|---|---|---|---|---|---|---|"
while read -r name gpus global tps gib; do
  read -r t_sxm reserved < <(run "$name" "$gpus" "$global" 989)
  read -r t_nvl _ < <(run "$name" "$gpus" "$global" 835)
  python3 -c "
g, B, tps, gib = $gpus, $global, $tps, $gib
a = B * 8192 / $t_sxm / g
b = B * 8192 / $t_nvl / g
m = $reserved / 2**30
print(f'| $name | {g} | {tps:,} | {a:,.0f} / {b:,.0f} | '
      f'{100*(a-tps)/tps:+.0f}% / {100*(b-tps)/tps:+.0f}% | {gib} | '
      f'{m:.1f} | {100*(m-gib)/gib:+.1f}% |')"
done <<'ROWS'
table-1-fsdp 8 16 5762 82.4
table-3-fsdp 128 256 5605 67.0
ROWS

cat > "$tmp/llama32-3b.ini" <<'INI'
[model]
arch = llama
layers = 28
hidden = 3072
heads = 24
kv_heads = 8
ffn_hidden = 8192
vocab = 128256
seq_len = 4096
tied_embeddings = true
[training]
framework = hf
micro_batch = 2
global_batch = 2
precision = bf16
master_weights = false
optimizer = adamw
checkpointing = none
attention = flash
INI
"$vsim" run "$tmp/llama32-3b.ini" --gpus 1 \
  --topology topologies/a100-sxm-80g-8x.ini --csv "$tmp/tune" > "$tmp/tune.out"
echo
echo "| run | published tokens/s | vsim | error | published GiB | vsim GiB | error |"
echo "|---|---|---|---|---|---|---|"
python3 - "$tmp/tune/summary.csv" <<'PY'
import csv, sys
row = list(csv.DictReader(open(sys.argv[1])))[0]
tps, gib = 7075, 60.0
v = 2 * 4096 / float(row["step_time_s"])
m = int(row["peak_allocated_bytes"]) / 2**30
print(f"| torchtune-3b-packed | {tps:,} | {v:,.0f} | {100*(v-tps)/tps:+.0f}% | "
      f"{gib} | {m:.1f} | {100*(m-gib)/gib:+.1f}% |")
PY

cat > "$tmp/llama31-70b.ini" <<INI
[model]
hf_config = $PWD/models/llama-3.1-70b.json
seq_len = 8192
[training]
framework = fsdp2
micro_batch = 16
global_batch = 512
precision = fp8
kernels = fused
optimizer = adamw
checkpointing = full
optimizer_impl = foreach
[parallel]
tp = 8
dp = 32
sequence_parallel = true
INI
echo
echo "| run | GPUs | published TPS/GPU | vsim at 989 / 835 TFLOP/s | error | published GiB | vsim GiB | error |"
echo "|---|---|---|---|---|---|---|---|"
for peak in 989 835; do
  "$vsim" run "$tmp/llama31-70b.ini" --gpus 256 \
    --set topology.gpu.peak_tflops_bf16="$peak" "${hardware[@]}" \
    --csv "$tmp/titan70-$peak" > "$tmp/titan70-$peak.out"
done
python3 - "$tmp/titan70-989/summary.csv" "$tmp/titan70-835/summary.csv" <<'PY'
import csv, sys
rows = [list(csv.DictReader(open(p))) for p in sys.argv[1:3]]
tps, gib = 829, 71.9
a, b = (512 * 8192 / float(r[0]["step_time_s"]) / 256 for r in rows)
m = max(int(r["peak_reserved_bytes"]) for r in rows[0]) / 2**30
print(f"| table-4-fsdp-tp-float8 | 256 | {tps:,} | {a:,.0f} / {b:,.0f} | "
      f"{100*(a-tps)/tps:+.0f}% / {100*(b-tps)/tps:+.0f}% | {gib} | "
      f"{m:.1f} | {100*(m-gib)/gib:+.1f}% |")
PY

#!/usr/bin/env bash
# Step time and achieved TFLOP/s per GPU of vsim next to published Megatron-LM
# runs on A100-80GB (Selene). Not a test: prints two Markdown tables.
#   Korthikanti et al. 2022 (arXiv 2205.05198), Tables 3 and 5: iteration
#     time with full recompute and with sequence parallelism + selective
#     recompute ("present work").
#   Narayanan et al. 2021 (arXiv 2104.04473), Table 1: achieved TFLOP/s per
#     GPU with their eq. (3), F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h)),
#     which counts the recompute forward pass.
# Usage: tests/validation/megatron_tables.sh [path/to/vsim]
set -euo pipefail
cd "$(dirname "$0")/../.."
vsim=${1:-build/vsim}
topo=topologies/a100-sxm-80g-8x.ini
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

step_seconds() { # vsim output -> step time in seconds
  python3 -c 'import re,sys; m=re.search(r"step time ([0-9.]+) (s|ms)", sys.stdin.read()); print(float(m.group(1))*(1e-3 if m.group(2)=="ms" else 1))'
}

echo "| model | full recompute: published | vsim | error | SP + selective: published | vsim | error |"
echo "|---|---|---|---|---|---|---|"
for row in "22b 1.42 1.10" "175b 18.13 13.75" "530b 49.05 37.83" "1t 94.42 71.49"; do
  set -- $row
  w=workloads/validation/korthikanti-$1.ini
  full=$("$vsim" run "$w" --topology $topo --set training.checkpointing=full \
         --set parallel.sequence_parallel=false | step_seconds)
  sel=$("$vsim" run "$w" --topology $topo | step_seconds)
  python3 -c "f,s,pf,ps='$full','$sel',$2,$3; f,s=float(f),float(s); print(f'| $1 | {pf:.2f} s | {f:.2f} s | {100*(f-pf)/pf:+.0f}% | {ps:.2f} s | {s:.2f} s | {100*(s-ps)/ps:+.0f}% |')"
done

echo
echo "| model | GPUs | batch | vsim step | vsim TFLOP/s | published TFLOP/s | error |"
echo "|---|---|---|---|---|---|---|"
# name heads hidden layers tp pp gpus batch virtual-stages published-TFLOP/s
while read -r name a h l tp pp g b v pub; do
  sched=""
  [ "$v" != 1 ] && sched="--set parallel.schedule=interleaved --set parallel.virtual_stages=$v"
  printf '[model]\narch = gpt\nlayers = %s\nhidden = %s\nheads = %s\nvocab = 51200\nseq_len = 2048\n[training]\nmicro_batch = 1\nglobal_batch = %s\nprecision = fp16\noptimizer = adam\nattention = eager\ncheckpointing = full\n[parallel]\ntp = %s\npp = %s\n' \
    "$l" "$h" "$a" "$b" "$tp" "$pp" > "$tmp/$name.ini"
  t=$("$vsim" run "$tmp/$name.ini" --gpus "$g" --topology $topo $sched | step_seconds)
  python3 -c "
B,s,l,h,V,g,t,pub=$b,2048,$l,$h,51200,$g,$t,$pub
F=96*B*s*l*h*h*(1+s/(6*h)+V/(16*l*h)); x=F/(t*g)/1e12
print(f'| $name | $g | $b | {t:.2f} s | {x:.0f} | {pub} | {100*(x-pub)/pub:+.0f}% |')"
done <<'ROWS'
1.7B 24 2304 24 1 1 32 512 1 137
3.6B 32 3072 30 2 1 64 512 1 138
18.4B 48 6144 40 8 1 256 1024 1 135
39.1B 64 8192 48 8 2 512 1536 1 138
145.6B 96 12288 80 8 8 1536 2304 2 148
529.6B 128 20480 105 8 35 2520 2520 3 163
1T 160 25600 128 8 64 3072 3072 2 163
ROWS

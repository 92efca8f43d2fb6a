#!/usr/bin/env bash
# Benchmark (not a test): vsim plan for Llama-2-70B on up to 1024 H100s.
# Prints the number of layouts simulated and layouts per second (from
# plan's own report) and the wall time of the whole command.
# Usage: tests/bench/plan_llama2_70b.sh [path/to/vsim] [jobs]
set -euo pipefail
cd "$(dirname "$0")/../.."
vsim=${1:-build/vsim}
jobs=${2:-$(nproc)}
start=$(date +%s.%N)
"$vsim" plan workloads/llama2-70b.ini --max-gpus 1024 --jobs "$jobs" \
  --csv "${TMPDIR:-/tmp}/plan-llama2-70b.csv" | sed -n '2p'
end=$(date +%s.%N)
python3 -c "print(f'wall time of vsim plan: {$end - $start:.1f} s')"

#!/usr/bin/env bash
# Mutation check of the time model (development tool, not part of ctest):
# for each mutation below (one constant or operator of sim/cost/cost.c,
# the model's FLOPs, the layout's framework memory, ...), applies it,
# rebuilds, runs ctest and expects a failure ("killed"); a mutant the tests
# do not notice "survives". The file is restored after each mutant (and on
# exit or Ctrl-C); the build is left rebuilt from the restored sources.
# Usage: tests/mutate.sh BUILD_DIR [NAME_FILTER]
#   BUILD_DIR    a configured build directory (e.g. from scripts/test.sh)
#   NAME_FILTER  run only the mutants whose name contains this
# MUTATE_CTEST_ARGS adds ctest arguments, e.g. -E 'calibrate_|groundtruth'
# to skip slow suites that never touch these files (confirm survivors with
# the full suite). Exit 0 when every mutant is killed, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: tests/mutate.sh BUILD_DIR [NAME_FILTER]}
filter=${2:-}
jobs=$(nproc)

# name | file | exact text | replacement (each text occurs once in file)
mutants=(
  "optimizer 12 -> 13 FLOPs|sim/cost/cost.c|#define OPTIMIZER_FLOPS_PER_ELEM 12.0|#define OPTIMIZER_FLOPS_PER_ELEM 13.0"
  "optimizer states read once|sim/cost/cost.c|w.bytes = 2.0 * s->optimizer_bytes|w.bytes = 1.0 * s->optimizer_bytes"
  "peak fp8 reads the bf16 field|sim/cost/cost.c|tflops = topo->peak_tflops_fp8;|tflops = topo->peak_tflops_bf16;"
  "peak fp16 reads the bf16 field|sim/cost/cost.c|tflops = topo->peak_tflops_fp16;|tflops = topo->peak_tflops_bf16;"
  "peak in 1e9 not 1e12|sim/cost/cost.c|return tflops * 1e12;|return tflops * 1e9;"
  "roofline ignores memory_efficiency|sim/cost/cost.c|return bytes / (topo->hbm_bandwidth * topo->memory_efficiency);|return bytes / topo->hbm_bandwidth;"
  "roofline ignores compute_efficiency|sim/cost/cost.c|                  topo->compute_efficiency, seen);|                  1.0, seen);"
  "roofline min instead of max|sim/cost/cost.c|return t_flop > t_mem ? t_flop : t_mem;|return t_flop < t_mem ? t_flop : t_mem;"
  "all-reduce n-1 steps|sim/cost/cost.c|steps *= 2.0;|steps *= 1.0;"
  "link without latency|sim/cost/cost.c|return link.latency + bytes / link.bandwidth;|return bytes / link.bandwidth;"
  "inter-node part on all the data|sim/cost/cost.c|t = vs_cost_collective_seconds(kind, bytes / per_node, span.nodes, nic);|t = vs_cost_collective_seconds(kind, bytes, span.nodes, nic);"
  "MFU counts causal attention in full|sim/cost/cost.c|#define CAUSAL_MODEL_FRACTION 0.5|#define CAUSAL_MODEL_FRACTION 1.0"
  "model FLOPs 2x forward|sim/cost/cost.c|passes += 2.0 * k->bwd_flops[i] / op->bwd_flops;|passes += 1.0 * k->bwd_flops[i] / op->bwd_flops;"
  "MFU without the GPU count|sim/cost/cost.c|return model_flops / (step_s * (double)gpus * peak_flops);|return model_flops / (step_s * peak_flops);"
  "dollars per minute|sim/cost/cost.c|return usd_per_gpu_hour * (double)gpus * seconds / 3600.0;|return usd_per_gpu_hour * (double)gpus * seconds / 60.0;"
  "unpriced rule inverted|sim/cost/cost.c|return usd_per_step > 0 ? usd_per_step|return usd_per_step < 0 ? usd_per_step"
  "per-token scaling inverted|sim/cost/cost.c|return per_step * tokens / tokens_per_step;|return per_step * tokens_per_step / tokens;"
  "flash causal 0.5 -> 1.0|sim/model/layer.c|#define CAUSAL_FLASH_FRACTION 0.5|#define CAUSAL_FLASH_FRACTION 1.0"
  "flash backward 2.5 -> 2.0|sim/model/layer.c|op->bwd_flops = 2.5 * op->fwd_flops;|op->bwd_flops = 2.0 * op->fwd_flops;"
  "no model is causal|sim/model/model.c|d->causal = mc->arch != VS_ARCH_BERT;|d->causal = false;"
  "matmul mkn FLOPs doubled|sim/model/block.c|op->fwd_flops = 2.0 * (double)m * (double)k * (double)n;|op->fwd_flops = 4.0 * (double)m * (double)k * (double)n;"
  "embedding communicator when untied|sim/recipe/recipe.c|r->embedding_sync = wl->parallel.pp > 1 && (wl->model.tied_embeddings|r->embedding_sync = wl->parallel.pp > 1 && (!wl->model.tied_embeddings"
  "no pp communicator|sim/parallel/layout.c|(lay->dp > 1) + (lay->pp > 1) +|(lay->dp > 1) + 0 +"
  "one NCCL buffer whatever the communicators|sim/parallel/layout.c|vs_mul_bytes((uint64_t)lay->n_communicators, topo->nccl_bytes, &comms)|vs_mul_bytes(1, topo->nccl_bytes, &comms)"
  "tied-embedding all-reduce over 1 rank|sim/program/schedule_grads.c|t = vs_cost_collective_seconds(VS_COLL_ALL_REDUCE, bytes, 2, link);|t = vs_cost_collective_seconds(VS_COLL_ALL_REDUCE, bytes, 1, link);"
  "frozen weights keep their weight gradient|sim/recipe/recipe.c|k->bwd_flops[i] = op->bwd_flops - op->wgrad_flops * skipped;|k->bwd_flops[i] = op->bwd_flops;"
  "frozen weights keep their gradients|sim/recipe/recipe.c|          : bytes;|          : bytes; vs_param_tensor trained = *p; trained.trainable = true; p = &trained;"
  "ZeRO-2 leaves gradients whole|sim/recipe/recipe.c|r->grads = state(wl, 2, r->grad_elem_bytes);|r->grads = state(wl, 3, r->grad_elem_bytes);"
  "matmul weight gradient is all of backward|sim/model/block.c|  op->wgrad_flops = op->fwd_flops; /* dW = X^T dY */|  op->wgrad_flops = op->bwd_flops; /* dW = X^T dY */"
  "optimizer steps frozen weights too|sim/cost/cost.c|w.flops = OPTIMIZER_FLOPS_PER_ELEM * s->trainable_elems * s->part;|w.flops = OPTIMIZER_FLOPS_PER_ELEM * s->param_elems * s->part;"
  "[21] ZeRO-1 optimizer steps every weight|sim/cost/cost.c|  double part = st->optimizer_full_bytes > 0|  double part = 1 || st->optimizer_full_bytes > 0"
  "[21] estimate ignores the ranks of a stage|sim/run/simulate.c|  w->rank_events = ops * per_stage;|  w->rank_events = ops;"
  "[21] budget refuses at its own limit|sim/run/simulate.c|w->events <= b->max_events)|w->events < b->max_events)"
  "[21] plan keeps unconfirmed layouts|app/plan.c|  if (ps->cands[idx].status == VS_EVAL_FITS)|  if (true)"
  "[21] report failure not checked|app/cli.c|  if (fflush(out) == 0 && !ferror(out))|  if (fflush(out) == 0 || 1)"
  "[21] loader keeps a stale error|sim/input/config.c|  vs_error_clear(err); /* the reader stops at the first error it records */|  /* (mutant) */"
  "all-to-all one peer too many through the NIC|sim/cost/cost.c|(double)(n - per_node) * vs_cost_link_seconds(nic, chunk)|(double)(n - per_node + 1) * vs_cost_link_seconds(nic, chunk)"
  "send/recv moves 1/n|sim/cost/cost.c|    return vs_cost_link_seconds(link, (double)bytes);|    return vs_cost_link_seconds(link, (double)bytes / (double)n);"
  "1F1B warm-up one longer|sim/program/pipeline.c|(v - 1) * p : p - stage - 1;|(v - 1) * p : p - stage;"
  "shared resource not shared|sim/engine/resource.c|                   ((double)instance_of(st, l)->weight * 1e9);|                   (1.0 * 1e9);"
  "stage mode sees no peers|sim/engine/resource.c|  spec->symmetric = all_ranks ? 1 : stage_symmetric(lay, gpi);|  spec->symmetric = all_ranks || true ? 1 : stage_symmetric(lay, gpi);"
  "extrapolated MFU counts simulated micro-batches|sim/run/explore.c|                                                   wl->grad_accum),|                                                   sim->layout.grad_accum),"
  "op kind key without the layer|sim/program/schedule.c|  op_key key = {.name = name, .layer = layer, .res = (uint8_t)res,|  op_key key = {.name = name, .res = (uint8_t)res,"
  "op kind key without the name|sim/program/schedule.c|  op_key key = {.name = name, .layer = layer, .res = (uint8_t)res,|  op_key key = {.layer = layer, .res = (uint8_t)res,"
)

backup=$(mktemp -d)
current=""
restore() {
  if [ -n "$current" ]; then
    cp "$backup/file" "$current"
    current=""
  fi
}
trap 'restore; rm -rf "$backup"' EXIT
trap 'restore; exit 130' INT TERM

killed=0 survived=0 broken=0 survivors=()
for m in "${mutants[@]}"; do
  IFS='|' read -r name file old new <<<"$m"
  [ -n "$filter" ] && [[ "$name" != *"$filter"* ]] && continue
  cp "$file" "$backup/file"
  current=$file
  if ! python3 - "$file" "$old" "$new" <<'EOF'
import sys
path, old, new = sys.argv[1:4]
text = open(path).read()
if text.count(old) != 1:
    sys.exit(f"{path}: '{old}' occurs {text.count(old)} times, not once")
open(path, "w").write(text.replace(old, new))
EOF
  then
    echo "STALE     $name (the text to mutate is gone: update tests/mutate.sh)"
    broken=$((broken + 1)); restore; continue
  fi
  if ! cmake --build "$build" -j "$jobs" >"$backup/build.log" 2>&1; then
    echo "NO BUILD  $name"
    broken=$((broken + 1)); restore; continue
  fi
  # shellcheck disable=SC2086
  if ctest --test-dir "$build" -j "$jobs" --stop-on-failure ${MUTATE_CTEST_ARGS:-} \
       >"$backup/ctest.log" 2>&1; then
    echo "SURVIVED  $name"
    survived=$((survived + 1)); survivors+=("$name")
  else
    echo "killed    $name ($(sed -n '/tests FAILED/,$p' "$backup/ctest.log" |
                               grep -oE '[a-z_]+_test' | sort -u | tr '\n' ' '))"
    killed=$((killed + 1))
  fi
  restore
done
cmake --build "$build" -j "$jobs" >/dev/null 2>&1
echo "total: $((killed + survived + broken)) mutants, $killed killed, $survived survived, $broken not run"
for s in "${survivors[@]}"; do echo "  survived: $s"; done
[ "$survived" -eq 0 ] && [ "$broken" -eq 0 ]

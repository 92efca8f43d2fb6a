/* layout.c - parallel layout, ZeRO partitioning and framework memory. */
#include "layout.h"

#include "units.h"

#include <string.h>

uint64_t vs_optimizer_state_bytes(int optimizer, bool master, uint64_t rows,
                                  uint64_t cols)
{
  uint64_t n = rows * cols;
  uint64_t bytes = master ? 4 * n : 0;
  switch (optimizer) {
  case VS_OPT_ADAM:
  case VS_OPT_ADAMW:
    return bytes + 8 * n;
  case VS_OPT_MOMENTUM:
  case VS_OPT_LION:
    return bytes + 4 * n;
  case VS_OPT_SGD:
    return bytes;
  case VS_OPT_ADAFACTOR:
    return bytes + (rows > 1 && cols > 1 ? 4 * (rows + cols) : 4 * n);
  case VS_OPT_ADAM8BIT:
    if (n < 4096)
      return bytes + 8 * n;
    return bytes + 2 * n + 2 * 4 * vs_div_ceil(n, 2048);
  default:
    return bytes;
  }
}

static uint64_t block_optimizer_bytes(const vs_block *b, int optimizer,
                                      bool master)
{
  uint64_t sum = 0;
  for (int i = 0; i < b->n_params; i++)
    sum += vs_optimizer_state_bytes(optimizer, master, b->params[i].rows,
                                    b->params[i].cols);
  return sum;
}

/* ZeRO shards a flat buffer evenly over dp ranks, padding the last shard:
 * each rank holds ceil(bytes / dp) (rounded to whole elements). */
static uint64_t shard(uint64_t bytes, uint64_t dp, uint64_t elem)
{
  return vs_div_ceil(vs_div_ceil(bytes, elem), dp) * elem;
}

/* Splits the layers over pp * vstages model chunks: as listed in
 * pp_layers, or evenly with the first chunks taking one more when the
 * division is not exact. */
static void split_layers(const vs_workload *wl, vs_layout *lay)
{
  uint64_t layers = wl->model.layers, n = lay->n_chunks, first = 0;
  for (uint64_t g = 0; g < n; g++) {
    uint64_t count = wl->parallel.pp_layers.n
                         ? wl->parallel.pp_layers.values[g]
                         : layers / n + (g < layers % n);
    lay->chunk_first[g] = (uint32_t)first;
    lay->chunk_layers[g] = (uint32_t)count;
    first += count;
  }
}

static void stage_states(const vs_workload *wl, const vs_model *m,
                         vs_layout *lay, uint64_t s)
{
  const vs_training_conf *t = &wl->training;
  bool master = t->master_weights;
  vs_stage_layout *st = &lay->stages[s];
  uint64_t opt = 0, dp = lay->dp;

  st->has_embed = s == 0;
  st->has_head = s == lay->pp - 1;
  for (uint64_t g = s; g < lay->n_chunks; g += lay->pp)
    st->n_layers += lay->chunk_layers[g];
  st->param_elems = st->n_layers * m->layer.param_elems;
  opt = st->n_layers * block_optimizer_bytes(&m->layer, t->optimizer, master);
  if (st->has_embed) {
    st->param_elems += m->embed.param_elems;
    opt += block_optimizer_bytes(&m->embed, t->optimizer, master);
  }
  if (st->has_head) {
    st->param_elems += m->head.param_elems;
    opt += block_optimizer_bytes(&m->head, t->optimizer, master);
  }
  st->params_full_bytes = st->param_elems * lay->param_elem_bytes;
  st->grads_full_bytes = st->param_elems * lay->grad_elem_bytes;
  st->optimizer_full_bytes = opt;
  /* ZeRO (Rajbhandari et al. 2020): stage 1 partitions optimizer states,
   * stage 2 also gradients, stage 3 also parameters. */
  st->optimizer_bytes = lay->zero >= 1 ? shard(opt, dp, 4) : opt;
  st->grads_bytes = lay->zero >= 2
                        ? shard(st->grads_full_bytes, dp, lay->grad_elem_bytes)
                        : st->grads_full_bytes;
  st->params_bytes = lay->zero >= 3 ? shard(st->params_full_bytes, dp,
                                            lay->param_elem_bytes)
                                    : st->params_full_bytes;
}

int vs_layout_build(const vs_workload *wl, const vs_topology *topo,
                    const vs_model *m, vs_layout *lay, vs_error *err)
{
  const vs_training_conf *t = &wl->training;
  const vs_stage_layout *worst;

  memset(lay, 0, sizeof *lay);
  if (t->precision == VS_PREC_FP8 && topo->peak_tflops_fp8 <= 0)
    return vs_error_set(err, VS_EINPUT,
                        "%s: precision = fp8 needs a GPU with FP8 tensor cores, "
                        "but %s ([gpu] peak_tflops_fp8 in %s) has none",
                        wl->origins.file, topo->name, topo->origins.file);
  lay->tp = wl->parallel.tp;
  lay->pp = wl->parallel.pp;
  lay->dp = wl->parallel.dp;
  lay->vstages = wl->parallel.virtual_stages;
  lay->n_chunks = lay->pp * lay->vstages;
  if (lay->pp > VS_MAX_STAGES || lay->n_chunks > VS_MAX_CHUNKS)
    return vs_error_set(err, VS_EINPUT,
                        "%s: %llu pipeline stages x %llu virtual stages: vsim "
                        "simulates at most %d stages and %d chunks",
                        wl->origins.file, (unsigned long long)lay->pp,
                        (unsigned long long)lay->vstages, VS_MAX_STAGES,
                        VS_MAX_CHUNKS);
  lay->gpus = wl->gpus;
  lay->nodes = vs_div_ceil(lay->gpus, topo->gpus_per_node);
  lay->zero = wl->parallel.zero;
  lay->grad_accum = wl->grad_accum;
  lay->tp_stride = 1;
  if (wl->parallel.order == VS_ORDER_TP_PP_DP) {
    lay->pp_stride = lay->tp;
    lay->dp_stride = lay->tp * lay->pp;
  } else {
    lay->dp_stride = lay->tp;
    lay->pp_stride = lay->tp * lay->dp;
  }
  lay->param_elem_bytes = m->param_elem_bytes;
  lay->grad_elem_bytes =
      t->grad_dtype == VS_GRAD_FP32 ? 4 : m->param_elem_bytes;

  split_layers(wl, lay);
  worst = &lay->stages[0];
  for (uint64_t s = 0; s < lay->pp; s++) {
    stage_states(wl, m, lay, s);
    if (vs_layout_stage_model_states(lay, s) >
        vs_layout_stage_model_states(lay, (uint64_t)(worst - lay->stages)))
      worst = &lay->stages[s];
  }
  lay->param_elems = worst->param_elems;
  lay->params_full_bytes = worst->params_full_bytes;
  lay->grads_full_bytes = worst->grads_full_bytes;
  lay->optimizer_full_bytes = worst->optimizer_full_bytes;
  lay->params_bytes = worst->params_bytes;
  lay->grads_bytes = worst->grads_bytes;
  lay->optimizer_bytes = worst->optimizer_bytes;

  /* NCCL communicators: tp, dp, pp groups, and the embedding group that
   * keeps tied input and output embeddings in sync across the pipeline. */
  lay->n_communicators = (lay->tp > 1) + (lay->dp > 1) + (lay->pp > 1) +
                         (lay->pp > 1 && wl->model.tied_embeddings);
  lay->framework_bytes = topo->context_bytes + topo->cublas_workspace_bytes +
                         (uint64_t)lay->n_communicators * topo->nccl_bytes;
  return 0;
}

uint64_t vs_layout_stage_model_states(const vs_layout *lay, uint64_t s)
{
  const vs_stage_layout *st = &lay->stages[s];
  return st->params_bytes + st->grads_bytes + st->optimizer_bytes;
}

uint64_t vs_layout_model_states(const vs_layout *lay)
{
  return lay->params_bytes + lay->grads_bytes + lay->optimizer_bytes;
}

vs_link vs_layout_stage_link(const vs_topology *topo, const vs_layout *lay,
                             uint64_t s, uint64_t t)
{
  uint64_t a = s * lay->pp_stride / topo->gpus_per_node;
  uint64_t b = t * lay->pp_stride / topo->gpus_per_node;
  return vs_collective_link(topo, a == b ? 1 : topo->gpus_per_node + 1);
}

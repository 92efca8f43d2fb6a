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

int vs_layout_build(const vs_workload *wl, const vs_topology *topo,
                    const vs_model *m, vs_layout *lay, vs_error *err)
{
  const vs_training_conf *t = &wl->training;
  bool master = t->master_weights;
  uint64_t opt;

  memset(lay, 0, sizeof *lay);
  if (t->precision == VS_PREC_FP8 && topo->peak_tflops_fp8 <= 0)
    return vs_error_set(err, VS_EINPUT,
                        "%s: precision = fp8 needs a GPU with FP8 tensor cores, "
                        "but %s ([gpu] peak_tflops_fp8 in %s) has none",
                        wl->origins.file, topo->name, topo->origins.file);
  lay->tp = wl->parallel.tp;
  lay->pp = wl->parallel.pp;
  lay->dp = wl->parallel.dp;
  lay->gpus = wl->gpus;
  lay->nodes = vs_div_ceil(lay->gpus, topo->gpus_per_node);
  lay->zero = wl->parallel.zero;
  lay->grad_accum = wl->grad_accum;
  lay->tp_link = vs_collective_link(topo, lay->tp);
  lay->dp_link = vs_collective_link(topo, lay->tp * lay->dp);

  lay->param_elems = m->embed.param_elems + m->layers * m->layer.param_elems +
                     m->head.param_elems;
  lay->param_elem_bytes = m->param_elem_bytes;
  lay->grad_elem_bytes =
      t->grad_dtype == VS_GRAD_FP32 ? 4 : m->param_elem_bytes;
  lay->params_full_bytes = lay->param_elems * lay->param_elem_bytes;
  lay->grads_full_bytes = lay->param_elems * lay->grad_elem_bytes;
  opt = block_optimizer_bytes(&m->embed, t->optimizer, master) +
        m->layers * block_optimizer_bytes(&m->layer, t->optimizer, master) +
        block_optimizer_bytes(&m->head, t->optimizer, master);
  lay->optimizer_full_bytes = opt;

  /* ZeRO (Rajbhandari et al. 2020): stage 1 partitions optimizer states,
   * stage 2 also gradients, stage 3 also parameters. */
  lay->optimizer_bytes = lay->zero >= 1 ? shard(opt, lay->dp, 4) : opt;
  lay->grads_bytes = lay->zero >= 2
                         ? shard(lay->grads_full_bytes, lay->dp,
                                 lay->grad_elem_bytes)
                         : lay->grads_full_bytes;
  lay->params_bytes = lay->zero >= 3
                          ? shard(lay->params_full_bytes, lay->dp,
                                  lay->param_elem_bytes)
                          : lay->params_full_bytes;

  lay->n_communicators = (lay->tp > 1) + (lay->dp > 1) + (lay->pp > 1);
  lay->framework_bytes = topo->context_bytes + topo->cublas_workspace_bytes +
                         (uint64_t)lay->n_communicators * topo->nccl_bytes;
  return 0;
}

uint64_t vs_layout_model_states(const vs_layout *lay)
{
  return lay->params_bytes + lay->grads_bytes + lay->optimizer_bytes;
}

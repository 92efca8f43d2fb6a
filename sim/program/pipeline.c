/* pipeline.c - pipeline orders (see pipeline.h). */
#include "pipeline.h"

#include "workload.h"

size_t vs_pipeline_units(const vs_pipeline *pl)
{
  return (size_t)(2 * pl->microbatches * pl->vstages);
}

uint64_t vs_pipeline_warmup(const vs_pipeline *pl, uint64_t stage)
{
  uint64_t p = pl->stages, v = pl->vstages, total = pl->microbatches * v;
  uint64_t warm = v > 1 ? (p - stage - 1) * 2 + (v - 1) * p : p - stage - 1;
  if (pl->schedule == VS_SCHED_GPIPE)
    return total;
  return warm < total ? warm : total;
}

size_t vs_pipeline_order(const vs_pipeline *pl, uint64_t stage,
                         vs_unit *order)
{
  uint64_t m = pl->microbatches, p = pl->stages, v = pl->vstages;
  uint64_t total = m * v, warm, n = 0;

  if (pl->schedule == VS_SCHED_GPIPE) {
    for (uint64_t k = 0; k < m; k++)
      order[n++] = (vs_unit){.forward = true, .mb = (uint32_t)k};
    for (uint64_t k = 0; k < m; k++)
      order[n++] = (vs_unit){.forward = false, .mb = (uint32_t)k};
    return n;
  }
  warm = vs_pipeline_warmup(pl, stage);
  for (uint64_t k = 0, f = 0, bw = 0; k < 2 * total; k++) {
    bool fwd = f < warm || (f < total && (k - warm) % 2 == 0);
    uint64_t i = fwd ? f++ : bw++;
    uint64_t in_group = i % (p * v);
    uint64_t chunk = in_group / p;
    order[n].forward = fwd;
    order[n].mb = (uint32_t)(v > 1 ? (i / (p * v)) * p + in_group % p : i);
    order[n].chunk = (uint32_t)(fwd ? chunk : v - 1 - chunk);
    n++;
  }
  return n;
}

size_t vs_pipeline_ring(const vs_pipeline *pl)
{
  uint64_t bound = (pl->vstages + 1) * pl->stages + 1;
  if (pl->schedule == VS_SCHED_GPIPE || bound > pl->microbatches)
    bound = pl->microbatches;
  return (size_t)bound;
}

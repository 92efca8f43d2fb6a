/* cost.c - time and money formulas (see cost.h). Each formula lives here
 * once; callers pass the figures (topology, link, work) and get seconds,
 * FLOPs or dollars back. */
#include "cost.h"

#include "units.h"

#include <math.h>

/* A measured curve ys over ascending points xs at x: linear in log2(x)
 * between points, the end points' values beyond them. */
static double curve_at(const vs_count_list *xs, const vs_real_list *ys,
                       double x)
{
  size_t n = xs->n, i = 1;
  double lo, hi, f;
  if (x <= (double)xs->values[0])
    return ys->values[0];
  while (i < n && x > (double)xs->values[i])
    i++;
  if (i == n)
    return ys->values[n - 1];
  lo = log2((double)xs->values[i - 1]);
  hi = log2((double)xs->values[i]);
  f = (log2(x) - lo) / (hi - lo);
  return ys->values[i - 1] + f * (ys->values[i] - ys->values[i - 1]);
}

/* ------------------------------------------------------------------------
 * Compute
 * ------------------------------------------------------------------------ */

double vs_cost_peak_flops(const vs_topology *topo, int precision,
                          vs_flop_kind kind)
{
  double tflops = topo->peak_tflops_fp32;
  if (kind == VS_FLOPS_MATMUL) {
    switch (vs_precision_gemm(precision)) { /* autocast: its 16-bit GEMMs */
    case VS_PREC_BF16:
      tflops = topo->peak_tflops_bf16;
      break;
    case VS_PREC_FP16:
      tflops = topo->peak_tflops_fp16;
      break;
    case VS_PREC_FP8:
      tflops = topo->peak_tflops_fp8;
      break;
    default:
      break;
    }
  }
  return tflops * 1e12; /* [gpu] peak_tflops_* are in 10^12 FLOP/s */
}

/* The roofline at `efficiency` of the peak. */
static double roofline(const vs_topology *topo, int precision,
                       vs_flop_kind kind, double flops, double bytes,
                       double efficiency, vs_cal_seen *seen)
{
  double t_mem = vs_cost_memory_seconds(topo, bytes, seen);
  double t_flop =
      flops / (vs_cost_peak_flops(topo, precision, kind) * efficiency);
  return t_flop > t_mem ? t_flop : t_mem;
}

double vs_cost_memory_seconds(const vs_topology *topo, double bytes,
                              vs_cal_seen *seen)
{
  if (!(bytes > 0))
    return 0;
  if (topo->hbm_curve)
    return vs_cal_seconds(&topo->cal[VS_CAL_D2D_KERNEL], VS_CAL_D2D_KERNEL,
                          bytes, seen);
  return bytes / (topo->hbm_bandwidth * topo->memory_efficiency);
}

double vs_cost_roofline_seconds(const vs_topology *topo, int precision,
                                vs_flop_kind kind, double flops, double bytes,
                                vs_cal_seen *seen)
{
  return roofline(topo, precision, kind, flops, bytes,
                  topo->compute_efficiency, seen);
}

/* The thread-block tiles cuBLAS picks among for 16-bit GEMMs, largest
 * (most efficient: most reuse per operand byte) first, as NVIDIA's Matrix
 * Multiplication Background User's Guide (DU-09799-001, section 2.3
 * "Typical Tile Dimensions in cuBLAS") lists them, with each tile's rate
 * relative to the largest. The relative rates and [gpu] gemm_k_overhead's
 * default (128) were
 * fitted to a GEMM microbenchmark, XLA's measured H100 (sm_90) matmul
 * table (tensorflow/tensorflow third_party/xla/xla/service/gpu/model/
 * matmul_interpolator_data.h, CUPTI kernel times of 301 shapes, b 1-4,
 * m, n, k 256-4096): with the H100's figures in topologies/ the model's
 * times are within 5.0% rms of the 89 shapes of at least 2 x 2048^3
 * FLOPs, and 21% rms over all 301 (the smallest, which training does not
 * run, are the worst). */
static const struct {
  uint64_t m, n;
  double rate;
} GEMM_TILES[] = {{256, 128, 1.0}, {128, 256, 1.0}, {128, 128, 0.8},
                  {128, 64, 0.7},  {64, 128, 0.7},  {64, 64, 0.5}};

double vs_cost_gemm_share(vs_gemm g, uint64_t sms, double k_overhead)
{
  double best = 0, useful = (double)g.m * (double)g.n * (double)g.batch;
  /* no SM count ([gpu] sms = 0, its default: unknown) or no shape: no
   * waves or tiles to quantize, and no division by zero */
  if (sms == 0 || g.batch == 0 || g.m == 0 || g.n == 0 || g.k == 0)
    return 1.0;
  for (size_t i = 0; i < sizeof GEMM_TILES / sizeof GEMM_TILES[0]; i++) {
    uint64_t tiles = g.batch * vs_div_ceil(g.m, GEMM_TILES[i].m) *
                     vs_div_ceil(g.n, GEMM_TILES[i].n);
    double capacity = (double)(vs_div_ceil(tiles, sms) * sms) *
                      (double)(GEMM_TILES[i].m * GEMM_TILES[i].n);
    double f = GEMM_TILES[i].rate * useful / capacity;
    if (f > best)
      best = f;
  }
  return best * (double)g.k / ((double)g.k + k_overhead);
}

double vs_cost_gemm_fill(const vs_topology *topo, vs_gemm g)
{
  const vs_count_list *ref = &topo->compute_efficiency_shape;
  /* 1 without an SM count or a shape (vs_cost_gemm_share), whatever
   * the reference's share */
  double f = vs_cost_gemm_share(g, topo->sms, topo->gemm_k_overhead);
  if (f >= 1.0)
    return 1.0;
  /* compute_efficiency was measured on ref: the full-wave rate is it over
   * ref's own fill */
  if (ref->n == 3)
    f /= vs_cost_gemm_share((vs_gemm){ref->values[0], ref->values[1],
                                      ref->values[2], 1},
                            topo->sms, topo->gemm_k_overhead);
  /* never above the best rate measured */
  return f < 1.0 ? f : 1.0;
}

double vs_cost_gemm_seconds(const vs_topology *topo, int precision, vs_gemm g,
                            double flops, double bytes, vs_cal_seen *seen)
{
  return roofline(topo, precision, VS_FLOPS_MATMUL, flops, bytes,
                  topo->compute_efficiency * vs_cost_gemm_fill(topo, g), seen);
}

/* FlashAttention's measured TFLOP/s for shape a: the causal or
 * bidirectional tables at a's length, between head dims 64 and 128
 * linearly (the nearer table outside them; the one given when only one
 * is); 0 without a table. */
static double flash_tflops(const vs_topology *topo, vs_flash_shape a)
{
  const vs_real_list *d64 = a.causal ? &topo->flash_tflops_causal_d64
                                     : &topo->flash_tflops_d64;
  const vs_real_list *d128 = a.causal ? &topo->flash_tflops_causal_d128
                                      : &topo->flash_tflops_d128;
  double lo, hi, f;
  if (topo->flash_seq_lens.n == 0 || (d64->n == 0 && d128->n == 0))
    return 0;
  lo = d64->n ? curve_at(&topo->flash_seq_lens, d64, (double)a.seq) : 0;
  hi = d128->n ? curve_at(&topo->flash_seq_lens, d128, (double)a.seq) : 0;
  if (!d64->n)
    return hi;
  if (!d128->n)
    return lo;
  f = ((double)a.head_dim - 64.0) / 64.0;
  f = f < 0 ? 0 : f > 1 ? 1 : f;
  return lo + f * (hi - lo);
}

double vs_cost_flash_seconds(const vs_topology *topo, int precision,
                             vs_flash_shape a, double flops, double bytes,
                             vs_cal_seen *seen)
{
  bool fp32 = vs_precision_gemm(precision) == VS_PREC_FP32;
  double tflops = fp32 ? 0 : flash_tflops(topo, a);
  double peak = vs_cost_peak_flops(topo, precision, VS_FLOPS_MATMUL);
  if (!(tflops > 0) || !(peak > 0))
    return vs_cost_roofline_seconds(topo, precision, VS_FLOPS_MATMUL, flops,
                                    bytes, seen);
  /* the measured rate, whatever the GEMMs' precision (the kernel runs
   * in 16 bits), at most the precision's peak (a table may hold rates up
   * to the larger 16-bit peak: bf16 on a V100 is slower than fp16) */
  return roofline(topo, precision, VS_FLOPS_MATMUL, flops, bytes,
                  tflops * 1e12 < peak ? tflops * 1e12 / peak : 1.0, seen);
}

double vs_cost_launch_seconds(const vs_topology *topo, unsigned kernels)
{
  return (double)kernels * topo->kernel_floor;
}

/* FLOPs per parameter element of an optimizer step. 12 is vsim's figure
 * for an Adam(W) update; counting PyTorch's _single_tensor_adam
 * (torch/optim/adam.py) one operation per elementwise arithmetic op gives
 * 13 (exp_avg.lerp_ 3, exp_avg_sq.mul_().addcmul_() 4, sqrt / bias
 * correction + eps 3, param.addcdiv_ 3), 14 with AdamW's decoupled weight
 * decay (param.mul_ 1). Either way the step is bound by its HBM bytes on
 * any GPU in topologies/ (>= 6 bytes per element against 12-14 FLOPs at
 * the fp32 peak), so the figure moves the FLOPs column, not the time. */
#define OPTIMIZER_FLOPS_PER_ELEM 12.0

vs_cost_work vs_cost_optimizer_step(const vs_cost_states *s)
{
  vs_cost_work w;
  /* the optimizer updates only the trainable share of the parameters */
  double share = s->param_elems > 0 ? s->trainable_elems / s->param_elems
                                    : 0.0;
  w.flops = OPTIMIZER_FLOPS_PER_ELEM * s->trainable_elems * s->part;
  /* the states, the partition's gradients and its trainable weights
   * (states and gradients exist for trainable ones only), each as many
   * times as the implementation passes over them (fused: the states and
   * weights read and written, the gradients read) */
  w.bytes = s->passes.states * s->optimizer_bytes +
            s->passes.grads * s->grad_bytes * s->part +
            s->passes.params * s->param_bytes * share * s->part +
            s->passes.unscaled * s->trainable_elems * s->part +
            s->passes.wrap * s->trainable_elems * s->part +
            s->passes.buffer * s->resident_grad_bytes;
  return w;
}

vs_cost_work vs_cost_optimizer_work(const vs_stage_layout *st,
                                    vs_step_passes passes)
{
  /* and of those, only the partition this GPU steps (step_elems): under
   * ZeRO-1/2 a GPU steps its 1/dp partition, then the updated weights are
   * all-gathered (ZeRO paper, Rajbhandari et al. 2020, 5.1; DeepSpeed
   * stage_1_and_2.py steps single_partition_of_fp32_groups); an optimizer
   * without states (SGD without momentum or master weights) still reads
   * the gradients and writes the weights */
  double part = st->trainable_elems > 0
                    ? (double)st->step_elems / (double)st->trainable_elems
                    : 0.0;
  vs_cost_states s = {(double)st->param_elems, (double)st->trainable_elems,
                      (double)st->optimizer_shard_bytes,
                      (double)st->grads_full_bytes,
                      (double)st->params_full_bytes, part, passes,
                      /* zeroed: the gradients, not DDP's bucket copy */
                      (double)vs_stage_grad_tensor_bytes(st)};
  return vs_cost_optimizer_step(&s);
}

/* ------------------------------------------------------------------------
 * Communication
 * ------------------------------------------------------------------------ */

double vs_cost_link_seconds(vs_link link, double bytes)
{
  if (link.curve)
    return vs_cal_seconds(link.curve, VS_CAL_P2P, bytes, link.seen);
  return link.latency + bytes / link.bandwidth;
}

double vs_cost_collective_seconds(int kind, uint64_t bytes, uint64_t n,
                                  vs_link link)
{
  double steps;
  if (n <= 1 || kind == VS_COLL_NONE)
    return 0.0;
  if (kind == VS_COLL_SEND_RECV)
    return vs_cost_link_seconds(link, (double)bytes);
  steps = (double)(n - 1);
  if (kind == VS_COLL_ALL_REDUCE)
    steps *= 2.0;
  return steps * vs_cost_link_seconds(link, (double)bytes / (double)n);
}

/* The measured bus bandwidth at `bytes` on curve (intra_busbw_sizes).
 * Below the first point a collective is latency-bound: its time stays the
 * first point's (the bandwidth shrinks with the size). */
static double busbw_at(const vs_count_list *sizes, const vs_real_list *curve,
                       double bytes)
{
  if (bytes < (double)sizes->values[0])
    return curve->values[0] * bytes / (double)sizes->values[0];
  return curve_at(sizes, curve, bytes);
}

/* The longest of the measured times (size / busbw, before the factor)
 * at sizes up to bytes: a collective of more bytes never takes less
 * time than one of fewer. The bandwidth interpolated between two points
 * can rise faster than the size where the points' times are flat (the
 * latency-bound 64 KiB to 1 MiB of nccl-tests' H100 curve, about 24 us
 * each), which alone would make a 384 KiB all-gather 20% faster than a
 * 256 KiB one. */
static double measured_floor(const vs_count_list *sizes,
                             const vs_real_list *curve, double bytes)
{
  double floor = 0;
  for (size_t i = 0; i < sizes->n && (double)sizes->values[i] <= bytes; i++)
    floor = fmax(floor, (double)sizes->values[i] / curve->values[i]);
  return floor;
}

/* A collective of n ranks inside one node: from the measured bus
 * bandwidth where the topology has it (all-reduce, all-gather and
 * reduce-scatter; nccl-tests doc/PERFORMANCE.md: busbw = algbw x 2(n-1)/n
 * for all-reduce, x (n-1)/n for the others, a figure that does not depend
 * on n for NCCL's ring, so the ring curve serves every group size; the
 * all-reduce curve, measured over the whole node where NVLS's switch
 * reduction gains with the GPUs it engages, only an all-reduce over every
 * GPU of the node), otherwise as a ring over the link. */
static double intra_seconds(const vs_topology *topo, int kind, uint64_t bytes,
                            uint64_t n, vs_link nvlink)
{
  const vs_real_list *curve = kind == VS_COLL_ALL_REDUCE &&
                                      topo->intra_allreduce_busbw.n &&
                                      n == topo->gpus_per_node
                                  ? &topo->intra_allreduce_busbw
                                  : &topo->intra_busbw;
  double factor = (double)(n - 1) / (double)n;
  bool ring = kind == VS_COLL_ALL_REDUCE || kind == VS_COLL_ALL_GATHER ||
              kind == VS_COLL_REDUCE_SCATTER;
  if (!ring || topo->intra_busbw_sizes.n == 0 || n <= 1 || bytes == 0)
    return vs_cost_collective_seconds(kind, bytes, n, nvlink);
  if (kind == VS_COLL_ALL_REDUCE)
    factor *= 2.0;
  return factor * fmax((double)bytes / busbw_at(&topo->intra_busbw_sizes,
                                                curve, (double)bytes),
                       measured_floor(&topo->intra_busbw_sizes, curve,
                                      (double)bytes));
}

/* All-to-all over n ranks, per_node of them in each node: NCCL runs it as
 * one send and one receive of bytes / n per peer (nccl-tests alltoall.cu:
 * ncclSend/ncclRecv to every rank in a group call), each over the link to
 * that peer: per_node - 1 peers on NVLink, n - per_node through the GPU's
 * NIC (one NIC: an all-to-all cannot spread over the node's others,
 * nccl-tests#267). The group's sends run together, so the two parts
 * overlap and the slower one, the network's, sets the time (nccl-tests
 * #130: the local traffic "should not be the bottleneck; the portion that
 * goes through the network will determine the global time"). */
static double all_to_all_seconds(uint64_t bytes, uint64_t n, uint64_t per_node,
                                 vs_link nvlink, vs_link nic)
{
  double chunk = (double)bytes / (double)n;
  return fmax((double)(per_node - 1) * vs_cost_link_seconds(nvlink, chunk),
              (double)(n - per_node) * vs_cost_link_seconds(nic, chunk));
}

double vs_cost_group_seconds(const vs_topology *topo, int kind, uint64_t bytes,
                             uint64_t n, vs_group_span span, vs_cal_seen *seen)
{
  vs_link nvlink = vs_collective_link(topo, 1);
  vs_link nic = vs_collective_link(topo, topo->gpus_per_node + 1);
  uint64_t per_node = span.per_node < n ? span.per_node : n;
  double t;

  nvlink.seen = nic.seen = seen;
  if (n <= 1 || kind == VS_COLL_NONE)
    return 0.0;
  if (span.nodes <= 1)
    return intra_seconds(topo, kind, bytes, n, nvlink);
  if (kind == VS_COLL_SEND_RECV) /* the peer is in another node */
    return vs_cost_link_seconds(nic, (double)bytes);
  if (kind == VS_COLL_ALL_TO_ALL)
    return all_to_all_seconds(bytes, n, per_node, nvlink, nic);
  /* inter-node part on 1/per_node of the data, all NICs in parallel */
  t = vs_cost_collective_seconds(kind, bytes / per_node, span.nodes, nic);
  if (kind == VS_COLL_ALL_REDUCE)
    t += intra_seconds(topo, VS_COLL_REDUCE_SCATTER, bytes, per_node,
                       nvlink) +
         intra_seconds(topo, VS_COLL_ALL_GATHER, bytes, per_node, nvlink);
  else
    t += intra_seconds(topo, kind, bytes, per_node, nvlink);
  /* Where a GPU's NIC is no faster than NVLink, in bandwidth and latency
   * (every topology in topologies/), the group is never faster than the
   * same group inside one node: the alpha-beta ring through the NICs
   * carries none of the NCCL kernel time the measured curve inside a node
   * holds (a 256 KiB all-gather of 2 GPUs, one a node: 7.8 us against
   * 12.1 us on NVLink; NCCL's own model, tuning.cc, puts a network ring
   * step at 14 us against NVLink's 3.4). */
  if (nic.bandwidth <= nvlink.bandwidth && nic.latency >= nvlink.latency)
    t = fmax(t, intra_seconds(topo, kind, bytes, n, nvlink));
  return t;
}

/* ------------------------------------------------------------------------
 * Utilisation and money
 * ------------------------------------------------------------------------ */

/* Share of an eager attention core's s^2 products that model FLOPs count
 * for a causal model (Megatron-LM num_floating_point_operations: "/ 2 #
 * causal mask (only half of the mask is non-zero)"). */
#define CAUSAL_MODEL_FRACTION 0.5

/* Model FLOPs of a block's matmuls on one rank for one micro-batch:
 * forward, then twice that backward (input and weight gradients, or both
 * operands' for attention) in the share the recipe k runs (a frozen
 * weight's matmul skips its weight gradient, a block before every
 * trainable weight its backward). An eager attention core's (attn_core
 * matmuls, which compute all s^2 products) are halved when the model is
 * causal. A flash attention op (flash.seq > 0, attn_core too) already
 * counts the causal half. The routed experts' count a rank's average load, not
 * the skewed rank's the model was built for. */
static double block_model_flops(const vs_model *m, const vs_block *b,
                                const vs_kind_plan *k)
{
  double sum = 0;
  for (uint32_t i = 0; i < b->n_ops; i++) {
    const vs_op_spec *op = &b->ops[i];
    double passes = 1.0;
    if (!op->matmul)
      continue;
    if (!k->no_backward && op->bwd_flops > 0)
      passes += 2.0 * k->bwd_flops[i] / op->bwd_flops;
    sum += passes * op->fwd_flops *
           (m->causal && op->attn_core && op->flash.seq == 0
                ? CAUSAL_MODEL_FRACTION
                : 1.0) /
           (op->routed ? m->routed_load : 1.0);
  }
  return sum;
}

double vs_cost_model_flops(const vs_model *m, const vs_recipe *r, uint64_t tp,
                           uint64_t dp, uint64_t microbatches)
{
  double per_microbatch = 0;
  for (uint32_t k = 0; k < m->n_kinds; k++) {
    uint64_t count = 0;
    for (uint64_t i = 0; i < m->layers + 2; i++)
      count += m->inst_kind[i] == k;
    if (count > 0)
      per_microbatch += (double)count * block_model_flops(m, &m->kinds[k],
                                                          &r->kinds[k]);
  }
  /* tp ranks make a replica, dp replicas and `microbatches` micro-batches
   * make the step */
  return per_microbatch * (double)tp * (double)dp * (double)microbatches;
}

double vs_cost_mfu(double model_flops, double step_s, uint64_t gpus,
                   double peak_flops)
{
  if (!(step_s > 0) || gpus == 0 || !(peak_flops > 0))
    return 0;
  return model_flops / (step_s * (double)gpus * peak_flops);
}

/* 3600 seconds an hour. */
double vs_cost_gpu_hours(uint64_t gpus, double seconds)
{
  return (double)gpus * seconds / 3600.0;
}

double vs_cost_usd(double usd_per_gpu_hour, uint64_t gpus, double seconds)
{
  return usd_per_gpu_hour * (double)gpus * seconds / 3600.0;
}

double vs_cost_step_charge(double usd_per_step, uint64_t gpus, double step_s)
{
  return usd_per_step > 0 ? usd_per_step : vs_cost_gpu_hours(gpus, step_s);
}

double vs_cost_per_tokens(double per_step, double tokens_per_step,
                          double tokens)
{
  return per_step * tokens / tokens_per_step;
}

/* cost.h - every time and money formula of vsim, one function each: the
 * roofline of an op, the alpha-beta time of a transfer or a collective on a
 * link, a collective over a placed group, the optimizer step's work, peak
 * FLOP/s by precision, model FLOPs and MFU, dollars and GPU-hours.
 *
 * Pure functions of their arguments (calibrated-curve sizes aside, which go
 * to the `seen` record a caller passes): no state, safe from any thread.
 * Which link or group an operation uses is decided below this layer
 * (parallel: vs_collective_link, vs_layout_stage_link); how long it takes
 * is decided here, and nowhere else. */
#ifndef VS_COST_H
#define VS_COST_H

#include "collective.h"
#include "layout.h"
#include "model.h"
#include "topology.h"

#include <stdbool.h>
#include <stdint.h>

/* What an op's time is spent on: the report's split of compute time
 * (the first four) and each op's in op_bounds.csv (all six). */
typedef enum vs_bound {
  VS_BOUND_MATH,    /* arithmetic at the op's rate (GEMMs by shape, flash
                       attention at its measured rate, the roofline's
                       compute side) */
  VS_BOUND_MEMORY,  /* HBM bytes at the achieved bandwidth */
  VS_BOUND_LAUNCH,  /* kernel floors: launch and tail */
  VS_BOUND_COMM,    /* on the wire: collectives and pipeline sends (in a
                       compute op: the collectives its recompute re-runs) */
  VS_BOUND_TRANSFER, /* copies between the GPU and host memory or NVMe */
  VS_BOUND_CPU,     /* the host CPU's work (the offloaded optimizer step) */
  VS_BOUND_N
} vs_bound;

/* A compute op's priced time splits among the first four bounds (an
 * array of a split has this many); copies and the CPU bound whole ops. */
#define VS_BOUND_SPLIT_N (VS_BOUND_COMM + 1)

/* FLOPs and HBM bytes of one op. */
typedef struct vs_cost_work {
  double flops;       /* arithmetic operations */
  double bytes;       /* HBM bytes read and written */
} vs_cost_work;

/* ------------------------------------------------------------------------
 * Compute
 * ------------------------------------------------------------------------ */

/* What an op's FLOPs are: a matmul's (tensor cores) or other work's. */
typedef enum { VS_FLOPS_OTHER, VS_FLOPS_MATMUL } vs_flop_kind;

/* Peak FLOP/s of one GPU (the topology's [gpu] peak_tflops_* x 1e12): the
 * tensor-core peak at `precision` for a matmul (bf16, fp16, fp8; fp32
 * matmuls use the fp32 peak), the fp32 peak for anything else. 0 when the
 * GPU lacks that precision (peak_tflops_fp8 = 0). */
double vs_cost_peak_flops(const vs_topology *topo, int precision,
                          vs_flop_kind kind);

/* The memory side of the roofline: `bytes` of HBM traffic at
 * hbm_bandwidth x memory_efficiency, or the calibrated d2d_kernel curve's
 * time where the topology has it (its size goes to seen). 0 for none. */
double vs_cost_memory_seconds(const vs_topology *topo, double bytes,
                              vs_cal_seen *seen);

/* Roofline time of an op: max(flops / (peak * compute_efficiency), bytes /
 * (HBM bandwidth * memory_efficiency)), peak from vs_cost_peak_flops. With
 * a calibrated HBM curve (hbm_curve) the memory time is the d2d_kernel
 * fit's, launch latency included, for an op moving `bytes` (read + write);
 * its size goes to seen (may be NULL). */
double vs_cost_roofline_seconds(const vs_topology *topo, int precision,
                                vs_flop_kind kind, double flops, double bytes,
                                vs_cal_seen *seen);

/* The share of a GPU's full-wave GEMM rate a GEMM of shape g keeps on
 * `sms` SMs: k / (k + k_overhead) (each tile's fixed work, loading its
 * first operands and writing its output, in units of the inner
 * dimension) times, for the best of cuBLAS's tiles, its rate times the
 * useful share of the waves it runs (b ceil(m/Tm) ceil(n/Tn) tiles in
 * waves of `sms`, a partial wave costing a whole one: wave and tile
 * quantization, NVIDIA's Matrix Multiplication Background guide, section
 * 3). In (0, 1]. 1 where sms is 0 (the topology's "unknown": no wave
 * quantization) or g has a zero dimension (no shape): no shape effect. */
double vs_cost_gemm_share(vs_gemm g, uint64_t sms, double k_overhead);

/* What a GEMM of shape g achieves relative to compute_efficiency: its
 * share of the GPU's full-wave rate (wave and tile quantization over [gpu]
 * sms, each tile's fixed cost over the inner dimension: vs_cost_gemm_share)
 * over the share of
 * the GEMM that measured compute_efficiency (compute_efficiency_shape),
 * so that shape gets compute_efficiency itself; at most 1 (never above
 * the best rate measured). 1 when the topology has
 * no SM count or g no shape (batch 0): vs_cost_gemm_share's 1. */
double vs_cost_gemm_fill(const vs_topology *topo, vs_gemm g);

/* Roofline time of a GEMM of shape g doing flops and bytes: the compute
 * side at compute_efficiency x vs_cost_gemm_fill of the matmul peak. */
double vs_cost_gemm_seconds(const vs_topology *topo, int precision, vs_gemm g,
                            double flops, double bytes, vs_cal_seen *seen);

/* Roofline time of a FlashAttention op of shape a doing flops and bytes
 * (forward or backward): the compute side at FlashAttention-2's measured
 * forward + backward rate for a's length, head dimension and mask (the
 * topology's [gpu] flash_* tables; FLOPs counted as its benchmark counts
 * them, which the model's flash ops do), or at compute_efficiency where
 * the topology has no table. FlashAttention has only 16-bit kernels: fp32
 * attention (precision fp32) runs SDPA's memory-efficient backend, which
 * no table measures, at compute_efficiency of the fp32 peak. */
double vs_cost_flash_seconds(const vs_topology *topo, int precision,
                             vs_flash_shape a, double flops, double bytes,
                             vs_cal_seen *seen);

/* What `kernels` CUDA kernels cost beyond their work: [gpu]
 * kernel_floor each (launch and tail). */
double vs_cost_launch_seconds(const vs_topology *topo, unsigned kernels);

/* Work of one optimizer step of a stage (st) on one GPU, over the
 * partition of trainable parameters it steps (step_elems of them: all
 * without ZeRO, 1/dp under ZeRO-1/2/3), with or without optimizer states:
 * 12 FLOPs per element; bytes read and written: its
 * optimizer states, its gradients and its trainable weights, each as many
 * times as `passes` says (fused: twice, once, twice). A stage with no
 * parameters does no work. */
vs_cost_work vs_cost_optimizer_work(const vs_stage_layout *st,
                                    vs_step_passes passes);

/* What an optimizer step over some parameters touches. */
typedef struct vs_cost_states {
  double param_elems;      /* parameters */
  double trainable_elems;  /* of which trainable */
  double optimizer_bytes;  /* the optimizer states stepped */
  double grad_bytes;       /* the trainable parameters' gradients */
  double param_bytes;      /* the parameters' bytes */
  double part;             /* the share of them this GPU steps (1/dp under
                              ZeRO, else 1) */
  vs_step_passes passes;   /* how the step's implementation moves them
                              (vs_recipe step_passes) */
  double resident_grad_bytes; /* the gradients this GPU keeps between
                              steps (ZeRO-2/3: its partition), which the
                              step's zeroing passes write */
} vs_cost_states;

/* The optimizer step's work over s (vs_cost_optimizer_work is it over a
 * stage; an optimizer stepping in backward runs it per block). */
vs_cost_work vs_cost_optimizer_step(const vs_cost_states *s);

/* ------------------------------------------------------------------------
 * Communication
 * ------------------------------------------------------------------------ */

/* Seconds to move `bytes` once over link: latency + bytes / bandwidth, or
 * the calibrated curve's piece for that size (its size goes to link.seen). */
double vs_cost_link_seconds(vs_link link, double bytes);

/* Seconds for one collective over n ranks on a buffer of `bytes` (the full,
 * gathered size): ring all-reduce moves 2(n-1)/n of it over 2(n-1) steps,
 * all-gather and reduce-scatter (n-1)/n over n-1 steps (Thakur et al. 2005;
 * NCCL's bus-bandwidth convention), each step moving bytes / n over the
 * link; all-to-all sends bytes / n to each of the n-1 others (pairwise
 * exchange, the same (n-1)/n); send/recv moves all of `bytes` once. 0 when
 * n <= 1 or kind is VS_COLL_NONE. */
double vs_cost_collective_seconds(int kind, uint64_t bytes, uint64_t n,
                                  vs_link link);

/* Seconds of a collective over a group of n ranks placed as `span` says
 * (vs_layout group_span): a flat ring on NVLink when the group is inside
 * one node; otherwise hierarchical, as NCCL does across nodes: within
 * each node over NVLink, across the span's nodes over every GPU's NIC in
 * parallel on 1/k of the data (k = span.per_node, the fewest members in
 * one node: that node's NICs carry the largest share), never faster than
 * the same group inside one node where the NIC is no faster than NVLink.
 * Across nodes an all-to-all sends bytes / n to each peer over the link
 * to it (k - 1 on NVLink, n - k through the NIC) and a send/recv goes
 * through the NIC. Calibrated curve sizes go to seen (may be NULL). */
double vs_cost_group_seconds(const vs_topology *topo, int kind, uint64_t bytes,
                             uint64_t n, vs_group_span span, vs_cal_seen *seen);

/* ------------------------------------------------------------------------
 * Utilisation and money
 * ------------------------------------------------------------------------ */

/* Model FLOPs of `microbatches` micro-batches on a tp x dp replica set:
 * 3 x the forward matmul FLOPs of one micro-batch through the whole model
 * on one tp rank (forward + backward = 3 x forward, Narayanan et al. 2021,
 * eq. 3, without recompute), x tp x dp x microbatches. What a fine-tune
 * does not need is not counted (the recipe r says what runs backward, the
 * model which weights train): a frozen weight's matmul has no weight
 * gradient (2 x forward), a block before every trainable weight no
 * backward (1 x), so MFU stays the share of the peak doing the method's
 * work. The attention core
 * of a causal model (m->causal) counts half its s^2 products, as Megatron-LM
 * counts it (megatron/training/training.py num_floating_point_operations:
 * "/ 2 # causal mask (only half of the mask is non-zero)"), whether its
 * kernel skips them (flash, whose op FLOPs are already halved) or computes
 * and masks them (eager): the model's FLOPs do not depend on the kernel.
 * (PaLM and torchtitan count the full s^2; their MFU is higher by that
 * term for the same step.) */
double vs_cost_model_flops(const vs_model *m, const vs_recipe *r, uint64_t tp,
                           uint64_t dp, uint64_t microbatches);

/* Model FLOPs utilisation: model_flops / (step_s * gpus * peak_flops)
 * (Chowdhery et al. 2022, PaLM, Appendix B). 0 when the step, the GPU
 * count or the peak is not positive. */
double vs_cost_mfu(double model_flops, double step_s, uint64_t gpus,
                   double peak_flops);

/* GPU-hours of `gpus` GPUs for `seconds`. */
double vs_cost_gpu_hours(uint64_t gpus, double seconds);

/* Dollars of `gpus` GPUs for `seconds` at usd_per_gpu_hour (0: unpriced). */
double vs_cost_usd(double usd_per_gpu_hour, uint64_t gpus, double seconds);

/* What a plan ranks layouts by: a step's dollars when it is priced
 * (usd_per_step > 0), else its GPU-hours (the same order for one GPU type). */
double vs_cost_step_charge(double usd_per_step, uint64_t gpus, double step_s);

/* A per-step amount (dollars, hours) scaled to `tokens` tokens:
 * per_step * tokens / tokens_per_step. */
double vs_cost_per_tokens(double per_step, double tokens_per_step,
                          double tokens);

#endif

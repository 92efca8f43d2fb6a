/* cost_test.c - sim/cost's formulas with values worked out by hand: the
 * roofline (both efficiencies), peak FLOP/s by precision (the H100's from
 * topologies/h100-sxm-8x.ini: bf16 = fp16 = 989, fp8 1979, fp32 67
 * TFLOP/s), the optimizer step's work, link and ring-collective times,
 * model FLOPs of a causal and a bidirectional model, MFU, dollars.
 *
 * The model is a 4-layer GPT, hidden 256, 4 heads (head dim 64), seq 128,
 * vocab 1000 (not padded: vocab_divisible_by 1), micro-batch 1, bf16. Its
 * forward matmul FLOPs for one micro-batch (2mkn per [m x k] @ [k x n]):
 *   layer: qkv 2*128*256*768 + out 2*128*256*256 + mlp 2 x 2*128*256*1024
 *          = 24*s*h^2 = 201326592, plus attention 4*s^2*h = 16777216 of
 *          which a causal model counts half: 8388608 -> 209715200
 *   head:  lm_head 2*128*256*1000 = 65536000; the embedding has none
 *   total: 4 * 209715200 + 65536000 = 904396800 (causal)
 *          4 * (201326592 + 16777216) + 65536000 = 937951232 (bert-like,
 *          no causal mask; bert's own head adds its MLM dense layer). */
#include "testutil.h"

#include "cost.h"
#include "simulate.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char gpt_small[] =
    "[model]\narch = gpt\nlayers = 4\nhidden = 256\nheads = 4\n"
    "vocab = 1000\nseq_len = 128\n";

#define GPT_SMALL_FWD_FLOPS 904396800.0

static void model_of(const char *ini, const char *const *sets, size_t n_sets,
                     vs_model *m)
{
  vs_workload wl;
  vs_error err;
  vs_error_clear(&err);
  if (tu_load_workload(&wl, ini, sets, n_sets, 0, &err) ||
      vs_model_build(&wl, m, &err))
    fail_msg("model: %s", err.msg);
}

/* vs_cost_model_flops of ini's model and recipe on tp x dp x mb. */
static double model_flops(const char *ini, const char *const *sets,
                          size_t n_sets, uint64_t tp, uint64_t dp, uint64_t mb)
{
  vs_workload wl;
  vs_model m;
  vs_recipe r;
  vs_error err;
  double flops;
  vs_error_clear(&err);
  if (tu_load_workload(&wl, ini, sets, n_sets, 0, &err) ||
      vs_model_build(&wl, &m, &err) || vs_recipe_build(&wl, &m, &r, &err))
    fail_msg("model: %s", err.msg);
  flops = vs_cost_model_flops(&m, &r, tp, dp, mb);
  vs_recipe_fini(&r);
  vs_model_fini(&m);
  return flops;
}

/* ------------------------------------------------------------------------
 * Compute
 * ------------------------------------------------------------------------ */

static vs_topology roofline_topology(void)
{
  vs_topology t;
  memset(&t, 0, sizeof t);
  t.peak_tflops_bf16 = 100;
  t.peak_tflops_fp16 = 50;
  t.peak_tflops_fp32 = 10;
  t.peak_tflops_fp8 = 200;
  t.compute_efficiency = 0.5;
  t.hbm_bandwidth = 1e12;   /* 1 TB/s */
  t.memory_efficiency = 0.5;
  return t;
}

static void test_roofline(void **state)
{
  vs_topology t = roofline_topology();
  (void)state;
  /* compute-bound bf16 matmul: 1e12 / (100e12 * 0.5) = 0.02 s beats
   * 1e9 B / (1e12 B/s * 0.5) = 0.002 s */
  tu_assert_close(vs_cost_roofline_seconds(&t, VS_PREC_BF16, VS_FLOPS_MATMUL,
                                           1e12, 1e9, NULL),
                  0.02, 1e-15);
  /* the tensor-core peak follows the precision: fp16 0.04, fp8 0.01 */
  tu_assert_close(vs_cost_roofline_seconds(&t, VS_PREC_FP16, VS_FLOPS_MATMUL,
                                           1e12, 1e9, NULL),
                  0.04, 1e-15);
  tu_assert_close(vs_cost_roofline_seconds(&t, VS_PREC_FP8, VS_FLOPS_MATMUL,
                                           1e12, 1e9, NULL),
                  0.01, 1e-15);
  /* fp32 matmuls and non-matmul ops use the fp32 peak: 1e12 / 5e12 = 0.2 */
  tu_assert_close(vs_cost_roofline_seconds(&t, VS_PREC_FP32, VS_FLOPS_MATMUL,
                                           1e12, 1e9, NULL),
                  0.2, 1e-15);
  tu_assert_close(vs_cost_roofline_seconds(&t, VS_PREC_BF16, VS_FLOPS_OTHER,
                                           1e12, 1e9, NULL),
                  0.2, 1e-15);
  /* memory-bound: 1e11 B / (1e12 B/s * 0.5) = 0.2 s beats 1e9 / 5e13 =
   * 2e-5 s; memory_efficiency 1 would make it 0.1 */
  tu_assert_close(vs_cost_roofline_seconds(&t, VS_PREC_BF16, VS_FLOPS_MATMUL,
                                           1e9, 1e11, NULL),
                  0.2, 1e-15);
  t.memory_efficiency = 0.25; /* 1e11 / 0.25e12 = 0.4 s */
  tu_assert_close(vs_cost_roofline_seconds(&t, VS_PREC_BF16, VS_FLOPS_MATMUL,
                                           1e9, 1e11, NULL),
                  0.4, 1e-15);
  /* nothing to do takes no time */
  tu_assert_close(
      vs_cost_roofline_seconds(&t, VS_PREC_BF16, VS_FLOPS_MATMUL, 0, 0, NULL),
      0.0, 0);
}

static void test_peak_flops(void **state)
{
  vs_topology t;
  (void)state;
  tu_default_topology(&t);
  /* [gpu] peak_tflops_* of the H100 SXM (NVIDIA H100 datasheet, dense) */
  tu_assert_close(vs_cost_peak_flops(&t, VS_PREC_BF16, VS_FLOPS_MATMUL), 989e12,
                  1e-15);
  tu_assert_close(vs_cost_peak_flops(&t, VS_PREC_FP16, VS_FLOPS_MATMUL), 989e12,
                  1e-15);
  tu_assert_close(vs_cost_peak_flops(&t, VS_PREC_FP8, VS_FLOPS_MATMUL), 1979e12,
                  1e-15);
  tu_assert_close(vs_cost_peak_flops(&t, VS_PREC_FP32, VS_FLOPS_MATMUL), 67e12,
                  1e-15);
  /* autocast's GEMMs run at the 16-bit rate, its other ops at fp32's */
  tu_assert_close(vs_cost_peak_flops(&t, VS_PREC_AMP_BF16, VS_FLOPS_MATMUL),
                  989e12, 1e-15);
  tu_assert_close(vs_cost_peak_flops(&t, VS_PREC_AMP_FP16, VS_FLOPS_MATMUL),
                  989e12, 1e-15);
  tu_assert_close(vs_cost_peak_flops(&t, VS_PREC_AMP_BF16, VS_FLOPS_OTHER),
                  67e12, 1e-15);
  /* anything but a matmul runs at the fp32 peak, whatever the precision */
  tu_assert_close(vs_cost_peak_flops(&t, VS_PREC_FP8, VS_FLOPS_OTHER), 67e12,
                  1e-15);
  tu_assert_close(vs_cost_peak_flops(&t, VS_PREC_BF16, VS_FLOPS_OTHER), 67e12,
                  1e-15);
  /* fields distinct in the fixture, so a swapped field cannot hide */
  t = roofline_topology();
  tu_assert_close(vs_cost_peak_flops(&t, VS_PREC_FP16, VS_FLOPS_MATMUL), 50e12,
                  1e-15);
  tu_assert_close(vs_cost_peak_flops(&t, VS_PREC_FP8, VS_FLOPS_MATMUL), 200e12,
                  1e-15);
  t.peak_tflops_fp8 = 0; /* a GPU without FP8 tensor cores */
  tu_assert_close(vs_cost_peak_flops(&t, VS_PREC_FP8, VS_FLOPS_MATMUL), 0, 0);
}

/* 1000 bf16 weights with bf16 grads and AdamW states with fp32 master
 * weights (4 + 4 + 4 = 12 bytes each): 12 FLOPs per element; bytes:
 * states 2 x 12000 + grads 2000 + weights 2 x 2000 = 30000. ZeRO-3 shards
 * leave 250 elements: a quarter of each. */
static void test_optimizer_work(void **state)
{
  const vs_step_passes fused = {.params = 2.0, .states = 2.0, .grads = 1.0};
  const vs_step_passes foreach_adamw = {
      .params = 4.0, .states = 7.0, .grads = 2.0};
  /* the precision-aware optimizer unpacking one 16-bit state: 16 B more
   * a stepped element (vs_recipe step_passes) */
  const vs_step_passes unpacking = {
      .params = 2.0, .states = 2.0, .grads = 1.0, .unscaled = 16.0};
  /* a framework's passes around the update: 18 B a stepped element (a
   * 16-bit gradient cast to fp32, unscaled, its norm read) and one pass
   * zeroing the resident gradients */
  const vs_step_passes wrapped = {
      .params = 2.0, .states = 2.0, .grads = 1.0, .wrap = 18.0, .buffer = 1.0};
  vs_stage_layout st;
  vs_cost_work w;
  (void)state;
  memset(&st, 0, sizeof st);
  st.param_elems = st.trainable_elems = st.step_elems = 1000;
  st.params_bytes = st.params_full_bytes = 2000;
  st.grads_bytes = st.grads_full_bytes = 2000;
  st.optimizer_shard_bytes = st.optimizer_full_bytes = 12000;
  w = vs_cost_optimizer_work(&st, fused);
  tu_assert_close(w.flops, 12000.0, 0);
  tu_assert_close(w.bytes, 30000.0, 0);
  /* PyTorch's foreach AdamW passes 7 times over the states, twice over
   * the gradients, 4 times over the weights: 84000 + 4000 + 8000 */
  w = vs_cost_optimizer_work(&st, foreach_adamw);
  tu_assert_close(w.flops, 12000.0, 0);
  tu_assert_close(w.bytes, 96000.0, 0);
  w = vs_cost_optimizer_work(&st, unpacking);
  tu_assert_close(w.bytes, 30000.0 + 16000.0, 0);
  w = vs_cost_optimizer_work(&st, wrapped);
  tu_assert_close(w.bytes, 30000.0 + 18000.0 + 2000.0, 0);
  st.params_bytes = st.grads_bytes = 500;
  st.optimizer_shard_bytes = 3000;
  st.step_elems = 250;
  w = vs_cost_optimizer_work(&st, fused);
  tu_assert_close(w.flops, 3000.0, 0);
  tu_assert_close(w.bytes, 7500.0, 0);
  /* the passes around the update cover the stepped quarter; the zeroing
   * the 500 resident bytes */
  w = vs_cost_optimizer_work(&st, wrapped);
  tu_assert_close(w.bytes, 7500.0 + 18.0 * 250 + 500.0, 0);
  /* ZeRO-1 over 4 GPUs: weights and gradients whole on every GPU, but it
   * steps only the quarter whose states it holds (12 x 250 FLOPs; bytes
   * 2 x 3000 + 500 + 2 x 500), then the weights are all-gathered */
  st.params_bytes = st.grads_bytes = 2000;
  w = vs_cost_optimizer_work(&st, fused);
  tu_assert_close(w.flops, 3000.0, 0);
  tu_assert_close(w.bytes, 7500.0, 0);
  /* 3/4 of the weights frozen, no ZeRO: the step updates the other 250
   * only (their 250 x 2 B grads, 250 x 12 B states), 12 x 250 FLOPs;
   * bytes 2 x 3000 + 500 + 2 x 500 = 7500 */
  st.params_bytes = st.params_full_bytes = 2000;
  st.trainable_elems = 250;
  st.grads_bytes = st.grads_full_bytes = 500;
  st.optimizer_shard_bytes = st.optimizer_full_bytes = 3000;
  w = vs_cost_optimizer_work(&st, fused);
  tu_assert_close(w.flops, 3000.0, 0);
  tu_assert_close(w.bytes, 7500.0, 0);
  /* an optimizer without states (SGD without momentum or master weights)
   * still steps its partition: ZeRO-1 over 4 GPUs, 1000 weights, 250
   * stepped: 12 x 250 FLOPs, bytes 500 of gradients + 2 x 500 of weights
   * (it was 0: the share came from the states' bytes) */
  st.trainable_elems = 1000;
  st.step_elems = 250;
  st.grads_full_bytes = 2000;
  st.optimizer_shard_bytes = st.optimizer_full_bytes = 0;
  w = vs_cost_optimizer_work(&st, fused);
  tu_assert_close(w.flops, 3000.0, 0);
  tu_assert_close(w.bytes, 1500.0, 0);
  /* a stage without parameters does no work (no division by zero) */
  memset(&st, 0, sizeof st);
  w = vs_cost_optimizer_work(&st, fused);
  tu_assert_close(w.flops, 0.0, 0);
  tu_assert_close(w.bytes, 0.0, 0);
}

/* ------------------------------------------------------------------------
 * Communication
 * ------------------------------------------------------------------------ */

static void test_link_and_collectives(void **state)
{
  vs_link link = {.bandwidth = 100e9, .latency = 2e-6};
  (void)state;
  /* 2 us + 1e6 B / 100 GB/s = 12 us */
  tu_assert_close(vs_cost_link_seconds(link, 1e6), 12e-6, 1e-12);
  /* ring all-reduce of 8e6 B over 8: 2 x 7 steps of 1e6 B = 168 us;
   * all-gather and reduce-scatter: 7 steps = 84 us */
  tu_assert_close(vs_cost_collective_seconds(VS_COLL_ALL_REDUCE, 8000000, 8, link),
                  168e-6, 1e-12);
  tu_assert_close(vs_cost_collective_seconds(VS_COLL_ALL_GATHER, 8000000, 8, link),
                  84e-6, 1e-12);
  tu_assert_close(vs_cost_collective_seconds(VS_COLL_REDUCE_SCATTER, 8000000, 8, link),
                  84e-6, 1e-12);
  /* one rank, or no collective, takes no time */
  tu_assert_close(vs_cost_collective_seconds(VS_COLL_ALL_REDUCE, 8000000, 1, link),
                  0, 0);
  tu_assert_close(vs_cost_collective_seconds(VS_COLL_NONE, 8000000, 8, link), 0, 0);
  /* all-to-all: 1e6 B to each of the 7 others, 7 x 12 us; send/recv moves
   * the whole 8e6 B once: 2 us + 80 us */
  tu_assert_close(vs_cost_collective_seconds(VS_COLL_ALL_TO_ALL, 8000000, 8, link),
                  84e-6, 1e-12);
  tu_assert_close(vs_cost_collective_seconds(VS_COLL_SEND_RECV, 8000000, 2, link),
                  82e-6, 1e-12);
}

/* Two nodes of 8 (the default topology: NVLink 450 GB/s, 3 us; NIC 47
 * GB/s, 5 us), 16 consecutive ranks all-reducing 1.6e9 B: reduce-scatter
 * and all-gather in the node (7 steps of 2e8 B each, twice) and an
 * all-reduce of 2e8 B between the 2 nodes (2 steps of 1e8 B). */
static void test_group_seconds(void **state)
{
  vs_topology t;
  double nvlink_step = 3e-6 + 2e8 / 450e9, nic_step = 5e-6 + 1e8 / 47e9;
  (void)state;
  tu_default_topology(&t);
  t.intra_busbw_sizes.n = 0; /* the link model, not the measured curve */
  tu_assert_close(vs_cost_group_seconds(&t, VS_COLL_ALL_REDUCE, 1600000000, 16, (vs_group_span){2, 8}, NULL),
                  14.0 * nvlink_step + 2.0 * nic_step, 1e-12);
  /* 8 ranks in one node: the flat ring, 14 steps of 2e8 B */
  tu_assert_close(vs_cost_group_seconds(&t, VS_COLL_ALL_REDUCE, 1600000000, 8, (vs_group_span){1, 8}, NULL),
                  14.0 * nvlink_step, 1e-12);
  /* all-to-all of 1.6e9 B over the 16: 1e8 B to each peer, 7 in the node
   * over NVLink while 8 in the other go through the NIC, which sets the
   * time; with the NIC as fast as NVLink, the NVLink part (7 peers) would
   * still hide under the NIC's 8 */
  tu_assert_close(vs_cost_group_seconds(&t, VS_COLL_ALL_TO_ALL, 1600000000, 16, (vs_group_span){2, 8}, NULL),
                  8.0 * nic_step, 1e-12);
  /* 4 ranks a node (stride 2), 8 ranks: 3 NVLink peers, 4 through the NIC:
   * 2e8 B each */
  tu_assert_close(vs_cost_group_seconds(&t, VS_COLL_ALL_TO_ALL, 1600000000, 8, (vs_group_span){2, 4}, NULL),
                  4.0 * (5e-6 + 2e8 / 47e9), 1e-12);
  /* with NVLink slower than the NIC (10 GB/s), the node's part sets it */
  t.intra_bandwidth = 10e9;
  tu_assert_close(vs_cost_group_seconds(&t, VS_COLL_ALL_TO_ALL, 1600000000, 16, (vs_group_span){2, 8}, NULL),
                  7.0 * (3e-6 + 1e8 / 10e9), 1e-12);
  t.intra_bandwidth = 450e9;
  /* send/recv between ranks 8 apart (another node): the NIC; 4 apart (the
   * same node): NVLink */
  tu_assert_close(vs_cost_group_seconds(&t, VS_COLL_SEND_RECV, 100000000, 2, (vs_group_span){2, 1}, NULL),
                  nic_step, 1e-12);
  tu_assert_close(vs_cost_group_seconds(&t, VS_COLL_SEND_RECV, 100000000, 2, (vs_group_span){1, 2}, NULL),
                  3e-6 + 1e8 / 450e9, 1e-12);
}

/* Collectives inside a node from the A100's measured bus bandwidth
 * (topologies/a100-sxm-80g-8x.ini: 171.54 GB/s at 64 MiB, 194.07 at 256
 * MiB, 2.45 at 64 KiB, 233.88 from 4 GiB): t = F x bytes / busbw with F
 * = 2(n-1)/n for all-reduce, (n-1)/n for all-gather and reduce-scatter;
 * linear in log2(size) between points. */
static void test_busbw_curve(void **state)
{
  vs_topology t;
  vs_error err;
  double mib = 1048576.0, mid = (171.54e9 + 194.07e9) / 2;
  (void)state;
  vs_error_clear(&err);
  if (vs_topology_load(&t, VSIM_SOURCE_DIR "/topologies/a100-sxm-80g-8x.ini",
                       NULL, 0, &err))
    fail_msg("%s", err.msg);
  tu_assert_close(vs_cost_group_seconds(&t, VS_COLL_ALL_REDUCE, 64 << 20, 8, (vs_group_span){1, 8}, NULL),
                  1.75 * 64 * mib / 171.54e9, 1e-12);
  tu_assert_close(vs_cost_group_seconds(&t, VS_COLL_ALL_GATHER, 64 << 20, 8, (vs_group_span){1, 8}, NULL),
                  0.875 * 64 * mib / 171.54e9, 1e-12);
  /* 128 MiB: halfway in log2 between 64 and 256 MiB; 4 ranks: F = 1.5 */
  tu_assert_close(vs_cost_group_seconds(&t, VS_COLL_ALL_REDUCE, 128 << 20, 4, (vs_group_span){1, 4}, NULL),
                  1.5 * 128 * mib / mid, 1e-12);
  /* below the first point the time stays the first point's */
  tu_assert_close(vs_cost_group_seconds(&t, VS_COLL_REDUCE_SCATTER, 4096, 8, (vs_group_span){1, 8}, NULL),
                  0.875 * 65536.0 / 2.45e9, 1e-12);
  /* beyond the last, its bandwidth */
  tu_assert_close(vs_cost_group_seconds(&t, VS_COLL_ALL_REDUCE, UINT64_C(16) << 30, 8, (vs_group_span){1, 8}, NULL),
                  1.75 * 16384 * mib / 233.88e9, 1e-12);
  /* send/recv and all-to-all keep the link */
  tu_assert_close(vs_cost_group_seconds(&t, VS_COLL_SEND_RECV, 64 << 20, 2, (vs_group_span){1, 2}, NULL),
                  t.intra_latency + 64 * mib / t.intra_bandwidth, 1e-12);
}

/* The shipped topologies with a measured bus-bandwidth curve. */
static const char *const curve_files[] = {"topologies/h100-sxm-8x.ini",
                                          "topologies/a100-sxm-80g-8x.ini"};
#define CURVE_FILES (sizeof curve_files / sizeof curve_files[0])

/* Loads curve_files[f] into t (fails the test when it does not load). */
static void load_curve_file(vs_topology *t, size_t f)
{
  char path[512];
  vs_error err;
  snprintf(path, sizeof path, "%s/%s", VSIM_SOURCE_DIR, curve_files[f]);
  vs_error_clear(&err);
  if (vs_topology_load(t, path, NULL, 0, &err))
    fail_msg("%s", err.msg);
}

/* A collective of more bytes never takes less time: between two points
 * whose times are flat (the H100 curve's 256 KiB and 1 MiB, about 24 us
 * each) the interpolated bandwidth would make 384 KiB 20% faster, so the
 * time stays the 256 KiB point's; over every size from 1 KiB to 8 GiB,
 * on both shipped curves, for rings and NVLS, the time never falls. */
static void test_busbw_time_never_falls(void **state)
{
  static const int kinds[] = {VS_COLL_ALL_GATHER, VS_COLL_ALL_REDUCE};
  vs_topology t;
  (void)state;
  tu_default_topology(&t);
  tu_assert_close(vs_cost_group_seconds(&t, VS_COLL_ALL_GATHER, 393216, 2,
                                        (vs_group_span){1, 2}, NULL),
                  0.5 * 262144 / 10.86e9, 1e-12);
  for (size_t f = 0; f < CURVE_FILES; f++) {
    load_curve_file(&t, f);
    for (size_t k = 0; k < 2; k++) {
      double before = 0;
      for (double x = 1024; x <= 8589934592.0; x *= 1.05) {
        double now = vs_cost_group_seconds(&t, kinds[k], (uint64_t)x, 8,
                                           (vs_group_span){1, 8}, NULL);
        if (!(now >= before))
          fail_msg("%s: %.0f bytes take %g s, less than before (%g)",
                   curve_files[f], x, now, before);
        before = now;
      }
    }
  }
}

/* A group whose GPUs sit one a node is never faster than the same group
 * inside one node, where the NIC is no faster than NVLink (metamorphic
 * hunt: a 256 KiB all-gather of 2 H100s took 7.8 us through the NICs and
 * 12.1 us on NVLink): every ring collective, 2 to 8 GPUs, 1 KiB to 1 GiB,
 * on both shipped curves. */
static void test_cross_node_never_faster(void **state)
{
  static const int kinds[] = {VS_COLL_ALL_GATHER, VS_COLL_REDUCE_SCATTER,
                              VS_COLL_ALL_REDUCE};
  vs_topology t;
  (void)state;
  for (size_t f = 0; f < CURVE_FILES; f++) {
    load_curve_file(&t, f);
    for (size_t k = 0; k < 3; k++)
      for (uint64_t n = 2; n <= 8; n *= 2)
        for (double x = 1024; x <= 1073741824.0; x *= 1.5) {
          double in = vs_cost_group_seconds(&t, kinds[k], (uint64_t)x, n,
                                            (vs_group_span){1, n}, NULL);
          double across = vs_cost_group_seconds(
              &t, kinds[k], (uint64_t)x, n, (vs_group_span){n, 1}, NULL);
          if (!(across >= in && in > 0))
            fail_msg("%s: %llu GPUs, %.0f bytes: %g s across nodes, %g s "
                     "inside one", curve_files[f], (unsigned long long)n, x,
                     across, in);
        }
  }
}

/* NVLS's all-reduce curve serves an all-reduce over the whole node (8
 * H100s: 466.35 GB/s at 1 GiB); fewer GPUs run NCCL's ring (370 GB/s);
 * an intra_bandwidth given with --set replaces the curves. */
static void test_busbw_all_reduce_curve(void **state)
{
  static const char *const nominal[] = {"network.intra_bandwidth=100GB/s"};
  vs_topology t;
  vs_error err;
  double gib = 1073741824.0;
  (void)state;
  tu_default_topology(&t);
  tu_assert_close(vs_cost_group_seconds(&t, VS_COLL_ALL_REDUCE, 1 << 30, 8, (vs_group_span){1, 8}, NULL),
                  1.75 * gib / 466.35e9, 1e-12);
  tu_assert_close(vs_cost_group_seconds(&t, VS_COLL_ALL_REDUCE, 1 << 30, 4, (vs_group_span){1, 4}, NULL),
                  1.5 * gib / 370e9, 1e-12);
  vs_error_clear(&err);
  if (vs_topology_load(&t, NULL, nominal, 1, &err))
    fail_msg("%s", err.msg);
  assert_int_equal(t.intra_busbw_sizes.n, 0);
  tu_assert_close(vs_cost_group_seconds(&t, VS_COLL_ALL_REDUCE, 1 << 30, 8, (vs_group_span){1, 8}, NULL),
                  14.0 * (3e-6 + gib / 8 / 100e9), 1e-12);
}

/* FlashAttention at its measured rate (A100, causal, head dim 128: 155
 * TFLOP/s at 2048 tokens, 173 at 4096; head dim 64: 140 at 2048): at a
 * point, linear in log2 of the length between points, linear in the head
 * dimension between 64 and 128; bidirectional from its own table (187). */
static void test_flash_rates(void **state)
{
  vs_topology t;
  vs_error err;
  double f = 1e12, x = log2(3000.0 / 2048.0);
  (void)state;
  vs_error_clear(&err);
  if (vs_topology_load(&t, VSIM_SOURCE_DIR "/topologies/a100-sxm-80g-8x.ini",
                       NULL, 0, &err))
    fail_msg("%s", err.msg);
  tu_assert_close(vs_cost_flash_seconds(&t, VS_PREC_BF16, (vs_flash_shape){2048, 128, true}, f, 0, NULL),
                  f / 155e12, 1e-12);
  tu_assert_close(vs_cost_flash_seconds(&t, VS_PREC_BF16, (vs_flash_shape){3000, 128, true}, f, 0, NULL),
                  f / ((155 + x * 18) * 1e12), 1e-12);
  tu_assert_close(vs_cost_flash_seconds(&t, VS_PREC_BF16, (vs_flash_shape){2048, 96, true}, f, 0, NULL),
                  f / 147.5e12, 1e-12);
  tu_assert_close(vs_cost_flash_seconds(&t, VS_PREC_BF16, (vs_flash_shape){2048, 128, false}, f, 0, NULL),
                  f / 187e12, 1e-12);
  /* beyond the table: its last length */
  tu_assert_close(vs_cost_flash_seconds(&t, VS_PREC_BF16, (vs_flash_shape){131072, 128, true}, f, 0, NULL),
                  f / 189e12, 1e-12);
  /* FlashAttention has no fp32 kernel: fp32 attention (SDPA's
   * memory-efficient backend) at compute_efficiency of the fp32 peak
   * (0.87 of 19.5), never at the 16-bit tables' rates */
  tu_assert_close(vs_cost_flash_seconds(&t, VS_PREC_FP32,
                                        (vs_flash_shape){2048, 128, true}, f,
                                        0, NULL),
                  f / (19.5e12 * 0.87), 1e-12);
  /* without tables: compute_efficiency (0.87 of 312) */
  t.flash_seq_lens.n = 0;
  tu_assert_close(vs_cost_flash_seconds(&t, VS_PREC_BF16, (vs_flash_shape){2048, 128, true}, f, 0, NULL),
                  f / (312e12 * 0.87), 1e-12);
}

/* Wave and tile quantization over the H100's 132 SMs, against the shape
 * its compute_efficiency was measured at (2048 x 2048 x 13312):
 *   ref: 256x128 tiles 8 x 16 = 128, one wave of 132: 2048^2 / (132 x
 *        256 x 128) = 0.969697; 128x128: 256 tiles, 2 waves, x 0.8 less;
 *        x 13312 / (13312 + 128) -> 0.960464
 *   2048 x 4608 x 12288 (GPT-3 175B's QKV at tp 8): 256x128: 8 x 36 =
 *        288 tiles, 3 waves (396): 9437184 / (396 x 32768) = 0.727273;
 *        128x128: 576 tiles, 5 waves: 0.872727 x 0.8 = 0.698182;
 *        128x64: 1152, 9 waves: 0.969697 x 0.7 = 0.678788; best 0.727273
 *        x 12288 / 12416 = 0.719776 -> fill 0.719776 / 0.960464 */
static void test_gemm_fill(void **state)
{
  vs_topology t;
  double ref = 0.969697 * 13312.0 / 13440.0;
  (void)state;
  tu_default_topology(&t);
  tu_assert_close(vs_cost_gemm_fill(&t, (vs_gemm){2048, 2048, 13312, 1}), 1.0,
                  1e-12);
  tu_assert_close(vs_cost_gemm_fill(&t, (vs_gemm){2048, 4608, 12288, 1}),
                  0.727273 * 12288.0 / 12416.0 / ref, 1e-5);
  /* a batched attention GEMM: 12 heads of 2048 x 2048 over k = 128:
   * 256x128 tiles 12 x 8 x 16 = 1536, 12 waves (1584): 0.969697;
   * x 128 / 256 */
  tu_assert_close(vs_cost_gemm_fill(&t, (vs_gemm){2048, 2048, 128, 12}),
                  0.969697 * 0.5 / ref, 1e-5);
  /* never above the best rate measured: 4096 x 4224 over 16384 fills 4
   * whole waves of 256x128 tiles (16 x 33 = 528 = 4 x 132) and k / (k +
   * 128) = 0.992, above the reference's 0.960 */
  tu_assert_close(vs_cost_gemm_fill(&t, (vs_gemm){4096, 4224, 16384, 1}), 1.0,
                  0);
  /* the two backward GEMMs of C[m x n] = A[m x k] B[k x n]: dA = dC B^T
   * is m x k over n, dB = A^T dC is k x n over m */
  {
    vs_gemm g = {1, 2, 3, 4}, da = vs_gemm_dgrad(g), db = vs_gemm_wgrad(g);
    assert_true(da.m == 1 && da.n == 3 && da.k == 2 && da.batch == 4);
    assert_true(db.m == 3 && db.n == 2 && db.k == 1 && db.batch == 4);
  }
  /* no SM count: no shape effect */
  t.sms = 0;
  tu_assert_close(vs_cost_gemm_fill(&t, (vs_gemm){100, 100, 64, 1}), 1.0, 0);
  /* ... nor in the share itself, which divides the tiles into waves of
   * sms (it divided by zero), nor for a GEMM with no shape (0/0: NaN) */
  tu_assert_close(vs_cost_gemm_share((vs_gemm){100, 100, 64, 1}, 0, 128), 1.0,
                  0);
  tu_assert_close(vs_cost_gemm_share((vs_gemm){0, 100, 64, 1}, 132, 128), 1.0,
                  0);
  tu_assert_close(vs_cost_gemm_share((vs_gemm){100, 100, 0, 1}, 132, 0), 1.0,
                  0);
  tu_assert_close(vs_cost_gemm_share((vs_gemm){100, 100, 64, 0}, 132, 128), 1.0,
                  0);
  /* the time: flops at compute_efficiency x fill of the bf16 peak */
  tu_default_topology(&t);
  tu_assert_close(vs_cost_gemm_seconds(&t, VS_PREC_BF16,
                                       (vs_gemm){2048, 4608, 12288, 1},
                                       2.0 * 2048 * 4608 * 12288, 0, NULL),
                  2.0 * 2048 * 4608 * 12288 /
                      (989e12 * 0.80 * 0.727273 * 12288.0 / 12416.0 / ref),
                  1e-5);
  tu_assert_close(vs_cost_launch_seconds(&t, 3), 9e-6, 1e-12);
}

/* ------------------------------------------------------------------------
 * Model FLOPs, MFU, money
 * ------------------------------------------------------------------------ */

static void test_model_flops_causal(void **state)
{
  static const char *const eager[] = {"training.attention=eager"};
  static const char *const untied[] = {"model.tied_embeddings=false"};
  vs_model m;
  (void)state;
  model_of(gpt_small, NULL, 0, &m);
  assert_true(m.causal);
  vs_model_fini(&m);
  /* 3 x forward (header) */
  tu_assert_close(model_flops(gpt_small, NULL, 0, 1, 1, 1),
                  3.0 * GPT_SMALL_FWD_FLOPS, 0);
  /* x tp x dp x micro-batches */
  tu_assert_close(model_flops(gpt_small, NULL, 0, 2, 3, 4),
                  24.0 * 3.0 * GPT_SMALL_FWD_FLOPS, 1e-15);
  /* eager attention computes all s^2 products, but the model's FLOPs
   * count the causal half all the same */
  tu_assert_close(model_flops(gpt_small, eager, 1, 1, 1, 1),
                  3.0 * GPT_SMALL_FWD_FLOPS, 0);
  /* tying is about parameters, not FLOPs */
  tu_assert_close(model_flops(gpt_small, untied, 1, 1, 1, 1),
                  3.0 * GPT_SMALL_FWD_FLOPS, 0);
}

/* A fine-tune counts the work its method needs. gpt_small's layer does
 * 209715200 forward FLOPs (qkv 50331648, causal flash 8388608, projection
 * 16777216, MLP 2 x 67108864), its head 65536000 (128 x 256 x 1000 x 2).
 * method = frozen with the last layer trained: 3 frozen layers run no
 * backward (1 x), the last layer 3 x, the head 2 x (its weight is the
 * frozen embedding's: no weight gradient). */
static void test_model_flops_fine_tunes(void **state)
{
  static const char *const frozen[] = {"finetune.method=frozen",
                                       "finetune.trainable_layers=1"};
  const double layer = 209715200.0, head = 65536000.0;
  static const char *const lora[] = {"finetune.method=lora"};
  const double linear = 50331648.0 + 16777216.0 + 2 * 67108864.0;
  const double flash = 8388608.0, adapters = 2 * 2.0 * 128 * (256 * 8 + 8 * 256);
  (void)state;
  assert_true(4 * layer + head == GPT_SMALL_FWD_FLOPS);
  tu_assert_close(model_flops(gpt_small, frozen, 2, 1, 1, 1),
                  3 * layer + 3 * layer + 2 * head, 1e-15);
  /* LoRA on q and v: the frozen linears and the head 2 x (no weight
   * gradient), the attention core and the rank-8 adapters 3 x */
  tu_assert_close(model_flops(gpt_small, lora, 1, 1, 1, 1),
                  4 * (2 * linear + 3 * flash + 3 * adapters) + 2 * head,
                  1e-15);
}

/* A bidirectional model counts all of s^2: the gpt shape as bert adds the
 * full attention (4 x 8388608 more) and bert's MLM dense layer 2*s*h*h =
 * 16777216 in the head. */
static void test_model_flops_bidirectional(void **state)
{
  static const char bert_small[] =
      "[model]\narch = bert\nlayers = 4\nhidden = 256\nheads = 4\n"
      "vocab = 1000\nseq_len = 128\n";
  static const char *const eager[] = {"training.attention=eager"};
  double want = 3.0 * (GPT_SMALL_FWD_FLOPS + 4.0 * 8388608.0 + 16777216.0);
  vs_model m;
  (void)state;
  model_of(bert_small, NULL, 0, &m);
  assert_false(m.causal);
  vs_model_fini(&m);
  tu_assert_close(model_flops(bert_small, NULL, 0, 1, 1, 1), want, 0);
  tu_assert_close(model_flops(bert_small, eager, 1, 1, 1, 1), want, 0);
}

/* Model FLOPs do not depend on how the experts are split (a time-model
 * audit: with etp above tp they fell as 1/etp, so Mixtral's MFU went
 * 37.4%, 23.3%, 14.2% at etp 1, 2, 4 for about one throughput): an MoE
 * model at tp 2 with sequence parallelism and dp 2, at etp 1, 2 and 4. */
static void test_model_flops_whatever_etp(void **state)
{
  static const char *const sets[][8] = {
      {"model.experts=4", "model.experts_per_token=2",
       "model.expert_ffn_hidden=1024", "parallel.tp=2", "parallel.dp=2",
       "parallel.sequence_parallel=true", "parallel.etp=1", NULL},
      {"model.experts=4", "model.experts_per_token=2",
       "model.expert_ffn_hidden=1024", "parallel.tp=2", "parallel.dp=2",
       "parallel.sequence_parallel=true", "parallel.etp=2", NULL},
      {"model.experts=4", "model.experts_per_token=2",
       "model.expert_ffn_hidden=1024", "parallel.tp=2", "parallel.dp=2",
       "parallel.sequence_parallel=true", "parallel.etp=4", NULL},
  };
  double first = 0;
  (void)state;
  for (size_t i = 0; i < 3; i++) {
    double f = model_flops(gpt_small, sets[i], 7, 2, 2, 1);
    if (i == 0)
      first = f;
    assert_true(f > 0 && isfinite(f));
    tu_assert_close(f, first, 1e-12);
  }
}

static void test_mfu_formula(void **state)
{
  (void)state;
  /* 3e15 FLOPs in 2 s on 4 GPUs of 1e15 FLOP/s: 3e15 / 8e15 */
  tu_assert_close(vs_cost_mfu(3e15, 2.0, 4, 1e15), 0.375, 1e-15);
  /* no step, no GPU, no peak, or a NaN step: 0, never inf or NaN */
  tu_assert_close(vs_cost_mfu(3e15, 0.0, 4, 1e15), 0, 0);
  tu_assert_close(vs_cost_mfu(3e15, 2.0, 0, 1e15), 0, 0);
  tu_assert_close(vs_cost_mfu(3e15, 2.0, 4, 0), 0, 0);
  tu_assert_close(vs_cost_mfu(3e15, NAN, 4, 1e15), 0, 0);
}

/* A whole simulation: the base model on 2 GPUs (dp 2), global batch 8 so
 * 4 micro-batches each: model FLOPs 3 x 904396800 x 2 x 4, and MFU that
 * over step x 2 GPUs x the precision's peak (bf16 989, fp8 1979 TFLOP/s). */
static void test_mfu_of_a_run(void **state)
{
  static const char *const sets[][2] = {
      {"training.global_batch=8", "training.precision=bf16"},
      {"training.global_batch=8", "training.precision=fp8"},
  };
  static const double peak[] = {989e12, 1979e12};
  (void)state;
  for (int i = 0; i < 2; i++) {
    vs_workload wl;
    vs_topology topo;
    vs_sim sim;
    vs_sim_opts opts = {0};
    vs_error err;
    vs_error_clear(&err);
    tu_default_topology(&topo);
    if (tu_load_workload(&wl, gpt_small, sets[i], 2, 2, &err) ||
        vs_sim_run(&sim, &wl, &topo, &opts, &err))
      fail_msg("run: %s", err.msg);
    tu_assert_close(sim.model_flops, 3.0 * GPT_SMALL_FWD_FLOPS * 2 * 4, 1e-15);
    assert_true(sim.step_time_s > 0);
    tu_assert_close(sim.mfu, sim.model_flops / (sim.step_time_s * 2 * peak[i]),
                    1e-12);
    vs_sim_fini(&sim);
  }
}

static void test_money(void **state)
{
  (void)state;
  /* 8 GPUs for an hour at $2.99 = $23.92; 8 GPUs for 30 min = 4 GPU-h */
  tu_assert_close(vs_cost_usd(2.99, 8, 3600.0), 23.92, 1e-12);
  tu_assert_close(vs_cost_gpu_hours(8, 1800.0), 4.0, 1e-15);
  tu_assert_close(vs_cost_usd(0, 8, 3600.0), 0, 0);
  /* plans rank by dollars when priced, else by GPU-hours */
  tu_assert_close(vs_cost_step_charge(5.0, 8, 1800.0), 5.0, 0);
  tu_assert_close(vs_cost_step_charge(0, 8, 1800.0), 4.0, 1e-15);
  /* $2 a step of 4e6 tokens: $500 per 1e9 tokens */
  tu_assert_close(vs_cost_per_tokens(2.0, 4e6, 1e9), 500.0, 1e-15);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_roofline),
      cmocka_unit_test(test_peak_flops),
      cmocka_unit_test(test_optimizer_work),
      cmocka_unit_test(test_link_and_collectives),
      cmocka_unit_test(test_group_seconds),
      cmocka_unit_test(test_busbw_curve),
      cmocka_unit_test(test_busbw_time_never_falls),
      cmocka_unit_test(test_cross_node_never_faster),
      cmocka_unit_test(test_gemm_fill),
      cmocka_unit_test(test_busbw_all_reduce_curve),
      cmocka_unit_test(test_flash_rates),
      cmocka_unit_test(test_model_flops_causal),
      cmocka_unit_test(test_model_flops_fine_tunes),
      cmocka_unit_test(test_model_flops_bidirectional),
      cmocka_unit_test(test_model_flops_whatever_etp),
      cmocka_unit_test(test_mfu_formula),
      cmocka_unit_test(test_mfu_of_a_run),
      cmocka_unit_test(test_money),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

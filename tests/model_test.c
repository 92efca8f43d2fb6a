/* model_test.c - the model builder against published formulas.
 *
 * Activations per layer: Korthikanti et al. 2022, "Reducing Activation
 * Recomputation in Large Transformer Models" (arXiv 2205.05198), Table 2
 * (shared/reference/README.md section 2). Parameter counts: Llama-2-7B
 * (Touvron et al. 2023, arXiv 2307.09288, released config.json) and GPT-3
 * 175B (Brown et al. 2020, arXiv 2005.14165, Table 2.1). Notation: s
 * sequence, b micro-batch, h hidden, a heads, t tensor-parallel size, f FFN
 * width, V vocabulary, k kv heads, d = h/a head dim. */
#include "memory.h"
#include "model.h"
#include "testutil.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------ */

/* Models a test built, released after it (vs_model_fini). */
#define MAX_BUILT 64
static vs_model built[MAX_BUILT];
static size_t n_built;

static int free_models(void **state)
{
  (void)state;
  while (n_built > 0)
    vs_model_fini(&built[--n_built]);
  return 0;
}

static void keep_model(const vs_model *m)
{
  if (n_built == MAX_BUILT)
    fail_msg("more than %d models in one test", MAX_BUILT);
  built[n_built++] = *m;
}

/* After m gained kinds (its kinds array may have moved), the kept copy
 * follows (found by its inst_kind array, which never moves). */
static void refresh_model(const vs_model *m)
{
  for (size_t i = 0; i < n_built; i++)
    if (built[i].inst_kind == m->inst_kind)
      built[i] = *m;
}

/* build_ini for the ranks of expert load `load`. */
static void build_loaded(vs_model *m, const char *ini, const char *const *sets,
                         size_t n_sets, vs_expert_load load)
{
  vs_workload wl;
  vs_error err;
  vs_error_clear(&err);
  if (tu_load_workload(&wl, ini, sets, n_sets, 0, &err) != 0)
    fail_msg("workload: %s", err.msg);
  if (vs_model_build_loaded(&wl, load, m, &err) != 0)
    fail_msg("model: %s", err.msg);
  keep_model(m);
}

static void build_ini(vs_model *m, const char *ini, const char *const *sets,
                      size_t n_sets)
{
  build_loaded(m, ini, sets, n_sets, VS_LOAD_HOTTEST);
}

/* Everything layer 0 of m saves for backward (vs_block_saved_bytes of
 * the layer's block over every pass). */
static uint64_t layer0_saved(const vs_model *m)
{
  return vs_block_saved_bytes(vs_model_layer(m, 0), -1, VS_SAVED_ALL);
}

/* A GPT layer as Korthikanti's Table 2 assumes it: dropout (0.1 default for
 * gpt), 16-bit activations, materialised attention scores. */
static void build_gpt(vs_model *m, uint64_t s, uint64_t b, uint64_t h,
                      uint64_t a, uint64_t t, bool sp, const char *precision,
                      const char *attention, const char *ckpt)
{
  char ini[1024];
  snprintf(ini, sizeof ini,
           "[model]\narch = gpt\nlayers = 2\nhidden = %llu\nheads = %llu\n"
           "vocab = 50257\nseq_len = %llu\n"
           "[training]\nmicro_batch = %llu\nprecision = %s\nattention = %s\n"
           "checkpointing = %s\n"
           "[parallel]\ntp = %llu\nsequence_parallel = %s\n",
           (unsigned long long)h, (unsigned long long)a, (unsigned long long)s,
           (unsigned long long)b, precision, attention, ckpt,
           (unsigned long long)t, sp ? "true" : "false");
  build_ini(m, ini, NULL, 0);
}

/* x / y where the test relies on the division being exact. */
static uint64_t exact_div(uint64_t x, uint64_t y)
{
  if (x % y != 0)
    fail_msg("%llu is not divisible by %llu", (unsigned long long)x,
             (unsigned long long)y);
  return x / y;
}

/* The (s, b, h, a) shapes checked: GPT-2-medium-like, GPT-3 1.3B-like,
 * a 7B-like and GPT-3 175B (96 heads, h 12288, s 2048). */
static const uint64_t shapes[][4] = {
    {512, 4, 1024, 16},
    {1024, 2, 2048, 32},
    {2048, 1, 4096, 32},
    {2048, 1, 12288, 96},
};
#define N_SHAPES (sizeof shapes / sizeof shapes[0])

static const uint64_t tps[] = {2, 4, 8};
#define N_TPS (sizeof tps / sizeof tps[0])

/* ------------------------------------------------------------------------
 * Korthikanti Table 2: GPT layer, eager attention, dropout
 * ------------------------------------------------------------------------ */

/* Row "no parallelism": s*b*h*(34 + 5*a*s/h) = 34sbh + 5as^2b bytes. */
static void test_gpt_no_parallelism(void **state)
{
  (void)state;
  for (size_t i = 0; i < N_SHAPES; i++) {
    uint64_t s = shapes[i][0], b = shapes[i][1], h = shapes[i][2],
             a = shapes[i][3];
    const char *prec = i % 2 ? "bf16" : "fp16";
    vs_model m;
    build_gpt(&m, s, b, h, a, 1, false, prec, "eager", "none");
    /* Korthikanti Table 2, no parallelism: sbh(34 + 5as/h) */
    assert_int_equal(layer0_saved(&m),
                     34 * s * b * h + 5 * a * s * s * b);
    /* everything a layer saves is an activation (no temp in a layer) */
    assert_int_equal(vs_block_saved_bytes(vs_model_layer(&m, 0),
                                          VS_CAT_ACTIVATIONS, VS_SAVED_ALL),
                     34 * s * b * h + 5 * a * s * s * b);
    /* Korthikanti Sec. 4.1 breakdown: the selective (s^2) part is softmax
     * output 2as^2b + dropout mask as^2b + dropout output 2as^2b = 5as^2b */
    assert_int_equal(vs_block_saved_bytes(vs_model_layer(&m, 0), -1,
                                          VS_SAVED_KEPT_BY_SELECTIVE),
                     34 * s * b * h);
  }
}

/* Row "tensor parallel": sbh(10 + 24/t + 5as/(ht)). */
static void test_gpt_tensor_parallel(void **state)
{
  (void)state;
  for (size_t i = 0; i < N_SHAPES; i++) {
    for (size_t j = 0; j < N_TPS; j++) {
      uint64_t s = shapes[i][0], b = shapes[i][1], h = shapes[i][2],
               a = shapes[i][3], t = tps[j];
      vs_model m;
      build_gpt(&m, s, b, h, a, t, false, "bf16", "eager", "none");
      /* Korthikanti Table 2, tensor parallel:
       * 10sbh + 24sbh/t + 5as^2b/t */
      assert_int_equal(layer0_saved(&m),
                       10 * s * b * h + exact_div(24 * s * b * h, t) +
                           exact_div(5 * a * s * s * b, t));
    }
  }
}

/* Row "tensor + sequence parallel": sbh/t * (34 + 5as/h). */
static void test_gpt_sequence_parallel(void **state)
{
  (void)state;
  for (size_t i = 0; i < N_SHAPES; i++) {
    for (size_t j = 0; j < N_TPS; j++) {
      uint64_t s = shapes[i][0], b = shapes[i][1], h = shapes[i][2],
               a = shapes[i][3], t = tps[j];
      vs_model m;
      build_gpt(&m, s, b, h, a, t, true, "fp16", "eager", "none");
      /* Korthikanti Table 2, tensor + sequence parallel:
       * (34sbh + 5as^2b) / t */
      assert_int_equal(layer0_saved(&m),
                       exact_div(34 * s * b * h + 5 * a * s * s * b, t));
    }
  }
}

/* Rows "... + selective recompute": the s^2 attention core is dropped and
 * recomputed, leaving sbh(10 + 24/t) (tp) and 34sbh/t (tp + sp). */
static void test_gpt_selective_recompute(void **state)
{
  (void)state;
  for (size_t i = 0; i < N_SHAPES; i++) {
    for (size_t j = 0; j < N_TPS; j++) {
      uint64_t s = shapes[i][0], b = shapes[i][1], h = shapes[i][2],
               a = shapes[i][3], t = tps[j];
      vs_model m;
      build_gpt(&m, s, b, h, a, t, false, "bf16", "eager", "selective");
      /* Korthikanti Table 2, tp + selective recompute: sbh(10 + 24/t) */
      assert_int_equal(vs_block_saved_bytes(vs_model_layer(&m, 0), -1,
                                            VS_SAVED_KEPT_BY_SELECTIVE),
                       10 * s * b * h + exact_div(24 * s * b * h, t));
      build_gpt(&m, s, b, h, a, t, true, "bf16", "eager", "selective");
      /* Korthikanti Table 2, tp + sp + selective recompute: 34sbh/t */
      assert_int_equal(vs_block_saved_bytes(vs_model_layer(&m, 0), -1,
                                            VS_SAVED_KEPT_BY_SELECTIVE),
                       exact_div(34 * s * b * h, t));
    }
  }
}

/* Row "full recompute": only the layer input, 2sbh, is kept. */
static void test_gpt_full_recompute(void **state)
{
  (void)state;
  for (size_t i = 0; i < N_SHAPES; i++) {
    uint64_t s = shapes[i][0], b = shapes[i][1], h = shapes[i][2],
             a = shapes[i][3];
    vs_model m;
    build_gpt(&m, s, b, h, a, 1, false, "bf16", "eager", "full");
    /* Korthikanti Table 2, full recompute: 2sbh (16-bit layer input) */
    assert_int_equal(vs_model_layer(&m, 0)->input_bytes, 2 * s * b * h);
    build_gpt(&m, s, b, h, a, 4, false, "bf16", "eager", "full");
    /* tensor parallelism alone leaves the layer input replicated: 2sbh */
    assert_int_equal(vs_model_layer(&m, 0)->input_bytes, 2 * s * b * h);
    build_gpt(&m, s, b, h, a, 4, true, "bf16", "eager", "full");
    /* with sequence parallelism the layer input lives in a sequence-sharded
     * region (Korthikanti Sec. 4.2.2, Fig. 5), so the checkpoint is 2sbh/t */
    assert_int_equal(vs_model_layer(&m, 0)->input_bytes, exact_div(2 * s * b * h, 4));
  }
}

/* ------------------------------------------------------------------------
 * FlashAttention (Dao et al. 2022, arXiv 2205.14135)
 * ------------------------------------------------------------------------ */

/* Flash never materialises the a*s*s scores, probabilities or dropout mask
 * (the mask is regenerated from the RNG state); it saves Q, K, V (6sbh, the
 * same 2sbh + 4sbh as the eager row's V and Q,K) and the fp32 log-sum-exp,
 * 4 bytes per (batch, head, query): 4bas. So per layer:
 *   34sbh + 4bas            (no parallelism)
 *   10sbh + 24sbh/t + 4bas/t (tensor parallel: LSE is per local head). */
static void test_gpt_flash(void **state)
{
  (void)state;
  for (size_t i = 0; i < N_SHAPES; i++) {
    uint64_t s = shapes[i][0], b = shapes[i][1], h = shapes[i][2],
             a = shapes[i][3];
    vs_model m;
    build_gpt(&m, s, b, h, a, 1, false, "bf16", "flash", "none");
    /* Korthikanti's 34sbh minus nothing, plus the fp32 LSE 4bas */
    assert_int_equal(layer0_saved(&m),
                     34 * s * b * h + 4 * b * a * s);
    for (size_t j = 0; j < N_TPS; j++) {
      uint64_t t = tps[j];
      build_gpt(&m, s, b, h, a, t, false, "fp16", "flash", "none");
      /* 10sbh + 24sbh/t (Table 2 without the s^2 terms) + 4bas/t */
      assert_int_equal(layer0_saved(&m),
                       10 * s * b * h + exact_div(24 * s * b * h, t) +
                           exact_div(4 * b * a * s, t));
    }
  }
}

static const vs_op_spec *op_named(const vs_block *blk, const char *name)
{
  for (uint32_t k = 0; k < blk->n_ops; k++)
    if (strcmp(blk->ops[k].name, name) == 0)
      return &blk->ops[k];
  fail_msg("no op %s", name);
  return NULL;
}

/* The bytes op `name` of blk saves for backward. */
static uint64_t op_saved(const vs_block *blk, const char *name)
{
  const vs_op_spec *op = op_named(blk, name);
  uint64_t bytes = 0;
  for (uint32_t s = op->first_saved; s < op->first_saved + op->n_saved; s++)
    bytes += blk->saved[s].bytes;
  return bytes;
}

/* op's forward and backward work: HBM bytes (exactly) and kernels. */
static void assert_op_work(const vs_op_spec *op, double fwd_bytes,
                           unsigned fwd_kernels, double bwd_bytes,
                           unsigned bwd_kernels)
{
  if (op->fwd_bytes != fwd_bytes || op->bwd_bytes != bwd_bytes)
    fail_msg("%s: bytes %g / %g, expected %g / %g", op->name, op->fwd_bytes,
             op->bwd_bytes, fwd_bytes, bwd_bytes);
  assert_int_equal(op->fwd_kernels, fwd_kernels);
  assert_int_equal(op->bwd_kernels, bwd_kernels);
}

/* Attention FLOPs as FlashAttention-2 counts them (Dao 2023, arXiv
 * 2307.08691, Sec. 4.1; flash-attn benchmark_flash_attention.py): forward
 * 4*b*s^2*d*(a/t) = 4bs^2h/t, halved for a causal model (gpt, llama: the
 * kernel skips the blocks above the diagonal, "divided by 2 for causal"),
 * backward 2.5x the forward (5 matmuls to 2, the scores recomputed). A
 * bidirectional model (bert) does all of it. Eager attention computes
 * every product whatever the mask: QK^T and probs @ V are 2bs^2h/t each,
 * backward twice that. */
static void test_attention_flops(void **state)
{
  static const char *const bert[] = {"model.arch=bert"};
  (void)state;
  for (size_t i = 0; i < N_SHAPES; i++) {
    double s = (double)shapes[i][0], b = (double)shapes[i][1],
           h = (double)shapes[i][2];
    for (size_t j = 0; j < N_TPS; j++) {
      double t = (double)tps[j];
      const vs_op_spec *op;
      vs_model m;
      char ini[512];
      build_gpt(&m, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3],
                tps[j], false, "bf16", "flash", "none");
      assert_true(m.causal);
      op = op_named(vs_model_layer(&m, 0), "flash_attn");
      tu_assert_close(op->fwd_flops, 0.5 * 4.0 * b * s * s * h / t, 1e-15);
      tu_assert_close(op->bwd_flops, 2.5 * 0.5 * 4.0 * b * s * s * h / t, 1e-15);
      build_gpt(&m, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3],
                tps[j], false, "bf16", "eager", "none");
      op = op_named(vs_model_layer(&m, 0), "attn_scores");
      tu_assert_close(op->fwd_flops, 2.0 * b * s * s * h / t, 1e-15);
      tu_assert_close(op->bwd_flops, 4.0 * b * s * s * h / t, 1e-15);
      op = op_named(vs_model_layer(&m, 0), "attn_context");
      tu_assert_close(op->fwd_flops, 2.0 * b * s * s * h / t, 1e-15);
      snprintf(ini, sizeof ini,
               "[model]\narch = gpt\nlayers = 2\nhidden = %llu\n"
               "heads = %llu\nvocab = 50257\nseq_len = %llu\n"
               "[training]\nmicro_batch = %llu\nattention = flash\n"
               "[parallel]\ntp = %llu\n",
               (unsigned long long)shapes[i][2],
               (unsigned long long)shapes[i][3],
               (unsigned long long)shapes[i][0],
               (unsigned long long)shapes[i][1], (unsigned long long)tps[j]);
      build_ini(&m, ini, bert, 1);
      assert_false(m.causal);
      op = op_named(vs_model_layer(&m, 0), "flash_attn");
      tu_assert_close(op->fwd_flops, 4.0 * b * s * s * h / t, 1e-15);
      tu_assert_close(op->bwd_flops, 2.5 * 4.0 * b * s * s * h / t, 1e-15);
    }
  }
}

/* ------------------------------------------------------------------------
 * Llama: RMSNorm, no dropout, GQA, SwiGLU, flash
 * ------------------------------------------------------------------------ */

static void build_llama(vs_model *m, uint64_t s, uint64_t b, uint64_t h,
                        uint64_t a, uint64_t k, uint64_t f, uint64_t t)
{
  char ini[1024];
  snprintf(ini, sizeof ini,
           "[model]\narch = llama\nlayers = 2\nhidden = %llu\nheads = %llu\n"
           "kv_heads = %llu\nffn_hidden = %llu\nvocab = 32000\nseq_len = %llu\n"
           "[training]\nmicro_batch = %llu\nprecision = bf16\n"
           "attention = flash\n[parallel]\ntp = %llu\n",
           (unsigned long long)h, (unsigned long long)a, (unsigned long long)k,
           (unsigned long long)f, (unsigned long long)s, (unsigned long long)b,
           (unsigned long long)t);
  build_ini(m, ini, NULL, 0);
}

/* Llama is causal too: its flash attention (GQA: 32 query heads, 8 kv
 * heads, d = 128) counts 0.5 x 4bs^2 x (a x d) = 2bs^2h forward. */
static void test_llama_attention_causal(void **state)
{
  vs_model m;
  (void)state;
  build_llama(&m, 2048, 1, 4096, 32, 8, 11008, 1);
  assert_true(m.causal);
  tu_assert_close(op_named(vs_model_layer(&m, 0), "flash_attn")->fwd_flops,
                  2.0 * 2048.0 * 2048.0 * 4096.0, 1e-15);
}

/* Saved tensors of a Llama layer at 16 bits, from its op list:
 *   RMSNorm inputs            2 x 2sbh   (replicated over tp)
 *   QKV projection input      2sbh       (replicated)
 *   Q, K, V (k kv heads)      2sbd(a + 2k) / t
 *   LSE (fp32)                4bas / t
 *   out-projection input      2sbh / t
 *   MLP (gate/up) input       2sbh       (replicated)
 *   gate (for SiLU backward)  2sbf / t
 *   SiLU(gate) and up (mul)   4sbf / t
 *   down-projection input     2sbf / t
 * No dropout (Llama default 0): no masks. */
static void test_llama_gqa_swiglu(void **state)
{
  static const uint64_t cfg[][6] = {
      /* s, b, h, a, k, f */
      {4096, 2, 4096, 32, 8, 11008},  /* Llama-2-7B shapes with GQA 4:1 */
      {4096, 1, 8192, 64, 8, 28672},  /* Llama-2-70B shapes */
      {2048, 1, 4096, 32, 32, 11008}, /* Llama-2-7B (k = a, no GQA) */
  };
  (void)state;
  for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; i++) {
    uint64_t s = cfg[i][0], b = cfg[i][1], h = cfg[i][2], a = cfg[i][3],
             k = cfg[i][4], f = cfg[i][5], d = h / a;
    for (uint64_t t = 1; t <= 8; t *= 2) {
      vs_model m;
      uint64_t expect;
      build_llama(&m, s, b, h, a, k, f, t);
      expect = 2 * 2 * s * b * h                    /* two RMSNorm inputs */
               + 2 * s * b * h                      /* QKV input */
               + exact_div(2 * s * b * d * (a + 2 * k), t) /* Q, K, V */
               + exact_div(4 * b * a * s, t)        /* fp32 LSE */
               + exact_div(2 * s * b * h, t)        /* out-proj input */
               + 2 * s * b * h                      /* MLP input */
               + exact_div(2 * s * b * f, t)        /* gate */
               + exact_div(4 * s * b * f, t)        /* SiLU(gate), up */
               + exact_div(2 * s * b * f, t);       /* down input */
      assert_int_equal(layer0_saved(&m), expect);
      /* flash: selective drops the LSE alone (no s^2 tensors), which
       * the core_attn recompute re-runs the kernel for */
      assert_int_equal(vs_block_saved_bytes(vs_model_layer(&m, 0), -1,
                                            VS_SAVED_KEPT_BY_SELECTIVE),
                       expect - exact_div(4 * b * a * s, t));
    }
  }
}

/* Eager attention's backward holds each s^2 gradient while it makes the
 * next (autograd frees a node's incoming gradient once the node is done):
 * the softmax's the probs' gradient (fp32 under autocast, cast from the
 * 16-bit one the context matmul made) and its input's, fp32 under
 * autocast in bf16 (softmax(dtype = float32) converts the bf16 scores
 * first; SoftMax.cpp fuses the cast only for CUDA's fp16) or under the
 * Hugging Face Trainer (its fp32 mask promotes the scores); the scores'
 * the scores' gradient and the scale's and mask's 16-bit copy of it.
 * s = 1024, b = 2, 16 heads: 2^25 scores. */
static void test_eager_backward_holds_incoming_gradients(void **state)
{
  const uint64_t scores = 16ull * 1024 * 1024 * 2;
  static const char *const precisions[] = {"bf16", "amp_bf16", "amp_fp16",
                                            "fp32"};
  static const uint64_t probs[] = {2, 4, 4, 4}, input[] = {2, 4, 2, 4},
                        act[] = {2, 2, 2, 4};
  static const char *const hf[] = {"training.framework=hf",
                                   "training.precision=amp_fp16"};
  vs_model m;
  (void)state;
  for (int i = 0; i < 4; i++) {
    build_gpt(&m, 1024, 2, 1024, 16, 1, false, precisions[i], "eager",
              "none");
    assert_int_equal(op_named(vs_model_layer(&m, 0), "softmax")->bwd_temp_bytes,
                     (probs[i] + input[i]) * scores);
    assert_int_equal(
        op_named(vs_model_layer(&m, 0), "attn_scores")->bwd_temp_bytes,
        2 * act[i] * scores);
  }
  build_ini(&m,
            "[model]\narch = gpt\nlayers = 2\nhidden = 1024\nheads = 16\n"
            "vocab = 50257\nseq_len = 1024\n[training]\nmicro_batch = 2\n"
            "attention = eager\n",
            hf, 2);
  assert_int_equal(op_named(vs_model_layer(&m, 0), "softmax")->bwd_temp_bytes,
                   (4 + 4) * scores);
  assert_int_equal(
      op_named(vs_model_layer(&m, 0), "attn_scores")->bwd_temp_bytes,
      (4 + 2) * scores);
}

/* Eager attention with GQA and no dropout: K and V are expanded to all a
 * heads before the matmuls (Hugging Face repeat_kv), so the scores op saves
 * Q and the expanded K (4sbh/t), the context op the expanded V (2sbh/t), and
 * the softmax its output (2as^2b/t), which the context op reuses as its
 * input (no dropout, so no second copy). The rest is as in the flash case
 * minus the LSE. */
static void test_llama_eager_gqa_expands_kv(void **state)
{
  const char *const eager[] = {"training.attention=eager"};
  uint64_t s = 1024, b = 1, h = 4096, a = 32, k = 8, f = 11008;
  (void)state;
  for (uint64_t t = 1; t <= 8; t *= 2) {
    vs_model m;
    char ini[1024];
    uint64_t expect;
    snprintf(ini, sizeof ini,
             "[model]\narch = llama\nlayers = 2\nhidden = %llu\nheads = %llu\n"
             "kv_heads = %llu\nffn_hidden = %llu\nvocab = 32000\nseq_len = %llu\n"
             "[parallel]\ntp = %llu\n",
             (unsigned long long)h, (unsigned long long)a, (unsigned long long)k,
             (unsigned long long)f, (unsigned long long)s, (unsigned long long)t);
    build_ini(&m, ini, eager, 1);
    expect = 2 * 2 * s * b * h + 2 * s * b * h          /* norms, QKV input */
             + exact_div(6 * s * b * h, t)              /* Q, K, V (a heads) */
             + exact_div(2 * a * s * s * b, t)          /* softmax output */
             + exact_div(2 * s * b * h, t)              /* out-proj input */
             + 2 * s * b * h                            /* MLP input */
             + exact_div(8 * s * b * f, t);             /* SwiGLU tensors */
    assert_int_equal(layer0_saved(&m), expect);
    (void)k;
  }
}

/* ------------------------------------------------------------------------
 * Parameter counts
 * ------------------------------------------------------------------------ */

static const char llama2_7b[] =
    "[model]\narch = llama\nlayers = 32\nhidden = 4096\nheads = 32\n"
    "ffn_hidden = 11008\nvocab = 32000\nseq_len = 4096\n";

static const char gpt3_175b[] =
    "[model]\narch = gpt\nlayers = 96\nhidden = 12288\nheads = 96\n"
    "vocab = 50257\nseq_len = 2048\n";

static uint64_t rank_params(const vs_model *m)
{
  return vs_model_embed(m)->param_elems +
         m->layers * vs_model_layer(m, 0)->param_elems +
         vs_model_head(m)->param_elems;
}

/* Llama-2-7B: 32 layers x (4h^2 attention + 3hf SwiGLU + 2h RMSNorm) +
 * 2Vh (untied embedding and output) + h (final RMSNorm)
 * = 32*(67108864 + 135266304 + 8192) + 262144000 + 4096 = 6,738,415,616,
 * the published "6.74B" (HF model card, config.json shapes). */
static void test_llama2_7b_params(void **state)
{
  vs_model m;
  uint64_t h = 4096, f = 11008, v = 32000;
  (void)state;
  build_ini(&m, llama2_7b, NULL, 0);
  assert_int_equal(vs_model_param_count(&m), 6738415616ull);
  /* the same by the formula 32(4h^2 + 3hf + 2h) + 2Vh + h */
  assert_int_equal(vs_model_param_count(&m),
                   32 * (4 * h * h + 3 * h * f + 2 * h) + 2 * v * h + h);
  /* one layer: 4h^2 + 3hf + 2h */
  assert_int_equal(vs_model_layer(&m, 0)->param_elems, 4 * h * h + 3 * h * f + 2 * h);
  /* at tp = 1 the per-rank tensors add up to the whole model */
  assert_int_equal(rank_params(&m), 6738415616ull);
}

/* GPT-3 175B, tied embeddings: 12Lh^2 + 13Lh (QKV, proj, MLP weights and
 * biases, two LayerNorms) + Vh (word embeddings) + sh (learned positions) +
 * 2h (final LayerNorm) = 174,604,259,328 (Brown et al. quote 175.0B). */
static void test_gpt3_175b_params(void **state)
{
  vs_model m;
  uint64_t L = 96, h = 12288, v = 50257, s = 2048;
  (void)state;
  build_ini(&m, gpt3_175b, NULL, 0);
  assert_int_equal(vs_model_param_count(&m),
                   12 * L * h * h + 13 * L * h + v * h + s * h + 2 * h);
  assert_int_equal(vs_model_param_count(&m), 174604259328ull);
  assert_int_equal(rank_params(&m), 174604259328ull);
  /* one layer: 12h^2 + 13h */
  assert_int_equal(vs_model_layer(&m, 0)->param_elems, 12 * h * h + 13 * h);
}

/* Megatron tensor parallelism shards QKV and MLP-up by columns (weights and
 * biases) and attention-out and MLP-down by rows (weights only); the two
 * LayerNorms (4h) and the two row-parallel biases (2h) stay replicated:
 * GPT layer per rank = (12h^2 + 7h)/t + 6h. Llama: (2h^2 + 2hkd + 3hf)/t +
 * 2h. The vocabulary is padded to a multiple of t and split by rows. */
static void test_params_shrink_with_tp(void **state)
{
  uint64_t h = 12288, f = 4 * h;
  (void)state;
  for (uint64_t t = 1; t <= 8; t *= 2) {
    char tp[32];
    const char *sets[1];
    vs_model m;
    uint64_t vpad = (50257 + t - 1) / t * t;
    snprintf(tp, sizeof tp, "parallel.tp=%llu", (unsigned long long)t);
    sets[0] = tp;
    build_ini(&m, gpt3_175b, sets, 1);
    /* Megatron column/row split: (12h^2 + 7h)/t sharded + 6h replicated */
    assert_int_equal(vs_model_layer(&m, 0)->param_elems,
                     exact_div(12 * h * h + 7 * h, t) + 6 * h);
    /* the sharded matrices: QKV h x 3h/t, MLP-up h x f/t, out-proj and
     * MLP-down (h/t, f/t) x h */
    for (uint32_t i = 0; i < vs_model_layer(&m, 0)->n_params; i++) {
      const vs_param_tensor *p = &vs_model_layer(&m, 0)->params[i];
      if (strcmp(p->name, "qkv.weight") == 0)
        assert_int_equal(p->rows * p->cols, exact_div(3 * h * h, t));
      else if (strcmp(p->name, "mlp_up.weight") == 0 ||
               strcmp(p->name, "mlp_down.weight") == 0)
        assert_int_equal(p->rows * p->cols, exact_div(h * f, t));
      else if (strcmp(p->name, "attn_out.weight") == 0)
        assert_int_equal(p->rows * p->cols, exact_div(h * h, t));
    }
    /* vocab padded to a multiple of t (Megatron's divisibility rule) */
    assert_int_equal(m.vocab_padded, vpad);
    /* embed: word embeddings Vpad/t x h + learned positions s x h */
    assert_int_equal(vs_model_embed(&m)->param_elems, vpad / t * h + 2048 * h);
    /* the whole-model count uses the real vocabulary, whatever t is */
    assert_int_equal(vs_model_param_count(&m), 174604259328ull);
  }
  for (uint64_t t = 1; t <= 8; t *= 2) {
    char tp[32];
    const char *sets[2];
    vs_model m;
    uint64_t lh = 4096, lf = 11008, k = 8, d = 128;
    snprintf(tp, sizeof tp, "parallel.tp=%llu", (unsigned long long)t);
    sets[0] = tp;
    sets[1] = "model.kv_heads=8";
    build_ini(&m, llama2_7b, sets, 2);
    /* GQA: Q h x h, K and V h x kd; out h x h; gate, up, down h x f */
    assert_int_equal(vs_model_layer(&m, 0)->param_elems,
                     exact_div(2 * lh * lh + 2 * lh * k * d + 3 * lh * lf, t) +
                         2 * lh);
  }
}

/* vs_model_param_count uses a closed form; at tp = 1 (no vocab padding) it
 * must equal the sum of the parameter tensors the builder lists, for every
 * architecture and option that changes the list (GQA, tied/untied, BERT's
 * token types, embedding norm and MLM head, the attention's and MLPs'
 * biases, head norms, the position table's rows, a shared-expert
 * gate). */
static void test_param_count_matches_tensors(void **state)
{
  static const char *const inis[] = {
      "[model]\narch = gpt\nlayers = 3\nhidden = 1024\nheads = 16\n"
      "kv_heads = 4\nvocab = 50257\nseq_len = 1024\n",
      "[model]\narch = gpt\nlayers = 3\nhidden = 1024\nheads = 16\n"
      "vocab = 50257\nseq_len = 1024\ntied_embeddings = false\n",
      "[model]\narch = llama\nlayers = 3\nhidden = 1024\nheads = 16\n"
      "kv_heads = 2\nffn_hidden = 2816\nvocab = 32000\nseq_len = 1024\n"
      "tied_embeddings = true\n",
      "[model]\narch = bert\nlayers = 24\nhidden = 1024\nheads = 16\n"
      "vocab = 30522\nseq_len = 512\n",
      /* Llama with every bias and Qwen3's head norms */
      "[model]\narch = llama\nlayers = 3\nhidden = 1024\nheads = 16\n"
      "kv_heads = 2\nffn_hidden = 2816\nvocab = 32000\nseq_len = 1024\n"
      "attention_bias = all\nmlp_bias = true\nqk_norm = true\n",
      /* GPT without a position table, biases on q/k/v only, none in MLPs */
      "[model]\narch = gpt\nlayers = 3\nhidden = 1024\nheads = 16\n"
      "vocab = 50257\nseq_len = 1024\npositions = rotary\n"
      "attention_bias = qkv\nmlp_bias = false\n",
      /* a table longer than the sequence; BERT with one token type */
      "[model]\narch = gpt\nlayers = 3\nhidden = 1024\nheads = 16\n"
      "vocab = 50257\nseq_len = 1024\nmax_positions = 2048\n",
      "[model]\narch = bert\nlayers = 2\nhidden = 1024\nheads = 16\n"
      "vocab = 30522\nseq_len = 128\nmax_positions = 512\n"
      "type_vocab = 1\n",
      /* Qwen2-MoE's layers: q/k/v biases, a gated shared expert */
      "[model]\narch = llama\nlayers = 2\nhidden = 1024\nheads = 16\n"
      "ffn_hidden = 2816\nvocab = 32000\nseq_len = 1024\nexperts = 4\n"
      "expert_ffn_hidden = 512\nshared_experts = 1\n"
      "shared_expert_ffn_hidden = 2048\nshared_expert_gate = true\n"
      "attention_bias = qkv\nmlp_bias = true\n",
      /* heads twice as wide as hidden / heads (Gemma-7B's shape) */
      "[model]\narch = llama\nlayers = 2\nhidden = 1024\nheads = 16\n"
      "head_dim = 128\nffn_hidden = 2816\nvocab = 32000\nseq_len = 1024\n"
      "qk_norm = true\n",
      /* Gemma 2's sandwich norms (and GPT's LayerNorm ones, with biases) */
      "[model]\narch = llama\nlayers = 2\nhidden = 1024\nheads = 16\n"
      "ffn_hidden = 2816\nvocab = 32000\nseq_len = 1024\n"
      "post_norms = true\nattn_softcap = 50\nlogit_softcap = 30\n",
      "[model]\narch = gpt\nlayers = 3\nhidden = 1024\nheads = 16\n"
      "vocab = 50257\nseq_len = 1024\npost_norms = true\n",
  };
  /* the tables a token only looks up: learned positions, the token table
   * unless the output layer multiplies by it, BERT's two token types */
  static const uint64_t lookups[] = {
      1024 * 1024,      (50257 + 1024) * 1024, 0,
      (512 + 2) * 1024, 32000 * 1024,          0,
      2048 * 1024,      (512 + 1) * 1024,      32000 * 1024,
      32000 * 1024,     32000 * 1024,          1024 * 1024};
  (void)state;
  for (size_t i = 0; i < sizeof inis / sizeof inis[0]; i++) {
    vs_model m;
    build_ini(&m, inis[i], NULL, 0);
    /* same parameters counted two ways */
    assert_int_equal(rank_params(&m), vs_model_param_count(&m));
    assert_int_equal(m.params_lookup, lookups[i]);
  }
}

/* A two-layer Llama with grouped-query attention (4 KV heads of 16), 512
 * tokens: the [model] section the layer-option tests build on. */
#define GQA_LLAMA                                                              \
  "[model]\narch = llama\nlayers = 2\nhidden = 1024\nheads = 16\n"             \
  "kv_heads = 4\nffn_hidden = 2816\nvocab = 32000\nseq_len = 512\n"

/* What the layer options save for backward, over a layer without them
 * (tokens T = s b, 16-bit, fused kernels): Qwen3's head norms their
 * inputs, q and k, 2T(h + h_kv) bytes (as the layer's norms save theirs;
 * RMSNorm's statistics are not counted); a bias nothing (the linear's
 * input is saved either way); heads wider than h / a what attention
 * keeps of them; the shared-expert gate its sigmoid's score and the
 * shared experts' output, 2T(h + 1). */
static void test_layer_options_saved(void **state)
{
  static const char *const llama = GQA_LLAMA "[training]\nmicro_batch = 2\n";
  static const char *const moe =
      "[model]\narch = llama\nlayers = 2\nhidden = 1024\nheads = 16\n"
      "ffn_hidden = 2816\nvocab = 32000\nseq_len = 512\nexperts = 4\n"
      "shared_experts = 1\n[training]\nmicro_batch = 2\n";
  const char *norms[] = {"model.qk_norm=true"};
  const char *biases[] = {"model.attention_bias=all", "model.mlp_bias=true"};
  const char *gate[] = {"model.shared_expert_gate=true"};
  const char *wide[] = {"model.head_dim=128"};
  const char *gate_fp8[] = {"model.shared_expert_gate=true",
                            "training.precision=fp8"};
  static const char *const gpt_amp =
      "[model]\narch = gpt\nlayers = 2\nhidden = 1024\nheads = 16\n"
      "vocab = 32000\nseq_len = 512\n[training]\nmicro_batch = 2\n"
      "precision = amp_bf16\n";
  uint64_t t = 512 * 2, base;
  vs_model m;
  (void)state;
  build_ini(&m, llama, NULL, 0);
  base = layer0_saved(&m);
  build_ini(&m, llama, norms, 1);
  assert_int_equal(layer0_saved(&m), base + 2 * t * (1024 + 4 * 64));
  assert_non_null(op_named(vs_model_layer(&m, 0), "q_norm"));
  assert_non_null(op_named(vs_model_layer(&m, 0), "k_norm"));
  build_ini(&m, llama, biases, 2);
  assert_int_equal(layer0_saved(&m), base);
  /* heads twice as wide: flash attention's Q (16 heads), K and V (4 each)
   * and its output, the output projection's input, grow by 64 a head */
  build_ini(&m, llama, wide, 1);
  assert_int_equal(layer0_saved(&m), base + 2 * t * (16 + 2 * 4 + 16) * 64);
  build_ini(&m, moe, NULL, 0);
  base = layer0_saved(&m);
  build_ini(&m, moe, gate, 1);
  assert_int_equal(layer0_saved(&m), base + 2 * t * (1024 + 1));
  /* Megatron-LM's gate is F.linear, no Transformer Engine module: 16-bit
   * under fp8 */
  build_ini(&m, moe, gate_fp8, 2);
  assert_true(op_named(vs_model_layer(&m, 0), "shared_gate")->no_fp8);
  /* autocast runs a LayerNorm in fp32: GPT's head norms keep fp32 casts
   * of q and k, 4T(h + h) bytes (no GQA) */
  build_ini(&m, gpt_amp, NULL, 0);
  base = layer0_saved(&m);
  build_ini(&m, gpt_amp, norms, 1);
  assert_int_equal(layer0_saved(&m), base + 4 * t * (1024 + 1024));
}

/* Megatron-LM's FP8 primary weights (fp8_param_gather): of a GPT layer's
 * parameters exactly the GEMM matrices of Transformer Engine's modules
 * (qkv, the output projection, the MLP's two) are FP8; biases and norms
 * stay 16-bit, and so do the embedding and the output layer (no
 * Transformer Engine module). */
static void test_fp8_primary_weight_dtypes(void **state)
{
  static const char *const gpt =
      "[model]\narch = gpt\nlayers = 2\nhidden = 1024\nheads = 16\n"
      "vocab = 32000\nseq_len = 512\n[training]\nframework = megatron\n"
      "precision = fp8\nfp8_param_gather = true\n[parallel]\nzero = 1\n";
  vs_model m;
  const vs_block *blk;
  unsigned fp8 = 0;
  (void)state;
  build_ini(&m, gpt, NULL, 0);
  blk = vs_model_layer(&m, 0);
  for (uint32_t i = 0; i < blk->n_params; i++) {
    const vs_param_tensor *p = &blk->params[i];
    bool matrix = p->rows > 1 && p->cols > 1;
    assert_int_equal(p->dtype == VS_DTYPE_FP8_SCALED, matrix);
    assert_true(matrix || p->dtype == VS_DTYPE_BF16);
    fp8 += matrix;
  }
  assert_int_equal(fp8, 4);
  for (uint32_t i = 0; i < vs_model_head(&m)->n_params; i++)
    assert_int_equal(vs_model_head(&m)->params[i].dtype, VS_DTYPE_BF16);
  for (uint32_t i = 0; i < vs_model_embed(&m)->n_params; i++)
    assert_int_equal(vs_model_embed(&m)->params[i].dtype, VS_DTYPE_BF16);
}

/* Gemma 2's layers over a Llama layer (tokens T = s b, 16-bit, fused
 * kernels): each sandwich norm saves its input, the sublayer's 16-bit
 * output, 2Th bytes, two a layer (Hugging Face's Python RMSNorm an fp32
 * copy and the 16-bit normalized one, 6Th each; Gemma's, scaled by 1 +
 * weight in fp32, an fp32 normalized one, 8Th; with the weight frozen,
 * LoRA's, the fp32 copy alone, 4Th); soft-capping's tanh saves its
 * output, the scores (2 a s^2 b bytes, eager attention: what selective
 * checkpointing drops) and the logits (2 T V, the fused loss's too: Liger
 * Kernel's cross entropy gets the capped logits), and costs nothing under
 * flash attention (the kernel caps). */
static void test_gemma2_layers_saved(void **state)
{
  static const char *const llama =
      GQA_LLAMA "[training]\nmicro_batch = 2\nattention = eager\n";
  const char *post[] = {"model.post_norms=true"};
  const char *post_hf[] = {"model.post_norms=true", "training.framework=hf"};
  const char *cap[] = {"model.attn_softcap=50", "model.logit_softcap=30"};
  const char *cap_flash[] = {cap[0], cap[1], "training.attention=flash"};
  const char *cap_fused[] = {cap[0], cap[1],
                             "training.fused_cross_entropy=true"};
  const char *flash[] = {"training.attention=flash"};
  const char *fused[] = {"training.fused_cross_entropy=true"};
  uint64_t t = 512 * 2, scores = 16 * 512 * 512 * 2, base, head, sel;
  vs_model m;
  (void)state;
  build_ini(&m, llama, NULL, 0);
  base = layer0_saved(&m);
  head = vs_block_saved_bytes(vs_model_head(&m), -1, VS_SAVED_ALL);
  sel = vs_block_saved_bytes(vs_model_layer(&m, 0), -1,
                             VS_SAVED_KEPT_BY_SELECTIVE);
  build_ini(&m, llama, post, 1);
  assert_int_equal(layer0_saved(&m), base + 2 * 2 * t * 1024);
  assert_non_null(op_named(vs_model_layer(&m, 0), "attn_post_norm"));
  assert_non_null(op_named(vs_model_layer(&m, 0), "mlp_post_norm"));
  build_ini(&m, llama, cap, 2);
  assert_int_equal(layer0_saved(&m), base + 2 * scores);
  assert_int_equal(vs_block_saved_bytes(vs_model_layer(&m, 0), -1,
                                        VS_SAVED_KEPT_BY_SELECTIVE),
                   sel);
  assert_int_equal(vs_block_saved_bytes(vs_model_head(&m), -1, VS_SAVED_ALL),
                   head + 2 * t * 32000);
  {
    uint64_t hf_base;
    const char *hf[] = {"training.framework=hf"};
    build_ini(&m, llama, hf, 1);
    hf_base = layer0_saved(&m);
    build_ini(&m, llama, post_hf, 2);
    assert_int_equal(layer0_saved(&m), hf_base + 2 * (4 + 2) * t * 1024);
  }
  build_ini(&m, llama, flash, 1);
  base = layer0_saved(&m);
  build_ini(&m, llama, cap_flash, 3);
  assert_int_equal(layer0_saved(&m), base);
  build_ini(&m, llama, fused, 1);
  head = vs_block_saved_bytes(vs_model_head(&m), -1, VS_SAVED_ALL);
  build_ini(&m, llama, cap_fused, 3);
  assert_int_equal(vs_block_saved_bytes(vs_model_head(&m), -1, VS_SAVED_ALL),
                   head + 2 * t * 32000);
  {
    const char *gemma_hf[] = {"model.post_norms=true", "training.framework=hf",
                              "model.zero_centered_norm=true"};
    const char *lora_hf[] = {"training.framework=hf", "training.precision=bf16",
                             "finetune.method=lora"};
    build_ini(&m, llama, gemma_hf, 3);
    assert_int_equal(op_saved(vs_model_layer(&m, 0), "attn_post_norm"),
                     (4 + 4) * t * 1024);
    assert_int_equal(op_saved(vs_model_layer(&m, 0), "norm1"),
                     (4 + 4) * t * 1024);
    build_ini(&m, llama, lora_hf, 3);
    assert_int_equal(op_saved(vs_model_layer(&m, 0), "norm1"), 4 * t * 1024);
  }
  {
    /* Hugging Face's eager attention, bf16 without autocast:
     * softmax(dtype = float32) saves fp32 probs, and the matmul with V
     * their 16-bit cast (.to(query.dtype)); Megatron-style (framework
     * none) the 16-bit softmax output serves both */
    const char *hf16[] = {"training.framework=hf", "training.precision=bf16"};
    uint64_t context;
    build_ini(&m, llama, NULL, 0);
    assert_int_equal(op_saved(vs_model_layer(&m, 0), "softmax"), 2 * scores);
    context = op_saved(vs_model_layer(&m, 0), "attn_context");
    build_ini(&m, llama, hf16, 2);
    assert_int_equal(op_saved(vs_model_layer(&m, 0), "softmax"), 4 * scores);
    assert_int_equal(op_saved(vs_model_layer(&m, 0), "attn_context"),
                     context + 2 * scores);
  }
  {
    /* GPT-2 under autocast: the Trainer's modules cast the probs to the
     * values' dtype before dropout (.type(value.dtype)), which reads 2 B
     * and writes 2 B and a 1-byte mask an element; autocast's own
     * attention (framework none) drops out the fp32 probs */
    static const char *const gpt =
        "[model]\narch = gpt\nlayers = 2\nhidden = 1024\nheads = 16\n"
        "vocab = 32000\nseq_len = 512\n[training]\nmicro_batch = 2\n"
        "attention = eager\nprecision = amp_bf16\n";
    const char *hf[] = {"training.framework=hf"};
    build_ini(&m, gpt, hf, 1);
    assert_true(op_named(vs_model_layer(&m, 0), "attn_dropout")->fwd_bytes ==
                (2.0 * 2 + 1) * (double)scores);
    build_ini(&m, gpt, NULL, 0);
    assert_true(op_named(vs_model_layer(&m, 0), "attn_dropout")->fwd_bytes ==
                (2.0 * 4 + 1) * (double)scores);
  }
  {
    /* in fp32 the softmax's dtype and the cast change nothing: the matmul
     * reads the tensor softmax saved */
    const char *none32[] = {"training.precision=fp32"};
    const char *hf32[] = {"training.framework=hf", "training.precision=fp32"};
    uint64_t softmax, context;
    build_ini(&m, llama, none32, 1);
    softmax = op_saved(vs_model_layer(&m, 0), "softmax");
    context = op_saved(vs_model_layer(&m, 0), "attn_context");
    assert_int_equal(softmax, 4 * scores);
    build_ini(&m, llama, hf32, 2);
    assert_int_equal(op_saved(vs_model_layer(&m, 0), "softmax"), softmax);
    assert_int_equal(op_saved(vs_model_layer(&m, 0), "attn_context"), context);
  }
}

/* ------------------------------------------------------------------------
 * Loss buffers
 * ------------------------------------------------------------------------ */

/* PyTorch's F.cross_entropy on logits.float() (every framework but
 * Megatron-LM): the cross entropy's fp32 log-softmax (4sbV/t, the
 * vocabulary split over t) is saved as temp, not activations; the 16-bit
 * logits and their fp32 copy (6sbV/t) live through the loss's forward
 * only (the frameworks drop the logits before backward); its backward
 * holds nll_loss's and log_softmax's fp32 gradients together (8sbV/t).
 * Each is a tensor of its own (the first: the 16-bit logits, nll_loss's
 * gradient), so the caching allocator can place each in a block another
 * freed.
 * The head's activations are the final LayerNorm input and the
 * output-layer input, 2sbh each. */
static void test_head_loss_buffers(void **state)
{
  (void)state;
  for (uint64_t t = 1; t <= 4; t *= 2) {
    uint64_t s = 1024, b = 2, h = 2048, v;
    vs_model m;
    const vs_op_spec *ce = NULL, *lm = NULL;
    build_gpt(&m, s, b, h, 16, t, false, "bf16", "eager", "none");
    v = m.vocab_padded / t;
    /* 4 bytes fp32 log-softmax per (token, vocab entry) */
    assert_int_equal(
        vs_block_saved_bytes(vs_model_head(&m), VS_CAT_TEMP, VS_SAVED_ALL),
        4 * s * b * v);
    /* final norm input + lm_head input, 2sbh each */
    assert_int_equal(vs_block_saved_bytes(vs_model_head(&m), VS_CAT_ACTIVATIONS,
                                          VS_SAVED_ALL),
                     4 * s * b * h);
    for (uint32_t i = 0; i < vs_model_head(&m)->n_ops; i++) {
      if (strcmp(vs_model_head(&m)->ops[i].name, "cross_entropy") == 0)
        ce = &vs_model_head(&m)->ops[i];
      if (strcmp(vs_model_head(&m)->ops[i].name, "lm_head") == 0)
        lm = &vs_model_head(&m)->ops[i];
    }
    assert_non_null(ce);
    assert_non_null(lm);
    /* fp32 log-softmax: 4 bytes x s*b*V/t, a loss buffer (temp) */
    assert_int_equal(ce->n_saved, 1);
    assert_int_equal(vs_model_head(&m)->saved[ce->first_saved].category, VS_CAT_TEMP);
    assert_int_equal(vs_model_head(&m)->saved[ce->first_saved].bytes, 4 * s * b * v);
    assert_int_equal(ce->fwd_temp_bytes, 6 * s * b * v);
    assert_int_equal(ce->fwd_temp_first, 2 * s * b * v);
    assert_int_equal(ce->bwd_temp_bytes, 8 * s * b * v);
    assert_int_equal(ce->bwd_temp_first, 4 * s * b * v);
    /* the logits are not kept: lm_head saves its input alone */
    assert_int_equal(lm->n_saved, 1);
    assert_int_equal(vs_model_head(&m)->saved[lm->first_saved].category, VS_CAT_ACTIVATIONS);
  }
}

/* The loss tests' GPT: s 1024, b 2, h 2048, 16 heads, GPT-2's vocabulary
 * (build_gpt's, with room for sets such as the framework). */
static const char loss_gpt[] =
    "[model]\narch = gpt\nlayers = 2\nhidden = 2048\nheads = 16\n"
    "vocab = 50257\nseq_len = 1024\n[training]\nmicro_batch = 2\n";

/* fp32 logits: logits.float() returns them as they are, so the loss's
 * forward holds the logits alone (4sbV) beside its saved log-softmax,
 * under Megatron-LM's in-place loss nothing beside the softmax (the
 * logits are that buffer); backward as in 16 bits. */
static void test_fp32_loss_makes_no_copy(void **state)
{
  static const char *const megatron[] = {"training.framework=megatron",
                                         "training.precision=fp32"};
  const uint64_t s = 1024, b = 2, h = 2048;
  const vs_op_spec *ce;
  vs_model m;
  uint64_t v;
  (void)state;
  build_gpt(&m, s, b, h, 16, 1, false, "fp32", "flash", "none");
  v = m.vocab_padded;
  ce = op_named(vs_model_head(&m), "cross_entropy");
  assert_int_equal(ce->fwd_temp_bytes, 4 * s * b * v);
  assert_int_equal(ce->bwd_temp_bytes, 8 * s * b * v);
  assert_int_equal(
      vs_block_saved_bytes(vs_model_head(&m), VS_CAT_TEMP, VS_SAVED_ALL),
      4 * s * b * v);
  build_ini(&m, loss_gpt, megatron, 2);
  ce = op_named(vs_model_head(&m), "cross_entropy");
  assert_int_equal(ce->fwd_temp_bytes, 0);
  assert_int_equal(ce->bwd_temp_bytes, 0);
}

/* The loss's kernels, bytes a logit: Megatron-LM's in-place loss casts
 * the 16-bit logits (2 + 4), takes the max (4), subtracts it (8), exp
 * (8), sums (4) and divides (8), and backward scales the softmax (8) and
 * casts the gradient back (4 + 2); PyTorch's F.cross_entropy casts,
 * log_softmax (8), and in backward zeroes nll_loss's gradient (4), runs
 * log_softmax's backward (12) and casts back. fp32 logits cast nothing. */
static void test_loss_kernels(void **state)
{
  static const char *const megatron[] = {"training.framework=megatron"};
  static const char *const fp32[] = {"training.precision=fp32"};
  vs_model m;
  const vs_op_spec *ce;
  double n;
  (void)state;
  build_ini(&m, loss_gpt, megatron, 1);
  ce = op_named(vs_model_head(&m), "cross_entropy");
  n = 2.0 * 1024 * (double)m.vocab_padded;
  assert_op_work(ce, (6 + 32) * n, 6, (8 + 6) * n, 2);
  build_ini(&m, loss_gpt, NULL, 0);
  ce = op_named(vs_model_head(&m), "cross_entropy");
  assert_op_work(ce, (6 + 8) * n, 2, (4 + 12 + 6) * n, 3);
  {
    /* torchtitan's loss_parallel (FSDP2 with tp > 1) over a shard of the
     * vocabulary: amax, subtract, exp, sum, subtract (32), and in
     * backward zeros, exp, sum and scale (32), each with the casts */
    static const char *const lp[] = {"training.framework=fsdp2",
                                     "parallel.tp=2", "parallel.dp=2"};
    double shard;
    build_ini(&m, loss_gpt, lp, 3);
    ce = op_named(vs_model_head(&m), "cross_entropy");
    shard = 2.0 * 1024 * (double)(m.vocab_padded / 2);
    assert_op_work(ce, (6 + 32) * shard, 6, (6 + 32) * shard, 5);
  }
  build_ini(&m, loss_gpt, fp32, 1);
  ce = op_named(vs_model_head(&m), "cross_entropy");
  assert_true(ce->fwd_bytes == 8 * n);
  assert_int_equal(ce->fwd_kernels, 1);
  assert_true(ce->bwd_bytes == 16 * n);
  assert_int_equal(ce->bwd_kernels, 2);
}

/* Megatron-LM's vocab-parallel cross entropy (framework = megatron) works
 * in place on one fp32 copy of the logits, saved as the softmax: the
 * 16-bit logits live only through the loss's forward (2sbV/t of temp
 * there), nothing else is saved, and the gradient needs no new fp32
 * buffer. */
static void test_megatron_inplace_loss(void **state)
{
  static const char *const megatron[] = {"training.framework=megatron",
                                         "parallel.tp=2"};
  const uint64_t s = 1024, b = 2;
  vs_model m;
  const vs_block *head;
  const vs_op_spec *ce = NULL;
  uint64_t v;
  (void)state;
  build_ini(&m, loss_gpt, megatron, 2);
  head = vs_model_head(&m);
  v = m.vocab_padded / 2;
  assert_int_equal(vs_block_saved_bytes(head, VS_CAT_TEMP, VS_SAVED_ALL),
                   4 * s * b * v);
  for (uint32_t i = 0; i < head->n_ops; i++)
    if (strcmp(head->ops[i].name, "cross_entropy") == 0)
      ce = &head->ops[i];
  assert_non_null(ce);
  assert_int_equal(ce->fwd_temp_bytes, 2 * s * b * v);
  assert_int_equal(ce->bwd_temp_bytes, 0);
}

/* torchtitan's loss_parallel (FSDP2 with tp > 1, on by default): one fp32
 * copy more than aten's loss in forward (the shifted logits beside their
 * exp) and in backward (zeros, exp of the log-softmax, their sum); its
 * pipeline schedule (FSDP2, pp > 1) keeps the last stage's 16-bit logits
 * until that micro-batch's backward, as DeepSpeed's does. */
static void test_loss_parallel_and_pipelined_logits(void **state)
{
  static const char ini[] =
      "[model]\narch = llama\nlayers = 4\nhidden = 1024\nheads = 16\n"
      "ffn_hidden = 2816\nvocab = 32000\nseq_len = 1024\n[training]\n"
      "micro_batch = 2\n"
      "framework = fsdp2\nprecision = bf16\n";
  static const char *const tp2[] = {"parallel.tp=2", "parallel.dp=2"};
  static const char *const pp2[] = {"parallel.pp=2", "parallel.dp=2"};
  const uint64_t T = 1024 * 2;
  const vs_op_spec *ce, *lm;
  vs_model m;
  uint64_t v;
  (void)state;
  build_ini(&m, ini, tp2, 2);
  v = m.vocab_padded / 2;
  ce = op_named(vs_model_head(&m), "cross_entropy");
  assert_int_equal(ce->fwd_temp_bytes, (2 + 4 + 4) * T * v);
  assert_int_equal(ce->bwd_temp_bytes, 12 * T * v);
  assert_int_equal(op_named(vs_model_head(&m), "lm_head")->n_saved, 1);
  build_ini(&m, ini, pp2, 2);
  v = m.vocab_padded;
  ce = op_named(vs_model_head(&m), "cross_entropy");
  lm = op_named(vs_model_head(&m), "lm_head");
  assert_int_equal(ce->fwd_temp_bytes, 4 * T * v); /* the copy alone */
  assert_int_equal(ce->bwd_temp_bytes, 8 * T * v);
  assert_int_equal(lm->n_saved, 2);
  assert_int_equal(vs_model_head(&m)->saved[lm->first_saved + 1].bytes, 2 * T * v);
  assert_int_equal(vs_model_head(&m)->saved[lm->first_saved + 1].category, VS_CAT_TEMP);
}

/* FlashAttention has no fp32 kernel: fp32 attention runs SDPA's
 * memory-efficient backend, which takes grouped K and V only expanded to
 * every head, so a GQA layer saves K and V at every head's width; so
 * does torchtitan's, which expands them itself. */
static void test_fp32_flash_expands_grouped_kv(void **state)
{
  static const char ini[] =
      "[model]\narch = llama\nlayers = 2\nhidden = 1024\nheads = 16\n"
      "kv_heads = 4\nffn_hidden = 2816\nvocab = 32000\nseq_len = 1024\n"
      "[training]\n"
      "micro_batch = 2\nattention = flash\n";
  static const char *const fp32[] = {"training.precision=fp32"};
  static const char *const bf16[] = {"training.precision=bf16"};
  const uint64_t T = 1024 * 2, dh = 64;
  vs_model m;
  const vs_op_spec *fa;
  (void)state;
  build_ini(&m, ini, bf16, 1);
  fa = op_named(vs_model_layer(&m, 0), "flash_attn");
  assert_int_equal(vs_model_layer(&m, 0)->saved[fa->first_saved].bytes,
                   2 * T * dh * (16 + 2 * 4));
  build_ini(&m, ini, fp32, 1);
  fa = op_named(vs_model_layer(&m, 0), "flash_attn");
  assert_int_equal(vs_model_layer(&m, 0)->saved[fa->first_saved].bytes,
                   4 * T * dh * (16 + 2 * 16));
  assert_int_equal(fa->bwd_temp_bytes, 4 * T * dh * (16 + 2 * 16));
  {
    /* torchtitan's attention expands K and V (repeat_kv) before SDPA,
     * whose flash kernel saves the copies: in bf16 too (frameworks.md
     * 4.2, "repeat_kv expands K and V to all heads") */
    static const char *const titan[] = {"training.precision=bf16",
                                        "training.framework=fsdp2",
                                        "parallel.dp=2"};
    build_ini(&m, ini, titan, 3);
    fa = op_named(vs_model_layer(&m, 0), "flash_attn");
    assert_int_equal(vs_model_layer(&m, 0)->saved[fa->first_saved].bytes,
                     2 * T * dh * (16 + 2 * 16));
  }
}

/* A head dimension that is not a multiple of 8 (Llama-3B-like: 3200 / 32
 * = 100): SDPA's flash path pads Q, K and V to 104 and keeps them and the
 * padded output (attention.cpp pad_last_dim<8>, post_process_flash_output;
 * the output projection's input is then a copy of the slice, kept by that
 * projection as before). fp32's memory-efficient kernel does not pad. */
static void test_flash_pads_head_dim_to_8(void **state)
{
  static const char ini[] =
      "[model]\narch = llama\nlayers = 2\nhidden = 3200\nheads = 32\n"
      "ffn_hidden = 8640\nvocab = 32000\nseq_len = 1024\n[training]\n"
      "micro_batch = 2\nattention = flash\n";
  static const char *const bf16[] = {"training.precision=bf16"};
  static const char *const fp32[] = {"training.precision=fp32"};
  const uint64_t T = 1024 * 2;
  const vs_block *blk;
  const vs_op_spec *fa;
  vs_model m;
  (void)state;
  build_ini(&m, ini, bf16, 1);
  blk = vs_model_layer(&m, 0);
  fa = op_named(blk, "flash_attn");
  assert_int_equal(fa->n_saved, 3);
  assert_int_equal(blk->saved[fa->first_saved].bytes, 2 * T * 104 * 96);
  assert_int_equal(blk->saved[fa->first_saved + 1].bytes, 2 * T * 104 * 32);
  assert_int_equal(blk->saved[fa->first_saved + 2].bytes, 4 * 2 * 32 * 1024);
  /* the kernel runs at 104: 4 s^2 b heads 104 FLOPs, halved causal */
  tu_assert_close(fa->fwd_flops, 0.5 * 4.0 * 1024.0 * 1024 * 2 * 32 * 104,
                  1e-15);
  /* backward: Q's, K's, V's padded gradients and the output's padded one */
  assert_int_equal(fa->bwd_temp_bytes, 2 * T * 104 * (96 + 32));
  build_ini(&m, ini, fp32, 1);
  fa = op_named(vs_model_layer(&m, 0), "flash_attn");
  assert_int_equal(fa->n_saved, 2);
  assert_int_equal(vs_model_layer(&m, 0)->saved[fa->first_saved].bytes,
                   4 * T * 100 * 96);
}

/* Under autocast the output layer's backward is three autograd nodes,
 * each freeing what it received before the next runs, the GEMM's also
 * what it saved: the GEMM's (the logits' gradient held while the input's
 * and the weight's 16-bit ones are made: 2Th + 2TV + 2Vh), the weight
 * cast's (the input's gradient, the weight's and its fp32 copy, 2 + 4 B a
 * weight, once the saved 16-bit input (2Th) and weight (2Vh) are gone:
 * 4Vh net of them) and the input cast's. The op holds the largest moment,
 * not their sum: at GPT-2's vocabulary and h = 1024, the weight cast's
 * with T = 512 tokens, the GEMM's with T = 2048; without autocast the
 * GEMM's alone. */
static void test_autocast_head_backward_holds_one_node(void **state)
{
  const uint64_t h = 1024;
  vs_model m;
  const vs_op_spec *head;
  uint64_t V, T;
  (void)state;
  build_gpt(&m, 256, 2, h, 16, 1, false, "amp_bf16", "flash", "none");
  V = m.vocab_padded;
  head = op_named(vs_model_head(&m), "lm_head");
  assert_int_equal(head->bwd_temp_bytes, 4 * V * h);
  build_gpt(&m, 1024, 2, h, 16, 1, false, "amp_bf16", "flash", "none");
  T = 2048;
  head = op_named(vs_model_head(&m), "lm_head");
  assert_int_equal(head->bwd_temp_bytes, 2 * T * h + 2 * T * V + 2 * V * h);
  build_gpt(&m, 1024, 2, h, 16, 1, false, "bf16", "flash", "none");
  head = op_named(vs_model_head(&m), "lm_head");
  assert_int_equal(head->bwd_temp_bytes, 2 * T * h + 2 * T * V);
}

/* A fused cross entropy ([training] fused_cross_entropy, Liger Kernel's)
 * writes the logits' gradient into their own 16-bit buffer during forward:
 * the head keeps the logits (2sbV) and nothing in fp32, the loss needs no
 * workspace either way, and the output layer's backward reads the
 * gradient where it is. */
static void test_fused_cross_entropy(void **state)
{
  static const char *const fused[] = {"training.fused_cross_entropy=true"};
  const uint64_t s = 1024, b = 2, h = 2048;
  vs_model m;
  const vs_block *head;
  uint64_t v;
  (void)state;
  build_gpt(&m, s, b, h, 16, 1, false, "bf16", "flash", "none");
  v = m.vocab_padded;
  assert_int_equal(
      vs_block_saved_bytes(vs_model_head(&m), VS_CAT_TEMP, VS_SAVED_ALL),
      4 * s * b * v);
  build_ini(&m, loss_gpt, fused, 1);
  head = vs_model_head(&m);
  assert_int_equal(vs_block_saved_bytes(head, VS_CAT_TEMP, VS_SAVED_ALL),
                   2 * s * b * v);
  for (uint32_t i = 0; i < head->n_ops; i++) {
    const vs_op_spec *op = &head->ops[i];
    if (strcmp(op->name, "cross_entropy") == 0) {
      assert_int_equal(op->fwd_temp_bytes, 0);
      assert_int_equal(op->bwd_temp_bytes, 0);
      assert_int_equal(op->n_saved, 0);
    }
    if (strcmp(op->name, "lm_head") == 0)
      assert_int_equal(op->bwd_temp_bytes, 2 * s * b * h);
  }
}

/* The size guard counts the s x s attention scores only where they exist:
 * a 4-layer GPT (h 512, 8 heads, ffn 2048) at s = 40M tokens keeps about
 * 4 s (40 h + 8 f) = 5.9e12 bytes per layer with flash, far below the
 * 1e18 limit, but 4 s (5 a s) = 2.6e17 more per layer eager: 1.05e18. */
static void test_size_guard_follows_attention(void **state)
{
  static const char ini[] =
      "[model]\narch = gpt\nlayers = 4\nhidden = 512\nheads = 8\n"
      "vocab = 1000\nseq_len = 40000000\n"
      "[training]\nattention = flash\n";
  static const char *const eager[] = {"training.attention=eager"};
  vs_workload wl;
  vs_model m;
  vs_error err;
  (void)state;
  build_ini(&m, ini, NULL, 0); /* flash: builds */
  vs_error_clear(&err);
  assert_int_equal(tu_load_workload(&wl, ini, eager, 1, 0, &err), 0);
  assert_int_equal(vs_model_build(&wl, &m, &err), VS_EINPUT);
  assert_non_null(strstr(err.msg, "too large to simulate"));
}

/* The guard counts what the model allocates (hunt: both wrapped 64-bit
 * byte counts, a UBSan overflow in the allocator): the vocabulary padded
 * to vocab_divisible_by (1 -> 1e6: fp32 logits of 5e12 tokens, seq 5e6 x
 * micro_batch 1e6, x 1e6 x 4 B = 2e19 bytes) and the shared experts' MLP
 * (1e5 of width 1e7: 1e7 tokens x 1e12 x 4 B a tensor); one shared
 * expert, or no padding, builds. */
static void test_size_guard_counts_padding_and_shared_experts(void **state)
{
  static const char padded[] =
      "[model]\narch = gpt\nlayers = 1\nhidden = 1\nheads = 1\n"
      "vocab = 1\nvocab_divisible_by = 1000000\nseq_len = 5000000\n"
      "[training]\nmicro_batch = 1000000\n";
  static const char shared[] =
      "[model]\narch = llama\nlayers = 2\nhidden = 1\nheads = 1\n"
      "ffn_hidden = 1\nvocab = 1\nseq_len = 1000\nexperts = 2\n"
      "experts_per_token = 1\nshared_experts = 100000\n"
      "shared_expert_ffn_hidden = 10000000\n"
      "[training]\nmicro_batch = 10000\n";
  /* heads far wider than hidden (review: the parameter count wrapped
   * 64 bits, about 2e19 of them) */
  static const char wide[] =
      "[model]\narch = llama\nlayers = 100000\nhidden = 10000\n"
      "heads = 100000\nhead_dim = 100000\nkv_heads = 1\nffn_hidden = 100\n"
      "vocab = 100\nseq_len = 100\n";
  static const char *const unpadded[] = {"model.vocab_divisible_by=1"};
  static const char *const one[] = {"model.shared_experts=1"};
  static const char *const narrow[] = {"model.head_dim=1"};
  const char *const ini[] = {padded, shared, wide};
  const char *const *fix[] = {unpadded, one, narrow};
  vs_workload wl;
  vs_model m;
  vs_error err;
  (void)state;
  for (size_t k = 0; k < 3; k++) {
    vs_error_clear(&err);
    assert_int_equal(tu_load_workload(&wl, ini[k], NULL, 0, 0, &err), 0);
    assert_int_equal(vs_model_build(&wl, &m, &err), VS_EINPUT);
    assert_non_null(strstr(err.msg, "too large to simulate"));
    build_ini(&m, ini[k], fix[k], 1);
  }
}

/* The guard counts every micro-batch a stage may keep (hunt: GPipe keeps
 * the step's all, and 1000 of a 320-layer model of 6e14 bytes a layer
 * passed 2^63 in the allocator's signed counters) and the multi-token
 * prediction depths as layers: a micro-batch of 4 layers at s = 40M
 * keeps 4 x 4 s (40 h + 8 f) = 2.4e13 bytes (h 512, f 2048); 16000 of
 * them (global_batch) 3.8e17, below 1e18, and with 8 MTP depths (12
 * layers) 1.2e18, over it under GPipe; 1F1B on the same 2 stages keeps
 * at most 2 x pp of them, and builds. A block of more weights than the
 * builder keeps names the file and the keys that grow it. */
static void test_size_guard_counts_microbatches_and_depths(void **state)
{
  static const char ini[] =
      "[model]\narch = gpt\nlayers = 4\nhidden = 512\nheads = 8\n"
      "vocab = 1000\nseq_len = 40000000\n"
      "[training]\nglobal_batch = 2\n";
  static const char *const many[] = {"training.global_batch=16000"};
  static const char *const deeper[] = {
      "model.mtp_layers=8", "training.global_batch=16000", "parallel.pp=2",
      "parallel.schedule=gpipe"};
  static const char moe[] =
      "[model]\narch = llama\nlayers = 2\nhidden = 64\nheads = 4\n"
      "ffn_hidden = 128\nvocab = 100\nseq_len = 8\nexperts = 16000\n"
      "experts_per_token = 1\nmtp_layers = 3\n";
  vs_workload wl;
  vs_model m;
  vs_error err;
  (void)state;
  build_ini(&m, ini, NULL, 0);
  build_ini(&m, ini, many, 1);
  vs_error_clear(&err);
  assert_int_equal(tu_load_workload(&wl, ini, deeper, 4, 2, &err), 0);
  assert_int_equal(vs_model_build(&wl, &m, &err), VS_EINPUT);
  assert_non_null(strstr(err.msg, "over the 16000 micro-batches a stage may "
                                  "keep"));
  assert_non_null(strstr(err.msg, "each must stay below 1e+18 bytes; lower "
                                  "[model] layers"));
  vs_error_clear(&err);
  assert_int_equal(tu_load_workload(&wl, ini, deeper, 3, 2, &err), 0);
  assert_int_equal(vs_model_build(&wl, &m, &err), 0); /* 1F1B */
  vs_model_fini(&m);
  vs_error_clear(&err);
  assert_int_equal(tu_load_workload(&wl, moe, NULL, 0, 0, &err), 0);
  assert_int_equal(vs_model_build(&wl, &m, &err), VS_EINPUT);
  assert_non_null(strstr(err.msg, "more than 65535 parameter tensors in one "
                                  "block ([model] experts = 16000, "
                                  "mtp_layers = 3"));
}

/* ------------------------------------------------------------------------
 * Block kinds that grow
 * ------------------------------------------------------------------------ */

static const char tiny_gpt[] =
    "[model]\narch = gpt\nlayers = 3\nhidden = 64\nheads = 4\n"
    "vocab = 128\nseq_len = 16\n";

/* A kind grows past any fixed capacity: 1000 more ops of 5 saved tensors
 * each (the old builder kept at most 3 per op and dropped the rest) keep
 * every tensor, in op order, and the block's sums follow. */
static void test_block_grows(void **state)
{
  vs_model m;
  vs_block *b;
  uint32_t kind;
  uint64_t before, added = 0;
  uint32_t ops0, saved0;
  vs_error err;
  (void)state;
  vs_error_clear(&err);
  build_ini(&m, tiny_gpt, NULL, 0);
  assert_int_equal(m.n_kinds, 3);
  assert_int_equal(vs_model_add_kind(&m, vs_model_layer(&m, 0), "wide", &kind,
                                     &b, &err),
                   0);
  assert_int_equal(kind, 3);
  assert_string_equal(b->name, "wide");
  assert_int_equal(b->role, VS_ROLE_LAYER);
  before = vs_block_saved_bytes(b, -1, VS_SAVED_ALL);
  ops0 = b->n_ops;
  saved0 = b->n_saved;
  for (uint32_t i = 0; i < 1000; i++) {
    vs_op_spec *op = vs_block_add_op(b, "extra", &err);
    assert_non_null(op);
    for (uint64_t k = 1; k <= 5; k++) {
      assert_int_equal(vs_block_save(b, op,
                                     (vs_saved){.bytes = k * 8,
                                                .dtype = VS_DTYPE_BF16,
                                                .category = VS_CAT_ACTIVATIONS},
                                     &err),
                       0);
      added += k * 8;
    }
    assert_int_equal(op->n_saved, 5);
    assert_int_equal(op->first_saved, saved0 + 5 * i);
  }
  assert_int_equal(b->n_ops, ops0 + 1000);
  assert_int_equal(b->n_saved, saved0 + 5000);
  assert_int_equal(b->saved[saved0 + 5 * 999 + 4].bytes, 40);
  assert_int_equal(vs_block_saved_bytes(b, -1, VS_SAVED_ALL), before + added);
  assert_int_equal(vs_model_max_saved(&m), saved0 + 5000);
  /* the builder's dense kind is untouched by its copy's growth */
  assert_int_equal(vs_model_layer(&m, 0)->n_saved, saved0);
  /* layer 1 becomes the new kind; the others stay dense */
  assert_int_equal(vs_model_set_layer_kind(&m, 1, kind, &err), 0);
  assert_ptr_equal(vs_model_layer(&m, 1), &m.kinds[kind]);
  assert_ptr_equal(vs_model_block(&m, 2), &m.kinds[kind]);
  assert_string_equal(vs_model_layer(&m, 2)->name, "dense");
  refresh_model(&m);
}

/* Errors instead of silent drops: a tensor saved by an op that is not the
 * block's newest, a layer made an embedding or out of range, too many
 * kinds. */
static void test_block_misuse_is_refused(void **state)
{
  vs_model m;
  vs_block *b;
  vs_op_spec *first;
  uint32_t kind;
  vs_error err;
  (void)state;
  vs_error_clear(&err);
  build_ini(&m, tiny_gpt, NULL, 0);
  assert_int_equal(vs_model_add_kind(&m, vs_model_layer(&m, 0), "x", &kind, &b,
                                     &err),
                   0);
  first = &b->ops[0];
  assert_int_equal(vs_block_save(b, first,
                                 (vs_saved){.bytes = 8,
                                            .category = VS_CAT_ACTIVATIONS},
                                 &err),
                   VS_EINPUT);
  assert_non_null(strstr(err.msg, "not the newest op"));
  vs_error_clear(&err);
  assert_int_equal(vs_model_set_layer_kind(&m, 0, 0, &err), VS_EINPUT);
  assert_non_null(strstr(err.msg, "must be a layer"));
  vs_error_clear(&err);
  assert_int_equal(vs_model_set_layer_kind(&m, 3, kind, &err), VS_EINPUT);
  vs_error_clear(&err);
  assert_int_equal(vs_model_set_layer_kind(&m, 0, 99, &err), VS_EINPUT);
  while (m.n_kinds < VS_MODEL_KINDS_MAX) {
    vs_error_clear(&err);
    assert_int_equal(vs_model_add_kind(&m, vs_model_embed(&m), "e", &kind, &b,
                                       &err),
                     0);
  }
  vs_error_clear(&err);
  assert_int_equal(vs_model_add_kind(&m, vs_model_embed(&m), "e", &kind, &b,
                                     &err),
                   VS_EINPUT);
  assert_int_equal(m.n_kinds, VS_MODEL_KINDS_MAX);
  refresh_model(&m);
}

/* Parameter tensors carry dtype, trainable flag and sharding group; freezing
 * by prefix reaches exactly the named tensors. */
static void test_param_tensor_attributes(void **state)
{
  const char *const fp32[] = {"training.precision=fp32"};
  vs_model m;
  vs_block *b;
  uint32_t kind;
  vs_error err;
  const vs_block *layer;
  (void)state;
  vs_error_clear(&err);
  build_ini(&m, tiny_gpt, NULL, 0);
  layer = vs_model_layer(&m, 0);
  for (uint32_t i = 0; i < layer->n_params; i++) {
    assert_int_equal(layer->params[i].dtype, VS_DTYPE_BF16);
    assert_true(layer->params[i].trainable);
    assert_int_equal(layer->params[i].shard_group, VS_GROUP_DP);
  }
  assert_int_equal(vs_model_add_kind(&m, layer, "f", &kind, &b, &err), 0);
  /* gpt: qkv.weight, qkv.bias ... : "qkv" freezes 2, "nothing" none */
  assert_int_equal(vs_block_freeze(b, "qkv"), 2);
  assert_int_equal(vs_block_freeze(b, "nothing"), 0);
  for (uint32_t i = 0; i < b->n_params; i++)
    assert_int_equal(b->params[i].trainable,
                     strncmp(b->params[i].name, "qkv", 3) != 0);
  refresh_model(&m);
  build_ini(&m, tiny_gpt, fp32, 1);
  assert_int_equal(vs_model_layer(&m, 0)->params[0].dtype, VS_DTYPE_FP32);
}

/* Two Llama layers, layer 0 frozen (method = frozen). */
static const char frozen_llama[] =
    "[model]\narch = llama\nlayers = 2\nhidden = 256\nheads = 8\n"
    "kv_heads = 2\nffn_hidden = 512\nvocab = 1000\nseq_len = 128\n"
    "[finetune]\nmethod = frozen\ntrainable_layers = 1\n";

/* A frozen base's weights in a format of its own (method = frozen, layer
 * 0 frozen): each matmul over NF4 weights, or over FP8 ones with 16-bit
 * GEMMs, dequantizes one weight at a time whole to bf16, forward and
 * backward: a temporary of 2 B times its largest such weight
 * (bitsandbytes MatMul4Bit; torchao's Float8Tensor linear); over int8
 * ones in backward only (MatMul8bitLt's input gradient). FP8 GEMMs use an
 * FP8 weight as it is; the trained layer is untouched. */
static void test_dequantized_base_workspace(void **state)
{
  const char *const bf16[] = {"finetune.base_dtype=bf16"};
  const char *const fp8[] = {"finetune.base_dtype=fp8"};
  const char *const nf4[] = {"finetune.base_dtype=nf4"};
  const char *const int8[] = {"finetune.base_dtype=int8"};
  const char *const fp8_gemm[] = {"finetune.base_dtype=fp8",
                                  "training.precision=fp8"};
  const char *const bf16_gemm[] = {"finetune.base_dtype=bf16",
                                   "training.precision=fp8"};
  vs_model m0, m1, m2, m3, m4, m5;
  const vs_block *b0, *b1, *b2, *b3, *b4, *b5;
  uint32_t with_weights = 0;
  (void)state;
  build_ini(&m0, frozen_llama, bf16, 1);
  build_ini(&m1, frozen_llama, fp8, 1);
  build_ini(&m2, frozen_llama, nf4, 1);
  build_ini(&m3, frozen_llama, fp8_gemm, 2);
  build_ini(&m4, frozen_llama, bf16_gemm, 2);
  build_ini(&m5, frozen_llama, int8, 1);
  b0 = vs_model_layer(&m0, 0);
  b1 = vs_model_layer(&m1, 0);
  b2 = vs_model_layer(&m2, 0);
  b3 = vs_model_layer(&m3, 0);
  b4 = vs_model_layer(&m4, 0);
  b5 = vs_model_layer(&m5, 0);
  for (uint32_t i = 0; i < b1->n_ops; i++) {
    const vs_op_spec *op = &b1->ops[i];
    uint64_t largest = 0;
    for (uint32_t p = op->first_param; p < op->first_param + op->n_params;
         p++)
      if (b1->params[p].dtype == VS_DTYPE_FP8_SCALED &&
          b1->params[p].rows * b1->params[p].cols > largest)
        largest = b1->params[p].rows * b1->params[p].cols;
    with_weights += largest > 0;
    assert_int_equal(op->fwd_temp_bytes - b0->ops[i].fwd_temp_bytes,
                     2 * largest);
    assert_int_equal(op->bwd_temp_bytes - b0->ops[i].bwd_temp_bytes,
                     2 * largest);
    assert_int_equal(b2->ops[i].fwd_temp_bytes, op->fwd_temp_bytes);
    assert_int_equal(b5->ops[i].fwd_temp_bytes, b0->ops[i].fwd_temp_bytes);
    assert_int_equal(b5->ops[i].bwd_temp_bytes, op->bwd_temp_bytes);
    assert_int_equal(b3->ops[i].fwd_temp_bytes, b4->ops[i].fwd_temp_bytes);
    assert_int_equal(b3->ops[i].bwd_temp_bytes, b4->ops[i].bwd_temp_bytes);
  }
  assert_true(with_weights >= 4); /* qkv, o, the MLP's */
  for (uint32_t i = 0; i < vs_model_layer(&m1, 1)->n_ops; i++)
    assert_int_equal(vs_model_layer(&m1, 1)->ops[i].fwd_temp_bytes,
                     vs_model_layer(&m0, 1)->ops[i].fwd_temp_bytes);
}

/* Dequantizing a weight whole is a kernel of its own (time-model audit:
 * it took no time): each op over NF4 weights moves, forward and backward,
 * every such weight's stored bytes (statistics included) plus its 2-byte
 * copy, in one kernel a weight, beyond what the bf16 base moves; over
 * int8 weights in backward only. */
static void test_dequantized_base_kernels(void **state)
{
  const char *const bf16[] = {"finetune.base_dtype=bf16"};
  const char *const nf4[] = {"finetune.base_dtype=nf4"};
  const char *const int8[] = {"finetune.base_dtype=int8"};
  vs_model m0, m1, m2;
  const vs_block *b0, *b1, *b2;
  uint32_t weights_seen = 0;
  (void)state;
  build_ini(&m0, frozen_llama, bf16, 1);
  build_ini(&m1, frozen_llama, nf4, 1);
  build_ini(&m2, frozen_llama, int8, 1);
  b0 = vs_model_layer(&m0, 0);
  b1 = vs_model_layer(&m1, 0);
  b2 = vs_model_layer(&m2, 0);
  for (uint32_t i = 0; i < b1->n_ops; i++) {
    const vs_op_spec *op = &b1->ops[i];
    double nf4_bytes = 0, int8_bytes = 0;
    uint32_t n = 0;
    for (uint32_t p = op->first_param; p < op->first_param + op->n_params;
         p++) {
      const vs_param_tensor *w = &b1->params[p];
      if (w->dtype != VS_DTYPE_NF4)
        continue;
      nf4_bytes += (double)(vs_dtype_tensor_bytes(VS_DTYPE_NF4, w->rows,
                                                  w->cols) +
                            2 * w->rows * w->cols);
      int8_bytes += (double)(vs_dtype_tensor_bytes(VS_DTYPE_INT8_ROWWISE,
                                                   w->rows, w->cols) +
                             2 * w->rows * w->cols);
      n++;
    }
    weights_seen += n;
    tu_assert_close(op->fwd_side.bytes - b0->ops[i].fwd_side.bytes,
                    nf4_bytes, 0);
    tu_assert_close(op->bwd_side.bytes - b0->ops[i].bwd_side.bytes,
                    nf4_bytes, 0);
    tu_assert_close(op->fwd_bytes - b0->ops[i].fwd_bytes, nf4_bytes, 0);
    assert_int_equal(op->fwd_side.kernels - b0->ops[i].fwd_side.kernels, n);
    assert_int_equal(op->bwd_side.kernels - b0->ops[i].bwd_side.kernels, n);
    tu_assert_close(b2->ops[i].fwd_side.bytes, b0->ops[i].fwd_side.bytes, 0);
    tu_assert_close(b2->ops[i].bwd_side.bytes - b0->ops[i].bwd_side.bytes,
                    int8_bytes, 0);
  }
  assert_true(weights_seen >= 4); /* qkv, o, the MLP's */
}

/* The 16-bit weight copies autocast saves in one layer: 2 B for every
 * element of its GEMMs' matrix weights. */
static uint64_t copy_bytes(const vs_block *blk)
{
  uint64_t bytes = 0;
  for (uint32_t i = 0; i < blk->n_saved; i++)
    if (blk->saved[i].weight_copy == VS_COPY_AUTOCAST)
      bytes += blk->saved[i].bytes;
  return bytes;
}

/* Autocast over an fp32 BERT layer (eager, dropout) keeps what
 * shared/reference/frameworks.md 1.3 derives from PyTorch's op lists:
 * 42sbh + 7as^2b (fp32 LN inputs 8, three 16-bit casts of the LN output
 * for Q, K and V 6, Q and K 4, V 2, out-proj input 2, two dropout masks
 * 2, FFN 2 + 8 + 8; the fp32 softmax output 4as^2b, its mask 1 and the
 * probs' 16-bit cast 2), against 34sbh + 5as^2b for a 16-bit model; and
 * beside them the 16-bit copy of each of its 12h^2 GEMM weights. The
 * weights are fp32. */
static void test_autocast_bert_layer(void **state)
{
  uint64_t s = 512, b = 4, h = 1024, a = 16;
  char ini[512];
  vs_model m;
  const vs_block *blk;
  (void)state;
  snprintf(ini, sizeof ini,
           "[model]\narch = bert\nlayers = 2\nhidden = %llu\nheads = %llu\n"
           "vocab = 30522\nseq_len = %llu\n[training]\nmicro_batch = %llu\n"
           "precision = amp_bf16\nattention = eager\n",
           (unsigned long long)h, (unsigned long long)a, (unsigned long long)s,
           (unsigned long long)b);
  build_ini(&m, ini, NULL, 0);
  blk = vs_model_layer(&m, 0);
  assert_int_equal(copy_bytes(blk), 2 * 12 * h * h);
  assert_int_equal(vs_block_saved_bytes(blk, -1, VS_SAVED_KEPT_BY_SELECTIVE) -
                       copy_bytes(blk),
                   42 * s * b * h);
  assert_int_equal(
      vs_block_saved_bytes(blk, -1, VS_SAVED_ALL) -
          vs_block_saved_bytes(blk, -1, VS_SAVED_KEPT_BY_SELECTIVE),
      7 * a * s * s * b);
  assert_int_equal(m.param_elem_bytes, 4);
  assert_int_equal(m.act_elem_bytes, 2);
  for (uint32_t i = 0; i < blk->n_params; i++)
    assert_int_equal(blk->params[i].dtype, VS_DTYPE_FP32);
  /* the fp32 residual stream is what a layer receives and checkpoints */
  assert_int_equal(blk->input_bytes, 4 * s * b * h);
}

/* Autocast over an fp32 Llama layer (flash, GQA): the fp32 RMSNorm inputs
 * (2 x 4sbh), Hugging Face's separate q, k, v linears each saving its own
 * 16-bit cast of the norm output (3 x 2sbh) and gate, up theirs (2 x
 * 2sbh); the rest as at 16 bits; and the weight copies. Each weight's
 * backward holds its 16-bit gradient and the fp32 copy ToCopyBackward
 * makes (6 B a weight, the op's largest). */
static void test_autocast_llama_layer(void **state)
{
  uint64_t s = 2048, b = 1, h = 4096, a = 32, k = 8, f = 11008, d = h / a;
  const char *const amp[] = {"training.precision=amp_bf16"};
  vs_model m16, m;
  const vs_block *blk, *b16;
  uint64_t expect;
  (void)state;
  build_llama(&m16, s, b, h, a, k, f, 1);
  build_ini(&m, "[model]\narch = llama\nlayers = 2\nhidden = 4096\n"
                "heads = 32\nkv_heads = 8\nffn_hidden = 11008\n"
                "vocab = 32000\nseq_len = 2048\n",
            amp, 1);
  blk = vs_model_layer(&m, 0);
  b16 = vs_model_layer(&m16, 0);
  expect = 2 * 4 * s * b * h                  /* fp32 RMSNorm inputs */
           + 3 * 2 * s * b * h                /* q, k, v casts */
           + 2 * s * b * d * (a + 2 * k)      /* Q, K, V */
           + 4 * b * a * s                    /* fp32 LSE */
           + 2 * s * b * h                    /* out-proj input */
           + 2 * 2 * s * b * h                /* gate, up casts */
           + 8 * s * b * f;                   /* SwiGLU tensors */
  assert_int_equal(
      vs_block_saved_bytes(blk, -1, VS_SAVED_ALL) - copy_bytes(blk), expect);
  assert_int_equal(copy_bytes(blk),
                   2 * (h * d * (a + 2 * k) + h * h + 3 * h * f));
  assert_int_equal(copy_bytes(b16), 0);
  /* q, k and v are separate linears: their backward holds one weight's
   * gradients (q's, h x h) at a time, beside the fp32 gradient of the
   * norm output */
  assert_int_equal(op_named(blk, "qkv_proj")->bwd_temp_bytes -
                       op_named(b16, "qkv_proj")->bwd_temp_bytes,
                   4 * s * b * h + 6 * h * h);
  /* down's backward: its input's gradient as at 16 bits, plus its
   * weight's 16-bit and fp32 gradients */
  assert_int_equal(op_named(blk, "mlp_down")->bwd_temp_bytes -
                       op_named(b16, "mlp_down")->bwd_temp_bytes,
                   6 * f * h);
  /* the same FLOPs: autocast changes dtypes, not the work */
  tu_assert_close(op_named(blk, "mlp_down")->fwd_flops,
                  op_named(b16, "mlp_down")->fwd_flops, 1e-15);
}

/* framework = hf builds Hugging Face's eager modules: LlamaRMSNorm (and
 * under fsdp2 torchtitan's RMSNorm) keeps its input's fp32 copy (the
 * fp32 input itself under autocast) and the normalized tensor in the
 * input's dtype, 4 + 2 or 4 + 4 bytes an element
 * where a fused norm keeps its input (2 or 4); GPT-2's NewGELUActivation
 * keeps x, tanh's output, 0.5x and 1 + tanh: 4 x 2 bytes, or under
 * autocast x's fp32 copy, the two tanh tensors in fp32 and 0.5x, 14,
 * where F.gelu keeps x (2). BERT's nn.LayerNorm and F.gelu are fused. */
static void test_hf_modules(void **state)
{
  static const char llama[] =
      "[model]\narch = llama\nlayers = 2\nhidden = 256\nheads = 4\n"
      "ffn_hidden = 512\nvocab = 1000\nseq_len = 128\n";
  static const char gpt[] =
      "[model]\narch = gpt\nlayers = 2\nhidden = 256\nheads = 4\n"
      "vocab = 1000\nseq_len = 128\n";
  static const char bert[] =
      "[model]\narch = bert\nlayers = 2\nhidden = 256\nheads = 4\n"
      "vocab = 1000\nseq_len = 128\n";
  const char *const plain_bf16[] = {"training.precision=bf16"};
  const char *const hf_bf16[] = {"training.framework=hf",
                                 "training.precision=bf16"};
  const char *const plain_amp[] = {"training.precision=amp_bf16"};
  const char *const hf_amp[] = {"training.framework=hf"};
  const uint64_t T = 128, h = 256, f = 1024;
  vs_model a, b, c, e;
  (void)state;
  build_ini(&a, llama, plain_bf16, 1);
  build_ini(&b, llama, hf_bf16, 2);
  build_ini(&c, llama, plain_amp, 1);
  build_ini(&e, llama, hf_amp, 1);
  assert_int_equal(layer0_saved(&b) -
                       layer0_saved(&a),
                   2 * (4 + 2 - 2) * T * h);
  {
    /* torchtitan's RMSNorm (framework = fsdp2) is Python ops too */
    const char *const titan[] = {"training.framework=fsdp2", "parallel.dp=2",
                                 "training.precision=bf16"};
    vs_model t;
    const char *const compiled[] = {"training.framework=fsdp2",
                                    "parallel.dp=2", "training.precision=bf16",
                                    "training.kernels=fused"};
    build_ini(&t, llama, titan, 3);
    assert_int_equal(layer0_saved(&t) - layer0_saved(&a),
                     2 * (4 + 2 - 2) * T * h);
    /* compiled (kernels = fused), it saves what a fused norm does */
    build_ini(&t, llama, compiled, 4);
    assert_int_equal(layer0_saved(&t), layer0_saved(&a));
  }
  assert_int_equal(layer0_saved(&e) -
                       layer0_saved(&c),
                   2 * (4 + 4 - 4) * T * h);
  build_ini(&a, gpt, plain_bf16, 1);
  build_ini(&b, gpt, hf_bf16, 2);
  build_ini(&c, gpt, plain_amp, 1);
  build_ini(&e, gpt, hf_amp, 1);
  assert_int_equal(layer0_saved(&b) -
                       layer0_saved(&a),
                   (8 - 2) * T * f);
  assert_int_equal(layer0_saved(&e) -
                       layer0_saved(&c),
                   (14 - 2) * T * f);
  /* NewGELU's kernels, as torch.profiler lists them (layer.c
   * new_gelu_kernels): 8 forward moving 18 x 2 bytes an element, 11
   * backward moving 28 x 2; under autocast 9 + the down projection's
   * cast (5 x 2 + 15 x 4 + 6) and 14 + its cast back (12 x 2 + 22 x 4 +
   * 6); F.gelu one kernel each way */
  assert_op_work(op_named(vs_model_layer(&b, 0), "gelu"),
                 (double)(18 * 2 * T * f), 8, (double)(28 * 2 * T * f), 11);
  assert_op_work(op_named(vs_model_layer(&e, 0), "gelu"),
                 (double)((5 * 2 + 15 * 4 + 6) * T * f), 10,
                 (double)((12 * 2 + 22 * 4 + 6) * T * f), 15);
  assert_int_equal(op_named(vs_model_layer(&a, 0), "gelu")->fwd_kernels, 1);
  assert_int_equal(op_named(vs_model_layer(&a, 0), "gelu")->bwd_kernels, 1);
  {
    /* compiled (kernels = fused), NewGELU is one fused kernel saving x */
    const char *const compiled[] = {"training.framework=hf",
                                    "training.precision=bf16",
                                    "training.kernels=fused"};
    vs_model t;
    build_ini(&t, gpt, compiled, 3);
    assert_int_equal(op_named(vs_model_layer(&t, 0), "gelu")->fwd_kernels,
                     1);
    assert_true(op_named(vs_model_layer(&t, 0), "gelu")->fwd_bytes ==
                op_named(vs_model_layer(&a, 0), "gelu")->fwd_bytes);
    assert_int_equal(vs_block_saved_bytes(
                         vs_model_layer(&t, 0), -1, VS_SAVED_ALL) -
                         layer0_saved(&a),
                     0);
  }
  build_ini(&a, bert, plain_amp, 1);
  build_ini(&b, bert, hf_amp, 1);
  assert_int_equal(layer0_saved(&b),
                   layer0_saved(&a));
}

/* kernels = eager prices a Llama layer's element-wise work as eager
 * PyTorch's operators (README "Fused and eager kernels"; T tokens, h
 * hidden, f FFN width, 16-bit activations, 4 heads of q and of k):
 * - RMSNorm: 36 T h bytes in 8 kernels forward (its two casts included),
 *   92 T h in 16 backward; 28 and 92 in 6 and 14 over autocast's fp32
 *   residual; the fused norm moves 2 x 2 and 3 x 2;
 * - fused, the rotary embedding is Megatron-LM's one kernel a tensor each
 *   way (2 x 2 bytes), and each residual add a kernel, as eager;
 * - the rotary embedding of q and k (2 T h elements): with torch.chunk
 *   (framework none) 10 x 2 bytes each way, 5 kernels a tensor; Hugging
 *   Face's slices 20 forward and 30 backward in 5 and 9, or with
 *   autocast's fp32 cos and sin 36 and 56 in 6 and 12; torchtitan's
 *   complex product 16 + 2 x 2 bytes in 3;
 * - each residual add reads both and writes the sum (3 x 2 T h, one
 *   kernel); backward sums the residual's two gradients (3 x 2 T h);
 * - SwiGLU's product reads both factors (3 x 2 T f) and its backward is a
 *   kernel a factor (12 T f).
 * GPT's LayerNorm is one kernel either way. */
static void test_eager_kernels(void **state)
{
  static const char llama[] =
      "[model]\narch = llama\nlayers = 2\nhidden = 256\nheads = 4\n"
      "ffn_hidden = 512\nvocab = 1000\nseq_len = 128\n"
      "[training]\nprecision = bf16\n";
  const char *const eager[] = {"training.kernels=eager"};
  const char *const eager_amp[] = {"training.kernels=eager",
                                   "training.precision=amp_bf16"};
  const char *const titan[] = {"training.framework=fsdp2", "parallel.dp=2"};
  const char *const hf[] = {"training.framework=hf"};
  const char *const hf_amp[] = {"training.framework=hf",
                                "training.precision=amp_bf16"};
  const double T = 128, h = 256, f = 512;
  vs_model fused, m, amp, tt, h16, h32;
  const vs_block *l;
  (void)state;
  build_ini(&fused, llama, NULL, 0);
  build_ini(&m, llama, eager, 1);
  build_ini(&amp, llama, eager_amp, 2);
  build_ini(&tt, llama, titan, 2);
  build_ini(&h16, llama, hf, 1);
  build_ini(&h32, llama, hf_amp, 2);
  l = vs_model_layer(&fused, 0);
  assert_true(op_named(l, "norm1")->fwd_bytes == 4 * T * h);
  assert_true(op_named(l, "qkv_proj")->fwd_eager.bytes == 4 * 2 * T * h);
  assert_int_equal(op_named(l, "qkv_proj")->fwd_eager.kernels, 2);
  assert_true(op_named(l, "qkv_proj")->bwd_side.bytes == 4 * 2 * T * h);
  assert_int_equal(op_named(l, "qkv_proj")->bwd_side.kernels, 2);
  assert_true(op_named(l, "attn_out_proj")->fwd_eager.bytes == 6 * T * h);
  assert_int_equal(op_named(l, "attn_out_proj")->fwd_eager.kernels, 1);
  assert_true(op_named(l, "attn_out_proj")->bwd_side.bytes == 6 * T * h);
  assert_true(op_named(l, "mlp_down")->fwd_eager.bytes == 6 * T * h);
  l = vs_model_layer(&m, 0);
  assert_true(op_named(l, "norm1")->fwd_bytes == 36 * T * h);
  assert_true(op_named(l, "norm1")->bwd_bytes == 92 * T * h);
  assert_true(op_named(l, "norm1")->wgrad_bytes == 8 * T * h);
  assert_int_equal(op_named(l, "norm1")->fwd_kernels, 8);
  assert_int_equal(op_named(l, "norm1")->bwd_kernels, 16);
  assert_true(op_named(l, "qkv_proj")->fwd_eager.bytes == 20 * 2 * T * h);
  assert_true(op_named(l, "qkv_proj")->bwd_side.bytes == 20 * 2 * T * h);
  assert_int_equal(op_named(l, "qkv_proj")->fwd_eager.kernels, 10);
  assert_true(op_named(l, "qkv_proj")->fwd_side.bytes == 0);
  assert_true(op_named(l, "attn_out_proj")->fwd_eager.bytes == 6 * T * h);
  assert_int_equal(op_named(l, "attn_out_proj")->fwd_eager.kernels, 1);
  assert_true(op_named(l, "attn_out_proj")->bwd_side.bytes == 6 * T * h);
  assert_int_equal(op_named(l, "attn_out_proj")->bwd_side.kernels, 1);
  assert_true(op_named(l, "mlp_down")->fwd_eager.bytes == 6 * T * h);
  assert_true(op_named(l, "swiglu_mul")->fwd_bytes == 6 * T * f);
  assert_true(op_named(l, "swiglu_mul")->bwd_bytes == 12 * T * f);
  assert_int_equal(op_named(l, "swiglu_mul")->bwd_kernels, 2);
  l = vs_model_layer(&amp, 0);
  /* over autocast's fp32 residual the add's gradient is cast to 16 bits
   * for the sublayer (4 + 2) beside the residual's sum (3 x 4) */
  assert_true(op_named(l, "attn_out_proj")->bwd_side.bytes == 18 * T * h);
  assert_int_equal(op_named(l, "attn_out_proj")->bwd_side.kernels, 2);
  assert_true(op_named(l, "norm1")->fwd_bytes == 28 * T * h);
  assert_true(op_named(l, "norm1")->bwd_bytes == 92 * T * h);
  assert_int_equal(op_named(l, "norm1")->fwd_kernels, 6);
  assert_int_equal(op_named(l, "norm1")->bwd_kernels, 14);
  l = vs_model_layer(&tt, 0);
  assert_true(op_named(l, "qkv_proj")->fwd_eager.bytes == 20 * 2 * T * h);
  assert_int_equal(op_named(l, "qkv_proj")->fwd_eager.kernels, 6);
  l = vs_model_layer(&h16, 0);
  assert_true(op_named(l, "qkv_proj")->fwd_eager.bytes == 20 * 2 * T * h);
  assert_true(op_named(l, "qkv_proj")->bwd_side.bytes == 30 * 2 * T * h);
  assert_int_equal(op_named(l, "qkv_proj")->bwd_side.kernels, 18);
  l = vs_model_layer(&h32, 0);
  assert_true(op_named(l, "qkv_proj")->fwd_eager.bytes == 36 * 2 * T * h);
  assert_int_equal(op_named(l, "qkv_proj")->fwd_eager.kernels, 12);
  {
    static const char gpt[] =
        "[model]\narch = gpt\nlayers = 2\nhidden = 256\nheads = 4\n"
        "vocab = 1000\nseq_len = 128\n";
    vs_model g, ge;
    build_ini(&g, gpt, NULL, 0);
    build_ini(&ge, gpt, eager, 1);
    assert_true(op_named(vs_model_layer(&ge, 0), "norm1")->fwd_bytes ==
                op_named(vs_model_layer(&g, 0), "norm1")->fwd_bytes);
    assert_int_equal(op_named(vs_model_layer(&ge, 0), "norm1")->bwd_kernels,
                     2);
    /* with dropout the fused add is Megatron-LM's bias-dropout-add, the
     * dropout op, which reads the residual too; eager adds after it. The
     * dropout itself (ATen's Dropout.cu) reads 2 B and writes 2 B and a
     * 1-byte mask; its backward reads the gradient and the mask and
     * writes 2 B (5 each way), besides the residual gradients' sum (6) */
    l = vs_model_layer(&g, 0);
    assert_true(op_named(l, "mlp_dropout")->fwd_bytes == (5 + 2) * T * h);
    assert_true(op_named(l, "mlp_dropout")->fwd_eager.bytes == 0);
    assert_true(op_named(l, "mlp_dropout")->bwd_side.bytes == 6 * T * h);
    assert_true(op_named(l, "mlp_dropout")->bwd_bytes == (5 + 6) * T * h);
    assert_int_equal(op_named(l, "mlp_dropout")->bwd_side.kernels, 1);
    l = vs_model_layer(&ge, 0);
    assert_true(op_named(l, "mlp_dropout")->fwd_bytes == (5 + 6) * T * h);
    assert_true(op_named(l, "mlp_dropout")->fwd_eager.bytes == 6 * T * h);
  }
}

/* Multi-head latent attention (DeepSeek-V2 Sec. 2.1) in a Llama layer:
 * the norm output once for both down projections (2Th), the query latent
 * through its RMSNorm and up projection (2T r_q each), the key-value
 * latent likewise (2T r_kv each), flash attention's Q, K of d_nope +
 * d_rope and V of d_v a head and its fp32 LSE, the output projection's
 * input (2T a d_v); the rest as in the dense layer. Its parameters are
 * DeepSeek's: h r_q + r_q + r_q a (d_nope + d_rope) + h (r_kv + d_rope) +
 * r_kv + r_kv a (d_nope + d_v) + a d_v h. */
static void test_mla_layer(void **state)
{
  static const char llama[] =
      "[model]\narch = llama\nlayers = 2\nhidden = 1024\nheads = 16\n"
      "ffn_hidden = 2048\nvocab = 1000\nseq_len = 512\n"
      "kv_lora_rank = 128\nq_lora_rank = 256\nqk_head_dim = 64\n"
      "qk_rope_head_dim = 32\nv_head_dim = 48\n";
  const uint64_t T = 512, b = 1, s = 512, h = 1024, a = 16, f = 2048,
                 rq = 256, rkv = 128, dn = 64, dr = 32, dv = 48;
  vs_model m;
  const vs_block *blk;
  uint64_t attn = 2 * T * h + 4 * T * rq + 4 * T * rkv +
                  2 * T * a * (2 * (dn + dr) + dv) + 4 * b * a * s +
                  2 * T * a * dv;
  uint64_t mlp = 2 * 2 * T * h + 2 * T * h + 8 * T * f; /* norms, SwiGLU */
  uint64_t params = h * rq + rq + rq * a * (dn + dr) + h * (rkv + dr) + rkv +
                    rkv * a * (dn + dv) + a * dv * h;
  (void)state;
  build_ini(&m, llama, NULL, 0);
  blk = vs_model_layer(&m, 0);
  assert_int_equal(vs_block_saved_bytes(blk, -1, VS_SAVED_ALL), attn + mlp);
  assert_int_equal(blk->param_elems, params + 2 * h + 3 * h * f);
  tu_assert_close(op_named(blk, "flash_attn")->fwd_flops,
                  2.0 * (double)(b * a * s * s * (dn + dr + dv)) * 0.5, 1e-15);
  /* backward: FlashAttention-2's five matmuls, three over d_qk and two
   * over d_v */
  tu_assert_close(op_named(blk, "flash_attn")->bwd_flops,
                  2.0 * (double)(b * a * s * s * (3 * (dn + dr) + 2 * dv)) *
                      0.5,
                  1e-15);
  {
    /* with context parallelism a rank keeps s / cp of it all; Ulysses
     * also the kernel's head-group output (Transformer Engine's
     * out_part: T / 2 tokens of a d_v wide heads), and the ring's
     * backward two buffers of K (d_qk wide) and V (d_v) with their
     * gradients, and dQ's sum over its steps (dq_buffer, a d_qk wide
     * heads) */
    const char *const cp2[] = {"parallel.cp=2"};
    const char *const a2a[] = {"parallel.cp=2", "parallel.cp_comm=a2a"};
    vs_model half, ulysses;
    build_ini(&half, llama, cp2, 1);
    build_ini(&ulysses, llama, a2a, 2);
    assert_int_equal(2 * layer0_saved(&half),
                     attn + mlp);
    assert_int_equal(layer0_saved(&ulysses),
                     layer0_saved(&half) + 2 * (T / 2) * a * dv);
    assert_int_equal(
        op_named(vs_model_layer(&half, 0), "flash_attn")->bwd_temp_bytes,
        op_named(blk, "flash_attn")->bwd_temp_bytes / 2 +
            4 * 2 * (T / 2) * a * (dn + dr + dv) + 2 * (T / 2) * a * (dn + dr));
  }
  {
    /* tp = 2 with sequence parallelism (Megatron-LM's MLASelfAttention):
     * the down projections and latent norms run duplicated on a rank's
     * T / 2 tokens, the up projections are column-parallel over the heads
     * (the latent gathered: q_up's rq, kv_up's rkv with the rotary key
     * part dr), attention runs a / 2 heads, the output projection is
     * row-parallel: every saved tensor halves, and so do the heads'
     * weights, the down projections and norms staying whole */
    const char *const tp2[] = {"parallel.tp=2",
                               "parallel.sequence_parallel=true"};
    vs_model split;
    const vs_block *sb;
    build_ini(&split, llama, tp2, 2);
    sb = vs_model_layer(&split, 0);
    assert_int_equal(2 * vs_block_saved_bytes(sb, -1, VS_SAVED_ALL),
                     attn + mlp);
    assert_int_equal(sb->param_elems,
                     h * rq + rq + rq * (a / 2) * (dn + dr) + h * (rkv + dr) +
                         rkv + rkv * (a / 2) * (dn + dv) + (a / 2) * dv * h +
                         2 * h + 3 * h * (f / 2));
    assert_int_equal(op_named(sb, "q_up")->fwd_before.kind,
                     VS_COLL_ALL_GATHER);
    assert_int_equal(op_named(sb, "q_up")->fwd_before.bytes, 2 * T * rq);
    assert_int_equal(op_named(sb, "kv_up")->fwd_before.bytes,
                     2 * T * (rkv + dr));
    assert_int_equal(op_named(sb, "kv_up")->bwd_after.bytes,
                     2 * T * (rkv + dr));
    /* the duplicated down projections run on the rank's T / 2 tokens */
    tu_assert_close(op_named(sb, "q_down")->fwd_flops,
                    op_named(blk, "q_down")->fwd_flops / 2.0, 1e-15);
    assert_int_equal(op_named(sb, "q_down")->fwd_before.kind, VS_COLL_NONE);
    assert_int_equal(op_named(sb, "attn_out_proj")->fwd_after.kind,
                     VS_COLL_REDUCE_SCATTER);
    tu_assert_close(op_named(sb, "flash_attn")->fwd_flops,
                    op_named(blk, "flash_attn")->fwd_flops / 2.0, 1e-15);
  }
}

/* Context parallelism (Megatron-LM's context_parallel.md; frameworks.md
 * 9): each rank holds s / cp of every sequence, so everything a dense
 * layer saves divides by cp (Q, K, V, the LSE and every sbh tensor are per
 * token), and its flash attention's FLOPs too (s / cp queries over s
 * keys). The keys and values of the others are what it adds, as temp:
 * p2p every ring step's K, V chunk (cp x 2 (s / cp) b h_kv: Transformer
 * Engine's p2p_comm_buffers live to the end of forward), output and fp32
 * LSE (cp whole ones on the last cp rank, causal) and the merged LSE,
 * allgather the whole sequence's K, V (2 s b
 * h_kv), both gathered over the cp group (again for backward, whose
 * gradients are reduce-scattered). */
static void test_context_parallel_layer(void **state)
{
  static const char llama[] =
      "[model]\narch = llama\nlayers = 2\nhidden = 1024\nheads = 16\n"
      "kv_heads = 4\nffn_hidden = 2048\nvocab = 1000\nseq_len = 4096\n";
  const char *const cp4[] = {"parallel.cp=4"};
  const char *const ag[] = {"parallel.cp=4", "parallel.cp_comm=allgather"};
  const char *const a2a[] = {"parallel.cp=4", "parallel.cp_comm=a2a"};
  const uint64_t s = 4096, hkv = 4 * 64, q = 1024;
  vs_model one, four, gathered, ulysses;
  const vs_op_spec *f1, *f4;
  (void)state;
  build_ini(&one, llama, NULL, 0);
  build_ini(&four, llama, cp4, 1);
  build_ini(&gathered, llama, ag, 2);
  build_ini(&ulysses, llama, a2a, 2);
  assert_int_equal(4 * layer0_saved(&four),
                   layer0_saved(&one));
  f1 = op_named(vs_model_layer(&one, 0), "flash_attn");
  f4 = op_named(vs_model_layer(&four, 0), "flash_attn");
  tu_assert_close(4.0 * f4->fwd_flops, f1->fwd_flops, 1e-15);
  assert_int_equal(
      f4->fwd_temp_bytes - f1->fwd_temp_bytes / 4,
      4 * (2 * (s / 4) * hkv * 2 + (s / 4) * q * 2 + 4 * (s / 4) * 16) +
          4 * (s / 4) * 16);
  /* backward: two K, V buffers with their dK, dV, and dQ's sum over the
   * ring's steps (Transformer Engine's dq_buffer), beyond the kernel's
   * own gradients */
  assert_int_equal(f4->bwd_temp_bytes - f1->bwd_temp_bytes / 4,
                   4 * (2 * (s / 4) * hkv * 2) + (s / 4) * q * 2);
  assert_int_equal(f4->bwd_before.kind, VS_COLL_ALL_GATHER);
  assert_int_equal(f4->fwd_before.group, VS_GROUP_CP);
  assert_int_equal(f4->fwd_before.kind, VS_COLL_ALL_GATHER);
  assert_int_equal(f4->fwd_before.bytes, 2 * s * hkv * 2);
  assert_int_equal(f4->bwd_after.kind, VS_COLL_REDUCE_SCATTER);
  assert_int_equal(op_named(vs_model_layer(&gathered, 0), "flash_attn")
                       ->fwd_temp_bytes,
                   2 * s * hkv * 2);
  /* Ulysses: Q, K, V to head groups and the output back, all-to-all */
  assert_int_equal(op_named(vs_model_layer(&ulysses, 0), "flash_attn")
                       ->fwd_before.bytes,
                   (s / 4) * (q + 2 * hkv) * 2);
  assert_int_equal(op_named(vs_model_layer(&ulysses, 0), "flash_attn")
                       ->fwd_after.kind,
                   VS_COLL_ALL_TO_ALL);
  /* Transformer Engine keeps the kernel's head-group output (out_part,
   * as many bytes as the rank's output chunk) for backward, and moves
   * only the output's gradient back to the head groups */
  assert_int_equal(layer0_saved(&ulysses),
                   layer0_saved(&four) + (s / 4) * q * 2);
  assert_int_equal(
      op_named(vs_model_layer(&ulysses, 0), "flash_attn")->bwd_before.bytes,
      (s / 4) * q * 2);
  /* the ring's kernels run on chunks, bidirectional off the diagonal;
   * Ulysses' one kernel on the whole causal sequence (heads / cp) */
  assert_int_equal(f4->flash.seq, s / 4);
  assert_false(f4->flash.causal);
  assert_int_equal(
      op_named(vs_model_layer(&ulysses, 0), "flash_attn")->flash.seq, s);
  assert_true(
      op_named(vs_model_layer(&ulysses, 0), "flash_attn")->flash.causal);
  /* the parameters do not split, a GPT's position table included */
  assert_int_equal(four.params_total, one.params_total);
  assert_int_equal(vs_model_layer(&four, 0)->param_elems,
                   vs_model_layer(&one, 0)->param_elems);
  {
    static const char gpt[] =
        "[model]\narch = gpt\nlayers = 2\nhidden = 256\nheads = 4\n"
        "vocab = 1000\nseq_len = 1024\n";
    vs_model g1, g4;
    build_ini(&g1, gpt, NULL, 0);
    build_ini(&g4, gpt, cp4, 1);
    assert_int_equal(vs_model_embed(&g4)->param_elems,
                     vs_model_embed(&g1)->param_elems);
  }
}

/* A Llama MoE layer against the dense one of the same shapes: the MLP's
 * saved tensors (2Th + 8Tf: input, gate, SiLU(gate) and up, down's
 * input) give way to the router's input (the same 2Th, kept for the shared
 * expert too), its fp32 softmax (4TE) and int64 top-k indices (8Tk), the
 * dispatch's int64 indices (8kT), the routed experts' tensors on the kT
 * slots (2kTh + 8kTf_e), the combine's expert outputs and fp32 probs
 * (2kTh + 4kT), and the shared expert's (8Tf_s but its input). Parameters:
 * the router (hE), E experts of 3hf_e, the shared expert's 3hf_s. */
/* The Llama layer and MoE keys of test_moe_layer and
 * test_moe_tensor_parallel (s = 256, b = 2, h = 512, f = 2048; E = 8,
 * k = 2, f_e = 1024, one shared expert of f_s = 768), then tp = 2 with
 * sequence parallelism. */
static const char moe_llama[] =
    "[model]\narch = llama\nlayers = 2\nhidden = 512\nheads = 8\n"
    "ffn_hidden = 2048\nvocab = 1000\nseq_len = 256\n"
    "[training]\nmicro_batch = 2\n";
static const char *const moe_keys[] = {"model.experts=8",
                                       "model.experts_per_token=2",
                                       "model.expert_ffn_hidden=1024",
                                       "model.shared_experts=1",
                                       "model.shared_expert_ffn_hidden=768",
                                       "parallel.tp=2",
                                       "parallel.sequence_parallel=true"};

static void test_moe_layer(void **state)
{
  const uint64_t s = 256, b = 2, h = 512, f = 2048, E = 8, k = 2, fe = 1024,
                 fs = 768, T = s * b;
  const char *const *moe = moe_keys;
  const char *llama = moe_llama;
  vs_model m0, m1;
  const vs_block *dense, *mx;
  uint64_t dense_mlp = 2 * T * h + 8 * T * f;
  uint64_t moe_mlp = 2 * T * h + 4 * T * E + 8 * T * k + 8 * k * T +
                     2 * k * T * h + 8 * k * T * fe + 2 * k * T * h +
                     4 * k * T + 8 * T * fs;
  (void)state;
  build_ini(&m0, llama, NULL, 0);
  build_ini(&m1, llama, moe, 5);
  dense = vs_model_layer(&m0, 0);
  mx = vs_model_layer(&m1, 0);
  assert_string_equal(mx->name, "moe");
  assert_int_equal(vs_block_saved_bytes(mx, -1, VS_SAVED_ALL) -
                       vs_block_saved_bytes(dense, -1, VS_SAVED_ALL),
                   moe_mlp - dense_mlp);
  assert_int_equal(mx->param_elems - dense->param_elems,
                   h * E + E * 3 * h * fe + 3 * h * fs - 3 * h * f);
  /* the routed experts' GEMMs run on the kT slots */
  tu_assert_close(op_named(mx, "experts_fc1")->fwd_flops,
                  2.0 * (double)(k * T * h * 2 * fe), 1e-15);
  /* a token's parameters: the router, k experts, the shared one */
  assert_int_equal(m1.params_total - m1.params_active,
                   2 * (E - k) * 3 * h * fe);
  assert_int_equal(m0.params_active, m0.params_total);
  /* of which a token only looks up Llama's untied token table */
  assert_int_equal(m1.params_lookup, 1000 * h);
}

/* The same MoE layer at tp = 2 with sequence parallelism, as Megatron-LM's
 * expert tensor parallelism runs it: a rank routes its T/2 tokens (the
 * router's input 2(T/2)h, softmax 4(T/2)E, top-k 8(T/2)k, dispatch
 * indices 8k(T/2), the combine's 2k(T/2)h + 4k(T/2)); the tp ranks pool
 * their kT/2 slots each, so the experts' input is the gathered kT slots
 * whole (2kTh) and their SwiGLU tensors and fc2's input are on half the
 * width (8kT fe/2); the shared expert is a tensor-parallel MLP (8T fs/2).
 * Against the dense MLP at tp = 2 (its sequence-sharded input 2(T/2)h,
 * 8T f/2). Each expert keeps half its weights; fc1 gathers its input over
 * tp and fc2 reduce-scatters its output. */
static void test_moe_tensor_parallel(void **state)
{
  const uint64_t s = 256, b = 2, h = 512, f = 2048, E = 8, k = 2, fe = 1024,
                 fs = 768, T = s * b;
  const char *const *moe = moe_keys;
  const char *llama = moe_llama;
  vs_model m0, m1;
  const vs_block *dense, *mx;
  const vs_op_spec *fc1, *fc2;
  uint64_t dense_mlp = 2 * (T / 2) * h + 8 * T * (f / 2);
  uint64_t moe_mlp = 2 * (T / 2) * h + 4 * (T / 2) * E + 8 * (T / 2) * k +
                     8 * k * (T / 2) + 2 * k * T * h + 8 * k * T * (fe / 2) +
                     2 * k * (T / 2) * h + 4 * k * (T / 2) + 8 * T * (fs / 2);
  (void)state;
  build_ini(&m0, llama, moe + 5, 2);
  build_ini(&m1, llama, moe, 7);
  dense = vs_model_layer(&m0, 0);
  mx = vs_model_layer(&m1, 0);
  assert_int_equal(vs_block_saved_bytes(mx, -1, VS_SAVED_ALL) -
                       vs_block_saved_bytes(dense, -1, VS_SAVED_ALL),
                   moe_mlp - dense_mlp);
  assert_int_equal(mx->param_elems - dense->param_elems,
                   h * E + E * 3 * h * (fe / 2) + 3 * h * (fs / 2) -
                       3 * h * (f / 2));
  fc1 = op_named(mx, "experts_fc1");
  fc2 = op_named(mx, "experts_fc2");
  tu_assert_close(fc1->fwd_flops, 2.0 * (double)(k * T * h * fe), 1e-15);
  assert_int_equal(fc1->fwd_before.kind, VS_COLL_ALL_GATHER);
  assert_int_equal(fc1->fwd_before.group, VS_GROUP_TP);
  assert_int_equal(fc1->fwd_before.bytes, 2 * k * T * h);
  assert_int_equal(fc1->bwd_before.kind, VS_COLL_NONE); /* kept whole */
  assert_int_equal(fc2->fwd_after.kind, VS_COLL_REDUCE_SCATTER);
  assert_int_equal(fc2->fwd_after.bytes, 2 * k * T * h);
  /* the whole model's counts do not depend on the layout */
  {
    vs_model one;
    build_ini(&one, llama, moe, 5);
    assert_int_equal(one.params_total, m1.params_total);
    assert_int_equal(one.params_active, m1.params_active);
  }
  {
    /* with ep = 2 too: a rank sends its k T / 2 copies (2kTh / 2 bytes)
     * and receives as many; the tp gather then carries both tp ranks'
     * k T slots; the dispatch's temps are the send buffer, what arrived,
     * and the gathered slots before the sort (Megatron-LM's
     * dispatch_postprocess) */
    const char *keys[9];
    vs_model ep2;
    const vs_op_spec *dispatch;
    memcpy(keys, moe, 7 * sizeof *keys);
    keys[7] = "parallel.ep=2";
    keys[8] = "parallel.dp=2";
    build_ini(&ep2, llama, keys, 9);
    dispatch = op_named(vs_model_layer(&ep2, 0), "moe_dispatch");
    assert_int_equal(dispatch->fwd_after.kind, VS_COLL_ALL_TO_ALL);
    assert_int_equal(dispatch->fwd_after.group, VS_GROUP_EP);
    assert_int_equal(dispatch->fwd_after.bytes, 2 * k * (T / 2) * h);
    assert_int_equal(dispatch->fwd_temp_bytes,
                     2 * k * (T / 2) * h + 2 * k * (T / 2) * h +
                         2 * k * T * h);
    assert_int_equal(op_named(vs_model_layer(&ep2, 0), "experts_fc1")
                         ->fwd_before.bytes,
                     2 * k * T * h);
  }
}

/* Expert tensor parallelism other than tp (Megatron-LM's
 * expert_tensor_parallel_size): at etp = 1 beside tp = 2 a rank runs its
 * experts whole on the kT/2 slots its own T/2 tokens make (nothing
 * gathered: fc1 and fc2 have no collective, the dispatch no gathered
 * copy), keeping 3h fe a expert instead of 3h fe/2; the shared expert
 * stays a tp MLP. At etp = 2 beside tp = 4 the etp ranks pool their kT/4
 * slots over the etp group (2kT/4 slots, each expert's width fe/2), and
 * the FLOPs a rank does on its experts stay k (T/tp) tokens' worth. */
static void test_moe_expert_tensor_parallel(void **state)
{
  const uint64_t s = 256, b = 2, h = 512, E = 8, k = 2, fe = 1024,
                 T = s * b;
  const char *keys[9];
  vs_model at_tp, etp1, etp2;
  const vs_block *l_tp, *l1, *l2;
  const vs_op_spec *fc1;
  (void)state;
  memcpy(keys, moe_keys, 7 * sizeof *keys);
  build_ini(&at_tp, moe_llama, keys, 7);
  keys[7] = "parallel.etp=1";
  build_ini(&etp1, moe_llama, keys, 8);
  l_tp = vs_model_layer(&at_tp, 0);
  l1 = vs_model_layer(&etp1, 0);
  assert_int_equal(l1->param_elems - l_tp->param_elems, E * 3 * h * fe / 2);
  fc1 = op_named(l1, "experts_fc1");
  assert_int_equal(fc1->fwd_before.kind, VS_COLL_NONE);
  assert_int_equal(op_named(l1, "experts_fc2")->fwd_after.kind, VS_COLL_NONE);
  assert_int_equal(op_named(l1, "moe_dispatch")->fwd_temp_bytes, 0);
  tu_assert_close(fc1->fwd_flops, op_named(l_tp, "experts_fc1")->fwd_flops,
                  1e-15);
  /* saved on the slots: the experts' input 2h and SwiGLU's 8 fe a slot,
   * kT/2 slots whole against kT slots at half the width */
  assert_int_equal(vs_block_saved_bytes(l_tp, -1, VS_SAVED_ALL) -
                       vs_block_saved_bytes(l1, -1, VS_SAVED_ALL),
                   2 * k * T * h + 8 * k * T * (fe / 2) -
                       (2 * k * (T / 2) * h + 8 * k * (T / 2) * fe));
  /* the shared expert's collectives stay over tp */
  assert_int_equal(op_named(l1, "shared_fc1")->fwd_before.group, VS_GROUP_TP);
  keys[5] = "parallel.tp=4";
  keys[7] = "parallel.etp=2";
  build_ini(&etp2, moe_llama, keys, 8);
  l2 = vs_model_layer(&etp2, 0);
  fc1 = op_named(l2, "experts_fc1");
  assert_int_equal(fc1->fwd_before.kind, VS_COLL_ALL_GATHER);
  assert_int_equal(fc1->fwd_before.group, VS_GROUP_ETP);
  assert_int_equal(fc1->fwd_before.bytes, 2 * 2 * k * (T / 4) * h);
  assert_int_equal(op_named(l2, "experts_fc2")->fwd_after.group,
                   VS_GROUP_ETP);
  tu_assert_close(fc1->fwd_flops,
                  2.0 * (double)(2 * k * (T / 4) * h * 2 * (fe / 2)), 1e-15);
  assert_int_equal(op_named(l2, "moe_dispatch")->fwd_temp_bytes,
                   2 * 2 * k * (T / 4) * h);
}

/* Routing skew under expert parallelism: the rank holding the hottest
 * expert receives its (1 + skew) x kTep / E slots and its E / ep - 1 other
 * experts' share of the rest, (kTep - hot) / (E - 1) each. With E = 8,
 * k = 2, ep = 4 and skew 1: 2T + 6T/7 = 20T/7 slots against kT = 2T when
 * balanced, and every tensor on the slots grows by that share (the
 * experts' input 2h, their SwiGLU tensors 6f_e and fc2's input 2f_e
 * bytes a slot); a rank of the group holding only other experts
 * receives E / ep x 6T/7 = 12T/7. Without expert parallelism a rank holds
 * every expert: kT slots whatever the skew. The rank keeps E / ep
 * experts. */
static void test_moe_routing_skew(void **state)
{
  static const char llama[] =
      "[model]\narch = llama\nlayers = 2\nhidden = 512\nheads = 8\n"
      "ffn_hidden = 1024\nvocab = 1000\nseq_len = 700\nexperts = 8\n"
      "experts_per_token = 2\n[parallel]\nzero = 1\n";
  const char *const balanced[] = {"parallel.ep=4", "parallel.dp=4"};
  const char *const skewed[] = {"parallel.ep=4", "parallel.dp=4",
                                "model.routing_skew=1"};
  const char *const one[] = {"model.routing_skew=1"};
  const uint64_t T = 700, h = 512, fe = 1024;
  const uint64_t worst = 2 * T + (6 * T + 6) / 7; /* ceil(20T / 7) */
  const uint64_t others = (12 * T + 6) / 7; /* ceil(E/ep x 6T/7) */
  vs_model b, s, o, n, rest;
  (void)state;
  build_ini(&b, llama, balanced, 2);
  build_ini(&s, llama, skewed, 3);
  /* a rank holding only other experts: E / ep of their 6T / 7 each, so
   * that the group's 4 ranks receive its kT ep = 8T copies in all */
  build_loaded(&rest, llama, skewed, 3, VS_LOAD_REST);
  assert_int_equal(layer0_saved(&b) - layer0_saved(&rest),
                   (2 * T - others) * (2 * h + 8 * fe));
  assert_int_equal(vs_model_layer(&rest, 0)->param_elems,
                   vs_model_layer(&s, 0)->param_elems);
  build_ini(&o, llama, one, 1);
  build_ini(&n, llama, NULL, 0);
  assert_int_equal(layer0_saved(&s) -
                       layer0_saved(&b),
                   (worst - 2 * T) * (2 * h + 8 * fe));
  assert_int_equal(layer0_saved(&o),
                   layer0_saved(&n));
  /* 2 of 8 experts on each of the 4 ranks */
  assert_int_equal(vs_model_layer(&n, 0)->param_elems -
                       vs_model_layer(&b, 0)->param_elems,
                   6 * 3 * h * fe);
  /* the dispatch and combine all-to-alls over ep */
  assert_int_equal(op_named(vs_model_layer(&b, 0), "moe_dispatch")->fwd_after.group,
                   VS_GROUP_EP);
  assert_int_equal(op_named(vs_model_layer(&b, 0), "moe_combine")->fwd_before.kind,
                   VS_COLL_ALL_TO_ALL);
  assert_int_equal(op_named(vs_model_layer(&n, 0), "moe_combine")->fwd_before.kind,
                   VS_COLL_NONE);
}

/* A capacity factor C pads each expert to ceil(C k T / E) slots whatever
 * the routing (GShard); the first dense_layers layers are dense, then
 * every moe_every-th is MoE; layers full checkpointing leaves alone keep
 * their own kind (dense or MoE). */
static void test_moe_capacity_and_placement(void **state)
{
  const char *const cap[] = {"model.expert_capacity_factor=1.25"};
  const char *const where[] = {"model.layers=5", "model.dense_layers=1",
                               "model.moe_every=2"};
  const char *const kept[] = {"model.layers=4", "model.dense_layers=1",
                              "training.checkpointing=full",
                              "training.checkpoint_every=2"};
  static const char llama[] =
      "[model]\narch = llama\nlayers = 2\nhidden = 512\nheads = 8\n"
      "ffn_hidden = 2048\nvocab = 1000\nseq_len = 100\nexperts = 8\n"
      "experts_per_token = 2\n";
  const uint64_t T = 100, h = 512, fe = 2048;
  const char *names[5];
  vs_model m;
  (void)state;
  build_ini(&m, llama, cap, 1);
  /* ceil(1.25 x 2 x 100 / 8) = 32 slots an expert, 256 in all */
  tu_assert_close(op_named(vs_model_layer(&m, 0), "experts_fc2")->fwd_flops,
                  2.0 * (double)(8 * 32 * fe * h), 1e-15);
  build_ini(&m, llama, NULL, 0);
  tu_assert_close(op_named(vs_model_layer(&m, 0), "experts_fc2")->fwd_flops,
                  2.0 * (double)(2 * T * fe * h), 1e-15);
  build_ini(&m, llama, where, 3);
  for (uint64_t l = 0; l < 5; l++)
    names[l] = vs_model_layer(&m, l)->name;
  assert_string_equal(names[0], "dense");
  assert_string_equal(names[1], "moe");
  assert_string_equal(names[2], "dense");
  assert_string_equal(names[3], "moe");
  assert_string_equal(names[4], "dense");
  build_ini(&m, llama, kept, 4);
  assert_string_equal(vs_model_layer(&m, 0)->name, "dense_kept");
  assert_string_equal(vs_model_layer(&m, 1)->name, "moe");
  assert_string_equal(vs_model_layer(&m, 2)->name, "moe_kept");
  assert_string_equal(vs_model_layer(&m, 3)->name, "moe");
  assert_true(vs_model_layer(&m, 2)->not_checkpointed);
}

/* ------------------------------------------------------------------------
 * Multi-token prediction
 * ------------------------------------------------------------------------ */

/* One MTP depth (DeepSeek-V3 Sec. 2.2, Megatron-LM's
 * MultiTokenPredictionLayer) on the MoE llama above at tp = 1, bf16, T
 * tokens: the head gains a layer like the last (an MoE one: everything it
 * saves), the enorm and hnorm inputs (2Th each), eh_proj's 2h-wide input
 * (4Th), the final norm's input (2Th), the output layer's input (2Th) and
 * the depth's own loss buffers: logits 2TV and the fp32 log-softmax 4TV
 * (V padded: 1000). Parameters: the layer's, eh_proj's 2h x h and three
 * RMSNorm scales; the embedding and output weight are shared, so the
 * depth's output layer has no weight of its own but computes its
 * gradient work. The model's own count is unchanged. */
static void test_mtp_depth(void **state)
{
  const uint64_t h = 512, T = 256 * 2, V = 1000;
  const char *const moe[] = {"model.experts=8", "model.experts_per_token=2",
                             "model.expert_ffn_hidden=1024",
                             "model.shared_experts=1",
                             "model.shared_expert_ffn_hidden=768",
                             "model.mtp_layers=1"};
  static const char *const order[] = {
      "final_norm",    "mtp_embedding",     "mtp_enorm",
      "mtp_hnorm",     "mtp_concat",        "mtp_eh_proj",
      "mtp_norm1"};
  vs_model m0, m1;
  const vs_block *h0, *h1, *layer;
  const vs_op_spec *mtp_lm, *lm;
  (void)state;
  build_ini(&m0, moe_llama, moe, 5);
  build_ini(&m1, moe_llama, moe, 6);
  h0 = vs_model_head(&m0);
  h1 = vs_model_head(&m1);
  layer = vs_model_layer(&m1, 1);
  assert_string_equal(layer->name, "moe");
  for (uint32_t i = 0; i < sizeof order / sizeof order[0]; i++)
    assert_string_equal(h1->ops[i].name, order[i]);
  assert_int_equal(h1->n_ops, h0->n_ops + layer->n_ops + 8);
  assert_string_equal(h1->ops[h1->n_ops - 2].name, "lm_head");
  assert_string_equal(h1->ops[h1->n_ops - 1].name, "cross_entropy");
  assert_int_equal(vs_block_saved_bytes(h1, -1, VS_SAVED_ALL) -
                       vs_block_saved_bytes(h0, -1, VS_SAVED_ALL),
                   vs_block_saved_bytes(layer, -1, VS_SAVED_ALL) + 12 * T * h +
                       4 * T * V);
  assert_int_equal(vs_block_saved_bytes(h1, VS_CAT_TEMP, VS_SAVED_ALL),
                   2 * vs_block_saved_bytes(h0, VS_CAT_TEMP, VS_SAVED_ALL));
  assert_int_equal(h1->param_elems - h0->param_elems,
                   layer->param_elems + 2 * h * h + 3 * h);
  assert_int_equal(m1.params_mtp, layer->param_elems + 2 * h * h + 3 * h);
  assert_int_equal(m0.params_mtp, 0);
  assert_int_equal(m1.params_total, m0.params_total);
  assert_int_equal(m1.params_active, m0.params_active);
  mtp_lm = op_named(h1, "mtp_lm_head");
  lm = op_named(h1, "lm_head");
  assert_int_equal(mtp_lm->n_params, 0);
  assert_true(mtp_lm->wgrad_flops > 0 &&
              mtp_lm->wgrad_flops == lm->wgrad_flops);
  assert_int_equal(lm->n_params, 1);
}

/* With a pipeline and untied embeddings the MTP stage keeps its own copy
 * of the word embeddings (V/t x h, Megatron-LM's embedding on the MTP
 * stage), one for every depth (two here); tied, the output layer's copy
 * serves. */
static void test_mtp_embedding_copy(void **state)
{
  static const char *const untied[] = {"model.mtp_layers=2", "parallel.pp=2"};
  static const char *const tied[] = {"model.mtp_layers=1", "parallel.pp=2",
                                     "model.tied_embeddings=true"};
  static const char *const tied_plain[] = {"parallel.pp=2",
                                           "model.tied_embeddings=true"};
  vs_model a, b, c, d;
  const uint64_t h = 512, V = 1000;
  (void)state;
  build_ini(&a, moe_llama, NULL, 0);
  build_ini(&b, moe_llama, untied, 2);
  build_ini(&c, moe_llama, tied_plain, 2);
  build_ini(&d, moe_llama, tied, 3);
  assert_int_equal(vs_model_head(&b)->param_elems -
                       vs_model_head(&a)->param_elems,
                   b.params_mtp + V * h);
  assert_int_equal(vs_model_head(&d)->param_elems -
                       vs_model_head(&c)->param_elems,
                   d.params_mtp);
}

/* Learned positions on the MTP stage: its embedding is a whole one
 * (Megatron-LM's LanguageModelEmbedding where mtp_process), so a pipeline
 * adds a copy of the position table, seq_len x h here, beside the word
 * table's. */
static void test_mtp_position_copy(void **state)
{
  static const char *const rotary[] = {"model.mtp_layers=1", "parallel.pp=2"};
  static const char *const learned[] = {"model.mtp_layers=1", "parallel.pp=2",
                                        "model.positions=learned"};
  vs_model a, b;
  const uint64_t h = 512, s = 256;
  (void)state;
  build_ini(&a, moe_llama, rotary, 2);
  build_ini(&b, moe_llama, learned, 3);
  assert_int_equal(
      vs_model_head(&b)->param_elems - vs_model_head(&a)->param_elems, s * h);
}

/* Collectives name their group and kind; the op running one is named
 * "<group>_<kind>" (what timeline.csv and trace show). */
static void test_collective_names(void **state)
{
  (void)state;
  assert_string_equal(vs_coll_op_name(VS_GROUP_TP, VS_COLL_ALL_REDUCE),
                      "tp_all_reduce");
  assert_string_equal(vs_coll_op_name(VS_GROUP_EP, VS_COLL_ALL_TO_ALL),
                      "ep_all_to_all");
  assert_string_equal(vs_coll_op_name(VS_GROUP_CP, VS_COLL_SEND_RECV),
                      "cp_send_recv");
  assert_string_equal(vs_coll_op_name(VS_GROUP_DP, VS_COLL_REDUCE_SCATTER),
                      "dp_reduce_scatter");
  assert_string_equal(vs_coll_name(VS_COLL_ALL_GATHER), "all_gather");
  assert_string_equal(vs_coll_name(99), "none");
  assert_string_equal(vs_group_name(VS_GROUP_EMBEDDING), "embedding");
  assert_string_equal(vs_group_name(-1), "?");
  /* out of range never reads outside the table */
  assert_string_equal(vs_coll_op_name(99, 99), "tp_none");
  for (int g = 0; g < VS_GROUP_N; g++)
    for (int k = 1; k < VS_COLL_N; k++) {
      char want[64];
      snprintf(want, sizeof want, "%s_%s", vs_group_name(g), vs_coll_name(k));
      assert_string_equal(vs_coll_op_name(g, k), want);
    }
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_size_guard_follows_attention, free_models),
      cmocka_unit_test_teardown(
          test_size_guard_counts_padding_and_shared_experts, free_models),
      cmocka_unit_test_teardown(test_size_guard_counts_microbatches_and_depths,
                                free_models),
      cmocka_unit_test_teardown(test_gpt_no_parallelism, free_models),
      cmocka_unit_test_teardown(test_gpt_tensor_parallel, free_models),
      cmocka_unit_test_teardown(test_gpt_sequence_parallel, free_models),
      cmocka_unit_test_teardown(test_gpt_selective_recompute, free_models),
      cmocka_unit_test_teardown(test_gpt_full_recompute, free_models),
      cmocka_unit_test_teardown(test_gpt_flash, free_models),
      cmocka_unit_test_teardown(test_attention_flops, free_models),
      cmocka_unit_test_teardown(test_llama_gqa_swiglu, free_models),
      cmocka_unit_test_teardown(test_llama_attention_causal, free_models),
      cmocka_unit_test_teardown(test_llama_eager_gqa_expands_kv, free_models),
      cmocka_unit_test_teardown(test_eager_backward_holds_incoming_gradients,
                                free_models),
      cmocka_unit_test_teardown(test_flash_pads_head_dim_to_8, free_models),
      cmocka_unit_test_teardown(test_autocast_head_backward_holds_one_node,
                                free_models),
      cmocka_unit_test_teardown(test_llama2_7b_params, free_models),
      cmocka_unit_test_teardown(test_gpt3_175b_params, free_models),
      cmocka_unit_test_teardown(test_params_shrink_with_tp, free_models),
      cmocka_unit_test_teardown(test_param_count_matches_tensors, free_models),
      cmocka_unit_test_teardown(test_layer_options_saved, free_models),
      cmocka_unit_test_teardown(test_gemma2_layers_saved, free_models),
      cmocka_unit_test_teardown(test_fp8_primary_weight_dtypes, free_models),
      cmocka_unit_test_teardown(test_head_loss_buffers, free_models),
      cmocka_unit_test_teardown(test_block_grows, free_models),
      cmocka_unit_test_teardown(test_block_misuse_is_refused, free_models),
      cmocka_unit_test_teardown(test_param_tensor_attributes, free_models),
      cmocka_unit_test_teardown(test_dequantized_base_workspace, free_models),
      cmocka_unit_test_teardown(test_dequantized_base_kernels, free_models),
      cmocka_unit_test_teardown(test_megatron_inplace_loss, free_models),
      cmocka_unit_test_teardown(test_fp32_loss_makes_no_copy, free_models),
      cmocka_unit_test_teardown(test_loss_kernels, free_models),
      cmocka_unit_test_teardown(test_loss_parallel_and_pipelined_logits,
                                free_models),
      cmocka_unit_test_teardown(test_fp32_flash_expands_grouped_kv,
                                free_models),
      cmocka_unit_test_teardown(test_fused_cross_entropy, free_models),
      cmocka_unit_test_teardown(test_autocast_bert_layer, free_models),
      cmocka_unit_test_teardown(test_autocast_llama_layer, free_models),
      cmocka_unit_test_teardown(test_hf_modules, free_models),
      cmocka_unit_test_teardown(test_eager_kernels, free_models),
      cmocka_unit_test_teardown(test_mla_layer, free_models),
      cmocka_unit_test_teardown(test_context_parallel_layer, free_models),
      cmocka_unit_test_teardown(test_moe_layer, free_models),
      cmocka_unit_test_teardown(test_moe_tensor_parallel, free_models),
      cmocka_unit_test_teardown(test_moe_capacity_and_placement, free_models),
      cmocka_unit_test_teardown(test_moe_expert_tensor_parallel, free_models),
      cmocka_unit_test_teardown(test_moe_routing_skew, free_models),
      cmocka_unit_test_teardown(test_mtp_depth, free_models),
      cmocka_unit_test_teardown(test_mtp_embedding_copy, free_models),
      cmocka_unit_test_teardown(test_mtp_position_copy, free_models),
      cmocka_unit_test(test_collective_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* recipe_test.c - the resolved plan: ZeRO degrees and data flow, what
 * checkpointing keeps, what frozen weights skip, where communication runs. */
#include "testutil.h"

#include "model.h"
#include "recipe.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <string.h>

static const char gpt[] =
    "[model]\narch = gpt\nlayers = 2\nhidden = 64\nheads = 4\n"
    "vocab = 128\nseq_len = 32\n"
    "[training]\nprecision = bf16\noptimizer = adam\n";

typedef struct built {
  vs_workload wl;
  vs_model m;
  vs_recipe r;
} built;

static const char llama[] =
    "[model]\narch = llama\nlayers = 2\nhidden = 64\nheads = 4\n"
    "kv_heads = 2\nffn_hidden = 160\nvocab = 128\nseq_len = 32\n"
    "[training]\nprecision = bf16\noptimizer = adam\n";

static void build_from(built *b, const char *ini, const char *const *sets,
                       size_t n_sets, uint64_t gpus)
{
  vs_error err;
  vs_error_clear(&err);
  if (tu_load_workload(&b->wl, ini, sets, n_sets, gpus, &err) ||
      vs_model_build(&b->wl, &b->m, &err) ||
      vs_recipe_build(&b->wl, &b->m, &b->r, &err))
    fail_msg("build: %s", err.msg);
}

static void build(built *b, const char *const *sets, size_t n_sets,
                  uint64_t gpus)
{
  build_from(b, gpt, sets, n_sets, gpus);
}

static void destroy(built *b)
{
  vs_recipe_fini(&b->r);
  vs_model_fini(&b->m);
}

/* ZeRO (Rajbhandari et al. 2020): stage 1 partitions optimizer states over
 * dp, stage 2 also gradients (reduce-scattered, live only until their
 * bucket is reduced), stage 3 also parameters (gathered per block); stages
 * 1 and 2 all-gather the updated parameters after the step. */
static void test_zero_stages(void **state)
{
  static const char *const zero[4][1] = {{"parallel.zero=0"},
                                         {"parallel.zero=1"},
                                         {"parallel.zero=2"},
                                         {"parallel.zero=3"}};
  (void)state;
  for (uint64_t z = 0; z < 4; z++) {
    built b;
    build(&b, zero[z], 1, 4);
    assert_int_equal(b.r.optimizer.degree, z >= 1 ? 4 : 0);
    assert_int_equal(b.r.grads.degree, z >= 2 ? 4 : 0);
    assert_int_equal(b.r.params.degree, z >= 3 ? 4 : 0);
    assert_int_equal(b.r.params.place, VS_PLACE_GPU);
    assert_int_equal(b.r.optimizer.align, 4); /* fp32 states */
    assert_int_equal(b.r.gather_params, z == 3);
    assert_int_equal(b.r.transient_grads, z >= 2);
    assert_int_equal(b.r.gather_after_step, z == 1 || z == 2);
    /* a rank stepping its partition needs only its partition's sum */
    assert_int_equal(b.r.grad_reduce,
                     z >= 1 ? VS_COLL_REDUCE_SCATTER : VS_COLL_ALL_REDUCE);
    /* gradients freed once reduced: one reduction may run behind, on
     * the data-parallel stream */
    assert_int_equal(b.r.reduce_depth, z >= 2 ? 1 : 0);
    assert_int_equal(b.r.comm[VS_USE_GRAD_REDUCE].stream, VS_STREAM_COMM);
    destroy(&b);
  }
}

/* How far reductions may fall behind backward (vs_recipe reduce_depth):
 * DeepSpeed ZeRO-3 blocks once more than max_param_reduce_events = 2 are
 * pending, so three run behind; FSDP2 waits for the one before; DeepSpeed's
 * ZeRO-2 reduces on the compute stream (its preset: overlap_comm off), so
 * none can. Gradients kept to the step (ZeRO-1) have no bound to keep. */
static void test_reduce_depth(void **state)
{
  static const struct {
    const char *sets[2];
    uint8_t depth;
  } cases[] = {
      {{"training.framework=deepspeed", "parallel.zero=3"}, 3},
      {{"training.framework=fsdp2", "parallel.zero=3"}, 1},
      /* DeepSpeed's ZeRO-2 reduces on the compute stream (overlap_comm
       * off): nothing runs behind */
      {{"training.framework=deepspeed", "parallel.zero=2"}, 0},
      {{"training.framework=deepspeed", "parallel.zero=1"}, 0},
  };
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    built b;
    build(&b, cases[i].sets, 2, 4);
    assert_int_equal(b.r.reduce_depth, cases[i].depth);
    assert_int_equal(b.r.reduce_on_compute,
                     strcmp(cases[i].sets[1], "parallel.zero=2") == 0);
    assert_int_equal(b.r.comm[VS_USE_GRAD_REDUCE].stream,
                     b.r.reduce_on_compute ? VS_STREAM_COMPUTE
                                           : VS_STREAM_COMM);
    destroy(&b);
  }
}

/* A shard holds ceil(bytes / degree) rounded up to whole elements; an
 * unpartitioned state is whole. */
static void test_shard_rounding(void **state)
{
  vs_state_plan whole = {.degree = 0, .align = 2};
  vs_state_plan four = {.degree = 4, .align = 2};
  vs_state_plan fp32 = {.degree = 3, .align = 4};
  (void)state;
  assert_int_equal(vs_recipe_shard(&whole, 1001), 1001);
  assert_int_equal(vs_recipe_shard(&four, 1000), 250);
  /* 1002 bytes = 501 elements: ceil(501 / 4) = 126 elements = 252 bytes */
  assert_int_equal(vs_recipe_shard(&four, 1002), 252);
  /* 40 bytes = 10 fp32 elements over 3: 4 elements = 16 bytes */
  assert_int_equal(vs_recipe_shard(&fp32, 40), 16);
}

/* Checkpointing decides per saved tensor: none keeps all; selective
 * (eager) drops the attention core's s^2 tensors of the layers only; full
 * re-runs every layer from its input. Embedding and head are never
 * checkpointed (Megatron-LM checkpoints transformer layers). */
static void test_keep_decisions(void **state)
{
  static const char *const sel[] = {"training.checkpointing=selective",
                                    "training.attention=eager"};
  static const char *const full[] = {"training.checkpointing=full"};
  built b;
  const vs_block *layer;
  const vs_kind_plan *lk, *hk;
  (void)state;
  build(&b, sel, 2, 1);
  layer = vs_model_layer(&b.m, 0);
  lk = vs_recipe_kind(&b.r, &b.m, 1);
  hk = vs_recipe_kind(&b.r, &b.m, b.m.layers + 1);
  assert_true(lk->recompute_core);
  assert_false(lk->recompute_block);
  for (uint32_t i = 0; i < layer->n_saved; i++)
    assert_int_equal(lk->keep[i],
                     layer->saved[i].selective ? VS_RECOMPUTE_CORE : VS_KEEP);
  for (uint32_t i = 0; i < vs_model_head(&b.m)->n_saved; i++)
    assert_int_equal(hk->keep[i], VS_KEEP);
  assert_false(hk->recompute_core || hk->recompute_block);
  assert_string_equal(vs_keep_name(VS_RECOMPUTE_CORE), "recompute_core");
  destroy(&b);

  build(&b, full, 1, 1);
  layer = vs_model_layer(&b.m, 0);
  lk = vs_recipe_kind(&b.r, &b.m, 1);
  assert_true(lk->recompute_block);
  for (uint32_t i = 0; i < layer->n_saved; i++)
    assert_int_equal(lk->keep[i], VS_RECOMPUTE_BLOCK);
  assert_int_equal(vs_recipe_kind(&b.r, &b.m, 0)->keep[0], VS_KEEP);
  destroy(&b);

  build(&b, NULL, 0, 1);
  lk = vs_recipe_kind(&b.r, &b.m, 1);
  assert_false(lk->recompute_core || lk->recompute_block);
  for (uint32_t i = 0; i < vs_model_layer(&b.m, 0)->n_saved; i++)
    assert_int_equal(lk->keep[i], VS_KEEP);
  destroy(&b);
}

/* A kind whose qkv tensors are frozen: its qkv_proj op's backward loses exactly
 * its weight-gradient work, the other ops keep theirs; gradients and Adam
 * states (12 B per element with fp32 master weights; bf16 gradients) cover
 * the trainable tensors only; parameter bytes do not change. */
static void test_frozen_tensors(void **state)
{
  built b;
  vs_block *f;
  uint32_t kind;
  vs_error err;
  const vs_kind_plan *dense, *frozen;
  const vs_block *d;
  uint64_t qkv = 64 * 3 * 64 + 3 * 64; /* weight and bias */
  int seen = 0;
  (void)state;
  vs_error_clear(&err);
  build(&b, NULL, 0, 1);
  vs_recipe_fini(&b.r);
  assert_int_equal(vs_model_add_kind(&b.m, vs_model_layer(&b.m, 0), "f", &kind,
                                     &f, &err),
                   0);
  assert_int_equal(vs_block_freeze(f, "qkv"), 2);
  assert_int_equal(vs_recipe_build(&b.wl, &b.m, &b.r, &err), 0);
  d = &b.m.kinds[1];
  dense = &b.r.kinds[1];
  frozen = &b.r.kinds[kind];
  assert_int_equal(frozen->param_bytes, dense->param_bytes);
  assert_int_equal(frozen->param_elems, dense->param_elems);
  assert_int_equal(dense->trainable_elems - frozen->trainable_elems, qkv);
  assert_int_equal(dense->grad_bytes - frozen->grad_bytes, 2 * qkv);
  assert_int_equal(dense->optimizer_bytes - frozen->optimizer_bytes, 12 * qkv);
  for (uint32_t i = 0; i < d->n_ops; i++) {
    const vs_op_spec *op = &d->ops[i];
    bool is_qkv = strcmp(op->name, "qkv_proj") == 0;
    seen += is_qkv;
    tu_assert_close(dense->bwd_flops[i], op->bwd_flops, 0);
    tu_assert_close(frozen->bwd_flops[i],
                    is_qkv ? op->bwd_flops - op->wgrad_flops : op->bwd_flops,
                    0);
    tu_assert_close(frozen->bwd_bytes[i],
                    is_qkv ? op->bwd_bytes - op->wgrad_bytes : op->bwd_bytes,
                    0);
    if (is_qkv) /* a matmul's weight gradient is half its backward */
      tu_assert_close(op->wgrad_flops, op->bwd_flops / 2.0, 0);
  }
  assert_int_equal(seen, 1);
  /* a tensor sharded over the expert group is refused, not mis-sharded */
  vs_recipe_fini(&b.r);
  f = &b.m.kinds[kind];
  f->params[0].shard_group = VS_GROUP_EP;
  assert_int_equal(vs_recipe_build(&b.wl, &b.m, &b.r, &err), VS_EINPUT);
  assert_non_null(strstr(err.msg, "over the ep group"));
  assert_null(b.r.kinds);
  destroy(&b);
}

/* Tensor-parallel collectives run on the compute stream (Megatron issues
 * them there), gradient and ZeRO traffic on the data-parallel stream, the
 * tied-embedding all-reduce over the embedding group, pipeline traffic on
 * the send and receive streams; fp32 main gradients are 4 bytes. */
/* Bytes of the saved tensors of block kind k that the plan keeps. */
static uint64_t kept(const built *b, uint32_t k)
{
  const vs_block *blk = &b->m.kinds[k];
  uint64_t bytes = 0;
  for (uint32_t s = 0; s < blk->n_saved; s++)
    if (b->r.kinds[k].keep[s] == VS_KEEP)
      bytes += blk->saved[s].bytes;
  return bytes;
}

/* The keep decision of the first tensor op `name` saves in kind k. */
static int keep_of_op(const built *b, uint32_t k, const char *name)
{
  const vs_block *blk = &b->m.kinds[k];
  for (uint32_t i = 0; i < blk->n_ops; i++)
    if (strcmp(blk->ops[i].name, name) == 0)
      return b->r.kinds[k].keep[blk->ops[i].first_saved];
  fail_msg("no op %s", name);
  return -1;
}

/* A frozen linear keeps no input for its weight gradient (autograd saves
 * what the gradients it computes need; shared/reference/frameworks.md
 * 6.2): with LoRA on q and v of a Llama layer, qkv_proj's, mlp_gate_up's
 * and mlp_down's inputs go; the adapter keeps x (qkv's input: the same
 * tensor, once) and each A's r-wide output; flash attention keeps its
 * output, which is attn_out_proj's input. So a layer keeps the full
 * fine-tune's tensors less tokens x (h + f) x 2 B, plus 2 x tokens x r x
 * 2 B. With eager attention attn_out_proj's input goes too. */
static void test_frozen_linear_keeps_no_input(void **state)
{
  static const char *const lora[] = {"finetune.method=lora",
                                     "finetune.lora_rank=8",
                                     "finetune.adapter_dtype=bf16"};
  static const char *const eager[] = {"finetune.method=lora",
                                      "training.attention=eager",
                                      "finetune.adapter_dtype=bf16"};
  static const char *const fp32[] = {"finetune.method=lora"};
  static const char *const flash_o[] = {"finetune.method=lora",
                                        "finetune.lora_targets=q,v,o",
                                        "finetune.adapter_dtype=bf16"};
  static const char *const eager_full[] = {"training.attention=eager"};
  const uint64_t tok = 32, h = 64, f = 160, r = 8;
  built full, lo;
  (void)state;
  build_from(&full, llama, NULL, 0, 1);
  build_from(&lo, llama, lora, 3, 1);
  assert_int_equal(keep_of_op(&lo, 1, "qkv_proj"), VS_NOT_SAVED);
  assert_int_equal(keep_of_op(&lo, 1, "mlp_gate_up"), VS_NOT_SAVED);
  assert_int_equal(keep_of_op(&lo, 1, "mlp_down"), VS_NOT_SAVED);
  assert_int_equal(keep_of_op(&lo, 1, "attn_out_proj"), VS_KEEP);
  assert_int_equal(keep_of_op(&lo, 1, "lora_qkv"), VS_KEEP);
  assert_int_equal(keep_of_op(&full, 1, "qkv_proj"), VS_KEEP);
  assert_int_equal(kept(&lo, 1), kept(&full, 1) - tok * (h + f) * 2 +
                                     2 * tok * r * 2);
  destroy(&lo);
  /* with o targeted too, flash already keeps o's input: only A's output
   * more */
  build_from(&lo, llama, flash_o, 3, 1);
  assert_int_equal(kept(&lo, 1), kept(&full, 1) - tok * (h + f) * 2 +
                                     3 * tok * r * 2);
  destroy(&lo);
  /* fp32 adapters (PEFT's default) on bf16 activations: each target keeps
   * its own cast of x (PEFT casts x to the adapter's dtype, autocast casts
   * it back for the matmul), so q and v keep two */
  build_from(&lo, llama, fp32, 1, 1);
  assert_int_equal(kept(&lo, 1), kept(&full, 1) - tok * (h + f) * 2 +
                                     tok * h * 2 + 2 * tok * r * 2);
  destroy(&full);
  destroy(&lo);
  build_from(&full, llama, eager_full, 1, 1);
  build_from(&lo, llama, eager, 3, 1);
  assert_int_equal(keep_of_op(&lo, 1, "attn_out_proj"), VS_NOT_SAVED);
  assert_int_equal(kept(&lo, 1), kept(&full, 1) - tok * (2 * h + f) * 2 +
                                     2 * tok * r * 2);
  destroy(&full);
  destroy(&lo);
}

/* An int8 base (bitsandbytes' Linear8bitLt) keeps each linear's input
 * whatever its weight: MatMul8bitLt (autograd/_functions.py) sets
 * ctx.tensors = (CAt, subA, A) whenever its input needs a gradient, A
 * being the 16-bit input itself (CAt None for a frozen weight since the
 * 0.45 series, subA data-dependent and not counted). So against the nf4
 * or 16-bit base of test_frozen_linear_keeps_no_input, mlp_gate_up's
 * and mlp_down's inputs come back, tokens x (h + f) x 2 B; qkv_proj's x
 * is the tensor bf16 adapters keep, counted once (the adapter no longer
 * saves it). fp32 adapters keep their own casts of x, so qkv_proj's x
 * comes back too: tokens x (2h + f) x 2 B. */
static void test_int8_base_keeps_inputs(void **state)
{
  static const char *const bf16[] = {"finetune.method=lora",
                                     "finetune.adapter_dtype=bf16"};
  static const char *const bf16_int8[] = {"finetune.method=lora",
                                          "finetune.adapter_dtype=bf16",
                                          "finetune.base_dtype=int8"};
  static const char *const fp32[] = {"finetune.method=lora"};
  static const char *const fp32_int8[] = {"finetune.method=lora",
                                          "finetune.base_dtype=int8"};
  static const char *const nf4[] = {"finetune.method=qlora",
                                    "finetune.adapter_dtype=bf16"};
  const uint64_t tok = 32, h = 64, f = 160;
  built lo, q8, q4;
  (void)state;
  build_from(&lo, llama, bf16, 2, 1);
  build_from(&q8, llama, bf16_int8, 3, 1);
  build_from(&q4, llama, nf4, 2, 1);
  assert_int_equal(keep_of_op(&q8, 1, "qkv_proj"), VS_KEEP);
  assert_int_equal(keep_of_op(&q8, 1, "mlp_gate_up"), VS_KEEP);
  assert_int_equal(keep_of_op(&q8, 1, "mlp_down"), VS_KEEP);
  assert_int_equal(kept(&q8, 1), kept(&lo, 1) + tok * (h + f) * 2);
  /* MatMul4Bit keeps only the packed weight */
  assert_int_equal(keep_of_op(&q4, 1, "qkv_proj"), VS_NOT_SAVED);
  assert_int_equal(kept(&q4, 1), kept(&lo, 1));
  destroy(&lo);
  destroy(&q8);
  destroy(&q4);
  build_from(&lo, llama, fp32, 1, 1);
  build_from(&q8, llama, fp32_int8, 2, 1);
  assert_int_equal(kept(&q8, 1), kept(&lo, 1) + tok * (2 * h + f) * 2);
  destroy(&lo);
  destroy(&q8);
}

static void test_comm_and_grad_dtype(void **state)
{
  static const char *const fp32g[] = {"training.grad_dtype=fp32"};
  built b;
  (void)state;
  build(&b, fp32g, 1, 1);
  assert_int_equal(b.r.comm[VS_USE_OP].stream, VS_STREAM_COMPUTE);
  assert_int_equal(b.r.comm[VS_USE_OP].group, VS_GROUP_TP);
  assert_int_equal(b.r.comm[VS_USE_GRAD_REDUCE].stream, VS_STREAM_COMM);
  assert_int_equal(b.r.comm[VS_USE_GRAD_REDUCE].group, VS_GROUP_DP);
  assert_int_equal(b.r.comm[VS_USE_EMBED_SYNC].group, VS_GROUP_EMBEDDING);
  assert_int_equal(b.r.comm[VS_USE_SEND].stream, VS_STREAM_SEND);
  assert_int_equal(b.r.comm[VS_USE_RECV].stream, VS_STREAM_RECV);
  assert_int_equal(b.r.comm[VS_USE_RECV].group, VS_GROUP_PP);
  assert_int_equal(b.r.grad_elem_bytes, 4);
  assert_false(b.r.embedding_sync); /* no pipeline */
  destroy(&b);
  build(&b, NULL, 0, 1);
  assert_int_equal(b.r.grad_elem_bytes, 2); /* as the bf16 weights */
  destroy(&b);
}

/* Optimizer states per tensor (recipe.h lists the sources). */
static void test_optimizer_state_bytes(void **state)
{
  (void)state;
  assert_int_equal(
      vs_optimizer_state_bytes(VS_OPT_ADAM, VS_WITH_MASTER, 10, 10), 1200);
  assert_int_equal(
      vs_optimizer_state_bytes(VS_OPT_ADAMW, VS_WITHOUT_MASTER, 10, 10), 800);
  assert_int_equal(vs_optimizer_state_bytes(VS_OPT_SGD, VS_WITH_MASTER, 10, 10),
                   400);
  assert_int_equal(
      vs_optimizer_state_bytes(VS_OPT_LION, VS_WITHOUT_MASTER, 10, 10), 400);
  /* adafactor: factored second moment 4 (rows + cols) for a matrix */
  assert_int_equal(
      vs_optimizer_state_bytes(VS_OPT_ADAFACTOR, VS_WITHOUT_MASTER, 100, 50),
      600);
  /* adam8bit: 2 B per element + 2 fp32 absmax per 256 block; 8 B under
   * 4096 elements */
  assert_int_equal(
      vs_optimizer_state_bytes(VS_OPT_ADAM8BIT, VS_WITHOUT_MASTER, 4096, 1),
      2 * 4096 + 2 * 4 * 16);
  assert_int_equal(
      vs_optimizer_state_bytes(VS_OPT_ADAM8BIT, VS_WITHOUT_MASTER, 4095, 1),
      8 * 4095);
}

/* Each state tensor an optimizer keeps for a parameter, the master copy
 * first: what PyTorch allocates one by one (their sum is
 * vs_optimizer_state_bytes). */
static void test_optimizer_state_tensors(void **state)
{
  uint64_t t[VS_OPT_STATE_TENSORS_MAX];
  (void)state;
  /* master, exp_avg, exp_avg_sq */
  assert_int_equal(
      vs_optimizer_state_tensors(VS_OPT_ADAMW, VS_WITH_MASTER, 10, 10, t), 3);
  assert_true(t[0] == 400 && t[1] == 400 && t[2] == 400);
  assert_int_equal(
      vs_optimizer_state_tensors(VS_OPT_SGD, VS_WITHOUT_MASTER, 10, 10, t), 0);
  /* adafactor: the row and column factors of a matrix */
  assert_int_equal(vs_optimizer_state_tensors(VS_OPT_ADAFACTOR,
                                              VS_WITHOUT_MASTER, 100, 50, t),
                   2);
  assert_true(t[0] == 400 && t[1] == 200);
  /* adam8bit: state1, state2 (1 B an element) and their absmax */
  assert_int_equal(
      vs_optimizer_state_tensors(VS_OPT_ADAM8BIT, VS_WITH_MASTER, 4096, 1, t),
      5);
  assert_true(t[0] == 4 * 4096 && t[1] == 4096 && t[2] == 4096 &&
              t[3] == 4 * 16 && t[4] == 4 * 16);
}

/* A tensor's states as the recipe keeps them, and where they are
 * separate allocations: PyTorch's own loop without ZeRO (no framework, or
 * the Hugging Face Trainer), not ZeRO's partitions or Megatron-LM's
 * buffers. bf16 weights with a master copy (the default): fp32 master
 * and moments, bf16 gradients; the Trainer over a bf16 model keeps its
 * moments in bf16 and no master. */
static void test_tensor_states(void **state)
{
  static const char *const zero1[] = {"parallel.zero=1"};
  static const char *const megatron[] = {"training.framework=megatron"};
  static const char *const hf[] = {"training.framework=hf",
                                   "training.precision=bf16"};
  const vs_param_tensor *w;
  vs_tensor_states ts;
  uint64_t n;
  built b;
  (void)state;
  build(&b, NULL, 0, 1);
  assert_true(b.r.per_tensor_states);
  w = &vs_model_block(&b.m, 1)->params[0];
  n = w->rows * w->cols;
  assert_true(w->trainable && n > 1);
  vs_recipe_tensor_states(&b.r, &b.wl.training, w, &ts);
  assert_int_equal(ts.stored_param, 2 * n);
  assert_int_equal(ts.grad, 2 * n);
  assert_int_equal(ts.made_grad, ts.grad);
  assert_int_equal(ts.n_optimizer, 3);
  assert_int_equal(ts.master, 4 * n);
  assert_int_equal(ts.optimizer[0] + ts.optimizer[1] + ts.optimizer[2],
                   12 * n);
  destroy(&b);
  build(&b, hf, 2, 1);
  assert_true(b.r.per_tensor_states);
  vs_recipe_tensor_states(&b.r, &b.wl.training,
                          &vs_model_block(&b.m, 1)->params[0], &ts);
  assert_int_equal(ts.master, 0);
  assert_int_equal(ts.n_optimizer, 2);
  assert_int_equal(ts.optimizer[0], 2 * n);
  destroy(&b);
  build(&b, zero1, 1, 2);
  assert_false(b.r.per_tensor_states);
  destroy(&b);
  build(&b, megatron, 1, 1);
  assert_false(b.r.per_tensor_states);
  destroy(&b);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_zero_stages),
      cmocka_unit_test(test_optimizer_state_tensors),
      cmocka_unit_test(test_tensor_states),
      cmocka_unit_test(test_reduce_depth),
      cmocka_unit_test(test_shard_rounding),
      cmocka_unit_test(test_keep_decisions),
      cmocka_unit_test(test_frozen_tensors),
      cmocka_unit_test(test_frozen_linear_keeps_no_input),
      cmocka_unit_test(test_int8_base_keeps_inputs),
      cmocka_unit_test(test_comm_and_grad_dtype),
      cmocka_unit_test(test_optimizer_state_bytes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

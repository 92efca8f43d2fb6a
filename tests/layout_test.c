/* layout_test.c - model states, ZeRO partitioning and framework memory
 * against published formulas: the ZeRO paper (Rajbhandari et al. 2020,
 * arXiv 1910.02054, Sec. 5 and Table 1; shared/reference/README.md section
 * 1), Megatron-LM's theoretical_memory_usage.py (18 bytes/param, 6 + 12/DP
 * with the distributed optimizer), and the optimizer state layouts each
 * optimizer's paper or library documents. Psi is the parameter count on one
 * GPU before partitioning (lay.param_elems), Nd the data-parallel size. */
#include "cost.h"
#include "layout.h"
#include "testutil.h"
#include "units.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------ */

/* A 10-layer GPT (hidden 128, vocab 1024) to split over pipeline stages. */
static const char pipeline_gpt[] =
    "[model]\narch = gpt\nlayers = 10\nhidden = 128\nheads = 4\n"
    "vocab = 1024\nseq_len = 64\n";

/* Loads ini with sets on gpus GPUs, builds its model and layout on topo. */
static int build_on(const vs_topology *topo, const char *ini,
                    const char *const *sets, size_t n_sets, uint64_t gpus,
                    vs_layout *lay, vs_error *err)
{
  vs_workload wl;
  vs_model m;
  vs_recipe r;
  int rc;
  vs_error_clear(err);
  if (tu_load_workload(&wl, ini, sets, n_sets, gpus, err) != 0)
    fail_msg("workload: %s", err->msg);
  if (vs_model_build(&wl, &m, err) != 0)
    fail_msg("model: %s", err->msg);
  if (vs_recipe_build(&wl, &m, &r, err) != 0)
    fail_msg("recipe: %s", err->msg);
  rc = vs_layout_build(&wl, topo, &m, &r, lay, err);
  vs_recipe_fini(&r);
  vs_model_fini(&m);
  return rc;
}

static void build(const char *ini, const char *const *sets, size_t n_sets,
                  uint64_t gpus, vs_layout *lay)
{
  vs_topology topo;
  vs_error err;
  tu_default_topology(&topo);
  if (build_on(&topo, ini, sets, n_sets, gpus, lay, &err) != 0)
    fail_msg("layout: %s", err.msg);
}


/* Checks Nd * states against numer = Nd * (the paper's bytes), which is an
 * integer even when the paper's Psi/Nd is not: the partitioned buffers round
 * up to whole elements per rank, so Nd * states may exceed numer by less
 * than Nd * pad (pad = sum of the element sizes of the partitioned
 * buffers), never fall short of it. */
static void assert_sharded(uint64_t states, uint64_t nd, uint64_t numer,
                           uint64_t pad)
{
  if (states * nd < numer || states * nd - numer >= nd * pad)
    fail_msg("model states %llu x %llu = %llu, expected %llu (+ < %llu)",
             (unsigned long long)states, (unsigned long long)nd,
             (unsigned long long)(states * nd), (unsigned long long)numer,
             (unsigned long long)(nd * pad));
}

/* A GPT of about 7.5e9 parameters, the ZeRO paper's worked example:
 * 12Lh^2 + 13Lh + Vh + sh + 2h with L = 36, h = 4096, V = 50257, s = 2048
 * = 7,463,923,712 (0.48% under 7.5e9). fp16 + Adam: mixed precision with
 * fp32 master weights (the ZeRO paper's setting). */
static const char gpt_7b5[] =
    "[model]\narch = gpt\nlayers = 36\nhidden = 4096\nheads = 32\n"
    "vocab = 50257\nseq_len = 2048\n"
    "[training]\nprecision = fp16\noptimizer = adam\n";

static const char small_gpt[] =
    "[model]\narch = gpt\nlayers = 4\nhidden = 1024\nheads = 16\n"
    "vocab = 50257\nseq_len = 1024\n";

/* ------------------------------------------------------------------------
 * ZeRO Table 1
 * ------------------------------------------------------------------------ */

static void test_zero_stages(void **state)
{
  static const char *const zs[] = {"parallel.zero=0", "parallel.zero=1",
                                   "parallel.zero=2", "parallel.zero=3"};
  /* ZeRO paper Sec. 5 worked figures for Psi = 7.5e9, Nd = 64, in GB */
  static const double paper_gb[] = {120.0, 31.4, 16.6, 1.88};
  const uint64_t nd = 64;
  (void)state;
  for (uint64_t z = 0; z < 4; z++) {
    vs_layout lay;
    uint64_t psi, states;
    build(gpt_7b5, &zs[z], 1, nd, &lay);
    psi = lay.param_elems;
    states = vs_layout_model_states(&lay);
    assert_int_equal(lay.dp, nd);
    /* 12Lh^2 + 13Lh + Vh + sh + 2h for the config above */
    assert_int_equal(psi, 7463923712ull);
    /* K = 12: fp32 master params, momentum and variance */
    assert_int_equal(lay.optimizer_full_bytes, 12 * psi);
    switch (z) {
    case 0: /* ZeRO Table 1, baseline: (2 + 2 + K) Psi = 16 Psi */
      assert_int_equal(states, 16 * psi);
      break;
    case 1: /* P_os: 4 Psi + 12 Psi / Nd (optimizer shard in 4-byte words) */
      assert_sharded(states, nd, 4 * psi * nd + 12 * psi, 4);
      break;
    case 2: /* P_os+g: 2 Psi + 14 Psi / Nd (+ 2-byte grad elements) */
      assert_sharded(states, nd, 2 * psi * nd + 14 * psi, 4 + 2);
      break;
    default: /* P_os+g+p: 16 Psi / Nd (+ 2-byte param elements) */
      assert_sharded(states, nd, 16 * psi, 4 + 2 + 2);
      break;
    }
    /* the paper's worked numbers (Psi 7.5e9): our Psi is 0.48% smaller and
     * the paper rounds to 3 digits, so 1% */
    tu_assert_close((double)states / 1e9, paper_gb[z], 0.01);
  }
}

/* ------------------------------------------------------------------------
 * Offload (shared/reference/frameworks.md section 5; ZeRO-Offload, Ren et
 * al. 2021; ZeRO-Infinity, Rajbhandari et al. 2021, 20 B/param)
 * ------------------------------------------------------------------------ */

/* Layout of gpt_7b5 on nd GPUs with ZeRO stage zero and the offload keys. */
static void build_offload(const char *zero, const char *opt,
                          const char *params, uint64_t nd, vs_layout *lay)
{
  const char *sets[3] = {zero, opt, params};
  build(gpt_7b5, sets, 3, nd, lay);
}

static void test_offload_placement(void **state)
{
  const uint64_t nd = 8;
  vs_layout on, off;
  const vs_stage_layout *st;
  uint64_t psi;
  (void)state;

  /* ZeRO-2 + CPU optimizer: GPU 2 Psi (fp16 params), host 16 Psi / Nd
   * (fp32 master, m, v and an fp32 gradient partition) */
  build_offload("parallel.zero=2", "parallel.offload_optimizer=none",
                "parallel.offload_params=none", nd, &on);
  build_offload("parallel.zero=2", "parallel.offload_optimizer=cpu",
                "parallel.offload_params=none", nd, &off);
  st = &off.stages[0];
  psi = st->param_elems;
  assert_int_equal(st->params_bytes, 2 * psi);
  assert_int_equal(st->grads_bytes, 0);
  assert_int_equal(st->optimizer_bytes, 0);
  assert_sharded(st->host.optimizer, nd, 12 * psi, 4);
  assert_sharded(st->host.grads, nd, 4 * psi, 4);
  assert_sharded(vs_placed_total(&st->host), nd, 16 * psi, 4 + 4);
  assert_int_equal(st->host.params + st->host.buffers, 0);
  /* the optimizer partition moves byte for byte */
  assert_int_equal(on.stages[0].optimizer_bytes, st->host.optimizer);
  assert_int_equal(vs_placed_total(&st->nvme), 0);

  /* DeepSpeed ZeRO-1/2 (stage_1_and_2.py): a 16-bit host copy of the
   * updated partition, 2 Psi / Nd more (since PR #7309,
   * param_buffer_of_bit16_for_cpu_offload_groups), and 16-bit staging
   * buffers of the largest parameter, the 50257 x 4096 embedding, on the
   * host and the GPU (temp_grad_buffer_for_cpu_offload and _gpu_offload),
   * where the states are the same; over 4 micro-batches a step the host's
   * 16-bit gradient sums (accumulated_grads_in_cpu), 2 Psi / Nd more */
  {
    const char *ds[] = {"parallel.zero=2", "parallel.offload_optimizer=cpu",
                        "training.framework=deepspeed",
                        "training.global_batch=32"};
    const uint64_t embedding = 50257ull * 4096;
    vs_layout d, gas;
    build(gpt_7b5, ds, 3, nd, &d);
    assert_int_equal(d.grad_accum, 1);
    assert_int_equal(d.stages[0].largest_trainable_elems, embedding);
    assert_int_equal(d.stages[0].step_elems, (psi + nd - 1) / nd);
    assert_int_equal(d.stages[0].host.buffers,
                     2 * d.stages[0].step_elems + 2 * embedding);
    assert_int_equal(d.stages[0].grad_staging_bytes, 2 * embedding);
    assert_int_equal(d.stages[0].host.optimizer, st->host.optimizer);
    build(gpt_7b5, ds, 4, nd, &gas);
    assert_int_equal(gas.grad_accum, 4);
    assert_int_equal(gas.stages[0].host.buffers,
                     d.stages[0].host.buffers + 2 * d.stages[0].step_elems);
    assert_int_equal(gas.stages[0].grad_staging_bytes,
                     d.stages[0].grad_staging_bytes);
    /* none of it without DeepSpeed */
    assert_int_equal(st->grad_staging_bytes, 0);
  }

  /* ZeRO-1 + CPU optimizer: the GPU keeps whole fp16 gradients */
  build_offload("parallel.zero=1", "parallel.offload_optimizer=cpu",
                "parallel.offload_params=none", nd, &off);
  st = &off.stages[0];
  assert_int_equal(st->params_bytes + st->grads_bytes, 4 * psi);
  assert_int_equal(st->optimizer_bytes, 0);
  assert_sharded(vs_placed_total(&st->host), nd, 16 * psi, 4 + 4);

  /* ZeRO-3 + CPU params and optimizer: nothing resident on the GPU, host
   * 18 Psi / Nd (ZeRO-Infinity's 20 B/param less the fp16 gradients, which
   * live on the GPU only until copied out) */
  build_offload("parallel.zero=3", "parallel.offload_optimizer=cpu",
                "parallel.offload_params=cpu", nd, &off);
  st = &off.stages[0];
  assert_int_equal(vs_layout_model_states(&off), 0);
  assert_sharded(st->host.params, nd, 2 * psi, 2);
  assert_sharded(vs_placed_total(&st->host), nd, 18 * psi, 2 + 4 + 4);

  /* ZeRO-3 + NVMe: states and params on NVMe, the fp32 gradients and
   * DeepSpeed's pinned swap buffers in host memory: 4 buffers of the
   * sub-group partition (min(1e9, Psi / Nd) elements) x 4 B, 5 x 1e8 x 2 B */
  build_offload("parallel.zero=3", "parallel.offload_optimizer=nvme",
                "parallel.offload_params=nvme", nd, &off);
  st = &off.stages[0];
  assert_int_equal(vs_layout_model_states(&off), 0);
  assert_sharded(st->nvme.optimizer, nd, 12 * psi, 4);
  assert_sharded(st->nvme.params, nd, 2 * psi, 2);
  assert_sharded(st->host.grads, nd, 4 * psi, 4);
  assert_true(psi / nd < 1000000000ull);
  assert_int_equal(st->host.buffers,
                   4 * 4 * ((psi + nd - 1) / nd) + 5 * 2 * 100000000ull);
  assert_int_equal(st->step_elems, (psi + nd - 1) / nd);
}

/* ------------------------------------------------------------------------
 * LoRA and QLoRA (shared/reference/frameworks.md 6.1-6.2)
 * ------------------------------------------------------------------------ */

/* Llama-3.1-8B's shapes (32 layers, h 4096, 8 KV heads of 128, f 14336,
 * vocab 128256). */
static const char llama3_8b[] =
    "[model]\narch = llama\nlayers = 32\nhidden = 4096\nheads = 32\n"
    "kv_heads = 8\nffn_hidden = 14336\nvocab = 128256\nseq_len = 2048\n"
    "[training]\nprecision = bf16\noptimizer = adamw\n";

/* A rank-r adapter on a d_in -> d_out linear adds r (d_in + d_out)
 * parameters (PEFT): r = 8 on q and v of Llama-3.1-8B, 3407872; on all
 * seven linears, 20971520. They train in fp32 (PEFT's
 * autocast_adapter_dtype): 4 B of gradient and 8 of AdamW states each, no
 * master copy; the base has neither. */
static void test_lora_trainable_is_pefts(void **state)
{
  const char *qv[] = {"finetune.method=lora"};
  const char *all[] = {"finetune.method=lora",
                       "finetune.lora_targets=q,k,v,o,gate,up,down"};
  vs_layout lay;
  (void)state;
  build(llama3_8b, qv, 1, 1, &lay);
  assert_int_equal(lay.stages[0].trainable_elems, 3407872);
  assert_int_equal(lay.stages[0].grads_bytes, 4 * 3407872);
  assert_int_equal(lay.stages[0].optimizer_bytes, 8 * 3407872);
  build(llama3_8b, all, 2, 1, &lay);
  assert_int_equal(lay.stages[0].trainable_elems, 20971520);
  {
    /* bf16 adapters stepped without a master copy by PyTorch's AdamW
     * (torchtune): 2 B of gradient and 4 B of bf16 states (zeros_like,
     * frameworks.md 6.2: 2 + 2 + 4); by bitsandbytes' paged 32-bit AdamW
     * (the QLoRA repository's --bf16): 8 B of fp32 states */
    const char *bf16[] = {"finetune.method=lora", "finetune.adapter_dtype=bf16",
                          "training.master_weights=false"};
    const char *paged[] = {"finetune.method=lora",
                           "finetune.adapter_dtype=bf16",
                           "training.master_weights=false",
                           "training.paged_optimizer=true"};
    build(llama3_8b, bf16, 3, 1, &lay);
    assert_int_equal(lay.stages[0].grads_bytes, 2 * 3407872);
    assert_int_equal(lay.stages[0].optimizer_bytes, 4 * 3407872);
    build(llama3_8b, paged, 4, 1, &lay);
    assert_int_equal(lay.stages[0].optimizer_bytes +
                         lay.stages[0].managed_bytes,
                     8 * 3407872);
  }
}

/* Paged 8-bit Adam (bitsandbytes optim/optimizer.py
 * Optimizer2State.init_state): state1 and state2 (1 B an element) come
 * from get_state_buffer, in managed memory for tensors of at least 1e5
 * elements; their absmax arrays (an fp32 per 256 elements each) are
 * torch.zeros on the GPU, in the allocator. Full fine-tune of
 * Llama-3.1-8B's shapes without master copies: 8,030,261,248
 * parameters, of which 65 norm scales of 4096 (32 x 2 + the final one)
 * stay unpaged. Paged: 2 B x 8,029,995,008; on the GPU each large
 * tensor's 2 x 4 B per 256 elements (every one a multiple of 256), and
 * each norm's 8-bit states (4096 >= min_8bit_size) with their absmax:
 * 2 x 4096 + 2 x 4 x 16 B. */
static void test_paged_adam8bit_keeps_absmax_unpaged(void **state)
{
  const char *sets[] = {
      "training.optimizer=adam8bit", "training.master_weights=false",
      "training.paged_optimizer=true", "model.tied_embeddings=false"};
  const uint64_t paged = 8030261248ull - 65 * 4096;
  vs_layout lay;
  (void)state;
  build(llama3_8b, sets, 4, 1, &lay);
  assert_int_equal(lay.stages[0].param_elems, 8030261248ull);
  assert_int_equal(lay.stages[0].managed_bytes, 2 * paged);
  assert_int_equal(lay.stages[0].optimizer_bytes,
                   8 * paged / 256 + 65 * (2 * 4096 + 2 * 4 * 16));
}

/* Under DeepSpeed in bf16 the adapters are cast to bf16 with the model
 * (engine.py _cast_module_mixed_precision at edaa7221): 2 B of weight
 * and of gradient each, and 12 B of optimizer states (the fp32 master
 * and Adam's two moments) in place of fp32 adapters' 4, 4 and 8. */
static void test_lora_under_deepspeed(void **state)
{
  const char *none[] = {"finetune.method=lora"};
  const char *ds[] = {"finetune.method=lora", "training.framework=deepspeed"};
  vs_layout peft, lay;
  (void)state;
  build(llama3_8b, none, 1, 1, &peft);
  build(llama3_8b, ds, 2, 1, &lay);
  assert_int_equal(lay.stages[0].trainable_elems, 3407872);
  assert_int_equal(lay.stages[0].grads_bytes, 2 * 3407872);
  assert_int_equal(lay.stages[0].optimizer_bytes, 12 * 3407872);
  assert_int_equal(peft.stages[0].params_bytes - lay.stages[0].params_bytes,
                   2 * 3407872);
}

/* QLoRA's base: every layer linear in NF4 with double quantization
 * (0.515869 B a weight: the 4096 x 6144 qkv, 4096 x 4096 output, two
 * 4096 x 14336 and one 14336 x 4096 MLP weights, all multiples of 64 x
 * 256), the embedding, head and norms in bf16, the q,v adapters in fp32. */
static void test_qlora_base_bytes(void **state)
{
  const char *q[] = {"finetune.method=qlora"};
  const uint64_t h = 4096, f = 14336, v = 128256, layers = 32;
  uint64_t linear = h * 6144 + h * h + 3 * h * f;   /* weights per layer */
  /* and each of its 5 weight tensors' quantization state beside the
   * absmaxes (quantize_4bit): the NF4 code (16 fp32), the nested code
   * (256 fp32) and offset (fp32) */
  uint64_t nf4 =
      linear / 2 + linear / 64 + 4 * (linear / 64 / 256) + 5 * (64 + 1024 + 4);
  uint64_t bf16 = 2 * (2 * v * h + (2 * h) * layers + h);
  vs_layout lay;
  (void)state;
  build(llama3_8b, q, 1, 1, &lay);
  assert_int_equal(nf4, 112513024 + 5 * 1092);
  assert_int_equal(lay.stages[0].params_bytes,
                   layers * nf4 + bf16 + 4 * 3407872);
}

/* NF4 without double quantization (transformers' BitsAndBytesConfig
 * default, bnb_4bit_use_double_quant=False: quantize_4bit keeps its fp32
 * absmaxes): 4 + 32/64 = 4.5 bits, 0.5625 B a weight, and the NF4 code
 * (16 fp32) beside each of the 5 weight tensors a layer; the rest as in
 * test_qlora_base_bytes. */
static void test_qlora_without_double_quant(void **state)
{
  const char *q[] = {"finetune.method=qlora", "finetune.double_quant=false"};
  const uint64_t h = 4096, f = 14336, v = 128256, layers = 32;
  uint64_t linear = h * 6144 + h * h + 3 * h * f;
  uint64_t nf4 = linear / 2 + 4 * (linear / 64) + 5 * 64;
  uint64_t bf16 = 2 * (2 * v * h + (2 * h) * layers + h);
  vs_layout lay;
  (void)state;
  build(llama3_8b, q, 2, 1, &lay);
  tu_assert_close((double)(nf4 - 5 * 64) / (double)linear, 0.5625, 0);
  assert_int_equal(lay.stages[0].params_bytes,
                   layers * nf4 + bf16 + 4 * 3407872);
}

/* A partial fine-tune (method = frozen, the last 2 of 32 layers train):
 * the 30 frozen layers' linear weights (5 tensors each) in base_dtype,
 * fp8 a byte a weight and an fp32 scale a tensor (Float8Tensor); the
 * trained layers, embedding, head and norms in bf16. Trainable: the 2
 * layers and the (untied) head with the final norm; AdamW with an fp32
 * master: 4 + 8 B each, bf16 gradients 2 B. Under precision = fp8 an FP8
 * base weight needs no quantized copy, only the transposed one (Hopper),
 * and the frozen layers, which run no backward, keep neither: copies and
 * transposes for the trained layers' GEMM weights only (the head is no
 * Transformer Engine module: no FP8 state). */
static void test_frozen_base_formats(void **state)
{
  const char *fp8[] = {"finetune.method=frozen", "finetune.trainable_layers=2",
                       "finetune.base_dtype=fp8"};
  const char *nf4[] = {"finetune.method=frozen", "finetune.trainable_layers=2",
                       "finetune.base_dtype=nf4"};
  const char *fp8_gemm[] = {"finetune.method=frozen",
                            "finetune.trainable_layers=2",
                            "finetune.base_dtype=fp8",
                            "training.precision=fp8"};
  const uint64_t h = 4096, f = 14336, v = 128256, layers = 32;
  uint64_t linear = h * 6144 + h * h + 3 * h * f;
  uint64_t nf4_bytes = linear / 2 + linear / 64 + 4 * (linear / 64 / 256) +
                       5 * (64 + 1024 + 4); /* test_qlora_base_bytes */
  uint64_t rest = 2 * (2 * v * h + (2 * h) * layers + h);
  uint64_t trainable = 2 * (linear + 2 * h) + v * h + h;
  vs_layout lay;
  (void)state;
  build(llama3_8b, fp8, 3, 1, &lay);
  assert_int_equal(lay.stages[0].trainable_elems, trainable);
  assert_int_equal(lay.stages[0].params_bytes,
                   30 * (linear + 5 * 4) + 2 * 2 * linear + rest);
  assert_int_equal(lay.stages[0].grads_bytes, 2 * trainable);
  assert_int_equal(lay.stages[0].optimizer_bytes, 12 * trainable);
  build(llama3_8b, nf4, 3, 1, &lay);
  assert_int_equal(lay.stages[0].params_bytes,
                   30 * nf4_bytes + 2 * 2 * linear + rest);
  build(llama3_8b, fp8_gemm, 4, 1, &lay);
  /* the 30 frozen layers run no backward: no copies kept for them */
  assert_int_equal(lay.stages[0].fp8_weight_elems, 2 * linear);
  assert_int_equal(lay.stages[0].fp8_copy_elems, 2 * linear);
  /* 4 GEMMs a layer (qkv, o, gate_up, down), each with 5 fp32 amax
   * histories of 1024 (DelayedScaling) */
  assert_int_equal(lay.stages[0].fp8_gemms, 4 * layers);
  assert_int_equal(lay.stages[0].fp8_cache_bytes,
                   2 * (2 * linear) + 4 * layers * 5 * 1024 * 4);
  {
    /* LoRA under fp8: the base GEMMs are Transformer Engine's, the
     * adapters PEFT's, which keep no FP8 state */
    const char *lora_fp8[] = {"finetune.method=lora", "training.precision=fp8"};
    build(llama3_8b, lora_fp8, 2, 1, &lay);
    assert_int_equal(lay.stages[0].fp8_weight_elems, layers * linear);
    assert_int_equal(lay.stages[0].fp8_gemms, 4 * layers);
  }
}

/* Transformer Engine's scaling state for the routed experts: Megatron-LM
 * runs each layer's local experts as a GroupedLinear of E / ep GEMMs, and
 * a module keeps fp8_meta["num_gemms"] x 5 FP8 tensors' amax histories
 * (TransformerEngine d0067d0d, module/base.py set_meta_tensor: 3 forward,
 * 2 backward a GEMM), so fc1 and fc2 hold E / ep GEMMs' each, beside qkv's
 * and the output projection's one; the router is no Transformer Engine
 * module. 4 layers, 8 experts over ep 2: 2 + 2 x 4 GEMMs a layer. */
static void test_fp8_grouped_expert_gemms(void **state)
{
  static const char moe[] =
      "[model]\narch = llama\nlayers = 4\nhidden = 256\nheads = 4\n"
      "ffn_hidden = 512\nvocab = 1024\nseq_len = 256\nexperts = 8\n"
      "[training]\nprecision = fp8\nframework = megatron\n"
      "[parallel]\nep = 2\nzero = 1\n";
  const uint64_t layers = 4, gemms = layers * (2 + 2 * 8 / 2);
  uint64_t weights;
  vs_layout lay;
  (void)state;
  build(moe, NULL, 0, 2, &lay);
  assert_int_equal(lay.stages[0].fp8_gemms, gemms);
  /* qkv and out 4h^2, the local experts' 3 h f each */
  weights = layers * (4 * 256 * 256 + 4 * 3 * 256 * 512);
  assert_int_equal(lay.stages[0].fp8_weight_elems, weights);
  assert_int_equal(lay.stages[0].fp8_cache_bytes,
                   2 * weights + gemms * 5 * 1024 * 4);
}

/* Megatron-LM's FP8 primary weights (--fp8-param-gather: Transformer
 * Engine's fp8_model_init): each FP8 GEMM's weight a Float8Tensor, 1 B a
 * weight and an fp32 scale (its 5 tensors a layer), kept with its
 * transposed copy (Hopper) and no quantized copy; the embedding, head and
 * norms stay bf16; gradients and the fp32 master shards as before. So
 * the parameters drop by 2 B a GEMM weight (less 4 B a tensor), and the
 * updated parameters' all-gather moves 1 B for them. */
static void test_fp8_primary_weights(void **state)
{
  const char *fp8[] = {"training.framework=megatron", "training.precision=fp8",
                       "parallel.zero=1", "training.fp8_param_gather=false"};
  const char *primary[] = {fp8[0], fp8[1], fp8[2],
                           "training.fp8_param_gather=true"};
  const uint64_t h = 4096, f = 14336, layers = 32;
  const uint64_t w = layers * (h * 6144 + h * h + 3 * h * f);
  vs_layout before, after;
  (void)state;
  build(llama3_8b, fp8, 4, 2, &before);
  build(llama3_8b, primary, 4, 2, &after);
  assert_int_equal(before.stages[0].fp8_copy_elems, w);
  assert_int_equal(after.stages[0].fp8_copy_elems, 0);
  assert_int_equal(after.stages[0].fp8_weight_elems, w);
  assert_int_equal(before.stages[0].params_bytes - after.stages[0].params_bytes,
                   2 * w - 4 * 5 * layers);
  assert_int_equal(before.stages[0].params_full_bytes -
                       after.stages[0].params_full_bytes,
                   w - 4 * 5 * layers);
  assert_int_equal(after.stages[0].grads_bytes, before.stages[0].grads_bytes);
  assert_int_equal(after.stages[0].optimizer_bytes,
                   before.stages[0].optimizer_bytes);
}

/* ------------------------------------------------------------------------
 * Megatron-LM: bf16, fp32 main grads, Adam
 * ------------------------------------------------------------------------ */

static void test_megatron_bytes_per_param(void **state)
{
  const char *sets[] = {"training.grad_dtype=fp32", "training.optimizer=adam",
                        "parallel.zero=0"};
  const uint64_t dp = 8;
  vs_layout lay;
  uint64_t psi;
  (void)state;
  build(small_gpt, sets, 3, dp, &lay);
  psi = lay.param_elems;
  /* Megatron theoretical_memory_usage.py: bf16 params 2 + fp32 main grads 4
   * + fp32 main params 4 + Adam moments 8 = 18 bytes/param */
  assert_int_equal(lay.params_bytes, 2 * psi);
  assert_int_equal(lay.grads_bytes, 4 * psi);
  assert_int_equal(lay.optimizer_bytes, 12 * psi);
  assert_int_equal(vs_layout_model_states(&lay), 18 * psi);

  sets[2] = "parallel.zero=1";
  build(small_gpt, sets, 3, dp, &lay);
  /* distributed optimizer (ZeRO-1): 6 + 12/DP bytes/param */
  assert_sharded(vs_layout_model_states(&lay), dp, 6 * psi * dp + 12 * psi, 4);
  assert_int_equal(lay.grads_bytes, 4 * psi); /* grads stay whole */
}

/* fp32 training: 4 (params) + 4 (grads) + 8 (Adam moments) = 16 bytes per
 * parameter, no master copy (the weights already are fp32). */
static void test_fp32_adam(void **state)
{
  const char *sets[] = {"training.precision=fp32", "training.optimizer=adam"};
  vs_layout lay;
  uint64_t psi;
  (void)state;
  build(small_gpt, sets, 2, 1, &lay);
  psi = lay.param_elems;
  assert_int_equal(lay.param_elem_bytes, 4);
  assert_int_equal(lay.grad_elem_bytes, 4);
  /* Adam's exp_avg + exp_avg_sq, fp32, no master weights: 8 Psi */
  assert_int_equal(lay.optimizer_bytes, 8 * psi);
  /* 4 + 4 + 8 = 16 bytes/param */
  assert_int_equal(vs_layout_model_states(&lay), 16 * psi);
}

/* [training] framework presets against the frameworks' own accounting
 * (shared/reference/frameworks.md 2.1-2.2, 3.1):
 * - DeepSpeed, bf16, ZeRO-1 with fp32 gradient accumulation:
 *   BF16_Optimizer (engine.py _do_optimizer_sanity_check at DeepSpeed
 *   edaa7221; without ZeRO before #7515), 2 bf16 params + 4 unsharded
 *   fp32 gradient buffer + 12/d sharded master and Adam = 6 + 12/d;
 * - DeepSpeed, fp16, ZeRO off: FP16_Optimizer, 16 resident; its step adds
 *   the flat fp32 gradients (4) beside the per-tensor fp32 copies of the
 *   group being flattened (4 x the weight-decay group): 24 at the step for
 *   a model of matrices, 20 plus 4 x its decay share in general;
 * - DeepSpeed ZeRO-1, fp16: 2 + 2 + 12/d, and a group's fp32 partition at
 *   the step (4 x decay / d);
 * - Megatron, bf16, distributed optimizer: fp32 main grads, 6 + 12/d;
 * - Megatron, fp16: fp16 main grads, 16 resident (4 + 12/d distributed),
 *   and each one's fp32 copy at the step (4, 4/d): dist_optimizer.md's
 *   20 and 4 + 16/d (section 3.1);
 * - FSDP2: 16/N (section 4.3). */
static void test_framework_presets(void **state)
{
  const char *ds_bf16[] = {"training.framework=deepspeed",
                           "training.precision=bf16"};
  const char *ds_bf16_z1[] = {"training.framework=deepspeed",
                              "training.precision=bf16", "parallel.zero=1",
                              "training.grad_dtype=fp32"};
  const char *ds_fp16[] = {"training.framework=deepspeed",
                           "training.precision=fp16"};
  const char *ds_z1[] = {"training.framework=deepspeed",
                         "training.precision=fp16", "parallel.zero=1"};
  const char *mg[] = {"training.framework=megatron", "training.precision=bf16",
                      "parallel.zero=1"};
  const char *fsdp2[] = {"training.framework=fsdp2", "training.precision=bf16"};
  const uint64_t d = 4;
  vs_layout lay;
  uint64_t psi, decay;
  (void)state;
  build(small_gpt, ds_bf16_z1, 4, d, &lay);
  psi = lay.param_elems;
  assert_int_equal(lay.stages[0].grads_bytes, 4 * psi);
  assert_sharded(vs_layout_model_states(&lay), d, 6 * psi * d + 12 * psi, 16);
  assert_int_equal(lay.stages[0].step_temp_bytes, 0);
  build(small_gpt, ds_fp16, 2, d, &lay);
  decay = lay.stages[0].decay_elems;
  assert_true(decay < psi && decay > psi - psi / 100); /* biases and norms */
  assert_int_equal(vs_layout_model_states(&lay), 16 * psi);
  assert_int_equal(lay.stages[0].step_temp_bytes, 4 * psi + 4 * decay);
  /* bf16 without ZeRO: FP16_Optimizer in bf16 (DDP_BFLOAT16), as fp16 */
  build(small_gpt, ds_bf16, 2, d, &lay);
  assert_int_equal(lay.stages[0].grads_bytes, 2 * psi);
  assert_int_equal(vs_layout_model_states(&lay), 16 * psi);
  assert_int_equal(lay.stages[0].step_temp_bytes, 4 * psi + 4 * decay);
  {
    /* ... but under its pipeline engine BF16_Optimizer, accumulating in
     * bf16 (grad_accum_dtype's default): a bf16 buffer, its masters and
     * states sharded (2 + 2 + 12/d), and each gradient partition cast to
     * fp32 before the update (4 B a stepped element) */
    const char *ds_bf16_pp[] = {"training.framework=deepspeed",
                                "training.precision=bf16", "parallel.pp=2"};
    const vs_stage_layout *st;
    build(small_gpt, ds_bf16_pp, 3, 2 * d, &lay);
    st = &lay.stages[0];
    assert_int_equal(lay.dp, d);
    assert_int_equal(st->grads_bytes, 2 * st->trainable_elems);
    assert_int_equal(st->step_elems, (st->trainable_elems + d - 1) / d);
    assert_int_equal(st->optimizer_bytes, 12 * st->step_elems);
    assert_int_equal(st->step_temp_bytes, 4 * st->step_elems);
  }
  build(small_gpt, ds_z1, 3, d, &lay);
  assert_sharded(vs_layout_model_states(&lay), d, 4 * psi * d + 12 * psi, 16);
  assert_int_equal(lay.stages[0].step_temp_bytes, 4 * ((decay + d - 1) / d));
  {
    /* DeepSpeed ZeRO-3 (stage3.py _prepare_fp32_grad_for_sub_group): the
     * 16-bit concatenation of a sub-group's gradient partitions and its
     * fp32 copy, 6 bytes an element of the largest, which is the decay
     * group's partition here and, past DeepSpeed's sub_group_size of 1e9
     * elements (2048 layers of 12.6M, 6.4e9 decay elements a GPU), 1e9 */
    const char *ds_z3[] = {"training.framework=deepspeed",
                           "training.precision=bf16", "parallel.zero=3"};
    const char *ds_z3_big[] = {"training.framework=deepspeed",
                               "training.precision=bf16", "parallel.zero=3",
                               "model.layers=2048"};
    const char *ds_z3_host[] = {"training.framework=deepspeed",
                                "training.precision=bf16", "parallel.zero=3",
                                "parallel.offload_optimizer=cpu"};
    build(small_gpt, ds_z3, 3, d, &lay);
    assert_int_equal(lay.stages[0].step_temp_bytes, 6 * ((decay + d - 1) / d));
    build(small_gpt, ds_z3_big, 4, d, &lay);
    assert_true(lay.stages[0].decay_elems / d > 1000000000ull);
    assert_int_equal(lay.stages[0].step_temp_bytes, 6000000000ull);
    {
      /* fp32 gradients (DeepSpeed's grad_accum_dtype): the concatenation
       * alone, 4 bytes an element (.to(fp32) copies nothing) */
      const char *ds_z3_fp32[] = {"training.framework=deepspeed",
                                  "training.precision=bf16", "parallel.zero=3",
                                  "training.grad_dtype=fp32"};
      build(small_gpt, ds_z3_fp32, 4, d, &lay);
      assert_int_equal(lay.stages[0].step_temp_bytes,
                       4 * ((decay + d - 1) / d));
    }
    /* the host steps the fp32 partition it holds: no copy on the GPU */
    build(small_gpt, ds_z3_host, 4, d, &lay);
    assert_int_equal(lay.stages[0].step_temp_bytes, 0);
  }
  build(small_gpt, mg, 3, d, &lay);
  assert_int_equal(lay.grad_elem_bytes, 4);
  assert_sharded(vs_layout_model_states(&lay), d, 6 * psi * d + 12 * psi, 16);
  assert_int_equal(lay.stages[0].step_temp_bytes, 0);
  {
    const char *mg16[] = {"training.framework=megatron",
                          "training.precision=fp16", "parallel.zero=0"};
    const char *mg16_dist[] = {"training.framework=megatron",
                               "training.precision=fp16", "parallel.zero=1"};
    build(small_gpt, mg16, 3, d, &lay);
    assert_int_equal(lay.grad_elem_bytes, 2);
    assert_int_equal(vs_layout_model_states(&lay), 16 * psi);
    assert_int_equal(vs_layout_model_states(&lay) +
                         lay.stages[0].step_temp_bytes,
                     20 * psi);
    build(small_gpt, mg16_dist, 3, d, &lay);
    assert_sharded(vs_layout_model_states(&lay), d, 4 * psi * d + 12 * psi,
                   16);
    assert_sharded(vs_layout_model_states(&lay) +
                       lay.stages[0].step_temp_bytes,
                   d, 4 * psi * d + 16 * psi, 20);
  }
  /* FSDP2 (torchtitan): fp32 sharded parameters stepped without a master,
   * fp32 reduced gradients, AdamW: 4 + 4 + 8 = 16 psi / N */
  build(small_gpt, fsdp2, 2, d, &lay);
  assert_sharded(vs_layout_model_states(&lay), d, 16 * psi, 16);
  assert_sharded(lay.params_bytes, d, 4 * psi, 4);
  assert_int_equal(lay.stages[0].step_temp_bytes, 0);
  {
    /* PyTorch's foreach AdamW holds the square root of exp_avg_sq, a new
     * tensor list as large as one state, at the step: 4 psi / N under
     * FSDP2, half the stage's optimizer states; momentum keeps none */
    const char *fsdp2_foreach[] = {"training.framework=fsdp2",
                                   "training.precision=bf16",
                                   "training.optimizer_impl=foreach"};
    const char *momentum[] = {"training.precision=amp_bf16",
                              "training.optimizer=momentum",
                              "training.optimizer_impl=foreach"};
    build(small_gpt, fsdp2_foreach, 3, d, &lay);
    assert_int_equal(lay.stages[0].step_temp_bytes,
                     lay.stages[0].optimizer_bytes / 2);
    assert_sharded(lay.stages[0].step_temp_bytes, d, 4 * psi, 4);
    build(small_gpt, momentum, 3, 1, &lay);
    assert_int_equal(lay.stages[0].step_temp_bytes, 0);
  }
}

/* Megatron-LM's precision-aware optimizer (--use-precision-aware-
 * optimizer; frameworks.md 3.2: bf16 moments make Adam 4 B a parameter),
 * whose Transformer Engine FusedAdam keeps the states (fused_adam.py
 * _initialize_state), over the distributed optimizer's d ranks:
 * - bf16 weights, fp32 grad buffer, fp32 states: the master copy is the
 *   int16 low half of each fp32 value (store_param_remainders): 2 + 4 +
 *   (2 + 8)/d, against 6 + 12/d without it;
 * - bf16 moments: 6 + 6/d, read by the kernel as they are (nothing at the
 *   step); with bf16 main grads (grad_dtype = precision) 4 + 6/d;
 * - fp16 moments: 6 + 6/d, each unpacked to an fp32 copy of the largest
 *   group's shard at the step: 2 x 4 x decay/d;
 * - fp16 weights keep a whole fp32 master: 2 + 2 + 12/d, without
 *   Megatron's fp32 .grad copies (the kernel reads the 16-bit shard);
 *   with main_params_dtype = fp16, 4 + 10/d and the master's fp32 copy
 *   at the step, 4 x decay/d. */
static void test_precision_aware_optimizer(void **state)
{
  const char *fp32[] = {"training.framework=megatron",
                        "training.precision=bf16", "parallel.zero=1",
                        "training.precision_aware_optimizer=true"};
  const char *bf16[] = {fp32[0],
                        fp32[1],
                        fp32[2],
                        fp32[3],
                        "training.exp_avg_dtype=bf16",
                        "training.exp_avg_sq_dtype=bf16",
                        "training.grad_dtype=fp32"};
  const char *bf16_grads[] = {fp32[0],
                              fp32[1],
                              fp32[2],
                              fp32[3],
                              bf16[4],
                              bf16[5],
                              "training.grad_dtype=precision"};
  const char *fp16[] = {fp32[0],
                        fp32[1],
                        fp32[2],
                        fp32[3],
                        "training.exp_avg_dtype=fp16",
                        "training.exp_avg_sq_dtype=fp16"};
  const char *w16[] = {fp32[0], "training.precision=fp16", fp32[2], fp32[3]};
  const char *w16_main16[] = {w16[0], w16[1], w16[2], w16[3],
                              "training.main_params_dtype=fp16"};
  const uint64_t d = 4;
  vs_layout lay;
  uint64_t psi, decay;
  (void)state;
  build(small_gpt, fp32, 4, d, &lay);
  psi = lay.param_elems;
  decay = (lay.stages[0].decay_elems + d - 1) / d;
  assert_true(decay * d < psi && decay * d > psi - psi / 100);
  assert_sharded(vs_layout_model_states(&lay), d, 6 * psi * d + 10 * psi, 10);
  assert_int_equal(lay.stages[0].step_temp_bytes, 0);
  build(small_gpt, bf16, 7, d, &lay);
  assert_sharded(lay.optimizer_bytes, d, 6 * psi, 6);
  assert_sharded(vs_layout_model_states(&lay), d, 6 * psi * d + 6 * psi, 6);
  assert_int_equal(lay.stages[0].step_temp_bytes, 0);
  build(small_gpt, bf16_grads, 7, d, &lay);
  assert_sharded(vs_layout_model_states(&lay), d, 4 * psi * d + 6 * psi, 6);
  build(small_gpt, fp16, 6, d, &lay);
  assert_sharded(vs_layout_model_states(&lay), d, 6 * psi * d + 6 * psi, 6);
  assert_int_equal(lay.stages[0].step_temp_bytes, 2 * 4 * decay);
  build(small_gpt, w16, 4, d, &lay);
  assert_int_equal(lay.grad_elem_bytes, 2);
  assert_sharded(vs_layout_model_states(&lay), d, 4 * psi * d + 12 * psi, 12);
  assert_int_equal(lay.stages[0].step_temp_bytes, 0);
  build(small_gpt, w16_main16, 5, d, &lay);
  assert_sharded(vs_layout_model_states(&lay), d, 4 * psi * d + 10 * psi, 10);
  assert_int_equal(lay.stages[0].step_temp_bytes, 4 * decay);
}

/* Autocast (frameworks.md 1.2: "autocast over fp32 params keeps 4 + 4 +
 * 8 = 16 B/param resident") and the Hugging Face Trainer's DDP, whose
 * reducer keeps a flat bucket copy of every gradient (gradient_as_bucket_view
 * = False): 4 more, 20 B/param, with dp > 1 only. ZeRO-2 shards autocast's
 * gradients and states as any: 4 + 12/d. */
static void test_autocast_and_ddp_bytes(void **state)
{
  const char *amp[] = {"training.precision=amp_bf16",
                       "training.optimizer=adamw"};
  const char *hf[] = {"training.framework=hf", "training.optimizer=adamw"};
  const char *amp_z2[] = {"training.precision=amp_fp16",
                          "training.optimizer=adamw", "parallel.zero=2"};
  const uint64_t d = 4;
  vs_layout lay;
  uint64_t psi;
  (void)state;
  build(small_gpt, amp, 2, d, &lay);
  psi = lay.param_elems;
  assert_int_equal(lay.param_elem_bytes, 4);
  assert_int_equal(lay.grad_elem_bytes, 4);
  assert_int_equal(lay.optimizer_bytes, 8 * psi); /* no master copy */
  assert_int_equal(vs_layout_model_states(&lay), 16 * psi);
  build(small_gpt, hf, 2, d, &lay);
  assert_int_equal(lay.param_elem_bytes, 4); /* the preset: amp_bf16 */
  assert_int_equal(lay.grads_bytes, 8 * psi);
  assert_int_equal(vs_layout_model_states(&lay), 20 * psi);
  build(small_gpt, hf, 2, 1, &lay); /* one GPU: no DDP */
  assert_int_equal(vs_layout_model_states(&lay), 16 * psi);
  build(small_gpt, amp_z2, 3, d, &lay);
  assert_sharded(vs_layout_model_states(&lay), d, 4 * psi * d + 12 * psi, 16);
  {
    /* the Trainer over a bf16 model: no master copy, and AdamW's states
     * zeros_like the bf16 weights: 2 + 2 + 4 = 8 B/param, 10 with DDP */
    const char *hf16[] = {"training.framework=hf", "training.precision=bf16",
                          "training.optimizer=adamw"};
    build(small_gpt, hf16, 3, 1, &lay);
    assert_int_equal(lay.optimizer_bytes, 4 * psi);
    assert_int_equal(vs_layout_model_states(&lay), 8 * psi);
    build(small_gpt, hf16, 3, d, &lay);
    assert_int_equal(vs_layout_model_states(&lay), 10 * psi);
  }
}

/* Megatron-LM's expert parallelism (shared/reference/frameworks.md 8,
 * theoretical_memory_usage.py): a rank holds E / (EP x ETP) of each MoE
 * layer's experts (ETP = tp = 1 here), and the distributed optimizer
 * (ZeRO-1) shards their fp32 master and Adam states over the expert-data-
 * parallel size world / (ETP x EP x PP) = dp / ep, the dense ones over
 * dp: 12 Psi_dense / dp + 12 Psi_expert / (dp / ep). */
static void test_expert_parallel_states(void **state)
{
  static const char moe[] =
      "[model]\narch = llama\nlayers = 4\nhidden = 512\nheads = 8\n"
      "ffn_hidden = 1024\nvocab = 1000\nseq_len = 128\nexperts = 8\n"
      "experts_per_token = 2\n"
      "[training]\nprecision = bf16\noptimizer = adam\n";
  const char *sets[] = {"parallel.zero=1", "parallel.ep=4"};
  const char *one[] = {"parallel.zero=1"};
  const char *ds[] = {"parallel.zero=1", "parallel.ep=4",
                      "training.framework=deepspeed",
                      "training.precision=fp16"};
  const uint64_t dp = 8, ep = 4, h = 512, fe = 1024, layers = 4;
  uint64_t experts_local = layers * (8 / ep) * 3 * h * fe;
  vs_layout lay, whole;
  uint64_t dense;
  (void)state;
  build(moe, one, 1, dp, &whole);
  build(moe, sets, 2, dp, &lay);
  /* the rank holds E / ep of each layer's 8 experts */
  assert_int_equal(whole.param_elems - lay.param_elems,
                   layers * (8 - 8 / ep) * 3 * h * fe);
  dense = lay.param_elems - experts_local;
  assert_int_equal(lay.stages[0].expert_optimizer_full_bytes,
                   12 * experts_local);
  assert_sharded(lay.optimizer_bytes - 12 * experts_local / (dp / ep), dp,
                 12 * dense, 4);
  /* DeepSpeed's step copies this GPU's partition to fp32 a group at a
   * time: the experts' over dp / ep, or the dense ones' over dp (matrices:
   * the decay group), whichever is larger (here the experts') */
  build(moe, ds, 4, dp, &lay);
  assert_true(
      lay.stages[0].expert_decay_elems / (dp / ep) >
      (lay.stages[0].decay_elems - lay.stages[0].expert_decay_elems + dp - 1) /
          dp);
  assert_int_equal(lay.stages[0].step_temp_bytes,
                   4 * (lay.stages[0].expert_decay_elems / (dp / ep)));
  {
    /* the precision-aware optimizer's unpacked fp16 moments likewise: two
     * fp32 copies of the larger group's shard */
    const char *pa[] = {"parallel.zero=1",
                        "parallel.ep=4",
                        "training.framework=megatron",
                        "training.precision_aware_optimizer=true",
                        "training.exp_avg_dtype=fp16",
                        "training.exp_avg_sq_dtype=fp16"};
    vs_layout p;
    build(moe, pa, 6, dp, &p);
    assert_int_equal(p.stages[0].step_temp_bytes,
                     2 * 4 * (p.stages[0].expert_decay_elems / (dp / ep)));
  }
  assert_int_equal(lay.stages[0].expert_decay_elems, experts_local);
  assert_int_equal(lay.group_size[VS_GROUP_EP], ep);
  {
    /* context parallelism: the distributed optimizer shards over dp x cp
     * (Megatron's, torchtitan's dp_shard_cp), 12 Psi / (dp cp) */
    const char *cp[] = {"parallel.zero=1", "parallel.cp=4"};
    vs_layout c;
    build(small_gpt, cp, 2, 8, &c);
    assert_int_equal(c.dp, 8); /* dp 2 x cp 4 */
    assert_int_equal(c.cp, 4);
    assert_int_equal(c.group_size[VS_GROUP_CP], 4);
    assert_sharded(c.optimizer_bytes, 8, 12 * c.param_elems, 4);
  }
  assert_int_equal(lay.group_size[VS_GROUP_EXPERT_DP], dp / ep);
  assert_int_equal(lay.group_stride[VS_GROUP_EXPERT_DP], ep);
  {
    /* with context parallelism the ep ranks come out of dp x cp
     * (Megatron-LM: EP x ETP x EDP = TP x DP x CP): on 8 GPUs as dp 4 x
     * cp 2 the expert states shard over 8 / ep = 2 ranks, as over dp 8 */
    const char *epcp[] = {"parallel.zero=1", "parallel.ep=4",
                          "parallel.cp=2"};
    vs_layout c, d;
    build(moe, epcp, 3, dp, &c);
    build(moe, sets, 2, dp, &d);
    assert_int_equal(c.group_size[VS_GROUP_EP], ep);
    assert_int_equal(c.group_size[VS_GROUP_EXPERT_DP], dp / ep);
    /* ep consecutive ranks of dp x cp, the holders of the same experts
     * ep apart, as without cp */
    assert_int_equal(c.group_stride[VS_GROUP_EP], d.group_stride[VS_GROUP_EP]);
    assert_int_equal(c.group_stride[VS_GROUP_EXPERT_DP], ep);
    assert_int_equal(c.optimizer_bytes, d.optimizer_bytes);
  }
}

/* DeepSpeed's ZeRO-2 with expert parallelism (microsoft/DeepSpeed
 * 38327e07, deepspeed/runtime/zero/stage_1_and_2.py): the MoE param
 * groups (moe/utils.py split_params_into_different_moe_groups_for_
 * optimizer) take the expert-data-parallel group as their
 * real_dp_process_group (_configure_moe_settings, lines 634-635), whose
 * size is the ranks of a stage ep apart, dp x cp / ep
 * (utils/groups.py _create_expert_and_data_parallel). Each group's
 * 16-bit weights stay whole (bit16_groups_flat, line 364); its fp32
 * master partition (lines 399-401) and Adam's two moments on it are
 * 1 / world of it (get_data_parallel_partitions, lines 1587-1605,
 * world of real_dp_process_group[i]); stage 2's gradient partition
 * (copy_grads_in_partition, lines 1344-1354) holds every group's
 * params_in_partition in 16 bits. With Psi_d the dense parameters and
 * Psi_e the GPU's E / ep experts' (both before partitioning), a GPU
 * holds
 *   2 (Psi_d + Psi_e) + (2 + 12) (Psi_d / dp + Psi_e / (dp / ep))
 * (whole elements a shard: vsim rounds each partition up, DeepSpeed pads
 * each group to its alignment). Here dp 8: ep 2 and 4 give the experts'
 * states over 4 and 2 GPUs. */
static void test_deepspeed_zero2_expert_states(void **state)
{
  static const char moe[] =
      "[model]\narch = llama\nlayers = 4\nhidden = 512\nheads = 8\n"
      "ffn_hidden = 1024\nvocab = 1000\nseq_len = 128\nexperts = 8\n"
      "experts_per_token = 2\n"
      "[training]\nprecision = bf16\noptimizer = adam\n"
      "framework = deepspeed\n[parallel]\nzero = 2\n";
  /* dense: per layer attention 4h^2, two norms 2h, the router h x 8;
   * the embedding and the output layer V x h each, the final norm h */
  const uint64_t dense =
      4 * (4 * 512 * 512 + 2 * 512 + 512 * 8) + 2 * 1000 * 512 + 512;
  const uint64_t dp = 8, eps[] = {2, 4};
  (void)state;
  for (size_t i = 0; i < 2; i++) {
    char ep_set[40]; /* "parallel.ep=" and up to 20 digits */
    const char *sets[] = {ep_set};
    const char *one[] = {ep_set, "parallel.zero=1"};
    uint64_t ep = eps[i], edp = dp / ep;
    uint64_t expert = 4 * (8 / ep) * 3 * 512 * 1024; /* fc1 gate+up, fc2 */
    vs_layout lay, z1;
    snprintf(ep_set, sizeof ep_set, "parallel.ep=%llu", (unsigned long long)ep);
    build(moe, sets, 1, dp, &lay);
    assert_int_equal(lay.param_elems, dense + expert);
    assert_int_equal(lay.group_size[VS_GROUP_EXPERT_DP], edp);
    assert_int_equal(lay.stages[0].expert_grads_full_bytes, 2 * expert);
    assert_int_equal(lay.params_bytes, 2 * (dense + expert));
    assert_int_equal(lay.grads_bytes,
                     2 * vs_div_ceil(dense, dp) + 2 * vs_div_ceil(expert, edp));
    assert_int_equal(lay.optimizer_bytes, 4 * vs_div_ceil(3 * dense, dp) +
                                              4 * vs_div_ceil(3 * expert, edp));
    /* the numbers: Psi_d = 5239296 (/ 8 = 654912), Psi_e / edp = 6291456
     * at either ep (Psi_e = 25165824 at ep 2, 12582912 at ep 4) */
    assert_int_equal(vs_layout_model_states(&lay),
                     ep == 2 ? 158059392u : 132893568u);
    /* ZeRO-1 keeps the 16-bit gradients whole: 2 Psi (stage 1 has no
     * gradient partition), the rest as stage 2 */
    build(moe, one, 2, dp, &z1);
    assert_int_equal(z1.grads_bytes, 2 * (dense + expert));
    assert_int_equal(z1.optimizer_bytes, lay.optimizer_bytes);
  }
}

/* Megatron-LM's expert tensor parallelism (expert_tensor_parallel_size,
 * shared/reference/frameworks.md 8): a rank holds E / (EP x ETP) of each
 * MoE layer's expert parameters, and the distributed optimizer shards
 * their states over the expert-data-parallel size tp x dp / (ETP x EP)
 * (world / (ETP x EP x PP)), the expert rank grid being ETP innermost,
 * then EP, then EDP. 8 GPUs as tp 2 x dp 4: at ETP = 1 and EP = 4 a rank
 * holds 2 whole experts a layer (twice what ETP = tp = 2 leaves it) and
 * their states shard over 8 / 4 = 2 ranks, 4 apart. */
static void test_expert_tensor_parallel_states(void **state)
{
  static const char moe[] =
      "[model]\narch = llama\nlayers = 4\nhidden = 512\nheads = 8\n"
      "ffn_hidden = 1024\nvocab = 1000\nseq_len = 128\nexperts = 8\n"
      "experts_per_token = 2\n"
      "[training]\nprecision = bf16\noptimizer = adam\n";
  const char *etp1[] = {"parallel.zero=1", "parallel.ep=4", "parallel.tp=2",
                        "parallel.sequence_parallel=true", "parallel.etp=1"};
  const uint64_t dp = 4, h = 512, fe = 1024, layers = 4, edp = 2;
  const uint64_t experts_local = layers * (8 / 4) * 3 * h * fe; /* whole */
  vs_layout lay, at_tp;
  uint64_t dense;
  (void)state;
  build(moe, etp1, 5, 8, &lay);
  build(moe, etp1, 4, 8, &at_tp); /* etp unset: tp */
  assert_int_equal(lay.dp, dp);
  /* each expert whole instead of split over tp: twice the elements */
  assert_int_equal(lay.param_elems - at_tp.param_elems, experts_local / 2);
  dense = lay.param_elems - experts_local;
  assert_int_equal(lay.stages[0].expert_optimizer_full_bytes,
                   12 * experts_local);
  assert_sharded(lay.optimizer_bytes - 12 * experts_local / edp, dp,
                 12 * dense, 4);
  /* the grid: etp ranks consecutive, ep ranks etp apart, edp ranks etp x
   * ep apart */
  assert_int_equal(lay.group_size[VS_GROUP_ETP], 1);
  assert_int_equal(lay.group_size[VS_GROUP_EP], 4);
  assert_int_equal(lay.group_stride[VS_GROUP_EP], 1);
  assert_int_equal(lay.group_size[VS_GROUP_EXPERT_DP], edp);
  assert_int_equal(lay.group_stride[VS_GROUP_EXPERT_DP], 4);
  assert_true(lay.experts_apart);
  /* at etp = tp: the ep ranks tp apart, the one holder of its experts */
  assert_int_equal(at_tp.group_size[VS_GROUP_ETP], 2);
  assert_int_equal(at_tp.group_stride[VS_GROUP_EP], 2);
  assert_int_equal(at_tp.group_size[VS_GROUP_EXPERT_DP], 1);
  /* communicators: tp, dp, ep, and the expert-data-parallel group of 2
   * (none of 1 at etp = tp) */
  assert_int_equal(lay.n_communicators, at_tp.n_communicators + 1);
  {
    /* ep = 1 at etp 1: the experts are whole on every rank of the stage,
     * their states sharded over all tp x dp = 8 of them, not dp */
    const char *ep1[] = {"parallel.zero=1", "parallel.tp=2",
                         "parallel.sequence_parallel=true", "parallel.etp=1"};
    const uint64_t all = layers * 8 * 3 * h * fe;
    vs_layout e;
    build(moe, ep1, 4, 8, &e);
    assert_true(e.experts_apart);
    assert_int_equal(e.group_size[VS_GROUP_EXPERT_DP], 8);
    assert_sharded(e.optimizer_bytes - 12 * all / 8, dp,
                   12 * (e.param_elems - all), 4);
  }
}

/* ------------------------------------------------------------------------
 * Optimizer states
 * ------------------------------------------------------------------------ */

static void test_optimizer_state_bytes(void **state)
{
  const uint64_t r = 4096, c = 1024, n = r * c;
  (void)state;
  /* Adam/AdamW (Kingma & Ba; PyTorch): fp32 exp_avg + exp_avg_sq = 8/elem,
   * + 4 with an fp32 master copy (ZeRO's K = 12) */
  assert_int_equal(
      vs_optimizer_state_bytes(VS_OPT_ADAM, VS_WITHOUT_MASTER, r, c), 8 * n);
  assert_int_equal(vs_optimizer_state_bytes(VS_OPT_ADAM, VS_WITH_MASTER, r, c),
                   12 * n);
  assert_int_equal(
      vs_optimizer_state_bytes(VS_OPT_ADAMW, VS_WITHOUT_MASTER, r, c), 8 * n);
  assert_int_equal(vs_optimizer_state_bytes(VS_OPT_ADAMW, VS_WITH_MASTER, 1, c),
                   12 * c);
  /* plain SGD keeps no state; only the master copy */
  assert_int_equal(
      vs_optimizer_state_bytes(VS_OPT_SGD, VS_WITHOUT_MASTER, r, c), 0);
  assert_int_equal(vs_optimizer_state_bytes(VS_OPT_SGD, VS_WITH_MASTER, r, c),
                   4 * n);
  /* SGD with momentum: one fp32 momentum buffer */
  assert_int_equal(
      vs_optimizer_state_bytes(VS_OPT_MOMENTUM, VS_WITHOUT_MASTER, r, c),
      4 * n);
  /* Lion (Chen et al. 2023, arXiv 2302.06675): one momentum, 4/elem */
  assert_int_equal(
      vs_optimizer_state_bytes(VS_OPT_LION, VS_WITHOUT_MASTER, r, c), 4 * n);
  assert_int_equal(vs_optimizer_state_bytes(VS_OPT_LION, VS_WITH_MASTER, r, c),
                   8 * n);
  /* Adafactor (Shazeer & Stern 2018, arXiv 1804.04235): factored second
   * moment, row and column accumulators, 4 (rows + cols); vectors keep the
   * full second moment, 4 n */
  assert_int_equal(
      vs_optimizer_state_bytes(VS_OPT_ADAFACTOR, VS_WITHOUT_MASTER, r, c),
      4 * (r + c));
  assert_int_equal(
      vs_optimizer_state_bytes(VS_OPT_ADAFACTOR, VS_WITH_MASTER, r, c),
      4 * n + 4 * (r + c));
  assert_int_equal(
      vs_optimizer_state_bytes(VS_OPT_ADAFACTOR, VS_WITHOUT_MASTER, 1, c),
      4 * c);
  assert_int_equal(
      vs_optimizer_state_bytes(VS_OPT_ADAFACTOR, VS_WITHOUT_MASTER, c, 1),
      4 * c);
  /* 8-bit Adam (Dettmers et al. 2022, arXiv 2110.02861; bitsandbytes):
   * two 1-byte states + one fp32 absmax per 256-element block per state:
   * 2n + 8 ceil(n/256), 2.03 B an element (shared/reference/frameworks.md
   * 6.1), for n >= 4096 (min_8bit_size) */
  assert_int_equal(
      vs_optimizer_state_bytes(VS_OPT_ADAM8BIT, VS_WITHOUT_MASTER, r, c),
      2 * n + 8 * (n / 256));
  tu_assert_close((double)vs_optimizer_state_bytes(VS_OPT_ADAM8BIT,
                                                   VS_WITHOUT_MASTER, r, c) /
                      (double)n,
                  2.03125, 1e-12);
  assert_int_equal(
      vs_optimizer_state_bytes(VS_OPT_ADAM8BIT, VS_WITHOUT_MASTER, 1, 4096),
      2 * 4096 + 8 * 16);
  /* n = 5000: ceil(5000/256) = 20 blocks */
  assert_int_equal(
      vs_optimizer_state_bytes(VS_OPT_ADAM8BIT, VS_WITHOUT_MASTER, 1, 5000),
      2 * 5000 + 8 * 20);
  assert_int_equal(
      vs_optimizer_state_bytes(VS_OPT_ADAM8BIT, VS_WITH_MASTER, 1, 5000),
      4 * 5000 + 2 * 5000 + 8 * 20);
  /* under 4096 elements bitsandbytes keeps 32-bit states: 8 n */
  assert_int_equal(
      vs_optimizer_state_bytes(VS_OPT_ADAM8BIT, VS_WITHOUT_MASTER, 1, 4095),
      8 * 4095);
  assert_int_equal(
      vs_optimizer_state_bytes(VS_OPT_ADAM8BIT, VS_WITHOUT_MASTER, 1, 1024),
      8 * 1024);
}

/* The layout's optimizer total is the per-tensor sum (Adafactor depends on
 * shapes, so it cannot be a per-parameter constant). */
static void test_layout_optimizer_sum(void **state)
{
  const char *sets[] = {"training.optimizer=adafactor"};
  vs_workload wl;
  vs_model m;
  vs_recipe r;
  vs_layout lay;
  vs_topology topo;
  vs_error err;
  const vs_block *blocks[3];
  uint64_t want = 0;
  (void)state;
  vs_error_clear(&err);
  tu_default_topology(&topo);
  assert_int_equal(tu_load_workload(&wl, small_gpt, sets, 1, 1, &err), 0);
  assert_int_equal(vs_model_build(&wl, &m, &err), 0);
  assert_int_equal(vs_recipe_build(&wl, &m, &r, &err), 0);
  assert_int_equal(vs_layout_build(&wl, &topo, &m, &r, &lay, &err), 0);
  blocks[0] = vs_model_embed(&m);
  blocks[1] = vs_model_layer(&m, 0);
  blocks[2] = vs_model_head(&m);
  for (int i = 0; i < 3; i++) {
    uint64_t sum = 0, times = i == 1 ? m.layers : 1;
    for (uint32_t k = 0; k < blocks[i]->n_params; k++)
      sum += vs_optimizer_state_bytes(VS_OPT_ADAFACTOR, VS_WITH_MASTER,
                                      blocks[i]->params[k].rows,
                                      blocks[i]->params[k].cols);
    want += times * sum;
  }
  assert_int_equal(lay.optimizer_bytes, want);
  /* Adafactor with master weights: 4 Psi + factored moments < 12 Psi */
  assert_true(lay.optimizer_bytes > 4 * lay.param_elems);
  assert_true(lay.optimizer_bytes < 5 * lay.param_elems);
  vs_recipe_fini(&r);
  vs_model_fini(&m);
}

/* ------------------------------------------------------------------------
 * Framework memory, links, errors
 * ------------------------------------------------------------------------ */

static void test_framework_bytes(void **state)
{
  static const struct {
    const char *tp;
    uint64_t gpus;
    int comms; /* tp > 1, dp > 1 */
  } cases[] = {
      {"parallel.tp=1", 1, 0}, {"parallel.tp=2", 2, 1},
      {"parallel.tp=1", 8, 1}, {"parallel.tp=2", 8, 2},
      {"parallel.tp=8", 8, 1}, {"parallel.tp=8", 64, 2},
  };
  vs_topology topo;
  (void)state;
  tu_default_topology(&topo);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    vs_layout lay;
    build(small_gpt, &cases[i].tp, 1, cases[i].gpus, &lay);
    /* one NCCL communicator per parallel group this GPU joins */
    assert_int_equal(lay.n_communicators, cases[i].comms);
    /* outside the allocator: CUDA context + communicators x NCCL
     * buffers (values from the topology); the two
     * cuBLAS workspaces (forward's and backward's handle) go through
     * the allocator */
    assert_int_equal(lay.framework_bytes,
                     topo.context_bytes +
                         (uint64_t)cases[i].comms * topo.nccl_bytes);
    assert_int_equal(lay.blas_workspaces, 2);
    assert_int_equal(lay.blas_workspace_bytes, topo.cublas_workspace_bytes);
  }
}

/* Under pipeline parallelism a GPU also joins the pp group's communicator,
 * and with tied embeddings the embedding group's (Megatron's
 * embedding_group: the first and last stages all-reduce the shared word
 * embedding's gradient), each holding its NCCL buffers. */
static void test_framework_bytes_pipeline(void **state)
{
  static const struct {
    const char *sets[3];
    uint64_t gpus;
    int comms; /* tp > 1, dp > 1, pp > 1, pp > 1 with tied embeddings */
  } cases[] = {
      {{"parallel.pp=2", "model.tied_embeddings=true", "parallel.tp=1"}, 2, 2},
      {{"parallel.pp=2", "model.tied_embeddings=false", "parallel.tp=1"}, 2, 1},
      {{"parallel.pp=2", "model.tied_embeddings=true", "parallel.tp=2"}, 8, 4},
      {{"parallel.pp=2", "model.tied_embeddings=false", "parallel.tp=2"}, 8, 3},
      {{"parallel.pp=1", "model.tied_embeddings=true", "parallel.tp=2"}, 8, 2},
  };
  vs_topology topo;
  (void)state;
  tu_default_topology(&topo);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    vs_layout lay;
    build(small_gpt, cases[i].sets, 3, cases[i].gpus, &lay);
    assert_int_equal(lay.n_communicators, cases[i].comms);
    /* context 400 MiB + comms x NCCL 1 GiB (default topology,
     * topologies/h100-sxm-8x.ini); the cuBLAS workspaces are allocated */
    assert_int_equal(lay.framework_bytes,
                     (UINT64_C(400) << 20) +
                         (uint64_t)cases[i].comms * (UINT64_C(1) << 30));
    assert_int_equal(lay.framework_bytes,
                     topo.context_bytes +
                         (uint64_t)cases[i].comms * topo.nccl_bytes);
    /* two stages: both are the embedding group's ends */
    for (uint64_t s = 0; s < lay.pp; s++)
      assert_int_equal(lay.stages[s].framework_bytes, lay.framework_bytes);
  }
}

/* The embedding group holds the first and the last stage alone
 * (Megatron-LM parallel_state: embedding_ranks = [ranks[0], ranks[-1]]):
 * the stages between them keep one communicator fewer (a review found
 * DeepSeek-V3's middle stages charged 1 GiB for it). */
static void test_framework_bytes_embedding_group_ends(void **state)
{
  const char *sets[] = {"parallel.pp=4", "model.tied_embeddings=true"};
  vs_topology topo;
  vs_layout lay;
  (void)state;
  tu_default_topology(&topo);
  build(small_gpt, sets, 2, 4, &lay);
  assert_int_equal(lay.n_communicators, 2); /* pp and the embedding group */
  assert_int_equal(lay.stages[0].framework_bytes,
                   topo.context_bytes + 2 * topo.nccl_bytes);
  assert_int_equal(lay.stages[3].framework_bytes,
                   topo.context_bytes + 2 * topo.nccl_bytes);
  for (uint64_t s = 1; s < 3; s++)
    assert_int_equal(lay.stages[s].framework_bytes,
                     topo.context_bytes + topo.nccl_bytes);
  assert_int_equal(lay.framework_bytes, lay.stages[0].framework_bytes);
}

/* Megatron rank order: tp innermost, so the tp group spans tp GPUs and the
 * dp group tp*dp; a group inside one node (8 GPUs) rides NVLink. */
static void test_layout_links(void **state)
{
  const char *tp2[] = {"parallel.tp=2"};
  vs_topology topo;
  vs_layout lay;
  (void)state;
  tu_default_topology(&topo);
  build(small_gpt, tp2, 1, 8, &lay);
  assert_true(vs_collective_link(&topo, lay.tp).bandwidth == topo.intra_bandwidth);
  assert_true(vs_collective_link(&topo, lay.dp_stride * lay.dp).bandwidth ==
              topo.intra_bandwidth);
  assert_int_equal(lay.nodes, 1);
  build(small_gpt, tp2, 1, 32, &lay);
  assert_true(vs_collective_link(&topo, lay.tp).bandwidth == topo.intra_bandwidth);
  /* the dp group spans tp * dp = 32 ranks: over the NIC */
  assert_int_equal(lay.dp_stride * lay.dp, 32);
  assert_true(vs_collective_link(&topo, lay.dp_stride * lay.dp).bandwidth ==
              topo.inter_bandwidth);
  assert_true(vs_collective_link(&topo, lay.dp_stride * lay.dp).latency ==
              topo.inter_latency);
  /* ceil(32 / 8) nodes */
  assert_int_equal(lay.nodes, 4);
}

/* Groups that span nodes are hierarchical (NCCL's tree/ring across nodes
 * with one NIC per GPU): within a node over NVLink, across nodes on 1/k of
 * the buffer with all k NICs of a node at once. */
static void test_group_seconds_hierarchical(void **state)
{
  vs_topology topo;
  vs_link nv, nic;
  (void)state;
  tu_default_topology(&topo);
  topo.intra_busbw_sizes.n = 0; /* the link model, not the measured curve */
  nv = vs_collective_link(&topo, 1);
  nic = vs_collective_link(&topo, 9);
  /* 8 GPUs of one node: the flat NVLink ring */
  assert_true(vs_cost_group_seconds(&topo, VS_COLL_ALL_REDUCE, 1000000000, 8, (vs_group_span){1, 8}, NULL) ==
              vs_cost_collective_seconds(VS_COLL_ALL_REDUCE, 1000000000, 8, nv));
  /* 16 consecutive GPUs = 2 nodes of k = 8: reduce-scatter and all-gather
   * inside the node, all-reduce of b/8 between the 2 nodes */
  tu_assert_close(vs_cost_group_seconds(&topo, VS_COLL_ALL_REDUCE, 1000000000, 16, (vs_group_span){2, 8}, NULL),
              vs_cost_collective_seconds(VS_COLL_REDUCE_SCATTER, 1000000000, 8, nv) +
                  vs_cost_collective_seconds(VS_COLL_ALL_REDUCE, 125000000, 2, nic) +
                  vs_cost_collective_seconds(VS_COLL_ALL_GATHER, 1000000000, 8, nv),
              1e-12);
  /* members 8 apart (dp with tp = 8): one per node, a ring over the NICs */
  tu_assert_close(vs_cost_group_seconds(&topo, VS_COLL_ALL_GATHER, 1000000000, 4, (vs_group_span){4, 1}, NULL),
              vs_cost_collective_seconds(VS_COLL_ALL_GATHER, 1000000000, 4, nic), 1e-12);
  /* members 2 apart on 8-GPU nodes: 4 per node */
  tu_assert_close(vs_cost_group_seconds(&topo, VS_COLL_REDUCE_SCATTER, 1000000000, 8, (vs_group_span){2, 4}, NULL),
              vs_cost_collective_seconds(VS_COLL_REDUCE_SCATTER, 250000000, 2, nic) +
                  vs_cost_collective_seconds(VS_COLL_REDUCE_SCATTER, 1000000000, 4, nv),
              1e-12);
  assert_true(vs_cost_group_seconds(&topo, VS_COLL_ALL_REDUCE, 1000000000, 1, (vs_group_span){1, 1}, NULL) == 0);
}

/* Placement: order tp-dp-pp (Megatron's default) puts dp neighbours tp
 * ranks apart and pipeline neighbours tp*dp apart; tp-pp-dp swaps the two.
 * With tp 2, dp 2, pp 4 on 8-GPU nodes (tp-dp-pp), stages 0 and 1 share a
 * node (ranks 0-3 and 4-7) and stages 1 and 2 do not (4-7 and 8-11). */
static void test_order_and_stage_links(void **state)
{
  const char *tdp[] = {"parallel.tp=2", "parallel.pp=4"};
  const char *tpd[] = {"parallel.tp=2", "parallel.pp=4", "parallel.order=tp-pp-dp"};
  vs_topology topo;
  vs_layout lay;
  (void)state;
  tu_default_topology(&topo);
  build(pipeline_gpt, tdp, 2, 16, &lay);
  assert_int_equal(lay.dp_stride, 2);
  assert_int_equal(lay.pp_stride, 4);
  assert_true(vs_layout_stage_link(&topo, &lay, 0, 1).bandwidth == topo.intra_bandwidth);
  assert_true(vs_layout_stage_link(&topo, &lay, 1, 2).bandwidth == topo.inter_bandwidth);
  build(pipeline_gpt, tpd, 3, 16, &lay);
  assert_int_equal(lay.pp_stride, 2);
  assert_int_equal(lay.dp_stride, 8);
  /* stages 0..3 of one replica: ranks 0, 2, 4, 6, all in node 0 */
  assert_true(vs_layout_stage_link(&topo, &lay, 2, 3).bandwidth == topo.intra_bandwidth);
}

/* Nodes whose GPU count is not a multiple of a group's extent: groups
 * straddle them, and the worst-placed one prices the kind. tp 4 x dp 6 on
 * 6-GPU nodes: the tp group of ranks 4-7 has 4, 5 in node 0 and 6, 7 in
 * node 1 (2 nodes, 2 each); on 5-GPU nodes ranks 4 | 5-7 leave one in
 * node 0 (2 nodes, 1). The dp group 0, 4, ..., 20 on 6-GPU nodes: nodes
 * 0 0 1 2 2 3, 4 nodes with 1 in node 1 (share 3/4 per NIC); its
 * neighbour 1, 5, ..., 21 has the same. On 8-GPU nodes the tp groups fit
 * and the dp group (0, 4 | 8, 12 | 16, 20) spans 3 nodes, 2 each. */
static void test_uneven_group_spans(void **state)
{
  const char *tp4[] = {"parallel.tp=4"};
  const char *pp2[] = {"parallel.tp=4", "parallel.pp=2"};
  vs_topology topo;
  vs_layout lay;
  vs_error err;
  vs_link nv, nic;
  (void)state;
  tu_default_topology(&topo);
  topo.intra_busbw_sizes.n = 0;
  assert_int_equal(build_on(&topo, small_gpt, tp4, 1, 24, &lay, &err), 0);
  assert_int_equal(lay.group_span[VS_GROUP_TP].nodes, 1);
  assert_int_equal(lay.group_span[VS_GROUP_TP].per_node, 4);
  assert_int_equal(lay.group_span[VS_GROUP_DP].nodes, 3);
  assert_int_equal(lay.group_span[VS_GROUP_DP].per_node, 2);
  topo.gpus_per_node = 6;
  assert_int_equal(build_on(&topo, small_gpt, tp4, 1, 24, &lay, &err), 0);
  assert_int_equal(lay.group_span[VS_GROUP_TP].nodes, 2);
  assert_int_equal(lay.group_span[VS_GROUP_TP].per_node, 2);
  assert_int_equal(lay.group_span[VS_GROUP_DP].nodes, 4);
  assert_int_equal(lay.group_span[VS_GROUP_DP].per_node, 1);
  /* the tp all-reduce: hierarchical over 2 nodes, 2 GPUs each */
  nv = vs_collective_link(&topo, 1);
  nic = vs_collective_link(&topo, 7);
  tu_assert_close(vs_cost_group_seconds(&topo, VS_COLL_ALL_REDUCE, 1000000000, 4,
                                        lay.group_span[VS_GROUP_TP], NULL),
                  vs_cost_collective_seconds(VS_COLL_REDUCE_SCATTER, 1000000000, 2, nv) +
                      vs_cost_collective_seconds(VS_COLL_ALL_REDUCE, 500000000, 2, nic) +
                      vs_cost_collective_seconds(VS_COLL_ALL_GATHER, 1000000000, 2, nv),
                  1e-12);
  topo.gpus_per_node = 5;
  assert_int_equal(build_on(&topo, small_gpt, tp4, 1, 24, &lay, &err), 0);
  assert_int_equal(lay.group_span[VS_GROUP_TP].nodes, 2);
  assert_int_equal(lay.group_span[VS_GROUP_TP].per_node, 1);
  /* the whole job in one node: no group leaves it */
  topo.gpus_per_node = 24;
  assert_int_equal(build_on(&topo, small_gpt, tp4, 1, 24, &lay, &err), 0);
  assert_int_equal(lay.group_span[VS_GROUP_DP].nodes, 1);
  assert_int_equal(lay.group_span[VS_GROUP_DP].per_node, 6);
  /* tp 4 x pp 2 on 6-GPU nodes: stage 0 is ranks 0-3, stage 1 ranks 4-7;
   * ranks 0 and 4 share node 0 but 2 and 6 do not, so the stages talk
   * over the NIC (the step waits for the slowest pair) */
  topo.gpus_per_node = 6;
  assert_int_equal(build_on(&topo, pipeline_gpt, pp2, 2, 8, &lay, &err), 0);
  assert_true(vs_layout_stage_link(&topo, &lay, 0, 1).bandwidth == topo.inter_bandwidth);
  assert_true(vs_layout_stage_link(&topo, &lay, 1, 0).bandwidth == topo.inter_bandwidth);
  topo.gpus_per_node = 8;
  assert_int_equal(build_on(&topo, pipeline_gpt, pp2, 2, 8, &lay, &err), 0);
  assert_true(vs_layout_stage_link(&topo, &lay, 0, 1).bandwidth == topo.intra_bandwidth);
  assert_int_equal(lay.group_span[VS_GROUP_EMBEDDING].nodes, 1);
  {
    /* the embedding pair (first and last stage) with tp-pp-dp: tp 2, pp
     * 3, dp 4 puts stage 0 of replica 1 at ranks 6-7 and its last stage
     * at 10-11, another node: the pair straddles */
    const char *tpd[] = {"parallel.tp=2", "parallel.pp=3",
                         "parallel.order=tp-pp-dp"};
    assert_int_equal(build_on(&topo, pipeline_gpt, tpd, 3, 24, &lay, &err), 0);
    assert_int_equal(lay.pp_stride, 2);
    assert_int_equal(lay.group_span[VS_GROUP_EMBEDDING].nodes, 2);
    assert_int_equal(lay.group_span[VS_GROUP_EMBEDDING].per_node, 1);
  }
}

/* 10 layers over 4 stages: 3, 3, 2, 2 (the first chunks take the extra
 * layers); pp_layers overrides. The embedding lives on stage 0, the head on
 * stage 3, and with tied embeddings stage 3 keeps its own copy of the word
 * embeddings (Megatron-LM), so the stages hold the model plus that copy. */
static void test_pipeline_split_and_stage_params(void **state)
{
  const char *even[] = {"parallel.pp=4"};
  const char *listed[] = {"parallel.pp=4", "parallel.pp_layers=1,4,4,1"};
  vs_layout lay;
  vs_workload wl;
  vs_model m;
  vs_error err;
  uint64_t sum = 0;
  (void)state;
  build(pipeline_gpt, even, 1, 4, &lay);
  assert_int_equal(lay.chunk_layers[0], 3);
  assert_int_equal(lay.chunk_layers[1], 3);
  assert_int_equal(lay.chunk_layers[2], 2);
  assert_int_equal(lay.chunk_layers[3], 2);
  assert_int_equal(lay.chunk_first[2], 6);
  assert_true(lay.stages[0].has_embed && !lay.stages[0].has_head);
  assert_true(lay.stages[3].has_head && !lay.stages[3].has_embed);
  vs_error_clear(&err);
  assert_int_equal(tu_load_workload(&wl, pipeline_gpt, even, 1, 4, &err), 0);
  assert_int_equal(vs_model_build(&wl, &m, &err), 0);
  for (int st = 0; st < 4; st++)
    sum += lay.stages[st].param_elems;
  /* whole model + the last stage's copy of the 1024 x 128 word embeddings */
  assert_int_equal(sum, m.params_total + 1024 * 128);
  vs_model_fini(&m);
  build(pipeline_gpt, listed, 2, 4, &lay);
  assert_int_equal(lay.chunk_layers[1], 4);
  assert_int_equal(lay.stages[3].n_layers, 1);
}

/* fp8 needs FP8 tensor cores: a GPU with peak_tflops_fp8 = 0 is refused
 * with a message naming both keys (the workload's where it was set: here
 * --set), the GPU and the topology's file. */
static void test_fp8_without_fp8_gpu(void **state)
{
  const char *fp8[] = {"training.precision=fp8"};
  vs_topology topo;
  vs_layout lay;
  vs_error err;
  (void)state;
  tu_default_topology(&topo);
  assert_int_equal(build_on(&topo, small_gpt, fp8, 1, 1, &lay, &err), 0);
  topo.peak_tflops_fp8 = 0;
  assert_int_equal(build_on(&topo, small_gpt, fp8, 1, 1, &lay, &err),
                   VS_EINPUT);
  assert_int_equal(err.code, VS_EINPUT);
  assert_non_null(strstr(err.msg, "--set training.precision=fp8: needs a "
                                  "GPU with FP8 tensor cores"));
  assert_non_null(strstr(err.msg, "peak_tflops_fp8"));
  assert_non_null(strstr(err.msg, topo.name));
}

/* Issue 21, D4: framework memory whose parts add up past 2^64 is refused,
 * never wrapped into a small sum that fits (a context near 2^64 plus an
 * 80 GB workspace used to wrap to 26 GB and print FITS); the largest sum
 * that fits 64 bits is kept whole. */
static void test_framework_overflow_is_refused(void **state)
{
  const char *dp[] = {"parallel.tp=1"};
  vs_topology topo;
  vs_layout lay;
  vs_error err;
  (void)state;
  tu_default_topology(&topo);
  topo.context_bytes = 18446744000000000000ull;
  topo.nccl_bytes = 80000000000ull;
  assert_int_equal(build_on(&topo, small_gpt, dp, 1, 8, &lay, &err), VS_EINPUT);
  assert_non_null(strstr(err.msg, "context_memory + 1 x nccl_memory add up "
                                  "to over 16 EiB"));
  topo.nccl_bytes = UINT64_MAX - topo.context_bytes;
  assert_int_equal(build_on(&topo, small_gpt, dp, 1, 8, &lay, &err), 0);
  assert_true(lay.framework_bytes == UINT64_MAX);
  topo.nccl_bytes = UINT64_MAX / 2 + 1; /* 2 x it alone overflows */
  topo.context_bytes = 0;
  {
    const char *tp2[] = {"parallel.tp=2"};
    assert_int_equal(build_on(&topo, small_gpt, tp2, 1, 8, &lay, &err),
                     VS_EINPUT);
  }
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_zero_stages),
      cmocka_unit_test(test_autocast_and_ddp_bytes),
      cmocka_unit_test(test_expert_parallel_states),
      cmocka_unit_test(test_deepspeed_zero2_expert_states),
      cmocka_unit_test(test_expert_tensor_parallel_states),
      cmocka_unit_test(test_offload_placement),
      cmocka_unit_test(test_lora_trainable_is_pefts),
      cmocka_unit_test(test_paged_adam8bit_keeps_absmax_unpaged),
      cmocka_unit_test(test_lora_under_deepspeed),
      cmocka_unit_test(test_qlora_base_bytes),
      cmocka_unit_test(test_qlora_without_double_quant),
      cmocka_unit_test(test_frozen_base_formats),
      cmocka_unit_test(test_fp8_grouped_expert_gemms),
      cmocka_unit_test(test_megatron_bytes_per_param),
      cmocka_unit_test(test_fp32_adam),
      cmocka_unit_test(test_framework_presets),
      cmocka_unit_test(test_precision_aware_optimizer),
      cmocka_unit_test(test_optimizer_state_bytes),
      cmocka_unit_test(test_layout_optimizer_sum),
      cmocka_unit_test(test_framework_bytes),
      cmocka_unit_test(test_framework_bytes_pipeline),
      cmocka_unit_test(test_framework_bytes_embedding_group_ends),
      cmocka_unit_test(test_layout_links),
      cmocka_unit_test(test_group_seconds_hierarchical),
      cmocka_unit_test(test_order_and_stage_links),
      cmocka_unit_test(test_uneven_group_spans),
      cmocka_unit_test(test_pipeline_split_and_stage_params),
      cmocka_unit_test(test_fp8_without_fp8_gpu),
      cmocka_unit_test(test_fp8_primary_weights),
      cmocka_unit_test(test_framework_overflow_is_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

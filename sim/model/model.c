/* model.c - expands gpt / llama / bert into blocks of ops (see model.h).
 *
 * Saved-tensor lists follow Korthikanti et al. 2022 (arXiv 2205.05198,
 * Sec. 4.1): for a GPT layer with dropout and materialised attention they add
 * up to s*b*h*(34 + 5*a*s/h) bytes at 16 bits. Tensor parallelism shards the
 * attention heads and the MLP width; sequence parallelism also shards the
 * norms, dropouts and the inputs of the column-parallel matmuls by sequence. */
#include "model.h"

#include "grow.h"
#include "units.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Shapes of one rank's work for one micro-batch. */
typedef struct dims {
  uint64_t s, b, h, a, kv, d, f, vocab; /* model sizes (vocab padded; s
                                          this rank's part of a sequence) */
  uint64_t skv;      /* the keys a query attends over: seq_len */
  uint64_t cp;       /* context-parallel size */
  int cp_comm;       /* vs_cp_comm */
  uint64_t t;        /* tensor-parallel size */
  uint8_t tp_group;  /* the vs_group of those t ranks: tp (etp in the
                        routed experts' dims, expert_dims) */
  uint64_t et;       /* expert tensor-parallel size (vs_workload_etp) */
  uint64_t tokens;   /* s*b */
  uint64_t tok_rep;  /* tokens in the tp-replicated region: s*b, or s*b/t with sp */
  uint64_t e;        /* bytes per activation element (the GEMMs'
                        outputs) */
  uint64_t em;       /* bytes per saved matmul input (1 under fp8) */
  uint8_t act_dtype; /* vs_dtype of activations */
  uint8_t em_dtype;  /* vs_dtype of saved matmul inputs */
  uint8_t param_dtype; /* vs_dtype of the GPU's weights */
  bool amp;          /* autocast over fp32 weights (frameworks.md 1) */
  uint64_t er;       /* bytes per element of the residual stream and of
                        the inputs norms save: e, or 4 under autocast
                        (fp32 weights make the residual fp32; layer_norm
                        is on autocast's fp32 list) */
  uint8_t er_dtype;  /* their vs_dtype */
  uint64_t qkv_casts; /* copies of the first norm's output the attention's
                        input projections save (casts_of) */
  uint64_t up_casts; /* ... of the second norm's output, the MLP's */
  uint8_t copy_dtype; /* dtype of a GEMM weight's copy saved for backward
                        (weight_copy): fp8 under fp8, the 16-bit dtype
                        under autocast; VS_DTYPE_N: none */
  bool dropout;      /* dropout ops exist */
  bool sp;           /* sequence parallel */
  bool eager;        /* attention materialises the scores */
  bool causal;       /* attention masks later tokens (gpt, llama) */
  bool frozen_base;  /* LoRA / QLoRA: every base weight frozen */
  uint8_t base_dtype; /* vs_dtype of the layers' linear weights */
  uint64_t lora_r;   /* adapter rank; 0: no adapters */
  uint32_t lora_targets; /* bits 1 << vs_lora_target */
  bool lora_drop;    /* dropout on each adapter's input */
  uint8_t adapter_dtype; /* vs_dtype of adapter weights */
  bool frozen_prefix; /* trainable_layers: the first layers are frozen */
  uint64_t experts;  /* routed experts of an MoE layer (0: dense model) */
  uint64_t topk;     /* experts a token goes to */
  uint64_t fe;       /* a routed expert's FFN width */
  uint64_t fs;       /* the shared experts' FFN width, all together */
  uint64_t slots;    /* token slots the routed experts process on this
                        rank per micro-batch: what the all-to-all brings
                        (arrived), gathered over etp */
  uint64_t arrived;  /* token slots the expert-parallel all-to-all brings
                        this rank (moe_slots of its tok_rep tokens) */
  uint64_t sent;     /* the rank's own token slots it dispatches (k
                        tok_rep, or padded to capacity) */
  uint64_t ep;       /* expert-parallel size: experts / ep on a rank */
  bool bert;         /* arch = bert (its GeLU is F.gelu) */
  uint64_t rkv;      /* MLA: the key-value latent's width (0: no MLA) */
  uint64_t rq;       /* MLA: the query latent's (0: a full projection) */
  uint64_t dn, dr, dv; /* MLA head sizes: query/key non-rotary, rotary,
                        value */
  bool hf_modules;   /* Hugging Face transformers' eager modules
                        (framework = hf): LlamaRMSNorm and GPT-2's
                        NewGELUActivation in Python ops, unfused */
} dims;

/* ------------------------------------------------------------------------
 * Building blocks
 * ------------------------------------------------------------------------ */

/* Makes room for one more item in a block array; VS_EINPUT past
 * VS_BLOCK_ITEMS_MAX, VS_ENOMEM without host memory. */
static int room(void **arr, uint32_t *cap, uint32_t n, size_t elem,
                const char *what, vs_error *err)
{
  size_t c = *cap;
  if (n >= VS_BLOCK_ITEMS_MAX)
    return vs_error_set(err, VS_EINPUT,
                        "model builder: more than %d %s in one block",
                        VS_BLOCK_ITEMS_MAX, what);
  if (!vs_grow(arr, &c, (size_t)n + 1, elem))
    return vs_error_set(err, VS_ENOMEM, "out of host memory building the model");
  *cap = (uint32_t)(c > VS_BLOCK_ITEMS_MAX ? VS_BLOCK_ITEMS_MAX : c);
  return 0;
}

vs_op_spec *vs_block_add_op(vs_block *blk, const char *name, vs_error *err)
{
  vs_op_spec *op;
  if (room((void **)&blk->ops, &blk->cap_ops, blk->n_ops, sizeof *blk->ops,
           "ops", err))
    return NULL;
  op = &blk->ops[blk->n_ops++];
  memset(op, 0, sizeof *op);
  snprintf(op->name, sizeof op->name, "%s", name);
  op->recompute_share = 1.0;
  op->fwd_kernels = op->bwd_kernels = 1;
  op->first_saved = blk->n_saved;
  op->first_param = blk->n_params;
  return op;
}

int vs_block_save(vs_block *blk, vs_op_spec *op, vs_saved sv, vs_error *err)
{
  if (blk->n_ops == 0 || op != &blk->ops[blk->n_ops - 1])
    return vs_error_set(err, VS_EINPUT,
                        "model builder: %s saves a tensor but is not the "
                        "newest op of block %s", op->name, blk->name);
  if (sv.bytes == 0)
    return 0;
  if (room((void **)&blk->saved, &blk->cap_saved, blk->n_saved,
           sizeof *blk->saved, "saved tensors", err))
    return err->code;
  blk->saved[blk->n_saved++] = sv;
  op->n_saved++;
  return 0;
}

/* An activation in the compute dtype (or dtype). */
static int save_act(vs_block *blk, vs_op_spec *op, uint64_t bytes, int dtype,
                    vs_error *err)
{
  return vs_block_save(blk, op,
                       (vs_saved){.bytes = bytes, .dtype = (uint8_t)dtype,
                                  .category = VS_CAT_ACTIVATIONS},
                       err);
}

/* Who keeps a linear's input for backward. */
typedef enum input_keeper {
  KEPT_FOR_WEIGHTS,  /* only the linear, for its weight gradient */
  KEPT_BY_ANOTHER    /* another op keeps the same tensor too (flash
                        attention its output, the output projection's
                        input) */
} input_keeper;

/* A linear's saved input: needed only for its weight gradient unless
 * another op keeps the same tensor. */
static int save_input(vs_block *blk, vs_op_spec *op, uint64_t bytes,
                      int dtype, input_keeper keeper, vs_error *err)
{
  return vs_block_save(blk, op,
                       (vs_saved){.bytes = bytes, .dtype = (uint8_t)dtype,
                                  .category = VS_CAT_ACTIVATIONS,
                                  .wgrad_only = keeper == KEPT_FOR_WEIGHTS},
                       err);
}

/* An s x s attention tensor of `scores` elements of dtype: what
 * selective checkpointing drops (Korthikanti et al. 2022, Sec. 4.1). */
static int save_scores(vs_block *blk, vs_op_spec *op, uint64_t scores,
                       int dtype, vs_error *err)
{
  return vs_block_save(blk, op,
                       (vs_saved){.bytes = vs_dtype_bytes(dtype, scores),
                                  .dtype = (uint8_t)dtype,
                                  .category = VS_CAT_ACTIVATIONS,
                                  .selective = true},
                       err);
}

/* [m x k] @ [k x n] at e bytes per element: 2mkn FLOPs forward and twice
 * that backward (input and weight gradients). */
static void as_matmul(vs_op_spec *op, uint64_t m, uint64_t k, uint64_t n,
                      uint64_t e)
{
  op->matmul = true;
  op->gemm = (vs_gemm){m, n, k, 1};
  op->bwd_kernels = 2; /* the input gradient's GEMM, the weight's */
  op->fwd_flops = 2.0 * (double)m * (double)k * (double)n;
  op->bwd_flops = 2.0 * op->fwd_flops;
  op->fwd_bytes = (double)e * ((double)m * (double)k + (double)k * (double)n +
                               (double)m * (double)n);
  op->bwd_bytes = 2.0 * op->fwd_bytes;
  /* of which the weight gradient X^T dY: 2mkn FLOPs, reading X and dY and
   * writing dW (as many bytes as forward) */
  op->wgrad_flops = op->fwd_flops;
  op->wgrad_bytes = op->fwd_bytes;
  op->bwd_temp_bytes = e * m * k; /* gradient of the input */
}

/* A memory-bound op over `elems` elements: reads and writes each once
 * forward, reads two and writes one backward. */
static void as_elementwise(vs_op_spec *op, uint64_t elems, uint64_t e,
                           double flops_per_elem)
{
  op->fwd_flops = flops_per_elem * (double)elems;
  op->bwd_flops = 2.0 * op->fwd_flops;
  op->fwd_bytes = 2.0 * (double)(e * elems);
  op->bwd_bytes = 3.0 * (double)(e * elems);
  op->bwd_temp_bytes = e * elems;
}

/* A tensor-parallel collective (Megatron's f and g operators; with
 * sequence parallelism all-gather and reduce-scatter replace them), over
 * d's tensor-parallel group. */
static void comm(vs_comm *c, const dims *d, int kind, uint64_t bytes)
{
  if (d->t > 1) {
    c->kind = (uint8_t)kind;
    c->group = d->tp_group;
    c->bytes = bytes;
  }
}

/* The passes in which a weight stored as dtype is dequantized whole to
 * the compute dtype for its matmul: NF4 forward and backward (bitsandbytes
 * MatMul4Bit; shared/reference/frameworks.md 6.1); FP8 too unless the
 * GEMMs run in FP8 (torchao's Float8Tensor linear runs F.linear on
 * weight.dequantize() for a high-precision input; under precision = fp8
 * Transformer Engine uses an FP8 weight as it is); int8 in backward only
 * (bitsandbytes MatMul8bitLt: the forward GEMM runs in int8, the input
 * gradient on CB.to(dtype, copy=True) scaled by SCB / 127). */
enum { DEQUANT_FWD = 1, DEQUANT_BWD = 2 };
static int dequantized_in(const dims *d, int dtype)
{
  if (dtype == VS_DTYPE_NF4 ||
      (dtype == VS_DTYPE_FP8_SCALED && d->em_dtype != VS_DTYPE_FP8))
    return DEQUANT_FWD | DEQUANT_BWD;
  return dtype == VS_DTYPE_INT8_ROWWISE ? DEQUANT_BWD : 0;
}

/* The elements of op's largest matrix weight before its newest one:
 * of any (pass ANY_PASS), or of those dequantized in pass. */
enum { ANY_PASS = 0 };
static uint64_t largest_earlier_weight(const vs_block *blk,
                                       const vs_op_spec *op, const dims *d,
                                       int pass)
{
  uint64_t largest = 0;
  for (uint32_t i = op->first_param; i + 1 < op->first_param + op->n_params;
       i++) {
    const vs_param_tensor *p = &blk->params[i];
    if (p->rows > 1 && p->cols > 1 && p->rows * p->cols > largest &&
        (pass == ANY_PASS || (dequantized_in(d, p->dtype) & pass)))
      largest = p->rows * p->cols;
  }
  return largest;
}

/* The copy of a rows x cols GEMM weight (stored as dtype) that the newest
 * op, a matmul, makes before its GEMM and saves for backward:
 * - precision = fp8: a weight not stored in FP8 is quantized and the FP8
 *   copy saved (Transformer Engine; shared/reference/frameworks.md 7),
 *   which the recipe keeps only where ZeRO-3 gathers the weight per block
 *   (elsewhere the layout keeps one copy for the step);
 * - autocast: the fp32 weight is cast to 16 bits (autocast_mode.cpp
 *   cached_cast) and saved for the input gradient (frameworks.md 1.2);
 *   the cast reads 4 B and writes 2 B a weight. In backward the GEMM's
 *   16-bit weight gradient is cast to fp32 (ToCopyBackward) before it is
 *   added to .grad: 2 + 4 B a weight of transients, one weight at a time
 *   (the op's largest counts). Biases are cast and cached too, but no
 *   GEMM saves them (addmm's backward needs no bias): not counted. */
static int weight_copy(vs_block *blk, const dims *d, uint64_t rows,
                       uint64_t cols, int dtype, vs_error *err)
{
  vs_op_spec *op = blk->n_ops > 0 ? &blk->ops[blk->n_ops - 1] : NULL;
  uint64_t now = rows * cols, before;
  if (d->copy_dtype == VS_DTYPE_N || !op || !op->matmul || op->adapter ||
      rows <= 1 || cols <= 1 || dtype == VS_DTYPE_FP8_SCALED)
    return 0;
  if (d->amp) {
    op->fwd_bytes += (double)(6 * now);
    before = largest_earlier_weight(blk, op, d, ANY_PASS);
    if (now > before)
      op->bwd_temp_bytes += 6 * (now - before);
  }
  return vs_block_save(blk, op,
                       (vs_saved){.bytes = vs_dtype_tensor_bytes(d->copy_dtype,
                                                                 rows, cols),
                                  .dtype = d->copy_dtype,
                                  .category = VS_CAT_ACTIVATIONS,
                                  .weight_copy = d->amp ? VS_COPY_AUTOCAST
                                                        : VS_COPY_FP8},
                       err);
}

/* A parameter of rows x cols on this rank, stored as dtype, for the
 * newest op (if any), which computes its gradient. */
static int param_as(vs_block *blk, const dims *d, const char *name,
                    uint64_t rows, uint64_t cols, int dtype, vs_error *err)
{
  vs_param_tensor *p;
  if (rows == 0 || cols == 0)
    return 0;
  if (room((void **)&blk->params, &blk->cap_params, blk->n_params,
           sizeof *blk->params, "parameter tensors", err))
    return VS_EINPUT;
  p = &blk->params[blk->n_params++];
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", name);
  p->rows = rows;
  p->cols = cols;
  p->dtype = (uint8_t)dtype;
  p->trainable = !d->frozen_base;
  p->shard_group = VS_GROUP_DP;
  blk->param_elems += rows * cols;
  if (blk->n_ops > 0)
    blk->ops[blk->n_ops - 1].n_params++;
  return weight_copy(blk, d, rows, cols, dtype, err);
}

/* A parameter in the model's parameter dtype whose op is no Transformer
 * Engine module: no FP8 copy. */
static int param_uncopied(vs_block *blk, const dims *d, const char *name,
                          uint64_t rows, uint64_t cols, vs_error *err)
{
  dims plain = *d;
  plain.copy_dtype = VS_DTYPE_N;
  return param_as(blk, &plain, name, rows, cols, d->param_dtype, err);
}

/* A parameter in the model's parameter dtype. */
static int param(vs_block *blk, const dims *d, const char *name, uint64_t rows,
                 uint64_t cols, vs_error *err)
{
  return param_as(blk, d, name, rows, cols, d->param_dtype, err);
}

/* A layer's linear weight (rows x cols on this rank) for the newest op:
 * stored in the base format; one dequantized whole (dequantized_in) is a
 * transient of rows x cols elements of the compute dtype in that pass,
 * one weight at a time, so the op's largest counts. */
static int linear_weight(vs_block *blk, const dims *d, const char *name,
                         uint64_t rows, uint64_t cols, vs_error *err)
{
  vs_op_spec *op;
  uint64_t now = rows * cols, before;
  int passes;
  if (param_as(blk, d, name, rows, cols, d->base_dtype, err))
    return VS_EINPUT;
  passes = dequantized_in(d, d->base_dtype);
  op = &blk->ops[blk->n_ops - 1];
  before = largest_earlier_weight(blk, op, d, DEQUANT_FWD);
  if ((passes & DEQUANT_FWD) && now > before)
    op->fwd_temp_bytes += d->e * (now - before);
  before = largest_earlier_weight(blk, op, d, DEQUANT_BWD);
  if ((passes & DEQUANT_BWD) && now > before)
    op->bwd_temp_bytes += d->e * (now - before);
  return 0;
}

/* One LoRA target of a base linear: its output features and name. */
typedef struct lora_target {
  int target;        /* vs_lora_target */
  uint64_t out;      /* output features */
} lora_target;

/* An adapter op's work over n targets of one input of `in` features:
 * x @ A (in x r) then @ B (r x out) per target, 2 x forward backward (the
 * weight-gradient half of it for A and B). */
static void as_adapter(vs_op_spec *op, const dims *d, uint64_t in,
                       const lora_target *t, size_t n)
{
  double tok = (double)d->tokens, r = (double)d->lora_r;
  op->matmul = true;
  for (size_t i = 0; i < n; i++) {
    double out = (double)t[i].out;
    op->fwd_flops += 2.0 * tok * ((double)in * r + r * out);
    op->fwd_bytes += (double)d->e *
                     (tok * (double)in + (double)in * r + 2.0 * tok * r +
                      r * out + tok * out);
  }
  op->bwd_flops = 2.0 * op->fwd_flops;
  op->bwd_bytes = 2.0 * op->fwd_bytes;
  op->wgrad_flops = op->fwd_flops;
  op->wgrad_bytes = op->fwd_bytes;
  op->bwd_temp_bytes = d->e * d->tokens * in;
}

/* LoRA adapters (Hu et al. 2021; PEFT's lora.Linear) on the targets t of
 * the base linear just built, whose input has `in` features: an op after
 * it with each target's A (in x r) and B (r x out), trainable, in
 * adapter_dtype (fp32 by default: PEFT's autocast_adapter_dtype). What
 * autograd keeps
 * (shared/reference/frameworks.md 6.2): A's input, the base input x itself
 * (once for every target of it) or, with lora_dropout, each target's
 * dropped copy and its 1-byte mask; B's input, A's r-wide output. */
static int lora_adapter(vs_block *blk, const dims *d, const char *name,
                        uint64_t in, input_keeper keeper, const lora_target *t,
                        size_t n, vs_error *err)
{
  static const char *const names[VS_LORA_N] = {"q", "k", "v", "o",
                                                "gate", "up", "down"};
  lora_target on[4];
  size_t k = 0;
  vs_op_spec *op;
  /* adapters of another dtype than the activations get their own cast of
   * x each (PEFT's _cast_input_dtype, then autocast's copy) */
  bool cast = d->adapter_dtype != d->act_dtype;
  for (size_t i = 0; i < n; i++)
    if (d->lora_r && (d->lora_targets & 1u << t[i].target))
      on[k++] = t[i];
  if (k == 0)
    return 0;
  if (!(op = vs_block_add_op(blk, name, err)))
    return VS_EINPUT;
  as_adapter(op, d, in, on, k);
  op->adapter = true;
  if (!d->lora_drop && !cast && keeper == KEPT_FOR_WEIGHTS &&
      save_act(blk, op, d->em * d->tokens * in, d->em_dtype, err))
    return VS_EINPUT;
  for (size_t i = 0; i < k; i++) {
    char pname[VS_OP_NAME_MAX];
    vs_param_tensor *p;
    if (!d->lora_drop && cast &&
        save_act(blk, op, d->e * d->tokens * in, d->act_dtype, err))
      return VS_EINPUT; /* this target's cast copy of x */
    if (d->lora_drop &&
        (save_act(blk, op, d->e * d->tokens * in, d->act_dtype, err) ||
         vs_block_save(blk, op,
                       (vs_saved){.bytes = d->tokens * in,
                                  .dtype = VS_DTYPE_BOOL,
                                  .category = VS_CAT_ACTIVATIONS},
                       err)))
      return VS_EINPUT;
    if (save_act(blk, op, d->e * d->tokens * d->lora_r, d->act_dtype, err))
      return VS_EINPUT;
    for (int ab = 0; ab < 2; ab++) {
      snprintf(pname, sizeof pname, "%s.lora_%c", names[on[i].target],
               ab ? 'B' : 'A');
      if (param(blk, d, pname, ab ? d->lora_r : in, ab ? on[i].out : d->lora_r,
                err))
        return VS_EINPUT;
      p = &blk->params[blk->n_params - 1];
      p->dtype = d->adapter_dtype;
      p->trainable = true;
    }
  }
  return 0;
}

/* A fused norm's backward launches two kernels: the input gradient with
 * per-block partial sums of the weight's (and bias's) gradients, then
 * their reduction (apex's contrib layer_norm: ln_bwd and
 * ln_bwd_finalize, ln_bwd_semi_cuda_kernel.cu; Megatron's persistent
 * FastLayerNorm). */
#define NORM_BWD_KERNELS 2

/* A norm over the replicated activation: saves its input (in fp32 under
 * autocast: the fp32 residual, or its cast), as a fused kernel does.
 * LayerNorm also has a bias; RMSNorm does not. Hugging Face's
 * LlamaRMSNorm (modeling_llama.py) runs in Python ops instead:
 * hidden.to(float32), then pow and the rsqrt multiply save that fp32 copy
 * (the input itself when it is fp32), and weight * normed.to(input_dtype)
 * saves the normalized tensor in the input's dtype. */
static int norm(vs_block *blk, const dims *d, const char *name, bool bias,
                vs_error *err)
{
  char pname[VS_OP_NAME_MAX];
  vs_op_spec *op = vs_block_add_op(blk, name, err);
  uint64_t elems = d->tok_rep * d->h;
  if (!op)
    return VS_EINPUT;
  as_elementwise(op, elems, d->er, 8.0);
  op->bwd_kernels = NORM_BWD_KERNELS;
  if (d->hf_modules && !bias) {
    if (save_act(blk, op, 4 * elems, VS_DTYPE_FP32, err) ||
        save_act(blk, op, d->er * elems, d->er_dtype, err))
      return VS_EINPUT;
  } else if (save_act(blk, op, d->er * elems, d->er_dtype, err)) {
    return VS_EINPUT;
  }
  snprintf(pname, sizeof pname, "%s.weight", name);
  if (param(blk, d, pname, 1, d->h, err))
    return VS_EINPUT;
  snprintf(pname, sizeof pname, "%s.bias", name);
  return bias ? param(blk, d, pname, 1, d->h, err) : 0;
}

/* Dropout over n elements of eb bytes: its 1-byte mask is saved (the
 * dropped-out attention probs are saved by the matmul that reads them). */
static int dropout(vs_block *blk, const dims *d, const char *name, uint64_t n,
                   uint64_t eb, bool selective, vs_error *err)
{
  vs_op_spec *op;
  if (!d->dropout)
    return 0;
  if (!(op = vs_block_add_op(blk, name, err)))
    return VS_EINPUT;
  as_elementwise(op, n, eb, 2.0);
  op->attn_core = selective;
  if (vs_block_save(blk, op,
                    (vs_saved){.bytes = n, .dtype = VS_DTYPE_BOOL,
                               .category = VS_CAT_ACTIVATIONS,
                               .selective = selective},
                    err))
    return VS_EINPUT;
  return 0;
}

/* Under autocast, a GEMM's input from the fp32 residual stream (a norm's
 * output) is cast to 16 bits by each of the `casts` linears that read it,
 * each keeping its own copy (frameworks.md 1.2): the casts read 4 B and
 * write 2 B an element, and in backward each gradient is cast back to
 * fp32 before the norm gets it. */
static void autocast_input(vs_op_spec *op, const dims *d, uint64_t casts,
                           uint64_t elems)
{
  if (!d->amp)
    return;
  op->fwd_bytes += (double)(casts * (d->er + d->e) * elems);
  op->bwd_temp_bytes += d->er * elems;
}

/* Whether a column-parallel matmul under sequence parallelism gathers its
 * saved (sequence-sharded) input again for backward, or keeps the gathered
 * input whole (the experts' tokens, gathered by the dispatcher). */
typedef enum { SP_REGATHER, SP_KEEPS_GATHERED } sp_input;

/* The tensor-parallel collectives of a column-parallel matmul over `rows`
 * tokens of `width` input features (Megatron's f: all-reduce of the
 * input's gradient; with sp the input all-gathered in forward, the
 * gradient reduce-scattered, and the input gathered again in backward
 * unless kept whole). */
static void column_comms(vs_op_spec *op, const dims *d, uint64_t rows,
                         uint64_t width, sp_input input)
{
  uint64_t bytes = d->e * rows * width;
  if (!d->sp) {
    comm(&op->bwd_after, d, VS_COLL_ALL_REDUCE, bytes);
    return;
  }
  comm(&op->fwd_before, d, VS_COLL_ALL_GATHER, bytes);
  comm(&op->bwd_after, d, VS_COLL_REDUCE_SCATTER, bytes);
  if (input == SP_REGATHER) {
    comm(&op->bwd_before, d, VS_COLL_ALL_GATHER, bytes);
    op->bwd_temp_bytes += bytes; /* re-gathered input */
  }
}

/* The tensor-parallel collectives of a row-parallel matmul over `rows`
 * tokens (Megatron's g: all-reduce of the output; with sp a
 * reduce-scatter, and the output's gradient gathered in backward). */
static void row_comms(vs_op_spec *op, const dims *d, uint64_t rows)
{
  uint64_t bytes = d->e * rows * d->h;
  if (d->sp) {
    comm(&op->fwd_after, d, VS_COLL_REDUCE_SCATTER, bytes);
    comm(&op->bwd_before, d, VS_COLL_ALL_GATHER, bytes);
  } else {
    comm(&op->fwd_after, d, VS_COLL_ALL_REDUCE, bytes);
  }
}

/* A column-parallel matmul (QKV, MLP up): the input is replicated over tp
 * (or sequence-sharded and gathered first), the output sharded; `casts`
 * linears read the input (casts_of). */
static vs_op_spec *column_parallel(vs_block *blk, const dims *d,
                                   const char *name, uint64_t out_cols,
                                   uint64_t casts, vs_error *err)
{
  vs_op_spec *op = vs_block_add_op(blk, name, err);
  if (!op)
    return NULL;
  as_matmul(op, d->tokens, d->h, out_cols, d->e);
  autocast_input(op, d, casts, d->tok_rep * d->h);
  if (save_input(blk, op, casts * d->em * d->tok_rep * d->h, d->em_dtype,
                 KEPT_FOR_WEIGHTS, err))
    return NULL;
  column_comms(op, d, d->tokens, d->h, SP_REGATHER);
  return op;
}

/* A row-parallel matmul (attention output, MLP down): sharded input, output
 * summed over tp (all-reduce, or reduce-scatter with sp); keeper: who else
 * keeps its input. */
static vs_op_spec *row_parallel(vs_block *blk, const dims *d, const char *name,
                                uint64_t in_cols, input_keeper keeper,
                                vs_error *err)
{
  vs_op_spec *op = vs_block_add_op(blk, name, err);
  if (!op)
    return NULL;
  as_matmul(op, d->tokens, in_cols, d->h, d->e);
  if (save_input(blk, op, d->em * d->tokens * in_cols, d->em_dtype, keeper,
                 err))
    return NULL;
  row_comms(op, d, d->tokens);
  return op;
}

/* ------------------------------------------------------------------------
 * Attention core
 * ------------------------------------------------------------------------ */

/* Materialised attention: scores = QK^T, softmax, dropout, probs @ V. The
 * s^2 tensors are `selective`: selective checkpointing recomputes them. With
 * grouped-query attention, eager implementations expand K and V to every
 * head before the matmuls (Hugging Face repeat_kv, Megatron's core
 * attention), so the saved K and V have `heads` heads. */
/* One of the two attention matmuls over all heads of this rank, one
 * batched GEMM (Megatron's baddbmm and bmm): 2*b*heads*s*s*d FLOPs
 * forward, twice that backward. QK^T is [s x d] @ [d x s] per head
 * (scores = true), probs @ V [s x s] @ [s x d]. */
static void attention_matmul(vs_op_spec *op, const dims *d, uint64_t heads,
                             bool scores, double bytes)
{
  op->matmul = true;
  op->attn_core = true;
  op->gemm = scores ? (vs_gemm){d->s, d->s, d->d, d->b * heads}
                    : (vs_gemm){d->s, d->d, d->s, d->b * heads};
  op->bwd_kernels = 2; /* both operands' gradients */
  op->fwd_flops = 2.0 * (double)d->b * (double)heads * (double)d->s *
                  (double)d->s * (double)d->d;
  op->bwd_flops = 2.0 * op->fwd_flops;
  op->fwd_bytes = bytes;
  op->bwd_bytes = 2.0 * bytes;
}

/* Bytes per element of an eager softmax's input, whose gradient its
 * backward makes: the scores' dtype, or fp32 under autocast, where
 * softmax(dtype = float32) converts a bf16 input to an fp32 copy first
 * (aten/src/ATen/native/SoftMax.cpp: only CUDA's fp16 takes the fused
 * half_to_float kernel, whose gradient comes back in fp16) and Hugging
 * Face's modules add an fp32 mask, which promotes the scores. */
static uint64_t softmax_input_bytes(const dims *d)
{
  if (!d->amp)
    return d->e;
  return d->hf_modules || d->act_dtype != VS_DTYPE_FP16 ? 4 : d->e;
}

static int attention_eager(vs_block *blk, const dims *d, vs_error *err)
{
  uint64_t heads = d->a / d->t, kv = heads;
  uint64_t scores = heads * d->s * d->s * d->b; /* elements */
  uint64_t qk_grads;
  vs_op_spec *op;

  if (!(op = vs_block_add_op(blk, "attn_scores", err)))
    return VS_EINPUT;
  attention_matmul(op, d, heads, true,
                   (double)d->e * ((double)(d->tokens * d->d * (heads + kv)) +
                                   (double)scores));
  /* raw scores until the softmax; under autocast also their fp32
   * promotion (an fp32 mask added, or softmax's own cast) */
  op->fwd_temp_bytes = (d->e + (d->amp ? 4 : 0)) * scores;
  /* backward: the scores' gradient, held while the scale's and the
   * mask's backward make a 16-bit copy of it, then while Q's and K's are
   * made (autograd frees a node's incoming gradient once the node is
   * done); it is fp32 where an fp32 mask promoted the scores (Hugging
   * Face's modules under autocast) */
  qk_grads = d->e * d->tokens * d->d * (heads + kv);
  op->bwd_temp_bytes =
      (d->amp && d->hf_modules ? d->er : d->e) * scores +
      (qk_grads > d->e * scores ? qk_grads : d->e * scores);
  if (save_act(blk, op, d->e * d->tokens * d->d * (heads + kv), d->act_dtype, err))
    return VS_EINPUT; /* Q and K */

  /* softmax is on autocast's fp32 list: its output, which it saves, is
   * fp32 there (and so is the dropout over it) */
  if (!(op = vs_block_add_op(blk, "softmax", err)))
    return VS_EINPUT;
  as_elementwise(op, scores, d->er, 5.0);
  op->attn_core = true;
  /* its backward holds the probs' gradient (fp32 under autocast, cast
   * from the 16-bit one the matmul made) while it makes its input's */
  op->bwd_temp_bytes = (d->er + softmax_input_bytes(d)) * scores;
  if (save_scores(blk, op, scores, d->er_dtype, err))
    return VS_EINPUT;

  if (dropout(blk, d, "attn_dropout", scores, d->er, true, err))
    return VS_EINPUT;

  if (!(op = vs_block_add_op(blk, "attn_context", err)))
    return VS_EINPUT;
  attention_matmul(op, d, heads, false,
                   (double)d->e * ((double)scores +
                                   2.0 * (double)(d->tokens * d->d * heads)));
  op->bwd_temp_bytes = d->e * scores;
  if (d->amp && d->dropout) /* the fp32 dropped-out probs, until cast */
    op->fwd_temp_bytes += 4 * scores;
  if (save_act(blk, op, d->e * d->tokens * d->d * kv, d->act_dtype, err))
    return VS_EINPUT; /* V */
  /* the probs the matmul reads: the dropped-out ones, or autocast's
   * 16-bit cast of the fp32 ones; otherwise the softmax output, already
   * saved */
  if (d->dropout || d->amp)
    if (save_scores(blk, op, scores, d->act_dtype, err))
      return VS_EINPUT;
  return 0;
}

/* FlashAttention: never materialises the scores; saves Q, K, V and the fp32
 * log-sum-exp per row; dropout masks are regenerated from the RNG state.
 * FLOPs as FlashAttention-2 counts them (Dao 2023, arXiv 2307.08691,
 * Sec. 4.1; flash-attn benchmarks/benchmark_flash_attention.py, flops()):
 * 4*s^2*d*heads forward, "divided by 2 for causal" (the kernel skips the
 * blocks above the diagonal), and 2.5x that backward (5 matmuls to the
 * forward's 2: the backward recomputes the scores). An eager causal
 * attention computes every s^2 product and masks afterwards (Megatron's
 * core attention: baddbmm then masked softmax), so it keeps the full
 * count. */
#define CAUSAL_FLASH_FRACTION 0.5

/* What a flash attention op's measured rate depends on: the kernel's
 * query length (this rank's), head dimension and mask. Under context
 * parallelism the kernel runs on blocks of s/cp queries by s/cp keys, of
 * which only those on the diagonal are causal: the bidirectional rates. */
static vs_flash_shape flash_shape(const dims *d, uint64_t head_dim)
{
  return (vs_flash_shape){d->s, head_dim, d->causal && d->cp == 1};
}

/* FlashAttention-2's backward launches three kernels (flash-attn
 * csrc/flash_attn/src/flash_bwd_launch_template.h: dot(dO, O), the
 * dQ/dK/dV kernel, dQ's conversion), its forward one. */
#define FLASH_BWD_KERNELS 3

/* Context parallelism around a flash attention op of `heads` heads whose
 * queries are q wide, keys and values kv wide each and output o wide on
 * this rank (Megatron-LM's
 * context_parallel.md; shared/reference/frameworks.md 9): each rank holds
 * s / cp tokens (a chunk from each end of the sequence: the causal work
 * evens out) and its queries attend over every key, so the op's FLOPs
 * above already count s / cp queries by s keys.
 * - p2p: the K, V chunks go round the ring, two in flight (2 x 2 x
 *   (s / cp) b kv bytes of the activations' dtype), in backward again
 *   beside their dK, dV; over the whole ring each rank receives the
 *   sequence's K and V, an all-gather's worth, and in backward sends the
 *   gradients back, a reduce-scatter's; the ring is timed as blocking
 *   collectives, where Transformer Engine overlaps its steps with the
 *   attention kernel (pessimistic);
 * - allgather: the whole sequence's K and V gathered before the kernel
 *   (2 s b kv) and their gradients reduce-scattered after;
 * - a2a (Ulysses): Q, K, V moved from sequence chunks to head groups
 *   before the kernel and the output back after, the same bytes each way:
 *   the kernel then holds s tokens of heads / cp, as many bytes as the
 *   chunk of every head. */
static void context_parallel(vs_op_spec *op, const dims *d, uint64_t heads,
                             uint64_t q, uint64_t kv, uint64_t o)
{
  uint64_t chunk = d->e * d->tokens * 2 * kv; /* this rank's K and V */
  uint64_t full = chunk * d->cp, out = d->e * d->tokens * o;
  if (d->cp == 1)
    return;
  op->fwd_before.group = op->bwd_after.group = VS_GROUP_CP;
  switch (d->cp_comm) {
  case VS_CP_A2A:
    op->fwd_before.kind = op->bwd_after.kind = VS_COLL_ALL_TO_ALL;
    op->fwd_before.bytes = op->bwd_after.bytes =
        d->e * d->tokens * q + chunk;
    op->fwd_after = (vs_comm){VS_COLL_ALL_TO_ALL, VS_GROUP_CP, out};
    /* backward sends the output with its gradient (Transformer Engine's
     * AttnFuncWithCPAndQKVOA2A) */
    op->bwd_before = (vs_comm){VS_COLL_ALL_TO_ALL, VS_GROUP_CP, 2 * out};
    op->fwd_temp_bytes += d->e * d->tokens * q + chunk;
    op->bwd_temp_bytes += d->e * d->tokens * q + chunk + 2 * out;
    break;
  case VS_CP_ALLGATHER:
    op->fwd_before.kind = VS_COLL_ALL_GATHER;
    op->bwd_after.kind = VS_COLL_REDUCE_SCATTER;
    op->fwd_before.bytes = op->bwd_after.bytes = full;
    op->bwd_before = op->fwd_before; /* gathered again for backward */
    op->fwd_temp_bytes += full;
    op->bwd_temp_bytes += 2 * full; /* K, V again and their gradients */
    break;
  default:
    op->fwd_before.kind = VS_COLL_ALL_GATHER;
    op->bwd_after.kind = VS_COLL_REDUCE_SCATTER;
    op->fwd_before.bytes = op->bwd_after.bytes = full;
    op->bwd_before = op->fwd_before; /* round the ring again */
    /* two K, V chunks in flight, and each ring step's output and fp32
     * LSE kept for the final correction (Transformer Engine's
     * AttnFuncWithCPAndKVP2P: a whole chunk's at the first step, half one
     * at each later, causal one) */
    op->fwd_temp_bytes += 2 * chunk +
                          (out + 4 * d->b * d->s * heads) * (d->cp + 1) / 2;
    op->bwd_temp_bytes += 4 * chunk;
    break;
  }
}

/* The K and V heads a flash attention op holds: its own, or every query
 * head's where the kernel that runs takes no grouped K and V. FlashAttention
 * has no fp32 kernel, so fp32 attention runs PyTorch SDPA's
 * memory-efficient backend, which grouped-query attention reaches only
 * with K and V expanded to every head (enable_gqa is the flash and math
 * backends'; the H200 ground-truth harness found the efficient backend
 * refusing it, PyTorch 2.11): the expanded copies are the kernel's
 * inputs, saved for backward, and their gradients are summed back. */
static uint64_t flash_kv_heads(const dims *d)
{
  return d->act_dtype == VS_DTYPE_FP32 ? d->a / d->t : d->kv / d->t;
}

/* FlashAttention's kernels take a head dimension that is a multiple of
 * 8: PyTorch's SDPA pads Q, K and V to one (aten/src/ATen/native/
 * transformers/attention.cpp, pad_last_dim<8>), saves the padded copies
 * and the padded output for backward, and hands back a slice of the
 * output (post_process_flash_output), which the heads' merge before the
 * output projection must copy. The memory-efficient kernel (fp32) does
 * not pad. The head dimension the kernel runs at. */
static uint64_t flash_head_dim(const dims *d)
{
  return d->act_dtype == VS_DTYPE_FP32 ? d->d : vs_div_ceil(d->d, 8) * 8;
}

static int attention_flash(vs_block *blk, const dims *d, vs_error *err)
{
  uint64_t heads = d->a / d->t, kv = flash_kv_heads(d);
  uint64_t pd = flash_head_dim(d), qkv = d->tokens * (heads + 2 * kv);
  vs_op_spec *op = vs_block_add_op(blk, "flash_attn", err);
  if (!op)
    return VS_EINPUT;
  op->matmul = true;
  op->fwd_flops = 4.0 * (double)d->b * (double)heads * (double)d->s *
                  (double)d->skv * (double)pd *
                  (d->causal ? CAUSAL_FLASH_FRACTION : 1.0);
  op->bwd_flops = 2.5 * op->fwd_flops; /* backward recomputes the scores */
  op->bwd_kernels = FLASH_BWD_KERNELS;
  op->flash = flash_shape(d, pd);
  op->fwd_bytes = (double)d->e * (double)(d->tokens * pd * (2 * heads + 2 * kv));
  op->bwd_bytes = 2.0 * op->fwd_bytes;
  op->bwd_temp_bytes = d->e * pd * qkv;
  context_parallel(op, d, heads, heads * d->d, kv * d->d, heads * d->d);
  if (pd != d->d) {
    /* three pads and the merge's copy: each reads and writes its tensor;
     * backward pads the output's gradient (held beside Q's, K's and V's
     * padded ones) */
    op->fwd_kernels += 4;
    op->bwd_kernels += 1;
    op->fwd_bytes += (double)d->e * (double)((d->d + pd) * qkv +
                                             2 * d->tokens * d->d * heads);
    op->bwd_temp_bytes += d->e * d->tokens * pd * heads;
  }
  if (save_act(blk, op, d->e * pd * qkv, d->act_dtype, err))
    return VS_EINPUT; /* Q, K, V (padded) */
  /* the output, padded: unpadded it is the output projection's input,
   * which that keeps */
  if (pd != d->d &&
      save_act(blk, op, d->e * d->tokens * pd * heads, d->act_dtype, err))
    return VS_EINPUT;
  if (save_act(blk, op, 4 * d->b * heads * d->s, VS_DTYPE_FP32, err))
    return VS_EINPUT;                     /* LSE fp32 */
  return 0;
}

/* ------------------------------------------------------------------------
 * Layers
 * ------------------------------------------------------------------------ */

/* The attention's input projection weights: one fused qkv, or where each
 * reads its own cast of the input (casts_of: autocast over Hugging Face's
 * separate q, k and v linears) three, whose backward holds one weight's
 * gradients at a time. */
static int qkv_weights(vs_block *blk, const dims *d, uint64_t qkv_cols,
                       vs_error *err)
{
  if (d->qkv_casts != 3)
    return linear_weight(blk, d, "qkv.weight", d->h, qkv_cols, err);
  return linear_weight(blk, d, "q.weight", d->h, d->a * d->d / d->t, err) ||
                 linear_weight(blk, d, "k.weight", d->h, d->kv * d->d / d->t,
                               err) ||
                 linear_weight(blk, d, "v.weight", d->h, d->kv * d->d / d->t,
                               err)
             ? VS_EINPUT
             : 0;
}

/* How a latent attention linear runs over tp ranks (Megatron-LM's
 * MLASelfAttention): duplicated (the down projections: every rank its
 * own tok_rep tokens, the whole weight), column-parallel (the up
 * projections: heads split, the latent gathered over tp with sp) or
 * row-parallel (the output projection). */
typedef enum { MLA_DUPLICATED, MLA_COLUMN, MLA_ROW } mla_split;

/* A linear of `in` to `out` features (this rank's share, split as
 * `split`), its weight, and its input kept for the weight gradient when
 * `keep_input` (else another op keeps the same tensor). */
static vs_op_spec *mla_linear(vs_block *blk, const dims *d, const char *name,
                              uint64_t in, uint64_t out, mla_split split,
                              bool keep_input, vs_error *err)
{
  char pname[VS_OP_NAME_MAX];
  vs_op_spec *op = vs_block_add_op(blk, name, err);
  /* the rows each rank keeps of its input: a row-parallel input is the
   * rank's heads over every token, the others its sequence shard */
  uint64_t kept = split == MLA_ROW ? d->tokens : d->tok_rep;
  if (!op)
    return NULL;
  as_matmul(op, split == MLA_DUPLICATED ? d->tok_rep : d->tokens, in, out,
            d->e);
  if (split == MLA_COLUMN)
    column_comms(op, d, d->tokens, in, SP_REGATHER);
  else if (split == MLA_ROW)
    row_comms(op, d, d->tokens);
  snprintf(pname, sizeof pname, "%.16s.weight", name);
  if ((keep_input && save_input(blk, op, d->em * kept * in, d->em_dtype,
                                KEPT_FOR_WEIGHTS, err)) ||
      linear_weight(blk, d, pname, in, out, err))
    return NULL;
  return op;
}

/* An RMSNorm over `width` features of the tokens (MLA's latent norms). */
static int mla_norm(vs_block *blk, const dims *d, const char *name,
                    uint64_t width, vs_error *err)
{
  char pname[VS_OP_NAME_MAX];
  vs_op_spec *op = vs_block_add_op(blk, name, err);
  if (!op)
    return VS_EINPUT;
  as_elementwise(op, d->tok_rep * width, d->e, 8.0);
  op->bwd_kernels = NORM_BWD_KERNELS;
  snprintf(pname, sizeof pname, "%.16s.weight", name);
  return save_act(blk, op, d->e * d->tok_rep * width, d->act_dtype, err) ||
                 param(blk, d, pname, 1, width, err)
             ? VS_EINPUT
             : 0;
}

/* Multi-head latent attention (DeepSeek-V2, arXiv 2405.04434, Sec. 2.1;
 * Megatron-LM's MLASelfAttention), one rank: the query through a latent
 * (down projection to q_lora_rank, RMSNorm, up to heads x (qk_head_dim +
 * qk_rope_head_dim)) or one projection; the keys and values through one
 * shared latent (down to kv_lora_rank + qk_rope_head_dim, RMSNorm of the
 * kv_lora_rank part, up to heads x (qk_head_dim + v_head_dim)), the
 * rotary key part shared by the heads; rotary embeddings (cos/sin tables,
 * nothing saved); flash attention over query/key heads of qk_head_dim +
 * qk_rope_head_dim and value heads of v_head_dim, saving Q, K (the shared
 * rotary part expanded to every head), V and the fp32 log-sum-exp; the
 * output projection from heads x v_head_dim. Each linear keeps its input
 * (the norm output once, for both down projections). With tp the heads
 * split: the down projections and latent norms run duplicated on each
 * rank's tok_rep tokens, the up projections are column-parallel (the
 * latents, and the shared rotary key part, gathered over tp with sp), the
 * output projection row-parallel. */
static int attention_mla(vs_block *blk, const dims *d, vs_error *err)
{
  uint64_t a = d->a / d->t, dqk = d->dn + d->dr;
  vs_op_spec *op;
  if (d->rq) {
    if (!mla_linear(blk, d, "q_down", d->h, d->rq, MLA_DUPLICATED, true,
                    err) ||
        mla_norm(blk, d, "q_norm", d->rq, err) ||
        !mla_linear(blk, d, "q_up", d->rq, a * dqk, MLA_COLUMN, true, err))
      return VS_EINPUT;
  } else if (!mla_linear(blk, d, "q_proj", d->h, a * dqk, MLA_COLUMN, true,
                         err)) {
    return VS_EINPUT;
  }
  /* both down projections read the norm output; under fp8 each keeps
   * its own FP8 copy of it */
  if (!mla_linear(blk, d, "kv_down", d->h, d->rkv + d->dr, MLA_DUPLICATED,
                  d->em != d->e, err) ||
      mla_norm(blk, d, "kv_norm", d->rkv, err) ||
      !(op = mla_linear(blk, d, "kv_up", d->rkv, a * (d->dn + d->dv),
                        MLA_COLUMN, true, err)))
    return VS_EINPUT;
  /* with sp the shared rotary key part is gathered with the latent, and
   * its gradient reduce-scattered with the latent's */
  if (d->sp) {
    op->fwd_before.bytes += d->e * d->tokens * d->dr;
    op->bwd_after.bytes += d->e * d->tokens * d->dr;
  }
  if (!(op = vs_block_add_op(blk, "flash_attn", err)))
    return VS_EINPUT;
  op->matmul = true;
  /* QK^T over dqk and PV over dv: 2 b a s^2 (dqk + dv) forward, halved
   * when causal; backward 2.5 x (FlashAttention-2's count) */
  op->fwd_flops = 2.0 * (double)d->b * (double)a * (double)d->s *
                  (double)d->skv * (double)(dqk + d->dv) *
                  (d->causal ? CAUSAL_FLASH_FRACTION : 1.0);
  /* backward: S again and dQ, dK over d_qk, dP and dV over d_v
   * (FlashAttention-2's five matmuls; 2.5 x forward when they match) */
  op->bwd_flops = op->fwd_flops * (double)(3 * dqk + 2 * d->dv) /
                  (double)(dqk + d->dv);
  op->bwd_kernels = FLASH_BWD_KERNELS;
  op->flash = flash_shape(d, dqk);
  op->fwd_bytes = (double)d->e * (double)(d->tokens * a * (2 * dqk + 2 * d->dv));
  op->bwd_bytes = 2.0 * op->fwd_bytes;
  op->bwd_temp_bytes = d->e * d->tokens * a * (2 * dqk + d->dv);
  context_parallel(op, d, a, a * dqk, a * (dqk + d->dv) / 2, a * d->dv);
  if (save_act(blk, op, d->e * d->tokens * a * (2 * dqk + d->dv),
               d->act_dtype, err) ||
      save_act(blk, op, 4 * d->b * a * d->s, VS_DTYPE_FP32, err))
    return VS_EINPUT; /* Q, K, V; LSE */
  if (!mla_linear(blk, d, "attn_out_proj", a * d->dv, d->h, MLA_ROW, true,
                  err))
    return VS_EINPUT;
  return dropout(blk, d, "attn_out_dropout", d->tok_rep * d->h, d->e, false,
                 err);
}

static int standard_attention(vs_block *blk, const dims *d, bool bias,
                              vs_error *err)
{
  uint64_t qkv_cols = (d->a + 2 * d->kv) * d->d / d->t;
  const lora_target qkv[] = {{VS_LORA_Q, d->a * d->d},
                             {VS_LORA_K, d->kv * d->d},
                             {VS_LORA_V, d->kv * d->d}};
  const lora_target out[] = {{VS_LORA_O, d->h}};
  /* flash attention keeps its output, the output projection's input */
  input_keeper out_keeper = d->eager ? KEPT_FOR_WEIGHTS : KEPT_BY_ANOTHER;
  if (!column_parallel(blk, d, "qkv_proj", qkv_cols, d->qkv_casts, err))
    return VS_EINPUT;
  if (qkv_weights(blk, d, qkv_cols, err) ||
      (bias && param(blk, d, "qkv.bias", 1, qkv_cols, err)) ||
      lora_adapter(blk, d, "lora_qkv", d->h, KEPT_FOR_WEIGHTS, qkv, 3, err))
    return VS_EINPUT;
  if ((d->eager ? attention_eager : attention_flash)(blk, d, err))
    return VS_EINPUT;
  if (!row_parallel(blk, d, "attn_out_proj", d->h / d->t, out_keeper, err))
    return VS_EINPUT;
  if (linear_weight(blk, d, "attn_out.weight", d->h / d->t, d->h, err) ||
      (bias && param(blk, d, "attn_out.bias", 1, d->h, err)) ||
      lora_adapter(blk, d, "lora_o", d->h / d->t, out_keeper, out, 1, err))
    return VS_EINPUT;
  return dropout(blk, d, "attn_out_dropout", d->tok_rep * d->h, d->e, false,
                 err);
}

/* A layer's attention: standard (MHA, GQA) or latent (MLA). */
static int attention_block(vs_block *blk, const dims *d, bool bias,
                           vs_error *err)
{
  if (d->rkv)
    return attention_mla(blk, d, err);
  return standard_attention(blk, d, bias, err);
}


/* Bytes a GeLU saves per element of its input: the input, as a fused
 * kernel (F.gelu; BERT's); GPT-2's NewGELUActivation under framework = hf
 * (transformers' activations.py: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715
 * x^3)))) keeps x for pow, the tanh output t, 0.5x and 1 + t: 4 tensors
 * of the input's dtype, and under autocast (pow on its fp32 list) x's
 * fp32 copy, t and 1 + t in fp32 beside the 16-bit 0.5x: 14 bytes. */
static uint64_t gelu_saved(const dims *d, int role)
{
  if (!d->hf_modules || role != VS_ROLE_LAYER || d->bert)
    return d->e;
  return d->amp ? 4 + 4 + d->e + 4 : 4 * d->e;
}

/* GPT / BERT MLP: up, GeLU, down, dropout: 19sbh at 16 bits (Korthikanti). */
static int gelu_mlp(vs_block *blk, const dims *d, vs_error *err)
{
  uint64_t f = d->f / d->t;
  const lora_target up[] = {{VS_LORA_UP, f}}, down[] = {{VS_LORA_DOWN, d->h}};
  vs_op_spec *op;
  if (!column_parallel(blk, d, "mlp_up", f, 1, err) ||
      linear_weight(blk, d, "mlp_up.weight", d->h, f, err) ||
      param(blk, d, "mlp_up.bias", 1, f, err) ||
      lora_adapter(blk, d, "lora_up", d->h, KEPT_FOR_WEIGHTS, up, 1, err))
    return VS_EINPUT;
  if (!(op = vs_block_add_op(blk, "gelu", err)))
    return VS_EINPUT;
  as_elementwise(op, d->tokens * f, d->e, 8.0);
  if (save_act(blk, op, gelu_saved(d, blk->role) * d->tokens * f,
               d->act_dtype, err))
    return VS_EINPUT;
  if (d->amp && gelu_saved(d, blk->role) != d->e)
    op->fwd_temp_bytes += 4 * d->tokens * f; /* its fp32 output, until the
                                                down projection's cast */
  if (!row_parallel(blk, d, "mlp_down", f, KEPT_FOR_WEIGHTS, err) ||
      linear_weight(blk, d, "mlp_down.weight", f, d->h, err) ||
      param(blk, d, "mlp_down.bias", 1, d->h, err) ||
      lora_adapter(blk, d, "lora_down", f, KEPT_FOR_WEIGHTS, down, 1, err))
    return VS_EINPUT;
  return dropout(blk, d, "mlp_dropout", d->tok_rep * d->h, d->e, false, err);
}

/* Llama MLP: gate and up projections, SiLU(gate) * up, down projection. */
static int swiglu_mlp(vs_block *blk, const dims *d, vs_error *err)
{
  uint64_t f = d->f / d->t;
  const lora_target gate_up[] = {{VS_LORA_GATE, f}, {VS_LORA_UP, f}};
  const lora_target down[] = {{VS_LORA_DOWN, d->h}};
  vs_op_spec *op;
  if (!column_parallel(blk, d, "mlp_gate_up", 2 * f, d->up_casts, err) ||
      linear_weight(blk, d, "mlp_gate.weight", d->h, f, err) ||
      linear_weight(blk, d, "mlp_up.weight", d->h, f, err) ||
      lora_adapter(blk, d, "lora_gate_up", d->h, KEPT_FOR_WEIGHTS, gate_up, 2,
                   err))
    return VS_EINPUT;
  if (!(op = vs_block_add_op(blk, "silu", err)))
    return VS_EINPUT;
  as_elementwise(op, d->tokens * f, d->e, 4.0);
  if (save_act(blk, op, d->e * d->tokens * f, d->act_dtype, err))
    return VS_EINPUT; /* gate, for SiLU's backward */
  if (!(op = vs_block_add_op(blk, "swiglu_mul", err)))
    return VS_EINPUT;
  as_elementwise(op, d->tokens * f, d->e, 1.0);
  if (save_act(blk, op, 2 * d->e * d->tokens * f, d->act_dtype, err))
    return VS_EINPUT; /* SiLU(gate) and up */
  if (!row_parallel(blk, d, "mlp_down", f, KEPT_FOR_WEIGHTS, err) ||
      linear_weight(blk, d, "mlp_down.weight", f, d->h, err) ||
      lora_adapter(blk, d, "lora_down", f, KEPT_FOR_WEIGHTS, down, 1, err))
    return VS_EINPUT;
  return dropout(blk, d, "mlp_dropout", d->tok_rep * d->h, d->e, false, err);
}

/* ------------------------------------------------------------------------
 * Mixture of experts (Megatron-LM's MoE layer: megatron/core/transformer/
 * moe; shared/reference/frameworks.md 8). With expert tensor parallelism
 * (expert_tensor_parallel_size, etp; tp by default, with sequence
 * parallelism) as Megatron-LM runs it: each rank routes its tok_rep
 * tokens, the all-to-all brings it `arrived` slots, the etp ranks gather
 * theirs (each then holds all d->slots of its experts), each expert's fc1
 * is split by columns and fc2 by rows over etp, and fc2's partial sums
 * are reduce-scattered back before the all-to-all returns. The etp ranks
 * route different tokens whatever tp is (under tp, sequence parallelism;
 * across data-parallel ranks otherwise), so their collectives are always
 * the sequence-parallel ones.
 * ------------------------------------------------------------------------ */

/* Each of the rank's routed experts' (E / ep) rows x cols weight `which`
 * ("fc1", "fc2") and, with `bias`, its bias of cols, for the newest op;
 * their states shard over the expert-data-parallel group. */
static int expert_weights(vs_block *blk, const dims *d, const char *which,
                          uint64_t rows, uint64_t cols, bool bias,
                          vs_error *err)
{
  for (uint64_t x = 0; x < d->experts / d->ep; x++) {
    char name[VS_OP_NAME_MAX];
    snprintf(name, sizeof name, "e%u.%.3s", (unsigned)x, which);
    if (param(blk, d, name, rows, cols, err))
      return VS_EINPUT;
    blk->params[blk->n_params - 1].shard_group = VS_GROUP_EXPERT_DP;
    snprintf(name, sizeof name, "e%u.%.3s.bias", (unsigned)x, which);
    if (bias && param(blk, d, name, 1, cols, err))
      return VS_EINPUT;
    if (bias)
      blk->params[blk->n_params - 1].shard_group = VS_GROUP_EXPERT_DP;
  }
  return 0;
}

/* A routed expert GEMM over d->slots token slots as the grouped GEMM that
 * runs it: one product per local expert, each on its share of the slots
 * (balanced; a skewed rank's hottest expert sets the slots). */
static void grouped(vs_op_spec *op, const dims *d)
{
  uint64_t local = d->experts / d->ep;
  op->routed = true;
  op->gemm.batch = local;
  op->gemm.m = vs_div_ceil(op->gemm.m, local);
}

/* d as the routed experts see it: split over the etp ranks (the tp
 * group itself when etp = tp), whose tokens differ. */
static dims expert_dims(const dims *d)
{
  dims x = *d;
  if (d->et != d->t) {
    x.t = d->et;
    x.tp_group = VS_GROUP_ETP;
    x.sp = true;
  }
  return x;
}

/* The routed experts' FFN on d->slots token slots, as one grouped GEMM
 * pair: fc1 (gate and up when gated, else up), the activation, fc2; each
 * expert's own weights (and biases unless gated). Saves what the dense
 * MLP's ops save, on the slots: fc1's input (the permuted tokens), the
 * activation's inputs, fc2's input. */
static int routed_experts(vs_block *blk, const dims *dense, bool gated,
                          vs_error *err)
{
  dims x = expert_dims(dense);
  const dims *d = &x;
  uint64_t fe = d->fe / d->t, fc1 = gated ? 2 * fe : fe, n = d->slots;
  vs_op_spec *op;
  if (!(op = vs_block_add_op(blk, "experts_fc1", err)))
    return VS_EINPUT;
  as_matmul(op, n, d->h, fc1, d->e);
  grouped(op, d);
  /* the etp ranks' slots gathered in forward, kept whole for backward */
  column_comms(op, d, n, d->h, SP_KEEPS_GATHERED);
  if (save_input(blk, op, d->em * n * d->h, d->em_dtype, KEPT_FOR_WEIGHTS,
                 err))
    return VS_EINPUT;
  if (expert_weights(blk, d, "fc1", d->h, fc1, !gated, err))
    return VS_EINPUT;
  if (!(op = vs_block_add_op(blk, gated ? "experts_silu" : "experts_gelu",
                             err)))
    return VS_EINPUT;
  as_elementwise(op, n * fe, d->e, gated ? 4.0 : 8.0);
  op->routed = true;
  if (save_act(blk, op, d->e * n * fe, d->act_dtype, err))
    return VS_EINPUT; /* the gate (SiLU's input), or GeLU's input */
  if (gated) {
    if (!(op = vs_block_add_op(blk, "experts_mul", err)))
      return VS_EINPUT;
    as_elementwise(op, n * fe, d->e, 1.0);
    op->routed = true;
    if (save_act(blk, op, 2 * d->e * n * fe, d->act_dtype, err))
      return VS_EINPUT; /* SiLU(gate) and up */
  }
  if (!(op = vs_block_add_op(blk, "experts_fc2", err)))
    return VS_EINPUT;
  as_matmul(op, n, fe, d->h, d->e);
  grouped(op, d);
  row_comms(op, d, n); /* partial sums reduce-scattered to arrived slots */
  /* with tp they are un-sorted into a new buffer first (combine_preprocess) */
  if (d->t > 1)
    op->fwd_temp_bytes += d->e * n * d->h;
  if (save_input(blk, op, d->em * n * fe, d->em_dtype, KEPT_FOR_WEIGHTS,
                 err))
    return VS_EINPUT;
  return expert_weights(blk, d, "fc2", fe, d->h, !gated, err);
}

/* The shared experts (DeepSeek, Qwen-MoE): one dense MLP of their total
 * width d->fs on every token, reading the norm output the router keeps. */
static int shared_experts(vs_block *blk, const dims *d, bool gated,
                          vs_error *err)
{
  uint64_t t = d->tokens, fs = d->fs / d->t, fc1 = gated ? 2 * fs : fs;
  vs_op_spec *op;
  if (d->fs == 0)
    return 0;
  /* a tensor-parallel MLP (Megatron-LM's SharedExpertMLP) */
  if (!(op = vs_block_add_op(blk, "shared_fc1", err)))
    return VS_EINPUT;
  as_matmul(op, t, d->h, fc1, d->e);
  column_comms(op, d, t, d->h, SP_REGATHER);
  /* under fp8 its own FP8 copy of the norm output the router keeps */
  if (d->em != d->e && save_input(blk, op, d->em * d->tok_rep * d->h,
                                  d->em_dtype, KEPT_FOR_WEIGHTS, err))
    return VS_EINPUT;
  if (param(blk, d, "shared.fc1", d->h, fc1, err) ||
      (!gated && param(blk, d, "shared.fc1.bias", 1, fs, err)))
    return VS_EINPUT;
  if (!(op = vs_block_add_op(blk, gated ? "shared_silu" : "shared_gelu", err)))
    return VS_EINPUT;
  as_elementwise(op, t * fs, d->e, gated ? 4.0 : 8.0);
  if (save_act(blk, op, (gated ? 3 : 1) * d->e * t * fs, d->act_dtype, err))
    return VS_EINPUT; /* gate, SiLU(gate) and up; or GeLU's input */
  if (!(op = vs_block_add_op(blk, "shared_fc2", err)))
    return VS_EINPUT;
  as_matmul(op, t, fs, d->h, d->e);
  row_comms(op, d, t);
  if (save_input(blk, op, d->em * t * fs, d->em_dtype, KEPT_FOR_WEIGHTS,
                 err) ||
      param(blk, d, "shared.fc2", fs, d->h, err) ||
      (!gated && param(blk, d, "shared.fc2.bias", 1, d->h, err)))
    return VS_EINPUT;
  return 0;
}

/* An all-to-all over the expert-parallel group (Megatron-LM's alltoall
 * token dispatcher), of the rank's `bytes`. */
static void ep_comm(vs_comm *c, uint64_t bytes)
{
  c->kind = VS_COLL_ALL_TO_ALL;
  c->group = VS_GROUP_EP;
  c->bytes = bytes;
}

/* An MoE MLP (Megatron-LM's MoELayer with its TopKRouter and the
 * token dispatcher's permute/unpermute, on one rank): the router's linear
 * (h x E, replicated) saves the norm output (which the shared experts
 * read too); its fp32 softmax keeps its output (T x E) and top-k its
 * int64 indices (T x k); the dispatch permutes the tokens into the
 * experts' slots (keeping the int64 sorted indices for the backward's
 * un-permute) and, with ep > 1, sends each copy to its expert's rank
 * (all-to-all); the routed experts run on the slots the rank receives;
 * the combine brings their outputs back, scales each by its routing
 * probability (keeping the outputs and the fp32 probabilities) and sums
 * them per token. The
 * auxiliary load-balancing loss keeps per-expert figures (E floats): not
 * counted. */
static int moe_mlp(vs_block *blk, const dims *d, bool gated, vs_error *err)
{
  uint64_t t = d->tok_rep, n = d->arrived;
  /* each all-to-all lasts as long as the larger of what the rank sends
   * and receives (the hot rank receives more than it sends) */
  uint64_t moved = d->e * (d->sent > n ? d->sent : n) * d->h;
  vs_op_spec *op;
  /* the router is not a Transformer Engine module: its input stays in
   * the activations' dtype under fp8 (and no FP8 copy of its weight) */
  if (!(op = vs_block_add_op(blk, "router", err)))
    return VS_EINPUT;
  as_matmul(op, t, d->h, d->experts, d->e);
  if (save_input(blk, op, d->e * t * d->h, d->act_dtype,
                 d->fs && d->em == d->e ? KEPT_BY_ANOTHER : KEPT_FOR_WEIGHTS,
                 err) ||
      param_uncopied(blk, d, "router.weight", d->h, d->experts, err))
    return VS_EINPUT;
  if (!(op = vs_block_add_op(blk, "router_topk", err)))
    return VS_EINPUT;
  as_elementwise(op, t * d->experts, 4, 6.0);
  if (save_act(blk, op, 4 * t * d->experts, VS_DTYPE_FP32, err) ||
      save_act(blk, op, 8 * t * d->topk, VS_DTYPE_INT64, err))
    return VS_EINPUT;
  if (!(op = vs_block_add_op(blk, "moe_dispatch", err)))
    return VS_EINPUT;
  op->fwd_bytes = (double)(d->e * (t + d->sent) * d->h);
  op->bwd_bytes = op->fwd_bytes;
  op->bwd_temp_bytes = d->e * t * d->h;
  if (d->ep > 1) { /* the permuted copies go to their experts' ranks,
                      and what arrives is sorted by local expert into a
                      new buffer (sort_chunks_by_idxs) */
    op->fwd_temp_bytes = moved + d->e * n * d->h;
    ep_comm(&op->fwd_after, moved);
    ep_comm(&op->bwd_before, moved);
  }
  /* with etp what arrived is gathered over etp before the sort
   * (Megatron-LM's dispatch_postprocess): the gathered, unsorted slots
   * beside it */
  if (d->et > 1)
    op->fwd_temp_bytes += d->e * d->slots * d->h;
  if (save_act(blk, op, 8 * d->sent, VS_DTYPE_INT64, err) ||
      routed_experts(blk, d, gated, err))
    return VS_EINPUT;
  if (!(op = vs_block_add_op(blk, "moe_combine", err)))
    return VS_EINPUT;
  as_elementwise(op, d->sent * d->h, d->e, 2.0);
  if (d->ep > 1) { /* the experts' outputs go back to their tokens' ranks */
    op->fwd_temp_bytes = d->e * n * d->h;
    ep_comm(&op->fwd_before, moved);
    ep_comm(&op->bwd_after, moved);
  }
  if (save_act(blk, op, d->e * d->sent * d->h, d->act_dtype, err) ||
      save_act(blk, op, 4 * d->sent, VS_DTYPE_FP32, err) ||
      shared_experts(blk, d, gated, err))
    return VS_EINPUT;
  return dropout(blk, d, "mlp_dropout", d->tok_rep * d->h, d->e, false, err);
}

/* torchtitan's op-level selective checkpointing (checkpointing = ops;
 * shared/reference/frameworks.md 4.1-4.2, torchtitan 9dec370): in a
 * Llama block the matmuls run wq 1, wk 2, wv 3, wo 4, w1 5, w3 6, w2 7 and
 * the odd ones' outputs are saved, with the SDPA output and its fp32
 * log-sum-exp; everything else is recomputed. The block keeps its input
 * and those outputs, 2T(4h + h_kv + f) + 4bas at 16 bits; its recompute
 * re-runs wk (of the fused qkv), wo, w3 (of the fused gate/up) and the
 * element-wise ops, not flash attention, wq, wv, w1 or w2. (Validated
 * conditions: llama, flash, tp = 1; workload.c refuses the rest.) */
static void op_level_checkpointing(vs_block *blk, const dims *d)
{
  uint64_t hkv = d->kv * d->d;
  blk->ckpt_bytes = d->e * d->tokens * (4 * d->h + hkv + d->f) +
                    4 * d->b * d->a * d->s;
  for (uint32_t i = 0; i < blk->n_ops; i++) {
    vs_op_spec *op = &blk->ops[i];
    if (strcmp(op->name, "qkv_proj") == 0)
      op->recompute_share = (double)hkv / (double)(d->h + 2 * hkv); /* wk */
    else if (strcmp(op->name, "mlp_gate_up") == 0)
      op->recompute_share = 0.5; /* w3 */
    else if (strcmp(op->name, "flash_attn") == 0 ||
             strcmp(op->name, "mlp_down") == 0)
      op->recompute_share = 0.0;
  }
}

/* A layer's MLP: dense, or a mixture of experts. */
typedef enum { MLP_DENSE, MLP_MOE } mlp_kind;

static int build_layer(vs_block *blk, const vs_workload *wl, const dims *d,
                       mlp_kind mlp, vs_error *err)
{
  bool llama = wl->model.arch == VS_ARCH_LLAMA;
  blk->input_bytes = d->er * d->tok_rep * d->h;
  blk->ckpt_bytes = blk->input_bytes;
  if (norm(blk, d, "norm1", !llama, err) ||
      attention_block(blk, d, !llama, err) ||
      norm(blk, d, "norm2", !llama, err))
    return VS_EINPUT;
  if (mlp == MLP_MOE ? moe_mlp(blk, d, llama, err)
                     : (llama ? swiglu_mlp : gelu_mlp)(blk, d, err))
    return VS_EINPUT;
  if (wl->training.checkpointing == VS_CKPT_OPS)
    op_level_checkpointing(blk, d);
  return 0;
}

/* A lookup of the tokens' rows in the vocabulary-parallel word
 * embeddings: each rank holds vocab / tp rows and the partial rows are
 * summed over tp (reduce-scattered with sp); the lookup gives the
 * weights' dtype, fp32 under autocast. Adds no parameter. */
static vs_op_spec *embedding_lookup(vs_block *blk, const dims *d,
                                    const char *name, vs_error *err)
{
  vs_op_spec *op = vs_block_add_op(blk, name, err);
  if (!op)
    return NULL;
  as_elementwise(op, d->tokens * d->h, d->er, 1.0);
  op->bwd_temp_bytes = d->er * d->tokens * d->h;
  comm(&op->fwd_after, d, d->sp ? VS_COLL_REDUCE_SCATTER : VS_COLL_ALL_REDUCE,
       d->e * d->tokens * d->h);
  return op;
}

/* Input batch and embeddings. Token ids and labels are int64 (8 bytes);
 * BERT also carries token types and an attention mask. */
static int build_embed(vs_block *blk, const vs_workload *wl, const dims *d,
                       vs_error *err)
{
  vs_arch arch = (vs_arch)wl->model.arch;
  vs_op_spec *op = vs_block_add_op(blk, "input_batch", err);
  if (!op)
    return VS_EINPUT;
  if (save_act(blk, op, (arch == VS_ARCH_BERT ? 4u : 2u) * 8u * d->tokens, VS_DTYPE_INT64, err))
    return VS_EINPUT;
  op->fwd_bytes = (double)(16 * d->tokens);

  if (!embedding_lookup(blk, d, "embedding", err) ||
      param(blk, d, "word_embeddings", d->vocab / d->t, d->h, err))
    return VS_EINPUT;
  if (arch != VS_ARCH_LLAMA &&
      param(blk, d, "position_embeddings", d->skv, d->h, err))
    return VS_EINPUT;
  if (arch == VS_ARCH_BERT) {
    if (param(blk, d, "token_type_embeddings", 2, d->h, err) ||
        norm(blk, d, "embed_norm", true, err))
      return VS_EINPUT;
  }
  return dropout(blk, d, "embed_dropout", d->tok_rep * d->h, d->er, false,
                 err);
}

/* How the loss treats the logits, from its source:
 * - LOSS_ATEN, PyTorch's F.cross_entropy on logits.float(): the logits
 *   and their fp32 copy (none for fp32 logits) transient in forward, a
 *   saved fp32 log-softmax, and in backward two fp32 gradients together:
 *   F.cross_entropy is log_softmax then nll_loss (aten
 *   cross_entropy_loss), nll_loss's backward fills a dense zeroed
 *   gradient of the log-probabilities (LossNLL.cpp, grad_input.zero_())
 *   and log_softmax's backward writes a new one of the logits
 *   (log_softmax_backward_data, empty_like) while that and the saved
 *   log-softmax are held.
 * - LOSS_INPLACE, Megatron-LM's vocab-parallel cross entropy
 *   (megatron/core/tensor_parallel/cross_entropy.py): logits.float(), then
 *   max subtracted, exp and the division in place, that buffer saved as
 *   the softmax, the gradient computed in it.
 * - LOSS_PARALLEL, torchtitan with tp > 1 (loss_parallel on by default;
 *   torch/distributed/tensor/parallel/loss.py): _log_softmax holds the
 *   fp32 logits, the max-shifted copy and its exp together (one fp32 copy
 *   more than aten in forward), and the fused
 *   _nll_loss_and_log_softmax_backward holds a zeroed gradient, exp of the
 *   saved log-softmax and their sum (one more in backward).
 * - LOSS_FUSED ([training] fused_cross_entropy: Liger Kernel's
 *   LigerCrossEntropy) computes the logits' gradient during forward, row
 *   by row in fp32 registers, into the 16-bit logits' own buffer, which
 *   the output layer's backward then reads: no fp32 copy, nothing saved
 *   beside the logits. */
typedef enum { LOSS_ATEN, LOSS_INPLACE, LOSS_PARALLEL, LOSS_FUSED } loss_kind;

static loss_kind loss_of(const vs_workload *wl)
{
  if (wl->training.fused_cross_entropy)
    return LOSS_FUSED;
  if (wl->training.framework == VS_FW_MEGATRON)
    return LOSS_INPLACE;
  if (wl->training.framework == VS_FW_FSDP2 && wl->parallel.tp > 1)
    return LOSS_PARALLEL;
  return LOSS_ATEN;
}

/* Whether the 16-bit logits stay allocated until the output layer's
 * backward. The fused loss leaves their gradient in them. A pipeline
 * schedule whose last stage returns the logits holds them until that
 * micro-batch's backward: torch.distributed.pipelining (FSDP2, stage.py
 * forward_one_chunk keeps the output in fwd_cache) and DeepSpeed's
 * PipelineEngine (pipe_buffers['outputs']). Elsewhere they go before
 * backward: torchtitan's train.py deletes them, the Hugging Face
 * Trainer's compute_loss returns the loss alone, Megatron-LM's last
 * stage returns the loss. */
static bool logits_kept(const vs_workload *wl)
{
  vs_framework fw = (vs_framework)wl->training.framework;
  return wl->training.fused_cross_entropy ||
         (wl->parallel.pp > 1 && (fw == VS_FW_FSDP2 || fw == VS_FW_DEEPSPEED));
}

/* The loss over `logits` elements (see loss_of). Bytes per logit: c for
 * logits.float()'s copy (0 when they are fp32 already, as it then returns
 * them), the saved fp32 log-softmax or softmax, and the forward's and
 * backward's temporaries beside it; logits kept by the output layer
 * (logits_kept) are not the loss's. */
static int cross_entropy(vs_block *blk, const vs_workload *wl, const dims *d,
                         uint64_t logits, const char *name, vs_error *err)
{
  vs_op_spec *op = vs_block_add_op(blk, name, err);
  loss_kind kind = loss_of(wl);
  uint64_t c = d->act_dtype == VS_DTYPE_FP32 ? 0 : 4;
  uint64_t own = logits_kept(wl) ? 0 : d->e;
  if (!op)
    return VS_EINPUT;
  if (kind == LOSS_FUSED) {
    as_elementwise(op, logits, d->e, 6.0);
    op->bwd_flops = (double)logits; /* the gradient scaled in place */
    op->bwd_bytes = 2.0 * (double)(d->e * logits);
    op->bwd_temp_bytes = 0;
    return 0;
  }
  as_elementwise(op, logits, 4, 6.0);
  switch (kind) {
  case LOSS_INPLACE: /* 16-bit logits until cast; fp32 ones are the buffer */
    op->fwd_temp_bytes = (c ? own : 0) * logits;
    op->bwd_temp_bytes = 0;
    break;
  case LOSS_PARALLEL: /* the copy, shifted and exp; zeros, exp, sum */
    op->fwd_temp_bytes = (own + c + 4) * logits;
    op->bwd_temp_bytes = 12 * logits;
    break;
  default: /* the copy; nll_loss's and log_softmax's gradients, each a
              * tensor of its own */
    op->fwd_temp_bytes = (own + c) * logits;
    op->fwd_temp_first = own && c ? own * logits : 0;
    op->bwd_temp_bytes = 8 * logits;
    op->bwd_temp_first = 4 * logits;
    break;
  }
  if (vs_block_save(blk, op,
                    (vs_saved){.bytes = 4 * logits, .dtype = VS_DTYPE_FP32,
                               .category = VS_CAT_TEMP},
                    err))
    return VS_EINPUT; /* fp32 softmax (in place) or log-softmax */
  return 0;
}

/* Whether the head holds an output weight of its own: untied, or tied
 * across a pipeline (the last stage keeps a copy, Megatron-LM). */
static bool own_head_weight(const vs_workload *wl)
{
  return !wl->model.tied_embeddings || wl->parallel.pp > 1;
}

/* The output layer over `name`'s tokens: logits = hidden @ W^T, tokens x
 * vocab / tp. Its input serves the output weight's gradient (the head's
 * own, or the embedding's when tied within one stage); the logits are
 * the loss's forward temporary (cross_entropy) unless kept to this
 * layer's backward (logits_kept). Adds no parameter. */
static vs_op_spec *output_layer(vs_block *blk, const vs_workload *wl,
                                const dims *d, const char *name,
                                vs_error *err)
{
  uint64_t logits = d->tokens * (d->vocab / d->t);
  vs_op_spec *op = vs_block_add_op(blk, name, err);
  if (!op)
    return NULL;
  as_matmul(op, d->tokens, d->h, d->vocab / d->t, d->e);
  if (save_input(blk, op, d->em * d->tok_rep * d->h, d->em_dtype,
                 KEPT_FOR_WEIGHTS, err))
    return NULL;
  if (logits_kept(wl) &&
      vs_block_save(blk, op,
                    (vs_saved){.bytes = d->e * logits, .dtype = d->act_dtype,
                               .category = VS_CAT_TEMP},
                    err))
    return NULL; /* logits, kept (logits_kept) */
  if (d->sp) {
    comm(&op->fwd_before, d, VS_COLL_ALL_GATHER, d->e * d->tokens * d->h);
    comm(&op->bwd_after, d, VS_COLL_REDUCE_SCATTER, d->e * d->tokens * d->h);
  } else {
    comm(&op->bwd_after, d, VS_COLL_ALL_REDUCE, d->e * d->tokens * d->h);
  }
  /* its input's gradient, and the logits' (a fused loss left it in the
   * logits' own buffer) */
  op->bwd_temp_bytes = d->e * d->tokens * d->h +
                       (wl->training.fused_cross_entropy ? 0 : d->e * logits);
  autocast_input(op, d, 1, d->tok_rep * d->h);
  return op;
}

/* Under autocast the output layer's backward runs as three autograd
 * nodes, each freeing what it received before the next starts, and the
 * GEMM's freeing what it saved (the input's and the weight's 16-bit
 * copies) once it is done (the engine runs a node's successors after it,
 * the later-recorded cast first): the GEMM's, holding the logits'
 * gradient while it makes the input's and the weight's in 16 bits; the
 * weight cast's (ToCopyBackward), casting that weight gradient to fp32
 * for .grad (2 + 4 B a weight); the input cast's, casting the input's
 * gradient to fp32 for the residual stream. The input's 16-bit gradient
 * is held through all three. The op (block instance blk's op k) holds
 * the largest moment, not their sum; its saved tensors, which vsim frees
 * as the op ends, are gone for the two casts. weight_elems: the head's
 * weight (vocab x hidden on this rank). */
static void autocast_head_backward(vs_block *blk, uint32_t k,
                                   const vs_workload *wl, const dims *d,
                                   uint64_t weight_elems)
{
  vs_op_spec *op = &blk->ops[k];
  uint64_t input = d->e * d->tokens * d->h, saved = 0, casts;
  uint64_t logits = wl->training.fused_cross_entropy
                        ? 0
                        : d->e * d->tokens * (d->vocab / d->t);
  uint64_t gemm = input + logits + 2 * weight_elems;
  uint64_t weight_cast = input + 6 * weight_elems;
  uint64_t input_cast = input + d->er * d->tok_rep * d->h;
  if (!d->amp || d->copy_dtype == VS_DTYPE_N)
    return;
  for (uint32_t s = op->first_saved; s < op->first_saved + op->n_saved; s++)
    saved += blk->saved[s].bytes;
  casts = weight_cast > input_cast ? weight_cast : input_cast;
  casts = casts > saved ? casts - saved : 0;
  op->bwd_temp_bytes = gemm > casts ? gemm : casts;
}

/* Whether the head keeps a copy of the word embeddings for the
 * multi-token prediction's lookups: with a pipeline, where the output
 * layer's weight is not already one (Megatron-LM builds the embedding on
 * the MTP stage too and all-reduces its gradient with the first stage's,
 * like a tied output layer's). */
static bool mtp_embedding_copy(const vs_workload *wl)
{
  return wl->model.mtp_layers > 0 && wl->parallel.pp > 1 &&
         !wl->model.tied_embeddings;
}

/* The next token's embedding for a multi-token prediction depth: the
 * shared word embeddings looked up again on the ids rolled by one
 * (Megatron-LM's roll_tensor), vocab-parallel as the first stage's. */
static int mtp_embedding(vs_block *blk, const vs_workload *wl, const dims *d,
                         uint64_t depth, vs_error *err)
{
  if (!embedding_lookup(blk, d, "mtp_embedding", err))
    return VS_EINPUT;
  /* one copy serves every depth: the first one's lookup holds it */
  return depth == 0 && mtp_embedding_copy(wl)
             ? param(blk, d, "mtp_embeddings.weight", d->vocab / d->t, d->h,
                     err)
             : 0;
}

/* eh_proj: the two normalized inputs concatenated (2h wide: torch.cat
 * saves nothing) and projected back to h, column-parallel; its sharded
 * output is gathered over tp (gather_from_tensor_model_parallel_region)
 * and, under sp, split by sequence again (whose backward all-gathers the
 * gradient). */
static int mtp_projection(vs_block *blk, const dims *d, vs_error *err)
{
  uint64_t wide = 2 * d->tok_rep * d->h;
  vs_op_spec *op = vs_block_add_op(blk, "mtp_concat", err);
  if (!op)
    return VS_EINPUT;
  as_elementwise(op, wide, d->er, 0.0);
  op->bwd_temp_bytes = 0; /* cat's backward hands out views */
  if (!(op = vs_block_add_op(blk, "mtp_eh_proj", err)))
    return VS_EINPUT;
  as_matmul(op, d->tokens, 2 * d->h, d->h / d->t, d->e);
  autocast_input(op, d, 1, wide);
  if (save_input(blk, op, d->em * wide, d->em_dtype, KEPT_FOR_WEIGHTS, err))
    return VS_EINPUT;
  column_comms(op, d, d->tokens, 2 * d->h, SP_REGATHER);
  if (linear_weight(blk, d, "mtp_eh_proj.weight", d->h / d->t, 2 * d->h,
                    err))
    return VS_EINPUT;
  if (d->t == 1)
    return 0;
  if (!(op = vs_block_add_op(blk, "mtp_eh_gather", err)))
    return VS_EINPUT;
  as_elementwise(op, d->tokens * d->h, d->e, 0.0);
  comm(&op->fwd_before, d, VS_COLL_ALL_GATHER, d->e * d->tokens * d->h);
  if (d->sp) { /* the gathered tensor, until split by sequence */
    op->fwd_temp_bytes = d->e * d->tokens * d->h;
    comm(&op->bwd_before, d, VS_COLL_ALL_GATHER, d->e * d->tokens * d->h);
  }
  return 0;
}

/* A layer like the model's last (DeepSeek-V3's MTP module holds an MoE
 * layer), its ops named "mtp_" + theirs; the head's input and checkpoint
 * sizes stay its own. */
static int mtp_layer(vs_block *blk, const vs_workload *wl, const dims *d,
                     vs_error *err)
{
  uint64_t input = blk->input_bytes, ckpt = blk->ckpt_bytes;
  uint32_t first = blk->n_ops;
  mlp_kind mlp = vs_workload_moe_layer(&wl->model, wl->model.layers - 1)
                     ? MLP_MOE
                     : MLP_DENSE;
  if (build_layer(blk, wl, d, mlp, err))
    return VS_EINPUT;
  for (uint32_t i = first; i < blk->n_ops; i++) {
    /* the layers' names are at most 16 characters: all of each fits */
    char *name = blk->ops[i].name;
    size_t len = strnlen(name, sizeof blk->ops[i].name - 1);
    size_t keep = len + 4 < sizeof blk->ops[i].name ? len
                                                    : sizeof blk->ops[i].name - 5;
    memmove(name + 4, name, keep);
    memcpy(name, "mtp_", 4);
    name[keep + 4] = '\0';
  }
  blk->input_bytes = input;
  blk->ckpt_bytes = ckpt;
  return 0;
}

/* One multi-token prediction depth (DeepSeek-V3, arXiv 2412.19437 Sec.
 * 2.2; Megatron-LM's MultiTokenPredictionLayer and process_mtp_loss in
 * megatron/core/transformer/multi_token_prediction.py): the next token's
 * embedding and the previous depth's hidden states, normalized (enorm,
 * hnorm) and projected to h (eh_proj), a transformer layer, a final norm,
 * then the shared output layer (its weight elsewhere: n_params = 0) and a
 * loss of its own. Its layer is never recomputed here: Megatron-LM
 * recomputes it only under recompute_method = uniform. */
static int mtp_depth(vs_block *blk, const vs_workload *wl, const dims *d,
                     uint64_t depth, vs_error *err)
{
  bool bias = wl->model.arch != VS_ARCH_LLAMA;
  if (mtp_embedding(blk, wl, d, depth, err) ||
      norm(blk, d, "mtp_enorm", bias, err) ||
      norm(blk, d, "mtp_hnorm", bias, err) || mtp_projection(blk, d, err) ||
      mtp_layer(blk, wl, d, err) ||
      norm(blk, d, "mtp_final_norm", bias, err) ||
      !output_layer(blk, wl, d, "mtp_lm_head", err))
    return VS_EINPUT;
  return cross_entropy(blk, wl, d, d->tokens * (d->vocab / d->t),
                       "mtp_cross_entropy", err);
}

/* Final norm, the multi-token prediction depths (which Megatron-LM runs
 * before the output layer: process_mtp_loss), output layer and loss. The
 * logits (compute dtype) and the fp32 log-probabilities the cross entropy
 * keeps are `temp`: they are the loss buffers, often the largest spike of
 * the step. */
static int build_head(vs_block *blk, const vs_workload *wl, const dims *d,
                      vs_error *err)
{
  vs_arch arch = (vs_arch)wl->model.arch;
  uint64_t v = d->vocab / d->t;
  uint64_t logits = d->tokens * v;
  vs_op_spec *op;
  uint32_t head;

  if (arch == VS_ARCH_BERT) { /* MLM transform: dense, GeLU, LayerNorm */
    if (!(op = vs_block_add_op(blk, "mlm_dense", err)))
      return VS_EINPUT;
    as_matmul(op, d->tokens, d->h, d->h, d->e);
    autocast_input(op, d, 1, d->tokens * d->h);
    if (save_input(blk, op, d->e * d->tokens * d->h, d->act_dtype,
                   KEPT_FOR_WEIGHTS, err))
      return VS_EINPUT;
    if (param(blk, d, "mlm_dense.weight", d->h, d->h, err) ||
        param(blk, d, "mlm_dense.bias", 1, d->h, err))
      return VS_EINPUT;
    if (!(op = vs_block_add_op(blk, "mlm_gelu", err)))
      return VS_EINPUT;
    as_elementwise(op, d->tokens * d->h, d->e, 8.0);
    if (save_act(blk, op, d->e * d->tokens * d->h, d->act_dtype, err))
      return VS_EINPUT;
  }
  if (norm(blk, d, "final_norm", arch != VS_ARCH_LLAMA, err))
    return VS_EINPUT;
  for (uint64_t k = 0; k < wl->model.mtp_layers; k++)
    if (mtp_depth(blk, wl, d, k, err))
      return VS_EINPUT;

  if (!output_layer(blk, wl, d, "lm_head", err))
    return VS_EINPUT;
  head = blk->n_ops - 1;
  /* With tied embeddings and pp > 1 the last stage keeps its own copy of
   * the word embeddings (Megatron-LM), kept equal by an all-reduce. */
  if (own_head_weight(wl) && param(blk, d, "lm_head.weight", v, d->h, err))
    return VS_EINPUT;
  /* tied on one stage: autocast casts the embedding's weight here, at its
   * first GEMM */
  if (!own_head_weight(wl) && d->amp &&
      weight_copy(blk, d, v, d->h, d->param_dtype, err))
    return VS_EINPUT;
  if (own_head_weight(wl) && wl->model.tied_embeddings && d->frozen_prefix)
    blk->params[blk->n_params - 1].trainable = false; /* the frozen
                                                         embedding's copy */
  autocast_head_backward(blk, head, wl, d, v * d->h);
  if (arch == VS_ARCH_BERT && param(blk, d, "mlm_bias", 1, v, err))
    return VS_EINPUT;

  return cross_entropy(blk, wl, d, logits, "cross_entropy", err);
}

/* ------------------------------------------------------------------------
 * Whole model
 * ------------------------------------------------------------------------ */

static uint64_t elem_bytes(int precision)
{
  return precision == VS_PREC_FP32 ? 4 : 2;
}

/* How many linears read the norm output before the attention (qkv) or the
 * MLP (!qkv), each saving its own 16-bit cast of it under autocast
 * (frameworks.md 1.2-1.3): Hugging Face's BERT and Llama have separate
 * query, key and value (and Llama gate and up) linears; GPT-2's c_attn
 * and every arch's single up projection are one. Without autocast they
 * share the one tensor. */
static uint64_t casts_of(const vs_workload *wl, bool qkv)
{
  int arch = wl->model.arch;
  if (!vs_precision_autocast(wl->training.precision))
    return 1;
  if (qkv)
    return arch == VS_ARCH_GPT ? 1 : 3;
  return arch == VS_ARCH_LLAMA ? 2 : 1;
}

/* Parameters of an FFN of width f: gated (Llama: gate, up, down) or
 * GeLU with biases. */
static uint64_t ffn_params(const vs_model_conf *m, uint64_t f)
{
  uint64_t h = m->hidden;
  return m->arch == VS_ARCH_LLAMA ? 3 * h * f : 2 * h * f + f + h;
}

/* Parameters of one layer's MLP: dense, or MoE (the router, the routed
 * experts: all of them, or the k a token uses when `active`, and the
 * shared ones). */
static uint64_t mlp_params(const vs_model_conf *m, bool moe, bool active)
{
  if (!moe)
    return ffn_params(m, m->ffn_hidden);
  return m->hidden * m->experts +
         (active ? m->experts_per_token : m->experts) *
             ffn_params(m, m->expert_ffn_hidden) +
         (m->shared_experts
              ? ffn_params(m, m->shared_experts * m->shared_expert_ffn_hidden)
              : 0);
}

/* Parameters of a multi-head latent attention block (attention_mla): the
 * query's down and up projections and latent norm (or one projection),
 * the key-value down projection (with the shared rotary key part), its
 * latent norm and up projection, the output projection. */
static uint64_t mla_params(const vs_model_conf *m)
{
  uint64_t h = m->hidden, a = m->heads, dqk = m->qk_head_dim +
                                              m->qk_rope_head_dim;
  uint64_t q = m->q_lora_rank ? h * m->q_lora_rank + m->q_lora_rank +
                                    m->q_lora_rank * a * dqk
                              : h * a * dqk;
  return q + h * (m->kv_lora_rank + m->qk_rope_head_dim) + m->kv_lora_rank +
         m->kv_lora_rank * a * (m->qk_head_dim + m->v_head_dim) +
         a * m->v_head_dim * h;
}

/* Parameters of one norm: a scale, and a bias but in llama's RMSNorm. */
static uint64_t norm_params(const vs_model_conf *m)
{
  return m->arch == VS_ARCH_LLAMA ? m->hidden : 2 * m->hidden;
}

/* Parameters of layer l (0-based; `active`: those one token uses). */
static uint64_t layer_params(const vs_model_conf *m, uint64_t l, bool active)
{
  uint64_t h = m->hidden;
  uint64_t kvd = m->kv_heads * (h / m->heads);
  uint64_t attn;
  if (m->arch == VS_ARCH_LLAMA)
    attn = m->kv_lora_rank ? mla_params(m) : 2 * h * h + 2 * h * kvd;
  else
    attn = h * (h + 2 * kvd) + (h + 2 * kvd) + h * h + h;
  return attn + 2 * norm_params(m) +
         mlp_params(m, vs_workload_moe_layer(m, l), active);
}

/* The embedding's parameters: the token table, GPT's and BERT's learned
 * positions, BERT's token types and LayerNorm. *lookups gets those a token
 * only looks up, never multiplies: all the tables but the token table
 * when the output layer shares it. Vendors differ on whether a token's
 * active parameters count them: DeepSeek's do not (DeepSeek-V3's
 * README_WEIGHTS.md: "36.6B (including 0.9B for the output Head)"),
 * Mistral's and Qwen's do (Mixtral's 12.9 B, Qwen1.5-MoE's 2.7 B). */
static uint64_t embedding_params(const vs_model_conf *m, uint64_t *lookups)
{
  uint64_t h = m->hidden, tokens = m->vocab * h;
  uint64_t positions = m->arch == VS_ARCH_LLAMA ? 0 : m->seq_len * h;
  uint64_t types = m->arch == VS_ARCH_BERT ? 2 * h : 0;
  uint64_t norm = m->arch == VS_ARCH_BERT ? 2 * h : 0;
  *lookups = (m->tied_embeddings ? 0 : tokens) + positions + types;
  return tokens + positions + types + norm;
}

/* Parameters of the whole model (`active`: those one token uses): what
 * one tp=1 build counts, with the real (unpadded) vocabulary. The
 * multi-token prediction module is apart (mtp_params). */
static uint64_t whole_model_params(const vs_workload *wl, bool active)
{
  const vs_model_conf *m = &wl->model;
  uint64_t h = m->hidden, lookups;
  uint64_t embed = embedding_params(m, &lookups), head, total = 0;

  if (m->arch == VS_ARCH_LLAMA) {
    head = h;
  } else {
    head = 2 * h;
    if (m->arch == VS_ARCH_BERT)
      head += h * h + h + m->vocab;
  }
  if (!m->tied_embeddings)
    head += m->vocab * h;
  for (uint64_t l = 0; l < m->layers; l++)
    total += layer_params(m, l, active);
  return total + embed + head;
}

/* Parameters of the multi-token prediction depths, which share the
 * model's embedding and output layer: each a layer like the last one,
 * eh_proj (2h x h, no bias) and three norms (enorm, hnorm and the final
 * one; DeepSeek-V3's released MTP weights, model.layers.61). */
static uint64_t mtp_params(const vs_workload *wl)
{
  const vs_model_conf *m = &wl->model;
  return m->mtp_layers * (layer_params(m, m->layers - 1, false) +
                          2 * m->hidden * m->hidden + 3 * norm_params(m));
}

/* The byte counts below are 64-bit integers; refuses shapes whose largest
 * tensors or totals (estimated in floating point first) would not fit. */
static int check_size(const vs_workload *wl, vs_error *err)
{
  const vs_model_conf *mc = &wl->model;
  double s = (double)mc->seq_len, b = (double)wl->training.micro_batch;
  double h = (double)mc->hidden, f = (double)mc->ffn_hidden;
  double a = (double)mc->heads, v = (double)mc->vocab, l = (double)mc->layers;
  double biggest = 4.0 * s * b * v;                        /* fp32 logits */
  /* eager attention keeps s x s scores per head; flash keeps none */
  double scores = wl->training.attention == VS_ATTN_EAGER ? 5.0 * a * s : 0.0;
  double layer = 4.0 * s * b * (40.0 * h + 8.0 * f + scores);
  double params = 20.0 * (l * (4.0 * h * h + 3.0 * h * f) + 2.0 * v * h);
  /* a mixture of experts: every expert's weights; the slots (k a token,
   * or E x capacity, at most E a token) carry its tensors; latent
   * attention's projections and heads */
  double e = (double)mc->experts, fe = (double)mc->expert_ffn_hidden;
  double hd = (double)(mc->qk_head_dim + mc->qk_rope_head_dim + mc->v_head_dim);
  layer += 4.0 * s * b * (e * (4.0 * h + 8.0 * fe) + 3.0 * a * hd);
  params += 20.0 * l *
            (e * 3.0 * h * fe +
             3.0 * h * (double)mc->shared_experts *
                 (double)mc->shared_expert_ffn_hidden +
             a * hd * ((double)mc->q_lora_rank + (double)mc->kv_lora_rank + h));
  if (biggest > 1e18 || layer * l > 1e18 || params > 1e18)
    return vs_error_set(err, VS_EINPUT,
                        "%s: the model's tensors (about %.3g bytes of "
                        "activations, %.3g bytes of model states) are too large "
                        "to simulate",
                        wl->origins.file, layer * l, params);
  return 0;
}

/* The vs_dtype of a frozen base's linear weights: as the other weights
 * (param_dtype), or a format of its own. */
static uint8_t base_dtype(const vs_workload *wl, uint8_t param_dtype)
{
  switch (wl->finetune.base_dtype) {
  case VS_BASE_FP8:
    return VS_DTYPE_FP8_SCALED;
  case VS_BASE_BF16:
    return VS_DTYPE_BF16;
  case VS_BASE_FP16:
    return VS_DTYPE_FP16;
  case VS_BASE_FP32:
    return VS_DTYPE_FP32;
  case VS_BASE_INT8:
    return VS_DTYPE_INT8_ROWWISE;
  case VS_BASE_NF4:
    return VS_DTYPE_NF4;
  default:
    return param_dtype;
  }
}

/* The token slots a rank dispatches for its `tokens` tokens: k per token,
 * dropless; with a capacity factor C each expert gets ceil(C x k x tokens
 * / E) slots of each rank, padded (GShard; Megatron-LM's
 * --moe-expert-capacity-factor with --moe-pad-expert-input-to-capacity),
 * whatever the routing. */
static uint64_t moe_sent(const vs_model_conf *mc, uint64_t tokens)
{
  double cap;
  if (mc->experts == 0)
    return 0;
  if (mc->expert_capacity_factor <= 0.0)
    return mc->experts_per_token * tokens;
  cap = ceil(mc->expert_capacity_factor * (double)mc->experts_per_token *
             (double)tokens / (double)mc->experts);
  return mc->experts * (uint64_t)cap;
}

/* The token slots the routed experts of a rank process (the rank holding
 * the hottest expert, or one of the others: `load`): its E / ep experts
 * receive from the ep ranks of its expert-parallel group. Padded to
 * capacity, each expert its slots of every rank (E x capacity in all).
 * Dropless, the group's kTep copies: the hottest expert gets 1 +
 * routing_skew times its balanced share kTep / E (at most one copy of
 * each of the group's Tep tokens), the other E - 1 share the rest evenly;
 * the hottest expert's rank holds it and E / ep - 1 others, another rank
 * E / ep others. Balanced routing gives every rank kT; without expert
 * parallelism the rank holds every expert, kT whatever the skew. */
static uint64_t moe_slots(const vs_model_conf *mc, uint64_t tokens,
                          uint64_t ep, vs_expert_load load)
{
  double group, hot, rest;
  if (!vs_workload_skew_applies(mc, ep))
    return moe_sent(mc, tokens);
  group = (double)(mc->experts_per_token * tokens * ep);
  hot = (1.0 + mc->routing_skew) * group / (double)mc->experts;
  if (hot > (double)(tokens * ep))
    hot = (double)(tokens * ep);
  rest = (group - hot) / (double)(mc->experts - 1);
  if (load == VS_LOAD_REST)
    return (uint64_t)ceil((double)(mc->experts / ep) * rest);
  return (uint64_t)ceil(hot + (double)(mc->experts / ep - 1) * rest);
}

/* The sizes of one rank's part of a micro-batch: sequence (context
 * parallelism), heads, widths (tensor parallelism), the padded
 * vocabulary, and what kind of layers take them. */
static void size_dims(const vs_workload *wl, dims *d)
{
  const vs_model_conf *mc = &wl->model;
  const vs_parallel_conf *pc = &wl->parallel;
  d->cp = pc->cp;
  d->cp_comm = pc->cp_comm;
  d->s = mc->seq_len / d->cp; /* a load-balanced chunk pair */
  d->skv = mc->seq_len;
  d->b = wl->training.micro_batch;
  d->h = mc->hidden;
  d->a = mc->heads;
  d->kv = mc->kv_heads;
  d->d = mc->hidden / mc->heads;
  d->f = mc->ffn_hidden;
  d->t = pc->tp;
  d->tp_group = VS_GROUP_TP;
  /* Megatron pads the vocabulary to a multiple of
   * make_vocab_size_divisible_by (128 by default there) times tp. */
  d->vocab = vs_div_ceil(mc->vocab, mc->vocab_divisible_by * d->t) *
             mc->vocab_divisible_by * d->t;
  d->tokens = d->s * d->b;
  d->sp = pc->sequence_parallel && d->t > 1;
  d->tok_rep = d->sp ? d->tokens / d->t : d->tokens;
  d->rkv = mc->kv_lora_rank;
  d->rq = mc->q_lora_rank;
  d->dn = mc->qk_head_dim;
  d->dr = mc->qk_rope_head_dim;
  d->dv = mc->v_head_dim;
  d->dropout = mc->dropout > 0.0;
  d->eager = wl->training.attention == VS_ATTN_EAGER;
  d->bert = mc->arch == VS_ARCH_BERT;
  d->causal = mc->arch != VS_ARCH_BERT;
  d->hf_modules = wl->training.framework == VS_FW_HF;
}

/* The dtypes of activations, matmul inputs and weights the precision
 * gives, and autocast's casts. */
static void dtype_dims(const vs_workload *wl, dims *d)
{
  int prec = vs_precision_gemm(wl->training.precision);
  d->e = elem_bytes(prec);
  d->em = prec == VS_PREC_FP8 ? 1 : d->e;
  d->act_dtype = prec == VS_PREC_FP32   ? VS_DTYPE_FP32
                 : prec == VS_PREC_FP16 ? VS_DTYPE_FP16
                                        : VS_DTYPE_BF16;
  d->em_dtype = prec == VS_PREC_FP8 ? VS_DTYPE_FP8 : d->act_dtype;
  d->amp = vs_precision_autocast(wl->training.precision);
  /* fp8 keeps 16-bit weights (elem_bytes), autocast fp32 ones */
  d->param_dtype = d->amp ? VS_DTYPE_FP32 : d->act_dtype;
  d->er = d->amp ? 4 : d->e;
  d->er_dtype = d->amp ? VS_DTYPE_FP32 : d->act_dtype;
  d->qkv_casts = casts_of(wl, true);
  d->up_casts = casts_of(wl, false);
  d->copy_dtype = prec == VS_PREC_FP8 ? VS_DTYPE_FP8
                  : d->amp            ? d->act_dtype
                                      : VS_DTYPE_N;
}

/* A fine-tune's frozen base and adapters (after dtype_dims: the base's
 * format defaults to the weights'). */
static void finetune_dims(const vs_workload *wl, dims *d)
{
  /* with method = frozen the layers built from d are the trained ones;
   * the frozen prefix gets the base's format (build_kinds) */
  d->frozen_base = wl->finetune.method == VS_FT_LORA ||
                   wl->finetune.method == VS_FT_QLORA;
  d->base_dtype = d->frozen_base ? base_dtype(wl, d->param_dtype)
                                 : d->param_dtype;
  d->lora_r = d->frozen_base ? wl->finetune.lora_rank : 0;
  d->lora_targets = wl->finetune.lora_targets;
  d->lora_drop = wl->finetune.lora_dropout > 0.0;
  d->adapter_dtype = wl->finetune.adapter_dtype == VS_ADAPTER_BF16
                         ? VS_DTYPE_BF16
                     : wl->finetune.adapter_dtype == VS_ADAPTER_FP16
                         ? VS_DTYPE_FP16
                         : VS_DTYPE_FP32;
  d->frozen_prefix = wl->finetune.trainable_layers > 0 &&
                     wl->finetune.trainable_layers < wl->model.layers;
}

/* The routed and shared experts and the tokens a rank (of expert load
 * `load`) sends and receives (after size_dims: it routes tok_rep). */
static void moe_dims(const vs_workload *wl, vs_expert_load load, dims *d)
{
  const vs_model_conf *mc = &wl->model;
  d->experts = mc->experts;
  d->topk = mc->experts_per_token;
  d->fe = mc->expert_ffn_hidden;
  d->fs = mc->shared_experts * mc->shared_expert_ffn_hidden;
  d->ep = wl->parallel.ep;
  d->et = vs_workload_etp(&wl->parallel);
  /* with tp (and sp) each rank routes its own tok_rep tokens, and the
   * etp ranks pool what they receive for their experts (Megatron-LM's
   * alltoall dispatcher with expert tensor parallelism) */
  d->sent = moe_sent(mc, d->tok_rep);
  d->arrived = moe_slots(mc, d->tok_rep, d->ep, load);
  d->slots = d->et * d->arrived;
}

/* The shapes one rank (of expert load `load`) works on, from the
 * workload. */
static void make_dims(const vs_workload *wl, vs_expert_load load, dims *d)
{
  size_dims(wl, d);
  dtype_dims(wl, d);
  finetune_dims(wl, d);
  moe_dims(wl, load, d);
}

/* A new, empty kind of the given name and role; NULL on error. */
static vs_block *new_kind(vs_model *m, const char *name, int role,
                          vs_error *err)
{
  size_t cap = m->cap_kinds;
  vs_block *b;
  if (m->n_kinds >= VS_MODEL_KINDS_MAX) {
    vs_error_set(err, VS_EINPUT, "model: more than %d block kinds",
                 VS_MODEL_KINDS_MAX);
    return NULL;
  }
  if (!vs_grow((void **)&m->kinds, &cap, (size_t)m->n_kinds + 1,
               sizeof *m->kinds)) {
    vs_error_set(err, VS_ENOMEM, "out of host memory building the model");
    return NULL;
  }
  m->cap_kinds = (uint32_t)cap;
  b = &m->kinds[m->n_kinds++];
  memset(b, 0, sizeof *b);
  snprintf(b->name, sizeof b->name, "%s", name);
  b->role = (uint8_t)role;
  return b;
}

/* [finetune] trainable_layers: the first layers (all but the last
 * trainable_layers) are a kind of their own, with every weight frozen and
 * no adapter (the embedding before them is frozen too). */
static int frozen_prefix(const vs_workload *wl, const dims *frozen,
                         vs_model *m, vs_error *err)
{
  uint64_t n = wl->model.layers - wl->finetune.trainable_layers;
  vs_block *b = new_kind(m, "dense_frozen", VS_ROLE_LAYER, err);
  uint32_t kind = m->n_kinds - 1;
  if (!b || build_layer(b, wl, frozen, MLP_DENSE, err))
    return err->code ? err->code : VS_EINPUT;
  for (uint64_t l = 0; l < n; l++)
    m->inst_kind[l + 1] = kind;
  return 0;
}

/* The kinds of layers the builder makes: dense (kind 1), MoE (kind 3,
 * after the head, when the model has experts). */
#define DENSE_KIND 1
#define MOE_KIND 3

/* A copy of layer kind `of`, marked not_checkpointed, as *kept (made at
 * its first use; *kept is VS_ALLOC_NONE-like UINT32_MAX before). */
static int kept_copy(vs_model *m, uint32_t of, uint32_t *kept, vs_error *err)
{
  vs_block *b;
  char name[VS_OP_NAME_MAX];
  int rc;
  if (*kept != UINT32_MAX)
    return 0;
  snprintf(name, sizeof name, "%.18s_kept", m->kinds[of].name);
  if ((rc = vs_model_add_kind(m, &m->kinds[of], name, kept, &b, err)))
    return rc;
  b->not_checkpointed = true;
  return 0;
}

/* [training] checkpoint_layers or checkpoint_every: the layers full
 * checkpointing leaves alone are kinds of their own, copies of their
 * dense or MoE kind marked not_checkpointed. */
static int uncheckpointed_layers(const vs_workload *wl, vs_model *m,
                                 vs_error *err)
{
  const vs_training_conf *t = &wl->training;
  uint32_t kept[MOE_KIND + 1] = {UINT32_MAX, UINT32_MAX, UINT32_MAX,
                                 UINT32_MAX};
  bool *ckpt;
  int rc = 0;
  if (t->checkpointing != VS_CKPT_FULL ||
      (t->checkpoint_layers == 0 && t->checkpoint_every == 0))
    return 0;
  if (!(ckpt = malloc((size_t)m->layers * sizeof *ckpt)))
    return vs_error_set(err, VS_ENOMEM, "out of host memory building the model");
  vs_workload_checkpointed_layers(wl, ckpt);
  for (uint64_t l = 0; l < m->layers && rc == 0; l++) {
    uint32_t of = m->inst_kind[l + 1];
    if (ckpt[l])
      continue;
    if ((rc = kept_copy(m, of, &kept[of], err)) == 0)
      m->inst_kind[l + 1] = kept[of];
  }
  free(ckpt);
  return rc;
}

/* The three kinds of a transformer: embedding, dense layer, head; every
 * layer an instance of the dense kind (of an uncheckpointed copy for the
 * layers full checkpointing leaves alone, of a frozen one for the layers
 * before trainable_layers). */
static int build_kinds(const vs_workload *wl, const dims *d, vs_model *m,
                       vs_error *err)
{
  vs_block *embed, *layer, *head;
  size_t n_inst = (size_t)m->layers + 2;
  dims frozen = *d;
  frozen.frozen_base = true; /* no adapters, nothing trains */
  frozen.lora_r = 0;
  frozen.base_dtype = base_dtype(wl, d->param_dtype);
  if (!(embed = new_kind(m, "embedding", VS_ROLE_EMBED, err)) ||
      build_embed(embed, wl, d->frozen_prefix ? &frozen : d, err) ||
      !(layer = new_kind(m, "dense", VS_ROLE_LAYER, err)) ||
      build_layer(layer, wl, d, MLP_DENSE, err) ||
      !(head = new_kind(m, "head", VS_ROLE_HEAD, err)) ||
      build_head(head, wl, d, err))
    return err->code ? err->code : VS_EINPUT;
  if (d->experts && (!(layer = new_kind(m, "moe", VS_ROLE_LAYER, err)) ||
                     build_layer(layer, wl, d, MLP_MOE, err)))
    return err->code ? err->code : VS_EINPUT;
  m->kinds[0].input_bytes = m->kinds[0].ckpt_bytes = 0;
  m->kinds[2].input_bytes = m->kinds[DENSE_KIND].input_bytes;
  m->kinds[2].ckpt_bytes = 0;
  if (!(m->inst_kind = malloc(n_inst * sizeof *m->inst_kind)))
    return vs_error_set(err, VS_ENOMEM, "out of host memory building the model");
  m->inst_kind[0] = 0;
  for (size_t i = 1; i + 1 < n_inst; i++)
    m->inst_kind[i] = vs_workload_moe_layer(&wl->model, i - 1) ? MOE_KIND
                                                               : DENSE_KIND;
  m->inst_kind[n_inst - 1] = 2;
  if (uncheckpointed_layers(wl, m, err))
    return err->code;
  return d->frozen_prefix ? frozen_prefix(wl, &frozen, m, err) : 0;
}

/* The LoRA adapters' parameters in the whole model (with a frozen base,
 * the layers' trainable parameters are their adapters). */
static uint64_t adapter_params(const dims *d, const vs_model *m)
{
  uint64_t n = 0;
  if (!d->frozen_base || d->lora_r == 0)
    return 0;
  for (uint64_t l = 0; l < m->layers; l++) {
    const vs_block *b = &m->kinds[m->inst_kind[l + 1]];
    for (uint32_t i = 0; i < b->n_params; i++)
      n += b->params[i].trainable ? b->params[i].rows * b->params[i].cols : 0;
  }
  return n * d->t;
}

int vs_model_build(const vs_workload *wl, vs_model *m, vs_error *err)
{
  return vs_model_build_loaded(wl, VS_LOAD_HOTTEST, m, err);
}

int vs_model_build_loaded(const vs_workload *wl, vs_expert_load load,
                          vs_model *m, vs_error *err)
{
  dims d;
  int rc;

  memset(m, 0, sizeof *m);
  if (check_size(wl, err))
    return VS_EINPUT;
  make_dims(wl, load, &d);
  m->layers = wl->model.layers;
  m->vocab_padded = d.vocab;
  m->act_elem_bytes = d.e;
  m->param_elem_bytes = vs_dtype_size(d.param_dtype);
  m->causal = d.causal;
  /* model FLOPs count the k T copies a rank's tokens make: not the
   * padding of capacity, nor a skewed rank's surplus */
  m->routed_load = d.slots > d.topk * d.tokens
                       ? (double)d.slots / (double)(d.topk * d.tokens)
                       : 1.0;
  if ((rc = build_kinds(wl, &d, m, err))) {
    vs_model_fini(m);
    return rc;
  }
  m->params_total = whole_model_params(wl, false) + adapter_params(&d, m);
  m->params_mtp = mtp_params(wl);
  m->params_active = whole_model_params(wl, true) + adapter_params(&d, m);
  (void)embedding_params(&wl->model, &m->params_lookup);
  return 0;
}

static void block_fini(vs_block *b)
{
  free(b->ops);
  free(b->params);
  free(b->saved);
  memset(b, 0, sizeof *b);
}

void vs_model_fini(vs_model *m)
{
  for (uint32_t k = 0; k < m->n_kinds; k++)
    block_fini(&m->kinds[k]);
  free(m->kinds);
  free(m->inst_kind);
  memset(m, 0, sizeof *m);
}

const vs_block *vs_model_block(const vs_model *m, size_t inst)
{
  return &m->kinds[m->inst_kind[inst]];
}

const vs_block *vs_model_layer(const vs_model *m, uint64_t l)
{
  return vs_model_block(m, (size_t)l + 1);
}

const vs_block *vs_model_embed(const vs_model *m) { return vs_model_block(m, 0); }

const vs_block *vs_model_head(const vs_model *m)
{
  return vs_model_block(m, (size_t)m->layers + 1);
}

/* dst = a deep copy of src (dst's arrays are new). */
static int block_copy(vs_block *dst, const vs_block *src, vs_error *err)
{
  *dst = *src;
  dst->ops = malloc((src->n_ops ? src->n_ops : 1) * sizeof *dst->ops);
  dst->params = malloc((src->n_params ? src->n_params : 1) * sizeof *dst->params);
  dst->saved = malloc((src->n_saved ? src->n_saved : 1) * sizeof *dst->saved);
  dst->cap_ops = src->n_ops;
  dst->cap_params = src->n_params;
  dst->cap_saved = src->n_saved;
  if (!dst->ops || !dst->params || !dst->saved) {
    block_fini(dst);
    return vs_error_set(err, VS_ENOMEM, "out of host memory building the model");
  }
  memcpy(dst->ops, src->ops, src->n_ops * sizeof *dst->ops);
  memcpy(dst->params, src->params, src->n_params * sizeof *dst->params);
  memcpy(dst->saved, src->saved, src->n_saved * sizeof *dst->saved);
  return 0;
}

int vs_model_add_kind(vs_model *m, const vs_block *src, const char *name,
                      uint32_t *kind, vs_block **out, vs_error *err)
{
  vs_block copy, *b;
  int rc;
  if ((rc = block_copy(&copy, src, err)))
    return rc;
  if (!(b = new_kind(m, name, copy.role, err))) {
    block_fini(&copy);
    return err->code;
  }
  *b = copy;
  snprintf(b->name, sizeof b->name, "%s", name);
  *kind = m->n_kinds - 1;
  *out = b;
  return 0;
}

int vs_model_set_layer_kind(vs_model *m, uint64_t l, uint32_t kind,
                            vs_error *err)
{
  if (l >= m->layers || kind >= m->n_kinds ||
      m->kinds[kind].role != VS_ROLE_LAYER)
    return vs_error_set(err, VS_EINPUT,
                        "model: layer %llu cannot be of kind %u (%llu layers, "
                        "%u kinds; the kind must be a layer)",
                        (unsigned long long)l, kind,
                        (unsigned long long)m->layers, m->n_kinds);
  m->inst_kind[l + 1] = kind;
  return 0;
}

size_t vs_block_freeze(vs_block *b, const char *prefix)
{
  size_t n = 0, len = strlen(prefix);
  for (uint32_t i = 0; i < b->n_params; i++) {
    if (strncmp(b->params[i].name, prefix, len) == 0) {
      b->params[i].trainable = false;
      n++;
    }
  }
  return n;
}

uint32_t vs_model_max_saved(const vs_model *m)
{
  uint32_t most = 0;
  for (uint32_t k = 0; k < m->n_kinds; k++)
    if (m->kinds[k].n_saved > most)
      most = m->kinds[k].n_saved;
  return most;
}

uint32_t vs_model_max_layer_ops(const vs_model *m)
{
  uint32_t most = 0;
  for (uint32_t k = 0; k < m->n_kinds; k++)
    if (m->kinds[k].role == VS_ROLE_LAYER && m->kinds[k].n_ops > most)
      most = m->kinds[k].n_ops;
  return most;
}

uint64_t vs_model_param_count(const vs_model *m) { return m->params_total; }

uint64_t vs_block_saved_bytes(const vs_block *b, int category,
                              bool include_selective)
{
  uint64_t sum = 0;
  for (uint32_t i = 0; i < b->n_saved; i++) {
    const vs_saved *s = &b->saved[i];
    if ((category < 0 || s->category == category) &&
        (include_selective || !s->selective))
      sum += s->bytes;
  }
  return sum;
}

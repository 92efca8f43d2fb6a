/* block.c - the building blocks the model's blocks are made of (see
 * model_int.h): an op and its work (matmul or element-wise), the tensors
 * it saves, weights and their 16-bit or fp8 copies, LoRA adapters, norms,
 * dropouts, and the tensor-parallel linears with their collectives. */
#include "model.h"
#include "model_int.h"

#include "grow.h"

#include <stdio.h>
#include <string.h>

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
    return vs_error_set(err, VS_ENOMEM,
                        "out of host memory building the model");
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
int vs_block_save_act(vs_block *blk, vs_op_spec *op, uint64_t bytes, int dtype,
                      vs_error *err)
{
  return vs_block_save(blk, op,
                       (vs_saved){.bytes = bytes,
                                  .dtype = (uint8_t)dtype,
                                  .category = VS_CAT_ACTIVATIONS},
                       err);
}

/* Whether matmul op quantizes its input: under fp8, an FP8 module does
 * (1 B an element), one outside them (no_fp8) keeps it 16-bit. */
static bool quantizes_input(const vs_dims *d, const vs_op_spec *op)
{
  return d->em != d->e && !op->no_fp8;
}

bool vs_block_fp8_copies(const vs_dims *d)
{
  return d->fp8_lib == VS_FP8_TE || d->torchao_tp;
}

/* A matmul's saved input of `elems` elements: needed only for its weight
 * gradient unless another op keeps the same tensor; the FP8 copy where op
 * quantizes its input and its library saves the copy
 * (vs_block_fp8_copies). */
int vs_block_save_input(vs_block *blk, vs_op_spec *op, const vs_dims *d,
                        uint64_t elems, vs_input_keeper keeper, vs_error *err)
{
  bool fp8 = quantizes_input(d, op) && vs_block_fp8_copies(d);
  /* the 16-bit tensor another op keeps (flash attention's output), which
   * the FP8 copy does not replace */
  if (fp8 && keeper == KEPT_BY_ANOTHER &&
      vs_block_save_act(blk, op, d->e * elems, d->act_dtype, err))
    return err->code;
  if (fp8)
    keeper = KEPT_FOR_WEIGHTS;
  return vs_block_save(blk, op,
                       (vs_saved){.bytes = (fp8 ? d->em : d->e) * elems,
                                  .dtype = fp8 ? d->em_dtype : d->act_dtype,
                                  .category = VS_CAT_ACTIVATIONS,
                                  .wgrad_only = keeper == KEPT_FOR_WEIGHTS},
                       err);
}

int vs_block_save_core(vs_block *blk, vs_op_spec *op, uint64_t bytes, int dtype,
                       vs_error *err)
{
  return vs_block_save(blk, op,
                       (vs_saved){.bytes = bytes,
                                  .dtype = (uint8_t)dtype,
                                  .category = VS_CAT_ACTIVATIONS,
                                  .selective = true},
                       err);
}

/* An s x s attention tensor of `scores` elements of dtype: what
 * selective checkpointing drops (Korthikanti et al. 2022, Sec. 4.1). */
int vs_block_save_scores(vs_block *blk, vs_op_spec *op, uint64_t scores,
                         int dtype, vs_error *err)
{
  return vs_block_save_core(blk, op, vs_dtype_bytes(dtype, scores), dtype, err);
}

/* [m x k] @ [k x n] at e bytes per element: 2mkn FLOPs forward and twice
 * that backward (input and weight gradients). */
void vs_block_as_matmul(vs_op_spec *op, uint64_t m, uint64_t k, uint64_t n,
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
  op->wgrad_flops = op->fwd_flops; /* dW = X^T dY */
  op->wgrad_bytes = op->fwd_bytes;
  op->bwd_temp_bytes = e * m * k; /* gradient of the input */
}

/* A memory-bound op over `elems` elements: reads and writes each once
 * forward, reads two and writes one backward. */
void vs_block_as_elementwise(vs_op_spec *op, uint64_t elems, uint64_t e,
                             double flops_per_elem)
{
  op->fwd_flops = flops_per_elem * (double)elems;
  op->bwd_flops = 2.0 * op->fwd_flops;
  op->fwd_bytes = 2.0 * (double)(e * elems);
  op->bwd_bytes = 3.0 * (double)(e * elems);
  op->bwd_temp_bytes = e * elems;
}

/* Adds `kernels` kernels of their own moving `bytes` to op's pass, and
 * the bytes to the pass's total. */
void vs_block_side(vs_op_spec *op, vs_side_pass pass, double bytes,
                   uint32_t kernels)
{
  vs_side_work *w = pass == SIDE_FWD         ? &op->fwd_side
                    : pass == SIDE_FWD_EAGER ? &op->fwd_eager
                    : pass == SIDE_BWD       ? &op->bwd_side
                                             : &op->wgrad_side;
  w->bytes += bytes;
  w->kernels += kernels;
  if (pass == SIDE_FWD || pass == SIDE_FWD_EAGER) {
    op->fwd_bytes += bytes;
    return;
  }
  op->bwd_bytes += bytes;
  if (pass == SIDE_WGRAD)
    op->wgrad_bytes += bytes;
}

/* A tensor-parallel collective (Megatron's f and g operators; with
 * sequence parallelism all-gather and reduce-scatter replace them), over
 * d's tensor-parallel group. */
void vs_block_comm(vs_comm *c, const vs_dims *d, int kind, uint64_t bytes)
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
static int dequantized_in(const vs_dims *d, int dtype)
{
  if (dtype == VS_DTYPE_NF4 || dtype == VS_DTYPE_NF4_NODQ ||
      (dtype == VS_DTYPE_FP8_SCALED && d->em_dtype != VS_DTYPE_FP8))
    return DEQUANT_FWD | DEQUANT_BWD;
  return dtype == VS_DTYPE_INT8_ROWWISE ? DEQUANT_BWD : 0;
}

/* The elements of op's largest matrix weight before its newest one:
 * of any (pass ANY_PASS), or of those dequantized in pass. */
enum { ANY_PASS = 0 };
static uint64_t largest_earlier_weight(const vs_block *blk,
                                       const vs_op_spec *op, const vs_dims *d,
                                       int pass)
{
  uint64_t largest = 0;
  for (uint32_t i = op->first_param; i + 1 < op->first_param + op->n_params;
       i++) {
    const vs_param_tensor *p = &blk->params[i];
    if (vs_param_matrix(p) && p->rows * p->cols > largest &&
        (pass == ANY_PASS || (dequantized_in(d, p->dtype) & pass)))
      largest = p->rows * p->cols;
  }
  return largest;
}

static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* Eager torchao casts (fp8_lib torchao, kernels = eager) hold fp32
 * intermediates: casting n elements peaks at 9 B an element (x.to(float32)
 * and its product with the scale, then that product, kept in a local,
 * beside its clamp and the FP8 result: float8_training_tensor.py),
 * beside the FP8 operands already cast, which float8_linear.py keeps in
 * locals until the GEMM (forward) or the backward returns. Per module (in
 * input elements, w weights, o output elements): forward max(9 in, in +
 * 9 w); backward, the output gradient's cast, the weight's and its layout
 * copy: max(9 o, o + 9 w, o + 2 w), and for the weight gradient (computed
 * whether or not the weight trains) the second cast of the output
 * gradient beside both FP8 operands of the first GEMM (10 o + w), the
 * input's cast (2 o + w + 9 in) and both layout copies (3 o + w + 2 in).
 * The row-wise recipes scale each backward GEMM's output after it with
 * an fp32 tensor of the output's shape (float8_ops.py
 * addmm_float8_unwrapped): 4 B an input-gradient element beside the
 * gradient, the weight and its copy (o + 2 w + 4 in), and with the
 * weight gradient in FP8 (rowwise) 4 B a weight beside that GEMM's
 * operands (3 o + 5 w + 2 in); rowwise_with_gw_hp runs the weight
 * gradient in 16 bits, casting nothing for it.
 * Over tp ranks (`tp_plan`, torchao_tp) the tensor-parallel plan cast
 * the input and the output's gradient before the linear: its peaks are
 * the weight's cast beside the FP8 gradient (o + 9 w), its copy (o + 2 w)
 * and the weight gradient's layout copies of the gradient and of the
 * saved FP8 input (2 o + w + in). The op's modules run one after another:
 * the largest counts, on top of its own transients. */
static void torchao_scratch_of(const vs_block *blk, const vs_op_spec *op,
                               uint32_t n_params, const vs_dims *d,
                               uint64_t *fwd, uint64_t *bwd)
{
  uint64_t in = op->gemm.batch * op->gemm.m * op->gemm.k;
  bool tp_plan = d->torchao_tp;
  *fwd = *bwd = 0;
  for (uint32_t p = op->first_param; p < op->first_param + n_params; p++) {
    const vs_param_tensor *t = &blk->params[p];
    uint64_t w = t->rows * t->cols, o = op->gemm.batch * op->gemm.m * t->cols;
    uint64_t b;
    if (!vs_param_matrix(t))
      continue;
    b = max_u64(max_u64(tp_plan ? 0 : 9 * o, o + 9 * w), o + 2 * w);
    if (tp_plan)
      b = max_u64(b, 2 * o + w + in);
    else if (d->fp8_recipe != VS_FP8_ROWWISE_GW_HP)
      b = max_u64(max_u64(b, 10 * o + w),
                  max_u64(2 * o + w + 9 * in, 3 * o + w + 2 * in));
    if (d->fp8_recipe != VS_FP8_TENSORWISE)
      b = max_u64(b, o + 2 * w + 4 * in);
    if (d->fp8_recipe == VS_FP8_ROWWISE)
      b = max_u64(b, 3 * o + 5 * w + 2 * in);
    *fwd = max_u64(*fwd, max_u64(tp_plan ? 0 : 9 * in, in + 9 * w));
    *bwd = max_u64(*bwd, b);
  }
}

/* The newest weight of op (its last parameter) raises op's transients by
 * what its eager torchao casts need beyond its earlier modules'. */
static void torchao_scratch(const vs_block *blk, vs_op_spec *op,
                            const vs_dims *d)
{
  uint64_t f0, b0, f1, b1;
  torchao_scratch_of(blk, op, op->n_params - 1, d, &f0, &b0);
  torchao_scratch_of(blk, op, op->n_params, d, &f1, &b1);
  op->fwd_temp_bytes += f1 - f0;
  op->bwd_temp_bytes += b1 - b0;
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
int vs_block_weight_copy(vs_block *blk, const vs_dims *d, uint64_t rows,
                         uint64_t cols, int dtype, vs_error *err)
{
  vs_op_spec *op = blk->n_ops > 0 ? &blk->ops[blk->n_ops - 1] : NULL;
  uint64_t now = rows * cols, before;
  if (d->fp8_lib == VS_FP8_TORCHAO && d->eager_kernels && op &&
      vs_op_fp8_linear(op) && rows > 1 && cols > 1)
    torchao_scratch(blk, op, d);
  if (d->copy_dtype == VS_DTYPE_N || !op || !op->matmul || op->adapter ||
      (d->copy_dtype == VS_DTYPE_FP8 && op->no_fp8) || rows <= 1 ||
      cols <= 1 || dtype == VS_DTYPE_FP8_SCALED)
    return 0;
  if (d->amp) {
    /* the cast, and in backward the gradient's cast to fp32 (2 B read,
     * 4 B written): each a kernel of its own */
    vs_block_side(op, SIDE_FWD, (double)(6 * now), 1);
    vs_block_side(op, SIDE_WGRAD, (double)(6 * now), 1);
    before = largest_earlier_weight(blk, op, d, ANY_PASS);
    if (now > before)
      op->bwd_temp_bytes += 6 * (now - before);
  }
  return vs_block_save(
      blk, op,
      (vs_saved){.bytes = vs_dtype_tensor_bytes(d->copy_dtype, rows, cols),
                 .dtype = d->copy_dtype,
                 .category = VS_CAT_ACTIVATIONS,
                 .weight_copy = d->amp ? VS_COPY_AUTOCAST : VS_COPY_FP8},
      err);
}

/* A parameter of rows x cols on this rank, stored as dtype, for the
 * newest op (if any), which computes its gradient. */
static int param_as(vs_block *blk, const vs_dims *d, const char *name,
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
  /* an FP8 linear's matrix stored in FP8 (vs_dims fp8_params): as
   * Transformer Engine's modules quantize it (recipe.c fp8_weights) */
  if (d->fp8_params && p->trainable && rows > 1 && cols > 1 && blk->n_ops > 0 &&
      vs_op_fp8_linear(&blk->ops[blk->n_ops - 1]))
    p->dtype = VS_DTYPE_FP8_SCALED;
  return vs_block_weight_copy(blk, d, rows, cols, p->dtype, err);
}

/* A parameter in the model's parameter dtype. */
int vs_block_param(vs_block *blk, const vs_dims *d, const char *name,
                   uint64_t rows, uint64_t cols, vs_error *err)
{
  return param_as(blk, d, name, rows, cols, d->param_dtype, err);
}

/* Whether op, a linear, keeps its input for backward whether or not its
 * weights train: bitsandbytes' MatMul8bitLt (autograd/_functions.py, the
 * 0.45 series on) sets ctx.tensors = (CAt, subA, A) whenever
 * any(ctx.needs_input_grad[:2]), so a frozen int8 weight whose input
 * needs a gradient keeps A, the input itself (a reshape, same storage
 * and dtype). CAt, the int8 transpose of the input (kept by every release
 * before 0.45), is None where the weight needs no gradient (the fast
 * path, int8_vectorwise_quant); subA, the outlier columns under
 * threshold > 0, depends on the data: not counted. MatMul4Bit (nf4)
 * keeps only the packed weight, ctx.tensors = (None, B). */
static bool keeps_own_input(const vs_block *blk, const vs_op_spec *op)
{
  for (uint32_t i = op->first_param; i < op->first_param + op->n_params; i++)
    if (blk->params[i].dtype == VS_DTYPE_INT8_ROWWISE)
      return true;
  return false;
}

/* Op's newest weight, rows x cols in the base format, dequantized whole
 * in `pass` (DEQUANT_FWD or DEQUANT_BWD): a kernel of its own that reads
 * the stored weight (its statistics included) and writes a transient of
 * rows x cols elements of the compute dtype (bitsandbytes dequantize_4bit
 * before MatMul4Bit's forward GEMM and again for the input gradient; a
 * recompute re-runs the forward's). One weight is dequantized at a time,
 * so the pass's temp counts the op's largest. */
static void dequantize_weight(const vs_block *blk, vs_op_spec *op,
                              const vs_dims *d, int pass, uint64_t rows,
                              uint64_t cols)
{
  uint64_t now = rows * cols;
  uint64_t before = largest_earlier_weight(blk, op, d, pass);
  uint64_t *temp = pass == DEQUANT_FWD ? &op->fwd_temp_bytes
                                       : &op->bwd_temp_bytes;
  vs_block_side(op, pass == DEQUANT_FWD ? SIDE_FWD : SIDE_BWD,
                (double)vs_dtype_tensor_bytes(d->base_dtype, rows, cols) +
                    (double)(d->e * now),
                1);
  if (now > before)
    *temp += d->e * (now - before);
}

/* A layer's linear weight (rows x cols on this rank) for the newest op:
 * stored in the base format, dequantized whole in the passes
 * dequantized_in says (dequantize_weight); where the op keeps its input
 * whatever its weights (keeps_own_input), that input is no longer kept
 * for the weight gradient only. */
int vs_block_linear_weight(vs_block *blk, const vs_dims *d, const char *name,
                           uint64_t rows, uint64_t cols, vs_error *err)
{
  vs_op_spec *op;
  int passes;
  if (param_as(blk, d, name, rows, cols, d->base_dtype, err))
    return VS_EINPUT;
  op = &blk->ops[blk->n_ops - 1];
  for (uint32_t s = op->first_saved;
       keeps_own_input(blk, op) && s < op->first_saved + op->n_saved; s++)
    blk->saved[s].wgrad_only = false;
  passes = dequantized_in(d, d->base_dtype);
  for (int pass = DEQUANT_FWD; pass <= DEQUANT_BWD; pass <<= 1)
    if (passes & pass)
      dequantize_weight(blk, op, d, pass, rows, cols);
  return 0;
}

/* ATen's dropout kernel over n elements of eb bytes
 * (aten/src/ATen/native/cuda/Dropout.cu, fused_dropout / native_dropout)
 * reads the input and writes the output and a 1-byte mask; its backward
 * (masked_scale) reads the gradient and the mask and writes the input's
 * gradient: 2 eb + 1 bytes an element each way, where a generic
 * element-wise op's backward also reads its input (3 eb). */
static double dropout_bytes(uint64_t n, uint64_t eb)
{
  return (double)((2 * eb + 1) * n);
}

/* An adapter op's work over n targets of one input of `in` features:
 * x @ A (in x r) then @ B (r x out) per target, 2 x forward backward (the
 * weight-gradient half of it for A and B). */
static void as_adapter(vs_op_spec *op, const vs_dims *d, uint64_t in,
                       const vs_lora_linear *t, size_t n)
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
 * (once for every target of it, and not at all where the base linear
 * keeps it: keeps_own_input) or, with lora_dropout, each target's
 * dropped copy and its 1-byte mask; B's input, A's r-wide output. */
int vs_block_lora_adapter(vs_block *blk, const vs_dims *d, const char *name,
                          uint64_t in, vs_input_keeper keeper,
                          const vs_lora_linear *t, size_t n, vs_error *err)
{
  static const char *const names[VS_LORA_N] = {"q", "k", "v", "o",
                                                "gate", "up", "down"};
  vs_lora_linear on[4];
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
  if (blk->n_ops > 0 && keeps_own_input(blk, &blk->ops[blk->n_ops - 1]))
    keeper = KEPT_BY_ANOTHER; /* the base linear, op before the adapter */
  if (!(op = vs_block_add_op(blk, name, err)))
    return VS_EINPUT;
  as_adapter(op, d, in, on, k);
  op->adapter = true;
  op->no_fp8 = true; /* PEFT's own nn.Linear layers */
  if (!d->lora_drop && !cast && keeper == KEPT_FOR_WEIGHTS &&
      vs_block_save_act(blk, op, d->e * d->tokens * in, d->act_dtype, err))
    return VS_EINPUT;
  for (size_t i = 0; i < k; i++) {
    char pname[VS_OP_NAME_MAX];
    vs_param_tensor *p;
    if (!d->lora_drop && cast &&
        vs_block_save_act(blk, op, d->e * d->tokens * in, d->act_dtype, err))
      return VS_EINPUT; /* this target's cast copy of x */
    if (d->lora_drop) {
      /* each target's dropout, a kernel each way, over x as PEFT's
       * forward has cast it for the adapter (_cast_input_dtype, then
       * lora_dropout) */
      uint64_t eb = cast ? vs_dtype_size(d->adapter_dtype) : d->e;
      vs_block_side(op, SIDE_FWD, dropout_bytes(d->tokens * in, eb), 1);
      vs_block_side(op, SIDE_BWD, dropout_bytes(d->tokens * in, eb), 1);
    }
    if (d->lora_drop &&
        (vs_block_save_act(blk, op, d->e * d->tokens * in, d->act_dtype, err) ||
         vs_block_save(blk, op,
                       (vs_saved){.bytes = d->tokens * in,
                                  .dtype = VS_DTYPE_BOOL,
                                  .category = VS_CAT_ACTIVATIONS},
                       err)))
      return VS_EINPUT;
    if (vs_block_save_act(blk, op, d->e * d->tokens * d->lora_r, d->act_dtype,
                          err))
      return VS_EINPUT;
    for (int ab = 0; ab < 2; ab++) {
      snprintf(pname, sizeof pname, "%s.lora_%c", names[on[i].target],
               ab ? 'B' : 'A');
      if (vs_block_param(blk, d, pname, ab ? d->lora_r : in,
                         ab ? on[i].out : d->lora_r, err))
        return VS_EINPUT;
      p = &blk->params[blk->n_params - 1];
      p->dtype = d->adapter_dtype;
      p->trainable = true;
    }
  }
  return 0;
}

/* RMSNorm as eager PyTorch runs the Python of Hugging Face's
 * LlamaRMSNorm and torchtitan's RMSNorm: x.to(float32), pow(2), mean(-1),
 * + eps, rsqrt, the product, .to(x's dtype), times the weight, a kernel
 * each, over elements of ex bytes (4: x is fp32 and neither cast runs).
 * Bytes an element, forward: pow 4 + 4, mean 4, the product 4 + 4, the
 * weight's product ex + ex (eps and rsqrt work on one value a row), the
 * casts ex + 4 and 4 + ex. Backward, as autograd's formulas
 * (tools/autograd/derivatives.yaml, FunctionsManual.cpp) run them: the
 * weight product's two gradients and the weight's sum over rows (2ex,
 * 3ex, ex: the last two the weight gradient, which a frozen weight
 * skips), the product's two and its sum over the row (8, 12, 4), rsqrt's
 * -0.5 * grad * result.pow(3) on rows (three kernels), mean's expansion
 * (4), pow_backward's grad * (2 * x.pow(1)) (8, 8, 12), the sum of x's
 * two gradients (12), and the casts' (ex + 4 each). */
static void eager_rmsnorm(vs_op_spec *op, uint64_t ex, uint64_t elems)
{
  double n = (double)elems, casts = ex == 4 ? 0.0 : 2.0 * (double)(ex + 4);
  op->fwd_bytes = n * (20.0 + 2.0 * (double)ex + casts);
  op->bwd_bytes = n * (6.0 * (double)ex + 68.0 + casts);
  op->wgrad_bytes = n * 4.0 * (double)ex;
  op->fwd_kernels = ex == 4 ? 6 : 8;
  op->bwd_kernels = ex == 4 ? 14 : 16;
}

/* A norm over the replicated activation: saves its input (in fp32 under
 * autocast: the fp32 residual, or its cast), as a fused kernel does.
 * LayerNorm also has a bias; RMSNorm does not. Hugging Face's
 * LlamaRMSNorm (modeling_llama.py) and torchtitan's RMSNorm
 * (torchtitan/models/norms.py, 9dec370) run in Python ops instead:
 * x.to(float32), then pow and the rsqrt multiply save that fp32 copy (the
 * input itself when it is fp32), and the weight's product saves the
 * normalized tensor in the input's dtype (.to / type_as) when the weight
 * trains (autograd keeps a product's operand for the other's gradient
 * only); Gemma's (modeling_gemma2.py Gemma2RMSNorm: _norm(x.float()) *
 * (1.0 + weight.float()), then type_as) the fp32 one. */
static int norm_over(vs_block *blk, const vs_dims *d, const char *name,
                     vs_norm_kind kind, uint64_t elems, uint64_t width,
                     int dtype, vs_error *err)
{
  bool rms = kind == NORM_RMS;
  uint64_t ex = vs_dtype_size(dtype);
  char pname[VS_OP_NAME_MAX];
  vs_op_spec *op = vs_block_add_op(blk, name, err);
  if (!op)
    return VS_EINPUT;
  vs_block_as_elementwise(op, elems, ex, 8.0);
  op->bwd_kernels = NORM_BWD_KERNELS;
  if (d->eager_kernels && rms)
    eager_rmsnorm(op, ex, elems); /* LayerNorm is one kernel even so */
  if (d->python_rmsnorm && rms) {
    /* the weight's product keeps the normalized tensor for the weight's
     * gradient only: none for a frozen weight; fp32 where it runs in fp32
     * (Gemma's (1 + weight.float()), before the cast back) */
    uint64_t normalized = d->frozen_base ? 0 : d->norm_fp32_scale ? 4 : ex;
    if (vs_block_save_act(blk, op, 4 * elems, VS_DTYPE_FP32, err) ||
        (normalized &&
         vs_block_save_act(blk, op, normalized * elems,
                           normalized == 4 ? VS_DTYPE_FP32 : dtype, err)))
      return VS_EINPUT;
  } else if (vs_block_save_act(blk, op, ex * elems, dtype, err)) {
    return VS_EINPUT;
  }
  snprintf(pname, sizeof pname, "%s.weight", name);
  if (vs_block_param(blk, d, pname, 1, width, err))
    return VS_EINPUT;
  snprintf(pname, sizeof pname, "%s.bias", name);
  return rms ? 0 : vs_block_param(blk, d, pname, 1, width, err);
}

int vs_block_norm(vs_block *blk, const vs_dims *d, const char *name,
                  vs_norm_kind kind, vs_error *err)
{
  return norm_over(blk, d, name, kind, d->tok_rep * d->h, d->h, d->er_dtype,
                   err);
}

/* The dtype a norm over a 16-bit tensor (not the residual stream) saves
 * its input in: autocast runs layer_norm in fp32 (its fp32 list), so the
 * input is cast and the cast saved. */
static int norm_input_dtype(const vs_dims *d)
{
  return d->amp && d->norm == NORM_LAYER ? VS_DTYPE_FP32 : d->act_dtype;
}

int vs_block_post_norm(vs_block *blk, const vs_dims *d, const char *name,
                       vs_error *err)
{
  return norm_over(blk, d, name, (vs_norm_kind)d->norm, d->tok_rep * d->h, d->h,
                   norm_input_dtype(d), err);
}

/* Gemma 2's soft-capping, x -> cap * tanh(x / cap) (transformers'
 * modeling_gemma2.py, the attention's scores in eager_attention_forward
 * and the final logits in Gemma2ForCausalLM.forward): three operators in
 * the input's dtype, a kernel each reading and writing 2 B an element at
 * e = 2 (2e); tanh saves its output, which its backward reads with the
 * gradient (grad * (1 - y^2): 3e), and the two scalings' backward scale
 * the gradient (2e each). Forward, the input and the quotient are alive
 * together (2e an element beside the saved output); backward, the
 * incoming gradient and each new one. */
int vs_block_softcap(vs_block *blk, const vs_dims *d, const char *name,
                     uint64_t elems, vs_cap_of of, vs_error *err)
{
  double n = (double)elems, e = (double)d->e;
  vs_op_spec *op = vs_block_add_op(blk, name, err);
  if (!op)
    return VS_EINPUT;
  vs_block_as_elementwise(op, elems, d->e, 3.0);
  op->fwd_bytes = 3.0 * 2.0 * e * n;
  op->bwd_bytes = (2.0 + 3.0 + 2.0) * e * n;
  op->fwd_kernels = 3;
  op->bwd_kernels = 3;
  op->fwd_temp_bytes = 2 * d->e * elems;
  op->bwd_temp_bytes = 2 * d->e * elems;
  if (of == VS_CAP_SCORES) {
    op->attn_core = true;
    return vs_block_save_scores(blk, op, elems, d->act_dtype, err);
  }
  return vs_block_save(blk, op,
                       (vs_saved){.bytes = d->e * elems,
                                  .dtype = d->act_dtype,
                                  .category = VS_CAT_TEMP},
                       err);
}

int vs_block_head_norm(vs_block *blk, const vs_dims *d, const char *name,
                       uint64_t heads, vs_error *err)
{
  return norm_over(blk, d, name, (vs_norm_kind)d->norm,
                   d->tokens * heads / d->t * d->d, d->d, norm_input_dtype(d),
                   err);
}

/* Dropout over n elements of eb bytes (dropout_bytes): its 1-byte mask is
 * saved (the dropped-out attention probs are saved by the matmul that
 * reads them). */
int vs_block_dropout(vs_block *blk, const vs_dims *d, const char *name,
                     uint64_t n, uint64_t eb, vs_core_part part,
                     vs_error *err)
{
  bool selective = part == VS_IN_ATTN_CORE;
  vs_op_spec *op;
  if (!d->dropout)
    return 0;
  if (!(op = vs_block_add_op(blk, name, err)))
    return VS_EINPUT;
  vs_block_as_elementwise(op, n, eb, 2.0);
  op->fwd_bytes = op->bwd_bytes = dropout_bytes(n, eb);
  op->attn_core = selective;
  if (vs_block_save(blk, op,
                    (vs_saved){.bytes = n,
                               .dtype = VS_DTYPE_BOOL,
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
 * fp32 (ToCopyBackward) before autograd sums the casts' gradients into
 * the norm's (casts - 1 adds of two fp32 tensors into a third): each a
 * kernel of its own. */
void vs_block_autocast_input(vs_op_spec *op, const vs_dims *d, uint64_t casts,
                             uint64_t elems)
{
  if (!d->amp || casts == 0)
    return;
  vs_block_side(op, SIDE_FWD, (double)(casts * (d->er + d->e) * elems),
                (uint32_t)casts);
  vs_block_side(op, SIDE_BWD,
                (double)((casts * (d->e + d->er) + (casts - 1) * 3 * d->er) *
                         elems),
                (uint32_t)(2 * casts - 1));
  op->bwd_temp_bytes += d->er * elems;
}

/* A sublayer's output (16 bits, e) added into the residual stream (er),
 * newest op's side work. Eager PyTorch runs the add as a kernel of its
 * own: it reads both and writes the sum (er). Megatron-LM fuses it into
 * its bias-dropout-add (megatron/core/fusions/fused_bias_dropout.py),
 * which with dropout is the dropout op, reading the residual too and
 * writing the sum in the residual's dtype; with
 * no dropout and no bias, F.dropout(p = 0) returns its input (ATen's
 * Dropout.cpp) and the add is the kernel left. Backward passes the sum's
 * gradient to both, cast to 16 bits for the sublayer where the residual
 * is fp32 (autocast), and autograd sums the residual's two gradients, the
 * add's and the norm's that read it (3er, torch/csrc/autograd/
 * input_buffer.cpp), whatever the kernels. */
void vs_block_residual_add(vs_op_spec *op, const vs_dims *d)
{
  double n = (double)(d->tok_rep * d->h);
  bool cast = d->er != d->e;
  if (d->eager_kernels || !d->dropout)
    vs_block_side(op, SIDE_FWD_EAGER, n * (double)(2 * d->er + d->e), 1);
  else /* bias-dropout-add reads the residual and writes the sum (er) */
    op->fwd_bytes += n * (double)(2 * d->er - d->e);
  vs_block_side(op, SIDE_BWD,
                n * (double)(3 * d->er + (cast ? d->er + d->e : 0)),
                cast ? 2 : 1);
}

/* One tensor's eager rotary embedding, per element of e bytes (autograd's
 * formulas for the backward), `fwd` and `bwd` bytes and kernels:
 * - chunk: x * cos (2e), -x2 on half (e), cat (2e), * sin (2e), the sum
 *   (3e): 5 kernels, 10e; backward g * sin (2e), -g on half (e), chunk's
 *   gradient made whole (2e), g * cos (2e), the sum of x's two (3e): 5,
 *   10e;
 * - Hugging Face's slices, cos and sin in c bytes (the residual's dtype):
 *   with c = e as chunk's forward; backward each slice's gradient zeros
 *   a whole tensor and copies its half in (2 kernels, 2e), and x's three
 *   gradients take two sums (6e): 9 kernels, 15e. With c = 4 (autocast)
 *   the products promote to fp32 (x * cos e + c, * sin e + c, the sum
 *   3c) and SDPA casts the result back (c + e): 6 kernels, 6e + 6c;
 *   backward also casts the products' fp32 gradients to 16 bits: 12
 *   kernels, 14e + 7c;
 * - complex: x.float() (e + 4), the complex product (4 + 4), type_as
 *   (4 + e), the casts absent in fp32: 3 kernels, 16 + 2e (1, 8 in fp32);
 *   backward the same in reverse (g * conj(freqs_cis)). */
static void rope_work(const vs_dims *d, vs_side_work *fwd, vs_side_work *bwd)
{
  double e = (double)d->e, c = (double)d->er;
  if (d->rope == ROPE_COMPLEX) {
    fwd->kernels = bwd->kernels = d->e == 4 ? 1 : 3;
    fwd->bytes = bwd->bytes = d->e == 4 ? 8.0 : 16.0 + 2.0 * e;
  } else if (d->rope == ROPE_HF && d->er != d->e) {
    *fwd = (vs_side_work){6.0 * e + 6.0 * c, 6};
    *bwd = (vs_side_work){14.0 * e + 7.0 * c, 12};
  } else {
    *fwd = (vs_side_work){10.0 * e, 5};
    *bwd = d->rope == ROPE_HF ? (vs_side_work){15.0 * e, 9}
                              : (vs_side_work){10.0 * e, 5};
  }
}

/* The rotary embedding of q and k beside the newest op, their projection:
 * eagerly as rope_work says (vs_rope); fused, as Megatron-LM runs it
 * (apply_rope_fusion, on unless --no-rope-fusion: Transformer Engine's
 * fused RoPE, called on q and on k), one kernel a tensor each way, which
 * reads the tensor and writes the result (2e; the frequencies are one
 * row a position). */
void vs_block_rope(vs_op_spec *op, const vs_dims *d)
{
  double n = (double)(d->tokens * (d->a + d->kv) * d->d / d->t);
  vs_side_work fwd = {2.0 * (double)d->e, 1}, bwd = fwd;
  if (d->rope == ROPE_NONE)
    return;
  if (d->eager_kernels)
    rope_work(d, &fwd, &bwd);
  vs_block_side(op, SIDE_FWD_EAGER, n * fwd.bytes, 2 * fwd.kernels);
  vs_block_side(op, SIDE_BWD, n * bwd.bytes, 2 * bwd.kernels);
}

/* Bytes an element of op's sequence-parallel all-gathers moves: a
 * Transformer Engine module that quantizes its input gathers it, and its
 * output's gradient, quantized (module/linear.py, _all_gather_fp8), as
 * torchtitan's tensor-wise float8 plan does (torchao_tp; the row-wise
 * recipes gather 16 bits); what the MoE dispatcher gathers for the
 * experts is 16-bit. */
static uint64_t gathered_bytes(const vs_dims *d, const vs_op_spec *op)
{
  return quantizes_input(d, op) && vs_block_fp8_copies(d) && !op->routed ? d->em
                                                                         : d->e;
}

/* The tensor-parallel collectives of a column-parallel matmul over `rows`
 * tokens of `width` input features (Megatron's f: all-reduce of the
 * input's gradient; with sp the input all-gathered in forward, the
 * gradient reduce-scattered, and the input gathered again in backward
 * unless kept whole). */
void vs_block_column_comms(vs_op_spec *op, const vs_dims *d, uint64_t rows,
                           uint64_t width, vs_sp_input input)
{
  uint64_t bytes = d->e * rows * width;
  uint64_t gathered = gathered_bytes(d, op) * rows * width;
  if (!d->sp) {
    vs_block_comm(&op->bwd_after, d, VS_COLL_ALL_REDUCE, bytes);
    return;
  }
  vs_block_comm(&op->fwd_before, d, VS_COLL_ALL_GATHER, gathered);
  vs_block_comm(&op->bwd_after, d, VS_COLL_REDUCE_SCATTER, bytes);
  if (input == SP_REGATHER) {
    vs_block_comm(&op->bwd_before, d, VS_COLL_ALL_GATHER, gathered);
    op->bwd_temp_bytes += gathered; /* re-gathered input */
  }
}

/* The tensor-parallel collectives of a row-parallel matmul over `rows`
 * tokens (Megatron's g: all-reduce of the output; with sp a
 * reduce-scatter, and the output's gradient gathered in backward). */
void vs_block_row_comms(vs_op_spec *op, const vs_dims *d, uint64_t rows)
{
  uint64_t bytes = d->e * rows * d->h;
  if (d->sp) {
    vs_block_comm(&op->fwd_after, d, VS_COLL_REDUCE_SCATTER, bytes);
    vs_block_comm(&op->bwd_before, d, VS_COLL_ALL_GATHER,
                  gathered_bytes(d, op) * rows * d->h);
  } else {
    vs_block_comm(&op->fwd_after, d, VS_COLL_ALL_REDUCE, bytes);
  }
}

/* A column-parallel matmul (QKV, MLP up): the input is replicated over tp
 * (or sequence-sharded and gathered first), the output sharded; under
 * autocast each of its `casts` linears saves its own cast of the input
 * (dims qkv_casts, up_casts). */
vs_op_spec *vs_block_column_parallel(vs_block *blk, const vs_dims *d,
                                     const char *name, uint64_t out_cols,
                                     uint64_t casts, vs_error *err)
{
  vs_op_spec *op = vs_block_add_op(blk, name, err);
  if (!op)
    return NULL;
  vs_block_as_matmul(op, d->tokens, d->h, out_cols, d->e);
  /* each layer's norms feed these */
  op->input_from_norm = d->fp8_lib == VS_FP8_TE;
  vs_block_autocast_input(op, d, casts, d->tok_rep * d->h);
  if (vs_block_save_input(
          blk, op, d, casts * (d->sp_gathered ? d->tokens : d->tok_rep) * d->h,
          KEPT_FOR_WEIGHTS, err))
    return NULL;
  vs_block_column_comms(op, d, d->tokens, d->h,
                        d->sp_gathered ? SP_KEEPS_GATHERED : SP_REGATHER);
  return op;
}

/* A row-parallel matmul (attention output, MLP down): sharded input, output
 * summed over tp (all-reduce, or reduce-scatter with sp); keeper: who else
 * keeps its input. */
vs_op_spec *vs_block_row_parallel(vs_block *blk, const vs_dims *d,
                                  const char *name, uint64_t in_cols,
                                  vs_input_keeper keeper, vs_error *err)
{
  vs_op_spec *op = vs_block_add_op(blk, name, err);
  if (!op)
    return NULL;
  vs_block_as_matmul(op, d->tokens, in_cols, d->h, d->e);
  if (vs_block_save_input(blk, op, d, d->tokens * in_cols, keeper, err))
    return NULL;
  vs_block_row_comms(op, d, d->tokens);
  return op;
}

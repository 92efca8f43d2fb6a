/* schedule_block.c - the ops of one block of a stage's program (see
 * schedule_int.h): the blocks and their instances, the time of each op,
 * ZeRO-3's parameter gathers, activation offload, and a block's forward
 * and backward passes with their saved tensors, checkpoints and model
 * states. */
#include "schedule_int.h"

#include "category.h"
#include "resource_kinds.h"

#include <math.h>

/* ------------------------------------------------------------------------
 * Blocks and instances: inst 0 is the embedding, 1..layers the transformer
 * layers, layers+1 the head.
 * ------------------------------------------------------------------------ */

const vs_block *sb_block_of(const builder *b, size_t inst)
{
  return vs_model_block(b->m, inst);
}

/* Bytes of saved tensor s of blk as the GPU keeps it: an FP8 copy of a
 * weight has a transposed twin on GPUs that need one (Hopper, Ada:
 * topology fp8_transposes), the forward GEMM reading one and the input
 * gradient's the other; of an FP8 input Transformer Engine keeps only the
 * layout its weight gradient reads (module/linear.py saves inputmat_t,
 * not the rowwise copy the forward GEMM read). */
static uint64_t saved_size(const builder *b, const vs_block *blk, uint32_t s)
{
  const vs_saved *sv = &blk->saved[s];
  return sv->weight_copy == VS_COPY_FP8 && b->topo->fp8_transposes
             ? 2 * sv->bytes
             : sv->bytes;
}

const vs_kind_plan *sb_plan_of(const builder *b, size_t inst)
{
  return vs_recipe_kind(b->r, b->m, inst);
}

/* The row of inst (a block of this stage) and micro-batch mb in the ring
 * tables (saved, ckpt_buf, act_host, act_out). Micro-batches in flight
 * on one block at once are fewer than b->ring (see vs_pipeline_ring), so
 * mb % ring tells them apart; a block of another stage has no row (a
 * schedule bug, reported). */
static size_t live(builder *b, size_t inst, int mb)
{
  uint32_t row = b->stage_inst[inst];
  if (row == NONE) {
    if (!b->failed)
      vs_error_set(b->err, VS_EINPUT,
                   "schedule: stage %llu holds activations of block %zu, "
                   "which is not on it (a schedule bug)",
                   (unsigned long long)b->stage, inst);
    b->failed = true;
    row = 0;
  }
  return ((size_t)mb % b->ring) * b->n_stage_inst + row;
}

/* The buffer slot of saved tensor `saved` (index in its block) of inst
 * for micro-batch mb. */
static uint32_t *saved_slot(builder *b, size_t inst, uint32_t saved, int mb)
{
  return &b->saved[live(b, inst, mb) * b->max_saved + saved];
}

/* Stores a new live buffer in slot; a slot still in use means two
 * micro-batches collided in the ring: a bug, reported, never hidden. */
static void hold(builder *b, uint32_t *slot, uint32_t buf)
{
  if (*slot != NONE && !b->failed) {
    b->failed = true;
    vs_error_set(b->err, VS_EINPUT,
                 "schedule: more micro-batches in flight than expected");
  }
  *slot = buf;
}

static int precision(const builder *b) { return b->wl->training.precision; }

/* The precision op o's matmuls run at: under fp8, a matmul outside the
 * FP8 library's modules (no_fp8) runs in the model's 16 bits (Megatron-LM's
 * --fp8-format inside a --bf16 model: workload_preset.c). */
static int gemm_precision(const builder *b, const vs_op_spec *o)
{
  return precision(b) == VS_PREC_FP8 && o->no_fp8 ? VS_PREC_BF16
                                                  : precision(b);
}

/* The memo slot of (kind, bytes), and whether it holds that key. */
static time_memo *memo_slot(builder *b, uint64_t kind, uint64_t bytes,
                            bool *hit)
{
  uint64_t key = (bytes ^ (kind << 56)) * UINT64_C(0x9E3779B97F4A7C15);
  time_memo *m = &b->memo[key >> 58]; /* the top 6 bits: 64 slots */
  *hit = m->used && m->kind == kind && m->bytes == bytes;
  if (!*hit) {
    m->kind = kind;
    m->bytes = bytes;
    m->used = true;
  }
  return m;
}

double sb_split_total(const op_split *x)
{
  double t = 0;
  for (int i = 0; i < VS_BOUND_SPLIT_N; i++)
    t += x->s[i];
  return t;
}

/* Adds `seconds` of work moving `bytes` to x: memory-bound where the
 * bytes alone take that long, arithmetic-bound otherwise. */
static void add_work(builder *b, op_split *x, double seconds, double bytes)
{
  double t_mem = vs_cost_memory_seconds(b->topo, bytes, &b->p->cal_seen);
  x->s[t_mem >= seconds ? VS_BOUND_MEMORY : VS_BOUND_MATH] += seconds;
}

void sb_add_launch(builder *b, op_split *x, unsigned kernels)
{
  x->s[VS_BOUND_LAUNCH] += vs_cost_launch_seconds(b->topo, kernels);
}

static double op_seconds(builder *b, int prec, vs_flop_kind kind,
                         double flops, double bytes)
{
  return vs_cost_roofline_seconds(b->topo, prec, kind, flops, bytes,
                                  &b->p->cal_seen);
}

/* A roofline op's split (the optimizer step: one kernel's work, its
 * floors left out as before). */
op_split sb_roofline_split(builder *b, double flops, double bytes)
{
  op_split x = {{0}};
  add_work(b, &x, op_seconds(b, precision(b), VS_FLOPS_OTHER, flops, bytes),
           bytes);
  return x;
}

/* The precision op o's weight-gradient GEMM runs at: its matmuls' but
 * under torchao's rowwise_with_gw_hp recipe, whose weight gradient is a
 * 16-bit mm of the 16-bit input and output gradient (float8_linear.py:
 * ScalingType.DISABLED for both operands, config.py). */
static int wgrad_precision(const builder *b, const vs_op_spec *o)
{
  if (vs_workload_fp8_lib(precision(b), b->wl->training.framework) ==
          VS_FP8_TORCHAO &&
      b->wl->training.fp8_recipe == VS_FP8_ROWWISE_GW_HP && vs_op_fp8_linear(o))
    return VS_PREC_BF16;
  return gemm_precision(b, o);
}

static void add_gemm(builder *b, op_split *x, int prec, vs_gemm g, double flops,
                     double bytes)
{
  add_work(
      b, x,
      vs_cost_gemm_seconds(b->topo, prec, g, flops, bytes, &b->p->cal_seen),
      bytes);
  sb_add_launch(b, x, 1);
}

/* An op's work without a GEMM shape: flash attention from its measured
 * rates, anything else by the roofline; then its kernels' floors. */
static void add_shapeless(builder *b, op_split *x, const vs_op_spec *o,
                          double flops, double bytes, unsigned kernels)
{
  double t = o->flash.seq
                 ? vs_cost_flash_seconds(b->topo, gemm_precision(b, o),
                                         o->flash, flops, bytes,
                                         &b->p->cal_seen)
                 : op_seconds(b, gemm_precision(b, o),
                              o->matmul ? VS_FLOPS_MATMUL : VS_FLOPS_OTHER,
                              flops, bytes);
  add_work(b, x, t, bytes);
  sb_add_launch(b, x, kernels);
}

/* Kernels of their own beside an op's main work (vs_side_work): each
 * bound by its bytes, one after another, so their time adds. */
static void add_side(builder *b, op_split *x, double bytes, unsigned kernels)
{
  if (bytes > 0)
    add_work(b, x, op_seconds(b, precision(b), VS_FLOPS_OTHER, 0.0, bytes),
             bytes);
  sb_add_launch(b, x, kernels);
}

/* The bytes of op o's main forward work, without its side kernels. */
static double main_fwd_bytes(const vs_op_spec *o)
{
  return o->fwd_bytes - o->fwd_side.bytes - o->fwd_eager.bytes;
}

/* The bytes `share` of op o's forward moves: the share of its own work and
 * side work, and its eager element-wise operators whole (vs_op_spec). */
static double fwd_bytes_at(const vs_op_spec *o, double share)
{
  return share * (o->fwd_bytes - o->fwd_eager.bytes) + o->fwd_eager.bytes;
}

/* `share` of op o's forward (1, or a recompute's part): its GEMM's shape
 * prices it where it has one; its side kernels add to it. */
static op_split fwd_split(builder *b, const vs_op_spec *o, double share)
{
  op_split x = {{0}};
  double f = share * o->fwd_flops, by = share * main_fwd_bytes(o);
  if (f > 0 || by > 0) {
    if (o->gemm.batch)
      add_gemm(b, &x, gemm_precision(b, o), o->gemm, f, by);
    else
      add_shapeless(b, &x, o, f, by, o->fwd_kernels);
  }
  if (share > 0)
    add_side(b, &x, share * o->fwd_side.bytes, o->fwd_side.kernels);
  add_side(b, &x, o->fwd_eager.bytes, o->fwd_eager.kernels);
  return x;
}

/* Op o's backward doing what the recipe runs of it (flops, bytes, and
 * the share s of its weight gradient): a GEMM op's input gradient
 * (forward's GEMM FLOPs and bytes), then its second operand's gradient
 * for the rest (none for a frozen weight); then its side kernels, the
 * weight gradient's in its share, and the gradients' accumulation `acc`
 * (grad_accumulation, outside `bytes`). */
static op_split bwd_split(builder *b, const vs_op_spec *o, double flops,
                          double bytes, double s, vs_side_work acc)
{
  op_split x = {{0}};
  double f, by;
  double side = o->bwd_side.bytes + s * o->wgrad_side.bytes;
  double gemm = main_fwd_bytes(o);
  if (!(flops > 0 || bytes > 0))
    return x;
  bytes -= side;
  if (!o->gemm.batch) {
    add_shapeless(b, &x, o, flops, bytes, o->bwd_kernels);
  } else {
    f = flops < o->fwd_flops ? flops : o->fwd_flops;
    by = bytes < gemm ? bytes : gemm;
    add_gemm(b, &x, gemm_precision(b, o), vs_gemm_dgrad(o->gemm), f, by);
    if (flops > f)
      add_gemm(b, &x, wgrad_precision(b, o), vs_gemm_wgrad(o->gemm), flops - f,
               bytes - by);
  }
  add_side(b, &x, side + acc.bytes,
           o->bwd_side.kernels + (s > 0 ? o->wgrad_side.kernels : 0) +
               acc.kernels);
  return x;
}

/* Eager PyTorch adds each new weight gradient into its parameter's
 * resident .grad (AccumulateGrad: variable_grad += new_grad once .grad is
 * defined, torch/csrc/autograd/functions/accumulate_grad.h; Megatron-LM's
 * main-grad hook without gradient-accumulation fusion alike,
 * param.main_grad.add_(param.grad), distributed_data_parallel.py): a
 * kernel per trainable parameter of op k of inst's block, reading the
 * resident gradient and the new one (the parameter's dtype) and writing
 * the sum. With the fusion the weight gradient's GEMM adds it
 * ([training] grad_accumulation_fusion). None is
 * priced where this backward makes the gradients afresh (`fresh`: the
 * first micro-batch after the step set them to None, whose gradients
 * AccumulateGrad keeps as they are), where ZeRO-2/3 and FSDP reduce and
 * free them each micro-batch (not FSDP2 under a pipeline, which adds
 * them into its unsharded fp32 gradients, to_accumulated_grad_if_needed,
 * and reduces after the last: priced from the first micro-batch on,
 * whose cast to fp32 moves 2 B an element less), or where the step runs
 * in backward. Under DeepSpeed's BF16_Optimizer (recipe lp_grads_kept)
 * the .grad they add into is in the parameter's dtype, made afresh by
 * the step's first micro-batch. */
typedef struct accumulation {
  vs_side_work work;  /* the adds */
  uint64_t made;      /* the new gradients they add, held from the weight
                         gradient until added: a temporary of the op */
} accumulation;

static accumulation grad_accumulation(const builder *b, size_t inst,
                                      uint32_t k, bool fresh)
{
  const vs_block *blk;
  const vs_kind_plan *plan;
  const vs_op_spec *o;
  accumulation w = {{0, 0}, 0};
  double resident;
  if (b->wl->training.grad_accumulation_fusion || fresh ||
      (sb_transient_grads(b) && !b->r->pipelined_fsdp) ||
      b->r->step_in_backward)
    return w;
  blk = sb_block_of(b, inst);
  plan = sb_plan_of(b, inst);
  o = &blk->ops[k];
  if (plan->trainable_elems == 0)
    return w;
  resident = (double)plan->grad_bytes / (double)plan->trainable_elems;
  for (uint32_t i = o->first_param; i < o->first_param + o->n_params; i++) {
    const vs_param_tensor *p = &blk->params[i];
    uint64_t n = p->rows * p->cols, made;
    double kept;
    if (!p->trainable)
      continue;
    made = vs_recipe_new_grad_bytes(&b->wl->training, p);
    /* BF16_Optimizer's .grad is kept in the parameter's dtype */
    kept = b->r->lp_grads_kept ? (double)made : resident * (double)n;
    w.made += made;
    w.work.bytes += 2.0 * kept + (double)made;
    w.work.kernels++;
  }
  return w;
}

/* The next compute-stream op waits for op too (a block's gather, its
 * activations' fetch and up to two blocking sends: four at most, a fifth
 * is a schedule bug). */
void sb_wait_on(builder *b, uint32_t op)
{
  if (op == NONE || b->failed)
    return;
  if (b->n_waits == sizeof b->waits / sizeof b->waits[0]) {
    b->failed = true;
    vs_error_set(b->err, VS_EINPUT,
                 "schedule: a compute op would wait for more than four "
                 "ops");
    return;
  }
  b->waits[b->n_waits++] = op;
}

/* op (the newest, on the compute stream) takes the waits, and the
 * receive the stream's unit starts with: every framework's schedule waits
 * for a received tensor before it runs the unit (a recompute, a
 * collective or a gather first included). */
void sb_stream_waits(builder *b, uint32_t op)
{
  for (uint32_t i = 0; i < b->n_waits; i++)
    sb_add_dep(b, op, b->waits[i]);
  b->n_waits = 0;
  sb_add_dep(b, op, b->reduce_wait);
  b->reduce_wait = NONE;
  for (int i = 0; i < 2; i++) {
    sb_free_on(b, op, b->released[i], AT_START);
    b->released[i] = NONE;
  }
  if (b->recv_op != NONE && !b->recv_waited) {
    sb_add_dep(b, op, b->recv_op);
    b->recv_waited = true;
  }
}

/* Bytes an element of a 16-bit tensor Transformer Engine quantizes reads
 * (the bf16 model's activations and weights: workload_preset.c). */
#define FP8_SOURCE_BYTES 2.0

/* Adds to w the kernels that quantize the weights of op k of inst's
 * block to FP8 with their transposes (fp8_casts). */
static void fp8_weight_casts(const builder *b, size_t inst, uint32_t k,
                             vs_side_work *w)
{
  const vs_block *blk = sb_block_of(b, inst);
  const vs_op_spec *o = &blk->ops[k];
  double t = b->topo->fp8_transposes && !sb_plan_of(b, inst)->no_backward
                 ? 1.0
                 : 0.0;
  for (uint32_t p = o->first_param; p < o->first_param + o->n_params; p++) {
    const vs_param_tensor *pt = &blk->params[p];
    double n = (double)pt->rows * (double)pt->cols;
    bool stored_fp8 = pt->dtype == VS_DTYPE_FP8_SCALED;
    if (!vs_param_matrix(pt) || (stored_fp8 && t == 0))
      continue;
    w->bytes += stored_fp8 ? 2.0 * n : n * (FP8_SOURCE_BYTES + 1 + t);
    w->kernels++;
  }
}

/* Transformer Engine's quantization kernels of op k of inst's block, one
 * of its linears (fp8_casts), in phase `which` (module/linear.py,
 * _Linear; layernorm_linear.py): forward casts
 * its input to FP8 with the transposed copy its weight gradient reads
 * (fp8_cast_transpose_fused), unless a norm's kernel wrote the FP8 input
 * (LayerNormLinear: input_from_norm), whose transpose backward makes
 * (fp8_transpose); a recompute casts the input again; backward casts the
 * output's gradient (grad_output_preprocess). A forward that quantizes
 * the weights (TIME_FWD_WEIGHTS, and a recompute where Transformer Engine
 * keeps no copies across micro-batches) casts each with its transpose
 * for the input gradient (an FP8-stored weight is only transposed). A
 * cast reads 2 B an element and writes 1 B a copy, a transpose reads 1 B
 * and writes 1 B; transposed copies only on GPUs that need them ([gpu]
 * fp8_transposes). */
static vs_side_work te_casts(const builder *b, size_t inst, uint32_t k,
                             phase_time which)
{
  vs_side_work w = {0, 0};
  const vs_op_spec *o = &sb_block_of(b, inst)->ops[k];
  double t, wgrad_t, in, out;
  t = b->topo->fp8_transposes ? 1.0 : 0.0;
  wgrad_t = sb_plan_of(b, inst)->wgrad_share[k] > 0 ? t : 0.0;
  in = (double)o->gemm.batch * (double)o->gemm.m * (double)o->gemm.k;
  out = (double)o->gemm.batch * (double)o->gemm.m * (double)o->gemm.n;
  if (which == TIME_BWD || which == TIME_BWD_FRESH) {
    w.bytes = out * (FP8_SOURCE_BYTES + 1 + wgrad_t);
    w.kernels = 1;
    if (o->input_from_norm && wgrad_t > 0) {
      w.bytes += 2.0 * in;
      w.kernels++;
    }
    return w;
  }
  if (which == TIME_RECOMPUTE && !(o->recompute_share > 0))
    return w;
  if (!o->input_from_norm) {
    w.bytes = in * (FP8_SOURCE_BYTES + 1 + wgrad_t);
    w.kernels = 1;
  }
  if (which == TIME_FWD_WEIGHTS ||
      (which == TIME_RECOMPUTE && !b->r->fp8_weight_cache))
    fp8_weight_casts(b, inst, k, &w);
  return w;
}

/* torchao's Float8Linear casting a 16-bit tensor to FP8 eagerly (kernels
 * = eager): hp_tensor_to_float8_dynamic runs abs and a max over the
 * tensor or along a dimension (one scale a row: axiswise), abs reading
 * and writing 2 B an element, the max reading them; amax_to_scale's
 * kernels on the scale(s) (to float64, clamp, a float over a tensor,
 * which Tensor.__rtruediv__ runs as reciprocal() * other, to float32:
 * float8_utils.py), and under the row-wise recipes, whose
 * round_scales_to_power_of_2 is on (config.py), log2, floor and exp2;
 * then _ToFloat8ConstrFunc's x.to(float32) * scale and to_fp8_saturated's
 * clamp and .to(float8) (2 + 4, 4 + 4, 4 + 4 and 4 + 1 B:
 * float8_training_tensor.py): 33 B an element in 11 kernels, 14 rounded
 * (torchao 0.9 and later). */
#define TORCHAO_EAGER_CAST_BYTES 33.0
#define TORCHAO_EAGER_CAST_KERNELS 11
#define TORCHAO_ROUND_SCALE_KERNELS 3
/* preprocess_addmm's copy of an FP8 operand into the layout _scaled_mm
 * takes (.contiguous(), .t().contiguous().t(): float8_ops.py), 1 B read
 * and 1 B written: the weight and the output's gradient in backward, and
 * the input for the weight gradient. */
#define TORCHAO_LAYOUT_COPY_BYTES 2.0
/* A row-wise GEMM without fast accumulation (the backward GEMMs of the
 * row-wise recipes: gemm_config_grad_input and _grad_weight keep
 * use_fast_accum off) runs the tensor-wise kernel with unit scales and
 * scales its output after (addmm_float8_unwrapped, float8_ops.py): two
 * new_ones, the outer product of the inverse scales into an fp32 tensor
 * of the output's shape (4 B an element written) and the 16-bit output
 * multiplied by it in place (2 + 4 + 2 B): 12 B an output element in 4
 * kernels; compiled, the product and the multiply are one pointwise
 * kernel reading and writing the output (2 + 2 B), which torchao's
 * roofline leaves out. */
#define TORCHAO_EAGER_POST_SCALE_BYTES 12.0
#define TORCHAO_EAGER_POST_SCALE_KERNELS 4
#define TORCHAO_FUSED_POST_SCALE_BYTES 4.0

/* What torchao's float8 does to one tensor in a forward or a backward,
 * beside its GEMMs: eager casts, layout copies and, for the outputs of
 * row-wise backward GEMMs, post-scales (eager); compiled, the bytes and
 * kernels of torchao's roofline of a compiled graph
 * (torchao/testing/training/roofline_utils.py,
 * get_tensor_memory_traffic_ovhd_s per recipe). */
typedef struct torchao_work {
  double casts, copies;   /* eager: casts and layout copies */
  double fused_bytes;     /* compiled: bytes an element */
  unsigned fused_kernels; /* compiled: kernels */
  unsigned scale_kernels; /* eager: kernels on its scales beside the
                             casts' (gw_hp's repeat of the weight's
                             tensor-wise scale to a row of scales,
                             float8_ops.py preprocess_addmm) */
} torchao_work;

/* The tensors each recipe handles, per module (the input shared by an
 * op's modules, which compiled casts once: AOTAutograd's CSE), forward
 * then backward. Tensor-wise: the input cast, again for the weight
 * gradient with a layout copy; compiled, 6 B in 3 kernels each time (an
 * amax pass reading 2 B, its second stage, one kernel writing both
 * layouts); the output's gradient cast for each backward GEMM and copied
 * for the weight gradient's, compiled once (6 B in 3 kernels); the weight
 * cast forward and backward with a copy, compiled 5 B in 3 kernels, then
 * 3 B in 1. Row-wise: the same casts along the GEMMs' dimensions
 * (float8_linear.py matmul_with_hp_or_float8_args); compiled, the input
 * 5 B forward (fp8 and a transposed 16-bit copy) and 3 B backward, a
 * kernel each, the gradient 8 B in 2, the weight 3 B in 1, then a 16-bit
 * transpose and a cast, 7 B in 2. With the weight gradient in 16 bits
 * (rowwise_with_gw_hp): nothing of the input in backward; the gradient
 * cast once (3 B in 1 compiled); the weight cast tensor-wise for the
 * input gradient and copied (compiled: 3 B forward in 1 kernel, a scale
 * kernel and 3 B backward). */
enum { TA_INPUT, TA_GRAD, TA_WEIGHT, TA_TENSORS };
static const torchao_work torchao_recipe[3][SB_PASSES][TA_TENSORS] = {
    [VS_FP8_TENSORWISE] = {{{1, 0, 6, 3}, {0, 0, 0, 0}, {1, 0, 5, 3}},
                           {{1, 1, 6, 3}, {2, 1, 6, 3}, {1, 1, 3, 1}}},
    [VS_FP8_ROWWISE] = {{{1, 0, 5, 1}, {0, 0, 0, 0}, {1, 0, 3, 1}},
                        {{1, 1, 3, 1}, {2, 1, 8, 2}, {1, 1, 7, 2}}},
    [VS_FP8_ROWWISE_GW_HP] = {{{1, 0, 3, 1}, {0, 0, 0, 0}, {1, 0, 3, 1}},
                              {{0, 0, 0, 0}, {1, 0, 3, 1}, {1, 1, 3, 2, 1}}},
};

/* What tensor `which` (TA_*) of `elems` elements a module costs under the
 * recipe for n modules: each its own, or the op's input, which each
 * module casts eagerly and a compiled graph once, in `pass`. */
static vs_side_work torchao_tensor(const builder *b, int which, sb_pass pass,
                                   double elems, double n)
{
  const torchao_work *w =
      &torchao_recipe[b->wl->training.fp8_recipe][pass][which];
  double compiled = which == TA_INPUT ? 1 : n;
  unsigned kernels = TORCHAO_EAGER_CAST_KERNELS +
                     (b->wl->training.fp8_recipe == VS_FP8_TENSORWISE
                          ? 0
                          : TORCHAO_ROUND_SCALE_KERNELS);
  if (b->wl->training.kernels != VS_KERNELS_EAGER)
    return (vs_side_work){compiled * elems * w->fused_bytes,
                          (unsigned)compiled * w->fused_kernels};
  return (vs_side_work){
      n * elems *
          (w->casts * TORCHAO_EAGER_CAST_BYTES +
           w->copies * TORCHAO_LAYOUT_COPY_BYTES),
      (unsigned)(n * (w->casts * kernels + w->copies + w->scale_kernels))};
}

static void add_work_to(vs_side_work *to, vs_side_work w)
{
  to->bytes += w.bytes;
  to->kernels += w.kernels;
}

/* The post-scales of torchao's row-wise backward GEMMs (their outputs:
 * `in` input-gradient and `weights` weight-gradient elements) of n
 * modules; none tensor-wise, and none of the weight gradient's in 16
 * bits. */
static vs_side_work torchao_post_scales(const builder *b, double in,
                                        double weights, double n)
{
  int recipe = b->wl->training.fp8_recipe;
  double out = recipe == VS_FP8_TENSORWISE      ? 0.0
               : recipe == VS_FP8_ROWWISE_GW_HP ? n * in
                                                : n * in + weights;
  unsigned gemms = recipe == VS_FP8_TENSORWISE      ? 0
                   : recipe == VS_FP8_ROWWISE_GW_HP ? 1
                                                    : 2;
  if (b->wl->training.kernels != VS_KERNELS_EAGER)
    return (vs_side_work){out * TORCHAO_FUSED_POST_SCALE_BYTES,
                          (unsigned)n * gemms};
  return (vs_side_work){out * TORCHAO_EAGER_POST_SCALE_BYTES,
                        (unsigned)n * gemms * TORCHAO_EAGER_POST_SCALE_KERNELS};
}

/* The input's casts of torchao linear op o (n modules, each reading the
 * op's input) in `pass` (torchao_tensor). Over
 * tp ranks torchtitan's tensor-wise float8 plan casts the input once
 * before the linears, on each rank's part (an input the op gathers: its
 * shard), and saves it in FP8 (vs_block_fp8_copies): backward only copies
 * it into the weight gradient's layout, eagerly. */
static vs_side_work torchao_input_casts(const builder *b, const vs_op_spec *o,
                                        double n, sb_pass pass)
{
  bool eager = b->wl->training.kernels == VS_KERNELS_EAGER;
  bool tp = vs_workload_fp8_tp_plan(&b->wl->training, b->lay->tp);
  double in = (double)o->gemm.batch * (double)o->gemm.m * (double)o->gemm.k;
  double local = o->fwd_before.kind == VS_COLL_ALL_GATHER
                     ? in / (double)b->lay->group_size[o->fwd_before.group]
                     : in;
  if (tp && pass == SB_FORWARD)
    return torchao_tensor(b, TA_INPUT, SB_FORWARD, local, 1);
  if (tp)
    return eager
               ? (vs_side_work){n * in * TORCHAO_LAYOUT_COPY_BYTES, (unsigned)n}
               : (vs_side_work){0, 0};
  return torchao_tensor(b, TA_INPUT, pass, in, n);
}

/* The output gradients' casts of torchao linear op o (n modules, out
 * elements of output all told) in backward (torchao_tensor). Over tp
 * ranks torchtitan's tensor-wise float8 plan casts each once in the
 * output's own backward (NoopFwToFloat8BwDynamic in _prepare_output_fn),
 * on the rank's part (a row-parallel output it reduce-scatters: the
 * sequence shard, whose FP8 gradient is then gathered), and the linear
 * casts none (tensor_already_casted_to_fp8), only copying the gradient
 * into the weight gradient's layout eagerly. */
static vs_side_work torchao_grad_casts(const builder *b, const vs_op_spec *o,
                                       double n, double out)
{
  bool eager = b->wl->training.kernels == VS_KERNELS_EAGER;
  bool tp = vs_workload_fp8_tp_plan(&b->wl->training, b->lay->tp);
  double local = o->fwd_after.kind == VS_COLL_REDUCE_SCATTER
                     ? out / (double)b->lay->group_size[o->fwd_after.group]
                     : out;
  if (!tp)
    return torchao_tensor(b, TA_GRAD, SB_BACKWARD, out / n, n);
  if (!eager)
    return torchao_tensor(b, TA_GRAD, SB_BACKWARD, local / n, n);
  /* one cast, where the plan leaves each module two */
  return (vs_side_work){local * TORCHAO_EAGER_CAST_BYTES +
                            out * TORCHAO_LAYOUT_COPY_BYTES,
                        (unsigned)n * (TORCHAO_EAGER_CAST_KERNELS + 1)};
}

/* torchao's casts of op k of inst's block (fp8_casts) in phase `which`,
 * per nn.Linear module (each weight matrix of the op; torchtitan's wq, wk
 * and wv read one input, w1 and w3 another): float8_linear.py's
 * matmul_with_hp_or_float8_args casts the input (torchao_input_casts) and
 * the weight in every forward (a recompute too); backward casts the
 * output's gradient (torchao_grad_casts) and the weight again for the
 * input gradient, and for the weight gradient the saved input
 * (cast_config_*_for_grad_weight), whether or not the weight trains (its
 * backward has no needs_input_grad test: the recipe keeps its weight
 * gradient), as [training] fp8_recipe says (torchao_recipe), with the
 * row-wise GEMMs' post-scales. What the compiled graph saves is the
 * partitioner's choice, not verified, so vsim keeps the Function's (the
 * 16-bit input). */
static vs_side_work torchao_casts(const builder *b, size_t inst, uint32_t k,
                                  phase_time which)
{
  vs_side_work w = {0, 0};
  const vs_block *blk = sb_block_of(b, inst);
  const vs_op_spec *o = &blk->ops[k];
  sb_pass pass =
      which == TIME_BWD || which == TIME_BWD_FRESH ? SB_BACKWARD : SB_FORWARD;
  double out = (double)o->gemm.batch * (double)o->gemm.m * (double)o->gemm.n;
  double in = (double)o->gemm.batch * (double)o->gemm.m * (double)o->gemm.k;
  double weights = 0, n = 0;
  for (uint32_t p = o->first_param; p < o->first_param + o->n_params; p++) {
    const vs_param_tensor *pt = &blk->params[p];
    if (vs_param_matrix(pt)) {
      weights += (double)pt->rows * (double)pt->cols;
      n++;
    }
  }
  if (which == TIME_RECOMPUTE && !(o->recompute_share > 0))
    return w;
  if (n == 0)
    return w;
  add_work_to(&w, torchao_tensor(b, TA_WEIGHT, pass, weights / n, n));
  if (pass == SB_BACKWARD) {
    add_work_to(&w, torchao_grad_casts(b, o, n, out));
    add_work_to(&w, torchao_post_scales(b, in, weights, n));
  }
  add_work_to(&w, torchao_input_casts(b, o, n, pass));
  return w;
}

/* Under fp8, the quantization kernels of op k of inst's block, a linear
 * of the FP8 library (a matmul with weights, not no_fp8: its library's
 * own, vs_workload_fp8_lib), in phase `which`. */
static vs_side_work fp8_casts(const builder *b, size_t inst, uint32_t k,
                              phase_time which)
{
  vs_side_work none = {0, 0};
  const vs_op_spec *o;
  if (precision(b) != VS_PREC_FP8)
    return none;
  o = &sb_block_of(b, inst)->ops[k];
  if (!vs_op_fp8_linear(o))
    return none;
  return vs_workload_fp8_lib(precision(b), b->wl->training.framework) ==
                 VS_FP8_TORCHAO
             ? torchao_casts(b, inst, k, which)
             : te_casts(b, inst, k, which);
}

/* Op k of inst's block: its time in phase `which`, computed once for the
 * block's kind (every micro-batch and layer of a kind runs the same ops). */
static const op_split *op_time(builder *b, size_t inst, uint32_t k,
                               phase_time which)
{
  op_split *slot = &b->op_time[(b->kind_first[b->m->inst_kind[inst]] + k) *
                                   TIME_PHASES +
                               which];
  if (isnan(slot->s[0])) {
    const vs_op_spec *o = &sb_block_of(b, inst)->ops[k];
    const vs_kind_plan *plan = sb_plan_of(b, inst);
    vs_side_work fp8 = fp8_casts(b, inst, k, which);
    *slot = which == TIME_FWD || which == TIME_FWD_WEIGHTS
                ? fwd_split(b, o, 1.0)
            : which == TIME_RECOMPUTE
                ? fwd_split(b, o, o->recompute_share)
                : bwd_split(b, o, plan->bwd_flops[k], plan->bwd_bytes[k],
                            plan->wgrad_share[k],
                            grad_accumulation(b, inst, k,
                                              which == TIME_BWD_FRESH)
                                .work);
    add_side(b, slot, fp8.bytes, fp8.kernels);
  }
  return slot;
}

static void add_split(double *to, const op_split *x)
{
  for (int i = 0; i < VS_BOUND_SPLIT_N; i++)
    to[i] += x->s[i];
}

/* A compute-stream op of time t (split by bound, which the program sums)
 * doing flops and bytes, of kind known - 1 (0: found by its key). */
static uint32_t bound_op(builder *b, int phase, const char *name, int layer,
                         int mb, double flops, double bytes, const op_split *t,
                         uint32_t known)
{
  op_cost c = {.seconds = sb_split_total(t),
               .flops = flops,
               .bytes = bytes,
               .split = t,
               .known_kind = known};
  add_split(b->p->bound_seconds, t);
  return sb_append_op(b, VS_STREAM_COMPUTE, phase, name, layer, mb, &c);
}

/* sb_compute_op, of kind known - 1 (0: found by its key). */
static uint32_t compute_op(builder *b, int phase, const char *name, int layer,
                           int mb, double flops, double bytes,
                           const op_split *t, uint32_t known)
{
  uint32_t op = bound_op(b, phase, name, layer, mb, flops, bytes, t, known);
  if (b->recv_op != NONE) {
    /* the received tensor becomes this op's input: freed as the op's own
     * saved copy appears (forward) or once its gradient is used (backward) */
    sb_free_on(b, op, b->recv_buf, (effect_time)b->recv_free_when);
    b->recv_op = NONE;
    b->recv_waited = false;
  }
  return op;
}

/* A compute op of time t doing flops and bytes. */
uint32_t sb_compute_op(builder *b, int phase, const char *name, int layer,
                       int mb, double flops, double bytes,
                       const op_split *t)
{
  return compute_op(b, phase, name, layer, mb, flops, bytes, t, 0);
}

/* Op k of inst's block in phase `which` (op_time) for micro-batch mb, as
 * sb_compute_op makes it, its kind remembered (builder kind_memo): the
 * same name, layer, work and time in every micro-batch. A block of
 * another stage (a schedule bug live() reports) has no memo. */
static uint32_t block_op(builder *b, int phase, size_t inst, uint32_t k,
                         phase_time which, int mb, double flops,
                         double bytes)
{
  uint32_t row = b->stage_inst[inst], none = NONE;
  uint32_t *memo = row == NONE ? &none
                               : &b->kind_memo[((size_t)row * b->memo_ops +
                                                k) * TIME_PHASES + which];
  /* a remembered kind has its work already: the FP8 casts' bytes are
   * needed only to make it */
  double casts = *memo == NONE ? fp8_casts(b, inst, k, which).bytes : 0.0;
  uint32_t op = compute_op(b, phase, sb_block_of(b, inst)->ops[k].name,
                           sb_layer_of(inst), mb, flops, bytes + casts,
                           op_time(b, inst, k, which),
                           *memo == NONE ? 0 : *memo + 1);
  if (op != NONE)
    *memo = b->p->ops[op].kind;
  return op;
}

/* A collective over `group` as the layout places it on the topology. */
static double group_seconds(const builder *b, int group, int kind,
                            uint64_t bytes)
{
  return vs_cost_group_seconds(b->topo, kind, bytes, b->lay->group_size[group],
                               b->lay->group_span[group], &b->p->cal_seen);
}

/* An op's collective's time, remembered. */
static double op_comm_seconds(builder *b, const vs_comm *c)
{
  bool hit;
  time_memo *m;
  if (c->kind == VS_COLL_NONE || b->lay->group_size[c->group] <= 1)
    return 0.0;
  m = memo_slot(b, (uint64_t)c->kind | (uint64_t)c->group << 4, c->bytes, &hit);
  if (!hit)
    m->seconds = group_seconds(b, c->group, c->kind, c->bytes);
  return m->seconds;
}

/* Collective c of a layer's work, named `name`, on the stream the recipe
 * gives such collectives. */
uint32_t sb_comm_op(builder *b, const vs_comm *c, const char *name,
                    int layer, int mb)
{
  return sb_new_op(b, b->r->comm[VS_USE_OP].stream,
                   c->group == VS_GROUP_EP   ? VS_PHASE_EP_COMM
                   : c->group == VS_GROUP_CP ? VS_PHASE_CP_COMM
                                             : VS_PHASE_TP_COMM,
                   name, layer, mb, op_comm_seconds(b, c), 0.0,
                   (double)c->bytes);
}

/* An op's own collective (tensor parallelism). */
static void op_comm(builder *b, const vs_comm *c, int layer, int mb)
{
  if (c->kind != VS_COLL_NONE)
    sb_comm_op(b, c, vs_coll_op_name(c->group, c->kind), layer, mb);
}

/* A step-level collective of `use` on its stream, over `group`. */
static uint32_t group_comm(builder *b, int use, int group, const char *name,
                           int kind, uint64_t bytes, int layer, int mb)
{
  double t = group_seconds(b, group, kind, bytes);
  return sb_new_op(b, b->r->comm[use].stream, VS_PHASE_DP_COMM, name, layer, mb,
                   t, 0.0, (double)bytes);
}

/* A step-level collective of `use` (its stream and group from the recipe). */
static uint32_t use_comm(builder *b, int use, const char *name, int kind,
                         uint64_t bytes, int layer, int mb)
{
  return group_comm(b, use, b->r->comm[use].group, name, kind, bytes, layer,
                    mb);
}

/* use_comm of `bytes` once `after` has ended, of which `expert` (the
 * routed experts' states, when they have groups of their own: ep > 1 or
 * etp other than tp) go over the expert-data-parallel
 * group instead, after the rest (and nowhere when that group is one
 * GPU), shown at `layer` (a bucket's, or -1). Returns the last op (`after`
 * when there is none). */
uint32_t sb_split_comm(builder *b, int use, const char *name, int kind,
                       uint64_t bytes, uint64_t expert, int layer, int mb,
                       uint32_t after)
{
  uint32_t op = after;
  if (!b->lay->experts_apart)
    expert = 0;
  if (bytes > expert && b->lay->group_size[b->r->comm[use].group] > 1) {
    op = use_comm(b, use, name, kind, bytes - expert, layer, mb);
    sb_add_dep(b, op, after);
  }
  if (expert && b->lay->group_size[VS_GROUP_EXPERT_DP] > 1) {
    uint32_t edp = group_comm(b, use, VS_GROUP_EXPERT_DP,
                              vs_coll_op_name(VS_GROUP_EXPERT_DP, kind), kind,
                              expert, layer, mb);
    sb_add_dep(b, edp, op);
    op = edp;
  }
  return op;
}

/* ------------------------------------------------------------------------
 * ZeRO-3 parameter gathers
 * ------------------------------------------------------------------------ */

/* A copy of `amount` bytes through PCIe resource res, on the pinned
 * curve whose fit gave the resource its rate (when one did), so that a
 * copy outside the sizes it was measured at is told (vs_cal_warn_range). */
static void note_pcie_copy(builder *b, int res, uint64_t amount)
{
  int kind = res == VS_RES_PCIE_SWITCH ? VS_CAL_H2D_PINNED
             : res == VS_RES_PCIE_D2H  ? VS_CAL_D2H_PINNED
                                       : -1;
  if (kind >= 0 && b->topo->fit_parts[kind])
    vs_cal_seen_add(&b->p->cal_seen, kind, (double)amount);
}

/* The most bytes/s a copy of `amount` bytes through PCIe resource res
 * moves at, its host side held as `host` says (0: no cap). */
static double copy_cap(builder *b, int res, uint64_t amount, host_side host)
{
  if (host == HOST_PINNED || (host == HOST_STATES && !b->r->offload.pageable) ||
      (res != VS_RES_PCIE_SWITCH && res != VS_RES_PCIE_D2H))
    return 0;
  return vs_topology_pageable_rate(b->topo,
                                   res == VS_RES_PCIE_D2H ? VS_CAL_D2H_PAGEABLE
                                                          : VS_CAL_H2D_PAGEABLE,
                                   (double)amount, &b->p->cal_seen);
}

/* An offload op: `amount` bytes (parameters, for the cpu) through one
 * instance of resource kind res, on stream, once `after` and `also` (NONE:
 * nothing) have ended; the resource decides its time as it runs, at most
 * at a pageable host side's rate (copy_cap). Without an amount there is
 * no op: `after` is returned. */
static uint32_t offload_op_after(builder *b, int stream, int res,
                                 const char *name, int layer, int mb,
                                 uint64_t amount, uint32_t after, uint32_t also,
                                 host_side host)
{
  op_cost c = {.bytes = (double)amount, .res = res};
  uint32_t op;
  if (amount == 0)
    return after;
  /* copies and NVMe swaps land in (or leave) host memory */
  c.via = res != VS_RES_CPU && b->topo->host_memory_bandwidth > 0
              ? VS_RES_HOST_MEMORY
              : 0;
  c.max_rate = copy_cap(b, res, amount, host);
  op = sb_append_op(b, stream, VS_PHASE_OFFLOAD, name, layer, mb, &c);
  note_pcie_copy(b, res, amount);
  sb_add_dep(b, op, after);
  sb_add_dep(b, op, also);
  return op;
}

/* An offload op: `amount` bytes (parameters, for the cpu) through one
 * instance of resource kind res, on stream, once `after` has ended; the
 * resource decides its time as it runs. */
uint32_t sb_offload_op(builder *b, int stream, int res, const char *name,
                       int layer, int mb, uint64_t amount, uint32_t after)
{
  return offload_op_after(b, stream, res, name, layer, mb, amount, after, NONE,
                          HOST_PINNED);
}

/* A copy of `amount` bytes between the GPU and the host through PCIe
 * resource res, on stream, once `after` has ended, its host side held as
 * `host` says: an offload op. */
uint32_t sb_copy_op(builder *b, int stream, int res, const char *name,
                    int layer, int mb, uint64_t amount, uint32_t after,
                    host_side host)
{
  return offload_op_after(b, stream, res, name, layer, mb, amount, after, NONE,
                          host);
}

/* A copy between the GPU and the host buffers of the offloaded states or
 * parameters: sb_copy_op whose host side may be pageable
 * (vs_offload_plan pageable). */
uint32_t sb_states_copy(builder *b, int stream, int res, const char *name,
                        int layer, int mb, uint64_t amount, uint32_t after)
{
  return sb_copy_op(b, stream, res, name, layer, mb, amount, after,
                    HOST_STATES);
}

/* Parameters off the GPU: the block's partition of `part` bytes comes in
 * (from NVMe to the host's pinned swap buffers first, when it lives
 * there; else from its host buffer) once `after` has ended; returns the
 * op that brings it. */
static uint32_t fetch_partition(builder *b, size_t inst, int mb, uint64_t part,
                                uint32_t after)
{
  int layer = sb_layer_of(inst);
  if (b->r->params.place == VS_PLACE_NVME)
    after = sb_offload_op(b, VS_STREAM_H2D, VS_RES_NVME, "param_swap_in", layer,
                          mb, part, after);
  return sb_copy_op(b, VS_STREAM_H2D, VS_RES_PCIE_SWITCH, "param_to_gpu", layer,
                    mb, part, after, sb_states_side(b->r->params.place));
}

/* Where a block's all-gathered parameters land. */
typedef enum { GATHER_INTO_PARAMS, GATHER_INTO_FLAT } gather_target;

/* FSDP2's all-gather inputs of inst once they are on the GPU, made as
 * coll (the all-gather) starts, before its output: foreach_all_gather
 * makes them on its copy-in stream (_get_param_all_gather_inputs'
 * flat_foreach_copy_input, a flat copy of the fp32 shards cast to the
 * 16-bit dtype: the shard of the bytes the cast drops, stored_param_bytes
 * less param_bytes), then the output, copies them into it
 * (all_gather_copy_in) and drops them as the all-gather is issued: the
 * caller frees the returned buffer as coll starts, once the output is
 * made, into the copy-in stream's pool, which only that stream read them
 * from. NONE where there is no cast. */
static uint32_t cast_inputs(builder *b, size_t inst, uint32_t coll)
{
  const vs_kind_plan *k = sb_plan_of(b, inst);
  uint32_t buf;
  if (!b->r->gather_copy_out || k->stored_param_bytes <= k->param_bytes)
    return NONE;
  buf = sb_buffer_made_on(
      b, vs_recipe_shard(&b->r->params, k->stored_param_bytes - k->param_bytes),
      VS_CAT_TEMP, VS_MADE_ON_GATHER);
  sb_alloc_on(b, coll, buf);
  return buf;
}

/* Brings inst's parameters whole onto the GPU once `after` has ended (so
 * at most two blocks are gathered at a time): its partition copied in, as
 * stored (FSDP2's fp32 shards, 4 B a parameter; ZeRO-3's 16-bit ones),
 * when it lives off the GPU, then all-gathered on the comm stream when
 * there are data-parallel peers, into FSDP2's flat buffer (GATHER_INTO_
 * FLAT: copied out as the block's pass starts), else straight into the
 * parameters as the all-gather ends. What the gather makes comes from
 * the pool of the recipe's gather_made_on, but the parameters FSDP2
 * copies out of its flat buffer (the compute stream's). */
static void gather_into(builder *b, size_t inst, int mb, uint32_t after,
                        gather_target target)
{
  bool flat = target == GATHER_INTO_FLAT;
  uint64_t bytes = sb_plan_of(b, inst)->param_bytes;
  const vs_comm_plan *u = &b->r->comm[VS_USE_PARAM_GATHER];
  bool peers = b->lay->dp > 1;
  int made_on = b->r->gather_made_on;
  uint32_t op = after, part_buf = NONE;

  if (!b->r->gather_params || bytes == 0 || b->gather_op[inst] != NONE)
    return;
  if (b->r->offload.fetch_params) {
    uint64_t stored =
        vs_recipe_shard(&b->r->params, sb_plan_of(b, inst)->stored_param_bytes);
    op = fetch_partition(b, inst, mb, stored, op);
    if (peers) {
      part_buf = sb_buffer_made_on(b, stored, VS_CAT_TEMP, made_on);
      sb_alloc_on(b, op, part_buf);
    }
  }
  if (peers) {
    double t = group_seconds(b, u->group, VS_COLL_ALL_GATHER, bytes);
    uint32_t coll = sb_new_op(b, u->stream, VS_PHASE_DP_COMM,
                              "zero3_all_gather", sb_layer_of(inst), mb, t,
                              0.0, (double)bytes);
    sb_add_dep(b, coll, op);
    sb_free_on(b, coll, part_buf, AT_END);
    op = coll;
  }
  if (flat && peers) {
    /* FSDP2: the all-gather fills a flat buffer; the block's parameters
     * are copied out of it when its pass starts (before_pass) */
    uint32_t cast = cast_inputs(b, inst, op);
    b->gather_buf[inst] = sb_new_buffer(b, bytes, VS_CAT_TEMP);
    b->flat_buf[inst] = sb_buffer_made_on(b, bytes, VS_CAT_TEMP, made_on);
    sb_alloc_on(b, op, b->flat_buf[inst]);
    sb_free_on(b, op, cast, AT_START);
  } else {
    b->gather_buf[inst] = sb_buffer_made_on(b, bytes, VS_CAT_TEMP, made_on);
    sb_alloc_on(b, op, b->gather_buf[inst]);
  }
  b->gather_op[inst] = op;
  b->gathered_elems += sb_plan_of(b, inst)->param_elems;
}

static void gather(builder *b, size_t inst, int mb, uint32_t after)
{
  gather_into(b, inst, mb, after,
              b->r->gather_copy_out ? GATHER_INTO_FLAT : GATHER_INTO_PARAMS);
}

/* Frees the flat buffers a forward pass kept (all_gather_state) when op
 * starts or ends. */
static void free_kept_flats(builder *b, uint32_t op, effect_time when)
{
  for (int i = 0; i < 2; i++) {
    sb_free_on(b, op, b->last_flat[i], when);
    b->last_flat[i] = NONE;
  }
}

/* FSDP2's copy-out as inst's pass starts (_fsdp_param_group.py
 * wait_for_unshard, foreach_all_gather_copy_out): one kernel on the
 * compute stream, once the all-gather has ended, reads the flat buffer
 * and writes the block's unsharded parameters, which it makes; the root
 * unit's copies both its blocks out at once. In a forward pass it frees
 * the previous flat buffers as it starts and keeps its own
 * (all_gather_state) until the next copy-out or the model's forward ends
 * (sb_forward_done); in a backward pass it frees them as it ends
 * (wait_for_unshard keeps a result only in FORWARD). */
static void copy_out(builder *b, size_t inst, sb_pass pass, int mb)
{
  size_t with = sb_in_root_unit(b, inst) ? b->n_inst - 1 - inst : inst;
  uint32_t flats[2] = {b->flat_buf[inst],
                       with != inst ? b->flat_buf[with] : NONE};
  double bytes = 0;
  op_split t;
  uint32_t op;
  if (flats[0] == NONE)
    return;
  for (int i = 0; i < 2; i++)
    if (flats[i] != NONE)
      bytes += 2.0 * (double)vs_program_buffer(b->p, flats[i])->bytes;
  t = sb_roofline_split(b, 0.0, bytes);
  sb_add_launch(b, &t, 1);
  op = bound_op(b, pass == SB_BACKWARD ? VS_PHASE_BWD : VS_PHASE_FWD,
                "fsdp_copy_out", sb_layer_of(inst), mb, 0.0, bytes, &t, 0);
  sb_alloc_on(b, op, b->gather_buf[inst]);
  if (flats[1] != NONE)
    sb_alloc_on(b, op, b->gather_buf[with]);
  b->flat_buf[inst] = b->flat_buf[with] = NONE;
  free_kept_flats(b, op, AT_START);
  for (int i = 0; i < 2; i++) {
    if (pass == SB_BACKWARD)
      sb_free_on(b, op, flats[i], AT_END);
    else
      b->last_flat[i] = flats[i];
  }
}

/* The model's forward has ended, or the pass over the stage's chunk:
 * FSDP2's root post-forward frees the all-gather results it kept
 * (_fsdp_state.py _root_post_forward: all_gather_state = None), as the
 * newest op ends (effects go to the newest op only). */
void sb_forward_done(builder *b)
{
  if (b->p->n_ops > 0)
    free_kept_flats(b, (uint32_t)(b->p->n_ops - 1), AT_END);
}

/* Whether inst belongs to FSDP2's root unit (recipe root_kept): the
 * embedding and the head of a model without pipeline stages. */
bool sb_in_root_unit(const builder *b, size_t inst)
{
  return b->r->root_kept && (inst == 0 || inst + 1 == b->n_inst);
}

/* ------------------------------------------------------------------------
 * DeepSpeed's ZeRO-3 coordinator (runtime/zero/partitioned_param_
 * coordinator.py; recipe gather_live_elems), block by block. A
 * micro-batch's trace is its blocks' forward passes, then their backward
 * ones (reset_step starts it over at each forward). Before each pass the
 * block is gathered, then the queue of the trace's next blocks is
 * prefetched while fewer than gather_live_elems elements are gathered;
 * the check comes before each block, which may overshoot the limit by a
 * block where DeepSpeed's, made per parameter, overshoots by a parameter.
 * After its forward a block stays gathered when its backward is within
 * gather_reuse_elems elements of passes, or when the prefetch has met it
 * there already (__params_to_release).
 * ------------------------------------------------------------------------ */

static bool coordinated(const builder *b) { return b->r->gather_traced; }

/* Positions in the trace of the chunk being built. */
static uint32_t trace_len(const builder *b)
{
  return 2 * (uint32_t)(b->unit_last - b->unit_first + 1);
}

/* The position of inst's `pass`. */
static uint32_t trace_at(const builder *b, size_t inst, sb_pass pass)
{
  return pass == SB_BACKWARD
             ? trace_len(b) - 1 - (uint32_t)(inst - b->unit_first)
             : (uint32_t)(inst - b->unit_first);
}

/* The inst whose pass is at trace position x: false where that pass does
 * not run (a frozen prefix's backward). */
static bool trace_inst(const builder *b, uint32_t x, size_t *inst)
{
  uint32_t n = trace_len(b) / 2;
  *inst = x < n ? b->unit_first + x : b->unit_last - (x - n);
  return x < n || !sb_plan_of(b, *inst)->no_backward;
}

/* Whether inst is a head whose output weight is the embedding's (tied,
 * on one stage): DeepSpeed's trace fetches that parameter at the head's
 * passes too, which vsim does with the embedding's block (inst 0). */
static bool head_ties(const builder *b, size_t inst)
{
  return coordinated(b) && b->wl->model.tied_embeddings &&
         b->wl->parallel.pp == 1 && b->unit_first == 0 && inst > 0 &&
         sb_block_of(b, inst)->role == VS_ROLE_HEAD &&
         sb_block_of(b, 0)->role == VS_ROLE_EMBED;
}

/* The elements the trace's pass of inst fetches: its block's, and the
 * embedding's at a head that ties it. */
static uint64_t pass_elems(const builder *b, size_t inst)
{
  return sb_plan_of(b, inst)->param_elems +
         (head_ties(b, inst) ? sb_plan_of(b, 0)->param_elems : 0);
}

/* A micro-batch's forward begins: its trace starts over. */
static void trace_reset(builder *b)
{
  for (size_t i = 0; i < b->n_inst; i++)
    b->scanned[i] = NONE;
  b->queue = 0;
}

/* The elements of inst's largest parameter tensor: DeepSpeed's largest
 * module's, near enough (a module fetches its own tensors). */
static uint64_t largest_tensor(const builder *b, size_t inst)
{
  const vs_block *blk = sb_block_of(b, inst);
  uint64_t most = 0;
  for (uint32_t i = 0; i < blk->n_params; i++) {
    uint64_t elems = blk->params[i].rows * blk->params[i].cols;
    if (elems > most)
      most = elems;
  }
  return most;
}

/* The room DeepSpeed's prefetch has at the pass at trace position now:
 * gather_live_elems less the elements gathered. DeepSpeed counts
 * modules, releasing each after its pass, so a block that alone fills
 * the window (as many elements as the limit, or more) still has the
 * window slide into the next block at its last module when its largest
 * tensor (a module's, near enough) fits the window: the block then
 * counts as one element short of the limit, and the next block is
 * prefetched whole (nothing further); when even that tensor does not
 * fit, the window has no room. The count never drops as the limit grows
 * past the block's size. */
static uint64_t prefetch_room(const builder *b, uint32_t now)
{
  uint64_t limit = b->r->gather_live_elems, own = 0, largest, counted;
  size_t inst;
  if (limit == 0)
    return 0;
  if (trace_inst(b, now, &inst) && b->gather_buf[inst] != NONE)
    own = sb_plan_of(b, inst)->param_elems;
  counted = b->gathered_elems - own;
  if (own < limit) {
    counted += own;
  } else {
    largest = largest_tensor(b, inst);
    counted += largest < limit ? limit - 1 : largest;
  }
  return counted < limit ? limit - counted : 0;
}

/* Before the pass at trace position now: the queue moves past it, and
 * its next blocks are gathered while what they add is under the room
 * (one round: the room is what was free as it began, those gathered
 * already passing at no cost). */
static void prefetch_trace(builder *b, uint32_t now, int mb)
{
  uint64_t room = prefetch_room(b, now), got = 0;
  if (b->queue <= now)
    b->queue = now + 1;
  while (b->queue < trace_len(b) && got < room) {
    size_t inst;
    uint32_t x = b->queue++;
    if (!trace_inst(b, x, &inst))
      continue;
    b->scanned[inst] = x;
    if (b->gather_buf[inst] == NONE) {
      gather(b, inst, mb, b->last_compute);
      got += sb_plan_of(b, inst)->param_elems;
    }
    if (head_ties(b, inst)) {
      b->scanned[0] = x;
      if (b->gather_buf[0] == NONE) {
        gather(b, 0, mb, b->last_compute);
        got += sb_plan_of(b, 0)->param_elems;
      }
    }
  }
}

/* The elements of the trace's passes strictly between positions from and
 * to, as DeepSpeed counts them, up to `limit`: a pass's block (and the
 * embedding a head ties), a backward's twice where the block re-runs its
 * forward first (the re-run is a pass of the trace too), nothing where a
 * block runs no backward. */
static uint64_t trace_between(const builder *b, uint32_t from, uint32_t to,
                              uint64_t limit)
{
  uint64_t sum = 0;
  for (uint32_t x = from + 1; x < to && sum < limit; x++) {
    size_t j;
    if (!trace_inst(b, x, &j))
      continue;
    sum += pass_elems(b, j) *
           (x >= trace_len(b) / 2 && sb_plan_of(b, j)->recompute_block ? 2 : 1);
  }
  return sum;
}

/* Whether the coordinator keeps inst gathered after its pass at trace
 * position `at` to its next use at `next`: the prefetch has met it past
 * `at` (DeepSpeed's step_id has moved past the module when it releases
 * it: a block whose next use comes next, the head's backward, counts as
 * met, as in a Hugging Face model, whose root module's backward hook
 * comes between the head's forward and backward), or fewer than
 * max_reuse_distance elements of passes lie between (__params_to_release).
 */
static bool used_again_soon(const builder *b, size_t inst, uint32_t at,
                            uint32_t next)
{
  uint64_t limit = b->r->gather_reuse_elems;
  if (b->scanned[inst] != NONE && b->scanned[inst] > at)
    return true;
  return trace_between(b, at, next, limit) < limit;
}

/* After a tying head's backward: whether the coordinator keeps the
 * embedding gathered to its own backward. */
static bool tied_kept(const builder *b, size_t head)
{
  if (sb_plan_of(b, 0)->no_backward)
    return false; /* a frozen prefix's embedding: no later use */
  return used_again_soon(b, 0, trace_at(b, head, SB_BACKWARD),
                         trace_at(b, 0, SB_BACKWARD));
}

/* Whether the coordinator keeps inst gathered from its forward to its
 * next use: its backward, or for the embedding a head ties, that head's
 * forward. */
static bool reused_soon(const builder *b, size_t inst)
{
  bool tied = inst == 0 && head_ties(b, b->unit_last);
  /* a frozen prefix's block has no later use, but a tied embedding has */
  if (sb_plan_of(b, inst)->no_backward && !tied)
    return false;
  return used_again_soon(b, inst, trace_at(b, inst, SB_FORWARD),
                         tied ? trace_at(b, b->unit_last, SB_FORWARD)
                              : trace_at(b, inst, SB_BACKWARD));
}

/* Whether inst's forward gather lasts to its backward: FSDP2's last
 * transformer block (recipe keep_last_gathered) and its root unit, and
 * what DeepSpeed's coordinator reuses. */
static bool kept_after_forward(const builder *b, size_t inst)
{
  return (b->r->keep_last_gathered && inst == (size_t)b->m->layers) ||
         sb_in_root_unit(b, inst) || (coordinated(b) && reused_soon(b, inst));
}

/* Whether inst's backward is the last of its chunk's pass: the block
 * before is outside the chunk or a frozen prefix, which runs none. */
static bool last_backward(const builder *b, size_t inst)
{
  return inst <= b->unit_first || sb_plan_of(b, inst - 1)->no_backward;
}

/* Before a block's `pass`: gather it (if not prefetched)
 * and prefetch the next block of the pass, or what DeepSpeed's
 * coordinator prefetches; the block's first compute op waits for its
 * gather. The root unit is gathered whole with its first block. */
static void before_pass(builder *b, size_t inst, sb_pass pass, int mb)
{
  bool backward = pass == SB_BACKWARD;
  if (!b->r->gather_params)
    return;
  if (coordinated(b) && !backward && inst == b->unit_first)
    trace_reset(b);
  gather(b, inst, mb, b->last_compute);
  if (head_ties(b, inst))
    gather(b, 0, mb, b->last_compute);
  if (sb_in_root_unit(b, inst)) /* its whole unit, copied out at once */
    gather_into(b, b->n_inst - 1 - inst, mb, b->last_compute,
                b->r->gather_copy_out ? GATHER_INTO_FLAT : GATHER_INTO_PARAMS);
  if (coordinated(b))
    prefetch_trace(b, trace_at(b, inst, pass), mb);
  else if (backward ? !last_backward(b, inst) : inst < b->unit_last)
    gather(b, backward ? inst - 1 : inst + 1, mb, b->last_compute);
  if (head_ties(b, inst))
    sb_wait_on(b, b->gather_op[0]);
  if (b->gather_op[inst] != NONE) {
    sb_wait_on(b, b->gather_op[inst]);
    copy_out(b, inst, pass, mb);
  }
}

/* inst's gathered params go when op starts or ends; the next pass
 * gathers them again. */
void sb_drop_gather(builder *b, size_t inst, uint32_t op,
                    effect_time when)
{
  if (b->gather_buf[inst] == NONE)
    return;
  sb_free_on(b, op, b->gather_buf[inst], when);
  b->gather_buf[inst] = NONE;
  b->gather_op[inst] = NONE;
  b->gathered_elems -= sb_plan_of(b, inst)->param_elems;
}

/* The block's last compute op of the pass releases its gathered params
 * (pipelined FSDP2 keeps them to its post-backward: schedule_grads.c
 * reshard_kept). */
static void release_gather(builder *b, size_t inst, uint32_t op)
{
  if (!b->r->pipelined_fsdp)
    sb_drop_gather(b, inst, op, AT_END);
}

/* FSDP2's root post-backward: the root unit's blocks are resharded as
 * op ends (recipe root_kept). */
static void release_root(builder *b, uint32_t op)
{
  release_gather(b, 0, op);
  release_gather(b, b->n_inst - 1, op);
}

/* ------------------------------------------------------------------------
 * Activation offload (Megatron-LM's --cpu-offloading, torchtune's
 * OffloadActivations): a layer's saved tensors go to the host after its
 * forward and come back before its backward, prefetched one layer ahead
 * ------------------------------------------------------------------------ */

/* Whether a later block of the model chunk being built is a checkpointed
 * layer. */
static bool checkpointed_after(const builder *b, size_t inst)
{
  for (size_t i = inst + 1; i <= b->unit_last; i++)
    if (sb_block_of(b, i)->role == VS_ROLE_LAYER &&
        sb_plan_of(b, i)->recompute_block)
      return true;
  return false;
}

/* Whether inst's saved tensors go to the host: transformer layers but the
 * model's last, whose backward follows at once (Megatron-LM offloads at
 * most num_layers - 1 layers); DeepSpeed's (recipe activations_on_demand)
 * the checkpointed ones but the chunk's last. */
static bool offloads_acts(const builder *b, size_t inst)
{
  if (!b->r->offload.activations ||
      sb_block_of(b, inst)->role != VS_ROLE_LAYER ||
      inst >= (size_t)b->m->layers)
    return false;
  return !b->r->offload.activations_on_demand ||
         (sb_plan_of(b, inst)->recompute_block && checkpointed_after(b, inst));
}

/* Bytes of inst's tensors kept from forward to backward: the saved ones
 * it keeps and, with full checkpointing, its input. */
static uint64_t kept_bytes(const builder *b, size_t inst)
{
  const vs_block *blk = sb_block_of(b, inst);
  const vs_kind_plan *plan = sb_plan_of(b, inst);
  uint64_t bytes = plan->recompute_block ? blk->ckpt_bytes : 0;
  for (uint32_t s = 0; s < blk->n_saved; s++)
    if (plan->keep[s] == VS_KEEP)
      bytes += saved_size(b, blk, s);
  return bytes;
}

/* After inst's forward of mb (its last op `after`): its kept tensors are
 * copied into one host buffer and leave the GPU once copied. */
static void acts_to_host(builder *b, size_t inst, int mb, uint32_t after)
{
  const vs_block *blk = sb_block_of(b, inst);
  uint64_t bytes = offloads_acts(b, inst) ? kept_bytes(b, inst) : 0;
  uint32_t op = sb_offload_op(b, VS_STREAM_D2H, VS_RES_PCIE_D2H,
                              "activations_to_host", sb_layer_of(inst), mb,
                              bytes, after);
  uint32_t host;
  if (op == after)
    return;
  host = sb_placed_buffer(b, bytes, VS_CAT_ACTIVATIONS, VS_PLACE_HOST);
  sb_alloc_on(b, op, host);
  b->act_host[live(b, inst, mb)] = host;
  b->act_out[live(b, inst, mb)] = op;
  for (uint32_t s = 0; s < blk->n_saved; s++)
    if (sb_plan_of(b, inst)->keep[s] == VS_KEEP)
      sb_free_on(b, op, *saved_slot(b, inst, s, mb), AT_END);
  sb_free_on(b, op, b->ckpt_buf[live(b, inst, mb)], AT_END);
}

/* Before inst's backward of mb: its tensors come back into fresh GPU
 * buffers (freed by the backward as usual) once `after` and the copy out
 * have ended; the host buffer is freed when the copy back ends. */
static void acts_to_gpu(builder *b, size_t inst, int mb, uint32_t after)
{
  const vs_block *blk = sb_block_of(b, inst);
  const vs_kind_plan *plan = sb_plan_of(b, inst);
  uint32_t *host = &b->act_host[live(b, inst, mb)];
  uint32_t op;
  if (!offloads_acts(b, inst) || *host == NONE || b->act_fetch[inst] != NONE)
    return;
  op = offload_op_after(b, VS_STREAM_H2D, VS_RES_PCIE_SWITCH,
                        "activations_to_gpu", sb_layer_of(inst), mb,
                        vs_program_buffer(b->p, *host)->bytes, after,
                        b->act_out[live(b, inst, mb)], HOST_PINNED);
  for (uint32_t s = 0; s < blk->n_saved; s++) {
    uint32_t *slot = saved_slot(b, inst, s, mb);
    if (plan->keep[s] != VS_KEEP)
      continue;
    *slot = sb_new_buffer(b, saved_size(b, blk, s), blk->saved[s].category);
    sb_alloc_on(b, op, *slot);
  }
  if (plan->recompute_block) {
    uint32_t *ckpt = &b->ckpt_buf[live(b, inst, mb)];
    *ckpt = sb_new_buffer(b, blk->ckpt_bytes, VS_CAT_ACTIVATIONS);
    sb_alloc_on(b, op, *ckpt);
  }
  sb_free_on(b, op, *host, AT_END);
  *host = NONE;
  b->act_fetch[inst] = op;
}

/* Before inst's backward: its tensors back (unless prefetched), the next
 * layer's prefetched, and the backward's first op waits for its own. */
static void before_backward_acts(builder *b, size_t inst, int mb)
{
  if (!b->r->offload.activations)
    return;
  acts_to_gpu(b, inst, mb, b->last_compute);
  if (inst > b->unit_first && !b->r->offload.activations_on_demand)
    acts_to_gpu(b, inst - 1, mb, b->last_compute);
  sb_wait_on(b, b->act_fetch[inst]);
  b->act_fetch[inst] = NONE;
}

/* ------------------------------------------------------------------------
 * Forward and backward of one block
 * ------------------------------------------------------------------------ */

/* Whether inst's saved tensor s is autocast's copy of a weight in a
 * checkpointed layer: not saved, but autocast's cache holds it from its
 * cast until the outermost autocast region exits, at the end of the
 * forward pass (autocast_mode.cpp; frameworks.md 1.2: the cache fills
 * under checkpointing too). */
static bool held_by_cache(const builder *b, size_t inst, uint32_t s)
{
  return sb_block_of(b, inst)->saved[s].weight_copy == VS_COPY_AUTOCAST &&
         sb_plan_of(b, inst)->keep[s] == VS_RECOMPUTE_BLOCK;
}

/* Op casts a weight of `bytes` into autocast's cache. */
static void cache_copy(builder *b, uint32_t op, uint64_t bytes)
{
  uint32_t buf = sb_new_buffer(b, bytes, VS_CAT_TEMP);
  if (!sb_grow(b, (void **)&b->cached, &b->cap_cached, b->n_cached + 1,
               sizeof *b->cached))
    return;
  b->cached[b->n_cached++] = buf;
  sb_alloc_on(b, op, buf);
}

/* The forward pass ends: autocast's cache is cleared. */
void sb_clear_cache(builder *b)
{
  for (size_t i = 0; i < b->n_cached; i++)
    sb_free_on(b, b->last_compute, b->cached[i], AT_END);
  b->n_cached = 0;
}

/* Whether inst's forward of micro-batch mb quantizes its weights to FP8
 * (fp8_casts): under fp8, in the first micro-batch where Transformer
 * Engine reuses the copies (the recipe's fp8_weight_cache), in every
 * forward elsewhere and in a block that runs no backward (which keeps no
 * copies past each GEMM: vs_layout). */
static bool quantizes_weights(const builder *b, size_t inst, int mb)
{
  return precision(b) == VS_PREC_FP8 &&
         (mb == 0 || !b->r->fp8_weight_cache ||
          sb_plan_of(b, inst)->no_backward);
}

void sb_forward_block(builder *b, size_t inst, int mb)
{
  const vs_block *blk = sb_block_of(b, inst);
  const vs_kind_plan *plan = sb_plan_of(b, inst);
  int layer = sb_layer_of(inst);
  bool full = plan->recompute_block;
  phase_time weights = quantizes_weights(b, inst, mb) ? TIME_FWD_WEIGHTS
                                                      : TIME_FWD;

  before_pass(b, inst, SB_FORWARD, mb);
  for (uint32_t k = 0; k < blk->n_ops; k++) {
    const vs_op_spec *o = &blk->ops[k];
    uint64_t fleeting = o->fwd_temp_bytes;
    uint32_t op;

    op_comm(b, &o->fwd_before, layer, mb);
    op = block_op(b, VS_PHASE_FWD, inst, k, weights, mb, o->fwd_flops,
                  o->fwd_bytes);
    if (b->r->root_kept && inst + 1 == b->n_inst && k == plan->output_op)
      sb_forward_done(b); /* the model's output: the loss is the loop's */
    if (k == 0 && full) {
      uint32_t *ckpt = &b->ckpt_buf[live(b, inst, mb)];
      hold(b, ckpt, sb_checkpoint_buffer(b, blk->ckpt_bytes));
      sb_alloc_on(b, op, *ckpt);
    }
    for (uint32_t s = o->first_saved; s < o->first_saved + o->n_saved; s++) {
      uint32_t *slot = saved_slot(b, inst, s, mb);
      if (plan->keep[s] == VS_KEEP) {
        hold(b, slot, sb_new_buffer(b, saved_size(b, blk, s),
                                    blk->saved[s].category));
        sb_alloc_on(b, op, *slot);
      } else if (held_by_cache(b, inst, s)) {
        cache_copy(b, op, saved_size(b, blk, s));
      } else {
        fleeting += saved_size(b, blk, s);
      }
    }
    sb_transients(b, op, fleeting, o->fwd_temp_first);
    if (k + 1 == blk->n_ops) {
      sb_allocate_held_output(b, inst, op);
      if (!kept_after_forward(b, inst)) {
        release_gather(b, inst, op);
        if (head_ties(b, inst)) /* its next use is the head's too */
          release_gather(b, 0, op);
      }
      acts_to_host(b, inst, mb, op);
    }
    op_comm(b, &o->fwd_after, layer, mb);
  }
}

/* Full checkpointing: re-runs the layer's forward (and its tp collectives),
 * re-creating every saved tensor as temp until its backward frees it. */
static void recompute_layer(builder *b, size_t inst, int mb)
{
  const vs_block *blk = sb_block_of(b, inst);
  double flops = 0, bytes = 0;
  op_split t = {{0}};
  uint32_t op;

  for (uint32_t k = 0; k < blk->n_ops; k++) {
    const vs_op_spec *o = &blk->ops[k];
    flops += o->recompute_share * o->fwd_flops;
    bytes += fwd_bytes_at(o, o->recompute_share) +
             fp8_casts(b, inst, k, TIME_RECOMPUTE).bytes;
    add_split(t.s, op_time(b, inst, k, TIME_RECOMPUTE));
    t.s[VS_BOUND_COMM] += op_comm_seconds(b, &o->fwd_before) +
                          op_comm_seconds(b, &o->fwd_after);
  }
  op = bound_op(b, VS_PHASE_RECOMPUTE, "recompute_layer", sb_layer_of(inst), mb,
                flops, bytes, &t, 0);
  if (sb_plan_of(b, inst)->recompute_reuses_kept) {
    /* op-level: the kept outputs are reused as the re-created tensors
     * (which count them below), not held beside them */
    uint32_t *ckpt = &b->ckpt_buf[live(b, inst, mb)];
    sb_free_on(b, op, *ckpt, AT_START);
    *ckpt = NONE;
  }
  for (uint32_t s = 0; s < blk->n_saved; s++) {
    uint32_t *slot = saved_slot(b, inst, s, mb);
    if (sb_plan_of(b, inst)->keep[s] == VS_NOT_SAVED)
      continue; /* its op's weights are frozen: never kept */
    hold(b, slot, sb_new_buffer(b, saved_size(b, blk, s), VS_CAT_TEMP));
    sb_alloc_on(b, op, *slot);
  }
}

/* Selective checkpointing: re-runs the attention core, with its
 * collectives (a flash kernel's context-parallel exchange), before its
 * backward, re-creating the dropped tensors (eager attention's s^2 ones,
 * a flash kernel's LSE) as one temp buffer. */
static void recompute_core(builder *b, size_t inst, int mb)
{
  const vs_block *blk = sb_block_of(b, inst);
  const vs_kind_plan *plan = sb_plan_of(b, inst);
  double flops = 0, bytes = 0;
  op_split t = {{0}};
  uint64_t dropped = 0;
  uint32_t op;

  for (uint32_t k = 0; k < blk->n_ops; k++) {
    const vs_op_spec *o = &blk->ops[k];
    if (!o->attn_core)
      continue;
    flops += o->fwd_flops;
    bytes += o->fwd_bytes;
    add_split(t.s, op_time(b, inst, k, TIME_FWD));
    t.s[VS_BOUND_COMM] +=
        op_comm_seconds(b, &o->fwd_before) + op_comm_seconds(b, &o->fwd_after);
    for (uint32_t s = o->first_saved; s < o->first_saved + o->n_saved; s++)
      if (plan->keep[s] == VS_RECOMPUTE_CORE)
        dropped += saved_size(b, blk, s);
  }
  if (dropped == 0)
    return;
  op = sb_compute_op(b, VS_PHASE_RECOMPUTE, "recompute_attn", sb_layer_of(inst),
                     mb, flops, bytes, &t);
  b->sel_buf[inst] = sb_new_buffer(b, dropped, VS_CAT_TEMP);
  sb_alloc_on(b, op, b->sel_buf[inst]);
}

static int first_core_op(const vs_block *blk)
{
  for (uint32_t k = 0; k < blk->n_ops; k++)
    if (blk->ops[k].attn_core)
      return (int)k;
  return -1;
}

static int last_core_op(const vs_block *blk)
{
  for (int k = (int)blk->n_ops - 1; k >= 0; k--)
    if (blk->ops[k].attn_core)
      return k;
  return -1;
}

/* The most tensors of one state a parameter has: a stored weight's
 * parts or its optimizer states. */
#define STATE_PARTS_MAX                                                        \
  (VS_DTYPE_PARTS_MAX > VS_OPT_STATE_TENSORS_MAX ? VS_DTYPE_PARTS_MAX          \
                                                 : VS_OPT_STATE_TENSORS_MAX)

static const int state_category[STATE_N] = {VS_CAT_PARAMS, VS_CAT_OPTIMIZER,
                                            VS_CAT_GRADS, VS_CAT_OPTIMIZER};

/* The bytes of each tensor of state `which` among a parameter's states
 * ts, in out: how many. */
static unsigned state_parts(const vs_tensor_states *ts, state_kind which,
                            uint64_t out[STATE_PARTS_MAX])
{
  unsigned k = 0;
  switch (which) {
  case STATE_PARAMS: /* each tensor it is stored as */
    for (unsigned i = 0; i < ts->n_param_parts; i++)
      out[k++] = ts->param_parts[i];
    break;
  case STATE_MASTER:
    out[k++] = ts->master;
    break;
  case STATE_GRADS:
    out[k++] = ts->made_grad;
    break;
  default: /* the optimizer's tensors after its master copy */
    for (unsigned i = ts->master ? 1 : 0; i < ts->n_optimizer; i++)
      out[k++] = ts->optimizer[i];
    break;
  }
  return k;
}

/* The state `which` of instance inst's parameters [lo, hi), one buffer
 * per tensor in model order (a parameter's parts together), allocated
 * when op starts (with op NONE only counted): their bytes. With `slots`
 * ([param], for a state of one tensor a parameter: the gradient) a
 * parameter whose slot holds a buffer is skipped, and each new buffer is
 * kept in its slot. */
static uint64_t param_states(builder *b, uint32_t op, size_t inst,
                             state_kind which, uint32_t lo, uint32_t hi,
                             uint32_t *slots)
{
  const vs_block *blk = sb_block_of(b, inst);
  uint64_t sum = 0;
  for (uint32_t i = lo; i < hi; i++) {
    vs_tensor_states ts;
    uint64_t parts[STATE_PARTS_MAX];
    unsigned n_parts;
    if (slots && slots[i] != NONE)
      continue;
    vs_recipe_tensor_states(b->r, &b->wl->training, &blk->params[i], &ts);
    n_parts = state_parts(&ts, which, parts);
    for (unsigned j = 0; j < n_parts; j++) {
      uint32_t buf;
      sum += parts[j];
      if (op == NONE || parts[j] == 0)
        continue;
      buf = sb_new_buffer(b, parts[j], state_category[which]);
      sb_alloc_on(b, op, buf);
      if (slots)
        slots[i] = buf;
    }
  }
  return sum;
}

/* Every parameter of instance inst: param_states. */
static uint64_t tensor_states(builder *b, uint32_t op, size_t inst,
                              state_kind which)
{
  return param_states(b, op, inst, which, 0, sb_block_of(b, inst)->n_params,
                      NULL);
}

/* tensor_states of every instance on stage b->stage (b->stage_inst), in
 * order: their bytes. */
uint64_t sb_stage_states(builder *b, uint32_t op, state_kind which)
{
  uint64_t sum = 0;
  for (size_t inst = 0; inst < b->n_inst; inst++)
    if (b->stage_inst[inst] != NONE)
      sum += tensor_states(b, op, inst, which);
  return sum;
}

/* inst's gradients appear in table[inst] when op starts, unless they
 * already have: in grad_buf (transient: they wait for their bucket or
 * their step) or grads_kept (kept to the step, gone after it). */
static void grads_appear(builder *b, uint32_t *table, size_t inst,
                         uint32_t op)
{
  if (table[inst] != NONE)
    return;
  table[inst] = sb_new_buffer(b, sb_plan_of(b, inst)->made_grad_bytes,
                              VS_CAT_GRADS);
  sb_alloc_on(b, op, table[inst]);
}

/* Under per_tensor_states, the kept gradients of inst's parameters
 * [lo, hi) that have not appeared yet appear when op starts, one buffer
 * each (tensor_grad): AccumulateGrad takes each as the op computing it
 * makes it. */
static void tensor_grads_appear(builder *b, size_t inst, uint32_t lo,
                                uint32_t hi, uint32_t op)
{
  param_states(b, op, inst, STATE_GRADS, lo, hi,
               b->tensor_grad + b->param_base[inst]);
}

/* Frees inst's kept gradients when op ends: grads_kept's buffer, or
 * under per_tensor_states each tensor's. */
void sb_free_kept_grads(builder *b, uint32_t op, size_t inst)
{
  uint32_t *slot = b->tensor_grad + b->param_base[inst];
  if (b->grads_kept[inst] != NONE)
    sb_free_on(b, op, b->grads_kept[inst], AT_END);
  b->grads_kept[inst] = NONE;
  for (uint32_t i = 0;
       b->r->per_tensor_states && i < sb_block_of(b, inst)->n_params; i++) {
    if (slot[i] != NONE)
      sb_free_on(b, op, slot[i], AT_END);
    slot[i] = NONE;
  }
}

/* Whether the program has the effects `step` alone has: one for every
 * step has each step's, one for a step that step's. */
bool sb_has_step(const builder *b, vs_step step)
{
  return b->every_step || b->step == step;
}

/* Whether the first step makes the stage's resident gradients (vs_recipe
 * first_step_states), and the program has its effects. */
static bool first_makes_grads(const builder *b)
{
  return b->r->first_step_states && !sb_transient_grads(b) &&
         !b->r->grads_set_to_none && sb_has_step(b, VS_STEP_FIRST);
}

/* Where gradients made in backward in every step appear, or NULL when
 * they are resident from the setup on (though the first step may make
 * them: first_makes_grads). */
static uint32_t *grads_made_in(const builder *b)
{
  return sb_transient_grads(b) ? b->grad_buf
         : b->r->grads_set_to_none ? b->grads_kept
                                   : NULL;
}

/* Whether the head's backward writes the word embeddings' gradient, held
 * once by the one stage that has both ends: a tied output layer's, or the
 * multi-token prediction's lookups' (Megatron-LM's shared embedding). */
static bool head_writes_embedding_grads(const builder *b)
{
  return b->lay->pp == 1 &&
         (b->wl->model.tied_embeddings || b->wl->model.mtp_layers > 0);
}

/* Whether gradients made in backward are kept tensor by tensor
 * (per_tensor_states): each appears at the op that computes it. */
static bool grads_per_tensor(const builder *b)
{
  return grads_made_in(b) == b->grads_kept && b->r->per_tensor_states;
}

/* Whether op k of inst's block is the head's op whose backward makes the
 * word embeddings' gradient first (vs_kind_plan embedding_grads_op). */
static bool makes_tied_grads(const builder *b, size_t inst, int k)
{
  return inst + 1 == b->n_inst && head_writes_embedding_grads(b) &&
         k == (int)sb_plan_of(b, inst)->embedding_grads_op;
}

/* Under grads_per_tensor, the gradients op k of inst's block computes
 * appear when its backward `op` starts; with the block's first gradient
 * (vs_kind_plan grads_op) the weights no op names too, and on the head's
 * op that first makes the word embeddings' gradients those
 * (makes_tied_grads). */
static void op_grads_appear(builder *b, size_t inst, int k, uint32_t op)
{
  const vs_block *blk = sb_block_of(b, inst);
  const vs_op_spec *o = &blk->ops[k];
  if (k == (int)sb_plan_of(b, inst)->grads_op)
    tensor_grads_appear(b, inst, 0, blk->ops[0].first_param, op);
  if (makes_tied_grads(b, inst, k))
    tensor_grads_appear(b, 0, 0, sb_block_of(b, 0)->n_params, op);
  tensor_grads_appear(b, inst, o->first_param, o->first_param + o->n_params,
                      op);
}

/* The gradients op (op k of inst's backward) makes appear: each tensor's
 * as it is made, or the block's at once as backward makes the first
 * (vs_kind_plan grads_op; the word embeddings' where the head first makes
 * them: makes_tied_grads), or under first_makes_grads each one in the
 * first step only (AccumulateGrad makes each). */
static void backward_grads(builder *b, size_t inst, int k, uint32_t op)
{
  if (b->r->lp_grads_kept) {
    /* BF16_Optimizer's 16-bit .grad beside its resident buffer */
    if (k == (int)sb_plan_of(b, inst)->grads_op)
      grads_appear(b, b->lp_grads, inst, op);
    if (makes_tied_grads(b, inst, k))
      grads_appear(b, b->lp_grads, 0, op);
  }
  if (grads_per_tensor(b)) {
    op_grads_appear(b, inst, k, op);
  } else if (grads_made_in(b)) {
    if (k == (int)sb_plan_of(b, inst)->grads_op)
      grads_appear(b, grads_made_in(b), inst, op);
    if (makes_tied_grads(b, inst, k))
      grads_appear(b, grads_made_in(b), 0, op);
  } else if (first_makes_grads(b)) {
    sb_only_in(b, VS_STEP_FIRST);
    op_grads_appear(b, inst, k, op);
    sb_in_every_step(b);
  }
}

/* What op (op k of inst's backward for micro-batch mb) frees once it is
 * done: k's saved tensors, the selective recompute's buffer after the
 * attention core's first op (core_first), and after the block's first op
 * its checkpoint, its gathered parameters and (the last backward) the
 * root unit's. */
static void backward_frees(builder *b, const vs_block *blk, size_t inst,
                           int k, int core_first, int mb, uint32_t op)
{
  const vs_op_spec *o = &blk->ops[k];
  for (uint32_t s = o->first_saved; s < o->first_saved + o->n_saved; s++) {
    uint32_t *slot = saved_slot(b, inst, s, mb);
    sb_free_on(b, op, *slot, AT_END);
    *slot = NONE;
  }
  if (k == core_first && b->sel_buf[inst] != NONE) {
    sb_free_on(b, op, b->sel_buf[inst], AT_END);
    b->sel_buf[inst] = NONE;
  }
  if (k == 0) {
    sb_free_on(b, op, b->ckpt_buf[live(b, inst, mb)], AT_END);
    b->ckpt_buf[live(b, inst, mb)] = NONE;
    if (!sb_in_root_unit(b, inst))
      release_gather(b, inst, op);
    if (head_ties(b, inst) && !tied_kept(b, inst))
      release_gather(b, 0, op);
    if (b->r->root_kept && last_backward(b, inst))
      release_root(b, op); /* the root's post-backward */
  }
}

void sb_backward_block(builder *b, size_t inst, int mb)
{
  const vs_block *blk = sb_block_of(b, inst);
  const vs_kind_plan *plan = sb_plan_of(b, inst);
  int layer = sb_layer_of(inst);
  int core_first = first_core_op(blk), core_last = last_core_op(blk);
  /* the step's first backward after the step set the gradients to None
   * (BF16_Optimizer's 16-bit ones, by the engine's zero_grad) */
  bool fresh = mb == 0 && (b->r->grads_set_to_none || b->r->lp_grads_kept);

  if (plan->no_backward)
    return; /* a frozen prefix: no gradient flows through it */
  /* the block before, in this chunk, runs a backward (and so releases a
   * prefetched gather) unless it is a frozen prefix (last_backward) */
  before_pass(b, inst, SB_BACKWARD, mb);
  before_backward_acts(b, inst, mb);
  if (plan->recompute_block)
    recompute_layer(b, inst, mb);
  for (int k = (int)blk->n_ops - 1; k >= 0; k--) {
    const vs_op_spec *o = &blk->ops[k];
    accumulation acc = grad_accumulation(b, inst, (uint32_t)k, fresh);
    uint32_t op;

    if (plan->recompute_core && k == core_last)
      recompute_core(b, inst, mb);
    op_comm(b, &o->bwd_before, layer, mb);
    op = block_op(b, VS_PHASE_BWD, inst, (uint32_t)k,
                  fresh ? TIME_BWD_FRESH : TIME_BWD, mb, plan->bwd_flops[k],
                  plan->bwd_bytes[k] + acc.work.bytes);
    if (acc.made)
      sb_transient(b, op, acc.made, VS_CAT_TEMP);
    backward_grads(b, inst, k, op);
    sb_transients(b, op, o->bwd_temp_bytes, o->bwd_temp_first);
    backward_frees(b, blk, inst, k, core_first, mb, op);
    op_comm(b, &o->bwd_after, layer, mb);
  }
}

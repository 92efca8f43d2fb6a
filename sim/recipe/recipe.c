/* recipe.c - resolves a workload and its model into decisions (see
 * recipe.h). Every rule about what ZeRO, checkpointing, trainability and
 * the optimizer mean for memory and data flow is decided here, once. */
#include "recipe.h"

#include "units.h"

#include <stdlib.h>
#include <string.h>

/* bitsandbytes' blockwise 8-bit states: one fp32 absmax per 256 elements
 * per state (bitsandbytes/optim/optimizer.py Optimizer2State.init_state,
 * blocks = ceil(numel / 256) since the 0.45 series; 2048 before). */
#define ADAM8BIT_BLOCK 256

unsigned vs_optimizer_state_tensors(int optimizer, vs_master_part master,
                                    uint64_t rows, uint64_t cols,
                                    uint64_t out[VS_OPT_STATE_TENSORS_MAX])
{
  uint64_t n = rows * cols;
  unsigned k = 0;
  if (master == VS_WITH_MASTER)
    out[k++] = 4 * n;
  switch (optimizer) {
  case VS_OPT_ADAM:
  case VS_OPT_ADAMW: /* exp_avg, exp_avg_sq */
    out[k++] = 4 * n;
    out[k++] = 4 * n;
    break;
  case VS_OPT_MOMENTUM: /* momentum_buffer */
  case VS_OPT_LION:     /* exp_avg */
    out[k++] = 4 * n;
    break;
  case VS_OPT_ADAFACTOR: /* exp_avg_sq_row and _col, or exp_avg_sq */
    if (rows > 1 && cols > 1) {
      out[k++] = 4 * rows;
      out[k++] = 4 * cols;
    } else {
      out[k++] = 4 * n;
    }
    break;
  case VS_OPT_ADAM8BIT: /* state1, state2 and their absmax, or fp32 ones */
    if (n < 4096) {
      out[k++] = 4 * n;
      out[k++] = 4 * n;
    } else {
      out[k++] = n;
      out[k++] = n;
      out[k++] = 4 * vs_div_ceil(n, ADAM8BIT_BLOCK);
      out[k++] = 4 * vs_div_ceil(n, ADAM8BIT_BLOCK);
    }
    break;
  default:
    break;
  }
  return k;
}

uint64_t vs_optimizer_state_bytes(int optimizer, vs_master_part master,
                                  uint64_t rows, uint64_t cols)
{
  uint64_t parts[VS_OPT_STATE_TENSORS_MAX], bytes = 0;
  unsigned n = vs_optimizer_state_tensors(optimizer, master, rows, cols,
                                          parts);
  for (unsigned i = 0; i < n; i++)
    bytes += parts[i];
  return bytes;
}

uint64_t vs_recipe_shard(const vs_state_plan *plan, uint64_t bytes)
{
  if (plan->degree == 0) /* not partitioned */
    return bytes;
  return vs_div_ceil(vs_div_ceil(bytes, plan->align), plan->degree) *
         plan->align;
}

uint64_t vs_recipe_grads_shard(const vs_recipe *r, uint64_t bytes,
                               uint64_t expert)
{
  /* partitioned alike (no expert groups of their own, or ZeRO-0/1): one
   * flat buffer, padded once */
  if (r->expert_grads.degree == r->grads.degree)
    return vs_recipe_shard(&r->grads, bytes);
  return vs_recipe_shard(&r->grads, bytes - expert) +
         vs_recipe_shard(&r->expert_grads, expert);
}

const char *vs_keep_name(int keep)
{
  switch (keep) {
  case VS_KEEP:
    return "keep";
  case VS_RECOMPUTE_CORE:
    return "recompute_core";
  case VS_NOT_SAVED:
    return "not_saved";
  default:
    return "recompute_block";
  }
}

/* ------------------------------------------------------------------------
 * Model states: ZeRO (Rajbhandari et al. 2020)
 * ------------------------------------------------------------------------ */

/* A state partitioned over dp from ZeRO stage `from` on (degree 0: not
 * partitioned). A partitioned state is padded to whole `align`-byte
 * elements per shard even when dp = 1, as ZeRO's flat buffers are. */
static vs_state_plan state(const vs_workload *wl, uint64_t from,
                           uint64_t align)
{
  vs_state_plan p = {0, VS_PLACE_GPU, align};
  if (wl->parallel.zero >= from)
    p.degree = vs_workload_shard_ranks(&wl->parallel); /* Megatron's
                                  distributed optimizer and torchtitan's
                                  dp_shard_cp span the context-parallel
                                  ranks */
  return p;
}

static int place_of(int offload)
{
  return offload == VS_OFFLOAD_NVME  ? VS_PLACE_NVME
         : offload == VS_OFFLOAD_CPU ? VS_PLACE_HOST
                                     : VS_PLACE_GPU;
}

/* Where the partitions live. With the optimizer off the GPU, the host
 * holds an fp32 gradient partition (DeepSpeed's
 * single_partition_of_fp32_groups grads, stage 3's fp32 grad partitions;
 * ZeRO-Infinity keeps them in host memory even with states on NVMe), and
 * ZeRO-2/3's resident gradient partition leaves the GPU for it. */
static void resolve_offload(const vs_workload *wl, vs_recipe *r)
{
  const vs_parallel_conf *p = &wl->parallel;
  r->optimizer.place = (uint8_t)place_of(p->offload_optimizer);
  r->params.place = (uint8_t)place_of(p->offload_params);
  r->offload.cpu_step = vs_workload_cpu_step(p);
  r->offload.fetch_params = p->offload_params != VS_OFFLOAD_NONE;
  r->offload.pageable = !p->offload_pin_memory;
  r->offload.pageable_masters =
      r->offload.cpu_step && r->optimizer.place == VS_PLACE_HOST &&
      vs_workload_deepspeed_zero3(wl->training.framework, p->zero);
  r->offload.activations =
      wl->training.offload_activations != VS_OFFLOAD_NONE;
  r->offload.activations_on_demand =
      r->offload.activations && wl->training.framework == VS_FW_DEEPSPEED;
  if (!r->offload.cpu_step)
    return;
  r->offload.host_grads =
      (vs_state_plan){vs_workload_shard_ranks(p), VS_PLACE_HOST, 4};
  if (vs_workload_deepspeed_optimizer(&wl->training, p) == VS_DS_OPT_ZERO)
    r->offload.bit16_buffers = (uint8_t)vs_dtype_size(
        vs_precision_param_dtype(wl->training.precision));
  if (p->zero >= 2)
    r->grads.place = VS_PLACE_HOST;
}

bool vs_recipe_host_sums(const vs_recipe *r, uint64_t grad_accum)
{
  return r->offload.bit16_buffers > 0 && grad_accum > 1 && r->transient_grads;
}

uint64_t vs_recipe_grad_staging_bytes(const vs_recipe *r,
                                      uint64_t largest_elems)
{
  return r->offload.bit16_buffers * largest_elems;
}

uint64_t vs_recipe_bit16_host_bytes(const vs_recipe *r,
                                    uint64_t partition_elems)
{
  return r->offload.bit16_buffers * partition_elems;
}

uint64_t vs_recipe_sub_group_elems(uint64_t partition_elems)
{
  return partition_elems < VS_DS_SUB_GROUP_ELEMS ? partition_elems
                                                 : VS_DS_SUB_GROUP_ELEMS;
}

uint64_t vs_recipe_host_buffer_bytes(const vs_recipe *r,
                                     uint64_t partition_elems,
                                     uint64_t largest_elems, bool sums)
{
  uint64_t copy = vs_recipe_bit16_host_bytes(r, partition_elems);
  uint64_t bytes =
      copy + (sums ? copy : 0) + vs_recipe_grad_staging_bytes(r, largest_elems);
  if (r->optimizer.place == VS_PLACE_NVME)
    bytes +=
        VS_NVME_OPT_BUFFERS * 4 * vs_recipe_sub_group_elems(partition_elems);
  if (r->params.place == VS_PLACE_NVME)
    bytes += VS_NVME_PARAM_BUFFERS * 2 * VS_NVME_PARAM_BUFFER_ELEMS;
  return bytes;
}

/* The optimizer wrapper DeepSpeed runs (VS_DS_OPT_NONE without it). */
static vs_ds_optimizer ds_optimizer(const vs_workload *wl)
{
  return vs_workload_deepspeed_optimizer(&wl->training, &wl->parallel);
}

/* Whether DeepSpeed's BF16_Optimizer shards its states: it runs, over
 * more than one data-parallel rank. */
static bool bf16_optimizer(const vs_workload *wl)
{
  return ds_optimizer(wl) == VS_DS_OPT_BF16 &&
         vs_workload_shard_ranks(&wl->parallel) > 1;
}

/* DeepSpeed's step copies its 16-bit gradients to fp32 (frameworks.md
 * 2.1-2.2): FP16_Optimizer (fp16, ZeRO off) whole, ZeRO-1/2 a group's
 * partition at a time, ZeRO-3 a sub-group's (stage3.py
 * _prepare_fp32_grad_for_sub_group: flatten, torch.cat of the
 * sub-group's gradient partitions, then .to(fp32); freed by
 * _release_sub_group before the next). Megatron-LM's mixed-precision optimizers
 * make each fp32 main param's .grad from its 16-bit main grad
 * (main_grad.float() in megatron/core/optimizer/optimizer.py and
 * distrib_optimizer.py _copy_model_grads_to_main_grads), all before the
 * step, and set them to None at the next zero_grad: the 20 and 4 + 16/d
 * bytes a parameter of dist_optimizer.md's fp16 row (3.1). fp32
 * gradients (BF16_Optimizer's buffer, Megatron's fp32 main grads, whose
 * .float() is themselves) and the optimizer on the host need no copy. */
static uint8_t step_copy(const vs_workload *wl, const vs_recipe *r)
{
  const vs_training_conf *t = &wl->training;
  uint64_t zero = wl->parallel.zero;
  /* the precision-aware optimizer steps the 16-bit gradient shard as it
   * is (distrib_optimizer.py: main param's decoupled_grad, a view) */
  if (r->offload.cpu_step || t->precision_aware_optimizer)
    return VS_STEP_COPY_NONE;
  /* ZeRO-3's concatenation copies fp32 gradients too */
  if (vs_workload_deepspeed_zero3(t->framework, zero))
    return VS_STEP_COPY_SUB_GROUP;
  if (r->grad_elem_bytes == 4)
    return VS_STEP_COPY_NONE;
  if (t->framework == VS_FW_MEGATRON)
    return t->master_weights ? VS_STEP_COPY_MAIN_GRADS : VS_STEP_COPY_NONE;
  switch (ds_optimizer(wl)) {
  case VS_DS_OPT_FP16:
    return VS_STEP_COPY_FLAT;
  /* BF16_Optimizer accumulating in bf16 casts every gradient partition
   * to fp32 before the update (bf16_optimizer.py step: grad_partition.to
   * (param_partition.dtype)) */
  case VS_DS_OPT_BF16:
    return VS_STEP_COPY_MAIN_GRADS;
  case VS_DS_OPT_ZERO:
    return VS_STEP_COPY_PARTITION;
  default:
    return VS_STEP_COPY_NONE;
  }
}

/* The states the precision-aware optimizer's step unpacks: FusedAdam
 * copies each state below fp32 to fp32 for its kernel, a parameter
 * group's at a time, and scales it back after (fused_adam.py step,
 * get_unscaled_state; "Try to reclaim the temporary fp32 buffers"), save
 * two bf16 moments, which its kernel reads as they are (fuse_unscale),
 * and the int16 remainders of fp32 main parameters. */
static uint8_t step_unscaled(const vs_training_conf *t)
{
  bool fused =
      t->exp_avg_dtype == VS_STATE_BF16 && t->exp_avg_sq_dtype == VS_STATE_BF16;
  if (!t->precision_aware_optimizer)
    return 0;
  return (uint8_t)((!fused && t->exp_avg_dtype != VS_STATE_FP32) +
                   (!fused && t->exp_avg_sq_dtype != VS_STATE_FP32) +
                   (t->main_params_dtype == VS_MAIN_FP16));
}

/* The optimizer step's passes over its bytes (vs_step_passes). Fused,
 * one kernel (torch.optim's fused=True, apex's and DeepSpeed's
 * FusedAdam): 2, 2 and 1. PyTorch's foreach implementation runs an op
 * over the tensor list for each term of the update (torch/optim/adam.py
 * _multi_tensor_adam, sgd.py _multi_tensor_sgd), each reading its
 * operands and writing the first:
 * - Adam(W): AdamW's decoupled weight decay (its default 1e-2; Adam's
 *   default 0 runs none) mul_s the parameters (2), lerp_ moves exp_avg
 *   toward the gradient (2 + 1), mul_ and addcmul_ update exp_avg_sq
 *   (2, 2 + 1), sqrt writes a new list from it (1 + 1), div_ and add_
 *   rescale that list (2, 2) and addcdiv_ updates the parameters from
 *   exp_avg and the list (2 + 1 + 1): 14 passes over one state's bytes,
 *   7 over both, the gradient 2, the parameters 4 (Adam: 2);
 * - SGD with momentum: mul_ and add_ of the buffer (2, 2 + 1) and the
 *   parameters' add_ of it (2 + 1): the state 5, gradient 1, parameters
 *   2; without momentum the parameters' add_ of the gradient, as fused. */
static vs_step_passes step_passes(const vs_training_conf *t)
{
  if (t->optimizer_impl != VS_OPTIMPL_FOREACH)
    return (vs_step_passes){.params = 2.0, .states = 2.0, .grads = 1.0};
  switch (t->optimizer) {
  case VS_OPT_ADAMW:
    return (vs_step_passes){.params = 4.0, .states = 7.0, .grads = 2.0};
  case VS_OPT_ADAM:
    return (vs_step_passes){.params = 2.0, .states = 7.0, .grads = 2.0};
  case VS_OPT_MOMENTUM:
    return (vs_step_passes){.params = 2.0, .states = 5.0, .grads = 1.0};
  default:
    return (vs_step_passes){.params = 2.0, .states = 2.0, .grads = 1.0};
  }
}

/* Bytes an element of g bytes moves when widened to fp32 (.float(),
 * .to(float32)): read, and written in 4 bytes; none when already fp32. */
static double widen(double g) { return g < 4 ? g + 4 : 0; }

/* Bytes of a stepped gradient element, as the per-tensor rule made the
 * gradients (vs_recipe_tensor_states: an fp32 tensor's, LoRA adapters',
 * are fp32): the model's gradient bytes over its trainable elements,
 * every block instance counted; the recipe's gradient dtype when nothing
 * trains. */
static double stepped_grad_bytes(const vs_model *m, const vs_recipe *r)
{
  double bytes = 0, elems = 0;
  for (uint64_t i = 0; i < m->layers + 2; i++) {
    const vs_kind_plan *k = &r->kinds[m->inst_kind[i]];
    bytes += (double)k->grad_bytes;
    elems += (double)k->trainable_elems;
  }
  return elems > 0 ? bytes / elems : (double)r->grad_elem_bytes;
}

/* DeepSpeed's passes around the update, a stepped element (shared/
 * reference/frameworks.md 2; deepspeed/runtime/zero/stage_1_and_2.py,
 * stage3.py, fp16/fused_optimizer.py, bf16_optimizer.py step):
 * - ZeRO-1/2: the overflow check of each 16-bit partition gradient,
 *   which engine.py asks for with fp16 and, by default since #8035
 *   (June 2026), bf16 (_has_inf_or_nan: .float(), isnan and isinf 4 + 1
 *   each, logical_or 1 + 1 + 1, .float() 1 + 4, max 4); the norm
 *   (get_grad_norm_direct: vector_norm of each gradient's .double(), g +
 *   8 written, 8 read); the partition flattened (2g) and cast to fp32;
 *   unscale_and_clip_grads' multiply of it, unconditional (4 + 4);
 * - ZeRO-3: fp16's isinf().any() and isnan().any() of the flat
 *   partition (g + 1 + 1 each), the same norm, each sub-group's
 *   concatenation and cast (step_copy), the same multiply;
 * - FP16_Optimizer (ZeRO off, fp16): each gradient's
 *   float(x.float().sum()) (widened, read again), cast to fp32 and
 *   flattened (4 + 4), the flat norm (4) and multiply (4 + 4);
 * - BF16_Optimizer: accumulated in bf16, each partition's cast to fp32
 *   (step_copy); the norm of its whole buffer (get_grads_for_norm: every
 *   gradient, unsharded) is a pass over the resident gradients; its clip
 *   (runtime/utils.py clip_tensors_by_global_norm) multiplies only when
 *   the norm exceeds gradient_clipping, not counted;
 * - ZeRO off in fp32, no wrapper: the engine's clip_fp32_gradients
 *   (engine.py _take_model_step, utils.py clip_grad_norm_: each
 *   gradient's .float().norm() and its multiply, 4 + 8), only with
 *   gradient_clipping (vs_deepspeed_clip_matters). */
static double deepspeed_wrap(const vs_workload *wl, const vs_recipe *r,
                             double g)
{
  const vs_training_conf *t = &wl->training;
  bool fp16 = t->precision == VS_PREC_FP16;
  bool checked = vs_precision_param_dtype(t->precision) != VS_DTYPE_FP32;
  double norm = g + 16, multiply = 8;
  if (ds_optimizer(wl) == VS_DS_OPT_BF16)
    return widen(g);
  if (vs_deepspeed_clip_matters(t, &wl->parallel))
    return t->grad_clipping ? 4 + multiply : 0;
  if (r->step_copy == VS_STEP_COPY_SUB_GROUP)
    return (fp16 ? 2 * (g + 2) : 0) + norm + 2 * g + widen(g) + multiply;
  if (r->step_copy == VS_STEP_COPY_FLAT)
    return (widen(g) + 4) + widen(g) + 8 + 4 + multiply;
  return (checked ? widen(g) + 22 : 0) + norm + 2 * g + widen(g) + multiply;
}

/* The passes a framework's step makes over the gradients on the GPU
 * around the update (vs_step_passes wrap and buffer), over the gradients
 * the update reads (s bytes an element: fp32 after a step copy); the
 * clip's where [training] grad_clipping asks for it (each framework's
 * default, at norm 1.0):
 * - megatron (megatron/core/optimizer/optimizer.py step, clip_grads.py,
 *   distributed/param_and_grad_buffer.py): the step's copy to fp32, the
 *   unscaling by fp16's loss scaler (_amp_foreach_non_finite_check_and_
 *   unscale_, 2), the norm (multi_tensor_l2norm, 1) and the clip's
 *   multiply (2: with Transformer Engine >= 2.14 clamped and always
 *   applied, since Megatron-LM 3d87bfc1; Apex's path before applied it
 *   only above the clip); over the whole gradient buffer each step, its
 *   zeroing (zero_grad_buffer), with data parallelism its scaling by
 *   1/dp before the reduction (2) and, but under fp16's loss scaler, the
 *   NaN check's norm of each bucket (check_for_nan_in_loss_and_grad, 1);
 * - deepspeed: deepspeed_wrap, whatever gradient_clipping says but with
 *   ZeRO off in fp32 (0 elsewhere only keeps the multiply from
 *   clipping); gradients set to None, not zeroed, but BF16_Optimizer's
 *   buffer, whose norm it takes whole (1) and which it zeroes twice
 *   (clear_hp_grads at the end of its step, and again in the engine's
 *   zero_grad: 2);
 * - fsdp2 (torchtitan's clip_grad_norm_, training.max_norm 1.0) and hf
 *   (the Trainer's max_grad_norm 1.0): PyTorch's clip_grad_norm_ reads
 *   them for the norm and multiplies them by the clamped coefficient,
 *   always (torch/nn/utils/clip_grad.py: _foreach_norm, _foreach_mul_;
 *   3), its GradScaler unscaling them first under fp16 autocast (2), and
 *   zero_grad zeroes them unless it sets them to None (1);
 * - none, the idealised job: PyTorch's clip where asked for, else
 *   nothing; an optimizer in backward (which cannot clip) and one on the
 *   host (whose passes vsim does not price; DeepSpeed takes the norm on
 *   the GPU as it copies the gradients out): nothing.
 * Megatron-LM scales and checks each bucket as its reduction starts,
 * in backward with overlap_grad_reduce; vsim prices them in the step,
 * on the same compute stream. */
static void step_wrap(const vs_workload *wl, const vs_model *m, vs_recipe *r)
{
  const vs_training_conf *t = &wl->training;
  double g = stepped_grad_bytes(m, r);
  double s = r->step_copy == VS_STEP_COPY_NONE ? g : 4.0;
  double clip = t->grad_clipping ? s + 2 * s : 0; /* norm, multiply */
  double wrap = clip, buffer = 0;
  if (r->step_in_backward || r->offload.cpu_step)
    return;
  switch (t->framework) {
  case VS_FW_MEGATRON: {
    bool scaler = t->precision == VS_PREC_FP16;
    wrap = (r->step_copy == VS_STEP_COPY_NONE ? 0 : widen(g)) +
           (scaler ? 2 * s : 0) + clip;
    buffer = 1 + (vs_workload_shard_ranks(&wl->parallel) > 1 ? 2 : 0) +
             (scaler ? 0 : 1);
    break;
  }
  case VS_FW_DEEPSPEED:
    wrap = deepspeed_wrap(wl, r, g);
    buffer = ds_optimizer(wl) == VS_DS_OPT_BF16 ? 3 : 0;
    break;
  case VS_FW_FSDP2:
  case VS_FW_HF:
    wrap = (t->precision == VS_PREC_AMP_FP16 ? 2 * s : 0) + clip;
    buffer = t->set_grads_to_none ? 0 : 1;
    break;
  default:
    break;
  }
  r->step_passes.wrap = wrap;
  r->step_passes.buffer = buffer;
}

/* How many bucket reductions the compute stream may run ahead of, for
 * gradients freed once reduced. DeepSpeed ZeRO-2 with overlap_comm: the
 * current stream waits for the reduction stream before each bucket's
 * reduction is issued (stage_1_and_2.py average_tensor: current_stream()
 * .wait_stream(reduction_stream)), so one runs behind (without it,
 * reduce_on_compute: none). DeepSpeed ZeRO-3: the host blocks on the
 * oldest reduction event once more than max_param_reduce_events = 2 are
 * pending (stage3.py __reduce_and_partition_ipg_grads), so three run
 * behind. FSDP2: each
 * unit's post_backward makes the current stream wait for the previous
 * unit's reduce-scatter event (torch/distributed/fsdp/_fully_shard/
 * _fsdp_param_group.py post_backward, comm_ctx.reduce_scatter_state):
 * one. Without a framework, as FSDP2 (PyTorch's own sharding). */
static uint8_t reduce_depth(const vs_workload *wl)
{
  if (ds_optimizer(wl) == VS_DS_OPT_ZERO3)
    return 3;
  return 1;
}

/* Where a framework's gathers make their buffers and DeepSpeed's
 * gradient buckets, once gather_copy_out is known. */
static void resolve_buckets(const vs_workload *wl, vs_recipe *r)
{
  bool bf16_wrapper = ds_optimizer(wl) == VS_DS_OPT_BF16;
  bool engine_allreduce =
      vs_workload_deepspeed_engine_allreduce(&wl->training, &wl->parallel);
  /* FSDP2's foreach_all_gather makes the flat buffer on its copy-in
   * stream; DeepSpeed's coordinator gathers under its own stream with
   * overlap_comm (partitioned_param_coordinator.py __all_gather_params_:
   * all_gather_coalesced and the handle's wait under __allgather_stream,
   * which parameter_offload.py makes only with overlap_comm) */
  r->gather_made_on = r->gather_copy_out || (r->gather_traced &&
                                             wl->parallel.overlap_grad_reduce)
                          ? VS_MADE_ON_GATHER
                          : VS_MADE_ON_OP_STREAM;
  /* ZeRO-3's ipg buffer: DeepSpeed makes it whatever dp is, but vsim
   * buckets nothing where no gradient leaves the GPU, and keeps none
   * there */
  r->ipg_resident =
      vs_workload_deepspeed_zero3(wl->training.framework, wl->parallel.zero) &&
      vs_workload_grads_bucketed(&wl->parallel);
  /* DeepSpeed's ZeRO optimizers bucket what its engine does not
   * all-reduce itself */
  r->ipg_buckets =
      wl->training.framework == VS_FW_DEEPSPEED && !engine_allreduce;
  /* engine.py communication_data_type: fp16 or bf16 as the model, else
   * fp32 */
  r->engine_allreduce_bytes =
      engine_allreduce ? (uint8_t)vs_dtype_size(
                             vs_precision_param_dtype(wl->training.precision))
                       : 0;
  /* BF16_Optimizer hands the engine its flat buffer, one tensor a
   * parameter group (bf16_optimizer.py get_grads_for_reduction), and the
   * engine's allreduce_no_retain closes a bucket once a tensor takes it
   * past 5e8 elements: the buffer is reduced whole, one bucket (its groups
   * one after another: the weight-decay group is nearly all of it) */
  r->engine_allreduce_flat = bf16_wrapper;
  r->bucket_bytes = bf16_wrapper ? UINT64_MAX
                    : engine_allreduce
                        ? VS_DEEPSPEED_BUCKET_ELEMS * r->grad_elem_bytes
                        : wl->parallel.bucket_bytes;
}

/* FSDP2's buffers and resharding, once gather_params, transient_grads,
 * step_in_backward and pipelined_fsdp are known. */
static void resolve_fsdp2(const vs_workload *wl, vs_recipe *r)
{
  /* FSDP2 keeps the model's fp32 parameters sharded and casts them to
   * MixedPrecisionPolicy's param_dtype when it gathers them
   * (shared/reference/frameworks.md 4.3) */
  r->fp32_params = wl->training.framework == VS_FW_FSDP2;
  /* FSDP2's all_gather_state keeps the previous unit's all-gather output
   * until the next unit's copy-out (frameworks.md 4.3) */
  r->gather_copy_out = r->fp32_params && r->gather_params;
  /* FSDP2's foreach_reduce: the unsharded gradients copied into a flat
   * reduce-scatter input in the reduce dtype, held in reduce_scatter_state
   * (frameworks.md 4.3) */
  r->reduce_copy = r->fp32_params && r->transient_grads &&
                   !r->step_in_backward;
  /* torchtitan's apply_fsdp (reshard_after_forward_policy "default"):
   * reshard_after_forward = layer_id < n_layers - 1 without PP, "since
   * FSDP would prefetch it immediately" (frameworks.md 4.3) */
  r->keep_last_gathered = r->gather_copy_out && !r->pipelined_fsdp;
  /* ... and fully_shard(model) makes the embedding, final norm and output
   * layer the root unit, which FSDP2 never reshards after forward
   * (FSDPState._lazy_init: the root's post_forward_mesh_info is None, its
   * backward would gather it at once): gathered as forward starts, it is
   * resharded by its post-backward when backward ends (without pipeline
   * stages: a stage's model is then no such root) */
  r->root_kept = r->keep_last_gathered && wl->parallel.pp == 1;
}

/* Whether parameters are tensors of their own: PyTorch's own training
 * loop (no framework, or the Hugging Face Trainer) without ZeRO.
 * nn.Module's init allocates each parameter (and a master-weight wrapper
 * each fp32 copy) as the model is built, into an empty cache: the caching
 * allocator rounds each on its own, handing out a whole block when what
 * would remain of it is 1 MiB or less (CUDACachingAllocator.cpp
 * should_split: kSmallSize). Gradients set to None are made anew, tensor
 * by tensor, in each backward. Megatron-LM's contiguous buffers,
 * DeepSpeed's flattened groups (its BF16_Optimizer's shards among them)
 * and every ZeRO or FSDP partition are one allocation; without ZeRO
 * nothing is offloaded (the workload refuses it), so every state is on
 * the GPU. (A paged optimizer pages its own states, which are flat here
 * anyway; the parameters stay per tensor.) */
static bool per_tensor_states(const vs_workload *wl)
{
  int fw = wl->training.framework;
  return (fw == VS_FW_NONE || fw == VS_FW_HF) && wl->parallel.zero == 0;
}

/* Each model state's bytes and the ranks it is sharded over. */
static void shard_states(const vs_workload *wl, const vs_model *m,
                         vs_recipe *r)
{
  uint64_t dp = vs_workload_shard_ranks(&wl->parallel);
  r->grad_elem_bytes = wl->training.grad_dtype == VS_GRAD_FP32
                           ? 4
                           : m->param_elem_bytes;
  r->optimizer = state(wl, 1, 4); /* fp32 states */
  /* DeepSpeed's BF16_Optimizer (vs_workload_deepspeed_optimizer) shards the
   * fp32 master and Adam states over dp as ZeRO-1 does, and all-gathers
   * the updated parameters (frameworks.md 2.1) */
  if (bf16_optimizer(wl))
    r->optimizer.degree = dp;
  /* the experts' states shard over the ranks that hold the same ones
   * (the expert-data-parallel group) */
  r->expert_optimizer = r->optimizer;
  if (r->expert_optimizer.degree > 0)
    r->expert_optimizer.degree = vs_workload_expert_dp(&wl->parallel);
  r->grads = state(wl, 2, r->grad_elem_bytes);
  /* ... and from ZeRO-2 on their gradients: DeepSpeed's stage 2 keeps a
   * partition of each param group's gradients (stage_1_and_2.py
   * copy_grads_in_partition: params_in_partition of every group), an MoE
   * group's over its expert_dp_process_group (_configure_moe_settings:
   * real_dp_process_group, partition_count) */
  r->expert_grads = r->grads;
  if (r->expert_grads.degree > 0)
    r->expert_grads.degree = vs_workload_expert_dp(&wl->parallel);
  r->params = state(wl, 3, m->param_elem_bytes);
}

/* Where gradients go as backward makes them (reduced at once, bucketed,
 * after the whole backward) and how parameters come back (gathered per
 * block, after the step); after resolve_offload. */
static void resolve_grad_flow(const vs_workload *wl, vs_recipe *r)
{
  uint64_t dp = vs_workload_shard_ranks(&wl->parallel),
           zero = wl->parallel.zero;
  /* without data parallelism ZeRO-3 still fetches each block when its
   * parameters live off the GPU, and ZeRO-2/3 still hand each gradient on
   * as it is made when the host takes it */
  r->gather_params = zero >= 3 && (dp > 1 || r->offload.fetch_params);
  r->gather_traced = r->gather_params &&
                     vs_workload_deepspeed_zero3(wl->training.framework, zero);
  r->gather_live_elems = wl->parallel.max_live_parameters;
  r->gather_reuse_elems = wl->parallel.max_reuse_distance;
  r->step_in_backward = wl->training.optimizer_in_backward;
  r->transient_grads = (zero >= 2 && (dp > 1 || r->offload.cpu_step)) ||
                       r->step_in_backward;
  /* a rank that steps only its partition needs only that partition's
   * sum: ZeRO-1 reduce-scatters too (Megatron-LM's distributed optimizer
   * in place, param_and_grad_buffer.py start_grad_sync; DeepSpeed's
   * stage 1 and 2 with reduce_scatter on, its default, stage_1_and_2.py;
   * frameworks.md 2.2 and 3.1), the parameters all-gathered after the
   * step (gather_after_step); but DeepSpeed's BF16_Optimizer, which the
   * engine all-reduces for (engine.py allreduce_gradients:
   * buffered_allreduce_fallback over get_grads_for_reduction) */
  r->grad_reduce = zero >= 1 && ds_optimizer(wl) != VS_DS_OPT_BF16
                       ? VS_COLL_REDUCE_SCATTER
                       : VS_COLL_ALL_REDUCE;
  r->reduce_on_compute = r->transient_grads && !r->step_in_backward &&
                         !wl->parallel.overlap_grad_reduce;
  /* torch.distributed.pipelining with FSDP2 (stage.py
   * backward_maybe_with_nosync: set_requires_gradient_sync(False),
   * set_reshard_after_backward(False); _post_backward after the last
   * backward), torchtitan's reshard_after_forward = False under PP
   * (frameworks.md 4.3) */
  r->pipelined_fsdp = wl->training.framework == VS_FW_FSDP2 &&
                      wl->parallel.pp > 1 && r->gather_params &&
                      !r->offload.fetch_params && !r->step_in_backward &&
                      !r->offload.cpu_step;
  /* reductions on the compute stream cannot fall behind it */
  r->reduce_depth =
      r->transient_grads && !r->reduce_on_compute ? reduce_depth(wl) : 0;
  /* gradients that wait for the step can wait for the whole backward
   * (overlap_grad_reduce = false with ZeRO-2 is reduce_on_compute; the
   * workload refuses it with the others) */
  r->reduce_after_backward =
      !wl->parallel.overlap_grad_reduce && !r->transient_grads;
  /* Megatron-LM turns bucketing off without --overlap-grad-reduce, on
   * pipeline ranks past the first and for model chunks past the first
   * (distributed_data_parallel.py: bucket_size = None) */
  r->buckets_first_chunk = wl->training.framework == VS_FW_MEGATRON;
  r->gather_after_step = vs_workload_grads_shared(&wl->parallel) &&
                         (zero == 1 || zero == 2 || bf16_optimizer(wl));
}

/* Whether the optimizer keeps its states in the weights' dtype: PyTorch's
 * own optimizers make them zeros_like(param) (torch/optim/adamw.py
 * _init_group), 16-bit for 16-bit weights where no wrapper keeps an fp32
 * master copy to step instead, as the Hugging Face Trainer and torchtune
 * run them (frameworks.md 6.2: torchtune's bf16 LoRA at 2 + 2 + 4 bytes a
 * parameter) and as framework none with master_weights = false reads;
 * bitsandbytes' optimizers (paged_optimizer, adam8bit) make 32-bit or
 * 8-bit states whatever the weights' dtype (Optimizer2State.init_state,
 * optim_bits). Megatron-LM, DeepSpeed and FSDP2 step fp32 masters or fp32
 * weights. */
static bool states_in_param_dtype(const vs_training_conf *t)
{
  return (t->framework == VS_FW_HF || t->framework == VS_FW_NONE) &&
         !t->master_weights && !t->paged_optimizer;
}

/* What the pipeline, the framework and PyTorch's own loop add to the
 * states: the embedding copy, the step's copies, per-tensor states and
 * the first step; after resolve_grad_flow. */
static void resolve_state_handling(const vs_workload *wl, vs_recipe *r)
{
  uint64_t dp = vs_workload_shard_ranks(&wl->parallel);
  /* With tied embeddings and pp > 1 the first and last stages each hold the
   * word embeddings and all-reduce their gradients (Megatron-LM's
   * embedding group). */
  /* the last stage's copy of the word embeddings: a tied output layer's,
   * or the multi-token prediction's lookups' */
  r->embedding_sync = wl->parallel.pp > 1 && (wl->model.tied_embeddings ||
                                              wl->model.mtp_layers > 0);
  r->step_copy = step_copy(wl, r);
  r->lp_grads_kept =
      ds_optimizer(wl) == VS_DS_OPT_BF16 && !wl->training.optimizer_in_backward;
  r->step_passes = step_passes(&wl->training);
  r->step_unscaled = step_unscaled(&wl->training);
  /* each unpacked state: read (2 B) and written in fp32 (4 B), read and
   * written by the kernel in fp32 (8 B where its 16-bit state is 4) and
   * packed back (4 + 2): 16 B more a stepped element */
  r->step_passes.unscaled = 16.0 * r->step_unscaled;
  r->step_sqrt_list = wl->training.optimizer_impl == VS_OPTIMPL_FOREACH &&
                      (wl->training.optimizer == VS_OPT_ADAMW ||
                       wl->training.optimizer == VS_OPT_ADAM);
  resolve_fsdp2(wl, r);
  resolve_buckets(wl, r);
  r->ddp_bucket_copy = wl->training.framework == VS_FW_HF && dp > 1;
  r->states_in_param_dtype = states_in_param_dtype(&wl->training);
  /* DeepSpeed's FP16_Optimizer sets each fp16 gradient to None once its
   * group is flattened to fp32 for the step (frameworks.md 2.1): "14 in
   * forward from step 2" */
  r->grads_set_to_none =
      (wl->training.set_grads_to_none || r->step_copy == VS_STEP_COPY_FLAT) &&
      !r->transient_grads && !r->step_in_backward;
  r->reduced_grads_set_to_none = wl->training.set_grads_to_none &&
                                 r->transient_grads && !r->step_in_backward &&
                                 !r->offload.cpu_step &&
                                 r->grads.place == VS_PLACE_GPU;
  r->per_tensor_states = per_tensor_states(wl);
  r->fp8_weight_cache = wl->training.precision == VS_PREC_FP8 &&
                        vs_framework_megatron(wl->training.framework) &&
                        !r->gather_params;
  r->first_step_states = r->per_tensor_states && !r->step_in_backward &&
                         !wl->training.paged_optimizer &&
                         wl->runtime.allocator == VS_ALLOC_CACHING;
}

static void resolve_states(const vs_workload *wl, const vs_model *m,
                           vs_recipe *r)
{
  shard_states(wl, m, r);
  resolve_offload(wl, r);
  resolve_grad_flow(wl, r);
  resolve_state_handling(wl, r);
}

/* Streams and groups: tensor-parallel collectives on the compute stream
 * (Megatron issues them there), data-parallel traffic on its own stream,
 * pipeline sends and receives on theirs; whether compute waits for the
 * sends, and in how many parts the tensor-parallel ranks send the pipeline
 * tensor. */
static void resolve_comm(const vs_workload *wl, vs_recipe *r)
{
  const vs_parallel_conf *p = &wl->parallel;
  static const vs_comm_plan plans[VS_USE_N] = {
      [VS_USE_OP] = {VS_STREAM_COMPUTE, VS_GROUP_TP},
      [VS_USE_GRAD_REDUCE] = {VS_STREAM_COMM, VS_GROUP_DP},
      [VS_USE_PARAM_GATHER] = {VS_STREAM_COMM, VS_GROUP_DP},
      [VS_USE_STEP_GATHER] = {VS_STREAM_COMM, VS_GROUP_DP},
      [VS_USE_EMBED_SYNC] = {VS_STREAM_COMM, VS_GROUP_EMBEDDING},
      [VS_USE_SEND] = {VS_STREAM_SEND, VS_GROUP_PP},
      [VS_USE_RECV] = {VS_STREAM_RECV, VS_GROUP_PP},
  };
  memcpy(r->comm, plans, sizeof plans);
  if (r->reduce_on_compute)
    r->comm[VS_USE_GRAD_REDUCE].stream = VS_STREAM_COMPUTE;
  r->p2p_blocking = p->p2p == VS_P2P_BLOCKING;
  /* Megatron-LM 2021-22 (megatron/p2p_communication.py, _communicate)
   * scatters only a full tensor: with sequence parallelism each rank's
   * is already its 1/tp (and p2p_scatter_gather has nothing to split) */
  r->p2p_parts =
      p->p2p_scatter_gather && !vs_workload_sp(p) && p->tp > 1 ? p->tp : 1;
}

/* ------------------------------------------------------------------------
 * Block kinds
 * ------------------------------------------------------------------------ */

/* The checkpointing block b gets: only transformer layers are
 * checkpointed (Megatron-LM's recompute_granularity), and not those full
 * checkpointing leaves alone. */
static int block_checkpointing(const vs_workload *wl, const vs_block *b)
{
  if (b->role != VS_ROLE_LAYER || b->not_checkpointed)
    return VS_CKPT_NONE;
  return wl->training.checkpointing;
}

/* What checkpointing does to a saved tensor s of block b. */
static int keep_of(const vs_workload *wl, const vs_block *b, const vs_saved *s)
{
  int ckpt = block_checkpointing(wl, b);
  if (ckpt == VS_CKPT_NONE)
    return VS_KEEP;
  if (ckpt == VS_CKPT_FULL || ckpt == VS_CKPT_OPS)
    return VS_RECOMPUTE_BLOCK; /* ops: the block keeps its ckpt_bytes */
  return s->selective ? VS_RECOMPUTE_CORE : VS_KEEP;
}

/* The trainable share of the elements of params[first, first + n) of b
 * (1 with none). */
static double params_share(const vs_block *b, uint32_t first, uint32_t n)
{
  double all = 0, trainable = 0;
  for (uint32_t i = first; i < first + n; i++) {
    double e = (double)b->params[i].rows * (double)b->params[i].cols;
    all += e;
    trainable += b->params[i].trainable ? e : 0;
  }
  return all > 0 ? trainable / all : 1.0;
}

/* Whether op computes a weight gradient for weights elsewhere: an output
 * layer tied to the embedding (weight-gradient work, no weights here). */
static bool tied_weights(const vs_op_spec *op)
{
  return op->n_params == 0 && op->wgrad_flops > 0;
}

/* The share of op's weight-gradient work still done: the trainable part of
 * the elements of the weights it computes gradients for (the embedding's
 * for a tied output layer; 1 with none). */
static double trainable_share(const vs_recipe *r, const vs_block *b,
                              const vs_op_spec *op)
{
  return tied_weights(op) ? r->tied_share
                          : params_share(b, op->first_param, op->n_params);
}

/* Whether every weight op computes gradients for is frozen (an op with
 * no weights has none to compute). */
static bool weights_frozen(const vs_recipe *r, const vs_block *b,
                           const vs_op_spec *op)
{
  return (op->n_params > 0 || tied_weights(op)) &&
         trainable_share(r, b, op) == 0.0;
}

/* What becomes of saved tensor sv of an op whose weights are all frozen
 * (or not): a frozen weight's matmul keeps no input for its gradient
 * (autograd saves what the gradients it computes need); an FP8 weight
 * copy is kept with the activations only where ZeRO-3 gathers the weight
 * per block (the layout holds it for the step elsewhere). */
static uint8_t keep_saved(const vs_workload *wl, const vs_recipe *r,
                          const vs_block *b, const vs_saved *sv, bool frozen)
{
  if ((frozen && sv->wgrad_only) || (sv->weight_copy == VS_COPY_FP8 && !r->gather_params))
    return VS_NOT_SAVED;
  return (uint8_t)keep_of(wl, b, sv);
}

/* Whether op is a linear of torchao's float8 (vs_workload_fp8_lib), whose
 * backward computes its weight's gradient, and whose forward saves its
 * input, whether or not the weight trains (float8_linear.py:
 * save_for_backward(input_hp, weight_hp_t), and no needs_input_grad
 * test in backward): frozen or not, it runs as a trained one. */
static bool torchao_linear(const vs_workload *wl, const vs_op_spec *op)
{
  return vs_workload_fp8_lib(wl->training.precision, wl->training.framework) ==
             VS_FP8_TORCHAO &&
         vs_op_fp8_linear(op);
}

static void resolve_ops(const vs_workload *wl, const vs_recipe *r,
                        const vs_block *b, vs_kind_plan *k)
{
  int ckpt = block_checkpointing(wl, b);
  for (uint32_t i = 0; i < b->n_ops; i++) {
    const vs_op_spec *op = &b->ops[i];
    bool always = torchao_linear(wl, op);
    double skipped = always ? 0.0 : 1.0 - trainable_share(r, b, op);
    bool frozen = !always && weights_frozen(r, b, op);
    for (uint32_t s = op->first_saved; s < op->first_saved + op->n_saved; s++) {
      k->keep[s] = keep_saved(wl, r, b, &b->saved[s], frozen);
      k->recompute_block |= k->keep[s] == VS_RECOMPUTE_BLOCK;
      k->recompute_core |= k->keep[s] == VS_RECOMPUTE_CORE;
    }
    k->bwd_flops[i] = op->bwd_flops - op->wgrad_flops * skipped;
    k->bwd_bytes[i] = op->bwd_bytes - op->wgrad_bytes * skipped;
    k->wgrad_share[i] = 1.0 - skipped;
  }
  /* full checkpointing keeps the block input even when nothing is saved */
  k->recompute_block |= ckpt == VS_CKPT_FULL || ckpt == VS_CKPT_OPS;
  k->recompute_reuses_kept = ckpt == VS_CKPT_OPS;
}

/* Whether trainable tensor p's optimizer states include an fp32 master
 * copy (`master` permitting): with master weights, unless p is fp32. */
static bool has_master(const vs_training_conf *t, const vs_param_tensor *p,
                       vs_master_part master)
{
  return master == VS_WITH_MASTER && t->master_weights &&
         p->dtype != VS_DTYPE_FP32;
}

/* Bytes an element of a precision-aware optimizer state of that dtype. */
static uint64_t state_elem_bytes(int dtype)
{
  return dtype == VS_STATE_FP32 ? 4 : 2;
}

/* Megatron-LM's precision-aware optimizer (Transformer Engine's FusedAdam,
 * transformer_engine/pytorch/optimizers/fused_adam.py _initialize_state)
 * resizes Adam's n-element states in parts (the master copy first when
 * `master`): each moment in its dtype; the master copy in fp16 under
 * main_params_dtype = fp16, else fp32 save over bf16 weights, where it
 * keeps only the low 16 bits of each fp32 value as int16
 * (store_param_remainders: on in Megatron-LM's OptimizerConfig, with TE
 * >= 2.1; the bf16 weight is the high half). The fp32 scalar FusedAdam
 * keeps beside each 16-bit state (4 B a tensor) is not counted. */
static void precision_aware_parts(const vs_training_conf *t,
                                  const vs_param_tensor *p, bool master,
                                  uint64_t *parts)
{
  uint64_t n = p->rows * p->cols;
  bool remainders =
      t->main_params_dtype == VS_MAIN_FP32 && p->dtype == VS_DTYPE_BF16;
  if (master)
    *parts++ = n * (t->main_params_dtype == VS_MAIN_FP16 || remainders ? 2 : 4);
  parts[0] = n * state_elem_bytes(t->exp_avg_dtype);
  parts[1] = n * state_elem_bytes(t->exp_avg_sq_dtype);
}

/* The optimizer's state tensors of trainable tensor p, in out (how many
 * returned, the master copy first when has_master): fp32 states, or,
 * where the recipe keeps states in the parameter's dtype, 16-bit ones
 * for a 16-bit p (bitsandbytes' 8-bit states excepted). */
static unsigned state_parts(const vs_recipe *r, const vs_training_conf *t,
                            const vs_param_tensor *p, vs_master_part master,
                            uint64_t out[VS_OPT_STATE_TENSORS_MAX])
{
  bool with_master = has_master(t, p, master);
  unsigned n = vs_optimizer_state_tensors(
      t->optimizer, with_master ? VS_WITH_MASTER : VS_WITHOUT_MASTER, p->rows,
      p->cols, out);
  if (t->precision_aware_optimizer) /* Adam(W): master?, exp_avg, exp_avg_sq */
    precision_aware_parts(t, p, with_master, out);
  if (r->states_in_param_dtype && t->optimizer != VS_OPT_ADAM8BIT &&
      vs_dtype_size(p->dtype) == 2)
    for (unsigned i = 0; i < n; i++)
      out[i] /= 2; /* each a multiple of 4 bytes */
  return n;
}

uint64_t vs_recipe_new_grad_bytes(const vs_training_conf *t,
                                  const vs_param_tensor *p)
{
  uint64_t n = p->rows * p->cols;
  /* Transformer Engine's weight-gradient GEMM writes an FP8 weight's
   * gradient in its nominal dtype */
  if (p->dtype == VS_DTYPE_FP8_SCALED)
    return n * vs_dtype_size(vs_precision_param_dtype(t->precision));
  return vs_dtype_bytes(p->dtype, n);
}

void vs_recipe_tensor_states(const vs_recipe *r, const vs_training_conf *t,
                             const vs_param_tensor *p, vs_tensor_states *out)
{
  uint64_t n = p->rows * p->cols;
  memset(out, 0, sizeof *out);
  /* a trainable 16-bit weight kept in fp32 is one fp32 tensor; any other
   * is kept as its dtype's tensors */
  if (r->fp32_params && p->trainable &&
      (p->dtype == VS_DTYPE_BF16 || p->dtype == VS_DTYPE_FP16))
    out->param_parts[out->n_param_parts++] = 4 * n;
  else
    out->n_param_parts =
        vs_dtype_tensor_parts(p->dtype, p->rows, p->cols, out->param_parts);
  for (unsigned i = 0; i < out->n_param_parts; i++)
    out->stored_param += out->param_parts[i];
  if (!p->trainable)
    return;
  /* an fp32 tensor (LoRA adapters, PEFT's autocast_adapter_dtype) has
   * fp32 gradients and needs no fp32 master copy */
  out->grad = n * (p->dtype == VS_DTYPE_FP32 ? 4 : r->grad_elem_bytes);
  /* accumulated unsharded, FSDP2 keeps them in the reduce dtype
   * (FSDPParam.to_accumulated_grad_if_needed); BF16_Optimizer's .grad is
   * in the parameter's (lp_grads_kept) */
  out->made_grad =
      (r->reduce_copy && !r->pipelined_fsdp && p->dtype != VS_DTYPE_FP32) ||
              r->lp_grads_kept
          ? vs_recipe_new_grad_bytes(t, p)
          : out->grad;
  out->n_optimizer = state_parts(r, t, p, VS_WITH_MASTER, out->optimizer);
  out->master = has_master(t, p, VS_WITH_MASTER) ? out->optimizer[0] : 0;
}

/* The bytes of trainable tensor p's optimizer states that a paged
 * optimizer keeps in CUDA managed memory: those bitsandbytes makes with
 * get_state_buffer (state1 and state2, paged for tensors of at least 1e5
 * elements), not 8-bit Adam's absmax arrays, which init_state makes with
 * torch.zeros(..., device=p.device) in PyTorch's allocator
 * (bitsandbytes/optim/optimizer.py Optimizer2State.init_state), nor a
 * wrapper's master copy. */
static uint64_t paged_states_of(const vs_recipe *r, const vs_training_conf *t,
                                const vs_param_tensor *p)
{
  uint64_t parts[VS_OPT_STATE_TENSORS_MAX], bytes = 0;
  unsigned n = state_parts(r, t, p, VS_WITHOUT_MASTER, parts);
  /* vs_optimizer_state_tensors: state1, state2, then their absmax */
  if (t->optimizer == VS_OPT_ADAM8BIT && n > 2)
    n = 2;
  for (unsigned i = 0; i < n; i++)
    bytes += parts[i];
  return bytes;
}

/* Model states per kind. Every tensor's states are sharded over the
 * data-parallel group (r->params, grads, optimizer); a tensor that names
 * another group (expert or context parallel) is refused until the layout
 * places that group's shards. */
static int resolve_params(const vs_workload *wl, const vs_recipe *r,
                          const vs_block *b, vs_kind_plan *k, vs_error *err)
{
  const vs_training_conf *t = &wl->training;
  for (uint32_t i = 0; i < b->n_params; i++) {
    const vs_param_tensor *p = &b->params[i];
    uint64_t n = p->rows * p->cols, grad, states;
    vs_tensor_states ts;
    if (p->shard_group != VS_GROUP_DP && p->shard_group != VS_GROUP_EXPERT_DP)
      return vs_error_set(err, VS_EINPUT,
                          "model: %s of block %s shards its states over the "
                          "%s group; this version shards over dp and edp only",
                          p->name, b->name, vs_group_name(p->shard_group));
    vs_recipe_tensor_states(r, t, p, &ts);
    k->param_elems += n;
    k->param_bytes += vs_dtype_tensor_bytes(p->dtype, p->rows, p->cols);
    k->stored_param_bytes += ts.stored_param;
    if (!p->trainable)
      continue;
    k->trainable_param_bytes += ts.stored_param;
    k->trainable_elems += n;
    if (n > k->largest_trainable_elems)
      k->largest_trainable_elems = n;
    k->decay_elems += vs_param_matrix(p) ? n : 0;
    grad = ts.grad;
    states = 0;
    for (unsigned j = 0; j < ts.n_optimizer; j++)
      states += ts.optimizer[j];
    k->grad_bytes += grad;
    k->made_grad_bytes += ts.made_grad;
    k->optimizer_bytes += states;
    if (p->shard_group == VS_GROUP_EXPERT_DP) {
      k->expert_optimizer_bytes += states;
      k->expert_grad_bytes += grad;
      k->expert_param_bytes += vs_dtype_tensor_bytes(p->dtype, p->rows,
                                                     p->cols);
      k->expert_trainable_elems += n;
      k->expert_decay_elems += vs_param_matrix(p) ? n : 0;
    }
    if (t->paged_optimizer && n >= VS_PAGED_MIN_ELEMS)
      k->paged_bytes += paged_states_of(r, t, p);
  }
  return 0;
}

/* The last of b's ops (in forward order) for which `has` holds, or its
 * last op without one. */
static uint32_t last_op(const vs_block *b,
                        bool (*has)(const vs_block *, const vs_op_spec *))
{
  for (uint32_t i = b->n_ops; i-- > 0;)
    if (has(b, &b->ops[i]))
      return i;
  return b->n_ops ? b->n_ops - 1 : 0;
}

static bool makes_grads(const vs_block *b, const vs_op_spec *op)
{
  for (uint32_t p = op->first_param; p < op->first_param + op->n_params; p++)
    if (b->params[p].trainable)
      return true;
  return false;
}

static bool is_output(const vs_block *b, const vs_op_spec *op)
{
  (void)b;
  return op->output_layer;
}

static bool makes_embedding_grads(const vs_block *b, const vs_op_spec *op)
{
  (void)b;
  return op->embedding_grads;
}

/* Where backward, which runs the block's ops in reverse, makes its
 * gradients and the word embeddings', and where its forward ends: k's
 * grads_op, embedding_grads_op and output_op. */
static void grad_ops(const vs_block *b, vs_kind_plan *k)
{
  k->grads_op = last_op(b, makes_grads);
  k->embedding_grads_op = last_op(b, makes_embedding_grads);
  k->output_op = last_op(b, is_output);
}

/* Under Transformer Engine's fp8, the weights of the block's GEMMs (matrices,
 * not biases or norm scales; not those of matmuls outside its modules, no_fp8):
 * Transformer Engine quantizes each one not already in FP8 before its GEMM and
 * keeps the FP8 copy for backward (shared/reference/frameworks.md 7). Sets k's
 * fp8_weight_elems (all), fp8_copy_elems (those quantized) and fp8_gemms: an
 * op's gemm.batch GEMMs, as a GroupedLinear (the routed experts, one GEMM a
 * local expert) keeps scaling state for each of its num_gemms
 * (TransformerEngine d0067d0d, module/base.py set_meta_tensor:
 * fp8_meta["num_gemms"] * 3 forward and * 2 backward tensors). */
static void fp8_weights(const vs_workload *wl, const vs_block *b,
                        vs_kind_plan *k)
{
  if (vs_workload_fp8_lib(wl->training.precision, wl->training.framework) !=
      VS_FP8_TE)
    return; /* torchao's Float8Linear keeps neither (dynamic scaling: no
               amax history) */
  for (uint32_t i = 0; i < b->n_ops; i++) {
    const vs_op_spec *op = &b->ops[i];
    bool gemm = false;
    for (uint32_t p = op->first_param;
         vs_op_fp8_linear(op) && p < op->first_param + op->n_params; p++) {
      const vs_param_tensor *t = &b->params[p];
      if (!vs_param_matrix(t))
        continue;
      gemm = true;
      k->fp8_weight_elems += t->rows * t->cols;
      if (t->dtype != VS_DTYPE_FP8_SCALED)
        k->fp8_copy_elems += t->rows * t->cols;
    }
    k->fp8_gemms += gemm ? op->gemm.batch : 0;
  }
}

static int resolve_kind(const vs_workload *wl, vs_recipe *r,
                        const vs_block *b, vs_kind_plan *k, vs_error *err)
{
  memset(k, 0, sizeof *k);
  k->keep = malloc((b->n_saved ? b->n_saved : 1) * sizeof *k->keep);
  k->bwd_flops = malloc((b->n_ops ? b->n_ops : 1) * sizeof *k->bwd_flops);
  k->bwd_bytes = malloc((b->n_ops ? b->n_ops : 1) * sizeof *k->bwd_bytes);
  k->wgrad_share =
      malloc((b->n_ops ? b->n_ops : 1) * sizeof *k->wgrad_share);
  if (!k->keep || !k->bwd_flops || !k->bwd_bytes || !k->wgrad_share)
    return vs_error_set(err, VS_ENOMEM, "out of host memory for the recipe");
  resolve_ops(wl, r, b, k);
  fp8_weights(wl, b, k);
  grad_ops(b, k);
  return resolve_params(wl, r, b, k, err);
}

/* Kinds all of whose instances come before the model's first trainable
 * weight need no backward: autograd builds no graph for ops none of whose
 * inputs requires a gradient, so they save nothing either. */
static void resolve_frozen_prefix(const vs_model *m, vs_recipe *r)
{
  size_t n_inst = (size_t)m->layers + 2, first = n_inst;
  for (size_t i = 0; i < n_inst && first == n_inst; i++)
    if (r->kinds[m->inst_kind[i]].trainable_elems > 0)
      first = i;
  for (uint32_t k = 0; k < r->n_kinds; k++) {
    vs_kind_plan *kp = &r->kinds[k];
    bool before = true;
    for (size_t i = first; i < n_inst && before; i++)
      before = m->inst_kind[i] != k;
    if (!before)
      continue;
    kp->no_backward = true;
    kp->recompute_block = kp->recompute_core = false;
    for (uint32_t s = 0; s < m->kinds[k].n_saved; s++)
      kp->keep[s] = VS_NOT_SAVED;
  }
}

/* ------------------------------------------------------------------------
 * Entry points
 * ------------------------------------------------------------------------ */

int vs_recipe_build(const vs_workload *wl, const vs_model *m, vs_recipe *r,
                    vs_error *err)
{
  memset(r, 0, sizeof *r);
  resolve_states(wl, m, r);
  resolve_comm(wl, r);
  r->kinds = calloc(m->n_kinds ? m->n_kinds : 1, sizeof *r->kinds);
  if (!r->kinds)
    return vs_error_set(err, VS_ENOMEM, "out of host memory for the recipe");
  {
    const vs_block *embed = &m->kinds[m->inst_kind[0]];
    r->tied_share = params_share(embed, 0, embed->n_params);
  }
  for (uint32_t k = 0; k < m->n_kinds; k++) {
    r->n_kinds = k + 1;
    int rc = resolve_kind(wl, r, &m->kinds[k], &r->kinds[k], err);
    if (rc) {
      vs_recipe_fini(r);
      return rc;
    }
  }
  resolve_frozen_prefix(m, r);
  step_wrap(wl, m, r); /* reads the kinds' gradients */
  /* tied embeddings split over the pipeline are kept in sync only when
   * they train */
  r->embedding_sync = r->embedding_sync &&
                      r->kinds[m->inst_kind[0]].trainable_elems > 0;
  return 0;
}

void vs_recipe_fini(vs_recipe *r)
{
  for (uint32_t k = 0; k < r->n_kinds; k++) {
    free(r->kinds[k].keep);
    free(r->kinds[k].bwd_flops);
    free(r->kinds[k].bwd_bytes);
    free(r->kinds[k].wgrad_share);
  }
  free(r->kinds);
  memset(r, 0, sizeof *r);
}

const vs_kind_plan *vs_recipe_kind(const vs_recipe *r, const vs_model *m,
                                   size_t inst)
{
  return &r->kinds[m->inst_kind[inst]];
}

uint64_t vs_recipe_kind_saved_bytes(const vs_recipe *r, const vs_model *m,
                                    uint32_t kind)
{
  const vs_block *b = &m->kinds[kind];
  uint64_t sum = 0;
  for (uint32_t s = 0; s < b->n_saved; s++)
    if (r->kinds[kind].keep[s] != VS_NOT_SAVED)
      sum += b->saved[s].bytes;
  return sum;
}

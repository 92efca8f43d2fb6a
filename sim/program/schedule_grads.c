/* schedule_grads.c - gradient reduction and the optimizer step of a
 * stage's program (see schedule_int.h): buckets reduced on the
 * communication stream as backward makes them (or after it), the
 * optimizer on the GPU or the host, and the all-gather of updated
 * parameters. */
#include "schedule_int.h"

#include "category.h"
#include "resource_kinds.h"

/* ------------------------------------------------------------------------
 * Gradient reduction and the optimizer
 * ------------------------------------------------------------------------ */

/* This GPU's share of `elems` gradient elements. */
static uint64_t partition_elems(const builder *b, uint64_t elems)
{
  return vs_recipe_shard(&b->r->offload.host_grads, 4 * elems) / 4;
}

/* The stream a reduced bucket's way to the host runs on: DeepSpeed
 * ZeRO-1/2 (vs_offload_plan bit16_buffers) issues its copies and adds
 * within the stream its reduction ran on, one after the other
 * (stage_1_and_2.py reduce_ipg_grads: `with stream(stream)`, the
 * reduction stream with overlap_comm, else the current one), so the next
 * bucket's reduction waits for them; else a copy stream of their own. */
static int host_stream(const builder *b, int copy_stream)
{
  return b->r->offload.bit16_buffers > 0 ? VS_STREAM_COMM : copy_stream;
}

/* Copies this GPU's reduced partition of the open bucket to the host once
 * `after` has ended. DeepSpeed casts it to fp32 on the GPU first
 * (stage_1_and_2.py async_inplace_copy_grad_to_fp32_buffer_from_gpu), so
 * 4 B an element cross PCIe and an fp32 copy lives on the GPU meanwhile. */
static uint32_t grads_to_host(builder *b, int layer, int mb, uint32_t after)
{
  uint64_t bytes = 4 * partition_elems(b, b->bucket_elems);
  uint32_t op = sb_copy_op(b, host_stream(b, VS_STREAM_D2H), VS_RES_PCIE_D2H,
                           "grad_to_host", layer, mb, bytes, after,
                           sb_states_side(b->r->optimizer.place));
  if (op != after)
    sb_transient(b, op, bytes, VS_CAT_TEMP);
  return op;
}

/* DeepSpeed ZeRO-2's host sum of the open bucket (vs_recipe_host_sums),
 * `bytes` of it, comes in to the GPU's staging buffer once `after` has
 * ended, and one kernel adds it to the gradients, reading both and
 * writing the sum, both on its reduction's stream (host_stream). Returns
 * the add. */
static uint32_t add_host_sum(builder *b, int layer, int mb, uint64_t bytes,
                             uint32_t after)
{
  op_split t = sb_roofline_split(b, 0.0, 3.0 * (double)bytes);
  uint32_t op;
  after = sb_states_copy(b, VS_STREAM_COMM, VS_RES_PCIE_SWITCH, "grad_sum_in",
                         layer, mb, bytes, after);
  sb_add_launch(b, &t, 1);
  op = sb_new_op(b, VS_STREAM_COMM, VS_PHASE_OFFLOAD, "grad_sum_add", layer, mb,
                 sb_split_total(&t), 0.0, 3.0 * (double)bytes);
  sb_add_dep(b, op, after);
  return op;
}

/* The open bucket's reduced partition goes toward the host's optimizer
 * once `after` has ended: out in fp32 (grads_to_host) at the step's last
 * micro-batch, every micro-batch without host sums. With them
 * (vs_recipe_host_sums: micro-batch mb is ZeRO-2's micro_step_id)
 * DeepSpeed first adds the sum so far, copied in, past micro-step 0, and
 * copies the bucket's 16-bit gradients out
 * (async_accumulate_grad_in_cpu_via_gpu, then
 * async_inplace_copy_grad_to_fp32_buffer_from_gpu at the accumulation
 * boundary). Its ops are shown at `layer`, the bucket's. Returns the last
 * op. */
static uint32_t offload_bucket(builder *b, int layer, int mb, uint32_t after)
{
  uint64_t bytes =
      vs_recipe_bit16_host_bytes(b->r, partition_elems(b, b->bucket_elems));
  if (!vs_recipe_host_sums(b->r, b->lay->grad_accum))
    return grads_to_host(b, layer, mb, after);
  /* DeepSpeed's, on its reduction's stream (host_stream) */
  if (mb > 0)
    after = add_host_sum(b, layer, mb, bytes, after);
  after = sb_states_copy(b, VS_STREAM_COMM, VS_RES_PCIE_D2H, "grad_sum_out",
                         layer, mb, bytes, after);
  if ((uint64_t)mb + 1 == b->lay->grad_accum)
    return grads_to_host(b, layer, mb, after);
  return after;
}

/* Whether the gradients the step reads are made anew each step, set to
 * None by the one before (vs_recipe grads_set_to_none, reduced_grads_set_
 * to_none), rather than resident from the setup on. */
static bool grads_per_step(const builder *b)
{
  return b->r->grads_set_to_none || b->r->reduced_grads_set_to_none;
}

/* Under vs_recipe reduced_grads_set_to_none, inst's share appears as op
 * (its reduction) starts: the shard of all the unsharded bytes made so far
 * less the earlier shares, so that they add up to the stage's gradients
 * (vs_stage_layout grads_bytes, the shard of them all) to the byte. */
static void share_appears(builder *b, uint32_t inst, uint32_t op)
{
  uint64_t shard;
  b->kept_full += sb_plan_of(b, inst)->grad_bytes;
  b->kept_expert += sb_plan_of(b, inst)->expert_grad_bytes;
  shard = vs_recipe_grads_shard(b->r, b->kept_full, b->kept_expert);
  b->grads_kept[inst] = sb_new_buffer(b, shard - b->kept_shard, VS_CAT_GRADS);
  sb_alloc_on(b, op, b->grads_kept[inst]);
  b->kept_shard = shard;
}

/* The outputs of reduction op, the open bucket's reduced shards, on the
 * GPU: where a block's share of the step's gradients is None
 * (reduced_grads_set_to_none, its first reduction of the step) the output
 * becomes it (share_appears); else, under FSDP2 (recipe reduce_copy), it
 * is added into the share and dropped, a transient of the reduction
 * (foreach_reduce's reduce_output, on its stream). */
static void reduce_outputs(builder *b, uint32_t op)
{
  uint64_t added = 0;
  for (size_t i = 0; i < b->n_bucket; i++) {
    uint32_t inst = b->bucket[i];
    if (b->r->reduced_grads_set_to_none && b->grads_kept[inst] == NONE)
      share_appears(b, inst, op);
    else
      added += vs_recipe_grads_shard(b->r, sb_plan_of(b, inst)->grad_bytes,
                                     sb_plan_of(b, inst)->expert_grad_bytes);
  }
  if (b->r->reduce_copy && !b->r->offload.cpu_step && added > 0)
    sb_transient(b, op, added, VS_CAT_GRADS);
}

/* A bucket's reduction is being issued: the compute stream's next op
 * waits for the bucket reduce_depth before it (the reductions end in
 * order, so for every earlier one too). */
static void wait_for_bucket_before(builder *b)
{
  uint64_t depth = b->r->reduce_depth;
  if (depth > REDUCE_DEPTH_MAX) {
    b->failed = true;
    vs_error_set(b->err, VS_EINPUT,
                 "schedule: reduce_depth %llu is more than the %d buckets "
                 "the schedule remembers (a recipe bug)",
                 (unsigned long long)depth, REDUCE_DEPTH_MAX);
    return;
  }
  if (depth > 0 && b->n_reduced >= depth)
    b->reduce_wait = b->reduced[(b->n_reduced - depth) % REDUCE_DEPTH_MAX];
}

/* The bucket whose last op is `done` is issued. */
static void record_bucket(builder *b, uint32_t done)
{
  if (b->r->reduce_depth == 0)
    return;
  b->reduced[b->n_reduced % REDUCE_DEPTH_MAX] = done;
  b->n_reduced++;
}

/* The next compute op frees buf as it starts (its predecessor first, if
 * no compute op came between: the reductions end in order). */
static void release_at_next_compute(builder *b, uint32_t buf)
{
  if (b->released[1] != NONE) {
    b->failed = true;
    vs_error_set(b->err, VS_EINPUT,
                 "schedule: three reduce-scatter inputs wait for a compute "
                 "op (a schedule bug)");
    return;
  }
  b->released[1] = b->released[0];
  b->released[0] = buf;
}

/* The step's end: inputs still waiting for a compute op (none followed the
 * last backward: the optimizer steps on the host) go when the newest op,
 * which follows their reduce-scatters, ends. */
void sb_release_at_step_end(builder *b)
{
  for (int i = 0; i < 2 && b->p->n_ops > 0; i++) {
    sb_free_on(b, (uint32_t)(b->p->n_ops - 1), b->released[i], AT_END);
    b->released[i] = NONE;
  }
  b->reduce_wait = NONE;
}

/* Pipelined FSDP2's reshard of inst's kept parameters as op starts. */
static void reshard_kept(builder *b, size_t inst, uint32_t op)
{
  if (b->r->pipelined_fsdp)
    sb_drop_gather(b, inst, op, AT_START);
}

/* FSDP2's post-backward (recipe reduce_copy) for the open bucket: it
 * waits for the bucket before's reduce-scatter and frees that one's input
 * (reduce_scatter_state), then copies the bucket's gradients into a new
 * reduce-scatter input in one compute-stream kernel (torch._chunk_cat in
 * foreach_reduce), reading them and writing the input, and frees them.
 * Returns the copy, which the reduce-scatter follows. */
static uint32_t copy_to_reduce_input(builder *b, int layer, int mb,
                                     uint32_t after)
{
  uint64_t bytes = b->bucket_made + b->bucket_fill;
  op_split t = sb_roofline_split(b, 0.0, (double)bytes);
  uint32_t op;
  wait_for_bucket_before(b);
  if (b->reduce_input != NONE)
    release_at_next_compute(b, b->reduce_input);
  sb_add_launch(b, &t, 1);
  op = sb_compute_op(b, VS_PHASE_BWD, "reduce_copy_in", layer, mb, 0.0,
                     (double)bytes, &t);
  sb_add_dep(b, op, after);
  /* pipelined, the post-backward reshards the blocks first */
  for (size_t i = 0; i < b->n_bucket; i++)
    reshard_kept(b, b->bucket[i], op);
  b->reduce_input = sb_new_buffer(b, b->bucket_fill, VS_CAT_GRADS);
  sb_alloc_on(b, op, b->reduce_input);
  for (size_t i = 0; i < b->n_bucket; i++) {
    sb_free_on(b, op, b->grad_buf[b->bucket[i]], AT_END);
    b->grad_buf[b->bucket[i]] = NONE;
  }
  return op;
}

/* Pipelined FSDP2: the blocks still gathered once the stage's reductions
 * are issued (those without gradients to reduce) are resharded by their
 * post-backward, which a zero-time op on the compute stream stands for. */
void sb_reshard_rest(builder *b)
{
  op_split none = {{0}};
  uint32_t op = NONE;
  for (size_t inst = 0; b->r->pipelined_fsdp && inst < b->n_inst; inst++) {
    if (b->gather_buf[inst] == NONE)
      continue;
    if (op == NONE)
      op = sb_compute_op(b, VS_PHASE_BWD, "fsdp_reshard", -1, -1, 0.0, 0.0,
                         &none);
    reshard_kept(b, inst, op);
  }
}

/* The end of a chunk's backward (FSDP2's finalize_backward): the compute
 * stream waits for the last reduce-scatter, and the inputs still held go
 * as its next op starts. */
void sb_release_reduce_inputs(builder *b)
{
  if (b->reduce_input == NONE)
    return;
  b->reduce_wait = b->reduce_input_op;
  release_at_next_compute(b, b->reduce_input);
  b->reduce_input = NONE;
}

/* DeepSpeed ZeRO-2 copies each reduced bucket's share into its gradient
 * partition (stage_1_and_2.py copy_grads_in_partition), made on first use
 * and dropped in each micro-step's epilogue (_release_ipg_buffers), after
 * its sum went into the accumulated one (averaged_gradients, views of the
 * first micro-step's partition): from the second micro-step on a fresh
 * partition lives beside the resident one, from the micro-step's first
 * bucket reduced (op `reduce`) to its epilogue (sb_release_micro_ipg).
 * Not with the optimizer on the host, where the reduced gradients go. */
static void fresh_partition(builder *b, int mb, uint32_t reduce)
{
  if (b->ipg[0] == NONE || !sb_transient_grads(b) || mb == 0 ||
      b->r->offload.cpu_step || b->ipg_partition != NONE)
    return;
  b->ipg_partition =
      sb_new_buffer(b, b->lay->stages[b->stage].grads_bytes, VS_CAT_GRADS);
  sb_alloc_on(b, reduce, b->ipg_partition);
}

/* A backward-phase op on the compute stream that moves `bytes` of HBM
 * in `kernels` launches over elems elements (a copy, an add, a zeroing),
 * priced as a roofline. */
static uint32_t hbm_op(builder *b, const char *name, int layer, int mb,
                       double elems, double bytes, unsigned kernels)
{
  op_split t = sb_roofline_split(b, elems, bytes);
  sb_add_launch(b, &t, kernels);
  return sb_compute_op(b, VS_PHASE_BWD, name, layer, mb, elems, bytes, &t);
}

sb_hp_work sb_hp_work_of(const builder *b, size_t first, size_t last)
{
  sb_hp_work w = {0, 0, 0, 0, 0};
  if (!b->r->lp_grads_kept)
    return w;
  for (size_t inst = first; inst <= last; inst++) {
    const vs_block *blk = sb_block_of(b, inst);
    if (b->stage_inst[inst] == NONE)
      continue;
    for (uint32_t i = 0; i < blk->n_params; i++) {
      vs_tensor_states ts;
      double kept, buffer;
      bool cast;
      if (!blk->params[i].trainable)
        continue;
      vs_recipe_tensor_states(b->r, &b->wl->training, &blk->params[i], &ts);
      kept = (double)ts.made_grad;
      buffer = (double)ts.grad;
      cast = kept < buffer;
      w.elems += (double)(blk->params[i].rows * blk->params[i].cols);
      w.kept += kept;
      /* the cast (kept read, buffer written), then the add: the buffer
       * read, the addend read and the buffer written */
      w.moved += cast ? kept + 4.0 * buffer : kept + 2.0 * buffer;
      w.kernels += cast ? 2 : 1;
      if (cast && buffer > w.largest_cast)
        w.largest_cast = buffer;
    }
  }
  return w;
}

void sb_zero_lp_grads(builder *b, const sb_hp_work *w, int mb)
{
  if (mb == 0 || w->kept == 0)
    return;
  hbm_op(b, "lp_grads_zero", -1, mb, 0.0, w->kept, 1);
}

void sb_update_hp_grads(builder *b, const sb_hp_work *w, int mb)
{
  uint32_t op;
  if (w->kept == 0)
    return;
  op = hbm_op(b, "hp_grads_update", -1, mb, w->elems, w->moved, w->kernels);
  if (w->largest_cast > 0)
    sb_transient(b, op, (uint64_t)w->largest_cast, VS_CAT_TEMP);
}

/* DeepSpeed ZeRO-3's copy of the open bucket for its reduce-scatter
 * (coalesced_collectives.py reduce_scatter_coalesced: torch.cat of each
 * rank's chunks of every gradient, then divided in place by the
 * data-parallel size; a view when the bucket is one tensor that divides
 * evenly, not modelled), a transient of the reduce-scatter `op`, made on
 * its stream. DeepSpeed's buckets close at a tensor, vsim's hold whole
 * blocks, so a block larger than the bucket stands for several reduced
 * one after another: the copy of one at a time. Its time (4 B moved a
 * gradient byte, on DeepSpeed's reduction stream) is not priced: vsim
 * has no reduction stream apart from the gathers', which it would hold
 * back. */
static void coalesce_bucket(builder *b, uint32_t op)
{
  uint64_t bucket = b->r->bucket_bytes;
  sb_transient(b, op, b->bucket_fill < bucket ? b->bucket_fill : bucket,
               VS_CAT_GRADS);
}

/* The bytes on the wire of `bytes` of gradients, `elems` elements:
 * DeepSpeed's engine all-reduce casts every element to its
 * communication dtype (recipe engine_allreduce_bytes, whatever each
 * tensor's dtype), others send them as they are. */
static uint64_t wire_bytes(const builder *b, uint64_t bytes, uint64_t elems)
{
  return b->r->engine_allreduce_bytes ? elems * b->r->engine_allreduce_bytes
                                      : bytes;
}

/* DeepSpeed's engine all-reduce of the open bucket (op, its last
 * reduction) holds the bucket flattened in the gradients' dtype (a view
 * where the bucket is one tensor: BF16_Optimizer's buffer of 5e8 elements
 * or more, recipe engine_allreduce_flat; a smaller one shares its bucket
 * with the other group's and is copied) and,
 * where the communication dtype differs, cast to it (allreduce_bucket:
 * flatten, .to(communication_data_type)); the flattening, the cast and
 * the copies back are not priced. With experts in a group of their own
 * op is their all-reduce, which DeepSpeed runs after the others' with
 * copies of their own: both held there, not modelled apart. */
static void engine_allreduce_copies(builder *b, uint32_t op)
{
  uint64_t wire = wire_bytes(b, b->bucket_fill, b->bucket_elems);
  if (!b->r->engine_allreduce_bytes)
    return;
  if (!b->r->engine_allreduce_flat ||
      b->bucket_elems < VS_DEEPSPEED_BUCKET_ELEMS)
    sb_transient(b, op, b->bucket_fill, VS_CAT_GRADS);
  if (wire != b->bucket_fill)
    sb_transient(b, op, wire, VS_CAT_GRADS);
}

/* The layer the open bucket's ops are shown at (ops.csv, the report):
 * that of its lowest block, where backward closes it (sb_layer_of: -1
 * when it holds the embedding). */
static int bucket_layer(const builder *b)
{
  size_t lowest = SIZE_MAX;
  for (size_t i = 0; i < b->n_bucket; i++)
    if (b->bucket[i] < lowest)
      lowest = b->bucket[i];
  return lowest == SIZE_MAX ? -1 : sb_layer_of(lowest);
}

/* Reduces the open bucket over the data-parallel group (when there is
 * one) once op `last` has ended and, with the optimizer on the host,
 * copies this GPU's reduced partition of it out; the bucket's gradients
 * are freed once both end. */
void sb_flush_bucket(builder *b, int mb, uint32_t last)
{
  int kind = b->r->grad_reduce;
  int group = b->r->comm[VS_USE_GRAD_REDUCE].group;
  int layer = bucket_layer(b);
  /* the reduction waits for the last copy into the bucket too: made
   * after the op the caller names when the gradients were bucketed once
   * backward was done (sb_reduce_listed), and each waiting for it, the
   * newer of the two (ops are numbered as they are made) */
  if (b->bucket_copied != NONE && (last == NONE || b->bucket_copied > last))
    last = b->bucket_copied;
  b->bucket_copied = NONE;

  if (b->bucket_fill == 0) {
    b->n_bucket = 0;
    return;
  }
  if (vs_workload_grads_shared(&b->wl->parallel)) {
    if (b->r->reduce_copy)
      last = copy_to_reduce_input(b, layer, mb, last);
    last = sb_split_comm(b, VS_USE_GRAD_REDUCE, vs_coll_op_name(group, kind),
                         kind, wire_bytes(b, b->bucket_fill, b->bucket_elems),
                         /* the routed experts' are one dtype, the grads' */
                         wire_bytes(b, b->bucket_expert,
                                    b->bucket_expert / b->r->grad_elem_bytes),
                         layer, mb, last);
    if (b->r->ipg_resident)
      coalesce_bucket(b, last);
    engine_allreduce_copies(b, last);
    b->reduce_input_op = last;
    fresh_partition(b, mb, last);
  }
  reduce_outputs(b, last);
  if (b->r->offload.cpu_step) {
    last = offload_bucket(b, layer, mb, last);
    /* reduced on the compute stream, the copy is issued there too and
     * the next compute op waits for it: DeepSpeed without overlap_comm
     * reduces and copies on the current stream (stage_1_and_2.py
     * reduce_ipg_grads, async_inplace_copy_grad_to_fp32_buffer_from_gpu's
     * non_blocking copy_), so the copies never pile up on the GPU */
    if (b->r->reduce_on_compute)
      b->reduce_wait = last;
  }
  b->grads_done = last;
  if (!b->r->reduce_copy)
    wait_for_bucket_before(b);
  record_bucket(b, last);
  for (size_t i = 0; i < b->n_bucket; i++) {
    sb_free_on(b, last, b->grad_buf[b->bucket[i]], AT_END);
    b->grad_buf[b->bucket[i]] = NONE;
  }
  b->n_bucket = 0;
  b->bucket_fill = 0;
  b->bucket_made = 0;
  b->bucket_elems = 0;
  b->bucket_expert = 0;
}

/* The bytes that fill a bucket: [parallel] bucket, or none (a chunk's
 * gradients one bucket) where Megatron-LM buckets nothing (recipe
 * buckets_first_chunk): after the backward pass, or past the first
 * stage's first model chunk. */
static uint64_t bucket_limit(const builder *b)
{
  if (b->r->buckets_first_chunk &&
      (b->r->reduce_after_backward || b->unit_chunk != 0))
    return UINT64_MAX;
  return b->r->bucket_bytes;
}

/* How a framework copies the gradients into its reduction buckets. */
typedef enum {
  COPY_IPG_DIVIDED, /* DeepSpeed ZeRO-1/2 */
  COPY_DDP          /* PyTorch DDP */
} copy_kind;

/* A framework's copy of inst's gradients into its reduction buckets as
 * backward makes them, after `after`, each tensor's gradient read and
 * written once a pass, a kernel a copy:
 * - DeepSpeed ZeRO-1/2's contiguous gradients (ipg_copy,
 *   COPY_IPG_DIVIDED): stage_1_and_2.py
 *   reduce_independent_p_g_buckets_and_remove_grads' copy_ into the ipg
 *   buffer, but for a tensor larger than the bucket
 *   (extra_large_param_to_reduce, reduced where it is), and
 *   average_tensor's div_ of each by the data-parallel size (in a kernel
 *   a bucket, its floor not counted; on the reduction stream with
 *   overlap_comm, priced here on the compute stream all the same);
 * - PyTorch DDP (ddp_copy, COPY_DDP): the reducer divides each gradient
 *   while copying it into its bucket (reducer.cpp
 *   mark_variable_ready_dense: at::mul_out). */
static uint32_t bucket_copy(builder *b, size_t inst, int mb, uint32_t after,
                            copy_kind kind)
{
  const vs_block *blk = sb_block_of(b, inst);
  const vs_kind_plan *plan = sb_plan_of(b, inst);
  double per_elem = (double)plan->grad_bytes / (double)plan->trainable_elems;
  bool ipg = kind == COPY_IPG_DIVIDED;
  double bytes = 0;
  unsigned kernels = 0;
  uint32_t op;
  for (uint32_t i = 0; i < blk->n_params; i++) {
    const vs_param_tensor *p = &blk->params[i];
    double grad = (double)(p->rows * p->cols) * per_elem;
    bool copied = !ipg || grad <= (double)b->r->bucket_bytes;
    if (!p->trainable)
      continue;
    bytes += 2.0 * grad * ((copied ? 1 : 0) + (ipg ? 1 : 0));
    kernels += copied;
  }
  op = hbm_op(b, ipg ? "ipg_copy" : "ddp_copy", sb_layer_of(inst), mb,
              (double)plan->trainable_elems, bytes, kernels);
  sb_add_dep(b, op, after);
  return op;
}

/* inst's unreduced gradients, copied into the framework's contiguous
 * buffer, go as op ends. */
static void free_bucketed(builder *b, size_t inst, uint32_t op)
{
  sb_free_on(b, op, b->grad_buf[inst], AT_END);
  b->grad_buf[inst] = NONE;
}

/* Adds inst's gradients to the open bucket; reduces it (after op
 * `after`) once it holds at least bucket_limit's bytes (the caller flushes
 * the rest at the end of the chunk's backward), or, DeepSpeed's (recipe
 * ipg_buckets), first where they would take it past that. */
void sb_bucket_grads(builder *b, size_t inst, int mb, uint32_t after)
{
  uint64_t adding = sb_plan_of(b, inst)->grad_bytes;
  bool made = adding > 0;
  /* DeepSpeed ZeRO-2 and ZeRO-3 copy each gradient into their contiguous
   * buffer as backward makes it and free it (stage_1_and_2.py
   * reduce_independent_p_g_buckets_and_remove_grads, stage3.py
   * __add_grad_to_ipg_bucket: param.grad becomes a view of the buffer):
   * the bucket lives there. ZeRO-3 copies on its reduction stream,
   * which vsim does not have apart from the gathers' (on the comm
   * stream the copies, waiting for compute, would hold the gathers
   * back): its gradients go as their block's backward ends (`after`, the
   * newest op), the copies' time not priced; ZeRO-2's as their copy
   * (below) ends */
  if (b->r->ipg_resident)
    free_bucketed(b, inst, after);
  if (b->r->ipg_buckets && b->bucket_fill > 0 &&
      b->bucket_fill + adding > bucket_limit(b))
    sb_flush_bucket(b, mb, after);
  if (b->ipg[0] != NONE && made)
    after = b->bucket_copied =
        bucket_copy(b, inst, mb, after, COPY_IPG_DIVIDED);
  else if (b->r->ddp_bucket_copy && made)
    after = b->bucket_copied = bucket_copy(b, inst, mb, after, COPY_DDP);
  if (b->ipg[0] != NONE && sb_transient_grads(b))
    free_bucketed(b, inst, after);
  b->bucket[b->n_bucket++] = (uint32_t)inst;
  b->bucket_fill += sb_plan_of(b, inst)->grad_bytes;
  b->bucket_made += sb_plan_of(b, inst)->made_grad_bytes;
  b->bucket_expert += sb_plan_of(b, inst)->expert_grad_bytes;
  b->bucket_elems += sb_plan_of(b, inst)->trainable_elems;
  if (b->bucket_fill >= bucket_limit(b))
    sb_flush_bucket(b, mb, after);
}

/* Keeps inst's gradients for the reduction after backward (NONE: the
 * chunk's backward ends, and with it its open bucket). */
void sb_defer_grads(builder *b, uint32_t inst)
{
  b->deferred[b->n_deferred++] = inst;
}

/* Buckets the listed gradients (sb_defer_grads) and reduces them once op
 * `after` has ended. */
void sb_reduce_listed(builder *b, uint32_t after)
{
  int mb = (int)b->lay->grad_accum - 1; /* gradients wait for the last */
  for (size_t i = 0; i < b->n_deferred; i++) {
    if (b->deferred[i] == NONE)
      sb_flush_bucket(b, mb, after);
    else
      sb_bucket_grads(b, b->deferred[i], mb, after);
  }
  b->n_deferred = 0;
}

/* Once the stage's backward pass and its last send are done, its
 * gradients go into buckets in the order backward made them, each
 * chunk's closed at its end, and each bucket is reduced as it fills:
 * Megatron-LM's reduction without --overlap-grad-reduce (in
 * finalize_model_grads, after the schedule's last send), DeepSpeed's at
 * the accumulation boundary. */
void sb_reduce_deferred(builder *b)
{
  /* the last send follows the last compute op when there is one after */
  sb_reduce_listed(b, b->last_send != NONE && b->last_compute != NONE &&
                              b->last_send > b->last_compute
                          ? b->last_send
                          : b->last_compute);
}

/* The embedding all-reduce op (the newest) of the first or last stage
 * starts once both stages have issued it (NCCL's all-reduce ends on
 * neither before both have joined), so it ends on both at the later
 * issue plus its time: it waits for the other stage's op before its
 * all-reduce on the stream and the other's dependency (its readiness),
 * and publishes its own (prev, ready) under sb_embed_key for the other
 * to wait for (vs_schedule_link makes them wake this stage). */
static void embedding_joined(builder *b, uint32_t op, uint32_t prev,
                             uint32_t ready, uint64_t other)
{
  if (op == NONE)
    return;
  b->p->sends[sb_embed_key(b, EMBED_KEY_STREAM)] = prev;
  b->p->sends[sb_embed_key(b, EMBED_KEY_READY)] = ready;
  sb_add_dep_on(b, op, sb_embed_key(b, EMBED_KEY_STREAM), (int32_t)other);
  sb_add_dep_on(b, op, sb_embed_key(b, EMBED_KEY_READY), (int32_t)other);
}

/* With tied embeddings split over the pipeline, the first and last stages
 * all-reduce the word-embedding gradients (Megatron's embedding group),
 * together (embedding_joined). */
static void tied_embedding_sync(builder *b)
{
  const vs_layout *lay = b->lay;
  int stream = b->r->comm[VS_USE_EMBED_SYNC].stream;
  size_t n_before = b->p->n_stream_ops[stream];
  uint64_t bytes, other;
  vs_link link;
  double t;
  uint32_t op, prev;
  if (!b->r->embedding_sync || (b->stage != 0 && b->stage != lay->pp - 1))
    return;
  bytes = b->m->vocab_padded / lay->tp * b->wl->model.hidden *
          lay->grad_elem_bytes;
  other = b->stage == 0 ? lay->pp - 1 : 0;
  link = vs_layout_stage_link(b->topo, lay, b->stage, other);
  link.seen = &b->p->cal_seen;
  t = vs_cost_collective_seconds(VS_COLL_ALL_REDUCE, bytes, 2, link);
  /* none before it on the stream: its dependency alone */
  prev = n_before ? b->p->stream_ops[stream][n_before - 1] : b->last_compute;
  op = sb_new_op(b, stream, VS_PHASE_DP_COMM, "embedding_all_reduce", -1, -1, t,
                 0.0, (double)bytes);
  sb_add_dep(b, op, b->last_compute);
  embedding_joined(b, op, prev, b->last_compute, other);
}

/* The optimizer's first op (the newest) waits for the backward, for the
 * last bucket's reduction and copy out (on their own streams), and for the
 * newest op of the other streams (pipeline sends, the embedding sync):
 * Megatron-LM and DeepSpeed step once all of them have finished. */
typedef struct step_waits {
  uint32_t compute, grads, other; /* newest ops when the step is built */
} step_waits;

/* What the optimizer waits for, taken before it adds ops of its own. */
static step_waits grads_ready(const builder *b)
{
  return (step_waits){b->last_compute, b->grads_done, b->last_comm};
}

static void wait_for_grads(builder *b, uint32_t op, const step_waits *w)
{
  sb_add_dep(b, op, w->compute);
  if (w->grads != w->compute)
    sb_add_dep(b, op, w->grads);
  if (w->other != w->grads && w->other != w->compute)
    sb_add_dep(b, op, w->other);
}

/* The parameter bytes this GPU's optimizer updates: its partition of the
 * stage's trainable parameters (with ZeRO-1/2 the GPU holds them whole,
 * but steps and sends back only its share, which the all-gather then
 * spreads; frozen ones are in no optimizer group). */
static uint64_t stepped_param_bytes(const builder *b,
                                    const vs_stage_layout *st)
{
  vs_state_plan share = b->r->params;
  share.degree = b->r->optimizer.degree;
  return vs_recipe_shard(&share, st->trainable_params_full_bytes);
}

/* The optimizer on the host (ZeRO-Offload): once the gradients are out,
 * the states come in from NVMe when they live there, the CPU steps this
 * GPU's partition, the states go back, and the updated parameters return
 * to where they live (the GPU, 2 B each as ZeRO-Offload copies them, or
 * NVMe; on the host they were updated in place). Returns the last op. */
static uint32_t host_step(builder *b, const vs_stage_layout *st,
                          const step_waits *w)
{
  bool nvme = b->r->optimizer.place == VS_PLACE_NVME;
  uint32_t last = sb_offload_op(b, VS_STREAM_HOST, VS_RES_NVME,
                                "optimizer_swap_in", -1, -1,
                                nvme ? st->nvme.optimizer : 0, NONE);
  bool waited = last != NONE;
  if (waited)
    wait_for_grads(b, last, w);
  last = sb_offload_op(b, VS_STREAM_HOST, VS_RES_CPU, "cpu_optimizer_step", -1,
                       -1, st->step_elems, last);
  if (!waited)
    wait_for_grads(b, last, w); /* the step is the first op (or none) */
  last = sb_offload_op(b, VS_STREAM_HOST, VS_RES_NVME, "optimizer_swap_out", -1,
                       -1, nvme ? st->nvme.optimizer : 0, last);
  if (b->r->params.place == VS_PLACE_NVME)
    return sb_offload_op(b, VS_STREAM_HOST, VS_RES_NVME, "params_swap_out", -1,
                         -1, stepped_param_bytes(b, st), last);
  if (b->r->params.place == VS_PLACE_GPU)
    return sb_copy_op(b, VS_STREAM_H2D, VS_RES_PCIE_SWITCH, "params_to_gpu", -1,
                      -1, stepped_param_bytes(b, st), last,
                      b->r->offload.pageable_masters
                          ? HOST_PAGEABLE
                          : sb_states_side(b->r->optimizer.place));
  return last;
}

/* The optimizer on the GPU; the updated parameters, where they live off
 * it, go back out (stepped_param_bytes: the trainable ones). */
static uint32_t gpu_step(builder *b, const vs_stage_layout *st,
                         const step_waits *w)
{
  vs_cost_work work = vs_cost_optimizer_work(st, b->r->step_passes);
  op_split t = sb_roofline_split(b, work.flops, work.bytes);
  uint32_t op = sb_compute_op(b, VS_PHASE_OPTIMIZER, "optimizer_step", -1,
                              -1, work.flops, work.bytes, &t);
  wait_for_grads(b, op, w);
  if (b->r->first_step_states && sb_has_step(b, VS_STEP_FIRST)) {
    sb_only_in(b, VS_STEP_FIRST);
    sb_stage_states(b, op, STATE_MOMENTS); /* torch.optim's lazy state init */
    sb_in_every_step(b);
  }
  if (st->step_temp_bytes)
    sb_transient(b, op, st->step_temp_bytes, VS_CAT_TEMP);
  if (b->r->params.place == VS_PLACE_GPU)
    return op;
  op = sb_copy_op(b, VS_STREAM_D2H, VS_RES_PCIE_D2H, "params_to_host", -1, -1,
                  stepped_param_bytes(b, st), op,
                  sb_states_side(b->r->params.place));
  if (b->r->params.place == VS_PLACE_NVME)
    op = sb_offload_op(b, VS_STREAM_HOST, VS_RES_NVME, "params_swap_out", -1,
                       -1, stepped_param_bytes(b, st), op);
  return op;
}

/* ZeRO-1/2: the updated parameters all-gathered once the step (`after`)
 * has ended, the trainable ones alone (DeepSpeed's bit16 groups are the
 * optimizer's parameter groups; Megatron-LM's buffers hold only
 * parameters that require grad); with expert groups the routed experts'
 * over the ranks holding them (the expert-data-parallel group), after
 * the dense ones over dp. */
static void gather_updated(builder *b, const vs_stage_layout *st,
                           uint32_t after)
{
  sb_split_comm(b, VS_USE_STEP_GATHER, "zero_param_all_gather",
                VS_COLL_ALL_GATHER, st->trainable_params_full_bytes,
                st->expert_params_full_bytes, -1, -1, after);
}

/* DeepSpeed ZeRO-1/2's contiguous-gradient buffers
 * (vs_workload_ipg_buffers), made where none is held yet and this is
 * where the stage makes them (`here`: the step's first backward or its
 * boundary): by an op of no time on the compute stream, as torch.empty
 * allocates them. */
void sb_make_ipg(builder *b, int mb, vs_ipg_made here)
{
  vs_ipg_made made;
  unsigned n = vs_workload_ipg_buffers(b->wl, b->stage, &made);
  uint32_t op;
  if (!n || b->ipg[0] != NONE || made != here)
    return;
  op = sb_new_op(b, VS_STREAM_COMPUTE, VS_PHASE_BWD, "ipg_buffer", -1, mb, 0.0,
                 0.0, 0.0);
  for (unsigned i = 0; i < n; i++) {
    b->ipg[i] = sb_new_buffer(b, b->r->bucket_bytes, VS_CAT_GRADS);
    sb_alloc_on(b, op, b->ipg[i]);
  }
}

/* DeepSpeed ZeRO-2 releases them in each micro-step's epilogue, once its
 * last bucket is reduced (engine.py allreduce_gradients, then
 * overlapping_partition_gradients_reduce_epilogue's
 * _release_ipg_buffers), and its next backward makes them again. */
void sb_release_micro_ipg(builder *b)
{
  if (b->ipg[0] == NONE || !sb_transient_grads(b))
    return;
  for (int i = 0; i < 2; i++)
    sb_free_on(b, b->grads_done, b->ipg[i], AT_END);
  sb_free_on(b, b->grads_done, b->ipg_partition, AT_END);
  b->ipg[0] = b->ipg[1] = b->ipg_partition = NONE;
}

/* The reduction's epilogue releases them once every bucket is reduced
 * (its waits, w), before the step. */
static void release_ipg(builder *b, const step_waits *w)
{
  uint32_t op;
  if (b->ipg[0] == NONE)
    return;
  op = sb_new_op(b, VS_STREAM_COMPUTE, VS_PHASE_OPTIMIZER, "ipg_release", -1,
                 -1, 0.0, 0.0, 0.0);
  wait_for_grads(b, op, w);
  for (int i = 0; i < 2; i++)
    sb_free_on(b, op, b->ipg[i], AT_START);
  b->ipg[0] = b->ipg[1] = NONE;
}

/* PyTorch DDP's reducer copies each reduced bucket back into the
 * gradients once backward is done (reducer.cpp finalize_bucket_dense:
 * copy_bucket_to_grad, gradient_as_bucket_view = False), a kernel a
 * tensor on the compute stream, before the step. */
static void ddp_copy_back(builder *b, const vs_stage_layout *st,
                          const step_waits *w)
{
  double bytes = 2.0 * (double)vs_stage_grad_tensor_bytes(st);
  unsigned kernels = 0;
  op_split t;
  uint32_t op;
  if (!b->r->ddp_bucket_copy)
    return;
  for (size_t inst = 0; inst < b->n_inst; inst++) {
    const vs_block *blk = sb_block_of(b, inst);
    for (uint32_t i = 0; i < blk->n_params; i++)
      kernels += blk->params[i].trainable;
  }
  t = sb_roofline_split(b, 0.0, bytes);
  sb_add_launch(b, &t, kernels);
  op = sb_compute_op(b, VS_PHASE_OPTIMIZER, "ddp_copy_back", -1, -1, 0.0, bytes,
                     &t);
  wait_for_grads(b, op, w);
}

void sb_optimizer_step(builder *b)
{
  const vs_stage_layout *st = &b->lay->stages[b->stage];
  uint32_t op;
  step_waits w;
  tied_embedding_sync(b);
  w = grads_ready(b);
  release_ipg(b, &w);
  ddp_copy_back(b, st, &w);
  if (b->r->step_in_backward)
    return; /* every block stepped in its backward */
  op = b->r->offload.cpu_step ? host_step(b, st, &w) : gpu_step(b, st, &w);
  for (size_t inst = 0; grads_per_step(b) && inst < b->n_inst; inst++)
    sb_free_kept_grads(b, op, inst); /* zero_grad() */
  for (size_t inst = 0; inst < b->n_inst; inst++) {
    sb_free_on(b, op, b->lp_grads[inst], AT_END); /* the engine's zero_grad */
    b->lp_grads[inst] = NONE;
  }
  b->kept_full = b->kept_expert = b->kept_shard = 0;
  if (b->r->gather_after_step)
    gather_updated(b, st, op);
}

/* The states and buffers a GPU keeps in place (host or NVMe), allocated
 * with its model states; the buffers count as temp. */
static void setup_off_gpu(builder *b, uint32_t op, const vs_placed_bytes *pb,
                          int place)
{
  sb_alloc_on(b, op, sb_placed_buffer(b, pb->params, VS_CAT_PARAMS, place));
  sb_alloc_on(b, op, sb_placed_buffer(b, pb->grads, VS_CAT_GRADS, place));
  sb_alloc_on(b, op,
              sb_placed_buffer(b, pb->optimizer, VS_CAT_OPTIMIZER, place));
  sb_alloc_on(b, op, sb_placed_buffer(b, pb->buffers, VS_CAT_TEMP, place));
}

/* Whether the `in_tensors` bytes setup allocated tensor by tensor are
 * within the stage's `total` of that state, as they are by construction
 * (both come from vs_recipe_tensor_states: the kind plans are its sums);
 * else b fails with a schedule error. */
static bool within_state(builder *b, uint64_t in_tensors, uint64_t total)
{
  if (in_tensors <= total)
    return true;
  b->failed = true;
  vs_error_set(b->err, VS_EINPUT,
               "schedule: stage %llu's parameter tensors exceed its model "
               "states (a recipe bug)",
               (unsigned long long)b->stage);
  return false;
}

/* The flat buffers of the gradients and optimizer states that setup
 * allocates besides `grads` and `optimizer` bytes of them in tensors (or
 * made by the first step); with gradients set to None each step, DDP's
 * buckets. */
static void flat_states(builder *b, uint32_t op, const vs_stage_layout *st,
                        uint64_t grads, uint64_t optimizer)
{
  sb_alloc_on(b, op,
              sb_new_buffer(b,
                            grads_per_step(b) ? st->ddp_bucket_bytes
                                              : st->grads_bytes - grads,
                            VS_CAT_GRADS));
  sb_alloc_on(b, op, sb_new_buffer(b, st->optimizer_bytes - optimizer,
                                   VS_CAT_OPTIMIZER));
}

/* Stage b->stage's model states: each state one flat buffer, but where
 * the recipe keeps them per tensor (per_tensor_states) one buffer per
 * parameter and per master copy (schedule_block.c tensor_states), made
 * with the model.
 * Under first_step_states the steps differ: the first makes the resident
 * gradients and the optimizer states tensor by tensor, the step after it
 * takes them over here, and the only step simulated keeps them flat.
 * Flat buffers for what no tensor accounts for (the FP8 cache). */
static void setup_states(builder *b, uint32_t op, const vs_stage_layout *st)
{
  bool per_tensor = b->r->per_tensor_states;
  bool resident_grads = !grads_per_step(b);
  uint64_t params = per_tensor ? sb_stage_states(b, op, STATE_PARAMS) : 0;
  uint64_t masters, grads, moments;
  uint32_t after;
  if (!within_state(b, params, st->params_bytes))
    return;
  sb_alloc_on(b, op,
              sb_new_buffer(b, st->params_bytes - params, VS_CAT_PARAMS));
  masters = per_tensor ? sb_stage_states(b, op, STATE_MASTER) : 0;
  if (!b->r->first_step_states) {
    if (within_state(b, masters, st->optimizer_bytes))
      flat_states(b, op, st, 0, masters);
    return;
  }
  after = sb_has_step(b, VS_STEP_AFTER_FIRST) ? op : NONE; /* else counted */
  sb_only_in(b, VS_STEP_AFTER_FIRST);
  grads = resident_grads ? sb_stage_states(b, after, STATE_GRADS) : 0;
  moments = sb_stage_states(b, after, STATE_MOMENTS);
  sb_in_every_step(b);
  if (!within_state(b, masters + moments, st->optimizer_bytes) ||
      !within_state(b, grads, resident_grads ? st->grads_bytes : 0))
    return;
  for (vs_step s = VS_STEP_ONLY; s <= VS_STEP_AFTER_FIRST; s++) {
    bool only = s == VS_STEP_ONLY;
    if (!sb_has_step(b, s))
      continue;
    sb_only_in(b, s);
    flat_states(b, op, st, only ? 0 : grads, masters + (only ? 0 : moments));
    sb_in_every_step(b);
  }
}

void sb_setup(builder *b)
{
  uint32_t op = sb_new_op(b, VS_STREAM_COMPUTE, VS_PHASE_SETUP,
                          "model_states", -1, -1, 0.0, 0.0, 0.0);
  const vs_stage_layout *st = &b->lay->stages[b->stage];
  setup_states(b, op, st);
  /* the cuBLAS workspaces the first step's forward and backward
   * allocated, held since (vs_layout.blas_workspaces) */
  for (int i = 0; i < b->lay->blas_workspaces; i++)
    sb_alloc_on(b, op,
                sb_new_buffer(b, b->lay->blas_workspace_bytes, VS_CAT_TEMP));
  sb_alloc_on(b, op, sb_new_buffer(b, st->grad_staging_bytes, VS_CAT_TEMP));
  /* DeepSpeed ZeRO-3's ipg buffer, made with its optimizer */
  if (b->r->ipg_resident)
    sb_alloc_on(b, op, sb_new_buffer(b, b->r->bucket_bytes, VS_CAT_GRADS));
  sb_alloc_on(b, op, sb_placed_buffer(b, st->managed_bytes, VS_CAT_OPTIMIZER,
                                      VS_PLACE_MANAGED));
  setup_off_gpu(b, op, &st->host, VS_PLACE_HOST);
  setup_off_gpu(b, op, &st->nvme, VS_PLACE_NVME);
}

/* schedule_pipe.c - a stage's units of work in its pipeline order
 * (pipeline.h), with the sends and receives between stages (see
 * schedule_int.h). */
#include "schedule_int.h"

#include "category.h"

/* ------------------------------------------------------------------------
 * Pipeline: units of work, their order, and the sends and receives
 * ------------------------------------------------------------------------ */

/* The shape of the job's pipeline. */
vs_pipeline sb_pipeline_of(const vs_workload *wl, const vs_layout *lay)
{
  return (vs_pipeline){.schedule = wl->parallel.schedule,
                       .microbatches = lay->grad_accum,
                       .stages = lay->pp,
                       .vstages = lay->vstages};
}

/* Key of the send of `kind` for micro-batch mb out of model chunk g. */
static uint32_t send_key(const builder *b, int kind, uint64_t mb, uint64_t g)
{
  return (uint32_t)(((uint64_t)kind * b->lay->grad_accum + mb) *
                        b->lay->n_chunks + g);
}

/* Key of the embedding all-reduce's wait `which` (EMBED_KEY_STREAM or
 * EMBED_KEY_READY): after every pipeline send's, the same on every
 * stage. */
uint32_t sb_embed_key(const builder *b, int which)
{
  return send_key(b, SEND_GRADIENT + 1, 0, 0) + (uint32_t)which;
}

/* Instances (block ids) of model chunk g: [first, last]. */
void sb_chunk_range(const builder *b, uint64_t g, size_t *first,
                    size_t *last)
{
  *first = (size_t)b->lay->chunk_first[g] + 1; /* layer l is inst l + 1 */
  *last = *first + b->lay->chunk_layers[g] - 1;
  if (g == 0)
    *first = 0;                                  /* the embedding */
  if (g == b->lay->n_chunks - 1)
    *last = b->n_inst - 1;                       /* the head */
}

/* The units of model chunk g build its blocks [first, last]; their passes
 * prefetch inside it (unit_first, unit_last). */
static void enter_chunk(builder *b, uint64_t g, size_t *first, size_t *last)
{
  sb_chunk_range(b, g, first, last);
  b->unit_first = *first;
  b->unit_last = *last;
  b->unit_chunk = g;
}

/* Bytes of the pipeline tensor (a layer's input, or its gradient). */
static uint64_t pipeline_bytes(const builder *b)
{
  return vs_model_layer(b->m, 0)->input_bytes;
}

/* Bytes of the part of it one rank sends: 1/p2p_parts (the hidden size,
 * a multiple of tp, splits evenly). */
static uint64_t pipeline_part_bytes(const builder *b)
{
  return pipeline_bytes(b) / b->r->p2p_parts;
}

/* With scatter/gather, the received part becomes the whole tensor again
 * just before the unit's first compute-stream op: an all-gather over the
 * tensor-parallel group (Megatron-LM's gather_split_1d_tensor, once the
 * receive is waited for) into a new buffer, the part freed once
 * gathered; the unit's compute then waits for (and frees) the whole. */
void sb_gather_received(builder *b)
{
  vs_comm c = {VS_COLL_ALL_GATHER, VS_GROUP_TP, pipeline_bytes(b)};
  uint32_t whole, op;
  b->gather.due = false;
  op = sb_comm_op(b, &c,
                  b->gather.kind == SEND_ACTIVATION ? "gather_activation"
                                                    : "gather_gradient",
                  b->gather.layer, b->gather.mb);
  whole = sb_new_buffer(b, c.bytes, VS_CAT_TEMP);
  sb_alloc_on(b, op, whole);
  sb_free_on(b, op, b->recv_buf, AT_END);
  b->recv_op = op;
  b->recv_buf = whole;
  b->recv_waited = true; /* the stream's next op follows the gather */
}

/* Receives a tensor from the stage holding model chunk `from` into a temp
 * (communication) buffer, to be gathered whole (into `layer`) when it
 * comes in parts; the next compute-stream op waits for it, and the next
 * compute op frees it. */
static void receive(builder *b, int kind, uint64_t mb, uint64_t from,
                    int layer)
{
  uint64_t bytes = pipeline_part_bytes(b);
  if (b->recv_op != NONE && !b->failed) {
    b->failed = true;
    vs_error_set(b->err, VS_EINPUT,
                 "schedule: stage %llu receives before using what it "
                 "received last (a schedule bug)",
                 (unsigned long long)b->stage);
    return;
  }
  uint32_t op = sb_new_op(b, b->r->comm[VS_USE_RECV].stream, VS_PHASE_P2P,
                          kind == SEND_ACTIVATION ? "recv_activation"
                                                  : "recv_gradient",
                          -1, (int)mb, 0.0, 0.0, (double)bytes);
  sb_add_dep_on(b, op, send_key(b, kind, mb, from),
                (int32_t)(from % b->lay->pp));
  b->recv_buf = sb_new_buffer(b, bytes, VS_CAT_TEMP);
  sb_alloc_on(b, op, b->recv_buf);
  b->recv_op = op;
  b->recv_waited = false;
  b->recv_free_when = kind == SEND_GRADIENT ? AT_END : AT_START;
  b->gather.due = b->r->p2p_parts > 1;
  b->gather.kind = kind;
  b->gather.layer = layer;
  b->gather.mb = (int)mb;
}

/* Sends this chunk's output (or input gradient) to the stage holding model
 * chunk `to`, once the last compute op has produced it: this rank's part
 * of it with scatter/gather; blocking, the next compute op waits until
 * it is sent. The tensor is held until sent: from the send's start, or
 * in `held` (NONE: none) since it was made. */
static void send_held(builder *b, int kind, uint64_t mb, uint64_t g,
                      uint64_t to, uint32_t held)
{
  uint64_t bytes = pipeline_part_bytes(b);
  vs_link link =
      vs_layout_stage_link(b->topo, b->lay, b->stage, to % b->lay->pp);
  double t;
  link.seen = &b->p->cal_seen;
  t = vs_cost_link_seconds(link, (double)bytes);
  uint32_t op = sb_new_op(b, b->r->comm[VS_USE_SEND].stream, VS_PHASE_P2P,
                          kind == SEND_ACTIVATION ? "send_activation"
                                                  : "send_gradient",
                          -1, (int)mb, t, 0.0, (double)bytes);
  sb_add_dep(b, op, b->last_compute);
  /* the tensor itself is held until sent (a part is a view of it) */
  if (held == NONE)
    sb_transient(b, op, pipeline_bytes(b), VS_CAT_TEMP);
  else
    sb_free_on(b, op, held, AT_END);
  if (op != NONE)
    b->p->sends[send_key(b, kind, mb, g)] = op;
  b->last_send = op;
  if (b->r->p2p_blocking)
    sb_wait_on(b, op);
}

static void send(builder *b, int kind, uint64_t mb, uint64_t g, uint64_t to)
{
  send_held(b, kind, mb, g, to, NONE);
}

/* Whether a forward's output waits for the next unit, a backward, to be
 * sent with its gradient: Megatron-LM's interleaved schedule without
 * overlap_p2p_comm runs a steady-state forward and backward, then sends
 * both in one batched call (schedules.py, send_forward_backward_recv_
 * forward_backward); its 1F1B sends each right after its pass. */
static bool output_waits_for_backward(const builder *b)
{
  return b->out.batched && b->next_unit && !b->next_unit->forward;
}

/* Whether this stage batches its steady-state sends: blocking and
 * interleaved, with a steady state (a stage whose warm-up is every
 * forward sends each at once, as Megatron-LM's warm-up loop does). */
bool sb_sends_batched(const builder *b, const vs_pipeline *pl)
{
  return b->r->p2p_blocking && pl->vstages > 1 &&
         vs_pipeline_warmup(pl, b->stage) < pl->microbatches * pl->vstages;
}

/* The forward of micro-batch mb's chunk g (blocks up to inst `last`)
 * will hold its output for the next backward to send: the block's last
 * forward op allocates it (sb_allocate_held_output). */
static void hold_output(builder *b, uint64_t mb, uint64_t g, size_t last)
{
  b->out.held = true;
  b->out.mb = mb;
  b->out.g = g;
  b->out.buf = sb_new_buffer(b, pipeline_bytes(b), VS_CAT_TEMP);
  b->out.made_by = last;
}

/* op (the newest, inst's last forward op) makes the held output. */
void sb_allocate_held_output(builder *b, size_t inst, uint32_t op)
{
  if (inst != b->out.made_by)
    return;
  sb_alloc_on(b, op, b->out.buf);
  b->out.made_by = SIZE_MAX;
}

/* Sends the held forward output, if any. */
static void send_held_output(builder *b)
{
  if (!b->out.held)
    return;
  b->out.held = false;
  send_held(b, SEND_ACTIVATION, b->out.mb, b->out.g, b->out.g + 1,
            b->out.buf);
}

/* The optimizer in backward (torchtune's optimizer_in_bwd): right after
 * inst's backward, its trainable parameters are stepped and their
 * gradients freed. */
static void step_block(builder *b, size_t inst)
{
  const vs_kind_plan *plan = sb_plan_of(b, inst);
  vs_cost_states s = {(double)plan->param_elems,
                      (double)plan->trainable_elems,
                      (double)plan->optimizer_bytes,
                      (double)plan->grad_bytes,
                      (double)plan->param_bytes,
                      1.0,
                      b->r->step_passes,
                      (double)plan->grad_bytes};
  vs_cost_work w = vs_cost_optimizer_step(&s);
  op_split t;
  uint32_t op;
  if (plan->trainable_elems == 0 || b->grad_buf[inst] == NONE)
    return;
  t = sb_roofline_split(b, w.flops, w.bytes);
  op = sb_compute_op(b, VS_PHASE_OPTIMIZER, "optimizer_step",
                     sb_layer_of(inst), -1, w.flops, w.bytes, &t);
  sb_free_on(b, op, b->grad_buf[inst], AT_END);
  b->grad_buf[inst] = NONE;
}

void sb_forward_unit(builder *b, const vs_unit *u)
{
  uint64_t g = u->chunk * b->lay->pp + b->stage;
  size_t first, last;
  enter_chunk(b, g, &first, &last);
  if (g > 0)
    receive(b, SEND_ACTIVATION, u->mb, g - 1, sb_layer_of(first));
  if (g + 1 < b->lay->n_chunks && output_waits_for_backward(b))
    hold_output(b, u->mb, g, last);
  for (size_t inst = first; inst <= last; inst++)
    sb_forward_block(b, inst, (int)u->mb);
  sb_forward_done(b);
  sb_clear_cache(b);
  if (g + 1 < b->lay->n_chunks && !b->out.held)
    send(b, SEND_ACTIVATION, u->mb, g, g + 1);
}

/* Whether model chunk g runs a backward: a chunk wholly in a frozen
 * prefix (no gradient flows through it) neither receives its output's
 * gradient nor has its input's sent to it. */
static bool chunk_has_backward(const builder *b, uint64_t g)
{
  size_t first, last;
  sb_chunk_range(b, g, &first, &last);
  for (size_t inst = first; inst <= last; inst++)
    if (!sb_plan_of(b, inst)->no_backward)
      return true;
  return false;
}

/* FSDP2's root post-backward, once the whole backward has run (its final
 * callback: the root's inputs, the token ids, need no gradient): the
 * head's and the embedding's gradients, held since they were made, are
 * reduced together. */
static void reduce_root(builder *b, int mb)
{
  sb_flush_bucket(b, mb, b->last_compute);
  sb_bucket_grads(b, b->n_inst - 1, mb, b->last_compute);
  sb_bucket_grads(b, 0, mb, b->last_compute);
}

/* Whether this stage reduces its gradients once its backward pass is
 * done: without overlap_grad_reduce, and on DeepSpeed's pipeline stages
 * but the last, whose ZeRO buffers its boundary's reduce_gradients makes
 * (pipe/engine.py ReduceGrads; vs_workload_ipg_buffers), whatever
 * overlap_comm says. */
static bool reduces_at_boundary(const builder *b)
{
  vs_ipg_made made;
  return b->r->reduce_after_backward ||
         (vs_workload_ipg_buffers(b->wl, b->stage, &made) > 0 &&
          made == VS_IPG_AT_BOUNDARY);
}

void sb_backward_unit(builder *b, const vs_unit *u)
{
  uint64_t g = u->chunk * b->lay->pp + b->stage;
  bool pipelined = b->r->pipelined_fsdp;
  bool sync = vs_workload_grads_bucketed(&b->wl->parallel) &&
              ((sb_transient_grads(b) && !pipelined) ||
               u->mb + 1 == b->lay->grad_accum);
  bool defer = sync && (reduces_at_boundary(b) || pipelined);
  size_t first, last;
  sb_hp_work hp;
  enter_chunk(b, g, &first, &last);
  sb_make_ipg(b, (int)u->mb, VS_IPG_IN_BACKWARD);
  if (g + 1 < b->lay->n_chunks && chunk_has_backward(b, g))
    receive(b, SEND_GRADIENT, u->mb, g + 1, sb_layer_of(last));
  hp = sb_hp_work_of(b, first, last);
  sb_zero_lp_grads(b, &hp, (int)u->mb);
  for (size_t inst = last + 1; inst-- > first;) {
    sb_backward_block(b, inst, (int)u->mb);
    if (b->r->step_in_backward)
      step_block(b, inst);
    else if (defer)
      sb_defer_grads(b, (uint32_t)inst);
    else if (sync && !sb_in_root_unit(b, inst))
      sb_bucket_grads(b, inst, (int)u->mb, b->last_compute);
  }
  sb_update_hp_grads(b, &hp, (int)u->mb);
  if (sync && !defer && !b->r->step_in_backward && b->r->root_kept)
    reduce_root(b, (int)u->mb);
  if (defer)
    sb_defer_grads(b, NONE);
  else if (sync)
    sb_flush_bucket(b, (int)u->mb, b->last_compute);
  sb_release_micro_ipg(b);
  /* pipelined FSDP2: the chunk's post-backward runs as its last backward
   * ends, before its gradient is sent (stage.py backward_one_chunk) */
  if (defer && pipelined)
    sb_reduce_listed(b, b->last_compute);
  sb_release_reduce_inputs(b);
  send_held_output(b);
  if (g > 0 && chunk_has_backward(b, g - 1))
    send(b, SEND_GRADIENT, u->mb, g, g - 1);
}

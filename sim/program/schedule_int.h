/* schedule_int.h - what the schedule builder's files share: the
 * builder (the state of one stage's program as it is built) and the
 * helpers one file defines and another calls. schedule.c holds the
 * program's storage and the entry points, schedule_block.c the ops of
 * one block (and its ZeRO-3 gathers and activation offload),
 * schedule_grads.c gradient reduction and the optimizer,
 * schedule_pipe.c the pipeline's units, sends and receives. Each
 * helper's contract is the comment at its definition. */
#ifndef VS_SCHEDULE_INT_H
#define VS_SCHEDULE_INT_H

#include "schedule.h"

#include "pipeline.h"

#define NONE UINT32_MAX

/* One remembered collective time: every layer of a stage repeats the same
 * tensor-parallel collectives, so a build asks for the same (kind, bytes)
 * thousands of times. Direct-mapped; a miss just recomputes. */
typedef struct time_memo {
  uint64_t kind, bytes;     /* the collective */
  bool used;
  double seconds;
} time_memo;

#define TIME_MEMO_SLOTS 64

/* What an op kind is made from (schedule.c kind_of). */
typedef struct op_key op_key;

/* The most bucket reductions a recipe lets the compute stream run ahead
 * of (vs_recipe reduce_depth). */
#define REDUCE_DEPTH_MAX 4

typedef struct builder {
  const vs_workload *wl;
  const vs_topology *topo;
  const vs_model *m;
  const vs_recipe *r;       /* every decision about the job */
  const vs_layout *lay;
  vs_program *p;
  vs_error *err;
  time_memo memo[TIME_MEMO_SLOTS]; /* op times computed so far */
  op_key *keys;             /* each distinct key of the ops made so far
                               (kind_of), in the order first made */
  size_t n_keys, cap_keys;  /* keys, and room for them */
  vs_intern_index key_index; /* over keys */
  uint32_t *key_kind;       /* [key] the kind its ops have */
  size_t cap_key_kind;      /* room in key_kind */
  bool failed;              /* an allocation failed; stop adding */
  size_t n_inst;            /* blocks of the model: embed, layers, head */
  size_t unit_first, unit_last; /* blocks of the model chunk being built
                               (sb_chunk_range): passes prefetch inside it */
  uint64_t unit_chunk;      /* that chunk's global number (0: the first
                               stage's first) */
  uint32_t last_compute;    /* newest op on the compute stream */
  uint32_t last_comm;       /* newest op on any other stream */
  uint32_t last_send;       /* newest pipeline send */
  uint32_t reduced[REDUCE_DEPTH_MAX]; /* the newest buckets' last ops,
                               bucket k's at k % REDUCE_DEPTH_MAX */
  uint64_t n_reduced;       /* buckets flushed so far in the step */
  uint32_t reduce_wait;     /* the bucket the next compute op waits for
                               (recipe reduce_depth), or NONE */
  uint32_t reduce_input;    /* recipe reduce_copy: the newest bucket's
                               reduce-scatter input, held, or NONE */
  uint32_t reduce_input_op; /* its reduce-scatter */
  uint32_t released[2];     /* inputs the next compute op frees as it
                               starts (NONE: none) */
  uint32_t grads_done;      /* the newest bucket's last op: its reduction,
                               or its copy to the host */
  uint32_t *saved;          /* [mb % ring][inst][saved tensor of its block]
                               its buffer */
  uint32_t max_saved;       /* saved tensors of the largest block kind */
  uint32_t *ckpt_buf;       /* [mb % ring][inst] full-checkpoint input */
  uint32_t *sel_buf;        /* [inst] selective-recompute buffer */
  uint32_t *gather_op;      /* [inst] ZeRO-3 gather of this pass */
  uint32_t *gather_buf;     /* [inst] its buffer */
  uint64_t gathered_elems;  /* parameter elements of the insts gathered */
  uint32_t *scanned;        /* [inst] DeepSpeed's coordinator (recipe
                               gather_live_elems): the furthest position
                               of the micro-batch's pass order (its
                               forward passes, then its backward ones) at
                               which its prefetch met the inst, or NONE */
  uint32_t queue;           /* the next position it prefetches from */
  uint32_t *flat_buf;       /* [inst] FSDP2: its all-gather output, until
                               the block's pass starts (copy-out) */
  uint32_t last_flat[2];    /* the newest copy-out's flat buffers (the
                               root unit's are two), kept by a forward
                               pass (all_gather_state) until the next
                               copy-out or the model's forward ends, or
                               NONE */
  uint32_t *grad_buf;       /* [inst] unreduced grads (ZeRO-2/3) */
  uint32_t *lp_grads;       /* [inst] BF16_Optimizer's 16-bit .grad
                               (vs_recipe lp_grads_kept), from the step's
                               first backward to the step */
  uint32_t *grads_kept;     /* [inst] resident grads that appear at their
                               first backward (vs_recipe grads_set_to_none)
                               or first reduction (reduced_grads_set_to_
                               none) as one buffer */
  uint64_t kept_full;       /* reduced_grads_set_to_none: the unsharded
                               bytes of the insts whose share appeared in
                               the step so far */
  uint64_t kept_expert;     /* of kept_full, the routed experts' */
  uint64_t kept_shard;      /* the bytes of those shares */
  uint32_t *tensor_grad;    /* [param_base[inst] + param] the same, one
                               buffer per tensor (per_tensor_states) */
  uint32_t *param_base;     /* [inst] its first parameter in tensor_grad */
  uint32_t *bucket;         /* insts whose grads wait in the open bucket */
  size_t n_bucket;          /* how many */
  uint32_t ipg[2];          /* vs_workload_ipg_buffers: the buffers held,
                               NONE before they are made */
  uint32_t ipg_partition;   /* DeepSpeed ZeRO-2's fresh gradient partition
                               of a micro-step after the first (NONE: none
                               held) */
  uint32_t *deferred;       /* reduce_after_backward: insts whose grads are
                               bucketed once backward is done, in backward
                               order, NONE where a chunk's buckets end */
  size_t n_deferred;        /* how many entries */
  uint32_t bucket_copied;   /* the last copy of their gradients into the
                               framework's bucket (bucket_copy; NONE:
                               none), which their reduction waits for */
  uint64_t bucket_fill;     /* their grad bytes */
  uint64_t bucket_made;     /* their bytes as backward makes them */
  uint64_t bucket_elems;    /* their gradient elements */
  uint64_t bucket_expert;   /* of bucket_fill, routed experts' gradients
                               (reduced over the expert-data-parallel
                               group when the experts have groups of
                               their own) */
  uint32_t waits[4];        /* ops the next compute-stream op must wait
                               for: a block's gather, its activations'
                               fetch, one or two blocking pipeline sends */
  uint32_t n_waits;
  uint32_t *act_host;       /* [mb % ring][inst] offloaded activations'
                               host buffer */
  uint32_t *act_out;        /* [mb % ring][inst] the copy that took them */
  uint32_t *act_fetch;      /* [inst] their copy back, this pass */
  uint32_t *cached;         /* autocast's weight copies in checkpointed
                               layers, held by its cache until the
                               forward pass ends */
  size_t n_cached, cap_cached;
  uint64_t stage;           /* pipeline stage being built */
  vs_step step;             /* which step (vs_job.step) */
  bool every_step;          /* vs_job.every_step */
  bool first_unit_only;     /* vs_job.first_unit_only */
  uint8_t tag;              /* the vs_effect step of the effects added
                               now (sb_only_in) */
  uint32_t recv_op;         /* receive the next compute op must wait for */
  uint32_t recv_buf;        /* its buffer, freed by that op */
  bool recv_waited;         /* a compute-stream op already waits for it */
  struct {
    bool batched;           /* steady-state forwards' outputs wait for the
                               next backward (output_waits_for_backward) */
    bool held;              /* a forward's output waits to be sent with the
                               next backward's gradient */
    uint64_t mb, g;         /* its micro-batch and model chunk */
    uint32_t buf;           /* the output, held from its forward on */
    size_t made_by;         /* the inst whose last forward op allocates
                               buf; SIZE_MAX once it has */
  } out;
  const vs_unit *next_unit; /* the unit after the one being built (NULL:
                               none) */
  struct {
    bool due;               /* the received part is to be gathered before
                               the next compute-stream op (scatter/gather) */
    int kind;               /* SEND_ACTIVATION or SEND_GRADIENT */
    int layer, mb;          /* where the tensor enters */
  } gather;
  size_t ring;              /* micro-batch slots of saved[] and ckpt_buf[] */
  uint32_t *stage_inst;     /* [inst] its place among this stage's blocks
                               (the rows of the ring tables), NONE for
                               the other stages' */
  size_t n_stage_inst;      /* blocks on this stage */
  uint8_t recv_free_when;   /* effect_time: ... at its end (gradients) or
                               start */
  double busy_seconds;      /* sum of every op's time so far */
  struct op_split *op_time; /* [kind's first op + op][phase_time]: each
                               op's time, computed once per block kind
                               (NAN until then) */
  uint32_t *kind_memo;      /* [stage_inst row][op][phase_time]: the kind
                               of that op of this stage's block in that
                               phase (its name, layer, work and time are
                               the same in every micro-batch), NONE until
                               made: spares hashing its key again */
  uint32_t memo_ops;        /* ops of the largest block kind */
  uint32_t kind_first[VS_MODEL_KINDS_MAX]; /* a kind's first op in op_time */
} builder;

/* The times op_time remembers for each op of a block kind. */
typedef enum phase_time {
  TIME_FWD,        /* its forward */
  TIME_FWD_WEIGHTS, /* ... where it also quantizes its weights to FP8
                      (fp8_weight_casts) */
  TIME_BWD,        /* its backward as the kind's plan runs it */
  TIME_BWD_FRESH,  /* ... where it makes its weights' gradients afresh
                      (grad_accumulation: nothing to add into) */
  TIME_RECOMPUTE,  /* its share of a full recompute */
  TIME_PHASES
} phase_time;

/* When in its op's run an effect applies. */
typedef enum effect_time { AT_START, AT_END } effect_time;

/* A pass over a block: forward (a recompute's too) or backward. */
typedef enum sb_pass { SB_FORWARD, SB_BACKWARD, SB_PASSES } sb_pass;

/* An op's time split by what bounds it (vs_bound); its duration is the
 * sum. */
typedef struct op_split {
  double s[VS_BOUND_SPLIT_N];
} op_split;

/* What a pipeline send carries. */
enum { SEND_ACTIVATION, SEND_GRADIENT };

/* The send table's entries (vs_program sends) after the pipeline sends':
 * the ops the first or last stage's embedding all-reduce waits for on
 * its own stage, the op before it on its stream and its dependency, which
 * the other stage's all-reduce waits for too (schedule_grads.c,
 * tied_embedding_sync). */
enum { EMBED_KEY_STREAM, EMBED_KEY_READY, EMBED_KEYS };

/* A model state kept per parameter tensor (vs_recipe per_tensor_states). */
typedef enum state_kind {
  STATE_PARAMS,  /* the parameter as stored */
  STATE_MASTER,  /* its fp32 master copy */
  STATE_GRADS,   /* its gradient as backward makes it */
  STATE_MOMENTS, /* the optimizer's other states (AdamW's exp_avg and
                    exp_avg_sq, ...), one tensor each */
  STATE_N
} state_kind;

/* Layer number shown in reports: -1 embedding, 0..L-1 layers, L head. */
static inline int sb_layer_of(size_t inst) { return (int)inst - 1; }

/* Gradients of the block wait, unreduced, until their bucket is reduced
 * (ZeRO-2/3); with ZeRO-0/1 they accumulate in the resident buffer. */
static inline bool sb_transient_grads(const builder *b)
{
  return b->r->transient_grads;
}

/* The effects added from now on apply only in `step` (sb_only_in), or in
 * every step (sb_in_every_step): where the steps differ, each adds its own
 * (sb_has_step). */
static inline void sb_only_in(builder *b, vs_step step)
{
  b->tag = (uint8_t)(1 + step);
}

static inline void sb_in_every_step(builder *b) { b->tag = 0; }

/* schedule.c: program storage */
bool sb_grow(builder *b, void **arr, size_t *cap, size_t need, size_t elem);
/* What an op costs, for its kind: its time, split by what bounds it for
 * a compute op, its work, and the resources its bytes cross. */
typedef struct op_cost {
  double seconds;       /* its time (with a resource: the fixed part) */
  double flops, bytes;  /* its work (vs_op_kind) */
  const op_split *split; /* seconds by vs_bound (a compute op, summing to
                            seconds); NULL: bound wholly by what it does
                            (vs_op_kind bound) */
  int res, via;         /* vs_resource_kind crossed; 0: none */
  double max_rate;      /* bytes/s its transfer moves at at most (vs_op_kind
                           max_rate); 0: no cap */
  uint32_t known_kind;  /* 1 + its kind when the builder has it already
                           (builder kind_memo); 0: found by its key */
} op_cost;
uint32_t sb_append_op(builder *b, int stream, int phase, const char *name,
                      int layer, int mb, const op_cost *c);
uint32_t sb_new_op_through(builder *b, int stream, int phase,
                           const char *name, int layer, int mb,
                           double seconds, double flops, double bytes,
                           int res, int via);
uint32_t sb_new_op(builder *b, int stream, int phase, const char *name,
                   int layer, int mb, double seconds, double flops,
                   double bytes);
void sb_add_dep_on(builder *b, uint32_t op, uint32_t dep, int32_t stage);
uint32_t sb_embed_key(const builder *b, int which);
uint32_t sb_placed_buffer(builder *b, uint64_t bytes, int category,
                          int place);
uint32_t sb_new_buffer(builder *b, uint64_t bytes, int category);
uint32_t sb_buffer_made_on(builder *b, uint64_t bytes, int category,
                           int made_on);
uint32_t sb_checkpoint_buffer(builder *b, uint64_t bytes);
void sb_effect_slow(builder *b, uint32_t op, uint32_t buf,
                    effect_time when, bool is_free);
void sb_transient(builder *b, uint32_t op, uint64_t bytes, int category);
void sb_transients(builder *b, uint32_t op, uint64_t bytes,
                   uint64_t first);

/* op waits for dep, on this stage. Callers pass NONE where there is
 * nothing to wait for or hold (most calls of sb_stream_waits, once per
 * compute op), and that test is made here, inline: the calls it spares
 * were 4% of a plan's instructions (callgrind). */
static inline void sb_add_dep(builder *b, uint32_t op, uint32_t dep)
{
  if (op != NONE && dep != NONE)
    sb_add_dep_on(b, op, dep, -1);
}

/* buf is allocated (is_free: freed) when op starts or ends (`when`); op
 * must be the newest op. Through sb_alloc_on and sb_free_on. The common
 * case (op the newest, room for the effect) is inline, every other
 * through sb_effect_slow: a call for each of a plan's millions of
 * effects was 4% of its instructions (callgrind). */
static inline void sb_effect(builder *b, uint32_t op, uint32_t buf,
                             effect_time when, bool is_free)
{
  vs_program *p = b->p;
  if (b->failed || buf == NONE || op + (size_t)1 != p->n_ops ||
      p->n_effects >= p->cap_effects) {
    sb_effect_slow(b, op, buf, when, is_free);
    return;
  }
  /* one store of the whole record, not four of its bit-fields */
  p->effects[p->n_effects++] = (vs_effect){
      .buffer = buf & VS_PROGRAM_BUFFERS_MAX, /* < it */
      .step = b->every_step ? b->tag & 3u : 0u,
      .at_end = when == AT_END,
      .is_free = is_free ? 1u : 0u};
}

/* buf is allocated when op starts (nothing when either is NONE). */
static inline void sb_alloc_on(builder *b, uint32_t op, uint32_t buf)
{
  if (op != NONE && buf != NONE)
    sb_effect(b, op, buf, AT_START, false);
}

/* buf is freed when op starts or ends (nothing when either is NONE). */
static inline void sb_free_on(builder *b, uint32_t op, uint32_t buf,
                              effect_time when)
{
  if (op != NONE && buf != NONE)
    sb_effect(b, op, buf, when, true);
}

/* schedule_block.c: the ops of one block */
const vs_block *sb_block_of(const builder *b, size_t inst);
const vs_kind_plan *sb_plan_of(const builder *b, size_t inst);
void sb_add_launch(builder *b, op_split *x, unsigned kernels);
op_split sb_roofline_split(builder *b, double flops, double bytes);
/* The seconds of a split, all its bounds together. */
double sb_split_total(const op_split *x);
void sb_wait_on(builder *b, uint32_t op);
void sb_stream_waits(builder *b, uint32_t op);
uint32_t sb_compute_op(builder *b, int phase, const char *name, int layer,
                       int mb, double flops, double bytes,
                       const op_split *t);
uint32_t sb_comm_op(builder *b, const vs_comm *c, const char *name,
                    int layer, int mb);
uint32_t sb_split_comm(builder *b, int use, const char *name, int kind,
                       uint64_t bytes, uint64_t expert, int layer, int mb,
                       uint32_t after);
uint32_t sb_offload_op(builder *b, int stream, int res, const char *name,
                       int layer, int mb, uint64_t amount, uint32_t after);
void sb_forward_done(builder *b);
/* How the host side of a copy between the GPU and the host is held: a
 * pageable one moves at most at the host's pageable rate
 * (vs_topology_pageable_rate). */
typedef enum {
  HOST_PINNED,  /* pinned (or no host side: the CPU, NVMe) */
  HOST_STATES,  /* the offloaded states' and parameters' buffers:
                   pageable where the workload says (vs_offload_plan
                   pageable) */
  HOST_PAGEABLE /* pageable whatever it says */
} host_side;
uint32_t sb_copy_op(builder *b, int stream, int res, const char *name,
                    int layer, int mb, uint64_t amount, uint32_t after,
                    host_side host);

/* The host side of a copy to or from states kept in `place` (vs_place,
 * off the GPU): NVMe's pass through DeepSpeed's pinned swap buffers
 * (aio; stage3.py swap_out_gradients), the host's are the states' own
 * buffers. */
static inline host_side sb_states_side(int place)
{
  return place == VS_PLACE_NVME ? HOST_PINNED : HOST_STATES;
}
uint32_t sb_states_copy(builder *b, int stream, int res, const char *name,
                        int layer, int mb, uint64_t amount, uint32_t after);
bool sb_in_root_unit(const builder *b, size_t inst);
void sb_drop_gather(builder *b, size_t inst, uint32_t op,
                    effect_time when);
void sb_clear_cache(builder *b);
void sb_forward_block(builder *b, size_t inst, int mb);
uint64_t sb_stage_states(builder *b, uint32_t op, state_kind which);
void sb_free_kept_grads(builder *b, uint32_t op, size_t inst);
bool sb_has_step(const builder *b, vs_step step);
void sb_backward_block(builder *b, size_t inst, int mb);

/* schedule_grads.c: gradient reduction and the optimizer */
void sb_release_at_step_end(builder *b);
void sb_reshard_rest(builder *b);
void sb_release_reduce_inputs(builder *b);
void sb_flush_bucket(builder *b, int mb, uint32_t last);
/* DeepSpeed's BF16_Optimizer's work over the kept .grad of insts [first,
 * last] of the stage (sb_hp_work_of; all zero without recipe
 * lp_grads_kept), tensor by tensor as vs_recipe_tensor_states makes them:
 * each .grad (made_grad: the parameter's dtype) added into the buffer
 * (grad: grad_dtype's, an fp32 tensor's fp32), cast first where it is
 * narrower (read, written in the buffer's dtype: a temporary). */
typedef struct sb_hp_work {
  double elems;        /* trainable elements */
  double kept;         /* the kept .grad bytes (0: nothing to do) */
  double moved;        /* bytes the update moves */
  double largest_cast; /* the largest cast's bytes (its temporary) */
  unsigned kernels;    /* the update's: two a cast tensor, else one */
} sb_hp_work;
sb_hp_work sb_hp_work_of(const builder *b, size_t first, size_t last);
/* Around the backward of micro-batch mb over those insts, w theirs:
 * - sb_zero_lp_grads, before it past the step's first micro-batch: the
 *   prologue's zeroing of the kept 16-bit gradients (clear_lp_grads,
 *   _foreach_zero_: 2 B an element, a launch; lp_grads_zero);
 * - sb_update_hp_grads, after it: update_hp_grads (engine.py
 *   _backward_epilogue, before the boundary's reduction; with
 *   immediate_grad_update off, its default), each .grad added into the
 *   buffer a parameter at a time, hp_grad.add_(lp.grad.to(hp_grad.dtype)):
 *   a bf16 .grad into an fp32 buffer 18 B an element in two kernels, the
 *   cast a transient of the largest such tensor's fp32 bytes; into a bf16
 *   buffer 6 B in one, an fp32 .grad (an fp32 tensor's) 12 B in one
 *   (hp_grads_update). */
void sb_zero_lp_grads(builder *b, const sb_hp_work *w, int mb);
void sb_update_hp_grads(builder *b, const sb_hp_work *w, int mb);
void sb_bucket_grads(builder *b, size_t inst, int mb, uint32_t after);
void sb_defer_grads(builder *b, uint32_t inst);
void sb_reduce_listed(builder *b, uint32_t after);
void sb_reduce_deferred(builder *b);
void sb_make_ipg(builder *b, int mb, vs_ipg_made here);
void sb_release_micro_ipg(builder *b);
void sb_optimizer_step(builder *b);
void sb_setup(builder *b);

/* schedule_pipe.c: the pipeline */
vs_pipeline sb_pipeline_of(const vs_workload *wl, const vs_layout *lay);
void sb_chunk_range(const builder *b, uint64_t g, size_t *first,
                    size_t *last);
void sb_gather_received(builder *b);
bool sb_sends_batched(const builder *b, const vs_pipeline *pl);
void sb_allocate_held_output(builder *b, size_t inst, uint32_t op);
void sb_forward_unit(builder *b, const vs_unit *u);
void sb_backward_unit(builder *b, const vs_unit *u);

#endif

/* schedule.c - builds a stage's program (see schedule.h).
 *
 * One step of one pipeline stage. The stage runs forward and backward
 * passes of (micro-batch, model chunk) units in the order its schedule
 * dictates (GPipe, 1F1B or interleaved 1F1B, as Megatron-LM orders them);
 * a chunk is the embedding (first stage), some transformer layers, and the
 * head (last stage). Between stages, activations go forward and gradients
 * backward as send/receive ops on the p2p stream; a receive waits for the
 * producing stage's send (a cross-stage dependency resolved by
 * vs_schedule_link). Nothing here counts micro-batches in flight: how many a
 * stage holds is whatever this order and those dependencies produce.
 * Gradients of a chunk's last micro-batch (every micro-batch with ZeRO-2/3)
 * are reduced in buckets on the communication stream while backward goes
 * on; then the optimizer steps and, with ZeRO-1/2, the updated parameters
 * are all-gathered. ZeRO-3 gathers each block's parameters before its
 * forward and again before its backward, prefetching one block ahead. */
#include "schedule.h"

#include "pipeline.h"

#include "grow.h"
#include "category.h"
#include "resource_kinds.h"
#include "units.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
  bool failed;              /* an allocation failed; stop adding */
  size_t n_inst;            /* blocks of the model: embed, layers, head */
  size_t unit_first, unit_last; /* blocks of the model chunk being built
                               (chunk_range): passes prefetch inside it */
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
  uint32_t *flat_buf;       /* [inst] FSDP2: its all-gather output, until
                               the block's pass starts (copy-out) */
  uint32_t copy_out;        /* unsharded parameters the next compute op
                               copies out of their flat buffer */
  uint32_t flat_done;       /* the flat buffer that copy-out frees (the
                               previous block's) */
  uint32_t last_flat;       /* the newest copied-out block's flat buffer */
  uint32_t *grad_buf;       /* [inst] unreduced grads (ZeRO-2/3) */
  uint32_t *grads_kept;     /* [inst] resident grads that appear at their
                               first backward (vs_recipe grads_set_to_none)
                               as one buffer */
  uint32_t *tensor_grad;    /* [param_base[inst] + param] the same, one
                               buffer per tensor (per_tensor_states) */
  uint32_t *param_base;     /* [inst] its first parameter in tensor_grad */
  uint32_t *bucket;         /* insts whose grads wait in the open bucket */
  size_t n_bucket;          /* how many */
  uint32_t *deferred;       /* reduce_after_backward: insts whose grads are
                               bucketed once backward is done, in backward
                               order, NONE where a chunk's buckets end */
  size_t n_deferred;        /* how many entries */
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
  uint8_t tag;              /* the vs_effect step of the effects added
                               now (only_in) */
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
  uint8_t recv_free_when;   /* effect_time: ... at its end (gradients) or start */
  double busy_seconds;      /* sum of every op's time so far */
  struct op_split *op_time; /* [kind's first op + op][phase_time]: each
                               op's time, computed once per block kind
                               (NAN until then) */
  uint32_t kind_first[VS_MODEL_KINDS_MAX]; /* a kind's first op in op_time */
} builder;

/* The times op_time remembers for each op of a block kind. */
typedef enum phase_time {
  TIME_FWD,        /* its forward */
  TIME_BWD,        /* its backward as the kind's plan runs it */
  TIME_RECOMPUTE,  /* its share of a full recompute */
  TIME_PHASES
} phase_time;

/* ------------------------------------------------------------------------
 * Program storage
 * ------------------------------------------------------------------------ */

static bool grow(builder *b, void **arr, size_t *cap, size_t need, size_t elem)
{
  if (need <= *cap || vs_grow(arr, cap, need, elem)) /* no call when room */
    return true;
  b->failed = true;
  vs_error_set(b->err, VS_ENOMEM, "out of host memory building the schedule");
  return false;
}

static uint64_t to_ns(double seconds) { return (uint64_t)ceil(seconds * 1e9); }

/* Appends an op; its deps and effects must be added before the next op. */

/* Refuses an op time that is not a number or that makes the stage's step
 * absurd, naming the op and the files whose figures caused it. */
static bool time_ok(builder *b, const char *name, double seconds)
{
  b->busy_seconds += seconds;
  if (seconds >= 0 && b->busy_seconds <= VS_MAX_STEP_SECONDS)
    return true;
  b->failed = true;
  vs_error_set(b->err, VS_EINPUT,
               "%s with %s: stage %llu would be busy over %.0f days a step "
               "(at op %s): check the topology's [gpu] and [network] "
               "figures against the workload's size",
               b->wl->origins.file, b->topo->origins.file,
               (unsigned long long)b->stage, VS_MAX_STEP_SECONDS / 86400, name);
  return false;
}

/* A hash of item, elem bytes (a multiple of 8, no padding: vs_op_kind
 * and vs_buffer name theirs): each 64-bit word times its own odd
 * constant, summed (independent products: this runs for every op and
 * buffer a plan builds). Its high bits are the well-mixed ones: an index
 * takes those (vs_intern_index.shift). */
static inline uint64_t item_hash(const void *item, size_t elem)
{
  uint64_t h = 0, w;
  for (size_t i = 0; i < elem / sizeof w; i++) {
    memcpy(&w, (const char *)item + i * sizeof w, sizeof w);
    h += (w ^ (w >> 29)) * (0x9e3779b97f4a7c15ull + 2 * i);
  }
  return h;
}

/* Whether the elem bytes (a multiple of 8) at a and b are equal. */
static inline bool same_words(const void *a, const void *b, size_t elem)
{
  uint64_t x, y, diff = 0;
  for (size_t i = 0; i < elem; i += sizeof x) {
    memcpy(&x, (const char *)a + i, sizeof x);
    memcpy(&y, (const char *)b + i, sizeof y);
    diff |= x ^ y;
  }
  return diff == 0;
}

/* Doubles ix (to at least 64 slots) and refills it from items[0..n). */
static bool grow_index(builder *b, vs_intern_index *ix, const void *items,
                       size_t n, size_t elem)
{
  size_t cap = ix->cap ? 2 * ix->cap : 64;
  unsigned shift = ix->cap ? ix->shift - 1u : 64u - 6u;
  uint32_t *slots = calloc(cap, sizeof *slots);
  if (!slots) {
    b->failed = true;
    vs_error_set(b->err, VS_ENOMEM, "out of host memory building the schedule");
    return false;
  }
  for (size_t i = 0; i < n; i++) {
    size_t at = (size_t)(item_hash((const char *)items + i * elem, elem) >>
                         shift);
    while (slots[at])
      at = (at + 1) & (cap - 1);
    slots[at] = (uint32_t)i + 1;
  }
  free(ix->slots);
  ix->slots = slots;
  ix->cap = cap;
  ix->shift = (uint8_t)shift;
  return true;
}

/* The index of item in *items (n of them, elem bytes each, zeroed before
 * their fields were set, as item is), appended when new, with ix kept at
 * most half full; NONE when out of host memory. Equal bytes are one
 * item. */
static inline uint32_t intern(builder *b, vs_intern_index *ix, void **items,
                              size_t *n, size_t *cap, const void *item,
                              size_t elem)
{
  size_t at;
  if (2 * (*n + 1) > ix->cap && !grow_index(b, ix, *items, *n, elem))
    return NONE;
  for (at = (size_t)(item_hash(item, elem) >> ix->shift); ix->slots[at];
       at = (at + 1) & (ix->cap - 1))
    if (same_words((const char *)*items + (ix->slots[at] - 1) * elem, item,
                   elem))
      return ix->slots[at] - 1;
  if (!grow(b, items, cap, *n + 1, elem))
    return NONE;
  memcpy((char *)*items + *n * elem, item, elem);
  ix->slots[at] = (uint32_t)++*n;
  return (uint32_t)*n - 1;
}

_Static_assert(sizeof(vs_op_kind) == VS_OP_NAME_MAX + 32 &&
                   sizeof(vs_buffer) == 16,
               "interned items have no padding, and item_hash reads them in "
               "64-bit words");
_Static_assert(sizeof(vs_pop) == 16, "an op record is 16 bytes");

static void gather_received(builder *b);
static void stream_waits(builder *b, uint32_t op);

/* Appends an op whose bytes cross resource `res` (and `via`; 0: none);
 * its deps and effects must be added before the next op. An op on the
 * compute stream comes after a due gather of a received part, and waits
 * for what the stream must (stream_waits). */
static uint32_t new_op_through(builder *b, int stream, int phase,
                               const char *name, int layer, int mb,
                               double seconds, double flops, double bytes,
                               int res, int via)
{
  vs_program *p = b->p;
  vs_op_kind k;
  vs_pop *op;
  uint32_t idx, kind;

  if (stream == VS_STREAM_COMPUTE && b->gather.due)
    gather_received(b);
  if (b->failed || !time_ok(b, name, seconds) ||
      !grow(b, (void **)&p->ops, &p->cap_ops, p->n_ops + 1, sizeof *p->ops) ||
      !grow(b, (void **)&p->stream_ops[stream], &p->cap_stream_ops[stream],
            p->n_stream_ops[stream] + 1, sizeof(uint32_t)))
    return NONE;
  memset(&k, 0, sizeof k);
  /* names are short: copy up to their end, not the whole field */
  memcpy(k.name, name, strnlen(name, sizeof k.name - 1));
  k.resource = (uint8_t)res;
  k.resource_via = (uint8_t)via;
  k.layer = layer;
  k.dur_ns = to_ns(seconds);
  k.flops = flops;
  k.bytes = bytes;
  if ((kind = intern(b, &p->kind_index, (void **)&p->kinds, &p->n_kinds,
                     &p->cap_kinds, &k, sizeof k)) == NONE)
    return NONE;
  if (kind > VS_PROGRAM_KINDS_MAX) {
    b->failed = true;
    vs_error_set(b->err, VS_ELIMIT,
                 "stage %llu's step would have over %u kinds of op, more "
                 "than vsim simulates; give the stage fewer layers (a "
                 "deeper pipeline)",
                 (unsigned long long)b->stage, VS_PROGRAM_KINDS_MAX);
    return NONE;
  }
  idx = (uint32_t)p->n_ops++;
  op = &p->ops[idx];
  memset(op, 0, sizeof *op);
  op->kind = kind & VS_PROGRAM_KINDS_MAX; /* checked above */
  op->microbatch = (int16_t)mb; /* < VS_MAX_MICROBATCHES */
  op->stream = (uint32_t)stream & 15u; /* < VS_STREAM_N */
  op->phase = (uint32_t)phase & 15u;   /* < VS_PHASE_N */
  op->first_dep = (uint32_t)p->n_deps;
  op->first_effect = (uint32_t)p->n_effects;
  p->stream_ops[stream][p->n_stream_ops[stream]++] = idx;
  if (stream == VS_STREAM_COMPUTE) {
    b->last_compute = idx;
    p->compute_seconds += (double)k.dur_ns * 1e-9;
    stream_waits(b, idx);
  } else {
    b->last_comm = idx;
  }
  return idx;
}

/* Appends an op that uses no shared resource. */
static uint32_t new_op(builder *b, int stream, int phase, const char *name,
                       int layer, int mb, double seconds, double flops,
                       double bytes)
{
  return new_op_through(b, stream, phase, name, layer, mb, seconds, flops,
                        bytes, 0, 0);
}

/* Whether op is the newest op, the only one that may take dependencies
 * and effects (they are contiguous per op, in op order); refuses the
 * schedule as a bug otherwise. */
static bool is_newest(builder *b, uint32_t op)
{
  if (op + 1 == b->p->n_ops)
    return true;
  b->failed = true;
  vs_error_set(b->err, VS_EINPUT,
               "schedule: stage %llu adds to op %u after op %zu (a "
               "schedule bug)",
               (unsigned long long)b->stage, op, b->p->n_ops - 1);
  return false;
}

/* Adds a dependency of op (the newest op) on op `dep` of the program of
 * `stage` (-1: this program). */
static void add_dep_on(builder *b, uint32_t op, uint32_t dep, int32_t stage)
{
  vs_program *p = b->p;
  if (op == NONE || dep == NONE || b->failed || !is_newest(b, op) ||
      !grow(b, (void **)&p->deps, &p->cap_deps, p->n_deps + 1, sizeof *p->deps))
    return;
  if (stage >= 0 && !p->dep_stages) {
    p->dep_stages = malloc(p->cap_deps * sizeof *p->dep_stages);
    p->cap_dep_stages = p->cap_deps;
    for (size_t i = 0; p->dep_stages && i < p->n_deps; i++)
      p->dep_stages[i] = -1;
  }
  if (p->dep_stages &&
      !grow(b, (void **)&p->dep_stages, &p->cap_dep_stages, p->n_deps + 1,
            sizeof *p->dep_stages))
    return;
  if (stage >= 0 && !p->dep_stages) {
    b->failed = true;
    vs_error_set(b->err, VS_ENOMEM, "out of host memory building the schedule");
    return;
  }
  if (p->dep_stages)
    p->dep_stages[p->n_deps] = stage;
  p->deps[p->n_deps++] = dep;
}

static void add_dep(builder *b, uint32_t op, uint32_t dep)
{
  add_dep_on(b, op, dep, -1);
}

/* A new buffer that is `what` (its padding zeroed). */
static uint32_t add_buffer(builder *b, const vs_buffer *what)
{
  vs_program *p = b->p;
  uint32_t kind;
  if (what->bytes != 0 && !b->failed &&
      p->n_buffers >= VS_PROGRAM_BUFFERS_MAX) {
    b->failed = true;
    vs_error_set(b->err, VS_ELIMIT,
                 "stage %llu's step would allocate over %u tensors, more "
                 "than vsim simulates; use fewer micro-batches a step",
                 (unsigned long long)b->stage, VS_PROGRAM_BUFFERS_MAX);
    return NONE;
  }
  if (what->bytes == 0 || b->failed ||
      !grow(b, (void **)&p->buffers, &p->cap_buffers, p->n_buffers + 1,
            sizeof *p->buffers) ||
      (kind = intern(b, &p->buffer_index, (void **)&p->buffer_kinds,
                     &p->n_buffer_kinds, &p->cap_buffer_kinds, what,
                     sizeof *what)) == NONE)
    return NONE;
  p->buffers[p->n_buffers] = kind;
  return (uint32_t)p->n_buffers++;
}

/* What a buffer of bytes of category in place (vs_place) is, not a
 * checkpoint, every byte set (add_buffer hashes them). */
static vs_buffer buffer_of(uint64_t bytes, int category, int place)
{
  vs_buffer what;
  memset(&what, 0, sizeof what);
  what.bytes = bytes;
  what.category = category;
  what.place = (uint8_t)place;
  return what;
}

/* A buffer of bytes of category in place (vs_place). */
static uint32_t placed_buffer(builder *b, uint64_t bytes, int category,
                              int place)
{
  vs_buffer what = buffer_of(bytes, category, place);
  return add_buffer(b, &what);
}

/* A buffer on the GPU. */
static uint32_t new_buffer(builder *b, uint64_t bytes, int category)
{
  return placed_buffer(b, bytes, category, VS_PLACE_GPU);
}

/* A full-recompute checkpoint (a layer's input) of bytes on the GPU. */
static uint32_t checkpoint_buffer(builder *b, uint64_t bytes)
{
  vs_buffer what = buffer_of(bytes, VS_CAT_ACTIVATIONS, VS_PLACE_GPU);
  what.checkpoint = true;
  return add_buffer(b, &what);
}

/* When in its op's run an effect applies. */
typedef enum effect_time { AT_START, AT_END } effect_time;

static void effect(builder *b, uint32_t op, uint32_t buf, effect_time when,
                   bool is_free)
{
  vs_program *p = b->p;
  if (op == NONE || buf == NONE || b->failed || !is_newest(b, op) ||
      !grow(b, (void **)&p->effects, &p->cap_effects, p->n_effects + 1,
            sizeof *p->effects))
    return;
  p->effects[p->n_effects].buffer = buf & VS_PROGRAM_BUFFERS_MAX; /* < it */
  p->effects[p->n_effects].step = b->every_step ? b->tag & 3u : 0u;
  p->effects[p->n_effects].at_end = when == AT_END;
  p->effects[p->n_effects].is_free = is_free ? 1u : 0u;
  p->n_effects++;
}

/* buf is allocated when op starts. */
static void alloc_on(builder *b, uint32_t op, uint32_t buf)
{
  effect(b, op, buf, AT_START, false);
}

/* buf is freed when op starts or ends. */
static void free_on(builder *b, uint32_t op, uint32_t buf, effect_time when)
{
  effect(b, op, buf, when, true);
}

/* A buffer that lives exactly as long as op. */
static void transient(builder *b, uint32_t op, uint64_t bytes, int category)
{
  uint32_t buf = new_buffer(b, bytes, category);
  alloc_on(b, op, buf);
  free_on(b, op, buf, AT_END);
}

/* op's temporaries of `bytes`, as two tensors when `first` (< bytes) is
 * one PyTorch allocates on its own (vs_op_spec fwd_temp_first). */
static void transients(builder *b, uint32_t op, uint64_t bytes,
                       uint64_t first)
{
  if (first > 0 && first < bytes)
    transient(b, op, first, VS_CAT_TEMP);
  transient(b, op, first > 0 && first < bytes ? bytes - first : bytes,
            VS_CAT_TEMP);
}

/* ------------------------------------------------------------------------
 * Blocks and instances: inst 0 is the embedding, 1..layers the transformer
 * layers, layers+1 the head.
 * ------------------------------------------------------------------------ */

static const vs_block *block_of(const builder *b, size_t inst)
{
  return vs_model_block(b->m, inst);
}

/* Bytes of saved tensor s of blk as the GPU keeps it: an FP8 copy of a
 * GEMM operand has a transposed twin on GPUs that need one (Hopper, Ada:
 * topology fp8_transposes). */
static uint64_t saved_size(const builder *b, const vs_block *blk, uint32_t s)
{
  const vs_saved *sv = &blk->saved[s];
  return sv->dtype == VS_DTYPE_FP8 && b->topo->fp8_transposes ? 2 * sv->bytes
                                                              : sv->bytes;
}

static const vs_kind_plan *plan_of(const builder *b, size_t inst)
{
  return vs_recipe_kind(b->r, b->m, inst);
}

/* Layer number shown in reports: -1 embedding, 0..L-1 layers, L head. */
static int layer_of(size_t inst) { return (int)inst - 1; }

/* The row of inst (a block of this stage) and micro-batch mb in the ring
 * tables (saved, ckpt_buf, act_host, act_out). Micro-batches in flight
 * on one block at once are fewer than b->ring (see ring_size), so
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

/* An op's time split by what bounds it (vs_bound); its duration is the
 * sum. */
typedef struct op_split {
  double s[VS_BOUND_N];
} op_split;

static double split_total(const op_split *x)
{
  double t = 0;
  for (int i = 0; i < VS_BOUND_N; i++)
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

static void add_launch(builder *b, op_split *x, unsigned kernels)
{
  x->s[VS_BOUND_LAUNCH] += vs_cost_launch_seconds(b->topo, kernels);
}

static double op_seconds(builder *b, bool matmul, double flops, double bytes)
{
  return vs_cost_roofline_seconds(b->topo, precision(b), matmul, flops, bytes,
                                  &b->p->cal_seen);
}

/* A roofline op's split (the optimizer step: one kernel's work, its
 * floors left out as before). */
static op_split roofline_split(builder *b, double flops, double bytes)
{
  op_split x = {{0}};
  add_work(b, &x, op_seconds(b, false, flops, bytes), bytes);
  return x;
}

static void add_gemm(builder *b, op_split *x, vs_gemm g, double flops,
                     double bytes)
{
  add_work(b, x,
           vs_cost_gemm_seconds(b->topo, precision(b), g, flops, bytes,
                                &b->p->cal_seen),
           bytes);
  add_launch(b, x, 1);
}

/* An op's work without a GEMM shape: flash attention from its measured
 * rates, anything else by the roofline; then its kernels' floors. */
static void add_shapeless(builder *b, op_split *x, const vs_op_spec *o,
                          double flops, double bytes, unsigned kernels)
{
  double t = o->flash.seq
                 ? vs_cost_flash_seconds(b->topo, precision(b), o->flash,
                                         flops, bytes, &b->p->cal_seen)
                 : op_seconds(b, o->matmul, flops, bytes);
  add_work(b, x, t, bytes);
  add_launch(b, x, kernels);
}

/* `share` of op o's forward (1, or a recompute's part): its GEMM's shape
 * prices it where it has one. */
static op_split fwd_split(builder *b, const vs_op_spec *o, double share)
{
  op_split x = {{0}};
  double f = share * o->fwd_flops, by = share * o->fwd_bytes;
  if (!(f > 0 || by > 0))
    return x;
  if (o->gemm.batch)
    add_gemm(b, &x, o->gemm, f, by);
  else
    add_shapeless(b, &x, o, f, by, o->fwd_kernels);
  return x;
}

/* Op o's backward doing what the recipe runs of it (flops, bytes): a GEMM
 * op's input gradient (forward's FLOPs and bytes), then its second
 * operand's gradient for the rest (none for a frozen weight). */
static op_split bwd_split(builder *b, const vs_op_spec *o, double flops,
                          double bytes)
{
  op_split x = {{0}};
  double f, by;
  if (!(flops > 0 || bytes > 0))
    return x;
  if (!o->gemm.batch) {
    add_shapeless(b, &x, o, flops, bytes, o->bwd_kernels);
    return x;
  }
  f = flops < o->fwd_flops ? flops : o->fwd_flops;
  by = bytes < o->fwd_bytes ? bytes : o->fwd_bytes;
  add_gemm(b, &x, vs_gemm_dgrad(o->gemm), f, by);
  if (flops > f)
    add_gemm(b, &x, vs_gemm_wgrad(o->gemm), flops - f, bytes - by);
  return x;
}

/* The next compute-stream op waits for op too (a block's gather, its
 * activations' fetch and up to two blocking sends: four at most, a fifth
 * is a schedule bug). */
static void wait_on(builder *b, uint32_t op)
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
static void stream_waits(builder *b, uint32_t op)
{
  for (uint32_t i = 0; i < b->n_waits; i++)
    add_dep(b, op, b->waits[i]);
  b->n_waits = 0;
  add_dep(b, op, b->reduce_wait);
  b->reduce_wait = NONE;
  for (int i = 0; i < 2; i++) {
    free_on(b, op, b->released[i], AT_START);
    b->released[i] = NONE;
  }
  if (b->recv_op != NONE && !b->recv_waited) {
    add_dep(b, op, b->recv_op);
    b->recv_waited = true;
  }
}

/* Op k of inst's block: its time in phase `which`, computed once for the
 * block's kind (every micro-batch and layer of a kind runs the same ops). */
static const op_split *op_time(builder *b, size_t inst, uint32_t k,
                               phase_time which)
{
  const vs_op_spec *o = &block_of(b, inst)->ops[k];
  op_split *slot = &b->op_time[(b->kind_first[b->m->inst_kind[inst]] + k) *
                                   TIME_PHASES +
                               which];
  if (isnan(slot->s[0])) {
    const vs_kind_plan *plan = plan_of(b, inst);
    *slot = which == TIME_FWD ? fwd_split(b, o, 1.0)
            : which == TIME_RECOMPUTE
                ? fwd_split(b, o, o->recompute_share)
                : bwd_split(b, o, plan->bwd_flops[k], plan->bwd_bytes[k]);
  }
  return slot;
}

static void add_split(double *to, const op_split *x)
{
  for (int i = 0; i < VS_BOUND_N; i++)
    to[i] += x->s[i];
}

/* A compute-stream op of time t (split by bound, which the program sums)
 * doing flops and bytes. */
static uint32_t bound_op(builder *b, int phase, const char *name, int layer,
                         int mb, double flops, double bytes, const op_split *t)
{
  add_split(b->p->bound_seconds, t);
  return new_op(b, VS_STREAM_COMPUTE, phase, name, layer, mb, split_total(t),
                flops, bytes);
}

/* A compute op of time t doing flops and bytes. */
static uint32_t compute_op(builder *b, int phase, const char *name, int layer,
                           int mb, double flops, double bytes,
                           const op_split *t)
{
  uint32_t op = bound_op(b, phase, name, layer, mb, flops, bytes, t);
  if (b->copy_out != NONE) {
    alloc_on(b, op, b->copy_out);
    free_on(b, op, b->flat_done, AT_START);
    b->copy_out = b->flat_done = NONE;
  }
  if (b->recv_op != NONE) {
    /* the received tensor becomes this op's input: freed as the op's own
     * saved copy appears (forward) or once its gradient is used (backward) */
    free_on(b, op, b->recv_buf, (effect_time)b->recv_free_when);
    b->recv_op = NONE;
    b->recv_waited = false;
  }
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
static uint32_t comm_op(builder *b, const vs_comm *c, const char *name,
                        int layer, int mb)
{
  return new_op(b, b->r->comm[VS_USE_OP].stream,
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
    comm_op(b, c, vs_coll_op_name(c->group, c->kind), layer, mb);
}

/* A step-level collective of `use` on its stream, over `group`. */
static uint32_t group_comm(builder *b, int use, int group, const char *name,
                           int kind, uint64_t bytes, int mb)
{
  double t = group_seconds(b, group, kind, bytes);
  return new_op(b, b->r->comm[use].stream, VS_PHASE_DP_COMM, name, -1, mb, t,
                0.0, (double)bytes);
}

/* A step-level collective of `use` (its stream and group from the recipe). */
static uint32_t use_comm(builder *b, int use, const char *name, int kind,
                         uint64_t bytes, int mb)
{
  return group_comm(b, use, b->r->comm[use].group, name, kind, bytes, mb);
}

/* use_comm of `bytes` once `after` has ended, of which `expert` (the
 * routed experts' states, when they have groups of their own: ep > 1 or
 * etp other than tp) go over the expert-data-parallel
 * group instead, after the rest (and nowhere when that group is one
 * GPU). Returns the last op (`after` when there is none). */
static uint32_t split_comm(builder *b, int use, const char *name, int kind,
                           uint64_t bytes, uint64_t expert, int mb,
                           uint32_t after)
{
  uint32_t op = after;
  if (!b->lay->experts_apart)
    expert = 0;
  if (bytes > expert && b->lay->group_size[b->r->comm[use].group] > 1) {
    op = use_comm(b, use, name, kind, bytes - expert, mb);
    add_dep(b, op, after);
  }
  if (expert && b->lay->group_size[VS_GROUP_EXPERT_DP] > 1) {
    uint32_t edp = group_comm(b, use, VS_GROUP_EXPERT_DP,
                              vs_coll_op_name(VS_GROUP_EXPERT_DP, kind), kind,
                              expert, mb);
    add_dep(b, edp, op);
    op = edp;
  }
  return op;
}

/* ------------------------------------------------------------------------
 * ZeRO-3 parameter gathers
 * ------------------------------------------------------------------------ */


/* An offload op: `amount` bytes (parameters, for the cpu) through one
 * instance of resource kind res, on stream, once `after` and `also` (NONE:
 * nothing) have ended; the resource decides its time as it runs. Without
 * an amount there is no op: `after` is returned. */
static uint32_t offload_op_after(builder *b, int stream, int res,
                                 const char *name, int layer, int mb,
                                 uint64_t amount, uint32_t after, uint32_t also)
{
  uint32_t op;
  int via;
  if (amount == 0)
    return after;
  /* copies and NVMe swaps land in (or leave) host memory */
  via = res != VS_RES_CPU && b->topo->host_memory_bandwidth > 0
            ? VS_RES_HOST_MEMORY
            : 0;
  op = new_op_through(b, stream, VS_PHASE_OFFLOAD, name, layer, mb, 0.0, 0.0,
                      (double)amount, res, via);
  add_dep(b, op, after);
  add_dep(b, op, also);
  return op;
}

/* An offload op: `amount` bytes (parameters, for the cpu) through one
 * instance of resource kind res, on stream, once `after` has ended; the
 * resource decides its time as it runs. */
static uint32_t offload_op(builder *b, int stream, int res, const char *name,
                           int layer, int mb, uint64_t amount, uint32_t after)
{
  return offload_op_after(b, stream, res, name, layer, mb, amount, after, NONE);
}

/* Parameters off the GPU: the block's partition of `part` bytes comes in
 * (from NVMe to the host first, when it lives there) once `after` has
 * ended; returns the op that brings it. */
static uint32_t fetch_partition(builder *b, size_t inst, int mb, uint64_t part,
                                uint32_t after)
{
  int layer = layer_of(inst);
  if (b->r->params.place == VS_PLACE_NVME)
    after = offload_op(b, VS_STREAM_H2D, VS_RES_NVME, "param_swap_in", layer,
                       mb, part, after);
  return offload_op(b, VS_STREAM_H2D, VS_RES_PCIE_SWITCH, "param_to_gpu",
                    layer, mb, part, after);
}

/* Brings inst's parameters whole onto the GPU once `after` has ended (so
 * at most two blocks are gathered at a time): its partition copied in
 * when it lives off the GPU, then all-gathered on the comm stream when
 * there are data-parallel peers, into FSDP2's flat buffer when `flat`
 * (copied out as the block's pass starts), else straight into the
 * parameters as the all-gather ends. */
static void gather_into(builder *b, size_t inst, int mb, uint32_t after,
                        bool flat)
{
  uint64_t bytes = plan_of(b, inst)->param_bytes;
  const vs_comm_plan *u = &b->r->comm[VS_USE_PARAM_GATHER];
  uint64_t part = vs_recipe_shard(&b->r->params, bytes);
  bool peers = b->lay->dp > 1;
  uint32_t op = after, part_buf = NONE;

  if (!b->r->gather_params || bytes == 0 || b->gather_op[inst] != NONE)
    return;
  if (b->r->offload.fetch_params) {
    op = fetch_partition(b, inst, mb, part, op);
    if (peers) {
      part_buf = new_buffer(b, part, VS_CAT_TEMP);
      alloc_on(b, op, part_buf);
    }
  }
  if (peers) {
    double t = group_seconds(b, u->group, VS_COLL_ALL_GATHER, bytes);
    uint32_t coll = new_op(b, u->stream, VS_PHASE_DP_COMM, "zero3_all_gather",
                           layer_of(inst), mb, t, 0.0, (double)bytes);
    add_dep(b, coll, op);
    free_on(b, coll, part_buf, AT_END);
    op = coll;
  }
  b->gather_buf[inst] = new_buffer(b, bytes, VS_CAT_TEMP);
  if (flat && peers) {
    /* FSDP2: the all-gather fills a flat buffer; the block's parameters
     * are copied out of it when its pass starts (before_pass) */
    b->flat_buf[inst] = new_buffer(b, bytes, VS_CAT_TEMP);
    alloc_on(b, op, b->flat_buf[inst]);
  } else {
    alloc_on(b, op, b->gather_buf[inst]);
  }
  b->gather_op[inst] = op;
}

static void gather(builder *b, size_t inst, int mb, uint32_t after)
{
  gather_into(b, inst, mb, after, b->r->gather_copy_out);
}

/* FSDP2's copy-out as inst's pass starts: its unsharded parameters appear
 * on the next compute op, which frees the previous block's flat buffer;
 * inst's own lives until the next copy-out. */
static void copy_out(builder *b, size_t inst)
{
  if (b->flat_buf[inst] == NONE)
    return;
  b->copy_out = b->gather_buf[inst];
  b->flat_done = b->last_flat;
  b->last_flat = b->flat_buf[inst];
  b->flat_buf[inst] = NONE;
}

/* Whether inst belongs to FSDP2's root unit (recipe root_kept): the
 * embedding and the head of a model without pipeline stages. */
static bool in_root_unit(const builder *b, size_t inst)
{
  return b->r->root_kept && (inst == 0 || inst + 1 == b->n_inst);
}

/* Whether inst's forward gather lasts to its backward: FSDP2's last
 * transformer block (recipe keep_last_gathered) and its root unit. */
static bool kept_after_forward(const builder *b, size_t inst)
{
  return (b->r->keep_last_gathered && inst == (size_t)b->m->layers) ||
         in_root_unit(b, inst);
}

/* Whether inst's backward is the last of its chunk's pass: the block
 * before is outside the chunk or a frozen prefix, which runs none. */
static bool last_backward(const builder *b, size_t inst)
{
  return inst <= b->unit_first || plan_of(b, inst - 1)->no_backward;
}

/* Before a block's pass: gather it (if not prefetched) and prefetch the next
 * block of the pass; the block's first compute op waits for its gather.
 * The root unit is gathered whole with its first block. */
static void before_pass(builder *b, size_t inst, size_t next, bool has_next,
                        int mb)
{
  if (!b->r->gather_params)
    return;
  gather(b, inst, mb, b->last_compute);
  if (in_root_unit(b, inst)) /* one all-gather, copied out at once */
    gather_into(b, b->n_inst - 1 - inst, mb, b->last_compute, false);
  if (has_next)
    gather(b, next, mb, b->last_compute);
  if (b->gather_op[inst] != NONE) {
    wait_on(b, b->gather_op[inst]);
    copy_out(b, inst);
  }
}

/* inst's gathered params go when op starts or ends; the next pass
 * gathers them again. */
static void drop_gather(builder *b, size_t inst, uint32_t op,
                        effect_time when)
{
  if (b->gather_buf[inst] == NONE)
    return;
  free_on(b, op, b->gather_buf[inst], when);
  b->gather_buf[inst] = NONE;
  b->gather_op[inst] = NONE;
}

/* The block's last compute op of the pass releases its gathered params
 * (pipelined FSDP2 keeps them to its post-backward: reshard_kept). */
static void release_gather(builder *b, size_t inst, uint32_t op)
{
  if (!b->r->pipelined_fsdp)
    drop_gather(b, inst, op, AT_END);
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

/* Whether inst's saved tensors go to the host: transformer layers but the
 * model's last, whose backward follows at once (Megatron-LM offloads at
 * most num_layers - 1 layers). */
static bool offloads_acts(const builder *b, size_t inst)
{
  return b->r->offload.activations &&
         block_of(b, inst)->role == VS_ROLE_LAYER &&
         inst < (size_t)b->m->layers;
}

/* Bytes of inst's tensors kept from forward to backward: the saved ones
 * it keeps and, with full checkpointing, its input. */
static uint64_t kept_bytes(const builder *b, size_t inst)
{
  const vs_block *blk = block_of(b, inst);
  const vs_kind_plan *plan = plan_of(b, inst);
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
  const vs_block *blk = block_of(b, inst);
  uint64_t bytes = offloads_acts(b, inst) ? kept_bytes(b, inst) : 0;
  uint32_t op = offload_op(b, VS_STREAM_D2H, VS_RES_PCIE_D2H,
                           "activations_to_host", layer_of(inst), mb, bytes,
                           after);
  uint32_t host;
  if (op == after)
    return;
  host = placed_buffer(b, bytes, VS_CAT_ACTIVATIONS, VS_PLACE_HOST);
  alloc_on(b, op, host);
  b->act_host[live(b, inst, mb)] = host;
  b->act_out[live(b, inst, mb)] = op;
  for (uint32_t s = 0; s < blk->n_saved; s++)
    if (plan_of(b, inst)->keep[s] == VS_KEEP)
      free_on(b, op, *saved_slot(b, inst, s, mb), AT_END);
  free_on(b, op, b->ckpt_buf[live(b, inst, mb)], AT_END);
}

/* Before inst's backward of mb: its tensors come back into fresh GPU
 * buffers (freed by the backward as usual) once `after` and the copy out
 * have ended; the host buffer is freed when the copy back ends. */
static void acts_to_gpu(builder *b, size_t inst, int mb, uint32_t after)
{
  const vs_block *blk = block_of(b, inst);
  const vs_kind_plan *plan = plan_of(b, inst);
  uint32_t *host = &b->act_host[live(b, inst, mb)];
  uint32_t op;
  if (!offloads_acts(b, inst) || *host == NONE || b->act_fetch[inst] != NONE)
    return;
  op = offload_op_after(b, VS_STREAM_H2D, VS_RES_PCIE_SWITCH,
                        "activations_to_gpu", layer_of(inst), mb,
                        vs_program_buffer(b->p, *host)->bytes, after,
                        b->act_out[live(b, inst, mb)]);
  for (uint32_t s = 0; s < blk->n_saved; s++) {
    uint32_t *slot = saved_slot(b, inst, s, mb);
    if (plan->keep[s] != VS_KEEP)
      continue;
    *slot = new_buffer(b, saved_size(b, blk, s), blk->saved[s].category);
    alloc_on(b, op, *slot);
  }
  if (plan->recompute_block) {
    uint32_t *ckpt = &b->ckpt_buf[live(b, inst, mb)];
    *ckpt = new_buffer(b, blk->ckpt_bytes, VS_CAT_ACTIVATIONS);
    alloc_on(b, op, *ckpt);
  }
  free_on(b, op, *host, AT_END);
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
  if (inst > b->unit_first)
    acts_to_gpu(b, inst - 1, mb, b->last_compute);
  wait_on(b, b->act_fetch[inst]);
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
  return block_of(b, inst)->saved[s].weight_copy == VS_COPY_AUTOCAST &&
         plan_of(b, inst)->keep[s] == VS_RECOMPUTE_BLOCK;
}

/* Op casts a weight of `bytes` into autocast's cache. */
static void cache_copy(builder *b, uint32_t op, uint64_t bytes)
{
  uint32_t buf = new_buffer(b, bytes, VS_CAT_TEMP);
  if (!grow(b, (void **)&b->cached, &b->cap_cached, b->n_cached + 1,
            sizeof *b->cached))
    return;
  b->cached[b->n_cached++] = buf;
  alloc_on(b, op, buf);
}

/* The forward pass ends: autocast's cache is cleared. */
static void clear_cache(builder *b)
{
  for (size_t i = 0; i < b->n_cached; i++)
    free_on(b, b->last_compute, b->cached[i], AT_END);
  b->n_cached = 0;
}

static void allocate_held_output(builder *b, size_t inst, uint32_t op);

static void forward_block(builder *b, size_t inst, int mb)
{
  const vs_block *blk = block_of(b, inst);
  const vs_kind_plan *plan = plan_of(b, inst);
  int layer = layer_of(inst);
  bool full = plan->recompute_block;

  before_pass(b, inst, inst + 1, inst < b->unit_last, mb);
  for (uint32_t k = 0; k < blk->n_ops; k++) {
    const vs_op_spec *o = &blk->ops[k];
    uint64_t fleeting = o->fwd_temp_bytes;
    uint32_t op;

    op_comm(b, &o->fwd_before, layer, mb);
    op = compute_op(b, VS_PHASE_FWD, o->name, layer, mb, o->fwd_flops,
                    o->fwd_bytes, op_time(b, inst, k, TIME_FWD));
    if (k == 0 && full) {
      uint32_t *ckpt = &b->ckpt_buf[live(b, inst, mb)];
      hold(b, ckpt, checkpoint_buffer(b, blk->ckpt_bytes));
      alloc_on(b, op, *ckpt);
    }
    for (uint32_t s = o->first_saved; s < o->first_saved + o->n_saved; s++) {
      uint32_t *slot = saved_slot(b, inst, s, mb);
      if (plan->keep[s] == VS_KEEP) {
        hold(b, slot, new_buffer(b, saved_size(b, blk, s),
                                 blk->saved[s].category));
        alloc_on(b, op, *slot);
      } else if (held_by_cache(b, inst, s)) {
        cache_copy(b, op, saved_size(b, blk, s));
      } else {
        fleeting += saved_size(b, blk, s);
      }
    }
    transients(b, op, fleeting, o->fwd_temp_first);
    if (k + 1 == blk->n_ops) {
      allocate_held_output(b, inst, op);
      if (!kept_after_forward(b, inst))
        release_gather(b, inst, op);
      acts_to_host(b, inst, mb, op);
    }
    op_comm(b, &o->fwd_after, layer, mb);
  }
}

/* Full checkpointing: re-runs the layer's forward (and its tp collectives),
 * re-creating every saved tensor as temp until its backward frees it. */
static void recompute_layer(builder *b, size_t inst, int mb)
{
  const vs_block *blk = block_of(b, inst);
  double flops = 0, bytes = 0;
  op_split t = {{0}};
  uint32_t op;

  for (uint32_t k = 0; k < blk->n_ops; k++) {
    const vs_op_spec *o = &blk->ops[k];
    flops += o->recompute_share * o->fwd_flops;
    bytes += o->recompute_share * o->fwd_bytes;
    add_split(t.s, op_time(b, inst, k, TIME_RECOMPUTE));
    t.s[VS_BOUND_COMM] += op_comm_seconds(b, &o->fwd_before) +
                          op_comm_seconds(b, &o->fwd_after);
  }
  op = bound_op(b, VS_PHASE_RECOMPUTE, "recompute_layer", layer_of(inst), mb,
                flops, bytes, &t);
  if (b->wl->training.checkpointing == VS_CKPT_OPS) {
    /* op-level: the kept outputs are reused as the re-created tensors
     * (which count them below), not held beside them */
    uint32_t *ckpt = &b->ckpt_buf[live(b, inst, mb)];
    free_on(b, op, *ckpt, AT_START);
    *ckpt = NONE;
  }
  for (uint32_t s = 0; s < blk->n_saved; s++) {
    uint32_t *slot = saved_slot(b, inst, s, mb);
    if (plan_of(b, inst)->keep[s] == VS_NOT_SAVED)
      continue; /* its op's weights are frozen: never kept */
    hold(b, slot, new_buffer(b, saved_size(b, blk, s), VS_CAT_TEMP));
    alloc_on(b, op, *slot);
  }
}

/* Selective checkpointing: re-runs the attention core before its backward,
 * re-creating the dropped s^2 tensors as one temp buffer. */
static void recompute_core(builder *b, size_t inst, int mb)
{
  const vs_block *blk = block_of(b, inst);
  const vs_kind_plan *plan = plan_of(b, inst);
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
    for (uint32_t s = o->first_saved; s < o->first_saved + o->n_saved; s++)
      if (plan->keep[s] == VS_RECOMPUTE_CORE)
        dropped += saved_size(b, blk, s);
  }
  if (dropped == 0)
    return;
  op = compute_op(b, VS_PHASE_RECOMPUTE, "recompute_attn", layer_of(inst),
                  mb, flops, bytes, &t);
  b->sel_buf[inst] = new_buffer(b, dropped, VS_CAT_TEMP);
  alloc_on(b, op, b->sel_buf[inst]);
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

/* A model state kept per parameter tensor (vs_recipe per_tensor_states). */
typedef enum state_kind {
  STATE_PARAMS,  /* the parameter as stored */
  STATE_MASTER,  /* its fp32 master copy */
  STATE_GRADS,   /* its gradient as backward makes it */
  STATE_MOMENTS, /* the optimizer's other states (AdamW's exp_avg and
                    exp_avg_sq, ...), one tensor each */
  STATE_N
} state_kind;

static const int state_category[STATE_N] = {VS_CAT_PARAMS, VS_CAT_OPTIMIZER,
                                            VS_CAT_GRADS, VS_CAT_OPTIMIZER};

/* The bytes of each tensor of state `which` among a parameter's states
 * ts, in out: how many. */
static unsigned state_parts(const vs_tensor_states *ts, state_kind which,
                            uint64_t out[VS_OPT_STATE_TENSORS_MAX])
{
  unsigned k = 0;
  switch (which) {
  case STATE_PARAMS:
    out[k++] = ts->stored_param;
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
  const vs_block *blk = block_of(b, inst);
  uint64_t sum = 0;
  for (uint32_t i = lo; i < hi; i++) {
    vs_tensor_states ts;
    uint64_t parts[VS_OPT_STATE_TENSORS_MAX];
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
      buf = new_buffer(b, parts[j], state_category[which]);
      alloc_on(b, op, buf);
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
  return param_states(b, op, inst, which, 0, block_of(b, inst)->n_params,
                      NULL);
}

/* tensor_states of every instance on stage b->stage (b->stage_inst), in
 * order: their bytes. */
static uint64_t stage_states(builder *b, uint32_t op, state_kind which)
{
  uint64_t sum = 0;
  for (size_t inst = 0; inst < b->n_inst; inst++)
    if (b->stage_inst[inst] != NONE)
      sum += tensor_states(b, op, inst, which);
  return sum;
}

/* Gradients of the block wait, unreduced, until their bucket is reduced
 * (ZeRO-2/3); with ZeRO-0/1 they accumulate in the resident buffer. */
static bool transient_grads(const builder *b) { return b->r->transient_grads; }

/* inst's gradients appear in table[inst] when op starts, unless they
 * already have: in grad_buf (transient: they wait for their bucket or
 * their step) or grads_kept (kept to the step, gone after it). */
static void grads_appear(builder *b, uint32_t *table, size_t inst,
                         uint32_t op)
{
  if (table[inst] != NONE)
    return;
  table[inst] = new_buffer(b, plan_of(b, inst)->made_grad_bytes,
                          VS_CAT_GRADS);
  alloc_on(b, op, table[inst]);
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
static void free_kept_grads(builder *b, uint32_t op, size_t inst)
{
  uint32_t *slot = b->tensor_grad + b->param_base[inst];
  if (b->grads_kept[inst] != NONE)
    free_on(b, op, b->grads_kept[inst], AT_END);
  b->grads_kept[inst] = NONE;
  for (uint32_t i = 0;
       b->r->per_tensor_states && i < block_of(b, inst)->n_params; i++) {
    if (slot[i] != NONE)
      free_on(b, op, slot[i], AT_END);
    slot[i] = NONE;
  }
}

/* Whether the program has the effects `step` alone has: one for every
 * step has each step's, one for a step that step's. */
static bool has_step(const builder *b, vs_step step)
{
  return b->every_step || b->step == step;
}

/* The effects added from now on apply only in `step` (only_in), or in
 * every step (in_every_step): where the steps differ, each adds its own
 * (has_step). */
static void only_in(builder *b, vs_step step) { b->tag = (uint8_t)(1 + step); }
static void in_every_step(builder *b) { b->tag = 0; }

/* Whether the first step makes the stage's resident gradients (vs_recipe
 * first_step_states), and the program has its effects. */
static bool first_makes_grads(const builder *b)
{
  return b->r->first_step_states && !transient_grads(b) &&
         !b->r->grads_set_to_none && has_step(b, VS_STEP_FIRST);
}

/* Where gradients made in backward in every step appear, or NULL when
 * they are resident from the setup on (though the first step may make
 * them: first_makes_grads). */
static uint32_t *grads_made_in(const builder *b)
{
  return transient_grads(b) ? b->grad_buf
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

/* Under grads_per_tensor, the gradients op k of inst's block computes
 * appear when its backward `op` starts; with the block's first backward
 * op the weights no op names too, and on the head's the embedding's
 * gradients, which it computes. */
static void op_grads_appear(builder *b, size_t inst, int k, uint32_t op)
{
  const vs_block *blk = block_of(b, inst);
  const vs_op_spec *o = &blk->ops[k];
  if (k == (int)blk->n_ops - 1) {
    tensor_grads_appear(b, inst, 0, blk->ops[0].first_param, op);
    if (inst + 1 == b->n_inst && head_writes_embedding_grads(b))
      tensor_grads_appear(b, 0, 0, block_of(b, 0)->n_params, op);
  }
  tensor_grads_appear(b, inst, o->first_param, o->first_param + o->n_params,
                      op);
}

static void backward_block(builder *b, size_t inst, int mb)
{
  const vs_block *blk = block_of(b, inst);
  const vs_kind_plan *plan = plan_of(b, inst);
  int layer = layer_of(inst);
  int core_first = first_core_op(blk), core_last = last_core_op(blk);

  if (plan->no_backward)
    return; /* a frozen prefix: no gradient flows through it */
  /* the block before, in this chunk, runs a backward (and so releases a
   * prefetched gather) unless it is a frozen prefix */
  before_pass(b, inst, inst - 1, !last_backward(b, inst), mb);
  before_backward_acts(b, inst, mb);
  if (plan->recompute_block)
    recompute_layer(b, inst, mb);
  for (int k = (int)blk->n_ops - 1; k >= 0; k--) {
    const vs_op_spec *o = &blk->ops[k];
    uint32_t op;

    if (plan->recompute_core && k == core_last)
      recompute_core(b, inst, mb);
    op_comm(b, &o->bwd_before, layer, mb);
    op = compute_op(b, VS_PHASE_BWD, o->name, layer, mb, plan->bwd_flops[k],
                    plan->bwd_bytes[k], op_time(b, inst, (uint32_t)k, TIME_BWD));
    if (grads_per_tensor(b)) {
      op_grads_appear(b, inst, k, op);
    } else if (k == (int)blk->n_ops - 1 && grads_made_in(b)) {
      grads_appear(b, grads_made_in(b), inst, op);
      if (inst + 1 == b->n_inst && head_writes_embedding_grads(b))
        grads_appear(b, grads_made_in(b), 0, op); /* the head computes the
                                                     embedding's */
    } else if (first_makes_grads(b)) { /* AccumulateGrad makes each */
      only_in(b, VS_STEP_FIRST);
      op_grads_appear(b, inst, k, op);
      in_every_step(b);
    }
    transients(b, op, o->bwd_temp_bytes, o->bwd_temp_first);
    for (uint32_t s = o->first_saved; s < o->first_saved + o->n_saved; s++) {
      uint32_t *slot = saved_slot(b, inst, s, mb);
      free_on(b, op, *slot, AT_END);
      *slot = NONE;
    }
    if (k == core_first && b->sel_buf[inst] != NONE) {
      free_on(b, op, b->sel_buf[inst], AT_END);
      b->sel_buf[inst] = NONE;
    }
    if (k == 0) {
      free_on(b, op, b->ckpt_buf[live(b, inst, mb)], AT_END);
      b->ckpt_buf[live(b, inst, mb)] = NONE;
      if (!in_root_unit(b, inst))
        release_gather(b, inst, op);
      if (b->r->root_kept && last_backward(b, inst))
        release_root(b, op); /* the root's post-backward */
    }
    op_comm(b, &o->bwd_after, layer, mb);
  }
}

/* ------------------------------------------------------------------------
 * Gradient reduction and the optimizer
 * ------------------------------------------------------------------------ */

/* Copies this GPU's reduced partition of the open bucket to the host once
 * `after` has ended. DeepSpeed casts it to fp32 on the GPU first
 * (stage_1_and_2.py async_inplace_copy_grad_to_fp32_buffer_from_gpu), so
 * 4 B an element cross PCIe and an fp32 copy lives on the GPU meanwhile. */
static uint32_t grads_to_host(builder *b, int mb, uint32_t after)
{
  uint64_t elems = b->bucket_elems;
  uint64_t bytes = vs_recipe_shard(&b->r->offload.host_grads, 4 * elems);
  uint32_t op = offload_op(b, VS_STREAM_D2H, VS_RES_PCIE_D2H, "grad_to_host",
                           -1, mb, bytes, after);
  if (op != after)
    transient(b, op, bytes, VS_CAT_TEMP);
  return op;
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
static void release_at_step_end(builder *b)
{
  for (int i = 0; i < 2 && b->p->n_ops > 0; i++) {
    free_on(b, (uint32_t)(b->p->n_ops - 1), b->released[i], AT_END);
    b->released[i] = NONE;
  }
  b->reduce_wait = NONE;
}

/* Pipelined FSDP2's reshard of inst's kept parameters as op starts. */
static void reshard_kept(builder *b, size_t inst, uint32_t op)
{
  if (b->r->pipelined_fsdp)
    drop_gather(b, inst, op, AT_START);
}

/* FSDP2's post-backward (recipe reduce_copy) for the open bucket: it
 * waits for the bucket before's reduce-scatter and frees that one's input
 * (reduce_scatter_state), then copies the bucket's gradients into a new
 * reduce-scatter input in one compute-stream kernel (torch._chunk_cat in
 * foreach_reduce), reading them and writing the input, and frees them.
 * Returns the copy, which the reduce-scatter follows. */
static uint32_t copy_to_reduce_input(builder *b, int mb, uint32_t after)
{
  uint64_t bytes = b->bucket_made + b->bucket_fill;
  op_split t = roofline_split(b, 0.0, (double)bytes);
  uint32_t op;
  wait_for_bucket_before(b);
  if (b->reduce_input != NONE)
    release_at_next_compute(b, b->reduce_input);
  add_launch(b, &t, 1);
  op = compute_op(b, VS_PHASE_BWD, "reduce_copy_in", -1, mb, 0.0,
                  (double)bytes, &t);
  add_dep(b, op, after);
  /* pipelined, the post-backward reshards the blocks first */
  for (size_t i = 0; i < b->n_bucket; i++)
    reshard_kept(b, b->bucket[i], op);
  b->reduce_input = new_buffer(b, b->bucket_fill, VS_CAT_GRADS);
  alloc_on(b, op, b->reduce_input);
  for (size_t i = 0; i < b->n_bucket; i++) {
    free_on(b, op, b->grad_buf[b->bucket[i]], AT_END);
    b->grad_buf[b->bucket[i]] = NONE;
  }
  return op;
}

/* Pipelined FSDP2: the blocks still gathered once the stage's reductions
 * are issued (those without gradients to reduce) are resharded by their
 * post-backward, which a zero-time op on the compute stream stands for. */
static void reshard_rest(builder *b)
{
  op_split none = {{0}};
  uint32_t op = NONE;
  for (size_t inst = 0; b->r->pipelined_fsdp && inst < b->n_inst; inst++) {
    if (b->gather_buf[inst] == NONE)
      continue;
    if (op == NONE)
      op = compute_op(b, VS_PHASE_BWD, "fsdp_reshard", -1, -1, 0.0, 0.0,
                      &none);
    reshard_kept(b, inst, op);
  }
}

/* The end of a chunk's backward (FSDP2's finalize_backward): the compute
 * stream waits for the last reduce-scatter, and the inputs still held go
 * as its next op starts. */
static void release_reduce_inputs(builder *b)
{
  if (b->reduce_input == NONE)
    return;
  b->reduce_wait = b->reduce_input_op;
  release_at_next_compute(b, b->reduce_input);
  b->reduce_input = NONE;
}

/* Reduces the open bucket over the data-parallel group (when there is
 * one) once op `last` has ended and, with the optimizer on the host,
 * copies this GPU's reduced partition of it out; the bucket's gradients
 * are freed once both end. */
static void flush_bucket(builder *b, int mb, uint32_t last)
{
  int kind = b->r->grad_reduce;
  int group = b->r->comm[VS_USE_GRAD_REDUCE].group;

  if (b->bucket_fill == 0) {
    b->n_bucket = 0;
    return;
  }
  if (vs_workload_grads_shared(&b->wl->parallel)) {
    if (b->r->reduce_copy)
      last = copy_to_reduce_input(b, mb, last);
    last = split_comm(b, VS_USE_GRAD_REDUCE, vs_coll_op_name(group, kind),
                      kind, b->bucket_fill, b->bucket_expert, mb, last);
    b->reduce_input_op = last;
  }
  if (b->r->offload.cpu_step)
    last = grads_to_host(b, mb, last);
  b->grads_done = last;
  if (!b->r->reduce_copy)
    wait_for_bucket_before(b);
  record_bucket(b, last);
  for (size_t i = 0; i < b->n_bucket; i++) {
    free_on(b, last, b->grad_buf[b->bucket[i]], AT_END);
    b->grad_buf[b->bucket[i]] = NONE;
  }
  b->n_bucket = 0;
  b->bucket_fill = 0;
  b->bucket_made = 0;
  b->bucket_elems = 0;
  b->bucket_expert = 0;
}

/* Adds inst's gradients to the open bucket; reduces it (after op
 * `after`) once it holds at least `bucket` bytes (the caller flushes the
 * rest at the end of the chunk's backward). */
static void bucket_grads(builder *b, size_t inst, int mb, uint32_t after)
{
  b->bucket[b->n_bucket++] = (uint32_t)inst;
  b->bucket_fill += plan_of(b, inst)->grad_bytes;
  b->bucket_made += plan_of(b, inst)->made_grad_bytes;
  b->bucket_expert += plan_of(b, inst)->expert_grad_bytes;
  b->bucket_elems += plan_of(b, inst)->trainable_elems;
  if (b->bucket_fill >= b->wl->parallel.bucket_bytes)
    flush_bucket(b, mb, after);
}

/* Keeps inst's gradients for the reduction after backward (NONE: the
 * chunk's backward ends, and with it its open bucket). */
static void defer_grads(builder *b, uint32_t inst)
{
  b->deferred[b->n_deferred++] = inst;
}

/* Buckets the listed gradients (defer_grads) and reduces them once op
 * `after` has ended. */
static void reduce_listed(builder *b, uint32_t after)
{
  int mb = (int)b->lay->grad_accum - 1; /* gradients wait for the last */
  for (size_t i = 0; i < b->n_deferred; i++) {
    if (b->deferred[i] == NONE)
      flush_bucket(b, mb, after);
    else
      bucket_grads(b, b->deferred[i], mb, after);
  }
  b->n_deferred = 0;
}

/* Once the stage's backward pass and its last send are done, its
 * gradients go into buckets in the order backward made them, each
 * chunk's closed at its end, and each bucket is reduced as it fills:
 * Megatron-LM's reduction without --overlap-grad-reduce (in
 * finalize_model_grads, after the schedule's last send), DeepSpeed's at
 * the accumulation boundary. */
static void reduce_deferred(builder *b)
{
  /* the last send follows the last compute op when there is one after */
  reduce_listed(b, b->last_send != NONE && b->last_compute != NONE &&
                           b->last_send > b->last_compute
                       ? b->last_send
                       : b->last_compute);
}

/* With tied embeddings split over the pipeline, the first and last stages
 * all-reduce the word-embedding gradients (Megatron's embedding group). */
static void tied_embedding_sync(builder *b)
{
  const vs_layout *lay = b->lay;
  uint64_t bytes, other;
  vs_link link;
  double t;
  uint32_t op;
  if (!b->r->embedding_sync || (b->stage != 0 && b->stage != lay->pp - 1))
    return;
  bytes = b->m->vocab_padded / lay->tp * b->wl->model.hidden *
          lay->grad_elem_bytes;
  other = b->stage == 0 ? lay->pp - 1 : 0;
  link = vs_layout_stage_link(b->topo, lay, b->stage, other);
  link.seen = &b->p->cal_seen;
  t = vs_cost_collective_seconds(VS_COLL_ALL_REDUCE, bytes, 2, link);
  op = new_op(b, b->r->comm[VS_USE_EMBED_SYNC].stream, VS_PHASE_DP_COMM,
              "embedding_all_reduce", -1,
              -1, t, 0.0, (double)bytes);
  add_dep(b, op, b->last_compute);
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
  add_dep(b, op, w->compute);
  if (w->grads != w->compute)
    add_dep(b, op, w->grads);
  if (w->other != w->grads && w->other != w->compute)
    add_dep(b, op, w->other);
}

/* The parameter bytes this GPU's optimizer updates: its partition of the
 * stage's parameters (with ZeRO-1/2 the GPU holds them whole, but steps
 * and sends back only its share, which the all-gather then spreads). */
static uint64_t stepped_param_bytes(const builder *b,
                                    const vs_stage_layout *st)
{
  vs_state_plan share = b->r->params;
  share.degree = b->r->optimizer.degree;
  return vs_recipe_shard(&share, st->params_full_bytes);
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
  uint32_t last = offload_op(b, VS_STREAM_HOST, VS_RES_NVME,
                             "optimizer_swap_in", -1, -1,
                             nvme ? st->nvme.optimizer : 0, NONE);
  bool waited = last != NONE;
  if (waited)
    wait_for_grads(b, last, w);
  last = offload_op(b, VS_STREAM_HOST, VS_RES_CPU, "cpu_optimizer_step", -1,
                    -1, st->step_elems, last);
  if (!waited)
    wait_for_grads(b, last, w); /* the step is the first op (or none) */
  last = offload_op(b, VS_STREAM_HOST, VS_RES_NVME, "optimizer_swap_out", -1,
                    -1, nvme ? st->nvme.optimizer : 0, last);
  if (b->r->params.place == VS_PLACE_NVME)
    return offload_op(b, VS_STREAM_HOST, VS_RES_NVME, "params_swap_out", -1,
                      -1, st->nvme.params, last);
  if (b->r->params.place == VS_PLACE_GPU)
    return offload_op(b, VS_STREAM_H2D, VS_RES_PCIE_SWITCH, "params_to_gpu",
                      -1, -1, stepped_param_bytes(b, st), last);
  return last;
}

/* The optimizer on the GPU; parameters that live off it go back out. */
static uint32_t gpu_step(builder *b, const vs_stage_layout *st,
                         const step_waits *w)
{
  vs_cost_work work = vs_cost_optimizer_work(st);
  op_split t = roofline_split(b, work.flops, work.bytes);
  uint32_t op = compute_op(b, VS_PHASE_OPTIMIZER, "optimizer_step", -1, -1,
                           work.flops, work.bytes, &t);
  wait_for_grads(b, op, w);
  if (b->r->first_step_states && has_step(b, VS_STEP_FIRST)) {
    only_in(b, VS_STEP_FIRST);
    stage_states(b, op, STATE_MOMENTS); /* torch.optim's lazy state init */
    in_every_step(b);
  }
  if (st->step_temp_bytes)
    transient(b, op, st->step_temp_bytes, VS_CAT_TEMP);
  if (b->r->params.place == VS_PLACE_GPU)
    return op;
  op = offload_op(b, VS_STREAM_D2H, VS_RES_PCIE_D2H, "params_to_host", -1, -1,
                  st->params_shard_bytes, op);
  if (b->r->params.place == VS_PLACE_NVME)
    op = offload_op(b, VS_STREAM_HOST, VS_RES_NVME, "params_swap_out", -1, -1,
                    st->params_shard_bytes, op);
  return op;
}

/* ZeRO-1/2: the updated parameters all-gathered once the step (`after`)
 * has ended; with expert groups the routed experts' over the ranks
 * holding them (the expert-data-parallel group), after the dense ones
 * over dp. */
static void gather_updated(builder *b, const vs_stage_layout *st,
                           uint32_t after)
{
  split_comm(b, VS_USE_STEP_GATHER, "zero_param_all_gather",
             VS_COLL_ALL_GATHER, st->params_full_bytes,
             st->expert_params_full_bytes, -1, after);
}

static void optimizer_step(builder *b)
{
  const vs_stage_layout *st = &b->lay->stages[b->stage];
  uint32_t op;
  step_waits w;
  tied_embedding_sync(b);
  w = grads_ready(b);
  if (b->r->step_in_backward)
    return; /* every block stepped in its backward */
  op = b->r->offload.cpu_step ? host_step(b, st, &w) : gpu_step(b, st, &w);
  for (size_t inst = 0; b->r->grads_set_to_none && inst < b->n_inst; inst++)
    free_kept_grads(b, op, inst); /* zero_grad() */
  if (b->r->gather_after_step)
    gather_updated(b, st, op);
}

/* The states and buffers a GPU keeps in place (host or NVMe), allocated
 * with its model states; the buffers count as temp. */
static void setup_off_gpu(builder *b, uint32_t op, const vs_placed_bytes *pb,
                          int place)
{
  alloc_on(b, op, placed_buffer(b, pb->params, VS_CAT_PARAMS, place));
  alloc_on(b, op, placed_buffer(b, pb->grads, VS_CAT_GRADS, place));
  alloc_on(b, op, placed_buffer(b, pb->optimizer, VS_CAT_OPTIMIZER, place));
  alloc_on(b, op, placed_buffer(b, pb->buffers, VS_CAT_TEMP, place));
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
  alloc_on(b, op, new_buffer(b, b->r->grads_set_to_none
                                    ? st->ddp_bucket_bytes
                                    : st->grads_bytes - grads,
                             VS_CAT_GRADS));
  alloc_on(b, op, new_buffer(b, st->optimizer_bytes - optimizer,
                             VS_CAT_OPTIMIZER));
}

/* Stage b->stage's model states: each state one flat buffer, but where
 * the recipe keeps them per tensor (per_tensor_states) one buffer per
 * parameter and per master copy (tensor_states), made with the model.
 * Under first_step_states the steps differ: the first makes the resident
 * gradients and the optimizer states tensor by tensor, the step after it
 * takes them over here, and the only step simulated keeps them flat.
 * Flat buffers for what no tensor accounts for (the FP8 cache). */
static void setup_states(builder *b, uint32_t op, const vs_stage_layout *st)
{
  bool per_tensor = b->r->per_tensor_states;
  bool resident_grads = !b->r->grads_set_to_none;
  uint64_t params = per_tensor ? stage_states(b, op, STATE_PARAMS) : 0;
  uint64_t masters, grads, moments;
  uint32_t after;
  if (!within_state(b, params, st->params_bytes))
    return;
  alloc_on(b, op, new_buffer(b, st->params_bytes - params, VS_CAT_PARAMS));
  masters = per_tensor ? stage_states(b, op, STATE_MASTER) : 0;
  if (!b->r->first_step_states) {
    if (within_state(b, masters, st->optimizer_bytes))
      flat_states(b, op, st, 0, masters);
    return;
  }
  after = has_step(b, VS_STEP_AFTER_FIRST) ? op : NONE; /* else counted */
  only_in(b, VS_STEP_AFTER_FIRST);
  grads = resident_grads ? stage_states(b, after, STATE_GRADS) : 0;
  moments = stage_states(b, after, STATE_MOMENTS);
  in_every_step(b);
  if (!within_state(b, masters + moments, st->optimizer_bytes) ||
      !within_state(b, grads, resident_grads ? st->grads_bytes : 0))
    return;
  for (vs_step s = VS_STEP_ONLY; s <= VS_STEP_AFTER_FIRST; s++) {
    bool only = s == VS_STEP_ONLY;
    if (!has_step(b, s))
      continue;
    only_in(b, s);
    flat_states(b, op, st, only ? 0 : grads, masters + (only ? 0 : moments));
    in_every_step(b);
  }
}

static void setup(builder *b)
{
  uint32_t op = new_op(b, VS_STREAM_COMPUTE, VS_PHASE_SETUP, "model_states", -1,
                       -1, 0.0, 0.0, 0.0);
  const vs_stage_layout *st = &b->lay->stages[b->stage];
  setup_states(b, op, st);
  /* the cuBLAS workspaces the first step's forward and backward
   * allocated, held since (vs_layout.blas_workspaces) */
  for (int i = 0; i < b->lay->blas_workspaces; i++)
    alloc_on(b, op, new_buffer(b, b->lay->blas_workspace_bytes, VS_CAT_TEMP));
  alloc_on(b, op, placed_buffer(b, st->managed_bytes, VS_CAT_OPTIMIZER,
                                VS_PLACE_MANAGED));
  setup_off_gpu(b, op, &st->host, VS_PLACE_HOST);
  setup_off_gpu(b, op, &st->nvme, VS_PLACE_NVME);
}

/* ------------------------------------------------------------------------
 * Entry points
 * ------------------------------------------------------------------------ */

/* A table of n entries (at least one), each NONE. */
static uint32_t *new_table(builder *b, size_t n)
{
  uint32_t *t = malloc((n ? n : 1) * sizeof *t);
  if (!t) {
    b->failed = true;
    vs_error_set(b->err, VS_ENOMEM, "out of host memory building the schedule");
    return NULL;
  }
  for (size_t i = 0; i < n; i++)
    t[i] = NONE;
  return t;
}

static void free_tables(builder *b)
{
  free(b->stage_inst);
  free(b->saved);
  free(b->ckpt_buf);
  free(b->sel_buf);
  free(b->gather_op);
  free(b->gather_buf);
  free(b->flat_buf);
  free(b->grad_buf);
  free(b->grads_kept);
  free(b->tensor_grad);
  free(b->param_base);
  free(b->bucket);
  free(b->deferred);
  free(b->act_host);
  free(b->act_out);
  free(b->act_fetch);
  free(b->cached);
  free(b->op_time);
}

/* op_time's slots, NAN (not computed) each. */
static void new_op_times(builder *b)
{
  size_t n = 0;
  for (uint32_t k = 0; k < b->m->n_kinds; k++) {
    b->kind_first[k] = (uint32_t)n;
    n += b->m->kinds[k].n_ops;
  }
  n *= TIME_PHASES;
  b->op_time = malloc((n ? n : 1) * sizeof *b->op_time);
  if (!b->op_time) {
    b->failed = true;
    vs_error_set(b->err, VS_ENOMEM, "out of host memory building the schedule");
    return;
  }
  for (size_t i = 0; i < n; i++)
    b->op_time[i].s[0] = NAN;
}

/* ------------------------------------------------------------------------
 * Pipeline: units of work, their order, and the sends and receives
 * ------------------------------------------------------------------------ */

/* The shape of the stage's pipeline. */
static vs_pipeline pipeline_of(const builder *b)
{
  return (vs_pipeline){.schedule = b->wl->parallel.schedule,
                       .microbatches = b->lay->grad_accum,
                       .stages = b->lay->pp,
                       .vstages = b->lay->vstages};
}

enum { SEND_ACTIVATION, SEND_GRADIENT };

/* Key of the send of `kind` for micro-batch mb out of model chunk g. */
static uint32_t send_key(const builder *b, int kind, uint64_t mb, uint64_t g)
{
  return (uint32_t)(((uint64_t)kind * b->lay->grad_accum + mb) *
                        b->lay->n_chunks + g);
}

/* Instances (block ids) of model chunk g: [first, last]. */
static void chunk_range(const builder *b, uint64_t g, size_t *first,
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
  chunk_range(b, g, first, last);
  b->unit_first = *first;
  b->unit_last = *last;
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
static void gather_received(builder *b)
{
  vs_comm c = {VS_COLL_ALL_GATHER, VS_GROUP_TP, pipeline_bytes(b)};
  uint32_t whole, op;
  b->gather.due = false;
  op = comm_op(b, &c,
               b->gather.kind == SEND_ACTIVATION ? "gather_activation"
                                                 : "gather_gradient",
               b->gather.layer, b->gather.mb);
  whole = new_buffer(b, c.bytes, VS_CAT_TEMP);
  alloc_on(b, op, whole);
  free_on(b, op, b->recv_buf, AT_END);
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
  uint32_t op = new_op(b, b->r->comm[VS_USE_RECV].stream, VS_PHASE_P2P,
                       kind == SEND_ACTIVATION ? "recv_activation"
                                               : "recv_gradient",
                       -1, (int)mb, 0.0, 0.0, (double)bytes);
  add_dep_on(b, op, send_key(b, kind, mb, from),
             (int32_t)(from % b->lay->pp));
  b->recv_buf = new_buffer(b, bytes, VS_CAT_TEMP);
  alloc_on(b, op, b->recv_buf);
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
  vs_link link = vs_layout_stage_link(b->topo, b->lay, b->stage, to % b->lay->pp);
  double t;
  link.seen = &b->p->cal_seen;
  t = vs_cost_link_seconds(link, (double)bytes);
  uint32_t op = new_op(b, b->r->comm[VS_USE_SEND].stream, VS_PHASE_P2P,
                       kind == SEND_ACTIVATION ? "send_activation"
                                               : "send_gradient",
                       -1, (int)mb, t, 0.0, (double)bytes);
  add_dep(b, op, b->last_compute);
  /* the tensor itself is held until sent (a part is a view of it) */
  if (held == NONE)
    transient(b, op, pipeline_bytes(b), VS_CAT_TEMP);
  else
    free_on(b, op, held, AT_END);
  if (op != NONE)
    b->p->sends[send_key(b, kind, mb, g)] = op;
  b->last_send = op;
  if (b->r->p2p_blocking)
    wait_on(b, op);
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
static bool sends_batched(const builder *b, const vs_pipeline *pl)
{
  return b->r->p2p_blocking && pl->vstages > 1 &&
         vs_pipeline_warmup(pl, b->stage) < pl->microbatches * pl->vstages;
}

/* The forward of micro-batch mb's chunk g (blocks up to inst `last`)
 * will hold its output for the next backward to send: the block's last
 * forward op allocates it (allocate_held_output). */
static void hold_output(builder *b, uint64_t mb, uint64_t g, size_t last)
{
  b->out.held = true;
  b->out.mb = mb;
  b->out.g = g;
  b->out.buf = new_buffer(b, pipeline_bytes(b), VS_CAT_TEMP);
  b->out.made_by = last;
}

/* op (the newest, inst's last forward op) makes the held output. */
static void allocate_held_output(builder *b, size_t inst, uint32_t op)
{
  if (inst != b->out.made_by)
    return;
  alloc_on(b, op, b->out.buf);
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
  const vs_kind_plan *plan = plan_of(b, inst);
  vs_cost_states s = {(double)plan->param_elems,
                      (double)plan->trainable_elems,
                      (double)plan->optimizer_bytes, (double)plan->grad_bytes,
                      (double)plan->param_bytes, 1.0};
  vs_cost_work w = vs_cost_optimizer_step(&s);
  op_split t;
  uint32_t op;
  if (plan->trainable_elems == 0 || b->grad_buf[inst] == NONE)
    return;
  t = roofline_split(b, w.flops, w.bytes);
  op = compute_op(b, VS_PHASE_OPTIMIZER, "optimizer_step", layer_of(inst), -1,
                  w.flops, w.bytes, &t);
  free_on(b, op, b->grad_buf[inst], AT_END);
  b->grad_buf[inst] = NONE;
}

static void forward_unit(builder *b, const vs_unit *u)
{
  uint64_t g = u->chunk * b->lay->pp + b->stage;
  size_t first, last;
  enter_chunk(b, g, &first, &last);
  if (g > 0)
    receive(b, SEND_ACTIVATION, u->mb, g - 1, layer_of(first));
  if (g + 1 < b->lay->n_chunks && output_waits_for_backward(b))
    hold_output(b, u->mb, g, last);
  for (size_t inst = first; inst <= last; inst++)
    forward_block(b, inst, (int)u->mb);
  clear_cache(b);
  if (g + 1 < b->lay->n_chunks && !b->out.held)
    send(b, SEND_ACTIVATION, u->mb, g, g + 1);
}

/* Whether model chunk g runs a backward: a chunk wholly in a frozen
 * prefix (no gradient flows through it) neither receives its output's
 * gradient nor has its input's sent to it. */
static bool chunk_has_backward(const builder *b, uint64_t g)
{
  size_t first, last;
  chunk_range(b, g, &first, &last);
  for (size_t inst = first; inst <= last; inst++)
    if (!plan_of(b, inst)->no_backward)
      return true;
  return false;
}

/* FSDP2's root post-backward, once the whole backward has run (its final
 * callback: the root's inputs, the token ids, need no gradient): the
 * head's and the embedding's gradients, held since they were made, are
 * reduced together. */
static void reduce_root(builder *b, int mb)
{
  flush_bucket(b, mb, b->last_compute);
  bucket_grads(b, b->n_inst - 1, mb, b->last_compute);
  bucket_grads(b, 0, mb, b->last_compute);
}

static void backward_unit(builder *b, const vs_unit *u)
{
  uint64_t g = u->chunk * b->lay->pp + b->stage;
  bool pipelined = b->r->pipelined_fsdp;
  bool sync = (vs_workload_grads_shared(&b->wl->parallel) ||
               b->r->offload.cpu_step) &&
              ((transient_grads(b) && !pipelined) ||
               u->mb + 1 == b->lay->grad_accum);
  bool defer = sync && (b->r->reduce_after_backward || pipelined);
  size_t first, last;
  enter_chunk(b, g, &first, &last);
  if (g + 1 < b->lay->n_chunks && chunk_has_backward(b, g))
    receive(b, SEND_GRADIENT, u->mb, g + 1, layer_of(last));
  for (size_t inst = last + 1; inst-- > first;) {
    backward_block(b, inst, (int)u->mb);
    if (b->r->step_in_backward)
      step_block(b, inst);
    else if (defer)
      defer_grads(b, (uint32_t)inst);
    else if (sync && !in_root_unit(b, inst))
      bucket_grads(b, inst, (int)u->mb, b->last_compute);
  }
  if (sync && !defer && !b->r->step_in_backward && b->r->root_kept)
    reduce_root(b, (int)u->mb);
  if (defer)
    defer_grads(b, NONE);
  else if (sync)
    flush_bucket(b, (int)u->mb, b->last_compute);
  /* pipelined FSDP2: the chunk's post-backward runs as its last backward
   * ends, before its gradient is sent (stage.py backward_one_chunk) */
  if (defer && pipelined)
    reduce_listed(b, b->last_compute);
  release_reduce_inputs(b);
  send_held_output(b);
  if (g > 0 && chunk_has_backward(b, g - 1))
    send(b, SEND_GRADIENT, u->mb, g, g - 1);
}

/* Buffers reserved per op: most ops allocate one or two. */
#define RESERVED_BUFFERS_PER_OP 2

/* Ops of one unit (a chunk's forward or backward of one micro-batch):
 * each layer op with up to 4 collectives, sends and gathers around it,
 * for the chunk's layers and the embedding or head beside them. */
static double ops_per_unit(const vs_layout *lay, const vs_model *m,
                           const vs_recipe *r, uint64_t stage)
{
  double layers = (double)lay->stages[stage].n_layers;
  /* offload adds a partition's fetch (two copies) and a gradient copy,
   * and the activations' copies out and back */
  double offload = (r->offload.cpu_step || r->offload.fetch_params ? 3 : 0) +
                   (r->offload.activations ? 2 : 0);
  double per_block = (double)vs_model_max_layer_ops(m) + 4 + offload;
  double head = (double)vs_model_head(m)->n_ops;
  /* a head with multi-token prediction depths has more ops than a layer */
  return (layers / (double)lay->vstages + 2) * per_block +
         (head > per_block ? head - per_block : 0) + 16;
}

double vs_schedule_estimate_ops(const vs_job *job, int stage)
{
  vs_pipeline pl = {.schedule = job->wl->parallel.schedule,
                    .microbatches = job->layout->grad_accum,
                    .stages = job->layout->pp,
                    .vstages = job->layout->vstages};
  return (double)vs_pipeline_units(&pl) *
             ops_per_unit(job->layout, job->model, job->recipe,
                          (uint64_t)stage) + 64;
}

double vs_schedule_estimate_kinds(const vs_job *job, int stage)
{
  double ops = vs_schedule_estimate_ops(job, stage);
  /* a forward and a backward unit of every chunk, a recompute beside
   * each: what one micro-batch makes, and later ones repeat */
  double once = 3.0 * 2.0 * (double)job->layout->vstages *
                ops_per_unit(job->layout, job->model, job->recipe,
                             (uint64_t)stage);
  return once < ops ? once : ops;
}

size_t vs_schedule_bytes_per_kind(void)
{
  return sizeof(vs_op_kind) + 4 * sizeof(uint32_t); /* index: 2 to 4 slots */
}

/* Host bytes of one reserved op: the op, a dependency, its effects and
 * buffers, and its place in a stream (what reserve_program reserves). */
size_t vs_schedule_bytes_per_op(void)
{
  return sizeof(vs_pop) + sizeof(uint32_t) +
         VS_SCHEDULE_EFFECTS_PER_OP * sizeof(vs_effect) +
         RESERVED_BUFFERS_PER_OP * sizeof(uint32_t) + sizeof(uint32_t);
}

/* Sizes the program's arrays once from vs_schedule_estimate_ops, so
 * building does not reallocate and copy them as they grow. */
static void reserve_program(builder *b, size_t n_units)
{
  vs_program *p = b->p;
  size_t ops = (size_t)((double)n_units *
                            ops_per_unit(b->lay, b->m, b->r, b->stage) + 64);
  grow(b, (void **)&p->ops, &p->cap_ops, ops, sizeof *p->ops);
  grow(b, (void **)&p->deps, &p->cap_deps, ops, sizeof *p->deps);
  grow(b, (void **)&p->effects, &p->cap_effects,
       VS_SCHEDULE_EFFECTS_PER_OP * ops, sizeof *p->effects);
  grow(b, (void **)&p->buffers, &p->cap_buffers,
       RESERVED_BUFFERS_PER_OP * ops, sizeof *p->buffers);
  grow(b, (void **)&p->stream_ops[VS_STREAM_COMPUTE],
       &p->cap_stream_ops[VS_STREAM_COMPUTE], ops, sizeof(uint32_t));
}

/* Marks where unit u (or, with u NULL, the ops after the last unit)
 * begins: the next op and buffer (vs_unit_mark). */
static void mark_unit(builder *b, const vs_unit *u)
{
  vs_program *p = b->p;
  if (!grow(b, (void **)&p->units, &p->cap_units, p->n_units + 1,
            sizeof *p->units))
    return;
  p->units[p->n_units] = (vs_unit_mark){
      .first_op = (uint32_t)p->n_ops,
      .first_buffer = (uint32_t)p->n_buffers,
      .mb = u ? u->mb : UINT32_MAX,
      .chunk = u ? (uint16_t)u->chunk : 0,
      .forward = u && u->forward};
  memcpy(p->units[p->n_units].bound_seconds, p->bound_seconds,
         sizeof p->bound_seconds);
  if (u)
    p->n_units++;
}

/* The end mark and the table from (pass, micro-batch, chunk) to unit. */
static void index_units(builder *b, const vs_pipeline *pl)
{
  vs_program *p = b->p;
  size_t n = 2 * (size_t)pl->microbatches * (size_t)pl->vstages;
  mark_unit(b, NULL);
  if (b->failed ||
      !grow(b, (void **)&p->unit_at, &p->cap_unit_at, n ? n : 1,
            sizeof *p->unit_at))
    return;
  p->unit_mbs = (uint32_t)pl->microbatches;
  p->unit_chunks = (uint32_t)pl->vstages;
  for (size_t i = 0; i < n; i++)
    p->unit_at[i] = NONE;
  for (size_t u = 0; u < p->n_units; u++) {
    const vs_unit_mark *k = &p->units[u];
    p->unit_at[vs_unit_slot(p, k->forward, k->mb, k->chunk)] = (uint32_t)u;
  }
}

static void build_step(builder *b)
{
  vs_pipeline pl = pipeline_of(b);
  size_t n_units = vs_pipeline_units(&pl);
  vs_unit *order = malloc(n_units * sizeof *order);
  vs_program *p = b->p;

  p->n_sends = (size_t)(2 * b->lay->grad_accum * b->lay->n_chunks);
  if (!order || !vs_grow((void **)&p->sends, &p->cap_sends,
                         p->n_sends ? p->n_sends : 1, sizeof *p->sends)) {
    free(order);
    b->failed = true;
    vs_error_set(b->err, VS_ENOMEM, "out of host memory building the schedule");
    return;
  }
  for (size_t i = 0; i < p->n_sends; i++)
    p->sends[i] = NONE;
  n_units = vs_pipeline_order(&pl, b->stage, order);
  b->out.batched = sends_batched(b, &pl);
  b->out.made_by = SIZE_MAX;
  reserve_program(b, n_units);
  setup(b);
  for (size_t i = 0; i < n_units && !b->failed; i++) {
    b->next_unit = i + 1 < n_units ? &order[i + 1] : NULL;
    mark_unit(b, &order[i]);
    (order[i].forward ? forward_unit : backward_unit)(b, &order[i]);
  }
  index_units(b, &pl);
  /* FSDP2: the last copied-out block's flat buffer goes with the pass
   * (freed by the newest op, after its block's backward: effects are
   * appended to the newest op only) */
  if (b->p->n_ops > 0)
    free_on(b, (uint32_t)(b->p->n_ops - 1), b->last_flat, AT_END);
  reduce_deferred(b);
  release_reduce_inputs(b);
  reshard_rest(b);
  optimizer_step(b);
  release_at_step_end(b);
  free(order);
}

int vs_schedule_link(vs_program *progs, size_t n_progs, vs_error *err)
{
  for (size_t s = 0; s < n_progs; s++) {
    vs_program *p = &progs[s];
    for (size_t i = 0; p->dep_stages && i < p->n_deps; i++) {
      int32_t st = p->dep_stages[i];
      uint32_t key = p->deps[i], op;
      if (st < 0)
        continue;
      if ((size_t)st >= n_progs || key >= progs[st].n_sends ||
          (op = progs[st].sends[key]) == NONE)
        return vs_error_set(err, VS_EINPUT,
                            "schedule: stage %zu waits for a send that stage "
                            "%d never makes (key %u)",
                            s, st, key);
      p->deps[i] = op;
      progs[st].ops[op].notify = (uint16_t)(s + 1); /* one consumer per send */
    }
  }
  return 0;
}

int vs_schedule_build(const vs_job *job, int stage, vs_program *prog,
                      vs_error *err)
{
  memset(prog, 0, sizeof *prog);
  return vs_schedule_rebuild(job, stage, prog, err);
}

/* Empties ix, keeping its slots. */
static void empty_index(vs_intern_index *ix)
{
  if (ix->slots)
    memset(ix->slots, 0, ix->cap * sizeof *ix->slots);
}

/* Empties prog but keeps its arrays and their capacities. */
static void clear_program(vs_program *prog)
{
  vs_program kept = *prog;
  memset(prog, 0, sizeof *prog);
  prog->ops = kept.ops;
  prog->cap_ops = kept.cap_ops;
  prog->kinds = kept.kinds;
  prog->cap_kinds = kept.cap_kinds;
  prog->buffer_kinds = kept.buffer_kinds;
  prog->cap_buffer_kinds = kept.cap_buffer_kinds;
  prog->kind_index = kept.kind_index;
  prog->buffer_index = kept.buffer_index;
  empty_index(&prog->kind_index);
  empty_index(&prog->buffer_index);
  prog->deps = kept.deps;
  prog->cap_deps = kept.cap_deps;
  prog->dep_stages = kept.dep_stages;
  prog->cap_dep_stages = kept.cap_dep_stages;
  prog->effects = kept.effects;
  prog->cap_effects = kept.cap_effects;
  prog->buffers = kept.buffers;
  prog->cap_buffers = kept.cap_buffers;
  prog->sends = kept.sends;
  prog->cap_sends = kept.cap_sends;
  prog->units = kept.units;
  prog->cap_units = kept.cap_units;
  prog->unit_at = kept.unit_at;
  prog->cap_unit_at = kept.cap_unit_at;
  for (int s = 0; s < VS_STREAM_N; s++) {
    prog->stream_ops[s] = kept.stream_ops[s];
    prog->cap_stream_ops[s] = kept.cap_stream_ops[s];
  }
}

/* b->stage_inst and n_stage_inst: the blocks of this stage's model
 * chunks, numbered in order; what says which blocks a stage holds (the
 * ring tables hold rows for these alone:
 * a stage of 2 of 107 blocks, 2% of the rows, where filling them all for
 * every stage of a pipeline of 64 was a tenth of a plan's work). */
static void number_stage_insts(builder *b)
{
  b->stage_inst = new_table(b, b->n_inst);
  b->n_stage_inst = 0;
  for (uint64_t g = b->stage; b->stage_inst && g < b->lay->n_chunks;
       g += b->lay->pp) {
    size_t lo, hi;
    chunk_range(b, g, &lo, &hi);
    for (size_t inst = lo; inst <= hi; inst++)
      b->stage_inst[inst] = (uint32_t)b->n_stage_inst++;
  }
  if (b->n_stage_inst == 0)
    b->n_stage_inst = 1; /* a row nobody uses: live's row 0 stays inside */
}

/* A builder for stage of job into prog, with its tables (b->failed when
 * one could not be allocated). */
static void builder_init(builder *b, const vs_job *job, int stage,
                         vs_program *prog, vs_error *err)
{
  size_t n_inst = (size_t)job->model->layers + 2;
  memset(b, 0, sizeof *b);
  b->wl = job->wl;
  b->topo = job->topo;
  b->m = job->model;
  b->r = job->recipe;
  b->lay = job->layout;
  b->p = prog;
  b->err = err;
  b->n_inst = n_inst;
  b->last_compute = NONE;
  b->last_comm = NONE;
  b->last_send = NONE;
  b->grads_done = NONE;
  b->reduce_wait = NONE;
  b->reduce_input = NONE;
  b->released[0] = b->released[1] = NONE;
  b->recv_op = NONE;
  b->recv_buf = NONE;
  b->copy_out = b->flat_done = b->last_flat = NONE;
  b->stage = (uint64_t)stage;
  b->step = job->step;
  b->every_step = job->every_step;
  {
    vs_pipeline pl = pipeline_of(b);
    b->ring = vs_pipeline_ring(&pl);
  }
  b->max_saved = vs_model_max_saved(b->m);
  number_stage_insts(b);
  b->saved = new_table(b, b->ring * b->n_stage_inst *
                              (b->max_saved ? b->max_saved : 1));
  b->ckpt_buf = new_table(b, b->ring * b->n_stage_inst);
  b->sel_buf = new_table(b, n_inst);
  b->gather_op = new_table(b, n_inst);
  b->gather_buf = new_table(b, n_inst);
  b->flat_buf = new_table(b, n_inst);
  b->grad_buf = new_table(b, n_inst);
  b->grads_kept = new_table(b, n_inst);
  b->param_base = new_table(b, n_inst);
  {
    uint32_t params = 0;
    for (size_t inst = 0; b->param_base && inst < n_inst; inst++) {
      b->param_base[inst] = params;
      params += block_of(b, inst)->n_params;
    }
    b->tensor_grad = new_table(b, params ? params : 1);
  }
  b->bucket = new_table(b, n_inst);
  /* every inst once, and one end per chunk */
  b->deferred = new_table(b, n_inst + b->lay->n_chunks);
  b->act_host = new_table(b, b->ring * b->n_stage_inst);
  b->act_out = new_table(b, b->ring * b->n_stage_inst);
  b->act_fetch = new_table(b, n_inst);
  new_op_times(b);
}

int vs_schedule_rebuild(const vs_job *job, int stage, vs_program *prog,
                        vs_error *err)
{
  builder b;

  clear_program(prog);
  prog->stage = stage;
  builder_init(&b, job, stage, prog, err);
  if (!b.failed)
    build_step(&b);
  free_tables(&b);
  if (b.failed) {
    vs_program_fini(prog);
    return err && err->code ? err->code : VS_ENOMEM;
  }
  return 0;
}

void vs_program_fini(vs_program *prog)
{
  free(prog->ops);
  free(prog->kinds);
  free(prog->kind_index.slots);
  free(prog->buffer_kinds);
  free(prog->buffer_index.slots);
  free(prog->deps);
  free(prog->dep_stages);
  free(prog->sends);
  free(prog->units);
  free(prog->unit_at);
  free(prog->effects);
  free(prog->buffers);
  for (int s = 0; s < VS_STREAM_N; s++)
    free(prog->stream_ops[s]);
  memset(prog, 0, sizeof *prog);
}

const char *vs_stream_name(int stream)
{
  switch (stream) {
  case VS_STREAM_COMPUTE:
    return "compute";
  case VS_STREAM_COMM:
    return "comm";
  case VS_STREAM_SEND:
    return "send";
  case VS_STREAM_RECV:
    return "recv";
  case VS_STREAM_D2H:
    return "d2h";
  case VS_STREAM_H2D:
    return "h2d";
  default:
    return "host";
  }
}

const char *vs_phase_name(int phase)
{
  static const char *const names[] = {"setup",   "forward", "backward",
                                      "recompute", "tp_comm", "dp_comm",
                                      "optimizer", "p2p", "offload",
                                      "ep_comm", "cp_comm"};
  return phase >= 0 && phase <= VS_PHASE_CP_COMM ? names[phase] : "?";
}

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
 * forward and again before its backward, prefetching one block ahead.
 *
 * This file holds the program's storage (ops, dependencies, buffers and
 * effects as the builder appends them) and the entry points; the builder's
 * other parts are in schedule_block.c, schedule_grads.c and
 * schedule_pipe.c, sharing schedule_int.h. */
#include "schedule_int.h"

#include "grow.h"
#include "category.h"
#include "resource_kinds.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * Program storage
 * ------------------------------------------------------------------------ */

bool sb_grow(builder *b, void **arr, size_t *cap, size_t need, size_t elem)
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
__attribute__((always_inline)) static inline uint64_t
item_hash(const void *item, size_t elem)
{
  uint64_t h = 0, w;
  for (size_t i = 0; i < elem / sizeof w; i++) {
    memcpy(&w, (const char *)item + i * sizeof w, sizeof w);
    h += (w ^ (w >> 29)) * (0x9e3779b97f4a7c15ull + 2 * i);
  }
  return h;
}

/* Whether the elem bytes (a multiple of 8) at a and b are equal. */
__attribute__((always_inline)) static inline bool
same_words(const void *a, const void *b, size_t elem)
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
 * item. Inlined, with item_hash and same_words, into each caller, whose
 * fixed elem unrolls their loops: a call with elem unknown was 4% of a
 * plan's instructions (callgrind). */
__attribute__((always_inline)) static inline uint32_t
intern(builder *b, vs_intern_index *ix, void **items, size_t *n, size_t *cap,
       const void *item, size_t elem)
{
  size_t at;
  if (2 * (*n + 1) > ix->cap && !grow_index(b, ix, *items, *n, elem))
    return NONE;
  for (at = (size_t)(item_hash(item, elem) >> ix->shift); ix->slots[at];
       at = (at + 1) & (ix->cap - 1))
    if (same_words((const char *)*items + (ix->slots[at] - 1) * elem, item,
                   elem))
      return ix->slots[at] - 1;
  if (!sb_grow(b, items, cap, *n + 1, elem))
    return NONE;
  memcpy((char *)*items + *n * elem, item, elem);
  ix->slots[at] = (uint32_t)++*n;
  return (uint32_t)*n - 1;
}

_Static_assert(sizeof(vs_op_kind) == VS_OP_NAME_MAX + 40 +
                                         VS_BOUND_SPLIT_N * sizeof(double) &&
                   sizeof(vs_buffer) == 16,
               "interned items have no padding, and item_hash reads them in "
               "64-bit words");
_Static_assert(sizeof(vs_pop) == 16, "an op record is 16 bytes");

static uint64_t bits_of(double x)
{
  uint64_t w;
  memcpy(&w, &x, sizeof w);
  return w;
}

/* What an op kind is made from (kind_of): the same op (name, layer,
 * time and work) recurs in every micro-batch, and interning each op's
 * vs_op_kind by its contents (clearing, copying and hashing 56 bytes)
 * was 6% of a plan's instructions (callgrind); this key is hashed as it
 * comes, and only a new key's kind is interned. The name is compared by
 * address: a name must be a literal or the model's (every name is), never
 * a buffer that is rewritten, or a later op would get an earlier op's
 * kind. No padding (interned). */
struct op_key {
  const char *name;
  uint64_t seconds, flops, bytes, max_rate; /* the doubles' bits */
  int32_t layer;
  uint8_t res, via;         /* its resources */
  uint8_t unused[2];        /* zero */
};

_Static_assert(sizeof(op_key) == sizeof(const char *) + 40,
               "op_key has no padding: interned keys are hashed as words");

/* What bounds the whole time of an op priced without a split (c->split
 * NULL), by the resource it goes through (in the key): the host CPU's
 * work; a copy to or from the host or NVMe (PCIe, host memory, NVMe, a
 * copy engine: every offload op has one); else the wire (collectives
 * and pipeline sends, which take no resource or a link's). */
static uint8_t whole_bound(int res)
{
  switch (res) {
  case VS_RES_CPU:
    return VS_BOUND_CPU;
  case VS_RES_PCIE_SWITCH:
  case VS_RES_PCIE_D2H:
  case VS_RES_HOST_MEMORY:
  case VS_RES_NVME:
  case VS_RES_COPY_ENGINE:
    return VS_BOUND_TRANSFER;
  default:
    return VS_BOUND_COMM;
  }
}

/* The interned kind of an op (name, layer, ...) costing c: through its
 * key when an op of the same key was made before, else interned by its
 * contents and its key remembered; NONE when out of memory. The key
 * leaves out the split: the ops of one key do the same work in the same
 * time and are priced alike (the same op of another micro-batch; a
 * frozen layer's backward, one GEMM like its forward, shares the
 * forward's kind). */
static uint32_t kind_of(builder *b, const char *name, int layer,
                        const op_cost *c)
{
  vs_program *p = b->p;
  op_key key = {.name = name,
                .layer = layer,
                .res = (uint8_t)c->res,
                .via = (uint8_t)c->via,
                .seconds = bits_of(c->seconds),
                .flops = bits_of(c->flops),
                .bytes = bits_of(c->bytes),
                .max_rate = bits_of(c->max_rate)};
  size_t known = b->n_keys;
  uint32_t at = intern(b, &b->key_index, (void **)&b->keys, &b->n_keys,
                       &b->cap_keys, &key, sizeof key);
  vs_op_kind k;
  if (at == NONE)
    return NONE;
  if (at < known)
    return b->key_kind[at];
  memset(&k, 0, sizeof k);
  /* names are short: copy up to their end, not the whole field */
  memcpy(k.name, name, strnlen(name, sizeof k.name - 1));
  k.resource = (uint8_t)c->res;
  k.resource_via = (uint8_t)c->via;
  k.bound = whole_bound(c->res);
  k.layer = layer;
  k.dur_ns = to_ns(c->seconds);
  k.flops = c->flops;
  k.bytes = c->bytes;
  k.max_rate = c->max_rate;
  if (c->split)
    memcpy(k.split_s, c->split->s, sizeof k.split_s);
  if (!sb_grow(b, (void **)&b->key_kind, &b->cap_key_kind, b->n_keys,
               sizeof *b->key_kind))
    return NONE;
  return b->key_kind[at] = intern(b, &p->kind_index, (void **)&p->kinds,
                                  &p->n_kinds, &p->cap_kinds, &k, sizeof k);
}

/* Appends an op costing c (its bytes crossing c->res and c->via; 0:
 * none); its deps and effects must be added before the next op. `name`
 * is a literal or the model's, never a rewritten buffer (op_key). An op
 * on the compute stream comes after a due gather of a received part, and
 * waits for what the stream must (sb_stream_waits). */
uint32_t sb_append_op(builder *b, int stream, int phase, const char *name,
                      int layer, int mb, const op_cost *c)
{
  vs_program *p = b->p;
  vs_pop *op;
  uint32_t idx, kind;

  if (stream == VS_STREAM_COMPUTE && b->gather.due)
    sb_gather_received(b);
  if (b->failed || !time_ok(b, name, c->seconds) ||
      !sb_grow(b, (void **)&p->ops, &p->cap_ops, p->n_ops + 1,
               sizeof *p->ops) ||
      !sb_grow(b, (void **)&p->stream_ops[stream], &p->cap_stream_ops[stream],
               p->n_stream_ops[stream] + 1, sizeof(uint32_t)))
    return NONE;
  kind = c->known_kind ? c->known_kind - 1 : kind_of(b, name, layer, c);
  if (kind == NONE)
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
    p->compute_seconds += (double)p->kinds[kind].dur_ns * 1e-9;
    sb_stream_waits(b, idx);
  } else {
    b->last_comm = idx;
  }
  return idx;
}

/* Appends an op whose bytes cross resource `res` (and `via`; 0: none),
 * priced as a whole (sb_append_op). */
uint32_t sb_new_op_through(builder *b, int stream, int phase,
                           const char *name, int layer, int mb,
                           double seconds, double flops, double bytes,
                           int res, int via)
{
  op_cost c = {.seconds = seconds, .flops = flops, .bytes = bytes,
               .res = res, .via = via};
  return sb_append_op(b, stream, phase, name, layer, mb, &c);
}

/* Appends an op that uses no shared resource. */
uint32_t sb_new_op(builder *b, int stream, int phase, const char *name,
                   int layer, int mb, double seconds, double flops,
                   double bytes)
{
  return sb_new_op_through(b, stream, phase, name, layer, mb, seconds, flops,
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
void sb_add_dep_on(builder *b, uint32_t op, uint32_t dep, int32_t stage)
{
  vs_program *p = b->p;
  if (op == NONE || dep == NONE || b->failed || !is_newest(b, op) ||
      !sb_grow(b, (void **)&p->deps, &p->cap_deps, p->n_deps + 1,
               sizeof *p->deps))
    return;
  if (stage >= 0 && !p->dep_stages) {
    p->dep_stages = malloc(p->cap_deps * sizeof *p->dep_stages);
    p->cap_dep_stages = p->cap_deps;
    for (size_t i = 0; p->dep_stages && i < p->n_deps; i++)
      p->dep_stages[i] = -1;
  }
  if (p->dep_stages &&
      !sb_grow(b, (void **)&p->dep_stages, &p->cap_dep_stages, p->n_deps + 1,
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
      !sb_grow(b, (void **)&p->buffers, &p->cap_buffers, p->n_buffers + 1,
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
uint32_t sb_placed_buffer(builder *b, uint64_t bytes, int category,
                          int place)
{
  vs_buffer what = buffer_of(bytes, category, place);
  return add_buffer(b, &what);
}

/* A buffer on the GPU. */
uint32_t sb_new_buffer(builder *b, uint64_t bytes, int category)
{
  return sb_placed_buffer(b, bytes, category, VS_PLACE_GPU);
}

/* A buffer on the GPU made on the stream made_on (vs_made_on). */
uint32_t sb_buffer_made_on(builder *b, uint64_t bytes, int category,
                           int made_on)
{
  vs_buffer what = buffer_of(bytes, category, VS_PLACE_GPU);
  what.made_on = (uint8_t)made_on;
  return add_buffer(b, &what);
}

/* A full-recompute checkpoint (a layer's input) of bytes on the GPU. */
uint32_t sb_checkpoint_buffer(builder *b, uint64_t bytes)
{
  vs_buffer what = buffer_of(bytes, VS_CAT_ACTIVATIONS, VS_PLACE_GPU);
  what.checkpoint = true;
  return add_buffer(b, &what);
}

/* sb_effect where its inline case does not hold: nothing after a
 * failure or with NONE, a schedule bug when op is not the newest, else
 * the effects grown and the effect added by sb_effect. */
void sb_effect_slow(builder *b, uint32_t op, uint32_t buf, effect_time when,
                    bool is_free)
{
  vs_program *p = b->p;
  if (op == NONE || buf == NONE || b->failed || !is_newest(b, op) ||
      !sb_grow(b, (void **)&p->effects, &p->cap_effects, p->n_effects + 1,
               sizeof *p->effects))
    return;
  sb_effect(b, op, buf, when, is_free);
}

/* A buffer that lives exactly as long as op. */
void sb_transient(builder *b, uint32_t op, uint64_t bytes, int category)
{
  uint32_t buf = sb_new_buffer(b, bytes, category);
  sb_alloc_on(b, op, buf);
  sb_free_on(b, op, buf, AT_END);
}

/* op's temporaries of `bytes`, as two tensors when `first` (< bytes) is
 * one PyTorch allocates on its own (vs_op_spec fwd_temp_first). */
void sb_transients(builder *b, uint32_t op, uint64_t bytes,
                   uint64_t first)
{
  if (first > 0 && first < bytes)
    sb_transient(b, op, first, VS_CAT_TEMP);
  sb_transient(b, op, first > 0 && first < bytes ? bytes - first : bytes,
               VS_CAT_TEMP);
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
  free(b->scanned);
  free(b->flat_buf);
  free(b->grad_buf);
  free(b->grads_kept);
  free(b->lp_grads);
  free(b->tensor_grad);
  free(b->param_base);
  free(b->bucket);
  free(b->deferred);
  free(b->act_host);
  free(b->act_out);
  free(b->act_fetch);
  free(b->cached);
  free(b->op_time);
  free(b->kind_memo);
  free(b->keys);
  free(b->key_kind);
  free(b->key_index.slots);
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
  for (uint32_t k = 0; k < b->m->n_kinds; k++)
    if (b->m->kinds[k].n_ops > b->memo_ops)
      b->memo_ops = b->m->kinds[k].n_ops;
  b->kind_memo = new_table(b, b->n_stage_inst * b->memo_ops * TIME_PHASES);
  b->op_time = malloc((n ? n : 1) * sizeof *b->op_time);
  if (!b->op_time) {
    b->failed = true;
    vs_error_set(b->err, VS_ENOMEM, "out of host memory building the schedule");
    return;
  }
  for (size_t i = 0; i < n; i++)
    b->op_time[i].s[0] = NAN;
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
  vs_pipeline pl = sb_pipeline_of(job->wl, job->layout);
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
  /* each with its index's 2 to 4 slots, and the builder's key of it
   * (kind_of: a kind has at least one) with the key's kind and slots */
  return sizeof(vs_op_kind) + 4 * sizeof(uint32_t) + sizeof(op_key) +
         sizeof(uint32_t) + 4 * sizeof(uint32_t);
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
  sb_grow(b, (void **)&p->ops, &p->cap_ops, ops, sizeof *p->ops);
  sb_grow(b, (void **)&p->deps, &p->cap_deps, ops, sizeof *p->deps);
  sb_grow(b, (void **)&p->effects, &p->cap_effects,
          VS_SCHEDULE_EFFECTS_PER_OP * ops, sizeof *p->effects);
  sb_grow(b, (void **)&p->buffers, &p->cap_buffers,
          RESERVED_BUFFERS_PER_OP * ops, sizeof *p->buffers);
  sb_grow(b, (void **)&p->stream_ops[VS_STREAM_COMPUTE],
          &p->cap_stream_ops[VS_STREAM_COMPUTE], ops, sizeof(uint32_t));
}

/* Marks where unit u (or, with u NULL, the ops after the last unit)
 * begins: the next op and buffer (vs_unit_mark). */
static void mark_unit(builder *b, const vs_unit *u)
{
  vs_program *p = b->p;
  if (!sb_grow(b, (void **)&p->units, &p->cap_units, p->n_units + 1,
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
      !sb_grow(b, (void **)&p->unit_at, &p->cap_unit_at, n ? n : 1,
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

/* The program's send table, one NONE slot per pipeline send of the step
 * and per wait of the embedding all-reduce (EMBED_KEYS; false, with the
 * error set, when it could not grow). */
static bool alloc_sends(builder *b)
{
  vs_program *p = b->p;
  p->n_sends = (size_t)(2 * b->lay->grad_accum * b->lay->n_chunks) + EMBED_KEYS;
  if (!vs_grow((void **)&p->sends, &p->cap_sends, p->n_sends ? p->n_sends : 1,
               sizeof *p->sends)) {
    b->failed = true;
    vs_error_set(b->err, VS_ENOMEM, "out of host memory building the schedule");
    return false;
  }
  for (size_t i = 0; i < p->n_sends; i++)
    p->sends[i] = NONE;
  return true;
}

/* The setup, then the stage's units in their order[n_units]. */
static void run_units(builder *b, const vs_unit *order, size_t n_units)
{
  reserve_program(b, n_units);
  sb_setup(b);
  for (size_t i = 0; i < n_units && !b->failed; i++) {
    b->next_unit = i + 1 < n_units ? &order[i + 1] : NULL;
    mark_unit(b, &order[i]);
    (order[i].forward ? sb_forward_unit : sb_backward_unit)(b, &order[i]);
  }
}

/* What follows the last unit: the deferred reductions, resharding, the
 * optimizer step and the buffers released at the step's end. */
static void end_step(builder *b)
{
  sb_make_ipg(b, (int)b->lay->grad_accum - 1, VS_IPG_AT_BOUNDARY);
  sb_reduce_deferred(b);
  sb_release_reduce_inputs(b);
  sb_reshard_rest(b);
  sb_optimizer_step(b);
  sb_release_at_step_end(b);
}

static void build_step(builder *b)
{
  vs_pipeline pl = sb_pipeline_of(b->wl, b->lay);
  size_t n_units = vs_pipeline_units(&pl);
  vs_unit *order = malloc(n_units * sizeof *order);

  if (!order) {
    b->failed = true;
    vs_error_set(b->err, VS_ENOMEM, "out of host memory building the schedule");
    return;
  }
  if (!alloc_sends(b)) {
    free(order);
    return;
  }
  n_units = vs_pipeline_order(&pl, b->stage, order);
  b->out.batched = sb_sends_batched(b, &pl);
  b->out.made_by = SIZE_MAX;
  if (b->first_unit_only && pl.vstages > 1) {
    free(order);
    b->failed = true;
    vs_error_set(b->err, VS_EINPUT,
                 "schedule: the first unit alone is a screen of 1F1B and "
                 "GPipe steps, not of interleaved ones (a caller bug)");
    return;
  }
  if (b->first_unit_only && n_units > 1)
    n_units = 1;
  run_units(b, order, n_units);
  index_units(b, &pl);
  if (!b->first_unit_only)
    end_step(b);
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
      /* one stage to wake per op: a send's consumer, the other end of
         the embedding all-reduce */
      if (progs[st].ops[op].notify && progs[st].ops[op].notify != s + 1)
        return vs_error_set(err, VS_EINPUT,
                            "schedule: stage %d's op %u is waited for by "
                            "stages %d and %zu (a schedule bug)",
                            st, op, progs[st].ops[op].notify - 1, s);
      p->deps[i] = op;
      progs[st].ops[op].notify = (uint16_t)(s + 1);
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
    sb_chunk_range(b, g, &lo, &hi);
    for (size_t inst = lo; inst <= hi; inst++)
      b->stage_inst[inst] = (uint32_t)b->n_stage_inst++;
  }
  if (b->n_stage_inst == 0)
    b->n_stage_inst = 1; /* a row nobody uses: schedule_block.c live's
                            row 0 stays inside */
}

/* A builder for stage of job into prog: its inputs, and nothing made
 * yet (every op and buffer marker NONE). */
static void builder_reset(builder *b, const vs_job *job, int stage,
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
  b->ipg[0] = b->ipg[1] = NONE;
  b->ipg_partition = NONE;
  b->bucket_copied = NONE;
  b->recv_op = NONE;
  b->recv_buf = NONE;
  b->last_flat[0] = b->last_flat[1] = NONE;
  b->stage = (uint64_t)stage;
  b->step = job->step;
  b->every_step = job->every_step;
  b->first_unit_only = job->first_unit_only;
}

/* Each block's first parameter among all the blocks' (param_base), and
 * a row per parameter (tensor_grad). */
static void number_params(builder *b)
{
  uint32_t params = 0;
  b->param_base = new_table(b, b->n_inst);
  for (size_t inst = 0; b->param_base && inst < b->n_inst; inst++) {
    b->param_base[inst] = params;
    params += sb_block_of(b, inst)->n_params;
  }
  b->tensor_grad = new_table(b, params ? params : 1);
}

/* The builder's tables: per block, and per block and micro-batch in
 * flight (ring rows). */
static void alloc_tables(builder *b)
{
  size_t n_inst = b->n_inst;
  vs_pipeline pl = sb_pipeline_of(b->wl, b->lay);
  b->ring = vs_pipeline_ring(&pl);
  b->max_saved = vs_model_max_saved(b->m);
  number_stage_insts(b);
  b->saved = new_table(b, b->ring * b->n_stage_inst *
                              (b->max_saved ? b->max_saved : 1));
  b->ckpt_buf = new_table(b, b->ring * b->n_stage_inst);
  b->sel_buf = new_table(b, n_inst);
  b->gather_op = new_table(b, n_inst);
  b->gather_buf = new_table(b, n_inst);
  b->scanned = new_table(b, n_inst);
  b->flat_buf = new_table(b, n_inst);
  b->grad_buf = new_table(b, n_inst);
  b->grads_kept = new_table(b, n_inst);
  b->lp_grads = new_table(b, n_inst);
  number_params(b);
  b->bucket = new_table(b, n_inst);
  /* every inst once, and one end per chunk */
  b->deferred = new_table(b, n_inst + b->lay->n_chunks);
  b->act_host = new_table(b, b->ring * b->n_stage_inst);
  b->act_out = new_table(b, b->ring * b->n_stage_inst);
  b->act_fetch = new_table(b, n_inst);
  new_op_times(b);
}

/* A builder for stage of job into prog, with its tables (b->failed when
 * one could not be allocated). */
static void builder_init(builder *b, const vs_job *job, int stage,
                         vs_program *prog, vs_error *err)
{
  builder_reset(b, job, stage, prog, err);
  alloc_tables(b);
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

void vs_op_bounds(const vs_program *prog, const vs_pop *op, double seconds,
                  double out[VS_BOUND_N])
{
  const vs_op_kind *k = vs_op_kind_of(prog, op);
  double priced = 0;
  for (int i = 0; i < VS_BOUND_SPLIT_N; i++)
    priced += k->split_s[i];
  for (int i = 0; i < VS_BOUND_N; i++)
    out[i] = priced > 0 && i < VS_BOUND_SPLIT_N
                 ? k->split_s[i] * (seconds / priced)
                 : 0.0;
  if (!(priced > 0))
    out[k->bound] = seconds;
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

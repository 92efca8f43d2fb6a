/* engine.c - event loop over the evq heap (see engine.h). */
#include "engine.h"

#include "evq.h"
#include "grow.h"
#include "steady.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The resource flow slot of a rank's stream. */
#define SLOT(rank_idx, stream) ((size_t)(rank_idx) * VS_STREAM_N + (stream))

typedef struct run_ctx {
  vs_rank *ranks;
  size_t n_ranks;
  size_t per_stage;         /* ranks per pipeline stage */
  const vs_engine_opts *opts;
  vs_evq q;
  vs_error *err;
  vs_res_state res;         /* flows on shared resources */
  bool node_oom;            /* a node's host or NVMe ran out */
  struct node_free *frees;  /* node frees of the instant being run
                               (held_free), applied when time moves on */
  size_t n_frees, cap_frees;
} run_ctx;

/* A free of a node's memory held until the instant it happens at is over
 * (held_free). */
typedef struct node_free {
  uint64_t t_ns;
  uint64_t bytes; /* all the shares' */
  uint32_t node;  /* index into the engine's nodes */
  uint32_t rank;  /* simulated rank whose op made it */
  uint32_t op;
  const vs_buffer *buf;
} node_free;

void vs_node_mem_init(vs_node_mem *n, uint32_t node, uint64_t host_bytes,
                      uint64_t nvme_bytes)
{
  memset(n, 0, sizeof *n);
  n->node = node;
  vs_mem_init(&n->mem[VS_PLACE_HOST], host_bytes, 0);
  vs_mem_init(&n->mem[VS_PLACE_NVME], nvme_bytes, 0);
}

void vs_node_mem_fini(vs_node_mem *n)
{
  free(n->timeline);
  n->timeline = NULL;
  n->n_timeline = n->cap_timeline = 0;
}

/* Appends a change of n's memory of place to its timeline. */
static int record_node_event(vs_node_mem *n, uint64_t t_ns, uint32_t rank,
                             uint32_t op, const vs_buffer *buf, int64_t delta)
{
  vs_node_event *ev;
  if (!vs_grow((void **)&n->timeline, &n->cap_timeline, n->n_timeline + 1,
               sizeof *n->timeline))
    return VS_ENOMEM;
  ev = &n->timeline[n->n_timeline++];
  ev->t_ns = t_ns;
  ev->rank = rank;
  ev->op = op;
  ev->category = buf->category;
  ev->place = buf->place;
  ev->delta_bytes = delta;
  ev->in_use_bytes = n->mem[buf->place].allocated_bytes;
  return 0;
}

bool vs_node_mem_fits(const vs_node_mem *n)
{
  for (int p = VS_PLACE_HOST; p < VS_PLACE_N; p++)
    if (!vs_mem_fits(&n->mem[p]))
      return false;
  return true;
}

void vs_rank_init(vs_rank *rank, uint32_t id, const vs_program *prog,
                  uint64_t capacity_bytes, uint64_t framework_bytes)
{
  memset(rank, 0, sizeof *rank);
  rank->id = id;
  rank->stage = prog->stage;
  rank->prog = prog;
  vs_mem_init(&rank->mem, capacity_bytes, framework_bytes);
  vs_mem_init(&rank->managed, capacity_bytes, 0);
}

void vs_rank_fini(vs_rank *rank)
{
  if (!rank->twin_records) {
    free(rank->timeline);
    free(rank->managed_timeline);
    free(rank->spans);
  }
  rank->twin_records = false;
  rank->timeline = NULL;
  rank->managed_timeline = NULL;
  rank->n_managed_timeline = rank->cap_managed_timeline = 0;
  rank->spans = NULL;
  if (rank->alloc) {
    vs_alloc_fini(rank->alloc);
    free(rank->alloc);
    rank->alloc = NULL;
  }
  free(rank->live_blocks);
  rank->live_blocks = NULL;
  free(rank->lifetimes);
  rank->lifetimes = NULL;
  free(rank->inherited);
  rank->inherited = NULL;
  rank->n_inherited = rank->inherit_from = 0;
}

/* A lifetime note's mark for a freed buffer (the rest: the peak effect it
 * was live at, or 0). */
#define FREED_MARK 0x80000000u

int vs_rank_record_lifetimes(vs_rank *rank)
{
  size_t n = rank->prog->n_buffers;
  if (rank->prog->n_effects >= FREED_MARK)
    return VS_ELIMIT;
  rank->lifetimes = calloc(n ? n : 1, sizeof *rank->lifetimes);
  return rank->lifetimes ? 0 : VS_ENOMEM;
}

bool vs_rank_live_at_peak(const vs_rank *rank, uint32_t buffer)
{
  uint32_t note;
  if (!rank->lifetimes || rank->peak_effect == 0)
    return false;
  note = rank->lifetimes[buffer];
  if (note & FREED_MARK) /* live at that peak, and still the peak? */
    return (note & ~FREED_MARK) == rank->peak_effect;
  return note != 0 && note <= rank->peak_effect; /* never freed */
}

/* Numbers a GPU effect of buffer for r's lifetimes, and notes it as the
 * peak's when allocated memory rose above peak_before with it. A live
 * buffer's note is the effect that allocated it; once freed, the peak
 * effect it was live at (marked FREED_MARK), which stays the answer only
 * if no later effect raises the peak (then the buffer, freed before, is
 * not live at the new one): 4 bytes a buffer, not both numbers. */
static void note_lifetime(vs_rank *r, const vs_effect *e, uint64_t peak_before)
{
  uint32_t n = ++r->gpu_effects; /* < 2^31: vs_rank_record_lifetimes */
  uint32_t *note = &r->lifetimes[e->buffer];
  if (e->is_free)
    *note = FREED_MARK | (*note != 0 && *note <= r->peak_effect
                              ? r->peak_effect
                              : 0);
  else
    *note = n;
  if (r->mem.peak_allocated_bytes > peak_before)
    r->peak_effect = n;
}

int vs_rank_use_caching(vs_rank *rank, const vs_alloc_config *cfg)
{
  size_t n = rank->prog->n_buffers;
  rank->alloc = malloc(sizeof *rank->alloc);
  if (rank->alloc)
    vs_alloc_init(rank->alloc, cfg); /* before anything can fail:
                                        vs_rank_fini finishes it */
  rank->live_blocks = malloc((n ? n : 1) * sizeof *rank->live_blocks);
  if (!rank->alloc || !rank->live_blocks)
    return VS_ENOMEM;
  for (size_t i = 0; i < n; i++)
    rank->live_blocks[i] = VS_ALLOC_NONE;
  return 0;
}

int vs_rank_inherit(vs_rank *to, const vs_rank *from)
{
  const vs_program *p = from->prog;
  vs_alloc *copy;
  size_t n = 0;
  if (!to->alloc || !from->alloc)
    return VS_EINPUT;
  for (size_t b = 0; b < p->n_buffers; b++)
    n += from->live_blocks[b] != VS_ALLOC_NONE;
  copy = malloc(sizeof *copy);
  to->inherited = malloc((n ? n : 1) * sizeof *to->inherited);
  if (!copy || !to->inherited || vs_alloc_clone(copy, from->alloc)) {
    free(copy);
    return VS_ENOMEM;
  }
  vs_alloc_fini(to->alloc);
  free(to->alloc);
  to->alloc = copy;
  vs_alloc_reset_peaks(copy); /* the step's own peaks, as
                                 torch.cuda.reset_peak_memory_stats() */
  to->n_inherited = to->inherit_from = 0;
  for (size_t b = 0; b < p->n_buffers; b++) {
    const vs_buffer *buf = vs_program_buffer(p, (uint32_t)b);
    if (from->live_blocks[b] == VS_ALLOC_NONE)
      continue;
    to->inherited[to->n_inherited++] = (vs_inherited){
        buf->bytes, buf->category, from->live_blocks[b]};
  }
  return 0;
}

/* The block of an inherited buffer of buf's category and bytes for op 0
 * of r to take over (vs_rank_inherit): VS_ALLOC_NONE when there is none. */
static uint32_t take_inherited(vs_rank *r, const vs_buffer *buf)
{
  for (size_t i = r->inherit_from; i < r->n_inherited; i++) {
    vs_inherited *h = &r->inherited[i];
    if (h->bytes != buf->bytes || h->category != buf->category)
      continue;
    h->bytes = 0;
    while (r->inherit_from < r->n_inherited &&
           r->inherited[r->inherit_from].bytes == 0)
      r->inherit_from++;
    return h->block;
  }
  return VS_ALLOC_NONE;
}

_Static_assert(VS_STREAM_N + VS_MADE_ON_N - 1 <= VS_ALLOC_STREAMS,
               "every stream a buffer is made on has a pool of its own");

/* One allocation or free through the rank's caching allocator (op 0 of a
 * rank with an inherited cache takes its blocks over), from the pool of
 * `stream` (vs_buffer_pool). Returns the bytes it counts (the block size)
 * in *bytes. */
static int caching_effect(vs_rank *r, const vs_effect *e, const vs_buffer *buf,
                          int stream, uint32_t op, uint64_t t_ns,
                          uint64_t *bytes)
{
  vs_alloc *a = r->alloc;
  int rc;
  if (e->is_free) {
    uint32_t block = r->live_blocks[e->buffer];
    if (block == VS_ALLOC_NONE)
      return VS_EINPUT;
    r->live_blocks[e->buffer] = VS_ALLOC_NONE;
    *bytes = a->blocks[block].size;
    if ((rc = vs_alloc_free(a, block)))
      return rc;
    return vs_mem_record_free(&r->mem, buf->category, *bytes, buf->bytes,
                              a->reserved_bytes);
  } else {
    vs_alloc_result res = {.block = VS_ALLOC_NONE};
    if (op == 0 && r->inherited) {
      if ((res.block = take_inherited(r, buf)) == VS_ALLOC_NONE)
        return VS_EINPUT;
      res.size = a->blocks[res.block].size;
    } else if ((rc = vs_alloc_malloc(a, buf->bytes, stream, &res))) {
      return rc;
    }
    r->live_blocks[e->buffer] = res.block;
    *bytes = res.size;
    return vs_mem_record_alloc(&r->mem, buf->category, res.size, buf->bytes,
                               a->reserved_bytes, res.oom, op, t_ns);
  }
}

/* Appends ev to the array *list of *n events (room for *cap). */
static int push_event(vs_mem_event **list, size_t *n, size_t *cap,
                      vs_mem_event ev)
{
  if (!vs_grow((void **)list, cap, *n + 1, sizeof **list))
    return VS_ENOMEM;
  (*list)[(*n)++] = ev;
  return 0;
}

/* Appends a change of r's GPU memory to its timeline. */
static int record_event(vs_rank *r, uint64_t t_ns, uint32_t op, int category,
                        int64_t delta)
{
  return push_event(&r->timeline, &r->n_timeline, &r->cap_timeline,
                    (vs_mem_event){.t_ns = t_ns,
                                   .op = op,
                                   .category = category,
                                   .delta_bytes = delta,
                                   .allocated_bytes = r->mem.allocated_bytes,
                                   .reserved_bytes = r->mem.reserved_bytes});
}

/* Appends a change of r's managed memory to its managed timeline. */
static int record_managed(vs_rank *r, uint64_t t_ns, uint32_t op, int category,
                          int64_t delta)
{
  return push_event(
      &r->managed_timeline, &r->n_managed_timeline, &r->cap_managed_timeline,
      (vs_mem_event){.t_ns = t_ns,
                     .op = op,
                     .category = category,
                     .delta_bytes = delta,
                     .allocated_bytes = r->managed.allocated_bytes});
}

static int record_span(vs_rank *r, uint32_t op, uint64_t start, uint64_t end)
{
  if (!vs_grow((void **)&r->spans, &r->cap_spans, r->n_spans + 1,
               sizeof *r->spans))
    return VS_ENOMEM;
  r->spans[r->n_spans].op = op;
  r->spans[r->n_spans].start_ns = start;
  r->spans[r->n_spans].end_ns = end;
  r->n_spans++;
  return 0;
}

/* Applies a held free f to its node's memory (and timeline). */
static int apply_node_free(run_ctx *c, const node_free *f)
{
  vs_node_mem *n = &c->opts->nodes[f->node];
  int rc = vs_mem_free(&n->mem[f->buf->place], f->buf->category, f->bytes);
  if (rc == 0 && c->opts->record_timeline)
    rc = record_node_event(n, f->t_ns, f->rank, f->op, f->buf,
                           -(int64_t)f->bytes);
  return rc;
}

/* Applies the node frees held for the instant that is over (held_free). */
static int release_held_frees(run_ctx *c)
{
  int rc = 0;
  for (size_t i = 0; i < c->n_frees && !rc; i++)
    rc = apply_node_free(c, &c->frees[i]);
  c->n_frees = 0;
  if (rc)
    return vs_error_set(c->err, rc,
                        "engine: a node's host or NVMe memory freed more "
                        "than it held (schedule bug)");
  return 0;
}

/* Holds a free of a node's memory until the instant t_ns is over. The
 * GPUs of a node are processes that do not run in lockstep: what they
 * allocate and free at one simulated instant may come in any order, so
 * the node counts every allocation of the instant before its frees (the
 * order that needs the most), whichever GPU makes them and whether one
 * rank stands for them all (stage mode, a share's weight) or each runs
 * (--ranks all). */
static int held_free(run_ctx *c, const node_free *f)
{
  if (!vs_grow((void **)&c->frees, &c->cap_frees, c->n_frees + 1,
               sizeof *c->frees))
    return VS_ENOMEM;
  c->frees[c->n_frees++] = *f;
  return 0;
}

/* An allocation or free of buf (off the GPU) on every node rank has a
 * share of, `weight` times there; a free waits for the instant to be over
 * (held_free). */
static int node_effect(run_ctx *c, vs_rank *r, const vs_effect *e,
                       const vs_buffer *buf, uint32_t op, uint64_t t_ns)
{
  if (r->n_shares == 0 || buf->place >= VS_PLACE_N)
    return VS_EINPUT;
  for (uint32_t i = 0; i < r->n_shares; i++) {
    vs_node_mem *n = &c->opts->nodes[r->shares[i].node];
    vs_mem *m = &n->mem[buf->place];
    bool was_oom = m->oom.happened;
    uint64_t bytes;
    int rc;
    if (__builtin_mul_overflow(buf->bytes, (uint64_t)r->shares[i].weight,
                               &bytes))
      return VS_ELIMIT;
    if (e->is_free) {
      node_free f = {.t_ns = t_ns,
                     .bytes = bytes,
                     .node = r->shares[i].node,
                     .rank = (uint32_t)(r - c->ranks),
                     .op = op,
                     .buf = buf};
      if ((rc = held_free(c, &f)))
        return rc;
      continue;
    }
    rc = vs_mem_alloc(m, buf->category, bytes, op, t_ns);
    if (rc == 0 && c->opts->record_timeline)
      rc = record_node_event(n, t_ns, (uint32_t)(r - c->ranks), op, buf,
                             (int64_t)bytes);
    if (rc)
      return rc;
    if (m->oom.happened && !was_oom) {
      n->oom_rank[buf->place] = r->id;
      c->node_oom = true;
    }
  }
  return 0;
}

/* Which end of an op its effects happen at. */
typedef enum { OP_START, OP_END } op_edge;

/* Applies the effects of op that happen at its `edge`. */
static int apply_effects(run_ctx *c, vs_rank *r, uint32_t idx, op_edge edge,
                         uint64_t t_ns)
{
  const vs_program *p = r->prog;
  const vs_pop *op = &p->ops[idx];
  for (uint32_t i = op->first_effect, end = vs_op_effects_end(p, op); i < end;
       i++) {
    const vs_effect *e = &p->effects[i];
    const vs_buffer *buf;
    int rc;
    uint64_t bytes, peak_before;
    if ((bool)e->at_end != (edge == OP_END) ||
        !vs_effect_applies(e, r->step))
      continue;
    buf = vs_program_buffer(p, e->buffer);
    bytes = buf->bytes;
    peak_before = r->mem.peak_allocated_bytes;
    if (buf->place == VS_PLACE_MANAGED)
      rc = e->is_free ? vs_mem_free(&r->managed, buf->category, buf->bytes)
                      : vs_mem_alloc(&r->managed, buf->category, buf->bytes,
                                     idx, t_ns);
    else if (buf->place != VS_PLACE_GPU)
      rc = node_effect(c, r, e, buf, idx, t_ns);
    else if (r->alloc)
      rc = caching_effect(r, e, buf, vs_buffer_pool(buf, op->stream), idx, t_ns,
                          &bytes);
    else if (e->is_free)
      rc = vs_mem_free(&r->mem, buf->category, buf->bytes);
    else
      rc = vs_mem_alloc(&r->mem, buf->category, buf->bytes, idx, t_ns);
    if (rc)
      return vs_error_set(c->err, rc,
                          "engine: rank %u op %u (%s) %s %llu bytes of %s "
                          "(%s) failed (schedule bug or counter overflow)",
                          r->id, idx, vs_op_name(p, op),
                          e->is_free ? "free" : "alloc",
                          (unsigned long long)buf->bytes,
                          vs_category_name(buf->category),
                          vs_place_name(buf->place));
    if (buf->place == VS_PLACE_MANAGED && c->opts->record_timeline &&
        record_managed(r, t_ns, idx, buf->category,
                       e->is_free ? -(int64_t)bytes : (int64_t)bytes))
      return vs_error_set(c->err, VS_ENOMEM,
                          "out of host memory recording "
                          "the managed memory timeline");
    if (buf->place != VS_PLACE_GPU)
      continue; /* the timeline is the GPU's */
    if (r->lifetimes)
      note_lifetime(r, e, peak_before);
    if (c->opts->record_timeline &&
        record_event(r, t_ns, idx, buf->category,
                     e->is_free ? -(int64_t)bytes : (int64_t)bytes))
      return vs_error_set(c->err, VS_ENOMEM, "out of host memory recording "
                                             "the memory timeline");
    if (c->opts->check_invariants &&
        (vs_mem_check(&r->mem, c->err) ||
         (r->alloc && vs_alloc_check(r->alloc, c->err))))
      return VS_EINPUT;
  }
  return 0;
}

/* Whether the next op of r's stream `stream` still waits for the
 * dependency ready() noted (r->waits) when it last found the op not
 * ready: known without reading the op or its dependencies, as most of a
 * step a stream's next op waits for a later micro-batch or the step's
 * end. */
static inline bool still_waits(const run_ctx *c, const vs_rank *r,
                               int stream)
{
  const vs_stream_wait *w = &r->waits[stream];
  return w->ended && c->ranks[w->rank].done[w->stream] < w->ended;
}

/* True when every dependency of op, the next of r's stream `stream`, has
 * ended: on this rank, or on the rank of another stage in the same slot.
 * A stream runs its ops in program order and ends them in that order, so
 * a dependency on stream s has ended once the last op s ended (its
 * done[s]-th) is it or a later one. The first one found not ended is
 * noted for still_waits; when it is another stage's, op is ready on r (an
 * op lists its own stage's dependencies first, vs_program deps) and from
 * t_ns, unless it waited already, waits for that stage (r->joined). */
static bool ready(const run_ctx *c, vs_rank *r, int stream, const vs_pop *op,
                  uint64_t t_ns)
{
  const vs_program *p = r->prog;
  vs_stream_wait *w = &r->waits[stream];
  for (uint32_t d = op->first_dep, end = vs_op_deps_end(p, op); d < end; d++) {
    uint32_t idx = p->deps[d];
    const vs_rank *owner = r;
    size_t s, ended;
    if (p->dep_stages && p->dep_stages[d] >= 0)
      owner = &c->ranks[(size_t)p->dep_stages[d] * c->per_stage + r->slot];
    s = owner->prog->ops[idx].stream;
    ended = owner->done[s];
    if (ended == 0 || owner->prog->stream_ops[s][ended - 1] < idx) {
      *w = (vs_stream_wait){
          .rank = (uint32_t)(owner - c->ranks), .stream = (uint32_t)s,
          .ended = vs_stream_place(owner->prog, (int)s, idx) + 1};
      if (owner != r && !r->joined[stream].open)
        r->joined[stream] = (vs_join_wait){t_ns, t_ns, true};
      return false;
    }
  }
  w->ended = 0; /* it starts now: the stream's next op has its own */
  return true;
}

/* Starts op idx of rank rank_idx on its resource at t_ns, with a span
 * whose end comes when the op ends. Kept out of start_ready, whose ops
 * without a resource are the hot path. */
static int start_resource(run_ctx *c, uint32_t rank_idx, uint32_t idx,
                          uint64_t t_ns)
{
  vs_rank *r = &c->ranks[rank_idx];
  const vs_pop *op = &r->prog->ops[idx];
  const vs_op_kind *k = vs_op_kind_of(r->prog, op);
  vs_res_op ro = {
      .rank = rank_idx,
      .op = idx,
      .gpu = r->id,
      .kind = k->resource,
      .via = k->resource_via,
      .bytes = k->bytes,
      .max_bytes_per_s = k->max_rate,
      .fixed_ns = k->dur_ns,
      .tag = r->n_spans,
      .users = {r->res_users[k->resource], r->res_users[k->resource_via]}};
  int rc;
  if (c->opts->record_spans && record_span(r, idx, t_ns, t_ns + k->dur_ns))
    return vs_error_set(c->err, VS_ENOMEM, "out of host memory recording ops");
  rc = vs_res_start(&c->res, &c->q, SLOT(rank_idx, op->stream), &ro, t_ns);
  if (rc == VS_ENOMEM)
    return vs_error_set(c->err, rc, "out of host memory: resource sharing");
  if (rc)
    return vs_error_set(c->err, rc,
                        "engine: rank %u op %u (%s) moves %g bytes through "
                        "resource %u (%s), %s",
                        r->id, idx, k->name, k->bytes, k->resource,
                        vs_resource_name(k->resource)
                            ? vs_resource_name(k->resource)
                            : "unknown",
                        !vs_res_available(&c->res, k->resource)
                            ? "which the topology does not describe"
                        : !(k->bytes >= 0 && k->bytes < HUGE_VAL)
                            ? "a count that is negative or not finite"
                            : "which would take more than 2^63 ns");
  return 0;
}

/* Charges the idle time of r's compute stream up to t_ns, when its next
 * op starts, to what it waited for: the op whose end made the call, of
 * phase `cause` (pipeline, data-parallel communication or an offload
 * copy), except the part of its idle time in which that op, ready on r,
 * waited for another stage (`joined`, NULL: none), which is a wait on the
 * pipeline. */
static void count_idle(vs_rank *r, uint64_t t_ns, int cause,
                       const vs_join_wait *joined)
{
  uint64_t since = r->idle_since[VS_STREAM_COMPUTE];
  uint64_t idle = t_ns - since, peer = 0;
  if (cause == VS_PHASE_P2P) {
    r->wait_p2p_ns += idle;
    return;
  }
  if (joined && joined->to_ns > since) /* it started before t_ns */
    peer = joined->to_ns - (joined->from_ns > since ? joined->from_ns : since);
  r->wait_p2p_ns += peer;
  if (cause == VS_PHASE_OFFLOAD)
    r->wait_offload_ns += idle - peer;
  else
    r->wait_comm_ns += idle - peer;
}

/* Starts whatever can start on rank r at t_ns. `cause` is the phase of the
 * op whose end made this call, `joined` its wait for another stage (NULL:
 * the call is not an op's end on r): a compute stream that idled until
 * now was waiting for it (count_idle). */
static int start_ready(run_ctx *c, uint32_t rank_idx, uint64_t t_ns, int cause,
                       const vs_join_wait *joined)
{
  vs_rank *r = &c->ranks[rank_idx];
  const vs_program *p = r->prog;
  for (int s = 0; s < VS_STREAM_N; s++) {
    uint32_t idx;
    const vs_pop *op;
    const vs_op_kind *k;
    int rc;
    if (r->busy[s] || r->next[s] == p->n_stream_ops[s] || still_waits(c, r, s))
      continue;
    idx = p->stream_ops[s][r->next[s]];
    op = &p->ops[idx];
    if (!ready(c, r, s, op, t_ns))
      continue;
    if (s == VS_STREAM_COMPUTE && t_ns > r->idle_since[s])
      count_idle(r, t_ns, cause, joined);
    if (!r->joined[s].open) /* it did not wait for another stage */
      r->joined[s].from_ns = t_ns;
    r->joined[s].to_ns = t_ns;
    r->joined[s].open = false;
    r->busy[s] = true;
    r->next[s]++;
    if ((rc = apply_effects(c, r, idx, OP_START, t_ns)))
      return rc;
    k = vs_op_kind_of(p, op);
    if (k->resource) { /* its end is decided while it runs */
      if ((rc = start_resource(c, rank_idx, idx, t_ns)))
        return rc;
      continue;
    }
    if (c->opts->record_spans && record_span(r, idx, t_ns, t_ns + k->dur_ns))
      return vs_error_set(c->err, VS_ENOMEM, "out of host memory recording ops");
    if (vs_evq_push(&c->q, t_ns + k->dur_ns, rank_idx, idx))
      return vs_error_set(c->err, VS_ENOMEM, "out of host memory: event queue");
  }
  return 0;
}

/* The popped event ev of a resource op: the end of its wait (its transfer
 * begins; *ended = false) or of its transfer (its span gets the end). */
static int resource_event(run_ctx *c, const vs_event *ev, bool *ended)
{
  vs_rank *r = &c->ranks[ev->rank];
  const vs_pop *op = &r->prog->ops[ev->op];
  const vs_op_kind *k = vs_op_kind_of(r->prog, op);
  uint64_t span = 0;
  int rc = vs_res_event(&c->res, &c->q, SLOT(ev->rank, op->stream), ev->t_ns,
                        ended, &span);
  if (rc)
    return vs_error_set(c->err, rc,
                        "engine: rank %u op %u (%s) on resource %s: %s", r->id,
                        ev->op, k->name, vs_resource_name(k->resource),
                        rc == VS_ENOMEM ? "out of host memory"
                                        : "a time would pass 2^63 ns");
  if (*ended && c->opts->record_spans && span < r->n_spans)
    r->spans[span].end_ns = ev->t_ns;
  return 0;
}

/* The step's tail, after the compute stream's last op: each stretch up to
 * an op's end is charged to that op (the ops that end last are the ones
 * the step waited for), the offload ones counted here. */
static void account_tail(vs_rank *r, const vs_pop *op, uint64_t t_ns)
{
  const vs_program *p = r->prog;
  bool compute_done = r->done[VS_STREAM_COMPUTE] ==
                      p->n_stream_ops[VS_STREAM_COMPUTE];
  if (op->stream == VS_STREAM_COMPUTE) {
    if (r->done[VS_STREAM_COMPUTE] + 1 == p->n_stream_ops[VS_STREAM_COMPUTE])
      r->tail_mark_ns = t_ns; /* this is the last one */
    return;
  }
  if (!compute_done || t_ns <= r->tail_mark_ns)
    return;
  if (op->phase == VS_PHASE_OFFLOAD) {
    if (vs_op_kind_of(p, op)->resource == VS_RES_CPU)
      r->tail_cpu_ns += t_ns - r->tail_mark_ns;
    else
      r->tail_copy_ns += t_ns - r->tail_mark_ns;
  }
  r->tail_mark_ns = t_ns;
}

/* Ends the op of ev (counting it in stats), then starts what it allowed. */
static int finish(run_ctx *c, const vs_event *ev, vs_engine_stats *stats)
{
  vs_rank *r = &c->ranks[ev->rank];
  const vs_pop *op = &r->prog->ops[ev->op];
  vs_join_wait joined = r->joined[op->stream]; /* before its next starts */
  int rc;
  if (vs_op_kind_of(r->prog, op)->resource) {
    bool ended;
    if ((rc = resource_event(c, ev, &ended)) || !ended)
      return rc;
  }
  stats->events++;
  if (ev->t_ns > stats->end_ns)
    stats->end_ns = ev->t_ns;
  account_tail(r, op, ev->t_ns);
  r->busy[op->stream] = false;
  r->done[op->stream]++;
  r->idle_since[op->stream] = ev->t_ns;
  if (ev->t_ns > r->end_ns)
    r->end_ns = ev->t_ns;
  if ((rc = apply_effects(c, r, ev->op, OP_END, ev->t_ns)) ||
      (rc = start_ready(c, ev->rank, ev->t_ns, op->phase, &joined)))
    return rc;
  if (op->notify) /* wake this slot's rank on the stage waiting for it */
    rc = start_ready(
        c, (uint32_t)((size_t)(op->notify - 1) * c->per_stage + r->slot),
        ev->t_ns, VS_PHASE_P2P, NULL);
  return rc;
}

static int check_finished(run_ctx *c, size_t n_ranks)
{
  for (size_t i = 0; i < n_ranks; i++) {
    const vs_rank *r = &c->ranks[i];
    if (r->inherit_from < r->n_inherited)
      return vs_error_set(c->err, VS_EINPUT,
                          "engine: rank %u's setup left buffers of its "
                          "inherited cache untaken (%zu held; schedule bug)",
                          r->id, r->n_inherited);
    for (int s = 0; s < VS_STREAM_N; s++) {
      if (r->done[s] != r->prog->n_stream_ops[s]) {
        const vs_pop *op = &r->prog->ops[r->prog->stream_ops[s][r->next[s]]];
        return vs_error_set(c->err, VS_EINPUT,
                            "engine: rank %u deadlocked: stream %s waits at op "
                            "'%s' (layer %d, micro-batch %d)",
                            r->id, vs_stream_name(s),
                            vs_op_name(r->prog, op), vs_op_layer(r->prog, op),
                            op->microbatch);
      }
    }
  }
  return 0;
}

/* Whether ranks a and b start alike: the same program on the same GPU
 * (capacity, framework bytes, allocator and its settings), nothing run
 * yet, and the same things noted. An inherited cache (vs_rank_inherit)
 * is not compared: ranks inherit from a run of the same layout, whose
 * slots started alike exactly when these do, so twins inherit copies of
 * one run (vs_sim_run's first step). */
static bool same_start(const vs_rank *a, const vs_rank *b)
{
  const vs_alloc_config *x = a->alloc ? &a->alloc->cfg : NULL,
                        *y = b->alloc ? &b->alloc->cfg : NULL;
  if (a->prog != b->prog || a->step != b->step ||
      a->mem.capacity_bytes != b->mem.capacity_bytes ||
      a->mem.by_cat[VS_CAT_FRAMEWORK] != b->mem.by_cat[VS_CAT_FRAMEWORK] ||
      a->managed.capacity_bytes != b->managed.capacity_bytes ||
      !a->lifetimes != !b->lifetimes || !x != !y)
    return false;
  return !x || (x->capacity_bytes == y->capacity_bytes &&
                x->outside_bytes == y->outside_bytes &&
                x->expandable_segments == y->expandable_segments &&
                x->max_split_bytes == y->max_split_bytes &&
                x->roundup_power2_divisions == y->roundup_power2_divisions);
}

/* Whether each slot runs on its own, so that two slots whose ranks start
 * alike (slots_alike) have the same run: ranks meet only their pipeline
 * peers of the same slot (ready, finish), and events of different slots
 * never compare with each other's, so that a slot run alone runs as it
 * does among the others. Not when ranks share something across slots: a
 * resource (a PCIe switch, the host's memory bandwidth) or a node's host
 * and NVMe memory; nor with stop_at_oom, which stops every rank at the
 * first out-of-memory in time. */
static bool slots_independent(const run_ctx *c)
{
  if (c->per_stage < 2 || c->opts->stop_at_oom)
    return false;
  for (size_t i = 0; i < c->n_ranks; i++)
    if (c->ranks[i].n_shares || c->ranks[i].slot != i % c->per_stage)
      return false;
  for (size_t i = 0; i < c->n_ranks; i += c->per_stage) {
    const vs_program *p = c->ranks[i].prog; /* its stage's */
    for (size_t k = 0; k < p->n_kinds; k++)
      if (p->kinds[k].resource)
        return false;
  }
  return true;
}

/* Runs events until none is left, or until the first out-of-memory with
 * stop_at_oom. */
static int drain(run_ctx *c, vs_engine_stats *stats)
{
  vs_event ev;
  int rc = 0;
  while (!rc && vs_evq_pop(&c->q, &ev)) {
    if (c->opts->stop_at_oom &&
        (c->ranks[ev.rank].mem.oom.happened || c->node_oom)) {
      stats->stopped = true;
      break;
    }
    if (c->n_frees && ev.t_ns > c->frees[0].t_ns &&
        (rc = release_held_frees(c)))
      break;
    rc = finish(c, &ev, stats);
    /* a snapshot holds no node free back: it waits for an event after
       them (one taken later than its round's start matches no other and
       proves nothing, as the proof needs) */
    if (!rc && c->opts->steady && c->n_frees == 0 &&
        vs_steady_due(c->opts->steady, c->ranks))
      vs_steady_watch(c->opts->steady, c->ranks, &c->q, &c->res, ev.t_ns,
                      stats->events);
  }
  return rc ? rc : release_held_frees(c);
}

/* Gives `to` (a rank of from's stage in another slot, which has not run)
 * a copy of from's run: its counters and memory, its own copies of
 * from's allocator and notes, and from's timeline and spans themselves
 * (twin_records: what it records is what from records, so thousands of
 * copies cost no more host memory than one; from outlives it, both being
 * the caller's ranks). Its identity stays. VS_ENOMEM. */
static int take_twin_run(vs_rank *to, const vs_rank *from)
{
  uint32_t id = to->id, slot = to->slot;
  int dp_rank = to->dp_rank, tp_rank = to->tp_rank, cp_rank = to->cp_rank;
  size_t n_buffers = from->prog->n_buffers;
  bool ok = true;
  vs_rank_fini(to);
  *to = *from;
  to->id = id;
  to->slot = slot;
  to->dp_rank = dp_rank;
  to->tp_rank = tp_rank;
  to->cp_rank = cp_rank;
  to->twin_records = true;
  to->cap_timeline = from->n_timeline;
  to->cap_managed_timeline = from->n_managed_timeline;
  to->cap_spans = from->n_spans;
  to->live_blocks = from->live_blocks
                        ? vs_dup_array(from->live_blocks, n_buffers,
                                       sizeof *from->live_blocks, &ok)
                        : NULL;
  to->lifetimes = from->lifetimes
                      ? vs_dup_array(from->lifetimes, n_buffers,
                                     sizeof *from->lifetimes, &ok)
                      : NULL;
  to->inherited = NULL; /* taken over already: nothing left to take */
  to->n_inherited = to->inherit_from = 0;
  to->alloc = NULL;
  if (ok && from->alloc && (to->alloc = malloc(sizeof *to->alloc)) &&
      vs_alloc_clone(to->alloc, from->alloc)) {
    free(to->alloc);
    to->alloc = NULL;
  }
  return ok && !from->alloc == !to->alloc ? 0 : VS_ENOMEM;
}

/* Slots that start differently the most vs_engine_run runs and copies
 * (a skewed router makes two kinds: the hottest expert's rank's and the
 * others'); with more, every slot runs. */
#define DISTINCT_SLOTS_MAX 8

/* Whether slots a and b start alike on every stage (same_start). */
static bool slots_alike(const run_ctx *c, size_t a, size_t b)
{
  for (size_t i = 0; i < c->n_ranks; i += c->per_stage)
    if (!same_start(&c->ranks[i + a], &c->ranks[i + b]))
      return false;
  return true;
}

/* Fills twin[slot] with the first slot that starts alike (itself when no
 * earlier one does). False when more than DISTINCT_SLOTS_MAX slots start
 * differently. */
static bool find_twins(const run_ctx *c, uint32_t *twin)
{
  size_t distinct[DISTINCT_SLOTS_MAX], n = 0;
  for (size_t j = 0; j < c->per_stage; j++) {
    size_t k = 0;
    while (k < n && !slots_alike(c, j, distinct[k]))
      k++;
    if (k == n && n == DISTINCT_SLOTS_MAX)
      return false;
    if (k == n)
      distinct[n++] = j;
    twin[j] = (uint32_t)distinct[k];
  }
  return true;
}

/* With independent slots (slots_independent): runs the ranks of the slots
 * that are their own twins (find_twins), in stage order as vs_engine_run
 * starts them, and gives every other rank a copy of its stage's rank in
 * its twin slot; the events count every rank's (one per op: each runs its
 * program to the end). */
static int run_distinct_slots(run_ctx *c, const uint32_t *twin,
                              vs_engine_stats *stats)
{
  int rc = 0;
  for (size_t i = 0; i < c->n_ranks && !rc; i++)
    if (twin[i % c->per_stage] == i % c->per_stage)
      rc = start_ready(c, (uint32_t)i, 0, VS_PHASE_SETUP, NULL);
  if (rc || (rc = drain(c, stats)))
    return rc;
  for (size_t i = 0; i < c->n_ranks; i++) {
    size_t slot = i % c->per_stage, from = i - slot + twin[slot];
    if (from == i)
      continue;
    if (take_twin_run(&c->ranks[i], &c->ranks[from]))
      return vs_error_set(c->err, VS_ENOMEM,
                          "out of host memory copying a slot's run");
    stats->events += c->ranks[from].prog->n_ops;
    stats->copied_ranks++;
  }
  return 0;
}

int vs_engine_run(vs_rank *ranks, size_t n_ranks, const vs_engine_opts *opts,
                  vs_engine_stats *stats, vs_error *err)
{
  run_ctx c = {.ranks = ranks,
               .n_ranks = n_ranks,
               .per_stage =
                   opts->ranks_per_stage ? opts->ranks_per_stage : n_ranks,
               .opts = opts,
               .err = err};
  uint32_t *twin = NULL; /* [slot] the slot whose run it copies */
  int rc = 0;

  memset(stats, 0, sizeof *stats);
  vs_evq_init(&c.q);
  vs_res_init(&c.res, opts->resources, opts->n_resources,
              n_ranks * VS_STREAM_N);
  if (slots_independent(&c) && !opts->replay_every_slot &&
      (twin = malloc(c.per_stage * sizeof *twin)) && find_twins(&c, twin)) {
    rc = run_distinct_slots(&c, twin, stats);
  } else {
    for (size_t i = 0; i < n_ranks && !rc; i++)
      rc = start_ready(&c, (uint32_t)i, 0, VS_PHASE_SETUP, NULL);
    if (!rc)
      rc = drain(&c, stats);
  }
  free(twin);
  free(c.frees);
  vs_evq_fini(&c.q);
  vs_res_fini(&c.res);
  if (rc || stats->stopped)
    return rc;
  return check_finished(&c, n_ranks);
}

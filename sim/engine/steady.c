/* steady.c - the steady-state proof (see steady.h). */
#include "steady.h"

#include "grow.h"
#include "period.h"

#include <stdlib.h>
#include <string.h>

/* What a snapshot item's value is. */
enum {
  ITEM_PLAIN,   /* a number, equal in both snapshots */
  ITEM_NEXT,    /* the op a stream of the rank waits at */
  ITEM_RUNNING  /* an op of the rank under way */
};

/* Snapshots kept: one per period length tried, and the new one. */
#define RING (VS_STEADY_PERIOD_MAX + 1)

/* Sets the trigger to stage 0's next steady forward from unit `from`: a
 * forward after its first backward. */
static void next_trigger(vs_steady *st, const vs_program *p0, size_t from)
{
  bool after_backward = false;
  st->trigger = SIZE_MAX;
  for (size_t u = 0; u < p0->n_units; u++) {
    if (!p0->units[u].forward) {
      after_backward = true;
      continue;
    }
    if (after_backward && u >= from) {
      st->next_round = u + 1;
      st->trigger = vs_stream_place(p0, VS_STREAM_COMPUTE,
                                    p0->units[u].first_op);
      return;
    }
  }
}

void vs_steady_init(vs_steady *st, const vs_rank *ranks, size_t n_ranks,
                    const vs_node_mem *nodes, size_t n_nodes)
{
  memset(st, 0, sizeof *st);
  st->n_ranks = n_ranks;
  st->nodes = nodes;
  st->n_nodes = n_nodes;
  next_trigger(st, ranks[0].prog, 0);
}

void vs_steady_fini(vs_steady *st)
{
  for (int k = 0; k < RING; k++) {
    free(st->snaps[k].items);
    free(st->snaps[k].counts);
  }
  free(st->growth);
  free(st->at_proof);
  memset(st, 0, sizeof *st);
}

bool vs_steady_applies(const vs_rank *ranks, size_t n_ranks)
{
  const vs_program *progs = n_ranks ? ranks[0].prog : NULL;
  if (!progs)
    return false;
  for (size_t i = 0; i < n_ranks; i++) {
    const vs_rank *r = &ranks[i];
    if (r->prog != &progs[i] || r->prog->stage != (int)i || !r->prog->units ||
        r->prog->unit_chunks != 1 || r->lifetimes)
      return false;
    /* managed memory (paged optimizer states) is not in the snapshot */
    for (size_t k = 0; k < r->prog->n_buffer_kinds; k++)
      if (r->prog->buffer_kinds[k].place == VS_PLACE_MANAGED)
        return false;
  }
  return true;
}

static bool push(vs_steady_snap *sn, uint8_t tag, uint32_t rank,
                 uint64_t value)
{
  if (sn->n == sn->cap &&
      !vs_grow((void **)&sn->items, &sn->cap, sn->n + 1, sizeof *sn->items))
    return false;
  sn->items[sn->n++] = (vs_steady_item){value, rank, tag, {0}};
  return true;
}

static bool push_double(vs_steady_snap *sn, double x)
{
  uint64_t bits;
  memcpy(&bits, &x, sizeof bits);
  return push(sn, ITEM_PLAIN, 0, bits);
}

/* Items of one rank in a snapshot (take_rank): per stream its op (or
 * end) and whether it is busy (STREAM_ITEMS), then the idle wait and
 * memory by category. */
#define STREAM_ITEMS 2
#define RANK_ITEMS (STREAM_ITEMS * VS_STREAM_N + 1 + VS_CAT_N)

/* The rank's streams, the wait of its idle compute stream and the bytes
 * its live buffers asked for, by category (vs_mem asked_by_cat). Not its
 * caching allocator: the blocks move round the addresses from round to
 * round (a freed micro-batch's become the next one's), so neither its
 * reserved memory nor the block sizes it rounds a request up to (a
 * block a little larger than asked is handed out whole, as PyTorch's
 * does: 6 MiB for 5 MiB, in some rounds and not others) are what the
 * proof tells. */
static bool take_rank(vs_steady_snap *sn, const vs_rank *r, uint32_t i,
                      uint64_t t_ns)
{
  const vs_program *p = r->prog;
  bool ok = true;
  for (int s = 0; s < VS_STREAM_N; s++) {
    ok = ok && (r->next[s] < p->n_stream_ops[s]
                    ? push(sn, ITEM_NEXT, i, p->stream_ops[s][r->next[s]])
                    : push(sn, ITEM_PLAIN, i, UINT64_MAX));
    ok = ok && push(sn, ITEM_PLAIN, i, r->busy[s]);
  }
  /* how long an idle compute stream has waited (counted when it starts
   * again); a busy one's mark is overwritten when its op ends */
  ok = ok && push(sn, ITEM_PLAIN, i,
                  r->busy[VS_STREAM_COMPUTE]
                      ? 0
                      : t_ns - r->idle_since[VS_STREAM_COMPUTE]);
  for (int c = 0; c < VS_CAT_N; c++)
    ok = ok && push(sn, ITEM_PLAIN, i, r->mem.asked_by_cat[c]);
  return ok;
}

/* An event under way, and whether it is movable (a transfer's end). */
typedef struct pending {
  vs_event ev;
  bool movable;
} pending;

/* qsort's order for pending events: vs_evq_pop's (vs_event_earlier). */
static int by_time(const void *x, const void *y)
{
  const vs_event *a = &((const pending *)x)->ev;
  const vs_event *b = &((const pending *)y)->ev;
  return vs_event_earlier(a, b) ? -1 : vs_event_earlier(b, a);
}

/* The events under way in the order vs_evq_pop will hand them out (both
 * heaps share one push order). */
static bool take_events(vs_steady_snap *sn, const vs_evq *q, uint64_t t_ns)
{
  size_t n = q->n + q->mn;
  pending *all = malloc((n ? n : 1) * sizeof *all);
  bool ok = all != NULL;
  if (!ok)
    return false;
  for (size_t k = 0; k < q->n; k++)
    all[k] = (pending){q->heap[k], false};
  for (size_t k = 0; k < q->mn; k++)
    all[q->n + k] = (pending){q->mheap[k].ev, true};
  qsort(all, n, sizeof *all, by_time);
  for (size_t k = 0; ok && k < n; k++)
    ok = push(sn, ITEM_PLAIN, 0, all[k].ev.t_ns - t_ns) &&
         push(sn, ITEM_PLAIN, 0, all[k].movable) &&
         push(sn, ITEM_RUNNING, all[k].ev.rank, all[k].ev.op);
  free(all);
  return ok;
}

/* The flows on shared resources and the instances' lists. */
static bool take_flows(vs_steady_snap *sn, const vs_res_state *res,
                       uint64_t t_ns)
{
  bool ok = true;
  for (size_t s = 0; ok && res->flows && s < res->n_slots; s++) {
    const vs_res_flow *f = &res->flows[s];
    ok = push(sn, ITEM_PLAIN, 0, f->phase);
    if (!ok || f->phase == VS_FLOW_IDLE)
      continue;
    ok = push(sn, ITEM_RUNNING, f->rank, f->op) &&
         push_double(sn, f->remaining_bytes) && push_double(sn, f->rate) &&
         push(sn, ITEM_PLAIN, 0, t_ns - f->last_ns) &&
         push(sn, ITEM_PLAIN, 0, f->n_links);
    for (uint8_t l = 0; ok && l < f->n_links; l++) {
      const vs_res_link *k = &f->links[l];
      ok = push(sn, ITEM_PLAIN, 0, k->instance) &&
           push(sn, ITEM_PLAIN, 0, k->prev) &&
           push(sn, ITEM_PLAIN, 0, k->next) &&
           push(sn, ITEM_PLAIN, 0, k->weight) &&
           push(sn, ITEM_PLAIN, 0, k->kind);
    }
  }
  for (int k = 0; ok && k < VS_RES_N; k++)
    for (size_t n = 0; ok && n < res->n_instances[k]; n++)
      ok = push(sn, ITEM_PLAIN, 0, res->instances[k][n].head) &&
           push(sn, ITEM_PLAIN, 0, res->instances[k][n].weight);
  return ok;
}

/* The nodes' host and NVMe memories (false after an out-of-memory). */
static bool take_nodes(const vs_steady *st, vs_steady_snap *sn)
{
  bool ok = true;
  for (size_t n = 0; ok && n < st->n_nodes; n++)
    for (int p = VS_PLACE_HOST; ok && p < VS_PLACE_N; p++) {
      const vs_mem *m = &st->nodes[n].mem[p];
      if (m->oom.happened)
        return false;
      for (int c = 0; ok && c < VS_CAT_N; c++)
        ok = push(sn, ITEM_PLAIN, 0, m->by_cat[c]);
      ok = ok && push(sn, ITEM_PLAIN, 0, m->allocated_bytes);
    }
  return ok;
}

/* A snapshot of the run at t_ns into sn, with the ranks' counters; false
 * when host memory ran out or a GPU, host or NVMe memory did (nothing to
 * prove then). */
static bool take(vs_steady *st, vs_steady_snap *sn, const vs_rank *ranks,
                 const vs_evq *q, const vs_res_state *res, uint64_t t_ns)
{
  bool ok = true;
  sn->n = 0;
  if (!sn->counts && !(sn->counts = calloc(st->n_ranks, sizeof *sn->counts)))
    return false;
  for (size_t i = 0; ok && i < st->n_ranks; i++) {
    const vs_rank *r = &ranks[i];
    if (r->mem.oom.happened)
      return false;
    ok = take_rank(sn, r, (uint32_t)i, t_ns);
    sn->counts[i] = (vs_steady_counts){r->wait_p2p_ns, r->wait_comm_ns,
                                       r->wait_offload_ns,
                                       r->mem.peak_allocated_bytes};
  }
  return ok && take_nodes(st, sn) && take_events(sn, q, t_ns) &&
         take_flows(sn, res, t_ns);
}

/* What an op (of p) is to a proof over k micro-batches. */
enum {
  ROLE_NONE,    /* nothing the proof can name: the setup, a micro-batch
                   before lo, or too near the end to move k on */
  ROLE_REPEATS, /* of a repeating unit, and so is the op k on */
  ROLE_END      /* of the last micro-batch or the step's end, which the
                   longer step has too, at its end */
};

static int role(const vs_steady *st, const vs_program *p, uint32_t op,
                uint32_t k, uint32_t hi)
{
  uint32_t mb = 0;
  vs_span span = vs_period_op_span(p, op, &mb);
  if (span == VS_SPAN_END ||
      (span == VS_SPAN_UNIT && mb + 1 == p->unit_mbs))
    return ROLE_END;
  return span == VS_SPAN_UNIT && mb >= st->lo && mb + k <= hi ? ROLE_REPEATS
                                                              : ROLE_NONE;
}

/* The op of p k micro-batches after op (VS_PERIOD_NONE if none). */
static uint32_t op_later(const vs_program *p, uint32_t op, uint32_t k)
{
  for (uint32_t i = 0; i < k && op != VS_PERIOD_NONE; i++)
    op = vs_period_op_later(p, op);
  return op;
}

/* Whether the op a stream waits at, of the step's end, keeps waiting
 * while the repeating rounds run: one of its dependencies is of the end
 * too and has not started. */
static bool waits_for_the_end(const vs_steady *st, const vs_rank *ranks,
                              const vs_program *p, uint32_t op, uint32_t k,
                              uint32_t hi)
{
  const vs_pop *o = &p->ops[op];
  for (uint32_t d = o->first_dep, end = vs_op_deps_end(p, o); d < end; d++) {
    int32_t stage = p->dep_stages ? p->dep_stages[d] : -1;
    const vs_rank *owner = stage >= 0 ? &ranks[stage] : &ranks[p->stage];
    const vs_program *q = owner->prog;
    uint32_t dep = p->deps[d];
    int s = q->ops[dep].stream;
    size_t at = owner->next[s];
    /* not started: its stream has not gone past it */
    if (role(st, q, dep, k, hi) == ROLE_END && at < q->n_stream_ops[s] &&
        q->stream_ops[s][at] <= dep)
      return true;
  }
  return false;
}

/* Whether item y of the new snapshot is item x of the one k micro-batches
 * before, moved on. */
static bool item_matches(const vs_steady *st, const vs_rank *ranks,
                         const vs_steady_item *x, const vs_steady_item *y,
                         uint32_t k, uint32_t hi)
{
  const vs_program *p;
  uint32_t op = (uint32_t)x->value;
  int where;
  if (x->tag != y->tag || x->rank != y->rank)
    return false;
  if (x->tag == ITEM_PLAIN)
    return x->value == y->value;
  if (x->rank >= st->n_ranks || x->value >= UINT32_MAX)
    return false;
  p = ranks[x->rank].prog;
  where = role(st, p, op, k, hi);
  if (where == ROLE_REPEATS)
    return y->value == op_later(p, op, k);
  return x->tag == ITEM_NEXT && where == ROLE_END && y->value == x->value &&
         waits_for_the_end(st, ranks, p, op, k, hi);
}

/* The position on stream s of rank i where snapshot sn found it. */
static size_t position_in(const vs_steady_snap *sn, const vs_rank *ranks,
                          size_t i, int s)
{
  const vs_steady_item *x =
      &sn->items[i * RANK_ITEMS + STREAM_ITEMS * (size_t)s];
  const vs_program *p = ranks[i].prog;
  return x->tag == ITEM_NEXT ? vs_stream_place(p, s, (uint32_t)x->value)
                             : p->n_stream_ops[s];
}

/* Whether every op the ranks' streams started between snapshots a and b
 * is of a repeating unit (what runs between them must be what the
 * longer step repeats, not an earlier micro-batch queued behind a
 * stream's next op). */
static bool window_repeats(const vs_steady *st, const vs_rank *ranks,
                           const vs_steady_snap *a, const vs_steady_snap *b,
                           uint32_t k, uint32_t hi)
{
  for (size_t i = 0; i < st->n_ranks; i++) {
    const vs_program *p = ranks[i].prog;
    for (int s = 0; s < VS_STREAM_N; s++) {
      size_t from = position_in(a, ranks, i, s);
      size_t to = position_in(b, ranks, i, s);
      for (size_t at = from; at < to; at++)
        if (role(st, p, p->stream_ops[s][at], k, hi + k) != ROLE_REPEATS)
          return false;
    }
  }
  return true;
}

/* Whether snapshot b is snapshot a (taken k rounds before) moved on. */
static bool snapshots_match(vs_steady *st, const vs_rank *ranks,
                            const vs_steady_snap *a, const vs_steady_snap *b,
                            uint32_t k)
{
  uint32_t mbs = ranks[0].prog->unit_mbs, hi = mbs >= 2 ? mbs - 2 : 0;
  if (a->n != b->n)
    return false;
  if (!st->lo_known) {
    st->lo = vs_period_repeats_from(ranks[0].prog, st->n_ranks, hi);
    st->lo_known = true;
  }
  for (size_t i = 0; i < b->n; i++)
    if (!item_matches(st, ranks, &a->items[i], &b->items[i], k, hi))
      return false;
  return window_repeats(st, ranks, a, b, k, hi);
}

/* Keeps the proof from snapshots a and b, k rounds apart: the period's
 * time, events and counters' growth. */
static void prove(vs_steady *st, const vs_steady_snap *a,
                  const vs_steady_snap *b, uint32_t k)
{
  if (!(st->growth = calloc(st->n_ranks, sizeof *st->growth)) ||
      !(st->at_proof = malloc(st->n_ranks * sizeof *st->at_proof))) {
    st->failed = true;
    return;
  }
  memcpy(st->at_proof, b->counts, st->n_ranks * sizeof *st->at_proof);
  st->proven = true;
  st->period = k;
  st->period_ns = b->t_ns - a->t_ns;
  st->period_events = b->events - a->events;
  st->proven_at_ns = b->t_ns;
  for (size_t i = 0; i < st->n_ranks; i++) {
    const vs_steady_counts *x = &a->counts[i], *y = &b->counts[i];
    st->growth[i] = (vs_steady_counts){y->wait_p2p_ns - x->wait_p2p_ns,
                                       y->wait_comm_ns - x->wait_comm_ns,
                                       y->wait_offload_ns - x->wait_offload_ns,
                                       0};
  }
}

void vs_steady_watch(vs_steady *st, const vs_rank *ranks, const vs_evq *q,
                     const vs_res_state *res, uint64_t t_ns, uint64_t events)
{
  vs_steady_snap *sn = &st->snaps[st->taken % RING];
  next_trigger(st, ranks[0].prog, st->next_round);
  if (!take(st, sn, ranks, q, res, t_ns)) {
    st->failed = true; /* out of memory, the host's or a GPU's */
    return;
  }
  sn->t_ns = t_ns;
  sn->events = events;
  for (uint32_t k = 1; k <= VS_STEADY_PERIOD_MAX && k <= st->taken; k++) {
    const vs_steady_snap *before = &st->snaps[(st->taken - k) % RING];
    if (snapshots_match(st, ranks, before, sn, k)) {
      prove(st, before, sn, k);
      break;
    }
  }
  st->taken++;
}

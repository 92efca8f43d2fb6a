/* evq.h - the engine's event queue: a binary min-heap of events keyed on
 * (t_ns, seq). seq is assigned at push time and increases, so events due at
 * the same nanosecond pop in the order they were pushed: the simulation is
 * deterministic. Invariant: every parent precedes both children in that key.
 *
 * Movable events (vs_evq_push_movable) may be re-timed or withdrawn after
 * the push, through the handle the push returns: the engine moves the end
 * of an op that shares a resource whenever another op joins or leaves it.
 * They live in a second heap, indexed (a position table per handle, kept up
 * to date by every move), so plain events keep the plain heap and a queue
 * without movable events costs one extra test per pop. Both heaps take seq
 * from one counter and pop merges them on (t_ns, seq): the order stays
 * total and deterministic. A moved event keeps the seq of its push, so ties
 * resolve by first push order. */
#ifndef VS_EVQ_H
#define VS_EVQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct vs_event {
  uint64_t t_ns;   /* when it is due */
  uint64_t seq;    /* push order; breaks ties */
  uint32_t rank;   /* simulated rank it belongs to */
  uint32_t op;     /* program op that ends at t_ns */
} vs_event;

/* The order events are handed out in: by time, ties by push order. */
static inline bool vs_event_earlier(const vs_event *a, const vs_event *b)
{
  return a->t_ns < b->t_ns || (a->t_ns == b->t_ns && a->seq < b->seq);
}

/* A movable event in its heap. */
typedef struct vs_evq_movable {
  vs_event ev;     /* the event */
  uint32_t handle; /* its handle: pos[handle] is its index in mheap */
} vs_evq_movable;

typedef struct vs_evq {
  vs_event *heap;  /* heap[0] is the earliest */
  size_t n;        /* events held */
  size_t cap;      /* allocated slots */
  uint64_t next_seq; /* seq for the next push */
  vs_evq_movable *mheap; /* movable events, mheap[0] the earliest */
  size_t mn;       /* movable events held */
  size_t mcap;     /* allocated slots in mheap */
  uint32_t *pos;   /* [handle] index in mheap while live; a free handle
                      holds VS_EVQ_FREE | the next free handle */
  size_t n_handles; /* handles issued so far (live or free) */
  size_t cap_handles; /* allocated slots in pos */
  uint32_t free_handle; /* a free handle to reuse; VS_EVQ_NONE if none */
} vs_evq;

#define VS_EVQ_NONE UINT32_MAX  /* no handle */
#define VS_EVQ_FREE 0x80000000u /* marks a free handle in pos */

/* Empty queue; no allocation until the first push. */
void vs_evq_init(vs_evq *q);
void vs_evq_fini(vs_evq *q);

/* Adds an event due at t_ns. O(log n). Returns VS_ENOMEM on allocation
 * failure (the queue is unchanged). */
int vs_evq_push(vs_evq *q, uint64_t t_ns, uint32_t rank, uint32_t op);

/* Adds a movable event due at t_ns and writes its handle to *handle. The
 * handle stays live until the event pops or is removed; then it may be
 * given to a later push. O(log m) for m movable events. VS_ENOMEM on
 * allocation failure (the queue is unchanged); VS_EINPUT past 2^31 - 1
 * handles. */
int vs_evq_push_movable(vs_evq *q, uint64_t t_ns, uint32_t rank, uint32_t op,
                        uint32_t *handle);

/* Re-times the movable event of a live handle to t_ns (earlier or later),
 * keeping its seq. O(log m). VS_EINPUT (queue unchanged) if the handle is
 * not live. */
int vs_evq_update(vs_evq *q, uint32_t handle, uint64_t t_ns);

/* Withdraws the movable event of a live handle, which is freed. O(log m).
 * VS_EINPUT (queue unchanged) if the handle is not live. */
int vs_evq_remove(vs_evq *q, uint32_t handle);

/* Removes the earliest event, plain or movable, into *out; false when
 * empty. A popped movable event frees its handle. O(log n + log m). */
bool vs_evq_pop(vs_evq *q, vs_event *out);

/* Earliest event without removing it; NULL when empty. O(1). */
const vs_event *vs_evq_peek(const vs_evq *q);

/* Events held, plain and movable. */
size_t vs_evq_size(const vs_evq *q);

#endif

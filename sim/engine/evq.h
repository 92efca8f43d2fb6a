/* evq.h - the engine's event queue: a binary min-heap of events keyed on
 * (t_ns, seq). seq is assigned at push time and increases, so events due at
 * the same nanosecond pop in the order they were pushed: the simulation is
 * deterministic. Invariant: every parent precedes both children in that key. */
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

typedef struct vs_evq {
  vs_event *heap;  /* heap[0] is the earliest */
  size_t n;        /* events held */
  size_t cap;      /* allocated slots */
  uint64_t next_seq; /* seq for the next push */
} vs_evq;

/* Empty queue; no allocation until the first push. */
void vs_evq_init(vs_evq *q);
void vs_evq_fini(vs_evq *q);

/* Adds an event due at t_ns. O(log n). Returns VS_ENOMEM on allocation
 * failure (the queue is unchanged). */
int vs_evq_push(vs_evq *q, uint64_t t_ns, uint32_t rank, uint32_t op);

/* Removes the earliest event into *out; false when empty. O(log n). */
bool vs_evq_pop(vs_evq *q, vs_event *out);

/* Earliest event without removing it; NULL when empty. O(1). */
const vs_event *vs_evq_peek(const vs_evq *q);

#endif

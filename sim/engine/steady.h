/* steady.h - a proof that a pipeline's run has reached its steady state,
 * so that the time of a step of more micro-batches than were simulated
 * is known exactly without simulating them.
 *
 * The engine is deterministic: when an op starts and ends depends only
 * on its state (each rank's stream positions and idle clocks, the events
 * and shared-resource flows under way, host and NVMe memory) and on the
 * program ahead; the caching allocator decides addresses, not times. The
 * watcher snapshots that state each time stage 0 starts a steady round of
 * its 1F1B order (the forward of a new micro-batch after its first
 * backward), relative to that moment: times as offsets, every op named by
 * its part in the program (period.h), memory by category. When a snapshot
 * matches the one k rounds before (1 <= k <= VS_STEADY_PERIOD_MAX) with
 * every op of a repeating micro-batch moved k micro-batches on, the k
 * rounds between them repeat for as long as the program's units do: a
 * step of N more micro-batches (N a multiple of k) is this run with N/k
 * copies of those rounds inserted, every later time moved by N/k times
 * their length and every count grown by N/k times its growth.
 *
 * How a snapshot names an op:
 * - of a unit whose micro-batch repeats (period.h's vs_period_repeats_from
 *   up to the simulated micro-batches - 2), k micro-batches on: the one
 *   k micro-batches later;
 * - of the step's end or too near it: itself, and only as the op a stream
 *   waits at, which must wait for another such op that has not started
 *   (so it cannot start while the rounds repeat);
 * - anything else (the setup, a micro-batch before the repeat): no proof.
 * The caching allocator's blocks are left out: a freed micro-batch's
 * blocks become the next one's, so the addresses rotate rather than
 * repeat, and so do the sizes it rounds requests up to (a block a little
 * larger than asked is handed out whole); what the proof tells of memory
 * is only the bytes the live buffers asked for, by category, at the
 * snapshots (allocated and reserved memory and fragmentation are the
 * simulated micro-batches' own). Only one rank per stage, without
 * recording, lifetimes, managed memory or an out-of-memory. */
#ifndef VS_STEADY_H
#define VS_STEADY_H

#include "evq.h"
#include "rank.h"
#include "resource.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One entry of a snapshot: a plain value, or an op of a rank's program. */
typedef struct vs_steady_item {
  uint64_t value;
  uint32_t rank;
  uint8_t tag;              /* what value is (steady.c) */
  uint8_t unused[3];
} vs_steady_item;

/* A rank's counters that grow with the rounds, at a snapshot. */
typedef struct vs_steady_counts {
  uint64_t wait_p2p_ns, wait_comm_ns, wait_offload_ns;
  uint64_t peak_allocated_bytes; /* its peak so far */
} vs_steady_counts;

/* One snapshot: its items, when it was taken and the counters then. */
typedef struct vs_steady_snap {
  vs_steady_item *items;
  size_t n, cap;
  uint64_t t_ns, events;
  vs_steady_counts *counts; /* [n_ranks] */
} vs_steady_snap;

/* The longest repeat tried, in rounds (micro-batches): a pipeline whose
 * stages' loads differ can settle into a pattern of two or more (stages
 * of unequal layers: often as many as its stages with the most layers,
 * 9 in the 530B search's splits of 105 layers over 16 and 32 stages). */
#define VS_STEADY_PERIOD_MAX 12

typedef struct vs_steady {
  /* set before the run (vs_steady_init) */
  size_t n_ranks;
  const vs_node_mem *nodes; /* the run's host and NVMe memories */
  size_t n_nodes;
  /* the watcher */
  size_t next_round;        /* stage 0's next steady forward unit (index
                               into its units) */
  size_t trigger;           /* its first compute op's stream position: a
                               snapshot once rank 0 has started it */
  uint32_t lo;              /* the first repeating micro-batch */
  bool lo_known;
  vs_steady_snap snaps[VS_STEADY_PERIOD_MAX + 1]; /* snapshot i in
                               [i % (VS_STEADY_PERIOD_MAX + 1)] */
  size_t taken;             /* snapshots taken */
  bool failed;              /* out of memory: nothing proven */
  /* the proof */
  bool proven;
  uint32_t period;          /* micro-batches it repeats over */
  uint64_t period_ns;       /* their time */
  uint64_t period_events;   /* their events */
  uint64_t proven_at_ns;    /* when the later snapshot was taken */
  vs_steady_counts *growth; /* [n_ranks] each counter's growth over them */
  vs_steady_counts *at_proof; /* [n_ranks] the counters at the later
                               snapshot */
} vs_steady;

/* Prepares st to watch a run of ranks[0 .. n_ranks) (one per stage, in
 * stage order, vs_steady_applies) with the node memories of the run. */
void vs_steady_init(vs_steady *st, const vs_rank *ranks, size_t n_ranks,
                    const vs_node_mem *nodes, size_t n_nodes);
void vs_steady_fini(vs_steady *st);

/* Whether the engine should call vs_steady_watch now: rank 0 has
 * started the op of the next snapshot. O(1). */
static inline bool vs_steady_due(const vs_steady *st, const vs_rank *ranks)
{
  return !st->proven && !st->failed &&
         ranks[0].next[VS_STREAM_COMPUTE] > st->trigger;
}

/* Takes a snapshot at t_ns (after `events` events), between two events,
 * and compares it with the last: proven once they match. */
void vs_steady_watch(vs_steady *st, const vs_rank *ranks, const vs_evq *q,
                     const vs_res_state *res, uint64_t t_ns, uint64_t events);

/* Whether a run of ranks[0 .. n_ranks) could be watched at all: one rank
 * per stage, in stage order, running the stage's program (not
 * interleaved), noting no lifetimes, no managed memory. The caller
 * checks that the run records nothing (timelines, spans). */
bool vs_steady_applies(const vs_rank *ranks, size_t n_ranks);

#endif

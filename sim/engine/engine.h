/* engine.h - the discrete-event engine: replays stage programs on simulated
 * ranks and applies every op's memory effects at its start and end.
 *
 * A rank owns only its stream cursors, stream clocks and memory tracker; the
 * program it runs belongs to its stage and is shared. Streams run their ops
 * in order; an op starts when its stream is idle and its dependencies have
 * ended. Time is integer nanoseconds; equal times resolve by push order, so a
 * run is deterministic. The engine knows nothing about transformers.
 *
 * An op that names a resource (vs_op_kind.resource) runs its fixed dur_ns and
 * the resource's latency, then moves its bytes through the instance of its
 * rank's GPU, sharing the bandwidth with the ops on that instance at the
 * time (resource.h): its end is decided while it runs, and its end effects
 * and span end come then. Other ops keep their fixed durations. */
#ifndef VS_ENGINE_H
#define VS_ENGINE_H

#include "alloc.h"
#include "error.h"
#include "memory.h"
#include "rank.h"
#include "resource.h"
#include "schedule.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct vs_engine_opts {
  bool record_timeline;     /* fill vs_rank.timeline */
  bool record_spans;        /* fill vs_rank.spans */
  bool check_invariants;    /* vs_mem_check after every event */
  size_t ranks_per_stage;   /* ranks are laid out [stage][slot]; 0 = one
                               stage holds them all */
  bool stop_at_oom;         /* end the run at the first out-of-memory (the
                               figures after it are then partial) */
  bool replay_every_slot;   /* run every slot even when they are
                               independent (slots_independent in engine.c)
                               instead of giving a slot's run to the later
                               ones that start alike: for tests that
                               compare the two */
  const vs_resource_spec *resources; /* [vs_resource_kind] the shared
                               resources (vs_resource_table); NULL: none */
  size_t n_resources;       /* entries in resources */
  vs_node_mem *nodes;       /* host and NVMe memories the ranks' shares
                               name (not owned; updated by the run) */
  size_t n_nodes;
  struct vs_steady *steady; /* watches for the steady state (steady.h,
                               initialised for these ranks); NULL: not */
} vs_engine_opts;

typedef struct vs_engine_stats {
  uint64_t events;          /* op completions processed */
  uint64_t end_ns;          /* when the last rank finished */
  bool stopped;             /* ended early at an out-of-memory */
  uint64_t copied_ranks;    /* ranks given a copy of the run of their
                               stage's rank in an earlier slot that starts
                               alike instead of running (independent
                               slots) */
} vs_engine_stats;

/* Prepares rank for prog on a GPU of capacity_bytes with framework_bytes
 * outside the allocator, running VS_STEP_ONLY (set rank->step for
 * another). */
void vs_rank_init(vs_rank *rank, uint32_t id, const vs_program *prog,
                  uint64_t capacity_bytes, uint64_t framework_bytes);
void vs_rank_fini(vs_rank *rank);

/* Makes rank note when the GPU allocates and frees each buffer of its
 * program, for vs_rank_live_at_peak: 4 bytes a buffer. VS_ENOMEM on host
 * memory; VS_ELIMIT when the program has 2^31 memory effects or more
 * (their numbers would not fit beside the freed mark). */
int vs_rank_record_lifetimes(vs_rank *rank);

/* Whether buffer (on the GPU) was allocated when rank's allocated memory
 * first reached its peak: allocated by then and not yet freed. False for a
 * rank without lifetimes. O(1). */
bool vs_rank_live_at_peak(const vs_rank *rank, uint32_t buffer);

/* Gives rank a caching-allocator emulation (instead of exact accounting),
 * with a table of 4 bytes per buffer of its program. VS_ENOMEM on host
 * allocation failure. */
int vs_rank_use_caching(vs_rank *rank, const vs_alloc_config *cfg);

/* Gives `to` (with the caching allocator, not yet run) the cache that
 * `from`'s run left: a copy of its allocator, whose reserved segments
 * stay, and its live GPU buffers, which to's setup op (op 0) takes over
 * as a training step finds the states the one before made: each GPU
 * allocation of op 0 takes the earliest live block of the same category
 * and bytes, without asking the allocator. to's run fails (a schedule
 * bug) when op 0 asks for one that is not there or leaves one untaken.
 * VS_ENOMEM on host memory. */
int vs_rank_inherit(vs_rank *to, const vs_rank *from);

/* Empty host and NVMe memories of node `node` with those capacities. */
void vs_node_mem_init(vs_node_mem *n, uint32_t node, uint64_t host_bytes,
                      uint64_t nvme_bytes);

void vs_node_mem_fini(vs_node_mem *n);

/* Whether the node's host and NVMe memories held everything. */
bool vs_node_mem_fits(const vs_node_mem *n);

/* Runs every rank's program to completion. When the slots are independent
 * (every rank of a stage runs its program from the same start, and no
 * resource or node memory is shared; not with stop_at_oom) the ranks of
 * slot 0 run and every other slot's rank gets a copy of its stage's run
 * (its own allocator; the timeline and spans of the rank it copies,
 * shared: twin_records): the same outcome, events counted for every
 * slot, in the time of one slot and the copies. VS_ENOMEM when recording
 * runs out of host memory; VS_EINPUT with a message if a program deadlocks or
 * frees memory it never allocated (both are schedule bugs), an op names
 * a resource that opts does not describe, or a buffer off the GPU belongs
 * to a rank without shares. */
int vs_engine_run(vs_rank *ranks, size_t n_ranks, const vs_engine_opts *opts,
                  vs_engine_stats *stats, vs_error *err);

#endif

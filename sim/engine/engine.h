/* engine.h - the discrete-event engine: replays stage programs on simulated
 * ranks and applies every op's memory effects at its start and end.
 *
 * A rank owns only its stream cursors, stream clocks and memory tracker; the
 * program it runs belongs to its stage and is shared. Streams run their ops
 * in order; an op starts when its stream is idle and its dependencies have
 * ended. Time is integer nanoseconds; equal times resolve by push order, so a
 * run is deterministic. The engine knows nothing about transformers.
 *
 * An op that names a resource (vs_pop.resource) runs its fixed dur_ns and
 * the resource's latency, then moves its bytes through the instance of its
 * rank's GPU, sharing the bandwidth with the ops on that instance at the
 * time (resource.h): its end is decided while it runs, and its end effects
 * and span end come then. Other ops keep their fixed durations. */
#ifndef VS_ENGINE_H
#define VS_ENGINE_H

#include "alloc.h"
#include "error.h"
#include "memory.h"
#include "resource.h"
#include "schedule.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One row of the memory timeline. */
typedef struct vs_mem_event {
  uint64_t t_ns;            /* when */
  uint32_t op;              /* op that caused it */
  int32_t category;         /* vs_category */
  int64_t delta_bytes;      /* + allocation, - free */
  uint64_t allocated_bytes; /* after the event */
  uint64_t reserved_bytes;  /* after the event */
} vs_mem_event;

/* When an op ran. */
typedef struct vs_op_span {
  uint32_t op;              /* program op */
  uint64_t start_ns, end_ns;
} vs_op_span;

typedef struct vs_rank {
  uint32_t id;              /* global rank number */
  int stage, dp_rank, tp_rank;
  uint32_t slot;            /* index among the simulated ranks of its stage;
                               its pipeline peers share the slot */
  const vs_program *prog;   /* its stage's program (not owned) */
  size_t next[VS_STREAM_N]; /* next op to start, per stream */
  size_t done[VS_STREAM_N]; /* ops ended, per stream */
  bool busy[VS_STREAM_N];   /* a stream is running an op */
  uint64_t end_ns;          /* when its last op ended */
  uint64_t idle_since[VS_STREAM_N]; /* when each stream last went idle */
  uint64_t wait_p2p_ns;     /* compute stream idle waiting on the pipeline */
  uint64_t wait_comm_ns;    /* compute stream idle waiting on dp collectives */
  vs_mem mem;               /* its memory */
  vs_alloc *alloc;          /* caching-allocator emulation; NULL = exact */
  uint32_t *live_blocks;    /* [program buffer] its allocator block while
                               live, VS_ALLOC_NONE otherwise (caching) */
  vs_mem_event *timeline;   /* recorded when asked */
  size_t n_timeline, cap_timeline;
  vs_op_span *spans;        /* recorded when asked */
  size_t n_spans, cap_spans;
} vs_rank;

typedef struct vs_engine_opts {
  bool record_timeline;     /* fill vs_rank.timeline */
  bool record_spans;        /* fill vs_rank.spans */
  bool check_invariants;    /* vs_mem_check after every event */
  size_t ranks_per_stage;   /* ranks are laid out [stage][slot]; 0 = one
                               stage holds them all */
  bool stop_at_oom;         /* end the run at the first out-of-memory (the
                               figures after it are then partial) */
  const vs_resource_spec *resources; /* [vs_resource_kind] the shared
                               resources (vs_resource_table); NULL: none */
  size_t n_resources;       /* entries in resources */
} vs_engine_opts;

typedef struct vs_engine_stats {
  uint64_t events;          /* op completions processed */
  uint64_t end_ns;          /* when the last rank finished */
  bool stopped;             /* ended early at an out-of-memory */
} vs_engine_stats;

/* Prepares rank for prog on a GPU of capacity_bytes with framework_bytes
 * outside the allocator. */
void vs_rank_init(vs_rank *rank, uint32_t id, const vs_program *prog,
                  uint64_t capacity_bytes, uint64_t framework_bytes);
void vs_rank_fini(vs_rank *rank);

/* Gives rank a caching-allocator emulation (instead of exact accounting),
 * with a table of 4 bytes per buffer of its program. VS_ENOMEM on host
 * allocation failure. */
int vs_rank_use_caching(vs_rank *rank, const vs_alloc_config *cfg);

/* Runs every rank's program to completion. VS_ENOMEM when recording runs
 * out of host memory; VS_EINPUT with a message if a program deadlocks or
 * frees memory it never allocated (both are schedule bugs), or an op names
 * a resource that opts does not describe. */
int vs_engine_run(vs_rank *ranks, size_t n_ranks, const vs_engine_opts *opts,
                  vs_engine_stats *stats, vs_error *err);

#endif

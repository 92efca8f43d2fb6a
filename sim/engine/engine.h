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

/* One change of a node's host or NVMe memory (recorded when asked). */
typedef struct vs_node_event {
  uint64_t t_ns;            /* when */
  uint32_t rank;            /* index of the simulated rank whose op made it */
  uint32_t op;              /* that op */
  int32_t category;         /* vs_category */
  uint8_t place;            /* vs_place */
  int64_t delta_bytes;      /* + allocation, - free: all its shares */
  uint64_t in_use_bytes;    /* the place's bytes after it */
} vs_node_event;

/* One node's memories beside its GPUs': host DRAM and NVMe, shared by
 * the ranks on the node, exact accounting (no caching allocator). */
typedef struct vs_node_mem {
  uint32_t node;            /* node number */
  vs_mem mem[VS_PLACE_N];   /* [VS_PLACE_HOST], [VS_PLACE_NVME]; the GPU's
                               entry is unused */
  uint32_t oom_rank[VS_PLACE_N]; /* the rank whose op ran out, per place */
  vs_node_event *timeline;  /* recorded with record_timeline */
  size_t n_timeline, cap_timeline;
} vs_node_mem;

/* A rank's share of a node: `weight` GPUs of node nodes[node] run its
 * program (1 with every GPU simulated; in stage mode its stage's GPUs on
 * that node), so each of its host or NVMe bytes counts `weight` times. */
typedef struct vs_node_share {
  uint32_t node;            /* index into vs_engine_opts.nodes */
  uint32_t weight;
} vs_node_share;

/* A GPU buffer an earlier run of a rank left live, which the setup op
 * of the rank's next run takes over (vs_rank_inherit). */
typedef struct vs_inherited {
  uint64_t bytes;           /* as asked; 0 once taken over */
  int32_t category;         /* vs_category */
  uint32_t block;           /* its block in the inherited allocator */
} vs_inherited;

typedef struct vs_rank {
  uint32_t id;              /* global rank number */
  int stage, dp_rank, tp_rank;
  uint32_t slot;            /* index among the simulated ranks of its stage;
                               its pipeline peers share the slot */
  vs_step step;             /* the step its run is: it applies the
                               program's effects of that step
                               (vs_effect_applies) */
  const vs_program *prog;   /* its stage's program (not owned) */
  size_t next[VS_STREAM_N]; /* next op to start, per stream */
  size_t done[VS_STREAM_N]; /* ops ended, per stream */
  bool busy[VS_STREAM_N];   /* a stream is running an op */
  uint64_t end_ns;          /* when its last op ended */
  uint64_t idle_since[VS_STREAM_N]; /* when each stream last went idle */
  uint64_t wait_p2p_ns;     /* compute stream idle waiting on the pipeline */
  uint64_t wait_comm_ns;    /* compute stream idle waiting on dp collectives */
  uint64_t wait_offload_ns; /* compute stream idle waiting on an offload
                               copy (a parameter fetch) */
  uint64_t tail_mark_ns;    /* after its compute stream's last op: the end
                               of the tail accounted so far */
  uint64_t tail_cpu_ns;     /* tail time up to the end of a host-CPU op */
  uint64_t tail_copy_ns;    /* tail time up to the end of another offload
                               op (a copy or an NVMe swap) */
  vs_mem mem;               /* its memory */
  vs_mem managed;           /* its CUDA managed memory (paged optimizer
                               states): outside the allocator and the fit,
                               since its pages can move to the host */
  vs_alloc *alloc;          /* caching-allocator emulation; NULL = exact */
  uint32_t *live_blocks;    /* [program buffer] its allocator block while
                               live, VS_ALLOC_NONE otherwise (caching) */
  vs_inherited *inherited;  /* an inherited cache's live buffers in the
                               order the earlier run made them
                               (vs_rank_inherit); NULL: none */
  size_t n_inherited;       /* how many */
  size_t inherit_from;      /* the first not taken over yet */
  uint32_t *lifetimes;      /* [program buffer] with
                               vs_rank_record_lifetimes: while buffer b is
                               live, the number of the GPU memory effect
                               that allocated it; once freed, the peak
                               effect it was live at (or 0) with the top
                               bit set; 0 before it is allocated */
  uint32_t gpu_effects;     /* GPU memory effects so far (numbered from 1;
                               counted with lifetimes) */
  uint32_t peak_effect;     /* the effect after which allocated memory first
                               reached its peak (mem.peak_allocated_bytes) */
  vs_mem_event *timeline;   /* recorded when asked */
  size_t n_timeline, cap_timeline;
  vs_op_span *spans;        /* recorded when asked */
  size_t n_spans, cap_spans;
  const vs_node_share *shares; /* where its host and NVMe bytes count (not
                               owned); none: the program places nothing
                               off the GPU */
  uint32_t n_shares;
} vs_rank;

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
 * (its own arrays): the same outcome, events counted for every slot, in
 * the time of one slot and the copies. VS_ENOMEM when recording runs
 * out of host memory; VS_EINPUT with a message if a program deadlocks or
 * frees memory it never allocated (both are schedule bugs), an op names
 * a resource that opts does not describe, or a buffer off the GPU belongs
 * to a rank without shares. */
int vs_engine_run(vs_rank *ranks, size_t n_ranks, const vs_engine_opts *opts,
                  vs_engine_stats *stats, vs_error *err);

#endif

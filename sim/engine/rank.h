/* rank.h - a simulated rank's state and the node memories ranks share:
 * what the engine (engine.h) runs and its steady-state watcher
 * (steady.h) reads. Plain types; the functions are engine.h's. */
#ifndef VS_RANK_H
#define VS_RANK_H

#include "alloc.h"
#include "memory.h"
#include "resource_kinds.h"
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

/* What a stream's next op waited for when the engine last found it not
 * ready: a dependency on stream `stream` of simulated rank `rank`, ended
 * once that stream has ended `ended` ops (0: nothing noted). Ops only
 * end, so while that stream has ended fewer the op is still not ready,
 * which the engine then knows without reading the op (engine.c, ready). */
typedef struct vs_stream_wait {
  uint32_t rank;
  uint32_t stream;
  size_t ended;
} vs_stream_wait;

/* How long a stream's op waited for an op of another stage once ready on
 * its own rank (its own dependencies ended, its stream idle): the other
 * member of a collective issuing it. Noted by the engine (engine.c,
 * ready) for the op running or last run on the stream. */
typedef struct vs_join_wait {
  uint64_t from_ns; /* when it was first found so */
  uint64_t to_ns;   /* when it started; from_ns: it did not wait */
  bool open;        /* it waits now (to_ns not yet known) */
} vs_join_wait;

typedef struct vs_rank {
  uint32_t id;              /* global rank number */
  int stage, dp_rank, tp_rank;
  int cp_rank;              /* its index in its context-parallel group */
  uint32_t slot;            /* index among the simulated ranks of its stage;
                               its pipeline peers share the slot */
  vs_step step;             /* the step its run is: it applies the
                               program's effects of that step
                               (vs_effect_applies) */
  const vs_program *prog;   /* its stage's program (not owned) */
  size_t next[VS_STREAM_N]; /* next op to start, per stream */
  size_t done[VS_STREAM_N]; /* ops ended, per stream */
  bool busy[VS_STREAM_N];   /* a stream is running an op */
  vs_stream_wait waits[VS_STREAM_N]; /* why each stream's next op was
                               not ready when last looked at */
  vs_join_wait joined[VS_STREAM_N];  /* each stream's op's wait for
                                another stage, once ready here */
  uint64_t end_ns;          /* when its last op ended */
  uint64_t idle_since[VS_STREAM_N]; /* when each stream last went idle */
  uint64_t wait_p2p_ns;     /* compute stream idle waiting on the pipeline
                               (on a pipeline transfer, or on an op while
                               it waited for another stage: joined) */
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
  vs_mem_event *managed_timeline; /* its managed memory's changes,
                               recorded with the timeline (allocated_bytes:
                               managed bytes after; reserved_bytes 0) */
  size_t n_managed_timeline, cap_managed_timeline;
  vs_op_span *spans;        /* recorded when asked */
  size_t n_spans, cap_spans;
  bool twin_records;            /* timeline, managed_timeline and spans are
                                   its twin's (a rank of an earlier slot whose
                                   run it copies, vs_engine_run), read-only
                                   and not freed with it */
  uint32_t res_users[VS_RES_N]; /* users it counts for on its instance of
                               each resource kind (vs_resource_users);
                               0 = 1 */
  const vs_node_share *shares; /* where its host and NVMe bytes count (not
                               owned); none: the program places nothing
                               off the GPU */
  uint32_t n_shares;
} vs_rank;

#endif

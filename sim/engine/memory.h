/* memory.h - one simulated GPU's memory, by category, moment by moment.
 *
 * The tracker owns the per-category byte counts of one rank, the allocator's
 * allocated and reserved totals, their peaks and the op and time of each
 * peak, and the first out-of-memory. Framework memory (CUDA context,
 * NCCL) lives outside the allocator: it counts towards the capacity but not
 * towards allocated or reserved, as on real hardware.
 * Invariant (vs_mem_check): the allocator categories sum to allocated,
 * reserved >= allocated, peaks >= current values. */
#ifndef VS_MEMORY_H
#define VS_MEMORY_H

#include "category.h"
#include "error.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct vs_oom {
  bool happened;            /* an allocation exceeded the capacity */
  uint32_t op;              /* program op that asked */
  uint64_t t_ns;            /* when */
  uint64_t requested_bytes; /* size of the allocation that failed */
  uint64_t in_use_bytes;    /* reserved + framework before it */
  uint64_t allocated_bytes; /* allocated before it */
  uint64_t reserved_bytes;  /* reserved before it */
  int category;             /* category of the request */
  bool earlier_run;         /* it happened in an earlier run of the rank's
                               job (the first training step), carried over
                               to a run that fitted (vs_sim_run) */
} vs_oom;

typedef struct vs_mem {
  uint64_t capacity_bytes;          /* GPU memory */
  uint64_t by_cat[VS_CAT_N];        /* current bytes per category */
  uint64_t asked_by_cat[VS_CAT_N];  /* what the live allocations asked for,
                                       per category: by_cat less what an
                                       allocator that decides its blocks
                                       (the caching one) rounded them up
                                       to; by_cat itself without one */
  uint64_t allocated_bytes;         /* sum of allocator categories */
  uint64_t reserved_bytes;          /* allocator segments (>= allocated) */
  uint64_t peak_allocated_bytes;    /* max of allocated */
  uint64_t peak_reserved_bytes;     /* max of reserved */
  uint64_t at_peak[VS_CAT_N];       /* by_cat when allocated peaked */
  uint64_t reserved_at_peak_bytes;  /* reserved when allocated peaked */
  uint64_t peak_t_ns;               /* when allocated peaked (first time) */
  uint32_t peak_op;                 /* op during which it peaked */
  uint64_t peak_used_bytes;         /* max of reserved + framework */
  vs_oom oom;                       /* first out-of-memory, if any */
} vs_mem;

/* Empty tracker for a GPU of capacity_bytes holding framework_bytes. */
void vs_mem_init(vs_mem *m, uint64_t capacity_bytes, uint64_t framework_bytes);

/* Allocates bytes of category during op at t_ns (exact allocator: reserved
 * follows allocated). Records the first allocation that exceeds capacity as
 * the OOM and goes on, so the report can show by how much. VS_ELIMIT on
 * counter overflow. O(1). */
int vs_mem_alloc(vs_mem *m, int category, uint64_t bytes, uint32_t op,
                 uint64_t t_ns);

/* Frees bytes of category. VS_EINPUT if more than held (a schedule bug). */
int vs_mem_free(vs_mem *m, int category, uint64_t bytes);

/* The same for an allocator that decides reserved memory itself (the
 * caching allocator): `bytes` is the block it handed out (what it counts as
 * allocated), reserved_bytes its reserved total afterwards, `failed` whether
 * it could not fit the request of requested_bytes (a simulated OOM). A
 * free gives back the block's `bytes` and the requested_bytes it was
 * handed out for. */
int vs_mem_record_alloc(vs_mem *m, int category, uint64_t bytes,
                        uint64_t requested_bytes, uint64_t reserved_bytes,
                        bool failed, uint32_t op, uint64_t t_ns);
int vs_mem_record_free(vs_mem *m, int category, uint64_t bytes,
                       uint64_t requested_bytes, uint64_t reserved_bytes);

/* Whether m held everything: no allocation failed and its peak use
 * (reserved + framework) stayed within the capacity. */
bool vs_mem_fits(const vs_mem *m);

/* Bytes the device has in use: reserved + framework. */
uint64_t vs_mem_used(const vs_mem *m);

/* The fragmentation a peak shows: peak reserved - peak allocated, so that
 * the categories at the allocated peak (at_peak), the framework's bytes
 * and it add up to peak_used_bytes to the byte. Where reserved peaks after
 * allocated (the cache grows later in the step), that growth is in it. */
uint64_t vs_mem_fragmentation(const vs_mem *m);

/* The capacity left above a peak of `peak` bytes on a GPU of `capacity`:
 * 0 where the peak reaches it. */
uint64_t vs_mem_headroom(uint64_t capacity, uint64_t peak);

/* Checks the invariants above; 0 or VS_EINPUT with a description in err. */
int vs_mem_check(const vs_mem *m, vs_error *err);

#endif

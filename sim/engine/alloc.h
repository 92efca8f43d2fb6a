/* alloc.h - an emulation of PyTorch's CUDA caching allocator
 * (c10/cuda/CUDACachingAllocator.cpp) for one simulated GPU.
 *
 * It owns segments (what cudaMalloc returned, or the pages an expandable
 * segment has mapped) and the blocks that tile them, and it keeps, per
 * stream and per pool (small: requests <= 1 MiB; large: the rest), the free
 * blocks sorted by (size, address) for best-fit search. Rules, as PyTorch:
 * requests round up to 512 B (or to power-of-2 divisions); a small request
 * gets a 2 MiB segment, a 1-10 MiB one a 20 MiB segment, a larger one its
 * size rounded to 2 MiB; a block is split when the remainder is >= 512 B
 * (small) or > 1 MiB (large, and only below max_split_size); freed blocks
 * merge with free neighbours; when a new segment does not fit the device,
 * every cached free segment is released and the cudaMalloc retried once.
 * With expandable segments each (stream, pool) has one segment that maps
 * pages (2 MiB small, 20 MiB large) on demand and unmaps free pages on
 * release.
 * Invariants (vs_alloc_check): the blocks of a segment tile it exactly, in
 * address order, without overlap; a free block is in exactly one free set;
 * allocated = sum of allocated blocks; reserved = mapped segment bytes >=
 * allocated. No simulated byte is host memory: addresses are virtual. */
#ifndef VS_ALLOC_H
#define VS_ALLOC_H

#include "error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VS_ALLOC_STREAMS 8  /* streams with pools of their own */
#define VS_ALLOC_NONE UINT32_MAX

typedef struct vs_alloc_config {
  uint64_t capacity_bytes;       /* device memory */
  uint64_t outside_bytes;        /* held outside the allocator (context...) */
  bool expandable_segments;      /* PYTORCH_CUDA_ALLOC_CONF expandable_segments */
  uint64_t max_split_bytes;      /* max_split_size_mb; 0 = unlimited */
  uint32_t roundup_power2_divisions; /* 0 or 1 = plain 512 B rounding */
} vs_alloc_config;

typedef enum { VS_POOL_SMALL, VS_POOL_LARGE, VS_POOL_N } vs_pool_kind;

typedef struct vs_alloc_block {
  uint64_t addr;        /* virtual address */
  uint64_t size;        /* bytes the block spans */
  uint64_t requested;   /* bytes asked for (0 when free) */
  uint32_t prev, next;  /* neighbours in the segment, VS_ALLOC_NONE at ends */
  uint32_t segment;     /* owning segment */
  bool allocated;       /* in use */
  bool mapped;          /* backed by memory (always, unless expandable) */
} vs_alloc_block;

typedef struct vs_alloc_segment {
  uint64_t addr;        /* base address */
  uint64_t size;        /* bytes of address space it spans */
  uint32_t first;       /* its lowest block */
  uint8_t pool;         /* vs_pool_kind */
  uint8_t stream;       /* stream whose pool it serves */
  bool expandable;      /* maps pages on demand */
  bool live;            /* not yet released (cudaFree) */
} vs_alloc_segment;

/* The free blocks of one (stream, pool), sorted by (size, addr): one
 * array while the set is small (blocks), a list of sorted chunks once it
 * is not (chunks non-NULL; alloc.c, "Free sets"). */
typedef struct vs_free_chunk vs_free_chunk;
typedef struct vs_free_set {
  uint32_t *blocks;     /* small: the free block indices, sorted */
  size_t n, cap;        /* n: blocks in the set, either form */
  vs_free_chunk **chunks; /* large: chunks in order, none empty */
  size_t n_chunks, cap_chunks;
} vs_free_set;

typedef struct vs_alloc_stats {
  uint64_t allocated_bytes[VS_POOL_N];  /* now, per pool */
  uint64_t reserved_bytes[VS_POOL_N];
  uint64_t peak_allocated_bytes[VS_POOL_N];
  uint64_t peak_reserved_bytes[VS_POOL_N];
  uint64_t n_cuda_malloc;    /* segments created or pages mapped */
  uint64_t n_cuda_free;      /* segments released or pages unmapped */
  uint64_t n_retries;        /* cudaMalloc failures rescued by releasing */
  uint64_t n_ooms;           /* failures not rescued */
} vs_alloc_stats;

typedef struct vs_alloc {
  vs_alloc_config cfg;
  vs_alloc_block *blocks;   /* all blocks; recycled through free_slots */
  size_t n_blocks, cap_blocks;
  uint32_t *free_slots;     /* unused entries of blocks[] */
  size_t n_free_slots, cap_free_slots;
  vs_alloc_segment *segments;
  size_t n_segments, cap_segments;
  vs_free_set pools[VS_ALLOC_STREAMS][VS_POOL_N];
  uint32_t expandable[VS_ALLOC_STREAMS][VS_POOL_N]; /* segment or NONE */
  uint64_t next_addr;       /* address space handed out so far */
  uint64_t allocated_bytes; /* sum of allocated block sizes */
  uint64_t reserved_bytes;  /* sum of mapped segment bytes */
  vs_alloc_stats stats;
} vs_alloc;

/* Outcome of one vs_alloc_malloc. */
typedef struct vs_alloc_result {
  uint32_t block;           /* the block handed out */
  uint64_t size;            /* its size (what memory_allocated counts) */
  bool oom;                 /* it did not fit even after the retry; the
                               emulation goes on past the capacity so the
                               report can show the whole step */
  bool retried;             /* cached segments were released first */
} vs_alloc_result;

/* Empty allocator. Allocates nothing until the first malloc. */
void vs_alloc_init(vs_alloc *a, const vs_alloc_config *cfg);
void vs_alloc_fini(vs_alloc *a);

/* dst becomes a copy of src that owns its own arrays (src unchanged).
 * VS_ENOMEM (dst then empty). O(blocks + segments). */
int vs_alloc_clone(vs_alloc *dst, const vs_alloc *src);

/* Sets a's per-pool peaks to their current values, as
 * torch.cuda.reset_peak_memory_stats() does (the counters stay). */
void vs_alloc_reset_peaks(vs_alloc *a);

/* The size PyTorch rounds a request to (512 B multiples, or power-of-2
 * divisions when configured). */
uint64_t vs_alloc_round(const vs_alloc_config *cfg, uint64_t size);

/* Allocates size bytes for stream (< VS_ALLOC_STREAMS). VS_ENOMEM if the
 * host runs out of memory; a simulated OOM is not an error (res->oom).
 * Amortised O(free blocks in the pool) at worst; O(log n) search. */
int vs_alloc_malloc(vs_alloc *a, uint64_t size, int stream,
                    vs_alloc_result *res);

/* Frees a block returned by vs_alloc_malloc; merges it with free
 * neighbours. VS_EINPUT if it is not an allocated block. */
int vs_alloc_free(vs_alloc *a, uint32_t block);

/* torch.cuda.empty_cache(): releases every cached free segment (and unmaps
 * free pages of expandable segments). */
void vs_alloc_empty_cache(vs_alloc *a);

/* Largest mapped free block of a pool, over all streams (0: none). */
uint64_t vs_alloc_largest_free(const vs_alloc *a, int pool);

/* Which blocks a count takes. */
typedef enum { VS_BLOCKS_ALL, VS_BLOCKS_IN_USE } vs_block_filter;

/* Live segments and blocks of a pool (blocks: all, or the allocated). */
size_t vs_alloc_count_segments(const vs_alloc *a, int pool);
size_t vs_alloc_count_blocks(const vs_alloc *a, int pool,
                             vs_block_filter filter);

/* Checks the invariants in the file comment. */
int vs_alloc_check(const vs_alloc *a, vs_error *err);

#endif

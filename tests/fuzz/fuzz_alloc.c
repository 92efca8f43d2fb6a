/* fuzz_alloc.c - libFuzzer target: the caching-allocator emulation
 * (sim/engine/alloc.c) under any sequence of mallocs, frees, clones and
 * cache releases. After every operation vs_alloc_check's invariants hold
 * (blocks tile their segments, every free block is in exactly one sorted
 * free set, the counters add up), and without expandable segments or
 * max_split_size every malloc hands out the best fit (the smallest free
 * block of its stream and pool that fits, the lowest address among
 * equals), found here by brute force (for single mallocs, not bulk
 * ones). Either failing aborts.
 *
 * Input: one byte of configuration (expandable segments, max_split_size,
 * roundup_power2_divisions, capacity), then operations of 4 bytes, a code
 * and three argument bytes. A bulk operation allocates up to 2,048 small
 * blocks of one size and frees every other one, so that a few bytes reach
 * the thousands of free blocks past which a free set keeps chunks. The
 * invariant walk and the brute force take time with the blocks, so a run
 * stops at MAX_OPS operations and MAX_LIVE live blocks. */
#include "alloc.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define MIB (1024ull * 1024ull)
#define MAX_OPS 1024
#define MAX_LIVE 16384
#define MAX_BULK 2048

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct run {
  vs_alloc a;
  uint32_t live[MAX_LIVE];
  size_t n_live;
  bool exact_best_fit; /* no expandable segments, no max_split_size */
} run;

static void check(const run *r, const char *after)
{
  vs_error err;
  vs_error_clear(&err);
  if (vs_alloc_check(&r->a, &err)) {
    fprintf(stderr, "fuzz_alloc: after %s: %s\n", after, err.msg);
    abort();
  }
}

/* The address best fit picks for a request of `rounded` bytes on stream's
 * pool, or false when no free block fits. */
static bool best_fit(const vs_alloc *a, uint64_t rounded, int stream,
                     uint64_t *addr)
{
  int pool = rounded <= MIB ? VS_POOL_SMALL : VS_POOL_LARGE;
  uint64_t best_size = 0;
  bool found = false;
  for (size_t s = 0; s < a->n_segments; s++) {
    const vs_alloc_segment *seg = &a->segments[s];
    if (!seg->live || seg->stream != stream || seg->pool != pool)
      continue;
    for (uint32_t b = seg->first; b != VS_ALLOC_NONE; b = a->blocks[b].next) {
      const vs_alloc_block *blk = &a->blocks[b];
      if (blk->allocated || blk->size < rounded)
        continue;
      if (!found || blk->size < best_size ||
          (blk->size == best_size && blk->addr < *addr)) {
        best_size = blk->size;
        *addr = blk->addr;
        found = true;
      }
    }
  }
  return found;
}

/* Whether do_malloc checks the block against the brute force (bulk
 * operations do not: it walks every block). */
typedef enum { UNCHECKED, CHECKED } fit_check;

/* Allocates `bytes` on stream; the block joins the live ones. */
static void do_malloc(run *r, uint64_t bytes, int stream, fit_check fc)
{
  uint64_t want = 0;
  bool fits;
  vs_alloc_result res;
  if (r->n_live == MAX_LIVE)
    return;
  fits = fc == CHECKED && r->exact_best_fit &&
         best_fit(&r->a, vs_alloc_round(&r->a.cfg, bytes), stream, &want);
  if (vs_alloc_malloc(&r->a, bytes, stream, &res))
    abort(); /* only the host's memory can fail it */
  if (fits && r->a.blocks[res.block].addr != want) {
    fprintf(stderr, "fuzz_alloc: %llu bytes got address %llu, best fit %llu\n",
            (unsigned long long)bytes,
            (unsigned long long)r->a.blocks[res.block].addr,
            (unsigned long long)want);
    abort();
  }
  r->live[r->n_live++] = res.block;
}

static void do_free(run *r, size_t i)
{
  if (vs_alloc_free(&r->a, r->live[i]))
    abort();
  r->live[i] = r->live[--r->n_live];
}

/* count blocks of `bytes`, then every other one of them freed. */
static void do_bulk(run *r, size_t count, uint64_t bytes)
{
  size_t first = r->n_live;
  for (size_t i = 0; i < count && r->n_live < MAX_LIVE; i++)
    do_malloc(r, bytes, 0, UNCHECKED);
  for (size_t i = r->n_live; i-- > first;)
    if ((i - first) % 2)
      do_free(r, i);
}

/* The allocator goes on as a copy of itself (block indices unchanged). */
static void do_clone(run *r)
{
  vs_alloc copy;
  if (vs_alloc_clone(&copy, &r->a))
    abort();
  vs_alloc_fini(&r->a);
  r->a = copy;
}

static void apply(run *r, const uint8_t *op)
{
  unsigned arg = (unsigned)op[1] << 8 | op[2];
  switch (op[0] % 5) {
  case 0: { /* 1 B to 128 MiB */
    uint64_t unit = 1ull << (op[1] % 28);
    do_malloc(r, unit + (unit * op[2] >> 8), op[3] & 1, CHECKED);
    break;
  }
  case 1:
    if (r->n_live)
      do_free(r, arg % r->n_live);
    break;
  case 2:
    do_bulk(r, 1 + arg % MAX_BULK, 512 * (1 + op[3] % 16));
    break;
  case 3:
    do_clone(r);
    break;
  default:
    vs_alloc_empty_cache(&r->a);
    break;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  static run r; /* large */
  vs_alloc_config cfg = {0};
  size_t n_ops;
  if (size < 1)
    return 0;
  cfg.capacity_bytes = (1024 * MIB) << (data[0] >> 6);
  cfg.expandable_segments = data[0] & 1;
  cfg.max_split_bytes = data[0] & 2 ? 16 * MIB : 0;
  cfg.roundup_power2_divisions = data[0] & 4 ? 4 : 0;
  r.exact_best_fit = !cfg.expandable_segments && !cfg.max_split_bytes;
  r.n_live = 0;
  vs_alloc_init(&r.a, &cfg);
  n_ops = (size - 1) / 4 < MAX_OPS ? (size - 1) / 4 : MAX_OPS;
  for (size_t i = 0; i < n_ops; i++) {
    apply(&r, data + 1 + 4 * i);
    check(&r, "an operation");
  }
  while (r.n_live)
    do_free(&r, r.n_live - 1);
  vs_alloc_empty_cache(&r.a);
  check(&r, "freeing everything");
  if (r.a.allocated_bytes || r.a.reserved_bytes)
    abort(); /* every segment went back */
  vs_alloc_fini(&r.a);
  return 0;
}

/* alloc_test.c - the caching-allocator emulation against the rules of
 * PyTorch's CUDACachingAllocator.cpp (shared/reference/README.md section 4),
 * scenario by scenario, each layout worked out by hand in its comment. */
#include "alloc.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdint.h>
#include <string.h>

#define KIB (1024ull)
#define MIB (1024ull * 1024ull)

static vs_alloc_config config(uint64_t capacity, bool expandable)
{
  vs_alloc_config c = {capacity, 0, expandable, 0, 0};
  return c;
}

static void check(const vs_alloc *a)
{
  vs_error err;
  vs_error_clear(&err);
  if (vs_alloc_check(a, &err))
    fail_msg("%s", err.msg);
}

/* Allocates and returns the block; asserts it did not OOM. */
static uint32_t take(vs_alloc *a, uint64_t size, int stream)
{
  vs_alloc_result res;
  assert_int_equal(vs_alloc_malloc(a, size, stream, &res), 0);
  assert_false(res.oom);
  check(a);
  return res.block;
}

/* take() without the invariant walk, for allocators of thousands of
 * blocks. */
static uint32_t take_quietly(vs_alloc *a, uint64_t size)
{
  vs_alloc_result res;
  assert_int_equal(vs_alloc_malloc(a, size, 0, &res), 0);
  assert_false(res.oom);
  return res.block;
}

static void give(vs_alloc *a, uint32_t b)
{
  assert_int_equal(vs_alloc_free(a, b), 0);
  check(a);
}

/* kMinBlockSize: 100 B rounds to 512 B; a small request (<= 1 MiB) is
 * served from a 2 MiB small-pool segment (kSmallBuffer), split because the
 * remainder (2 MiB - 512 B) is >= 512 B. */
static void test_small_request_rounds_and_splits(void **state)
{
  vs_alloc a;
  vs_alloc_config c = config(80ull << 30, false);
  (void)state;
  uint32_t b;
  vs_alloc_init(&a, &c);
  b = take(&a, 100, 0);
  assert_int_equal(a.blocks[b].size, 512);
  assert_int_equal(a.allocated_bytes, 512);
  assert_int_equal(a.reserved_bytes, 2 * MIB);
  assert_int_equal(vs_alloc_count_segments(&a, VS_POOL_SMALL), 1);
  assert_int_equal(vs_alloc_count_blocks(&a, VS_POOL_SMALL, VS_BLOCKS_ALL), 2);
  assert_int_equal(vs_alloc_largest_free(&a, VS_POOL_SMALL), 2 * MIB - 512);
  vs_alloc_fini(&a);
}

/* Two 1 MiB requests share one 2 MiB segment (the second takes the 1 MiB
 * remainder exactly); a third request needs a second segment. */
static void test_small_pool_shares_segments(void **state)
{
  vs_alloc a;
  vs_alloc_config c = config(80ull << 30, false);
  (void)state;
  vs_alloc_init(&a, &c);
  take(&a, MIB, 0);
  take(&a, MIB, 0);
  assert_int_equal(a.reserved_bytes, 2 * MIB);
  assert_int_equal(vs_alloc_count_blocks(&a, VS_POOL_SMALL, VS_BLOCKS_ALL), 2);
  take(&a, 1, 0);
  assert_int_equal(a.reserved_bytes, 4 * MIB);
  vs_alloc_fini(&a);
}

/* 1-10 MiB requests get 20 MiB segments (kLargeBuffer), split when more
 * than 1 MiB remains; a 12 MiB request gets its own 12 MiB segment (size
 * rounded to 2 MiB, kRoundLarge); 11 MiB rounds to a 12 MiB segment whose
 * 1 MiB remainder is not split (large pool splits only above 1 MiB), so the
 * block, and memory_allocated, count 12 MiB. */
static void test_large_pool_segment_sizes(void **state)
{
  vs_alloc a;
  vs_alloc_config c = config(80ull << 30, false);
  uint32_t b;
  (void)state;
  vs_alloc_init(&a, &c);
  take(&a, 5 * MIB, 0);
  assert_int_equal(a.reserved_bytes, 20 * MIB);
  take(&a, 5 * MIB, 0); /* from the 15 MiB remainder */
  assert_int_equal(a.reserved_bytes, 20 * MIB);
  take(&a, 12 * MIB, 0);
  assert_int_equal(a.reserved_bytes, 32 * MIB);
  b = take(&a, 11 * MIB, 0);
  assert_int_equal(a.blocks[b].size, 12 * MIB);
  assert_int_equal(a.reserved_bytes, 44 * MIB);
  assert_int_equal(a.allocated_bytes, 5 * MIB + 5 * MIB + 12 * MIB + 12 * MIB);
  /* a small request never comes from the large pool */
  take(&a, 4 * KIB, 0);
  assert_int_equal(vs_alloc_count_segments(&a, VS_POOL_SMALL), 1);
  vs_alloc_fini(&a);
}

/* Freed blocks merge with free neighbours: in a 20 MiB segment
 * [A 5][B 5][C 5][free 5], freeing C merges it with the tail (10 MiB),
 * freeing A leaves it alone (B is in use), freeing B joins all: one block. */
static void test_free_merges_neighbours(void **state)
{
  vs_alloc a;
  vs_alloc_config c = config(80ull << 30, false);
  uint32_t x, y, z;
  (void)state;
  vs_alloc_init(&a, &c);
  x = take(&a, 5 * MIB, 0);
  y = take(&a, 5 * MIB, 0);
  z = take(&a, 5 * MIB, 0);
  give(&a, z);
  assert_int_equal(vs_alloc_largest_free(&a, VS_POOL_LARGE), 10 * MIB);
  assert_int_equal(vs_alloc_count_blocks(&a, VS_POOL_LARGE, VS_BLOCKS_ALL), 3);
  give(&a, x);
  assert_int_equal(vs_alloc_count_blocks(&a, VS_POOL_LARGE, VS_BLOCKS_ALL), 3);
  give(&a, y);
  assert_int_equal(vs_alloc_count_blocks(&a, VS_POOL_LARGE, VS_BLOCKS_ALL), 1);
  assert_int_equal(vs_alloc_largest_free(&a, VS_POOL_LARGE), 20 * MIB);
  assert_int_equal(a.allocated_bytes, 0);
  assert_int_equal(a.reserved_bytes, 20 * MIB); /* cached, not released */
  vs_alloc_fini(&a);
}

/* Best fit: a 20 MiB segment laid out [a 6][x 2][b 8][y 2][free 2]; with a
 * and b freed, a 5 MiB request takes the 6 MiB block (the smallest that
 * fits), not the 8 MiB one, and does not split its 1 MiB remainder. */
static void test_best_fit(void **state)
{
  vs_alloc a;
  vs_alloc_config c = config(80ull << 30, false);
  uint32_t six, eight, got;
  uint64_t six_addr;
  (void)state;
  vs_alloc_init(&a, &c);
  six = take(&a, 6 * MIB, 0);
  take(&a, 2 * MIB, 0);
  eight = take(&a, 8 * MIB, 0);
  take(&a, 2 * MIB, 0);
  assert_int_equal(a.reserved_bytes, 20 * MIB);
  six_addr = a.blocks[six].addr;
  give(&a, six);
  give(&a, eight);
  got = take(&a, 5 * MIB, 0);
  assert_int_equal(a.blocks[got].addr, six_addr);
  assert_int_equal(a.blocks[got].size, 6 * MIB);
  vs_alloc_fini(&a);
}

/* Pools are per stream: a block cached by stream 1 is not reused by
 * stream 0. */
static void test_pools_are_per_stream(void **state)
{
  vs_alloc a;
  vs_alloc_config c = config(80ull << 30, false);
  (void)state;
  vs_alloc_init(&a, &c);
  give(&a, take(&a, 5 * MIB, 1));
  take(&a, 5 * MIB, 0);
  assert_int_equal(a.reserved_bytes, 40 * MIB);
  vs_alloc_fini(&a);
}

/* The OOM path: with 80 MiB of device, a cached free 30 MiB segment and a
 * 60 MiB request, cudaMalloc(60 MiB) would exceed the device (30 + 60 > 80);
 * the allocator releases the cached segment and retries, which fits. */
static void test_oom_rescued_by_retry(void **state)
{
  vs_alloc a;
  vs_alloc_config c = config(80 * MIB, false);
  vs_alloc_result res;
  (void)state;
  vs_alloc_init(&a, &c);
  give(&a, take(&a, 30 * MIB, 0));
  assert_int_equal(a.reserved_bytes, 30 * MIB);
  assert_int_equal(vs_alloc_malloc(&a, 60 * MIB, 0, &res), 0);
  assert_true(res.retried);
  assert_false(res.oom);
  assert_int_equal(a.reserved_bytes, 60 * MIB);
  assert_int_equal(a.stats.n_retries, 1);
  assert_int_equal(a.stats.n_cuda_free, 1);
  check(&a);
  /* and a request that cannot fit even after the retry is an OOM */
  assert_int_equal(vs_alloc_malloc(&a, 30 * MIB, 0, &res), 0);
  assert_true(res.oom);
  assert_int_equal(a.stats.n_ooms, 1);
  vs_alloc_fini(&a);
}

/* Fragmentation: on a 100 MiB device, eight 12 MiB blocks (eight 12 MiB
 * segments, 96 MiB) are freed and cached; eight 7 MiB requests each take a
 * cached 12 MiB block (best fit: the 5 MiB remainders are too small) and
 * split it, leaving [7 used][5 free] in every segment. 40 MiB are free, yet
 * a 20 MiB request fails: no free block is that large, no segment is
 * entirely free to release, and a new 20 MiB segment does not fit
 * (96 + 20 > 100). With expandable segments the same sequence packs into
 * one segment of 20 MiB pages (100 MiB mapped), the 7 MiB blocks land at
 * its start, and the 20 MiB request fits in the 44 MiB free tail. */
static void fragment(vs_alloc *a)
{
  uint32_t big[8];
  for (int i = 0; i < 8; i++)
    big[i] = take(a, 12 * MIB, 0);
  for (int i = 0; i < 8; i++)
    give(a, big[i]);
  for (int i = 0; i < 8; i++)
    take(a, 7 * MIB, 0);
}

static void test_fragmentation_oom_and_expandable_segments(void **state)
{
  vs_alloc a;
  vs_alloc_config plain = config(100 * MIB, false);
  vs_alloc_config expandable = config(100 * MIB, true);
  vs_alloc_result res;
  (void)state;
  vs_alloc_init(&a, &plain);
  fragment(&a);
  assert_int_equal(a.allocated_bytes, 56 * MIB);
  assert_int_equal(a.reserved_bytes, 96 * MIB);
  assert_int_equal(vs_alloc_largest_free(&a, VS_POOL_LARGE), 5 * MIB);
  assert_int_equal(vs_alloc_malloc(&a, 20 * MIB, 0, &res), 0);
  assert_true(res.retried);
  assert_true(res.oom); /* fragmentation, not total bytes */
  vs_alloc_fini(&a);

  vs_alloc_init(&a, &expandable);
  fragment(&a);
  assert_int_equal(a.allocated_bytes, 56 * MIB);
  assert_int_equal(a.reserved_bytes, 100 * MIB); /* 5 pages of 20 MiB */
  assert_int_equal(vs_alloc_count_segments(&a, VS_POOL_LARGE), 1);
  assert_int_equal(vs_alloc_malloc(&a, 20 * MIB, 0, &res), 0);
  assert_false(res.oom);
  assert_false(res.retried);
  check(&a);
  vs_alloc_fini(&a);
}

/* Expandable segments unmap whole free pages on release and map them again
 * where they are needed: free everything, empty the cache: nothing mapped. */
static void test_expandable_release_unmaps_pages(void **state)
{
  vs_alloc a;
  vs_alloc_config c = config(1ull << 30, true);
  uint32_t x, y;
  (void)state;
  vs_alloc_init(&a, &c);
  x = take(&a, 30 * MIB, 0); /* maps 2 pages: 40 MiB */
  assert_int_equal(a.reserved_bytes, 40 * MIB);
  y = take(&a, 30 * MIB, 0); /* 10 MiB left mapped + 1 more page */
  assert_int_equal(a.reserved_bytes, 60 * MIB);
  give(&a, x);
  vs_alloc_empty_cache(&a);
  check(&a);
  /* x spanned [0, 30): page [0, 20) is whole and unmapped; [20, 30) shares
   * a page with y and stays mapped */
  assert_int_equal(a.reserved_bytes, 40 * MIB);
  give(&a, y);
  vs_alloc_empty_cache(&a);
  check(&a);
  assert_int_equal(a.reserved_bytes, 0);
  vs_alloc_fini(&a);
}

/* With expandable segments a large-pool block splits whenever 512 bytes
 * (kMinBlockSize) remain, where plain segments keep a remainder of 1 MiB
 * or less inside the block (CUDACachingAllocator.cpp should_split): 11
 * MiB maps one 20 MiB page, and 8.5 MiB of the 9 MiB left is a block of
 * 8.5 MiB, the last 512 KiB free. */
static void test_expandable_splits_small_remainders(void **state)
{
  vs_alloc a;
  vs_alloc_config c = config(1ull << 30, true);
  uint32_t x;
  (void)state;
  vs_alloc_init(&a, &c);
  take(&a, 11 * MIB, 0);
  x = take(&a, 8 * MIB + 512 * KIB, 0);
  assert_int_equal(a.blocks[x].size, 8 * MIB + 512 * KIB);
  assert_int_equal(a.allocated_bytes, 19 * MIB + 512 * KIB);
  assert_int_equal(a.reserved_bytes, 20 * MIB);
  assert_int_equal(vs_alloc_largest_free(&a, VS_POOL_LARGE), 512 * KIB);
  vs_alloc_fini(&a);
}

/* max_split_size: blocks at least that large are not split and small
 * requests do not take them; a large request does not take a block 20 MiB
 * (kLargeBuffer) or more bigger than itself. */
static void test_max_split_size(void **state)
{
  vs_alloc a;
  vs_alloc_config c = config(1ull << 30, false);
  uint32_t b;
  (void)state;
  c.max_split_bytes = 16 * MIB;
  vs_alloc_init(&a, &c);
  give(&a, take(&a, 40 * MIB, 0));
  take(&a, 5 * MIB, 0); /* refuses the cached 40 MiB block */
  assert_int_equal(a.reserved_bytes, 60 * MIB);
  b = take(&a, 18 * MIB, 0); /* 40 >= 18 + 20: refused too */
  assert_int_equal(a.reserved_bytes, 78 * MIB);
  assert_int_equal(a.blocks[b].size, 18 * MIB);
  take(&a, 30 * MIB, 0); /* 40 < 30 + 20: takes it, unsplit */
  assert_int_equal(a.reserved_bytes, 78 * MIB);
  assert_int_equal(a.allocated_bytes, 5 * MIB + 18 * MIB + 40 * MIB);
  vs_alloc_fini(&a);
}

/* roundup_power2_divisions = 4: [2^k, 2^(k+1)) splits into 4 steps, so
 * 1200 MiB rounds to 1024 + 256 = 1280 MiB and 5000 B to 4096 + 1024; sizes
 * up to 512 * 4 B keep the 512 B rule; powers of 2 stay. */
static void test_roundup_power2_divisions(void **state)
{
  vs_alloc_config c = config(1ull << 30, false);
  (void)state;
  c.roundup_power2_divisions = 4;
  assert_int_equal(vs_alloc_round(&c, 1200 * MIB), 1280 * MIB);
  assert_int_equal(vs_alloc_round(&c, 5000), 5120);
  assert_int_equal(vs_alloc_round(&c, 1500), 1536);
  assert_int_equal(vs_alloc_round(&c, 4096), 4096);
  c.roundup_power2_divisions = 0;
  assert_int_equal(vs_alloc_round(&c, 1200 * MIB + 1), 1200 * MIB + 512);
  assert_int_equal(vs_alloc_round(&c, 0), 512);
}

/* Random alloc/free sequences (fixed seed) on two streams, with and
 * without expandable segments, on a device small enough to hit the retry
 * and OOM paths: after every step blocks tile their segments, free sets
 * match the free blocks, reserved >= allocated (vs_alloc_check). */
static uint64_t next_random(uint64_t *s)
{
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 33;
}

static void test_random_sequences_keep_invariants(void **state)
{
  (void)state;
  for (int expandable = 0; expandable < 2; expandable++) {
    vs_alloc a;
    vs_alloc_config c = config(512 * MIB, expandable);
    uint32_t live[256];
    size_t n = 0;
    uint64_t seed = 42;
    vs_alloc_init(&a, &c);
    for (int step = 0; step < 4000; step++) {
      if (n == 256 || (n > 0 && next_random(&seed) % 3 == 0)) {
        size_t i = next_random(&seed) % n;
        assert_int_equal(vs_alloc_free(&a, live[i]), 0);
        live[i] = live[--n];
      } else {
        vs_alloc_result res;
        uint64_t size = 1ull << (next_random(&seed) % 26); /* 1 B - 32 MiB */
        size += next_random(&seed) % size;
        assert_int_equal(vs_alloc_malloc(&a, size, (int)(next_random(&seed) % 2),
                                         &res), 0);
        assert_true(res.size >= size);
        live[n++] = res.block;
      }
      if (step % 97 == 0)
        vs_alloc_empty_cache(&a);
      check(&a);
    }
    while (n > 0)
      give(&a, live[--n]);
    vs_alloc_empty_cache(&a);
    assert_int_equal(a.allocated_bytes, 0);
    assert_int_equal(a.reserved_bytes, 0);
    vs_alloc_fini(&a);
  }
}

/* The free block best fit picks for `size` on stream 0's small pool, by
 * brute force over the segments: the smallest free block that fits, the
 * lowest address among equals; VS_ALLOC_NONE when none does. */
static uint64_t best_fit_addr(const vs_alloc *a, uint64_t size, bool *found)
{
  uint64_t rounded = vs_alloc_round(&a->cfg, size), best_size = 0, best = 0;
  *found = false;
  for (size_t s = 0; s < a->n_segments; s++) {
    const vs_alloc_segment *seg = &a->segments[s];
    if (!seg->live || seg->stream != 0 || seg->pool != VS_POOL_SMALL)
      continue;
    for (uint32_t b = seg->first; b != VS_ALLOC_NONE; b = a->blocks[b].next) {
      const vs_alloc_block *blk = &a->blocks[b];
      if (blk->allocated || blk->size < rounded)
        continue;
      if (!*found || blk->size < best_size ||
          (blk->size == best_size && blk->addr < best)) {
        best_size = blk->size;
        best = blk->addr;
        *found = true;
      }
    }
  }
  return best;
}

/* One malloc on both allocators (a clone and its source, fed the same
 * requests): both hand out the same block (a clone keeps the indices),
 * the one best fit predicts, or a new segment's when no free block fits. */
static uint32_t take_best_fit(vs_alloc *a, vs_alloc *twin, uint64_t size)
{
  bool found;
  uint64_t want = best_fit_addr(a, size, &found);
  size_t segments = a->n_segments;
  vs_alloc_result res, twin_res;
  assert_int_equal(vs_alloc_malloc(a, size, 0, &res), 0);
  assert_int_equal(vs_alloc_malloc(twin, size, 0, &twin_res), 0);
  assert_int_equal(res.block, twin_res.block);
  if (found)
    assert_int_equal(a->blocks[res.block].addr, want);
  else
    assert_true(a->blocks[res.block].segment >= segments);
  return res.block;
}

/* A pool with thousands of free blocks (per-tensor jobs leave them: every
 * other one of 24,000 small blocks freed, few merging) keeps its free
 * set in chunks; best fit, the invariants and a clone behave as with a
 * few blocks, through 3,000 random mallocs and frees and back to empty. */
static void test_large_free_sets_stay_best_fit(void **state)
{
  enum { N = 24000 };
  static uint32_t live[N];
  vs_alloc a, twin;
  vs_alloc_config c = config(4096 * MIB, false);
  uint64_t seed = 7;
  size_t n = 0;
  (void)state;
  vs_alloc_init(&a, &c);
  for (n = 0; n < N; n++)
    live[n] = take_quietly(&a, 512 * (1 + next_random(&seed) % 8));
  for (size_t i = 0; i < N / 2; i++) { /* every other block, in any order */
    size_t j = 2 * (i + next_random(&seed) % (N / 2 - i)) + 1, k = 2 * i + 1;
    uint32_t b = live[j];
    live[j] = live[k];
    live[k] = b;
    assert_int_equal(vs_alloc_free(&a, b), 0);
  }
  for (n = 0; n < N / 2; n++)
    live[n] = live[2 * n];
  check(&a);
  assert_non_null(a.pools[0][VS_POOL_SMALL].chunks);
  /* about 12,000 free blocks: past the 4,096 of one array, and its
   * chunks, half full then, have split */
  assert_true(a.pools[0][VS_POOL_SMALL].n > 4096);
  assert_int_equal(vs_alloc_clone(&twin, &a), 0);
  for (int step = 0; step < 3000; step++) {
    if (n == N || (n > 0 && next_random(&seed) % 2 == 0)) {
      size_t i = next_random(&seed) % n;
      assert_int_equal(vs_alloc_free(&a, live[i]), 0);
      assert_int_equal(vs_alloc_free(&twin, live[i]), 0);
      live[i] = live[--n];
    } else {
      uint64_t size = 512 * (1 + next_random(&seed) % 12); /* 0.5-6 KiB */
      live[n++] = take_best_fit(&a, &twin, size - next_random(&seed) % 512);
    }
    if (step % 250 == 0) {
      check(&a);
      check(&twin);
    }
  }
  while (n > 0) {
    n--;
    assert_int_equal(vs_alloc_free(&a, live[n]), 0);
    assert_int_equal(vs_alloc_free(&twin, live[n]), 0);
    if (n % 1000 == 0)
      check(&a);
  }
  assert_int_equal(a.pools[0][VS_POOL_SMALL].n, twin.pools[0][VS_POOL_SMALL].n);
  vs_alloc_empty_cache(&a);
  assert_int_equal(a.reserved_bytes, 0);
  assert_int_equal(a.pools[0][VS_POOL_SMALL].n, 0);
  check(&a);
  vs_alloc_fini(&a);
  vs_alloc_fini(&twin);
}

/* Frees every other one of n blocks (from the first), in order. */
static void free_every_other(vs_alloc *a, const uint32_t *blocks, size_t n)
{
  for (size_t i = 0; i < n; i += 2)
    assert_int_equal(vs_alloc_free(a, blocks[i]), 0);
}

/* A free set in chunks that empties (every free 512 B slot taken back)
 * takes blocks again; a clone of a set of 3,000 blocks, one array, turns
 * into chunks as its source would once it grows past 4,096. */
static void test_free_sets_empty_and_cloned(void **state)
{
  enum { N = 20000 };
  static uint32_t blocks[N];
  vs_alloc a, twin;
  vs_alloc_config c = config(4096 * MIB, false);
  const vs_free_set *fs = &a.pools[0][VS_POOL_SMALL];
  (void)state;
  vs_alloc_init(&a, &c);
  for (size_t i = 0; i < N; i++)
    blocks[i] = take_quietly(&a, 512);
  free_every_other(&a, blocks, N);
  assert_non_null(fs->chunks);
  while (fs->n > 0)
    take_quietly(&a, 512);
  check(&a);
  take_quietly(&a, 512); /* a new segment: its remainder goes in the set */
  assert_int_equal(fs->n, 1);
  check(&a);
  vs_alloc_fini(&a);

  vs_alloc_init(&a, &c);
  for (size_t i = 0; i < N; i++)
    blocks[i] = take_quietly(&a, 512);
  free_every_other(&a, blocks, 6000); /* 3,000 free, one array */
  assert_null(fs->chunks);
  assert_int_equal(vs_alloc_clone(&twin, &a), 0);
  free_every_other(&twin, blocks + 6000, 6000); /* 3,000 more */
  assert_non_null(twin.pools[0][VS_POOL_SMALL].chunks);
  check(&twin);
  check(&a);
  vs_alloc_fini(&twin);
  vs_alloc_fini(&a);
}

static void test_free_of_unknown_block_is_an_error(void **state)
{
  vs_alloc a;
  vs_alloc_config c = config(1ull << 30, false);
  uint32_t b;
  (void)state;
  vs_alloc_init(&a, &c);
  b = take(&a, 1000, 0);
  give(&a, b);
  assert_int_equal(vs_alloc_free(&a, b), VS_EINPUT); /* double free */
  assert_int_equal(vs_alloc_free(&a, 12345), VS_EINPUT);
  vs_alloc_fini(&a);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_small_request_rounds_and_splits),
      cmocka_unit_test(test_small_pool_shares_segments),
      cmocka_unit_test(test_large_pool_segment_sizes),
      cmocka_unit_test(test_free_merges_neighbours),
      cmocka_unit_test(test_best_fit),
      cmocka_unit_test(test_pools_are_per_stream),
      cmocka_unit_test(test_oom_rescued_by_retry),
      cmocka_unit_test(test_fragmentation_oom_and_expandable_segments),
      cmocka_unit_test(test_expandable_release_unmaps_pages),
      cmocka_unit_test(test_expandable_splits_small_remainders),
      cmocka_unit_test(test_max_split_size),
      cmocka_unit_test(test_roundup_power2_divisions),
      cmocka_unit_test(test_random_sequences_keep_invariants),
      cmocka_unit_test(test_large_free_sets_stay_best_fit),
      cmocka_unit_test(test_free_sets_empty_and_cloned),
      cmocka_unit_test(test_free_of_unknown_block_is_an_error),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

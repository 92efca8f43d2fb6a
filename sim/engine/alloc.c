/* alloc.c - caching-allocator emulation (see alloc.h). Constants and rules
 * follow c10/cuda/CUDACachingAllocator.cpp; the code is our own. */
#include "alloc.h"

#include "grow.h"
#include "units.h"

#include <stdlib.h>
#include <string.h>

#define NONE VS_ALLOC_NONE
#define MIB (1024ull * 1024ull)

enum {
  MIN_BLOCK = 512,                  /* kMinBlockSize: requests round to it */
};
static const uint64_t small_size = 1 * MIB;    /* kSmallSize: small pool */
static const uint64_t small_buffer = 2 * MIB;  /* kSmallBuffer: its segments */
static const uint64_t large_buffer = 20 * MIB; /* kLargeBuffer */
static const uint64_t min_large_alloc = 10 * MIB; /* kMinLargeAlloc */
static const uint64_t round_large = 2 * MIB;   /* kRoundLarge */
/* Address space an expandable segment reserves; pages map into it. */
static const uint64_t expandable_span = 1ull << 44;

/* ------------------------------------------------------------------------
 * Sizes
 * ------------------------------------------------------------------------ */

uint64_t vs_alloc_round(const vs_alloc_config *cfg, uint64_t size)
{
  uint32_t div = cfg->roundup_power2_divisions;
  if (size < MIN_BLOCK)
    return MIN_BLOCK;
  if (div > 1 && size > (uint64_t)MIN_BLOCK * div) {
    /* roundup_power2_next_division: split [2^k, 2^(k+1)) into div steps */
    uint64_t floor2 = 1ull << (63 - __builtin_clzll(size));
    uint64_t step = floor2 >> (31 - __builtin_clz(div));
    if (floor2 == size)
      return size;
    if (step == 0)
      return floor2 << 1;
    return (size & ~(step - 1)) == size ? size : (size & ~(step - 1)) + step;
  }
  return vs_div_ceil(size, MIN_BLOCK) * MIN_BLOCK;
}

static int pool_of(uint64_t rounded)
{
  return rounded <= small_size ? VS_POOL_SMALL : VS_POOL_LARGE;
}

/* cudaMalloc size for a request of `rounded` bytes (get_allocation_size). */
static uint64_t segment_size(uint64_t rounded)
{
  if (rounded <= small_size)
    return small_buffer;
  if (rounded < min_large_alloc)
    return large_buffer;
  return vs_div_ceil(rounded, round_large) * round_large;
}

static uint64_t page_size(int pool)
{
  return pool == VS_POOL_SMALL ? small_buffer : large_buffer;
}

/* ------------------------------------------------------------------------
 * Storage
 * ------------------------------------------------------------------------ */

static uint32_t new_block(vs_alloc *a)
{
  if (a->n_free_slots)
    return a->free_slots[--a->n_free_slots];
  if (!vs_grow((void **)&a->blocks, &a->cap_blocks, a->n_blocks + 1,
            sizeof *a->blocks))
    return NONE;
  return (uint32_t)a->n_blocks++;
}

static int drop_block(vs_alloc *a, uint32_t b)
{
  if (!vs_grow((void **)&a->free_slots, &a->cap_free_slots, a->n_free_slots + 1,
            sizeof *a->free_slots))
    return VS_ENOMEM;
  a->free_slots[a->n_free_slots++] = b;
  return 0;
}

static vs_free_set *set_of(vs_alloc *a, uint32_t b)
{
  const vs_alloc_segment *s = &a->segments[a->blocks[b].segment];
  return &a->pools[s->stream][s->pool];
}

/* (size, addr) order of the free sets. */
static bool before(const vs_alloc *a, uint32_t x, uint64_t size, uint64_t addr)
{
  const vs_alloc_block *b = &a->blocks[x];
  return b->size < size || (b->size == size && b->addr < addr);
}

static size_t lower_bound(const vs_alloc *a, const vs_free_set *fs,
                          uint64_t size, uint64_t addr)
{
  size_t lo = 0, hi = fs->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (before(a, fs->blocks[mid], size, addr))
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

static int set_insert(vs_alloc *a, uint32_t b)
{
  vs_free_set *fs = set_of(a, b);
  size_t pos;
  if (!vs_grow((void **)&fs->blocks, &fs->cap, fs->n + 1, sizeof *fs->blocks))
    return VS_ENOMEM;
  pos = lower_bound(a, fs, a->blocks[b].size, a->blocks[b].addr);
  memmove(&fs->blocks[pos + 1], &fs->blocks[pos],
          (fs->n - pos) * sizeof *fs->blocks);
  fs->blocks[pos] = b;
  fs->n++;
  return 0;
}

static void set_remove(vs_alloc *a, uint32_t b)
{
  vs_free_set *fs = set_of(a, b);
  size_t pos = lower_bound(a, fs, a->blocks[b].size, a->blocks[b].addr);
  if (pos < fs->n && fs->blocks[pos] == b) {
    memmove(&fs->blocks[pos], &fs->blocks[pos + 1],
            (fs->n - pos - 1) * sizeof *fs->blocks);
    fs->n--;
  }
}

/* Splits `size` bytes off the front of block b, which must be in no free
 * set (its size changes, and a set is ordered by size and address); the
 * rest becomes a new free block after it (same mapping state), in no set
 * either: the caller inserts both where they belong. */
static uint32_t split(vs_alloc *a, uint32_t b, uint64_t size)
{
  uint32_t r = new_block(a);
  vs_alloc_block *blk, *rest;
  if (r == NONE)
    return NONE;
  blk = &a->blocks[b];
  rest = &a->blocks[r];
  *rest = *blk;
  rest->addr = blk->addr + size;
  rest->size = blk->size - size;
  rest->allocated = false;
  rest->requested = 0;
  rest->prev = b;
  rest->next = blk->next;
  if (blk->next != NONE)
    a->blocks[blk->next].prev = r;
  blk->next = r;
  blk->size = size;
  return r;
}

/* ------------------------------------------------------------------------
 * Accounting
 * ------------------------------------------------------------------------ */

static void reserve(vs_alloc *a, int pool, int64_t delta)
{
  a->reserved_bytes = (uint64_t)((int64_t)a->reserved_bytes + delta);
  a->stats.reserved_bytes[pool] =
      (uint64_t)((int64_t)a->stats.reserved_bytes[pool] + delta);
  if (a->stats.reserved_bytes[pool] > a->stats.peak_reserved_bytes[pool])
    a->stats.peak_reserved_bytes[pool] = a->stats.reserved_bytes[pool];
}

static void account(vs_alloc *a, int pool, int64_t delta)
{
  a->allocated_bytes = (uint64_t)((int64_t)a->allocated_bytes + delta);
  a->stats.allocated_bytes[pool] =
      (uint64_t)((int64_t)a->stats.allocated_bytes[pool] + delta);
  if (a->stats.allocated_bytes[pool] > a->stats.peak_allocated_bytes[pool])
    a->stats.peak_allocated_bytes[pool] = a->stats.allocated_bytes[pool];
}

static bool fits_device(const vs_alloc *a, uint64_t more)
{
  return a->reserved_bytes + a->cfg.outside_bytes + more <= a->cfg.capacity_bytes;
}

/* ------------------------------------------------------------------------
 * Segments
 * ------------------------------------------------------------------------ */

static uint32_t new_segment(vs_alloc *a, int stream, int pool, uint64_t size,
                            bool expandable)
{
  uint32_t s, b;
  vs_alloc_segment *seg;
  if (!vs_grow((void **)&a->segments, &a->cap_segments, a->n_segments + 1,
            sizeof *a->segments) ||
      (b = new_block(a)) == NONE)
    return NONE;
  s = (uint32_t)a->n_segments++;
  seg = &a->segments[s];
  seg->addr = a->next_addr;
  seg->size = size;
  seg->first = b;
  seg->pool = (uint8_t)pool;
  seg->stream = (uint8_t)stream;
  seg->expandable = expandable;
  seg->live = true;
  /* leave a gap so that no two segments are ever adjacent */
  a->next_addr += size + small_buffer;
  a->blocks[b] = (vs_alloc_block){seg->addr, size, 0, NONE, NONE, s, false,
                                  !expandable};
  if (set_insert(a, b))
    return NONE;
  if (!expandable) {
    reserve(a, pool, (int64_t)size);
    a->stats.n_cuda_malloc++;
  }
  return b;
}

/* Maps the pages an allocation of `rounded` bytes needs at the start of the
 * unmapped free block b (expandable segments). If the block before b is
 * free and mapped, the allocation starts there and only the rest is mapped,
 * so blocks pack contiguously across pages (PyTorch treats such a run of
 * free blocks ending in unmapped memory as one candidate). Returns the
 * mapped free block to allocate from, or NONE if over capacity. */
static uint32_t map_pages(vs_alloc *a, uint32_t b, uint64_t rounded, bool force)
{
  int pool = a->segments[a->blocks[b].segment].pool;
  uint64_t page = page_size(pool), have = 0, need;
  uint32_t p = a->blocks[b].prev;

  if (p != NONE && !a->blocks[p].allocated && a->blocks[p].mapped &&
      a->blocks[p].size < rounded)
    have = a->blocks[p].size;
  else
    p = NONE;
  need = vs_div_ceil(rounded - have, page) * page;
  if (need > a->blocks[b].size)
    need = a->blocks[b].size;
  if (!force && !fits_device(a, need))
    return NONE;
  set_remove(a, b);
  if (need < a->blocks[b].size) {
    uint32_t r = split(a, b, need);
    if (r == NONE || set_insert(a, r))
      return NONE;
  }
  a->blocks[b].mapped = true;
  reserve(a, pool, (int64_t)need);
  a->stats.n_cuda_malloc++;
  if (p != NONE) { /* one free mapped block from p through the new pages */
    set_remove(a, p);
    a->blocks[p].size += a->blocks[b].size;
    a->blocks[p].next = a->blocks[b].next;
    if (a->blocks[b].next != NONE)
      a->blocks[a->blocks[b].next].prev = p;
    if (drop_block(a, b))
      return NONE;
    b = p;
  }
  return set_insert(a, b) == 0 ? b : NONE;
}

/* Unmaps the whole pages inside the free mapped block b of an expandable
 * segment; the edges that share pages with neighbours stay mapped. */
static int unmap_pages(vs_alloc *a, uint32_t b)
{
  const vs_alloc_segment *seg = &a->segments[a->blocks[b].segment];
  uint64_t page = page_size(seg->pool);
  uint64_t start = a->blocks[b].addr - seg->addr;
  uint64_t end = start + a->blocks[b].size;
  uint64_t lo = vs_div_ceil(start, page) * page, hi = end / page * page;
  uint32_t mid = b, r;

  if (hi <= lo)
    return 0;
  set_remove(a, b);
  if (lo > start) {
    if ((mid = split(a, b, lo - start)) == NONE || set_insert(a, b))
      return VS_ENOMEM;
  }
  if (hi < end) {
    if ((r = split(a, mid, hi - lo)) == NONE || set_insert(a, r))
      return VS_ENOMEM;
  }
  a->blocks[mid].mapped = false;
  reserve(a, seg->pool, -(int64_t)(hi - lo));
  a->stats.n_cuda_free++;
  return set_insert(a, mid);
}

/* Merges free block b, which must be in no free set, with its free
 * neighbours of the same mapping state (each taken out of its set before
 * it grows or goes); returns the merged block (which is in no free set). */
static uint32_t merge(vs_alloc *a, uint32_t b)
{
  uint32_t n = a->blocks[b].next, p = a->blocks[b].prev;
  if (n != NONE && !a->blocks[n].allocated &&
      a->blocks[n].mapped == a->blocks[b].mapped) {
    set_remove(a, n);
    a->blocks[b].size += a->blocks[n].size;
    a->blocks[b].next = a->blocks[n].next;
    if (a->blocks[n].next != NONE)
      a->blocks[a->blocks[n].next].prev = b;
    drop_block(a, n);
  }
  if (p != NONE && !a->blocks[p].allocated &&
      a->blocks[p].mapped == a->blocks[b].mapped) {
    set_remove(a, p);
    a->blocks[p].size += a->blocks[b].size;
    a->blocks[p].next = a->blocks[b].next;
    if (a->blocks[b].next != NONE)
      a->blocks[a->blocks[b].next].prev = p;
    drop_block(a, b);
    b = p;
  }
  return b;
}

/* release_cached_blocks: cudaFree every segment that is one free block, and
 * unmap the free pages of expandable segments. */
static int release_cached(vs_alloc *a)
{
  for (size_t s = 0; s < a->n_segments; s++) {
    vs_alloc_segment *seg = &a->segments[s];
    uint32_t b = seg->first;
    if (!seg->live)
      continue;
    if (!seg->expandable) {
      vs_alloc_block *blk = &a->blocks[b];
      if (!blk->allocated && blk->next == NONE) {
        set_remove(a, b);
        reserve(a, seg->pool, -(int64_t)seg->size);
        a->stats.n_cuda_free++;
        seg->live = false;
        if (drop_block(a, b))
          return VS_ENOMEM;
      }
      continue;
    }
    while (b != NONE) {
      uint32_t next = a->blocks[b].next;
      if (!a->blocks[b].allocated && a->blocks[b].mapped) {
        int rc = unmap_pages(a, b);
        if (rc)
          return rc;
      }
      b = next;
    }
    /* adjacent unmapped blocks become one */
    for (b = seg->first; b != NONE; b = a->blocks[b].next) {
      if (!a->blocks[b].allocated && !a->blocks[b].mapped) {
        set_remove(a, b);
        b = merge(a, b);
        if (set_insert(a, b))
          return VS_ENOMEM;
      }
    }
  }
  return 0;
}

void vs_alloc_empty_cache(vs_alloc *a) { release_cached(a); }

/* ------------------------------------------------------------------------
 * malloc and free
 * ------------------------------------------------------------------------ */

/* get_free_block: the smallest free block that fits, unless max_split_size
 * forbids it (an oversize block for a small request, or a much larger one
 * for a large request). */
static uint32_t find_free(vs_alloc *a, int stream, int pool, uint64_t rounded)
{
  vs_free_set *fs = &a->pools[stream][pool];
  size_t pos = lower_bound(a, fs, rounded, 0);
  uint64_t max_split = a->cfg.max_split_bytes;
  const vs_alloc_block *b;
  if (pos == fs->n)
    return NONE;
  b = &a->blocks[fs->blocks[pos]];
  if (max_split && b->mapped &&
      ((rounded < max_split && b->size >= max_split) ||
       (rounded >= max_split && b->size >= rounded + large_buffer))) {
    /* refused; an expandable segment can still map fresh pages */
    for (; pos < fs->n; pos++)
      if (!a->blocks[fs->blocks[pos]].mapped)
        return fs->blocks[pos];
    return NONE;
  }
  return fs->blocks[pos];
}

static bool should_split(const vs_alloc *a, int pool, uint64_t rounded,
                         uint64_t remaining)
{
  uint64_t max_split = a->cfg.max_split_bytes;
  if (pool == VS_POOL_SMALL)
    return remaining >= MIN_BLOCK;
  return (max_split == 0 || rounded < max_split) && remaining > small_size;
}

/* A block of at least `rounded` bytes, mapped: from the cache, a new
 * segment, or new pages; `force` ignores the capacity (after an OOM). */
static uint32_t obtain(vs_alloc *a, int stream, int pool, uint64_t rounded,
                       bool force)
{
  uint32_t b;
  if (a->cfg.expandable_segments && a->expandable[stream][pool] == NONE) {
    uint32_t first = new_segment(a, stream, pool, expandable_span, true);
    if (first == NONE)
      return NONE;
    a->expandable[stream][pool] = a->blocks[first].segment;
  }
  b = find_free(a, stream, pool, rounded);
  if (b != NONE && !a->blocks[b].mapped)
    return map_pages(a, b, rounded, force);
  if (b != NONE || a->cfg.expandable_segments)
    return b;
  if (!force && !fits_device(a, segment_size(rounded)))
    return NONE;
  return new_segment(a, stream, pool, segment_size(rounded), false);
}

int vs_alloc_malloc(vs_alloc *a, uint64_t size, int stream,
                    vs_alloc_result *res)
{
  uint64_t rounded = vs_alloc_round(&a->cfg, size);
  int pool = pool_of(rounded);
  uint32_t b;
  uint64_t remaining;

  memset(res, 0, sizeof *res);
  if (stream < 0 || stream >= VS_ALLOC_STREAMS)
    return VS_EINPUT;
  /* After a simulated OOM the real process would have stopped; the
   * emulation goes on past the capacity (without releasing and retrying
   * again) so the report can show the whole step's needs. */
  b = obtain(a, stream, pool, rounded, a->stats.n_ooms > 0);
  if (b == NONE) {
    /* the real OOM path: release every cached segment, retry once */
    res->retried = true;
    a->stats.n_retries++;
    if (release_cached(a))
      return VS_ENOMEM;
    b = obtain(a, stream, pool, rounded, false);
    if (b == NONE) {
      res->oom = true;
      a->stats.n_ooms++;
      b = obtain(a, stream, pool, rounded, true);
    }
  }
  if (b == NONE)
    return VS_ENOMEM;
  set_remove(a, b);
  remaining = a->blocks[b].size - rounded;
  if (should_split(a, pool, rounded, remaining)) {
    uint32_t r = split(a, b, rounded);
    if (r == NONE || set_insert(a, r))
      return VS_ENOMEM;
  }
  a->blocks[b].allocated = true;
  a->blocks[b].requested = size;
  account(a, pool, (int64_t)a->blocks[b].size);
  res->block = b;
  res->size = a->blocks[b].size;
  return 0;
}

int vs_alloc_free(vs_alloc *a, uint32_t b)
{
  int pool;
  if (b >= a->n_blocks || !a->blocks[b].allocated)
    return VS_EINPUT;
  pool = a->segments[a->blocks[b].segment].pool;
  account(a, pool, -(int64_t)a->blocks[b].size);
  a->blocks[b].allocated = false;
  a->blocks[b].requested = 0;
  return set_insert(a, merge(a, b));
}

/* ------------------------------------------------------------------------
 * Lifetime, queries, invariants
 * ------------------------------------------------------------------------ */

void vs_alloc_init(vs_alloc *a, const vs_alloc_config *cfg)
{
  memset(a, 0, sizeof *a);
  a->cfg = *cfg;
  a->next_addr = 1ull << 32; /* a base that looks like a device address */
  for (int s = 0; s < VS_ALLOC_STREAMS; s++)
    for (int p = 0; p < VS_POOL_N; p++)
      a->expandable[s][p] = NONE;
}

void vs_alloc_fini(vs_alloc *a)
{
  free(a->blocks);
  free(a->free_slots);
  free(a->segments);
  for (int s = 0; s < VS_ALLOC_STREAMS; s++)
    for (int p = 0; p < VS_POOL_N; p++)
      free(a->pools[s][p].blocks);
  memset(a, 0, sizeof *a);
}

int vs_alloc_clone(vs_alloc *dst, const vs_alloc *src)
{
  bool ok = true;
  *dst = *src;
  dst->blocks = vs_dup_array(src->blocks, src->n_blocks, sizeof *src->blocks, &ok);
  dst->cap_blocks = src->n_blocks;
  dst->free_slots = vs_dup_array(src->free_slots, src->n_free_slots,
                              sizeof *src->free_slots, &ok);
  dst->cap_free_slots = src->n_free_slots;
  dst->segments = vs_dup_array(src->segments, src->n_segments,
                            sizeof *src->segments, &ok);
  dst->cap_segments = src->n_segments;
  for (int s = 0; s < VS_ALLOC_STREAMS; s++)
    for (int p = 0; p < VS_POOL_N; p++) {
      vs_free_set *fs = &dst->pools[s][p];
      fs->blocks = vs_dup_array(src->pools[s][p].blocks, fs->n,
                             sizeof *fs->blocks, &ok);
      fs->cap = fs->n;
    }
  if (ok)
    return 0;
  vs_alloc_fini(dst);
  return VS_ENOMEM;
}

void vs_alloc_reset_peaks(vs_alloc *a)
{
  for (int p = 0; p < VS_POOL_N; p++) {
    a->stats.peak_allocated_bytes[p] = a->stats.allocated_bytes[p];
    a->stats.peak_reserved_bytes[p] = a->stats.reserved_bytes[p];
  }
}

uint64_t vs_alloc_largest_free(const vs_alloc *a, int pool)
{
  uint64_t best = 0;
  for (int s = 0; s < VS_ALLOC_STREAMS; s++) {
    const vs_free_set *fs = &a->pools[s][pool];
    for (size_t i = fs->n; i-- > 0;) {
      const vs_alloc_block *b = &a->blocks[fs->blocks[i]];
      if (b->mapped) { /* the largest mapped free block of this set */
        if (b->size > best)
          best = b->size;
        break;
      }
    }
  }
  return best;
}

size_t vs_alloc_count_segments(const vs_alloc *a, int pool)
{
  size_t n = 0;
  for (size_t s = 0; s < a->n_segments; s++)
    n += a->segments[s].live && a->segments[s].pool == pool;
  return n;
}

size_t vs_alloc_count_blocks(const vs_alloc *a, int pool, bool in_use)
{
  size_t n = 0;
  for (size_t s = 0; s < a->n_segments; s++) {
    if (!a->segments[s].live || a->segments[s].pool != pool)
      continue;
    for (uint32_t b = a->segments[s].first; b != NONE; b = a->blocks[b].next)
      n += !in_use || a->blocks[b].allocated;
  }
  return n;
}

int vs_alloc_check(const vs_alloc *a, vs_error *err)
{
  uint64_t allocated = 0, mapped = 0;
  size_t free_in_chains = 0, free_in_sets = 0;

  for (size_t s = 0; s < a->n_segments; s++) {
    const vs_alloc_segment *seg = &a->segments[s];
    uint64_t at = seg->addr;
    uint32_t prev = NONE;
    if (!seg->live)
      continue;
    for (uint32_t b = seg->first; b != NONE; b = a->blocks[b].next) {
      const vs_alloc_block *blk = &a->blocks[b];
      if (blk->addr != at || blk->prev != prev || blk->segment != s ||
          blk->size == 0)
        return vs_error_set(err, VS_EINPUT,
                            "allocator: segment %zu does not tile at block %u",
                            s, b);
      if (!seg->expandable && !blk->mapped)
        return vs_error_set(err, VS_EINPUT,
                            "allocator: unmapped block %u in a plain segment", b);
      if (blk->allocated) {
        allocated += blk->size;
        if (!blk->mapped || blk->requested > blk->size)
          return vs_error_set(err, VS_EINPUT,
                              "allocator: allocated block %u is unmapped or "
                              "smaller than its request", b);
      } else {
        free_in_chains++;
      }
      if (blk->mapped)
        mapped += blk->size;
      at += blk->size;
      prev = b;
    }
    if (at != seg->addr + seg->size)
      return vs_error_set(err, VS_EINPUT,
                          "allocator: blocks of segment %zu cover %llu of %llu "
                          "bytes",
                          s, (unsigned long long)(at - seg->addr),
                          (unsigned long long)seg->size);
  }
  for (int s = 0; s < VS_ALLOC_STREAMS; s++) {
    for (int p = 0; p < VS_POOL_N; p++) {
      const vs_free_set *fs = &a->pools[s][p];
      for (size_t i = 0; i < fs->n; i++) {
        const vs_alloc_block *b = &a->blocks[fs->blocks[i]];
        const vs_alloc_segment *seg = &a->segments[b->segment];
        if (b->allocated || !seg->live || seg->stream != s || seg->pool != p ||
            (i > 0 && before(a, fs->blocks[i], a->blocks[fs->blocks[i - 1]].size,
                             a->blocks[fs->blocks[i - 1]].addr)))
          return vs_error_set(err, VS_EINPUT,
                              "allocator: free set (stream %d, pool %d) holds a "
                              "wrong or unsorted block at %zu", s, p, i);
      }
      free_in_sets += fs->n;
    }
  }
  if (free_in_sets != free_in_chains)
    return vs_error_set(err, VS_EINPUT,
                        "allocator: %zu free blocks but %zu in free sets",
                        free_in_chains, free_in_sets);
  if (allocated != a->allocated_bytes || mapped != a->reserved_bytes ||
      a->reserved_bytes < a->allocated_bytes)
    return vs_error_set(err, VS_EINPUT,
                        "allocator: allocated %llu (blocks say %llu), reserved "
                        "%llu (mapped %llu)",
                        (unsigned long long)a->allocated_bytes,
                        (unsigned long long)allocated,
                        (unsigned long long)a->reserved_bytes,
                        (unsigned long long)mapped);
  return 0;
}

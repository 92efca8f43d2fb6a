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

/* ------------------------------------------------------------------------
 * Free sets
 *
 * A free set keeps its blocks sorted by (size, addr) for best fit. While it
 * holds at most FLAT_MAX blocks it is one sorted array: the sets of the
 * jobs plan searches hold 8 to 128 blocks, where a binary search and a
 * memmove of a few hundred bytes are as fast as anything. A larger set
 * becomes a list of chunks, each a sorted array of at most CHUNK_MAX
 * blocks, the chunks in order and none empty, so that an insert or a
 * removal moves at most one chunk's entries (and, when a chunk splits or
 * empties, the list's pointers): a DeepSeek-V3 job whose per-tensor
 * remainders leave 154,389 free blocks in one set spent most of its time
 * moving one array. A set never goes back to one array.
 * ------------------------------------------------------------------------ */

/* FLAT_MAX is a capacity vs_grow reaches (64, doubled; set_clone gives a
 * copy the capacity vs_grow would): an array turns into chunks when it is
 * full at FLAT_MAX blocks. */
enum { FLAT_MAX = 4096, CHUNK_MAX = 1024 };

struct vs_free_chunk {
  uint32_t n;
  uint32_t blocks[CHUNK_MAX];
};

/* A place in a free set: chunk c (0 in a set that is one array), index i
 * in it; at_pos() is NONE past the last block. */
typedef struct set_pos {
  size_t c, i;
} set_pos;

static size_t n_runs(const vs_free_set *fs)
{
  return fs->chunks ? fs->n_chunks : 1;
}

/* The sorted run r of fs (its one array, or chunk r) and its length. */
static const uint32_t *run_of(const vs_free_set *fs, size_t r, size_t *len)
{
  if (!fs->chunks) {
    *len = fs->n;
    return fs->blocks;
  }
  *len = fs->chunks[r]->n;
  return fs->chunks[r]->blocks;
}

/* (size, addr) order of the free sets. */
static bool before(const vs_alloc *a, uint32_t x, uint64_t size, uint64_t addr)
{
  const vs_alloc_block *b = &a->blocks[x];
  return b->size < size || (b->size == size && b->addr < addr);
}

/* The first of the n sorted blocks v[] not before (size, addr). */
static size_t lower_bound(const vs_alloc *a, const uint32_t *v, size_t n,
                          uint64_t size, uint64_t addr)
{
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (before(a, v[mid], size, addr))
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* The first chunk whose last block is not before (size, addr); n_chunks
 * when every block is. */
static size_t chunk_of(const vs_alloc *a, const vs_free_set *fs,
                       uint64_t size, uint64_t addr)
{
  size_t lo = 0, hi = fs->n_chunks;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    const vs_free_chunk *c = fs->chunks[mid];
    if (before(a, c->blocks[c->n - 1], size, addr))
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* The place of the first block of fs not before (size, addr). */
static inline set_pos seek(const vs_alloc *a, const vs_free_set *fs,
                           uint64_t size, uint64_t addr)
{
  set_pos p = {0, 0};
  if (!fs->chunks)
    p.i = lower_bound(a, fs->blocks, fs->n, size, addr);
  else if ((p.c = chunk_of(a, fs, size, addr)) < fs->n_chunks)
    p.i = lower_bound(a, fs->chunks[p.c]->blocks, fs->chunks[p.c]->n, size,
                      addr);
  return p;
}

static uint32_t at_pos(const vs_free_set *fs, set_pos p)
{
  size_t len;
  const uint32_t *v;
  if (p.c >= n_runs(fs))
    return NONE;
  v = run_of(fs, p.c, &len);
  return p.i < len ? v[p.i] : NONE;
}

static void next_pos(const vs_free_set *fs, set_pos *p)
{
  size_t len;
  run_of(fs, p->c, &len);
  if (++p->i == len && p->c + 1 < n_runs(fs)) {
    p->c++;
    p->i = 0;
  }
}

/* Puts b into the n sorted blocks v[] (room for one more) at its place. */
static void array_insert(const vs_alloc *a, uint32_t *v, size_t n, uint32_t b)
{
  size_t pos = lower_bound(a, v, n, a->blocks[b].size, a->blocks[b].addr);
  memmove(&v[pos + 1], &v[pos], (n - pos) * sizeof *v);
  v[pos] = b;
}

/* Takes v[pos] out of the n blocks v[]. */
static void array_remove(uint32_t *v, size_t n, size_t pos)
{
  memmove(&v[pos], &v[pos + 1], (n - pos - 1) * sizeof *v);
}

/* A new empty chunk at place c of the list; NULL when out of memory. */
static vs_free_chunk *add_chunk(vs_free_set *fs, size_t c)
{
  vs_free_chunk *chunk;
  if (!vs_grow((void **)&fs->chunks, &fs->cap_chunks, fs->n_chunks + 1,
               sizeof *fs->chunks) ||
      !(chunk = malloc(sizeof *chunk)))
    return NULL;
  memmove(&fs->chunks[c + 1], &fs->chunks[c],
          (fs->n_chunks - c) * sizeof *fs->chunks);
  chunk->n = 0;
  fs->chunks[c] = chunk;
  fs->n_chunks++;
  return chunk;
}

static void set_fini(vs_free_set *fs)
{
  for (size_t c = 0; c < fs->n_chunks; c++)
    free(fs->chunks[c]);
  free(fs->chunks);
  free(fs->blocks);
}

/* dst (a copy of src's fields) gets arrays of its own; *ok false when one
 * could not be had (dst then holds only what it owns, for set_fini). */
static void set_clone(vs_free_set *dst, const vs_free_set *src, bool *ok)
{
  *dst = *src;
  dst->blocks = NULL;
  dst->cap = 0;
  if (!src->chunks) {
    /* the capacity vs_grow gives (see FLAT_MAX) */
    if (*ok && src->n > 0 &&
        !vs_grow((void **)&dst->blocks, &dst->cap, src->n, sizeof *src->blocks))
      *ok = false;
    if (dst->blocks)
      memcpy(dst->blocks, src->blocks, src->n * sizeof *src->blocks);
    return;
  }
  dst->chunks = vs_dup_array(src->chunks, src->n_chunks, sizeof *src->chunks,
                             ok);
  dst->n_chunks = dst->cap_chunks = dst->chunks ? src->n_chunks : 0;
  for (size_t c = 0; c < dst->n_chunks; c++)
    if (!(dst->chunks[c] = vs_dup_array(src->chunks[c], 1,
                                        sizeof *src->chunks[c], ok))) {
      dst->n_chunks = c;
      break;
    }
}

/* Moves the upper half of full chunk c into a new chunk after it. */
static int split_chunk(vs_free_set *fs, size_t c)
{
  vs_free_chunk *hi = add_chunk(fs, c + 1), *lo = fs->chunks[c];
  if (!hi)
    return VS_ENOMEM;
  hi->n = lo->n - lo->n / 2;
  lo->n /= 2;
  memcpy(hi->blocks, &lo->blocks[lo->n], hi->n * sizeof *hi->blocks);
  return 0;
}

/* Turns the one array of fs into half-full chunks; on failure fs is left
 * as it was. */
static int to_chunks(vs_free_set *fs)
{
  vs_free_set big = {NULL, 0, 0, NULL, 0, 0};
  for (size_t i = 0; i < fs->n; i += CHUNK_MAX / 2) {
    size_t take = fs->n - i < CHUNK_MAX / 2 ? fs->n - i : CHUNK_MAX / 2;
    vs_free_chunk *c = add_chunk(&big, big.n_chunks);
    if (!c) {
      set_fini(&big);
      return VS_ENOMEM;
    }
    memcpy(c->blocks, &fs->blocks[i], take * sizeof *c->blocks);
    c->n = (uint32_t)take;
  }
  free(fs->blocks);
  big.n = fs->n;
  *fs = big;
  return 0;
}

/* set_insert into a set past one array (turning it into chunks first when
 * it reaches FLAT_MAX). Not inlined, as chunk_remove: in set_insert and
 * set_remove, which serve one array most of the time, it cost 2% more
 * instructions of a plan (callgrind). */
__attribute__((noinline)) static int chunk_insert(vs_alloc *a, vs_free_set *fs,
                                                  uint32_t b)
{
  const vs_alloc_block *blk = &a->blocks[b];
  vs_free_chunk *c;
  size_t r;
  if (!fs->chunks && to_chunks(fs))
    return VS_ENOMEM;
  if (fs->n_chunks == 0) { /* every chunk emptied */
    if (!add_chunk(fs, 0))
      return VS_ENOMEM;
    r = 0;
  } else if ((r = chunk_of(a, fs, blk->size, blk->addr)) == fs->n_chunks) {
    r--; /* after every block: the last chunk's end */
  }
  if (fs->chunks[r]->n == CHUNK_MAX) {
    if (split_chunk(fs, r))
      return VS_ENOMEM;
    c = fs->chunks[r]; /* b goes to the upper half when after the lower */
    r += before(a, c->blocks[c->n - 1], blk->size, blk->addr);
  }
  c = fs->chunks[r];
  array_insert(a, c->blocks, c->n++, b);
  fs->n++;
  return 0;
}

/* set_remove from a set of chunks: a chunk that empties goes. */
__attribute__((noinline)) static void chunk_remove(vs_alloc *a, vs_free_set *fs,
                                                   uint32_t b)
{
  set_pos p = seek(a, fs, a->blocks[b].size, a->blocks[b].addr);
  vs_free_chunk *c;
  if (at_pos(fs, p) != b)
    return;
  c = fs->chunks[p.c];
  array_remove(c->blocks, c->n, p.i);
  fs->n--;
  if (--c->n == 0) {
    free(c);
    memmove(&fs->chunks[p.c], &fs->chunks[p.c + 1],
            (fs->n_chunks - p.c - 1) * sizeof *fs->chunks);
    fs->n_chunks--;
  }
}

/* Adds free block b to its set. */
static int set_insert(vs_alloc *a, uint32_t b)
{
  vs_free_set *fs = set_of(a, b);
  if (fs->n >= fs->cap) { /* a full array, or chunks (cap 0) */
    if (fs->chunks || fs->n >= FLAT_MAX)
      return chunk_insert(a, fs, b);
    if (!vs_grow((void **)&fs->blocks, &fs->cap, fs->n + 1,
                 sizeof *fs->blocks))
      return VS_ENOMEM;
  }
  array_insert(a, fs->blocks, fs->n++, b);
  return 0;
}

/* Where fs, a set that is one array, holds block b: at `hint` when b is
 * there (where find_free found it; SIZE_MAX: no hint), else where its
 * (size, addr) sorts; SIZE_MAX for a set of chunks or one without b. */
static inline size_t array_place(const vs_alloc *a, const vs_free_set *fs,
                          uint32_t b, size_t hint)
{
  size_t pos;
  if (fs->chunks)
    return SIZE_MAX;
  if (hint < fs->n && fs->blocks[hint] == b)
    return hint;
  pos = lower_bound(a, fs->blocks, fs->n, a->blocks[b].size,
                    a->blocks[b].addr);
  return pos < fs->n && fs->blocks[pos] == b ? pos : SIZE_MAX;
}

/* Takes free block b out of its set (nothing when it is in none), with
 * no search when it sits at `hint` (array_place). */
static void set_remove_at(vs_alloc *a, uint32_t b, size_t hint)
{
  vs_free_set *fs = set_of(a, b);
  size_t pos;
  if (fs->chunks)
    chunk_remove(a, fs, b);
  else if ((pos = array_place(a, fs, b, hint)) != SIZE_MAX)
    array_remove(fs->blocks, fs->n--, pos);
}

/* Takes free block b out of its set (nothing when it is in none). */
static void set_remove(vs_alloc *a, uint32_t b)
{
  set_remove_at(a, b, SIZE_MAX);
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

/* split(a, b, size) of free block b, which its set holds (at `hint`
 * when find_free found it there: array_place): b leaves the set and
 * the rest joins it, as set_remove, split and set_insert would do. In a
 * set that is one array the rest, smaller than b was, sorts before b's
 * place: one search over the blocks before it and one move of those
 * between the two places, where the three calls took two searches and
 * two moves of the set's tail (malloc's common case: 2.5% of a plan's
 * instructions, callgrind). NONE when out of memory. */
static uint32_t split_free(vs_alloc *a, uint32_t b, uint64_t size,
                           size_t hint)
{
  vs_free_set *fs = set_of(a, b);
  uint32_t r, *v = fs->blocks;
  size_t pos = array_place(a, fs, b, hint), at;
  if (pos == SIZE_MAX) { /* a set of chunks (or b in none): the three calls */
    set_remove(a, b);
    r = split(a, b, size);
    return r == NONE || set_insert(a, r) ? NONE : r;
  }
  if ((r = split(a, b, size)) == NONE) {
    array_remove(v, fs->n--, pos); /* b out, as set_remove would */
    return NONE;
  }
  at = lower_bound(a, v, pos, a->blocks[r].size, a->blocks[r].addr);
  memmove(&v[at + 1], &v[at], (pos - at) * sizeof *v);
  v[at] = r;
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

/* What a new segment is: cudaMalloc'd whole, or address space that maps
 * pages on demand (expandable_segments). */
typedef enum { SEGMENT_PLAIN, SEGMENT_EXPANDABLE } segment_kind;

/* Whether a request may go past the device's capacity: only once an
 * out-of-memory has happened (vs_alloc_malloc). */
typedef enum { WITHIN_CAPACITY, PAST_CAPACITY } capacity_rule;

static uint32_t new_segment(vs_alloc *a, int stream, int pool, uint64_t size,
                            segment_kind kind)
{
  bool expandable = kind == SEGMENT_EXPANDABLE;
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
  a->blocks[b] = (vs_alloc_block){.addr = seg->addr,
                                  .size = size,
                                  .prev = NONE,
                                  .next = NONE,
                                  .segment = s,
                                  .allocated = false,
                                  .mapped = !expandable};
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
static uint32_t map_pages(vs_alloc *a, uint32_t b, uint64_t rounded,
                          capacity_rule rule)
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
  if (rule == WITHIN_CAPACITY && !fits_device(a, need))
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

/* Whether b and its neighbour nb (NONE: none) merge when both are free:
 * nb is free and mapped as b is. */
static bool merges_with(const vs_alloc *a, uint32_t b, uint32_t nb)
{
  return nb != NONE && !a->blocks[nb].allocated &&
         a->blocks[nb].mapped == a->blocks[b].mapped;
}

/* Free block b takes in the block after it (free, in no set), which
 * goes. */
static void absorb_next(vs_alloc *a, uint32_t b)
{
  uint32_t n = a->blocks[b].next;
  a->blocks[b].size += a->blocks[n].size;
  a->blocks[b].next = a->blocks[n].next;
  if (a->blocks[n].next != NONE)
    a->blocks[a->blocks[n].next].prev = b;
  drop_block(a, n);
}

/* Merges free block b, which must be in no free set, with its free
 * neighbours of the same mapping state (each taken out of its set before
 * it grows or goes); returns the merged block (which is in no free set). */
static uint32_t merge(vs_alloc *a, uint32_t b)
{
  uint32_t n = a->blocks[b].next, p = a->blocks[b].prev;
  if (merges_with(a, b, n)) {
    set_remove(a, n);
    absorb_next(a, b);
  }
  if (merges_with(a, b, p)) {
    set_remove(a, p);
    absorb_next(a, p);
    b = p;
  }
  return b;
}

/* set_insert(a, merge(a, b)) of a block just freed. Where one neighbour
 * alone merges (a block freed beside the rest malloc split off it) and
 * its set is one array, the merged block, larger than that neighbour
 * was, sorts after the neighbour's place: one search over the blocks
 * after it and one move of those between the two places, where the two
 * calls took two searches and two moves of the set's tail (free's
 * common case, as split_free is malloc's). */
static int free_merged(vs_alloc *a, uint32_t b)
{
  uint32_t n = a->blocks[b].next, p = a->blocks[b].prev, one, m, *v;
  bool with_n = merges_with(a, b, n), with_p = merges_with(a, b, p);
  vs_free_set *fs = set_of(a, b);
  size_t pos, at;
  one = with_n == with_p ? NONE : with_n ? n : p;
  if (one == NONE || (pos = array_place(a, fs, one, SIZE_MAX)) == SIZE_MAX)
    return set_insert(a, merge(a, b));
  v = fs->blocks;
  m = with_n ? b : p;
  absorb_next(a, m);
  at = pos + 1 + lower_bound(a, v + pos + 1, fs->n - pos - 1,
                             a->blocks[m].size, a->blocks[m].addr);
  memmove(&v[pos], &v[pos + 1], (at - pos - 1) * sizeof *v);
  v[at - 1] = m;
  return 0;
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
 * for a large request); *at its index in a set that is one array, else
 * SIZE_MAX. */
static uint32_t find_free(vs_alloc *a, int stream, int pool, uint64_t rounded,
                          size_t *at)
{
  const vs_free_set *fs = &a->pools[stream][pool];
  set_pos pos = seek(a, fs, rounded, 0);
  uint64_t max_split = a->cfg.max_split_bytes;
  uint32_t found = at_pos(fs, pos);
  const vs_alloc_block *b;
  if (found == NONE)
    return NONE;
  b = &a->blocks[found];
  if (max_split && b->mapped &&
      ((rounded < max_split && b->size >= max_split) ||
       (rounded >= max_split && b->size >= rounded + large_buffer))) {
    /* refused; an expandable segment can still map fresh pages */
    for (; (found = at_pos(fs, pos)) != NONE; next_pos(fs, &pos))
      if (!a->blocks[found].mapped)
        break;
  }
  *at = fs->chunks ? SIZE_MAX : pos.i;
  return found;
}

/* Whether a block `remaining` bytes larger than a request of `rounded`
 * is split (CUDACachingAllocator.cpp should_split): in the small pool and
 * with expandable segments whenever a block of kMinBlockSize remains;
 * else in the large pool only below max_split_size, above kSmallSize. */
static bool should_split(const vs_alloc *a, int pool, uint64_t rounded,
                         uint64_t remaining)
{
  uint64_t max_split = a->cfg.max_split_bytes;
  if (pool == VS_POOL_SMALL || a->cfg.expandable_segments)
    return remaining >= MIN_BLOCK;
  return (max_split == 0 || rounded < max_split) && remaining > small_size;
}

/* A block of at least `rounded` bytes, mapped: from the cache, a new
 * segment, or new pages, within the device's capacity or past it; *at
 * where its free set holds it (find_free), SIZE_MAX when not known. */
static uint32_t obtain(vs_alloc *a, int stream, int pool, uint64_t rounded,
                       capacity_rule rule, size_t *at)
{
  uint32_t b;
  *at = SIZE_MAX;
  if (a->cfg.expandable_segments && a->expandable[stream][pool] == NONE) {
    uint32_t first = new_segment(a, stream, pool, expandable_span,
                                 SEGMENT_EXPANDABLE);
    if (first == NONE)
      return NONE;
    a->expandable[stream][pool] = a->blocks[first].segment;
  }
  b = find_free(a, stream, pool, rounded, at);
  if (b != NONE && !a->blocks[b].mapped) {
    *at = SIZE_MAX;
    return map_pages(a, b, rounded, rule);
  }
  if (b != NONE || a->cfg.expandable_segments)
    return b;
  if (rule == WITHIN_CAPACITY && !fits_device(a, segment_size(rounded)))
    return NONE;
  return new_segment(a, stream, pool, segment_size(rounded), SEGMENT_PLAIN);
}

int vs_alloc_malloc(vs_alloc *a, uint64_t size, int stream,
                    vs_alloc_result *res)
{
  uint64_t rounded = vs_alloc_round(&a->cfg, size);
  int pool = pool_of(rounded);
  uint32_t b;
  uint64_t remaining;
  size_t at; /* where b sits in its free set (obtain) */

  memset(res, 0, sizeof *res);
  if (stream < 0 || stream >= VS_ALLOC_STREAMS)
    return VS_EINPUT;
  /* After a simulated OOM the real process would have stopped; the
   * emulation goes on past the capacity (without releasing and retrying
   * again) so the report can show the whole step's needs. */
  b = obtain(a, stream, pool, rounded,
             a->stats.n_ooms > 0 ? PAST_CAPACITY : WITHIN_CAPACITY, &at);
  if (b == NONE) {
    /* the real OOM path: release every cached segment, retry once */
    res->retried = true;
    a->stats.n_retries++;
    if (release_cached(a))
      return VS_ENOMEM;
    b = obtain(a, stream, pool, rounded, WITHIN_CAPACITY, &at);
    if (b == NONE) {
      res->oom = true;
      a->stats.n_ooms++;
      b = obtain(a, stream, pool, rounded, PAST_CAPACITY, &at);
    }
  }
  if (b == NONE)
    return VS_ENOMEM;
  remaining = a->blocks[b].size - rounded;
  if (!should_split(a, pool, rounded, remaining))
    set_remove_at(a, b, at);
  else if (split_free(a, b, rounded, at) == NONE)
    return VS_ENOMEM;
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
  return free_merged(a, b);
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
      set_fini(&a->pools[s][p]);
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
    for (int p = 0; p < VS_POOL_N; p++)
      set_clone(&dst->pools[s][p], &src->pools[s][p], &ok);
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

/* The size of the largest mapped block of fs (0: none). */
static uint64_t largest_mapped(const vs_alloc *a, const vs_free_set *fs)
{
  for (size_t r = n_runs(fs); r-- > 0;) {
    size_t len;
    const uint32_t *v = run_of(fs, r, &len);
    for (size_t i = len; i-- > 0;)
      if (a->blocks[v[i]].mapped)
        return a->blocks[v[i]].size;
  }
  return 0;
}

uint64_t vs_alloc_largest_free(const vs_alloc *a, int pool)
{
  uint64_t best = 0;
  for (int s = 0; s < VS_ALLOC_STREAMS; s++) {
    uint64_t size = largest_mapped(a, &a->pools[s][pool]);
    if (size > best)
      best = size;
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

size_t vs_alloc_count_blocks(const vs_alloc *a, int pool,
                             vs_block_filter filter)
{
  size_t n = 0;
  for (size_t s = 0; s < a->n_segments; s++) {
    if (!a->segments[s].live || a->segments[s].pool != pool)
      continue;
    for (uint32_t b = a->segments[s].first; b != NONE; b = a->blocks[b].next)
      n += filter == VS_BLOCKS_ALL || a->blocks[b].allocated;
  }
  return n;
}

/* The free set of (stream s, pool p): free blocks of its own live
 * segments, sorted, in chunks of 1 to CHUNK_MAX once it is not one array
 * (of at most FLAT_MAX), n counting them. */
static int check_set(const vs_alloc *a, int s, int p, vs_error *err)
{
  const vs_free_set *fs = &a->pools[s][p];
  uint32_t prev = NONE;
  size_t count = 0;
  for (size_t r = 0; r < n_runs(fs); r++) {
    size_t len;
    const uint32_t *v = run_of(fs, r, &len);
    if (fs->chunks ? len == 0 || len > CHUNK_MAX : len > FLAT_MAX)
      return vs_error_set(err, VS_EINPUT,
                          "allocator: free set (stream %d, pool %d) has a run "
                          "of %zu blocks", s, p, len);
    for (size_t i = 0; i < len; i++, count++) {
      const vs_alloc_block *b = &a->blocks[v[i]];
      const vs_alloc_segment *seg = &a->segments[b->segment];
      if (b->allocated || !seg->live || seg->stream != s || seg->pool != p ||
          (prev != NONE && before(a, v[i], a->blocks[prev].size,
                                  a->blocks[prev].addr)))
        return vs_error_set(err, VS_EINPUT,
                            "allocator: free set (stream %d, pool %d) holds a "
                            "wrong or unsorted block at %zu", s, p, count);
      prev = v[i];
    }
  }
  if (count != fs->n)
    return vs_error_set(err, VS_EINPUT,
                        "allocator: free set (stream %d, pool %d) counts %zu "
                        "blocks but holds %zu", s, p, fs->n, count);
  return 0;
}

/* What the blocks of the live segments add up to. */
typedef struct block_totals {
  uint64_t allocated, mapped;
  size_t free_blocks;
} block_totals;

/* Live segment s: its blocks tile it in address order, each linked to its
 * neighbours and mapped unless the segment is expandable; an allocated
 * one mapped and covering its request. Adds them to *t. */
static int check_segment(const vs_alloc *a, size_t s, block_totals *t,
                         vs_error *err)
{
  const vs_alloc_segment *seg = &a->segments[s];
  uint64_t at = seg->addr;
  uint32_t prev = NONE;
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
      t->allocated += blk->size;
      if (!blk->mapped || blk->requested > blk->size)
        return vs_error_set(err, VS_EINPUT,
                            "allocator: allocated block %u is unmapped or "
                            "smaller than its request", b);
    } else {
      t->free_blocks++;
    }
    if (blk->mapped)
      t->mapped += blk->size;
    at += blk->size;
    prev = b;
  }
  if (at != seg->addr + seg->size)
    return vs_error_set(err, VS_EINPUT,
                        "allocator: blocks of segment %zu cover %llu of %llu "
                        "bytes",
                        s, (unsigned long long)(at - seg->addr),
                        (unsigned long long)seg->size);
  return 0;
}

int vs_alloc_check(const vs_alloc *a, vs_error *err)
{
  block_totals t = {0, 0, 0};
  size_t free_in_sets = 0;
  for (size_t s = 0; s < a->n_segments; s++) {
    int rc = a->segments[s].live ? check_segment(a, s, &t, err) : 0;
    if (rc)
      return rc;
  }
  for (int s = 0; s < VS_ALLOC_STREAMS; s++)
    for (int p = 0; p < VS_POOL_N; p++) {
      int rc = check_set(a, s, p, err);
      if (rc)
        return rc;
      free_in_sets += a->pools[s][p].n;
    }
  if (free_in_sets != t.free_blocks)
    return vs_error_set(err, VS_EINPUT,
                        "allocator: %zu free blocks but %zu in free sets",
                        t.free_blocks, free_in_sets);
  if (t.allocated != a->allocated_bytes || t.mapped != a->reserved_bytes ||
      a->reserved_bytes < a->allocated_bytes)
    return vs_error_set(err, VS_EINPUT,
                        "allocator: allocated %llu (blocks say %llu), reserved "
                        "%llu (mapped %llu)",
                        (unsigned long long)a->allocated_bytes,
                        (unsigned long long)t.allocated,
                        (unsigned long long)a->reserved_bytes,
                        (unsigned long long)t.mapped);
  return 0;
}

/* evq.c - binary min-heaps on (t_ns, seq): a plain one, and an indexed one
 * for movable events (see evq.h). */
#include "evq.h"

#include "error.h"
#include "grow.h"

#include <stdlib.h>

void vs_evq_init(vs_evq *q)
{
  q->heap = NULL;
  q->n = 0;
  q->cap = 0;
  q->next_seq = 0;
  q->mheap = NULL;
  q->mn = 0;
  q->mcap = 0;
  q->pos = NULL;
  q->n_handles = 0;
  q->cap_handles = 0;
  q->free_handle = VS_EVQ_NONE;
}

void vs_evq_fini(vs_evq *q)
{
  free(q->heap);
  free(q->mheap);
  free(q->pos);
  vs_evq_init(q);
}

int vs_evq_push(vs_evq *q, uint64_t t_ns, uint32_t rank, uint32_t op)
{
  size_t i;
  vs_event ev = {t_ns, q->next_seq, rank, op};

  if (!vs_grow((void **)&q->heap, &q->cap, q->n + 1, sizeof *q->heap))
    return VS_ENOMEM;
  q->next_seq++;
  /* sift up */
  for (i = q->n++; i > 0; i = (i - 1) / 2) {
    vs_event *parent = &q->heap[(i - 1) / 2];
    if (!vs_event_earlier(&ev, parent))
      break;
    q->heap[i] = *parent;
  }
  q->heap[i] = ev;
  return 0;
}

/* ------------------------------------------------------------------------
 * The indexed heap of movable events
 * ------------------------------------------------------------------------ */

/* Puts m at index i of mheap and records its position. */
static void mplace(vs_evq *q, size_t i, const vs_evq_movable *m)
{
  q->mheap[i] = *m;
  q->pos[m->handle] = (uint32_t)i;
}

/* Moves the event at index i towards the root until its parent precedes
 * it; returns its final index. */
static size_t msift_up(vs_evq *q, size_t i)
{
  vs_evq_movable m = q->mheap[i];
  while (i > 0 && vs_event_earlier(&m.ev, &q->mheap[(i - 1) / 2].ev)) {
    mplace(q, i, &q->mheap[(i - 1) / 2]);
    i = (i - 1) / 2;
  }
  mplace(q, i, &m);
  return i;
}

/* Moves the event at index i towards the leaves until it precedes both
 * children. */
static void msift_down(vs_evq *q, size_t i)
{
  vs_evq_movable m = q->mheap[i];
  for (;;) {
    size_t child = 2 * i + 1;
    if (child >= q->mn)
      break;
    if (child + 1 < q->mn &&
        vs_event_earlier(&q->mheap[child + 1].ev, &q->mheap[child].ev))
      child++;
    if (!vs_event_earlier(&q->mheap[child].ev, &m.ev))
      break;
    mplace(q, i, &q->mheap[child]);
    i = child;
  }
  mplace(q, i, &m);
}

/* A handle for a new movable event: a freed one, else the next new one. */
static int take_handle(vs_evq *q, uint32_t *handle)
{
  if (q->free_handle != VS_EVQ_NONE) {
    *handle = q->free_handle;
    q->free_handle = q->pos[*handle] & ~VS_EVQ_FREE;
    if (q->free_handle == (VS_EVQ_NONE & ~VS_EVQ_FREE))
      q->free_handle = VS_EVQ_NONE;
    return 0;
  }
  if (q->n_handles >= VS_EVQ_FREE - 1) /* 0x7fffffff ends the free list */
    return VS_EINPUT;
  if (!vs_grow((void **)&q->pos, &q->cap_handles, q->n_handles + 1,
               sizeof *q->pos))
    return VS_ENOMEM;
  *handle = (uint32_t)q->n_handles++;
  return 0;
}

static void free_handle(vs_evq *q, uint32_t handle)
{
  q->pos[handle] = VS_EVQ_FREE | (q->free_handle & ~VS_EVQ_FREE);
  q->free_handle = handle;
}

static bool live(const vs_evq *q, uint32_t handle)
{
  return handle < q->n_handles && !(q->pos[handle] & VS_EVQ_FREE);
}

int vs_evq_push_movable(vs_evq *q, uint64_t t_ns, uint32_t rank, uint32_t op,
                        uint32_t *handle)
{
  vs_evq_movable m = {{t_ns, q->next_seq, rank, op}, 0};
  int rc;

  /* room in the heap first, so a failed handle leaves nothing to undo */
  if (!vs_grow((void **)&q->mheap, &q->mcap, q->mn + 1, sizeof *q->mheap))
    return VS_ENOMEM;
  if ((rc = take_handle(q, &m.handle)))
    return rc;
  q->next_seq++;
  mplace(q, q->mn++, &m);
  msift_up(q, q->mn - 1);
  *handle = m.handle;
  return 0;
}

int vs_evq_update(vs_evq *q, uint32_t handle, uint64_t t_ns)
{
  size_t i;
  if (!live(q, handle))
    return VS_EINPUT;
  i = q->pos[handle];
  q->mheap[i].ev.t_ns = t_ns;
  if (msift_up(q, i) == i)
    msift_down(q, i);
  return 0;
}

/* Takes the movable event at index i out of the heap and frees its
 * handle. */
static void mdelete(vs_evq *q, size_t i)
{
  uint32_t handle = q->mheap[i].handle;
  if (i != --q->mn) {
    mplace(q, i, &q->mheap[q->mn]);
    if (msift_up(q, i) == i)
      msift_down(q, i);
  }
  free_handle(q, handle);
}

int vs_evq_remove(vs_evq *q, uint32_t handle)
{
  if (!live(q, handle))
    return VS_EINPUT;
  mdelete(q, q->pos[handle]);
  return 0;
}

/* ------------------------------------------------------------------------
 * Popping from both
 * ------------------------------------------------------------------------ */

/* Pops the earliest movable event when it precedes the plain heap's top;
 * false otherwise. Out of vs_evq_pop, whose plain path is the hot one. */
static bool pop_movable(vs_evq *q, vs_event *out)
{
  if (q->n > 0 && !vs_event_earlier(&q->mheap[0].ev, &q->heap[0]))
    return false;
  *out = q->mheap[0].ev;
  mdelete(q, 0);
  return true;
}

bool vs_evq_pop(vs_evq *q, vs_event *out)
{
  vs_event last;
  size_t i = 0;

  if (q->mn && pop_movable(q, out))
    return true;
  if (q->n == 0)
    return false;
  *out = q->heap[0];
  last = q->heap[--q->n];
  /* sift the last event down from the root */
  for (;;) {
    size_t child = 2 * i + 1;
    if (child >= q->n)
      break;
    if (child + 1 < q->n && vs_event_earlier(&q->heap[child + 1], &q->heap[child]))
      child++;
    if (!vs_event_earlier(&q->heap[child], &last))
      break;
    q->heap[i] = q->heap[child];
    i = child;
  }
  if (q->n > 0)
    q->heap[i] = last;
  return true;
}

const vs_event *vs_evq_peek(const vs_evq *q)
{
  if (q->mn && (q->n == 0 || vs_event_earlier(&q->mheap[0].ev, &q->heap[0])))
    return &q->mheap[0].ev;
  return q->n ? &q->heap[0] : NULL;
}

size_t vs_evq_size(const vs_evq *q)
{
  return q->n + q->mn;
}

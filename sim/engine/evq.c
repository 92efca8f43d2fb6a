/* evq.c - binary min-heap on (t_ns, seq) (see evq.h). */
#include "evq.h"

#include "error.h"
#include "grow.h"

#include <stdlib.h>

static bool earlier(const vs_event *a, const vs_event *b)
{
  return a->t_ns < b->t_ns || (a->t_ns == b->t_ns && a->seq < b->seq);
}

void vs_evq_init(vs_evq *q)
{
  q->heap = NULL;
  q->n = 0;
  q->cap = 0;
  q->next_seq = 0;
}

void vs_evq_fini(vs_evq *q)
{
  free(q->heap);
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
    if (!earlier(&ev, parent))
      break;
    q->heap[i] = *parent;
  }
  q->heap[i] = ev;
  return 0;
}

bool vs_evq_pop(vs_evq *q, vs_event *out)
{
  vs_event last;
  size_t i = 0;

  if (q->n == 0)
    return false;
  *out = q->heap[0];
  last = q->heap[--q->n];
  /* sift the last event down from the root */
  for (;;) {
    size_t child = 2 * i + 1;
    if (child >= q->n)
      break;
    if (child + 1 < q->n && earlier(&q->heap[child + 1], &q->heap[child]))
      child++;
    if (!earlier(&q->heap[child], &last))
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
  return q->n ? &q->heap[0] : NULL;
}

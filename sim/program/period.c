/* period.c - the steady state of built programs (see period.h). */
#include "period.h"

/* What a mark's position counts: ops or buffers. */
typedef enum { BY_OP, BY_BUFFER } position;

static uint32_t mark_at(const vs_unit_mark *k, position by)
{
  return by == BY_OP ? k->first_op : k->first_buffer;
}

/* The unit whose span holds x (an op or a buffer, as `by` says): the last
 * mark at or before x. *span says whether x is in one, or in the setup
 * before the first or the step's end after the last. */
static size_t find_unit(const vs_program *p, uint32_t x, position by,
                        vs_span *span)
{
  size_t lo = 0, hi = p->n_units;
  if (!p->units || x >= mark_at(&p->units[p->n_units], by)) {
    *span = VS_SPAN_END;
    return 0;
  }
  if (p->n_units == 0 || x < mark_at(&p->units[0], by)) {
    *span = VS_SPAN_SETUP;
    return 0;
  }
  while (hi - lo > 1) {
    size_t mid = lo + (hi - lo) / 2;
    if (mark_at(&p->units[mid], by) <= x)
      lo = mid;
    else
      hi = mid;
  }
  *span = VS_SPAN_UNIT;
  return lo;
}

/* Where x sits (vs_period_op_span), counted as `by` says. */
static vs_span span_of(const vs_program *p, uint32_t x, position by,
                       uint32_t *mb)
{
  vs_span span;
  size_t u = find_unit(p, x, by, &span);
  if (span == VS_SPAN_UNIT)
    *mb = p->units[u].mb;
  return span;
}

vs_span vs_period_op_span(const vs_program *p, uint32_t op, uint32_t *mb)
{
  return span_of(p, op, BY_OP, mb);
}

vs_span vs_period_buffer_span(const vs_program *p, uint32_t buffer,
                              uint32_t *mb)
{
  return span_of(p, buffer, BY_BUFFER, mb);
}

/* The unit of the same pass and chunk as unit u, one micro-batch later;
 * SIZE_MAX when there is none. */
static size_t unit_later(const vs_program *p, size_t u)
{
  const vs_unit_mark *k = &p->units[u];
  uint32_t at;
  if (k->mb + 1 >= p->unit_mbs || k->chunk >= p->unit_chunks)
    return SIZE_MAX;
  at = p->unit_at[vs_unit_slot(p, k->forward, k->mb + 1, k->chunk)];
  return at == VS_PERIOD_NONE ? SIZE_MAX : at;
}

/* Ops (or buffers, as `by` says) of unit u: up to the next mark's. */
static uint32_t unit_size(const vs_program *p, size_t u, position by)
{
  return mark_at(&p->units[u + 1], by) - mark_at(&p->units[u], by);
}

/* x (an op or a buffer, as `by` says) one micro-batch later. */
static uint32_t later(const vs_program *p, uint32_t x, position by)
{
  vs_span span;
  size_t u = find_unit(p, x, by, &span), v;
  uint32_t at;
  if (span != VS_SPAN_UNIT)
    return span == VS_SPAN_SETUP ? x : VS_PERIOD_NONE;
  if ((v = unit_later(p, u)) == SIZE_MAX)
    return VS_PERIOD_NONE;
  at = x - mark_at(&p->units[u], by);
  return at < unit_size(p, v, by) ? mark_at(&p->units[v], by) + at
                                  : VS_PERIOD_NONE;
}

uint32_t vs_period_op_later(const vs_program *p, uint32_t op)
{
  return later(p, op, BY_OP);
}

uint32_t vs_period_buffer_later(const vs_program *p, uint32_t buffer)
{
  return later(p, buffer, BY_BUFFER);
}

/* Whether the dependencies of op a match those of op b (in p, of
 * progs) one micro-batch on. */
static bool deps_alike(const vs_program *progs, size_t n_progs,
                       const vs_program *p, const vs_pop *a, const vs_pop *b)
{
  uint32_t da = a->first_dep, end_a = vs_op_deps_end(p, a);
  uint32_t db = b->first_dep, end_b = vs_op_deps_end(p, b);
  if (end_a - da != end_b - db)
    return false;
  for (; da < end_a; da++, db++) {
    int32_t sa = p->dep_stages ? p->dep_stages[da] : -1;
    int32_t sb = p->dep_stages ? p->dep_stages[db] : -1;
    const vs_program *owner = p;
    if (sa != sb || (sa >= 0 && (size_t)sa >= n_progs))
      return false;
    if (sa >= 0)
      owner = &progs[sa];
    if (vs_period_op_later(owner, p->deps[da]) != p->deps[db])
      return false;
  }
  return true;
}

/* vs_period_buffer_later for unit u's ops, whose buffers are mostly
 * their own unit's (those map to unit v's without a search). */
static uint32_t buffer_later_from(const vs_program *p, size_t u, size_t v,
                                  uint32_t buffer)
{
  uint32_t first = p->units[u].first_buffer;
  if (buffer >= first && buffer < p->units[u + 1].first_buffer)
    return p->units[v].first_buffer + (buffer - first);
  return vs_period_buffer_later(p, buffer);
}

/* Whether the memory effects of op a (of unit u) match those of op b (of
 * unit v) one micro-batch on. */
static bool effects_alike(const vs_program *p, size_t u, size_t v,
                          const vs_pop *a, const vs_pop *b)
{
  uint32_t ea = a->first_effect, end_a = vs_op_effects_end(p, a);
  uint32_t eb = b->first_effect, end_b = vs_op_effects_end(p, b);
  if (end_a - ea != end_b - eb)
    return false;
  for (; ea < end_a; ea++, eb++) {
    const vs_effect *x = &p->effects[ea], *y = &p->effects[eb];
    if (x->step != y->step || x->at_end != y->at_end ||
        x->is_free != y->is_free ||
        buffer_later_from(p, u, v, x->buffer) != y->buffer)
      return false;
  }
  return true;
}

static bool ops_alike(const vs_program *progs, size_t n_progs,
                      const vs_program *p, size_t u, size_t v, uint32_t k)
{
  const vs_pop *a = &p->ops[p->units[u].first_op + k];
  const vs_pop *b = &p->ops[p->units[v].first_op + k];
  if (a->kind != b->kind || a->stream != b->stream || a->phase != b->phase ||
      a->notify != b->notify ||
      b->microbatch != (a->microbatch < 0 ? a->microbatch
                                          : a->microbatch + 1))
    return false;
  return deps_alike(progs, n_progs, p, a, b) && effects_alike(p, u, v, a, b);
}

/* Whether unit u of p is alike its unit one micro-batch later. */
static bool unit_alike(const vs_program *progs, size_t n_progs,
                       const vs_program *p, size_t u)
{
  size_t v = unit_later(p, u);
  uint32_t n_ops, n_bufs;
  if (v == SIZE_MAX ||
      (n_ops = unit_size(p, u, BY_OP)) != unit_size(p, v, BY_OP) ||
      (n_bufs = unit_size(p, u, BY_BUFFER)) != unit_size(p, v, BY_BUFFER))
    return false;
  for (uint32_t k = 0; k < n_bufs; k++)
    if (p->buffers[p->units[u].first_buffer + k] !=
        p->buffers[p->units[v].first_buffer + k])
      return false;
  for (uint32_t k = 0; k < n_ops; k++)
    if (!ops_alike(progs, n_progs, p, u, v, k))
      return false;
  return true;
}

uint32_t vs_period_repeats_from(const vs_program *progs, size_t n_progs,
                                uint32_t hi)
{
  uint32_t lo = 0;
  for (size_t s = 0; s < n_progs; s++) {
    const vs_program *p = &progs[s];
    if (!p->units)
      return hi;
    for (size_t u = 0; u < p->n_units; u++) {
      uint32_t mb = p->units[u].mb;
      if (mb >= lo && mb < hi && !unit_alike(progs, n_progs, p, u))
        lo = mb + 1;
    }
  }
  return lo;
}

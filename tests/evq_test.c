/* evq_test.c - the event queue: a binary min-heap on (t_ns, seq). Events
 * pop in time order, equal times in push order, whatever the interleaving of
 * pushes and pops, and the heap grows past its first allocation. Movable
 * events merge into that order, keep their seq when re-timed, and can be
 * withdrawn; their handles are checked and reused. */
#include "evq.h"

#include "error.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdint.h>
#include <stdlib.h>

/* Numerical Recipes' 32-bit LCG: a fixed, platform-independent sequence. */
static uint32_t lcg_next(uint32_t *state)
{
  *state = *state * 1664525u + 1013904223u;
  return *state;
}

/* Pops everything and checks (t_ns, seq) never decreases; returns the count. */
static size_t drain_in_order(vs_evq *q)
{
  vs_event prev, ev;
  size_t n = 0;
  while (vs_evq_pop(q, &ev)) {
    if (n > 0) {
      assert_true(ev.t_ns > prev.t_ns ||
                  (ev.t_ns == prev.t_ns && ev.seq > prev.seq));
    }
    prev = ev;
    n++;
  }
  return n;
}

static void test_empty(void **state)
{
  vs_evq q;
  vs_event ev;
  (void)state;
  vs_evq_init(&q);
  /* No allocation until the first push (evq.h). */
  assert_null(q.heap);
  assert_int_equal(q.n, 0);
  assert_null(vs_evq_peek(&q));
  assert_false(vs_evq_pop(&q, &ev));
  vs_evq_fini(&q);
  /* fini on an empty queue is harmless and leaves it reusable. */
  vs_evq_fini(&q);
  assert_int_equal(vs_evq_push(&q, 5, 0, 0), 0);
  assert_true(vs_evq_pop(&q, &ev));
  assert_false(vs_evq_pop(&q, &ev));
  vs_evq_fini(&q);
}

static void test_orders_by_time(void **state)
{
  /* Pushed out of order; expected pop order is ascending t_ns. */
  static const uint64_t times[] = {50, 10, 40, 30, 20};
  static const uint64_t sorted[] = {10, 20, 30, 40, 50};
  vs_evq q;
  vs_event ev;
  (void)state;
  vs_evq_init(&q);
  for (uint32_t i = 0; i < 5; i++)
    assert_int_equal(vs_evq_push(&q, times[i], i + 100, i), 0);
  assert_int_equal(q.n, 5);
  for (size_t i = 0; i < 5; i++) {
    assert_true(vs_evq_pop(&q, &ev));
    assert_int_equal(ev.t_ns, sorted[i]);
    /* The payload travels with its time: times[op] == t_ns. */
    assert_int_equal(times[ev.op], ev.t_ns);
    assert_int_equal(ev.rank, ev.op + 100);
  }
  assert_false(vs_evq_pop(&q, &ev));
  vs_evq_fini(&q);
}

static void test_ties_in_push_order(void **state)
{
  vs_evq q;
  vs_event ev;
  (void)state;
  vs_evq_init(&q);
  /* Ten events all at t = 7, plus an earlier and a later one pushed in the
   * middle: the seven-nanosecond ones must come out in push order. */
  for (uint32_t i = 0; i < 10; i++) {
    assert_int_equal(vs_evq_push(&q, 7, 0, i), 0);
    if (i == 4) {
      assert_int_equal(vs_evq_push(&q, 9, 0, 1000), 0);
      assert_int_equal(vs_evq_push(&q, 3, 0, 2000), 0);
    }
  }
  assert_true(vs_evq_pop(&q, &ev));
  assert_int_equal(ev.op, 2000);           /* t = 3 first */
  assert_int_equal(ev.seq, 6);             /* pushed 7th: seq 0-based = 6 */
  for (uint32_t i = 0; i < 10; i++) {
    assert_true(vs_evq_pop(&q, &ev));
    assert_int_equal(ev.t_ns, 7);
    assert_int_equal(ev.op, i);            /* push order among equals */
  }
  assert_true(vs_evq_pop(&q, &ev));
  assert_int_equal(ev.op, 1000);           /* t = 9 last */
  vs_evq_fini(&q);
}

static void test_seq_assigned_at_push(void **state)
{
  vs_evq q;
  const vs_event *top;
  (void)state;
  vs_evq_init(&q);
  assert_int_equal(vs_evq_push(&q, 100, 0, 0), 0);
  assert_int_equal(vs_evq_push(&q, 1, 0, 1), 0);
  /* seq counts pushes from 0, independent of the heap position. */
  top = vs_evq_peek(&q);
  assert_non_null(top);
  assert_int_equal(top->t_ns, 1);
  assert_int_equal(top->seq, 1);
  assert_int_equal(q.next_seq, 2);
  vs_evq_fini(&q);
}

static void test_peek_does_not_remove(void **state)
{
  vs_evq q;
  vs_event ev;
  const vs_event *top;
  (void)state;
  vs_evq_init(&q);
  assert_int_equal(vs_evq_push(&q, 20, 1, 2), 0);
  assert_int_equal(vs_evq_push(&q, 10, 3, 4), 0);
  top = vs_evq_peek(&q);
  assert_non_null(top);
  assert_int_equal(top->t_ns, 10);
  assert_int_equal(q.n, 2);                /* still both there */
  assert_true(vs_evq_pop(&q, &ev));
  /* pop returns what peek showed */
  assert_int_equal(ev.t_ns, 10);
  assert_int_equal(ev.rank, 3);
  assert_int_equal(ev.op, 4);
  top = vs_evq_peek(&q);
  assert_non_null(top);
  assert_int_equal(top->t_ns, 20);
  assert_true(vs_evq_pop(&q, &ev));
  assert_null(vs_evq_peek(&q));
  vs_evq_fini(&q);
}

/* Pops interleaved with pushes, the way the engine uses the queue: each
 * popped event at t schedules new events at t + d (d >= 0). Popped times
 * must never go backwards. */
static void test_interleaved(void **state)
{
  vs_evq q;
  vs_event ev;
  uint32_t rng = 12345;
  uint64_t last_t = 0, last_seq = 0;
  size_t popped = 0, pushed = 0;
  (void)state;
  vs_evq_init(&q);
  for (uint32_t i = 0; i < 8; i++, pushed++)
    assert_int_equal(vs_evq_push(&q, lcg_next(&rng) % 100, 0, i), 0);
  while (vs_evq_pop(&q, &ev)) {
    if (popped > 0)
      assert_true(ev.t_ns > last_t || (ev.t_ns == last_t && ev.seq > last_seq));
    last_t = ev.t_ns;
    last_seq = ev.seq;
    popped++;
    /* up to two follow-ups, some at the same nanosecond (d = 0) */
    for (uint32_t k = 0; k < 2 && pushed < 3000; k++, pushed++)
      assert_int_equal(vs_evq_push(&q, ev.t_ns + lcg_next(&rng) % 4, 0, k), 0);
  }
  /* everything pushed came out exactly once */
  assert_int_equal(popped, pushed);
  vs_evq_fini(&q);
}

static void test_random_thousands(void **state)
{
  /* 5000 events at times drawn from [0, 500): many ties, so both halves of
   * the key are exercised. */
  enum { N = 5000 };
  vs_evq q;
  uint32_t rng = 42;
  (void)state;
  vs_evq_init(&q);
  for (uint32_t i = 0; i < N; i++)
    assert_int_equal(vs_evq_push(&q, lcg_next(&rng) % 500, i % 7, i), 0);
  assert_int_equal(q.n, N);
  assert_int_equal(drain_in_order(&q), N);
  assert_int_equal(q.n, 0);
  vs_evq_fini(&q);
}

static void test_growth(void **state)
{
  vs_evq q;
  vs_event ev;
  (void)state;
  vs_evq_init(&q);
  /* The first push allocates 64 slots; the 65th doubles to 128 and the
   * 129th to 256 (evq.c: cap ? 2 * cap : 64). Push descending times so
   * every push sifts to the root. */
  for (uint32_t i = 0; i < 64; i++)
    assert_int_equal(vs_evq_push(&q, 1000 - i, 0, i), 0);
  assert_int_equal(q.cap, 64);
  assert_int_equal(vs_evq_push(&q, 1, 0, 64), 0);
  assert_int_equal(q.cap, 128);
  for (uint32_t i = 65; i < 129; i++)
    assert_int_equal(vs_evq_push(&q, 1000 - i, 0, i), 0);
  assert_int_equal(q.cap, 256);
  assert_int_equal(q.n, 129);
  /* The earliest survives the reallocations: t = 1 (op 64). */
  assert_true(vs_evq_pop(&q, &ev));
  assert_int_equal(ev.t_ns, 1);
  assert_int_equal(ev.op, 64);
  /* the rest: 128 events, in order */
  assert_int_equal(drain_in_order(&q), 128);
  vs_evq_fini(&q);
  assert_null(q.heap);
  assert_int_equal(q.cap, 0);
}

/* ------------------------------------------------------------------------
 * Movable events
 * ------------------------------------------------------------------------ */

static void test_movable_merge_with_plain(void **state)
{
  vs_evq q;
  vs_event ev;
  uint32_t h;
  static const uint32_t order[] = {1, 3, 0, 2}; /* ops by time 5, 8, 10, 20 */
  (void)state;
  vs_evq_init(&q);
  assert_int_equal(vs_evq_push(&q, 10, 0, 0), 0);
  assert_int_equal(vs_evq_push_movable(&q, 5, 0, 1, &h), 0);
  assert_int_equal(h, 0);                  /* the first handle */
  assert_int_equal(vs_evq_push(&q, 20, 0, 2), 0);
  assert_int_equal(vs_evq_push_movable(&q, 8, 0, 3, &h), 0);
  assert_int_equal(h, 1);
  assert_int_equal(vs_evq_size(&q), 4);
  assert_int_equal(vs_evq_peek(&q)->op, 1);
  for (size_t i = 0; i < 4; i++) {
    assert_true(vs_evq_pop(&q, &ev));
    assert_int_equal(ev.op, order[i]);
  }
  assert_false(vs_evq_pop(&q, &ev));
  assert_null(vs_evq_peek(&q));
  vs_evq_fini(&q);
}

static void test_update_moves_both_ways(void **state)
{
  vs_evq q;
  vs_event ev;
  uint32_t a, b;
  (void)state;
  vs_evq_init(&q);
  assert_int_equal(vs_evq_push(&q, 50, 0, 100), 0);
  assert_int_equal(vs_evq_push_movable(&q, 10, 0, 1, &a), 0);
  assert_int_equal(vs_evq_push_movable(&q, 20, 0, 2, &b), 0);
  /* a later than the plain event, b earlier than where a was */
  assert_int_equal(vs_evq_update(&q, a, 60), 0);
  assert_int_equal(vs_evq_update(&q, b, 5), 0);
  assert_true(vs_evq_pop(&q, &ev));
  assert_int_equal(ev.op, 2);
  assert_int_equal(ev.t_ns, 5);
  assert_true(vs_evq_pop(&q, &ev));
  assert_int_equal(ev.op, 100);
  assert_true(vs_evq_pop(&q, &ev));
  assert_int_equal(ev.op, 1);
  assert_int_equal(ev.t_ns, 60);
  vs_evq_fini(&q);
}

static void test_update_keeps_seq(void **state)
{
  vs_evq q;
  vs_event ev;
  uint32_t h;
  (void)state;
  vs_evq_init(&q);
  assert_int_equal(vs_evq_push(&q, 10, 0, 0), 0);             /* seq 0 */
  assert_int_equal(vs_evq_push_movable(&q, 99, 0, 1, &h), 0); /* seq 1 */
  assert_int_equal(vs_evq_push(&q, 10, 0, 2), 0);             /* seq 2 */
  /* moved onto the tie at 10: it pops by its push order, between them */
  assert_int_equal(vs_evq_update(&q, h, 10), 0);
  for (uint32_t i = 0; i < 3; i++) {
    assert_true(vs_evq_pop(&q, &ev));
    assert_int_equal(ev.op, i);
    assert_int_equal(ev.seq, i);
    assert_int_equal(ev.t_ns, 10);
  }
  vs_evq_fini(&q);
}

static void test_remove_and_dead_handles(void **state)
{
  vs_evq q;
  vs_event ev;
  uint32_t a, b, c, d;
  (void)state;
  vs_evq_init(&q);
  assert_int_equal(vs_evq_push_movable(&q, 1, 0, 1, &a), 0);
  assert_int_equal(vs_evq_push_movable(&q, 2, 0, 2, &b), 0);
  assert_int_equal(vs_evq_push_movable(&q, 3, 0, 3, &c), 0);
  assert_int_equal(vs_evq_remove(&q, b), 0);
  assert_int_equal(vs_evq_size(&q), 2);
  /* a removed handle, a never issued one: refused, queue unchanged */
  assert_int_equal(vs_evq_remove(&q, b), VS_EINPUT);
  assert_int_equal(vs_evq_update(&q, b, 7), VS_EINPUT);
  assert_int_equal(vs_evq_update(&q, 77, 7), VS_EINPUT);
  assert_int_equal(vs_evq_size(&q), 2);
  assert_true(vs_evq_pop(&q, &ev));
  assert_int_equal(ev.op, 1);
  /* popped: its handle is dead too */
  assert_int_equal(vs_evq_update(&q, a, 9), VS_EINPUT);
  /* freed handles come back, the last freed first (a, then b) */
  assert_int_equal(vs_evq_push_movable(&q, 4, 0, 4, &d), 0);
  assert_int_equal(d, a);
  assert_int_equal(vs_evq_push_movable(&q, 5, 0, 5, &d), 0);
  assert_int_equal(d, b);
  assert_int_equal(vs_evq_push_movable(&q, 6, 0, 6, &d), 0);
  assert_int_equal(d, 3);                  /* none free: a new one */
  for (uint32_t op = 3; op <= 6; op++) {
    assert_true(vs_evq_pop(&q, &ev));
    assert_int_equal(ev.op, op);
  }
  assert_int_equal(vs_evq_size(&q), 0);
  assert_int_equal(c, 2);                  /* the third handle: op 3, popped above */
  vs_evq_fini(&q);
  assert_null(q.mheap);
  assert_null(q.pos);
}

/* The reference for test_movable_random: what the queue should hold. */
typedef struct ref_event {
  uint64_t t_ns, seq;
  uint32_t handle;      /* VS_EVQ_NONE for a plain event */
  bool live;
} ref_event;

/* The live reference event that should pop next, or -1. */
static long ref_earliest(const ref_event *ref, size_t n)
{
  long best = -1;
  for (size_t i = 0; i < n; i++)
    if (ref[i].live &&
        (best < 0 || ref[i].t_ns < ref[best].t_ns ||
         (ref[i].t_ns == ref[best].t_ns && ref[i].seq < ref[best].seq)))
      best = (long)i;
  return best;
}

/* A live movable reference event chosen by r, or -1. */
static long ref_pick_movable(const ref_event *ref, size_t n, uint32_t r)
{
  for (size_t k = 0; k < n; k++) {
    size_t i = (r + k) % n;
    if (ref[i].live && ref[i].handle != VS_EVQ_NONE)
      return (long)i;
  }
  return -1;
}

/* 4000 random pushes, movable pushes, updates, removes and pops checked
 * against a list of what should be there: every pop is the reference's
 * earliest (t_ns, seq), so the indexed heap and its position table agree
 * with a plain scan. */
static void test_movable_random(void **state)
{
  enum { N = 4000 };
  ref_event *ref = calloc(N, sizeof *ref);
  vs_evq q;
  vs_event ev;
  uint32_t rng = 7;
  size_t n = 0;
  (void)state;
  assert_non_null(ref);
  vs_evq_init(&q);
  for (int step = 0; step < N; step++) {
    uint32_t what = lcg_next(&rng) % 6, t = lcg_next(&rng) % 300;
    long i;
    if (what <= 1) { /* push plain or movable */
      uint32_t h = VS_EVQ_NONE;
      if (what == 0)
        assert_int_equal(vs_evq_push(&q, t, 0, (uint32_t)n), 0);
      else
        assert_int_equal(vs_evq_push_movable(&q, t, 0, (uint32_t)n, &h), 0);
      ref[n] = (ref_event){t, n, h, true};
      n++;
    } else if (what <= 3 && (i = ref_pick_movable(ref, n, t)) >= 0) {
      if (what == 2) {
        assert_int_equal(vs_evq_update(&q, ref[i].handle, t), 0);
        ref[i].t_ns = t;
      } else {
        assert_int_equal(vs_evq_remove(&q, ref[i].handle), 0);
        ref[i].live = false;
      }
    } else if ((i = ref_earliest(ref, n)) >= 0) {
      assert_true(vs_evq_pop(&q, &ev));
      assert_int_equal(ev.op, (uint32_t)i);
      assert_int_equal(ev.t_ns, ref[i].t_ns);
      ref[i].live = false;
    }
  }
  while (vs_evq_pop(&q, &ev)) {
    long i = ref_earliest(ref, n);
    assert_int_equal(ev.op, (uint32_t)i);
    ref[i].live = false;
  }
  assert_int_equal(ref_earliest(ref, n), -1);
  vs_evq_fini(&q);
  free(ref);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_empty),
      cmocka_unit_test(test_orders_by_time),
      cmocka_unit_test(test_ties_in_push_order),
      cmocka_unit_test(test_seq_assigned_at_push),
      cmocka_unit_test(test_peek_does_not_remove),
      cmocka_unit_test(test_interleaved),
      cmocka_unit_test(test_random_thousands),
      cmocka_unit_test(test_growth),
      cmocka_unit_test(test_movable_merge_with_plain),
      cmocka_unit_test(test_update_moves_both_ways),
      cmocka_unit_test(test_update_keeps_seq),
      cmocka_unit_test(test_remove_and_dead_handles),
      cmocka_unit_test(test_movable_random),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* evq_test.c - the event queue: a binary min-heap on (t_ns, seq). Events
 * pop in time order, equal times in push order, whatever the interleaving of
 * pushes and pops, and the heap grows past its first allocation. */
#include "evq.h"

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
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

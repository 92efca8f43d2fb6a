/* pipeline_test.c - pipeline orders: GPipe, 1F1B and interleaved 1F1B as
 * Megatron-LM runs them. */
#include "testutil.h"

#include "pipeline.h"
#include "workload.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

static vs_unit *order_of(const vs_pipeline *pl, uint64_t stage, size_t *n)
{
  vs_unit *u = calloc(vs_pipeline_units(pl), sizeof *u);
  assert_non_null(u);
  *n = vs_pipeline_order(pl, stage, u);
  assert_int_equal(*n, vs_pipeline_units(pl));
  return u;
}

/* The micro-batches of one chunk whose forward has run and backward not. */
static uint64_t most_in_flight(const vs_unit *u, size_t n, uint32_t chunk)
{
  int64_t held = 0, most = 0;
  for (size_t i = 0; i < n; i++) {
    if (u[i].chunk != chunk)
      continue;
    held += u[i].forward ? 1 : -1;
    if (held > most)
      most = held;
  }
  return (uint64_t)most;
}

/* 1F1B, 4 stages, 8 micro-batches: stage 0 warms up with 3 forwards, then
 * alternates (F3 B0 F4 B1 ...), then drains; the last stage alternates
 * from the start. A stage holds at most stages - stage micro-batches. */
static void test_1f1b(void **state)
{
  vs_pipeline pl = {.schedule = VS_SCHED_1F1B, .microbatches = 8,
                    .stages = 4, .vstages = 1};
  size_t n;
  vs_unit *u;
  (void)state;
  u = order_of(&pl, 0, &n);
  for (uint32_t k = 0; k < 3; k++)
    assert_true(u[k].forward && u[k].mb == k);
  assert_true(u[3].forward && u[3].mb == 3);
  assert_true(!u[4].forward && u[4].mb == 0);
  assert_true(u[5].forward && u[5].mb == 4);
  assert_true(!u[15].forward && u[15].mb == 7);
  for (uint64_t s = 0; s < 4; s++) {
    vs_unit *v = order_of(&pl, s, &n);
    assert_int_equal(most_in_flight(v, n, 0), 4 - s);
    free(v);
  }
  free(u);
  u = order_of(&pl, 3, &n);
  for (uint32_t k = 0; k < 8; k++) {
    assert_true(u[2 * k].forward && u[2 * k].mb == k);
    assert_true(!u[2 * k + 1].forward && u[2 * k + 1].mb == k);
  }
  free(u);
}

/* The warm-up: p - s - 1 forwards under 1F1B, (p - s - 1) x 2 + (v - 1)
 * x p chunks interleaved (Megatron-LM's num_warmup_microbatches), at most
 * every forward, and every forward under GPipe. A stage's order runs the
 * warm-up's forwards, then (with a steady state) one more forward before
 * its first backward. */
static void test_warmup(void **state)
{
  vs_pipeline f = {.schedule = VS_SCHED_1F1B, .microbatches = 8,
                   .stages = 4, .vstages = 1};
  vs_pipeline il = {.schedule = VS_SCHED_INTERLEAVED, .microbatches = 4,
                    .stages = 4, .vstages = 2};
  vs_pipeline g = {.schedule = VS_SCHED_GPIPE, .microbatches = 5,
                   .stages = 2, .vstages = 1};
  (void)state;
  assert_int_equal(vs_pipeline_warmup(&f, 0), 3);
  assert_int_equal(vs_pipeline_warmup(&f, 3), 0);
  assert_int_equal(vs_pipeline_warmup(&il, 3), 4);
  assert_int_equal(vs_pipeline_warmup(&il, 0), 8); /* 10, capped at 8 */
  assert_int_equal(vs_pipeline_warmup(&g, 1), 5);
  for (uint64_t s = 0; s < 4; s++) {
    size_t n;
    vs_unit *u = order_of(&il, s, &n);
    uint64_t w = vs_pipeline_warmup(&il, s);
    uint64_t first_backward = w == 8 ? w : w + 1;
    for (uint64_t k = 0; k < first_backward; k++)
      assert_true(u[k].forward);
    assert_false(u[first_backward].forward);
    free(u);
  }
}

/* GPipe: all forwards, then all backwards, in micro-batch order. */
static void test_gpipe(void **state)
{
  vs_pipeline pl = {.schedule = VS_SCHED_GPIPE, .microbatches = 5,
                    .stages = 2, .vstages = 1};
  size_t n;
  vs_unit *u = order_of(&pl, 1, &n);
  (void)state;
  for (uint32_t k = 0; k < 5; k++) {
    assert_true(u[k].forward && u[k].mb == k);
    assert_true(!u[5 + k].forward && u[5 + k].mb == k);
  }
  assert_int_equal(most_in_flight(u, n, 0), 5);
  assert_int_equal(vs_pipeline_ring(&pl), 5);
  free(u);
}

/* Interleaved, 2 stages x 2 chunks, 4 micro-batches, stage 0: warm-up
 * (2 - 0 - 1) * 2 + (2 - 1) * 2 = 4 forwards (chunk 0 of mb 0 and 1, then
 * chunk 1 of mb 0 and 1), then alternating, backwards from the last chunk
 * first (Megatron-LM get_model_chunk_id). */
static void test_interleaved(void **state)
{
  vs_pipeline pl = {.schedule = VS_SCHED_INTERLEAVED, .microbatches = 4,
                    .stages = 2, .vstages = 2};
  static const vs_unit want[] = {
      {true, 0, 0},  {true, 1, 0},  {true, 0, 1},  {true, 1, 1},
      {true, 2, 0},  {false, 0, 1}, {true, 3, 0},  {false, 1, 1},
      {true, 2, 1},  {false, 0, 0}, {true, 3, 1},  {false, 1, 0},
      {false, 2, 1}, {false, 3, 1}, {false, 2, 0}, {false, 3, 0}};
  size_t n;
  vs_unit *u = order_of(&pl, 0, &n);
  (void)state;
  assert_int_equal(n, 16);
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(u[i].forward, want[i].forward);
    assert_int_equal(u[i].mb, want[i].mb);
    assert_int_equal(u[i].chunk, want[i].chunk);
  }
  free(u);
}

/* Over many shapes: every (micro-batch, chunk) runs once forward and once
 * backward, forward first; no chunk ever holds more micro-batches than
 * vs_pipeline_ring says. */
static void test_orders_are_complete(void **state)
{
  static const int scheds[] = {VS_SCHED_GPIPE, VS_SCHED_1F1B,
                               VS_SCHED_INTERLEAVED};
  (void)state;
  for (int si = 0; si < 3; si++)
    for (uint64_t p = 1; p <= 8; p *= 2)
      for (uint64_t m = p; m <= 4 * p; m += p)
        for (uint64_t s = 0; s < p; s++) {
          vs_pipeline pl = {.schedule = scheds[si], .microbatches = m,
                            .stages = p,
                            .vstages = scheds[si] == VS_SCHED_INTERLEAVED ? 3
                                                                          : 1};
          size_t n;
          vs_unit *u = order_of(&pl, s, &n);
          uint8_t *seen = calloc(m * pl.vstages, 1);
          assert_non_null(seen);
          for (size_t i = 0; i < n; i++) {
            uint8_t *x = &seen[u[i].mb * pl.vstages + u[i].chunk];
            assert_true(u[i].mb < m && u[i].chunk < pl.vstages);
            assert_int_equal(*x, u[i].forward ? 0 : 1);
            *x = (uint8_t)(*x + 1);
          }
          for (size_t i = 0; i < m * pl.vstages; i++)
            assert_int_equal(seen[i], 2);
          for (uint32_t c = 0; c < pl.vstages; c++)
            assert_true(most_in_flight(u, n, c) <= vs_pipeline_ring(&pl));
          free(seen);
          free(u);
        }
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_1f1b),
      cmocka_unit_test(test_warmup),
      cmocka_unit_test(test_gpipe),
      cmocka_unit_test(test_interleaved),
      cmocka_unit_test(test_orders_are_complete),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

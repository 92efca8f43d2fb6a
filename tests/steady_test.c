/* steady_test.c - the engine's steady-state watcher (engine/steady.h) on
 * the programs of a 4-stage 1F1B pipeline of a small GPT (16 layers, 4 a
 * stage, dp 2), one rank per stage, checked against whole runs of the
 * engine: what the proof says a period adds is what more micro-batches
 * add. */
#include "testutil.h"

#include "engine.h"
#include "layout.h"
#include "model.h"
#include "recipe.h"
#include "schedule.h"
#include "steady.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STAGES 4

static const char gpt[] =
    "[model]\narch = gpt\nlayers = 16\nhidden = 256\nheads = 4\n"
    "vocab = 1000\nseq_len = 128\n[parallel]\npp = 4\n"
    "[runtime]\nallocator = exact\n";

/* A pipeline's programs with a rank for each, and the resources. */
typedef struct pipeline {
  tu_pipeline *t;
  vs_rank ranks[STAGES];
  vs_resource_spec res[VS_RES_N];
} pipeline;

/* gpt on 8 GPUs (dp 2) with mbs micro-batches a step: every stage built
 * and linked, a rank for each. */
static pipeline *build(uint64_t mbs)
{
  pipeline *p = calloc(1, sizeof *p);
  char batch[64];
  const char *sets[1] = {batch};
  assert_non_null(p);
  snprintf(batch, sizeof batch, "training.global_batch=%llu",
           (unsigned long long)(2 * mbs));
  p->t = tu_build_pipeline(gpt, sets, 1, 8);
  assert_int_equal(p->t->n, STAGES);
  for (int s = 0; s < STAGES; s++)
    vs_rank_init(&p->ranks[s], (uint32_t)s, &p->t->progs[s],
                 p->t->topo.memory_bytes, p->t->lay.framework_bytes);
  vs_resource_table(&p->t->topo, p->res);
  return p;
}

static void destroy(pipeline *p)
{
  for (int s = 0; s < STAGES; s++)
    vs_rank_fini(&p->ranks[s]);
  tu_free_pipeline(p->t);
  free(p);
}

/* Runs p's ranks, watched by st when not NULL. */
static void run(pipeline *p, vs_steady *st, vs_engine_stats *stats)
{
  vs_engine_opts opts = {.ranks_per_stage = 1, .resources = p->res,
                         .n_resources = VS_RES_N, .steady = st};
  vs_error err;
  vs_error_clear(&err);
  if (st)
    vs_steady_init(st, p->ranks, STAGES, NULL, 0);
  if (vs_engine_run(p->ranks, STAGES, &opts, stats, &err))
    fail_msg("engine: %s", err.msg);
}

/* The watcher proves a period on 16 micro-batches, and 12 more
 * micro-batches (a multiple of the period, checked) add exactly 12 /
 * period times its time and events to the whole run: the last rank's end
 * and the events of 28 micro-batches against 16's. */
static void test_proven_period_is_what_more_micro_batches_add(void **state)
{
  pipeline *a = build(16), *b = build(28);
  vs_engine_stats sa, sb;
  vs_steady st;
  uint64_t n;
  (void)state;
  assert_true(vs_steady_applies(a->ranks, STAGES));
  run(a, &st, &sa);
  run(b, NULL, &sb);
  assert_false(sa.stopped);
  assert_true(st.proven);
  assert_false(st.failed);
  assert_true(st.period >= 1 && st.period <= VS_STEADY_PERIOD_MAX);
  assert_int_equal(12 % st.period, 0);
  assert_true(st.period_ns > 0 && st.period_events > 0);
  assert_true(st.proven_at_ns > 0 && st.proven_at_ns < sa.end_ns);
  n = 12 / st.period;
  assert_int_equal(sb.end_ns, sa.end_ns + n * st.period_ns);
  assert_int_equal(sb.events, sa.events + n * st.period_events);
  for (int s = 0; s < STAGES; s++) {
    assert_int_equal(b->ranks[s].end_ns, a->ranks[s].end_ns + n * st.period_ns);
    assert_int_equal(b->ranks[s].wait_p2p_ns,
                     a->ranks[s].wait_p2p_ns + n * st.growth[s].wait_p2p_ns);
  }
  vs_steady_fini(&st);
  destroy(a);
  destroy(b);
}

/* A step too short to have two steady rounds away from its end proves
 * nothing: 5 micro-batches on 4 stages. */
static void test_short_step_proves_nothing(void **state)
{
  pipeline *p = build(5);
  vs_engine_stats stats;
  vs_steady st;
  (void)state;
  run(p, &st, &stats);
  assert_false(st.proven);
  assert_int_equal(st.period, 0);
  vs_steady_fini(&st);
  destroy(p);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_proven_period_is_what_more_micro_batches_add),
      cmocka_unit_test(test_short_step_proves_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

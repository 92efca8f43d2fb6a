/* period_test.c - the steady state of built programs (program/period.h):
 * where an op or buffer sits, the one a micro-batch on, and which
 * micro-batches' units repeat, on the programs of a 4-stage 1F1B
 * pipeline of a small GPT (16 layers, 4 a stage, dp 2). */
#include "testutil.h"

#include "layout.h"
#include "model.h"
#include "period.h"
#include "recipe.h"
#include "schedule.h"

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
    "vocab = 1000\nseq_len = 128\n[parallel]\npp = 4\n";

typedef tu_pipeline pipeline;

/* gpt on 4 * tp * 2 GPUs (dp 2) with global_batch 2 * mbs (mbs
 * micro-batches a step) and sets, every stage built and linked. */
static pipeline *build(uint64_t mbs, const char *const *sets, size_t n_sets,
                       uint64_t tp)
{
  char batch[64];
  const char *all[8];
  assert_true(n_sets < 8);
  snprintf(batch, sizeof batch, "training.global_batch=%llu",
           (unsigned long long)(2 * mbs));
  all[0] = batch;
  for (size_t i = 0; i < n_sets; i++)
    all[i + 1] = sets[i];
  return tu_build_pipeline(gpt, all, n_sets + 1, 8 * tp);
}

static void destroy(pipeline *p) { tu_free_pipeline(p); }

/* The first op of p named name in micro-batch mb (UINT32_MAX: none). */
static uint32_t find_op(const vs_program *p, const char *name, int mb)
{
  for (size_t i = 0; i < p->n_ops; i++)
    if (p->ops[i].microbatch == mb && !strcmp(vs_op_name(p, &p->ops[i]), name))
      return (uint32_t)i;
  return UINT32_MAX;
}

/* Every unit is marked, in the stage's 1F1B order, and the ops and
 * buffers of a unit map to the same ones of the next micro-batch: the
 * setup's to themselves, the step's end's to none. */
static void test_ops_and_buffers_one_micro_batch_on(void **state)
{
  pipeline *p = build(12, NULL, 0, 1);
  const vs_program *s0 = &p->progs[0];
  uint32_t op = find_op(s0, "qkv_proj", 3), later, mb = 99;
  (void)state;
  assert_int_equal(s0->n_units, 2 * 12);
  assert_int_equal(s0->unit_mbs, 12);
  /* stage 0 warms up with pp - 1 = 3 forwards, then alternates */
  assert_true(s0->units[0].forward && s0->units[2].forward &&
              s0->units[3].forward && !s0->units[4].forward);
  assert_int_equal(s0->units[3].mb, 3);
  assert_int_equal(s0->units[4].mb, 0);
  assert_int_not_equal(op, UINT32_MAX);
  assert_int_equal(vs_period_op_span(s0, op, &mb), VS_SPAN_UNIT);
  assert_int_equal(mb, 3);
  later = vs_period_op_later(s0, op);
  assert_int_equal(later, find_op(s0, "qkv_proj", 4));
  assert_int_equal(s0->ops[later].microbatch, 4);
  assert_int_equal(vs_period_op_later(s0, 0), 0); /* the setup */
  assert_int_equal(vs_period_op_span(s0, 0, &mb), VS_SPAN_SETUP);
  assert_int_equal(vs_period_op_span(s0, (uint32_t)s0->n_ops - 1, &mb),
                   VS_SPAN_END);
  assert_int_equal(vs_period_op_later(s0, (uint32_t)s0->n_ops - 1),
                   VS_PERIOD_NONE);
  /* the last micro-batch has no next */
  assert_int_equal(vs_period_op_later(s0, find_op(s0, "qkv_proj", 11)),
                   VS_PERIOD_NONE);
  /* a buffer of micro-batch 3's forward: the same kind, a micro-batch on */
  {
    const vs_unit_mark *u = &s0->units[3], *v = &s0->units[5];
    uint32_t b = u->first_buffer;
    assert_int_equal(v->mb, 4);
    assert_true(v->forward);
    assert_int_equal(vs_period_buffer_later(s0, b), v->first_buffer);
    assert_memory_equal(vs_program_buffer(s0, b),
                        vs_program_buffer(s0, v->first_buffer),
                        sizeof(vs_buffer));
    assert_int_equal(vs_period_buffer_span(s0, b, &mb), VS_SPAN_UNIT);
    assert_int_equal(mb, 3);
  }
  destroy(p);
}

/* The units repeat from the first micro-batch up to the second to last,
 * and not into the last: its backward reduces the gradients over dp
 * (dp_all_reduce), which no other micro-batch does. */
static void test_units_repeat_until_the_last(void **state)
{
  pipeline *p = build(12, NULL, 0, 1);
  (void)state;
  assert_int_not_equal(find_op(&p->progs[0], "dp_all_reduce", 11),
                       UINT32_MAX);
  assert_int_equal(find_op(&p->progs[0], "dp_all_reduce", 10), UINT32_MAX);
  assert_int_equal(vs_period_repeats_from(p->progs, STAGES, 10), 0);
  assert_int_equal(vs_period_repeats_from(p->progs, STAGES, 11), 11);
  destroy(p);
}

/* Counts p's ops by name into names/counts (n of them so far). */
static size_t count_ops(const vs_program *p, const char **names,
                        size_t *counts, size_t n, size_t cap, int sign)
{
  for (size_t i = 0; i < p->n_ops; i++) {
    const char *name = vs_op_name(p, &p->ops[i]);
    size_t k = 0;
    while (k < n && strcmp(names[k], name))
      k++;
    if (k == n) {
      assert_true(n < cap);
      names[n] = name;
      counts[n++] = 0;
    }
    counts[k] += (size_t)sign;
  }
  return n;
}

/* What steady.h's proof rests on: a step of one more micro-batch is the
 * same program with one more repeating micro-batch's units. Checked on
 * every stage: the longer program has, op for op by name, exactly the
 * ops of micro-batch 5's units more; with ZeRO-1, full recompute and
 * tp 2 too. */
static void check_one_more(const char *const *sets, size_t n_sets, uint64_t tp)
{
  pipeline *a = build(12, sets, n_sets, tp), *b = build(13, sets, n_sets, tp);
  for (int s = 0; s < STAGES; s++) {
    const vs_program *pa = &a->progs[s], *pb = &b->progs[s];
    const char *names[256];
    size_t counts[256], n = 0, unit_ops = 0;
    n = count_ops(pb, names, counts, n, 256, 1);
    n = count_ops(pa, names, counts, n, 256, -1);
    for (size_t u = 0; u < pa->n_units; u++) {
      if (pa->units[u].mb != 5)
        continue;
      for (uint32_t o = pa->units[u].first_op; o < pa->units[u + 1].first_op;
           o++) {
        const char *name = vs_op_name(pa, &pa->ops[o]);
        for (size_t k = 0; k < n; k++)
          if (!strcmp(names[k], name))
            counts[k]--;
        unit_ops++;
      }
    }
    assert_true(unit_ops > 0);
    assert_int_equal(pb->n_ops - pa->n_ops, unit_ops);
    for (size_t k = 0; k < n; k++)
      assert_int_equal(counts[k], 0);
  }
  destroy(a);
  destroy(b);
}

static void test_one_more_micro_batch_is_one_more_unit_pair(void **state)
{
  const char *const zero1[] = {"parallel.zero=1"};
  const char *const full[] = {"training.checkpointing=full", "parallel.tp=2"};
  (void)state;
  check_one_more(NULL, 0, 1);
  check_one_more(zero1, 1, 1);
  check_one_more(full, 2, 2);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ops_and_buffers_one_micro_batch_on),
      cmocka_unit_test(test_units_repeat_until_the_last),
      cmocka_unit_test(test_one_more_micro_batch_is_one_more_unit_pair),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

/* engine_test.c - the discrete-event engine on programs built by hand.
 *
 * Each test writes a small vs_program the way vs_schedule_build would:
 * ops in topological order, stream_ops[] listing each stream's ops in
 * program order, deps[] and effects[] contiguous per op, every
 * buffer allocated once and freed at most once. Durations are round
 * nanosecond counts so every expected time is a sum of them. */
#include "engine.h"
#include "testutil.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { C = VS_STREAM_COMPUTE, M = VS_STREAM_COMM };

/* ------------------------------------------------------------------------
 * Building programs by hand
 * ------------------------------------------------------------------------ */

/* Empty program with room for max ops (and as many deps, effects and
 * buffers per op as the tests use). */
static void prog_init(vs_program *p, size_t max)
{
  memset(p, 0, sizeof *p);
  p->cap_ops = max;
  p->cap_deps = 4 * max;
  p->cap_effects = 4 * max;
  p->cap_buffers = 2 * max;
  p->ops = malloc(p->cap_ops * sizeof *p->ops);
  p->cap_kinds = max; /* one kind an op */
  p->kinds = malloc(p->cap_kinds * sizeof *p->kinds);
  assert_non_null(p->kinds);
  p->deps = malloc(p->cap_deps * sizeof *p->deps);
  p->effects = malloc(p->cap_effects * sizeof *p->effects);
  p->buffers = malloc(p->cap_buffers * sizeof *p->buffers);
  p->cap_buffer_kinds = p->cap_buffers; /* one kind a buffer */
  p->buffer_kinds = calloc(p->cap_buffer_kinds, sizeof *p->buffer_kinds);
  assert_non_null(p->buffer_kinds);
  assert_non_null(p->ops);
  assert_non_null(p->deps);
  assert_non_null(p->effects);
  assert_non_null(p->buffers);
  for (int s = 0; s < VS_STREAM_N; s++) {
    p->cap_stream_ops[s] = max;
    p->stream_ops[s] = malloc(max * sizeof *p->stream_ops[s]);
    assert_non_null(p->stream_ops[s]);
  }
}

/* The index of the kind `k` in p, appended when new: ops that do the
 * same share a kind, as the builder's do (so an engine that read kinds by
 * op index would fail these tests). */
static uint32_t prog_kind(vs_program *p, const vs_op_kind *k)
{
  for (uint32_t i = 0; i < p->n_kinds; i++)
    if (memcmp(&p->kinds[i], k, sizeof *k) == 0)
      return i;
  assert_true(p->n_kinds < p->cap_kinds);
  p->kinds[p->n_kinds] = *k;
  return (uint32_t)p->n_kinds++;
}

/* Appends an op on stream, doing `what`, that waits for deps[0..n_deps).
 * Its effects must be added (prog_effect) before the next op. */
static uint32_t prog_op_doing(vs_program *p, int stream, const vs_op_kind *what,
                              const uint32_t *deps, size_t n_deps)
{
  uint32_t idx = (uint32_t)p->n_ops;
  vs_pop *op = &p->ops[idx];
  assert_true(p->n_ops < p->cap_ops);
  assert_true(p->n_deps + n_deps <= p->cap_deps);
  memset(op, 0, sizeof *op);
  op->kind = prog_kind(p, what) & VS_PROGRAM_KINDS_MAX;
  op->microbatch = -1;
  op->stream = (uint32_t)stream & 15u;
  op->phase = VS_PHASE_FWD;
  op->first_dep = (uint32_t)p->n_deps;
  for (size_t i = 0; i < n_deps; i++) {
    assert_true(deps[i] < idx); /* topological order */
    p->deps[p->n_deps++] = deps[i];
  }
  op->first_effect = (uint32_t)p->n_effects;
  p->stream_ops[stream][p->n_stream_ops[stream]++] = idx;
  p->n_ops++;
  return idx;
}

/* What an op of name taking dur_ns does, through no resource, in no
 * layer (every byte set: prog_kind compares them). */
static vs_op_kind kind_of(const char *name, uint64_t dur_ns)
{
  vs_op_kind k;
  memset(&k, 0, sizeof k);
  snprintf(k.name, sizeof k.name, "%s", name);
  k.dur_ns = dur_ns;
  k.layer = -1;
  return k;
}

/* An op of name taking dur_ns on stream, through no resource. */
static uint32_t prog_op(vs_program *p, int stream, const char *name,
                        uint64_t dur_ns, const uint32_t *deps, size_t n_deps)
{
  vs_op_kind k = kind_of(name, dur_ns);
  return prog_op_doing(p, stream, &k, deps, n_deps);
}

/* A buffer of bytes of category on the GPU; equal ones share what they
 * are, as the builder's do. */
static uint32_t prog_buffer(vs_program *p, uint64_t bytes, int category)
{
  vs_buffer what;
  uint32_t k = 0;
  assert_true(p->n_buffers < p->cap_buffers);
  memset(&what, 0, sizeof what);
  what.bytes = bytes;
  what.category = category;
  what.place = VS_PLACE_GPU;
  while (k < p->n_buffer_kinds &&
         memcmp(&p->buffer_kinds[k], &what, sizeof what) != 0)
    k++;
  if (k == p->n_buffer_kinds)
    p->buffer_kinds[p->n_buffer_kinds++] = what;
  p->buffers[p->n_buffers] = k;
  return (uint32_t)p->n_buffers++;
}

/* Adds an effect to the newest op (effects are contiguous per op). */
static void prog_effect(vs_program *p, uint32_t op, uint32_t buf, bool at_end,
                        bool is_free)
{
  assert_int_equal(op, p->n_ops - 1);
  assert_true(p->n_effects < p->cap_effects);
  assert_true(buf <= VS_PROGRAM_BUFFERS_MAX);
  p->effects[p->n_effects].buffer = buf & VS_PROGRAM_BUFFERS_MAX;
  p->effects[p->n_effects].step = 0; /* every step */
  p->effects[p->n_effects].at_end = at_end ? 1u : 0u;
  p->effects[p->n_effects].is_free = is_free ? 1u : 0u;
  p->n_effects++;
}

/* Runs n ranks of prog (capacity cap, framework fw) recording everything
 * with invariant checks on; returns vs_engine_run's code. */
static int run_ranks(vs_rank *ranks, size_t n, const vs_program *prog,
                     uint64_t cap, uint64_t fw, vs_engine_stats *stats,
                     vs_error *err)
{
  vs_engine_opts opts = {.record_timeline = true, .record_spans = true,
                         .check_invariants = true};
  for (size_t i = 0; i < n; i++)
    vs_rank_init(&ranks[i], (uint32_t)i, prog, cap, fw);
  vs_error_clear(err);
  return vs_engine_run(ranks, n, &opts, stats, err);
}

static void run_one(vs_rank *rank, const vs_program *prog,
                    vs_engine_stats *stats)
{
  vs_error err;
  if (run_ranks(rank, 1, prog, UINT64_MAX / 2, 0, stats, &err) != 0)
    fail_msg("engine: %s", err.msg);
}

/* The span of op (spans are recorded in start order, one per op). */
static const vs_op_span *span_of(const vs_rank *r, uint32_t op)
{
  for (size_t i = 0; i < r->n_spans; i++)
    if (r->spans[i].op == op)
      return &r->spans[i];
  fail_msg("op %u has no span", op);
  return NULL;
}

static void assert_span(const vs_rank *r, uint32_t op, uint64_t start,
                        uint64_t end)
{
  const vs_op_span *s = span_of(r, op);
  if (s->start_ns != start || s->end_ns != end)
    fail_msg("op %u ran [%llu, %llu], expected [%llu, %llu]", op,
             (unsigned long long)s->start_ns, (unsigned long long)s->end_ns,
             (unsigned long long)start, (unsigned long long)end);
}

/* ------------------------------------------------------------------------
 * Timing
 * ------------------------------------------------------------------------ */

static void test_one_stream_in_order(void **state)
{
  vs_program p;
  vs_rank r;
  vs_engine_stats st;
  uint32_t a, b, c;
  (void)state;
  prog_init(&p, 8);
  a = prog_op(&p, C, "a", 10, NULL, 0);
  b = prog_op(&p, C, "b", 20, NULL, 0);
  c = prog_op(&p, C, "c", 30, NULL, 0);
  run_one(&r, &p, &st);
  /* back to back, in stream order: [0,10] [10,30] [30,60] */
  assert_int_equal(r.n_spans, 3);
  assert_int_equal(r.spans[0].op, a);
  assert_int_equal(r.spans[1].op, b);
  assert_int_equal(r.spans[2].op, c);
  assert_span(&r, a, 0, 10);
  assert_span(&r, b, 10, 30);
  assert_span(&r, c, 30, 60);
  assert_int_equal(r.end_ns, 60);   /* 10 + 20 + 30 */
  assert_int_equal(st.end_ns, 60);
  assert_int_equal(st.events, 3);   /* one completion per op */
  assert_int_equal(r.done[C], 3);
  assert_int_equal(r.n_timeline, 0); /* no memory effects */
  vs_rank_fini(&r);
  vs_program_fini(&p);
}

static void test_comm_overlaps_compute(void **state)
{
  vs_program p;
  vs_rank r;
  vs_engine_stats st;
  uint32_t c0, m0, c1, c2, c3;
  (void)state;
  prog_init(&p, 8);
  c0 = prog_op(&p, C, "bwd0", 100, NULL, 0);
  m0 = prog_op(&p, M, "all_reduce", 250, &c0, 1);
  c1 = prog_op(&p, C, "bwd1", 100, NULL, 0);
  c2 = prog_op(&p, C, "bwd2", 100, NULL, 0);
  c3 = prog_op(&p, C, "optimizer", 40, &m0, 1);
  run_one(&r, &p, &st);
  assert_span(&r, c0, 0, 100);
  /* starts the moment its dependency ends, runs 250 ns on its own stream */
  assert_span(&r, m0, 100, 350);
  /* later compute is not held back by the collective: overlaps it */
  assert_span(&r, c1, 100, 200);
  assert_span(&r, c2, 200, 300);
  /* the optimizer waits for the all-reduce (350), not its stream (300) */
  assert_span(&r, c3, 350, 390);
  assert_int_equal(st.end_ns, 390); /* 350 + 40 */
  assert_int_equal(st.events, 5);
  vs_rank_fini(&r);
  vs_program_fini(&p);
}

static void test_waits_on_other_stream(void **state)
{
  vs_program p;
  vs_rank r;
  vs_engine_stats st;
  uint32_t g, c0, c1, d[2];
  (void)state;
  prog_init(&p, 8);
  g = prog_op(&p, M, "gather", 500, NULL, 0);
  c0 = prog_op(&p, C, "early", 30, NULL, 0);
  d[0] = g;
  d[1] = c0;
  c1 = prog_op(&p, C, "needs_gather", 10, d, 2);
  run_one(&r, &p, &st);
  assert_span(&r, g, 0, 500);
  assert_span(&r, c0, 0, 30);
  /* compute idles from 30 to 500 until the gather ends */
  assert_span(&r, c1, 500, 510);
  assert_int_equal(st.end_ns, 510);
  vs_rank_fini(&r);
  vs_program_fini(&p);
}

static void test_zero_duration_and_same_time_chain(void **state)
{
  vs_program p;
  vs_rank r;
  vs_engine_stats st;
  uint32_t a, b, c;
  (void)state;
  prog_init(&p, 8);
  a = prog_op(&p, C, "setup", 0, NULL, 0);
  b = prog_op(&p, M, "zero", 0, &a, 1);
  c = prog_op(&p, C, "after", 5, &b, 1);
  run_one(&r, &p, &st);
  /* all start at t = 0: zero-length ops still complete as events */
  assert_span(&r, a, 0, 0);
  assert_span(&r, b, 0, 0);
  assert_span(&r, c, 0, 5);
  assert_int_equal(st.events, 3);
  assert_int_equal(st.end_ns, 5);
  vs_rank_fini(&r);
  vs_program_fini(&p);
}

/* ------------------------------------------------------------------------
 * Memory effects
 * ------------------------------------------------------------------------ */

/* setup (0 ns) holds 1000 B of params; fwd (100 ns) has a 200 B temp for its
 * duration and saves 400 B of activations at its end; a gather on the comm
 * stream (150 ns) holds 300 B of temp; bwd (100 ns) has a 250 B temp and
 * frees the activations at its end.
 *   t=0   params +1000, fwd temp +200, gather +300          -> 1500
 *   t=100 fwd temp -200, act +400 (fwd end), bwd temp +250  -> 1950 (peak)
 *   t=150 gather -300                                       -> 1650
 *   t=200 bwd temp -250, act -400                           -> 1000 */
static void memory_program(vs_program *p)
{
  uint32_t setup, fwd, gather, bwd, par, t1, act, g, t2;
  prog_init(p, 8);
  setup = prog_op(p, C, "setup", 0, NULL, 0);
  par = prog_buffer(p, 1000, VS_CAT_PARAMS);
  prog_effect(p, setup, par, false, false);
  fwd = prog_op(p, C, "fwd", 100, NULL, 0);
  t1 = prog_buffer(p, 200, VS_CAT_TEMP);
  act = prog_buffer(p, 400, VS_CAT_ACTIVATIONS);
  prog_effect(p, fwd, t1, false, false);
  prog_effect(p, fwd, t1, true, true);
  prog_effect(p, fwd, act, true, false);
  gather = prog_op(p, M, "gather", 150, &setup, 1);
  g = prog_buffer(p, 300, VS_CAT_TEMP);
  prog_effect(p, gather, g, false, false);
  prog_effect(p, gather, g, true, true);
  bwd = prog_op(p, C, "bwd", 100, &fwd, 1);
  t2 = prog_buffer(p, 250, VS_CAT_TEMP);
  prog_effect(p, bwd, t2, false, false);
  prog_effect(p, bwd, t2, true, true);
  prog_effect(p, bwd, act, true, true);
}

static void test_memory_effects_start_and_end(void **state)
{
  vs_program p;
  vs_rank r;
  vs_engine_stats st;
  (void)state;
  memory_program(&p);
  run_one(&r, &p, &st);
  /* Peak 1000 + 400 + 300 + 250 = 1950 at t = 100 when bwd (op 3) starts.
   * Had the activations been allocated at fwd's start, the peak would be
   * 1000 + 200 + 400 + 300 = 1900 at t = 0 (op 2) instead. */
  assert_int_equal(r.mem.peak_allocated_bytes, 1950);
  assert_int_equal(r.mem.peak_t_ns, 100);
  assert_int_equal(r.mem.peak_op, 3);
  assert_int_equal(r.mem.at_peak[VS_CAT_PARAMS], 1000);
  assert_int_equal(r.mem.at_peak[VS_CAT_ACTIVATIONS], 400);
  assert_int_equal(r.mem.at_peak[VS_CAT_TEMP], 550); /* gather 300 + bwd 250 */
  /* everything but the params is freed by the end */
  assert_int_equal(r.mem.allocated_bytes, 1000);
  assert_int_equal(r.mem.by_cat[VS_CAT_PARAMS], 1000);
  assert_int_equal(r.mem.by_cat[VS_CAT_TEMP], 0);
  assert_int_equal(r.mem.by_cat[VS_CAT_ACTIVATIONS], 0);
  assert_false(r.mem.oom.happened);
  assert_int_equal(st.end_ns, 200); /* bwd: 100 + 100 */
  vs_rank_fini(&r);
  vs_program_fini(&p);
}

/* vs_rank_record_lifetimes: at memory_program's peak (bwd's start, t =
 * 100) the params, the activations, gather's and bwd's temporaries are
 * live; fwd's temporary was freed at fwd's end; without lifetimes no
 * buffer is reported live. */
static void test_lifetimes_at_peak(void **state)
{
  vs_program p;
  vs_rank r, plain;
  vs_engine_stats st;
  vs_engine_opts opts = {.check_invariants = true};
  vs_error err;
  static const bool live[5] = {true, false, true, true, true};
  uint64_t sum = 0;
  (void)state;
  memory_program(&p);
  vs_rank_init(&r, 0, &p, UINT64_MAX / 2, 0);
  assert_int_equal(vs_rank_record_lifetimes(&r), 0);
  vs_error_clear(&err);
  assert_int_equal(vs_engine_run(&r, 1, &opts, &st, &err), 0);
  assert_int_equal(r.mem.peak_allocated_bytes, 1950);
  for (uint32_t b = 0; b < 5; b++) {
    assert_int_equal(vs_rank_live_at_peak(&r, b), live[b]);
    sum += live[b] ? vs_program_buffer(&p, (uint32_t)b)->bytes : 0;
  }
  assert_int_equal(sum, r.mem.peak_allocated_bytes); /* they make the peak */
  vs_rank_init(&plain, 0, &p, UINT64_MAX / 2, 0);
  assert_int_equal(vs_engine_run(&plain, 1, &opts, &st, &err), 0);
  for (uint32_t b = 0; b < 5; b++)
    assert_false(vs_rank_live_at_peak(&plain, b));
  vs_rank_fini(&r);
  vs_rank_fini(&plain);
  vs_program_fini(&p);
}

static void test_timeline_rows(void **state)
{
  /* The nine memory events of memory_program, in the order the engine
   * applies them: at equal times, an op's end effects, then the starts of
   * what it released, compute stream before comm. */
  static const vs_mem_event want[] = {
      {0, 0, VS_CAT_PARAMS, 1000, 1000, 1000},
      {0, 1, VS_CAT_TEMP, 200, 1200, 1200},
      {0, 2, VS_CAT_TEMP, 300, 1500, 1500},
      {100, 1, VS_CAT_TEMP, -200, 1300, 1300},
      {100, 1, VS_CAT_ACTIVATIONS, 400, 1700, 1700},
      {100, 3, VS_CAT_TEMP, 250, 1950, 1950},
      {150, 2, VS_CAT_TEMP, -300, 1650, 1650},
      {200, 3, VS_CAT_TEMP, -250, 1400, 1400},
      {200, 3, VS_CAT_ACTIVATIONS, -400, 1000, 1000},
  };
  vs_program p;
  vs_rank r;
  vs_engine_stats st;
  (void)state;
  memory_program(&p);
  run_one(&r, &p, &st);
  assert_int_equal(r.n_timeline, sizeof want / sizeof want[0]);
  for (size_t i = 0; i < r.n_timeline; i++) {
    const vs_mem_event *e = &r.timeline[i];
    if (e->t_ns != want[i].t_ns || e->op != want[i].op ||
        e->category != want[i].category ||
        e->delta_bytes != want[i].delta_bytes ||
        e->allocated_bytes != want[i].allocated_bytes ||
        e->reserved_bytes != want[i].reserved_bytes)
      fail_msg("timeline row %zu: t=%llu op=%u cat=%d delta=%lld alloc=%llu",
               i, (unsigned long long)e->t_ns, e->op, e->category,
               (long long)e->delta_bytes,
               (unsigned long long)e->allocated_bytes);
  }
  /* spans, in start order: setup [0,0], fwd [0,100], gather [0,150],
   * bwd [100,200] */
  assert_int_equal(r.n_spans, 4);
  for (uint32_t i = 0; i < 4; i++)
    assert_int_equal(r.spans[i].op, i);
  assert_span(&r, 0, 0, 0);
  assert_span(&r, 1, 0, 100);
  assert_span(&r, 2, 0, 150);
  assert_span(&r, 3, 100, 200);
  vs_rank_fini(&r);
  vs_program_fini(&p);
}

static void test_no_recording_when_not_asked(void **state)
{
  vs_program p;
  vs_rank r;
  vs_engine_stats st;
  vs_engine_opts opts = {0};
  vs_error err;
  (void)state;
  memory_program(&p);
  vs_rank_init(&r, 0, &p, 1u << 20, 0);
  vs_error_clear(&err);
  assert_int_equal(vs_engine_run(&r, 1, &opts, &st, &err), 0);
  assert_int_equal(r.n_timeline, 0);
  assert_int_equal(r.n_spans, 0);
  assert_null(r.timeline);
  /* the memory is tracked all the same */
  assert_int_equal(r.mem.peak_allocated_bytes, 1950);
  vs_rank_fini(&r);
  vs_program_fini(&p);
}

static void test_oom_at_exact_op(void **state)
{
  vs_program p;
  vs_rank r;
  vs_engine_stats st;
  vs_error err;
  (void)state;
  memory_program(&p);
  /* 1800 B GPU with 100 B framework: 1700 B fit (t = 100 after fwd ends:
   * 1700 + 100 = 1800), the bwd temp (+250 at t = 100, op 3) does not. */
  assert_int_equal(run_ranks(&r, 1, &p, 1800, 100, &st, &err), 0);
  assert_true(r.mem.oom.happened);
  assert_int_equal(r.mem.oom.op, 3);
  assert_int_equal(r.mem.oom.t_ns, 100);
  assert_int_equal(r.mem.oom.requested_bytes, 250);
  assert_int_equal(r.mem.oom.in_use_bytes, 1800); /* 1700 + 100 framework */
  assert_int_equal(r.mem.oom.category, VS_CAT_TEMP);
  /* the run goes on to the end regardless */
  assert_int_equal(st.events, 4);
  assert_int_equal(r.mem.peak_used_bytes, 2050); /* 1950 + 100 */
  vs_rank_fini(&r);
  vs_program_fini(&p);
}

/* ------------------------------------------------------------------------
 * Schedule bugs are errors, not hangs or crashes
 * ------------------------------------------------------------------------ */

static void test_deadlock_is_an_error(void **state)
{
  vs_program p;
  vs_rank r;
  vs_engine_stats st;
  vs_error err;
  (void)state;
  prog_init(&p, 8);
  prog_op(&p, C, "fine", 10, NULL, 0);
  prog_op(&p, M, "comm_ok", 10, NULL, 0);
  /* op 2 (compute) waits for op 3 (comm), which waits for op 2. Written
   * directly, since prog_op insists on topological order. */
  prog_op(&p, C, "stuck_compute", 10, NULL, 0);
  prog_op(&p, M, "stuck_comm", 10, NULL, 0);
  p.ops[2].first_dep = 0; /* deps[0] */
  p.deps[p.n_deps++] = 3;
  p.ops[3].first_dep = 1; /* deps[1] */
  p.deps[p.n_deps++] = 2;
  assert_int_equal(run_ranks(&r, 1, &p, 1000, 0, &st, &err), VS_EINPUT);
  assert_int_equal(err.code, VS_EINPUT);
  assert_non_null(strstr(err.msg, "deadlocked"));
  /* names the first stuck stream (compute) and its op */
  assert_non_null(strstr(err.msg, "stream compute"));
  assert_non_null(strstr(err.msg, "stuck_compute"));
  /* the two runnable ops completed before it stalled */
  assert_int_equal(st.events, 2);
  vs_rank_fini(&r);
  vs_program_fini(&p);
}

static void test_dep_on_own_stream_later_op(void **state)
{
  vs_program p;
  vs_rank r;
  vs_engine_stats st;
  vs_error err;
  (void)state;
  prog_init(&p, 8);
  prog_op(&p, C, "first", 10, NULL, 0);
  prog_op(&p, C, "second", 10, NULL, 0);
  /* op 0 waits for op 1, which its own stream runs after it: deps[0],
   * op 1's starting after it */
  p.deps[p.n_deps++] = 1;
  p.ops[1].first_dep = 1;
  assert_int_equal(run_ranks(&r, 1, &p, 1000, 0, &st, &err), VS_EINPUT);
  assert_non_null(strstr(err.msg, "'first'"));
  assert_int_equal(st.events, 0);
  vs_rank_fini(&r);
  vs_program_fini(&p);
}

static void test_free_never_allocated(void **state)
{
  vs_program p;
  vs_rank r;
  vs_engine_stats st;
  vs_error err;
  uint32_t op, buf;
  (void)state;
  prog_init(&p, 8);
  op = prog_op(&p, C, "bad_free", 10, NULL, 0);
  buf = prog_buffer(&p, 64, VS_CAT_ACTIVATIONS);
  prog_effect(&p, op, buf, true, true);
  assert_int_equal(run_ranks(&r, 1, &p, 1000, 0, &st, &err), VS_EINPUT);
  assert_non_null(strstr(err.msg, "bad_free"));
  assert_non_null(strstr(err.msg, "free 64 bytes of activations"));
  vs_rank_fini(&r);
  vs_program_fini(&p);
}


/* ------------------------------------------------------------------------
 * An inherited cache (vs_rank_inherit)
 * ------------------------------------------------------------------------ */

#define MIB (UINT64_C(1) << 20)

/* A first step on the caching allocator: setup holds 30 MiB of params;
 * fwd saves 60 MiB of activations; bwd makes 30 MiB of gradients (no
 * free block: a segment of their own) and frees the activations at its
 * end; the step makes a 30 MiB moment at its start, split off the
 * activations' cached 60 MiB block. Reserved 120 MiB; params, gradients
 * and moment live at the end. */
static void first_step_program(vs_program *p)
{
  uint32_t op, act;
  prog_init(p, 8);
  op = prog_op(p, C, "setup", 0, NULL, 0);
  prog_effect(p, op, prog_buffer(p, 30 * MIB, VS_CAT_PARAMS), false, false);
  op = prog_op(p, C, "fwd", 100, NULL, 0);
  act = prog_buffer(p, 60 * MIB, VS_CAT_ACTIVATIONS);
  prog_effect(p, op, act, true, false);
  op = prog_op(p, C, "bwd", 100, NULL, 0);
  prog_effect(p, op, prog_buffer(p, 30 * MIB, VS_CAT_GRADS), false, false);
  prog_effect(p, op, act, true, true);
  op = prog_op(p, C, "step", 10, NULL, 0);
  prog_effect(p, op, prog_buffer(p, 30 * MIB, VS_CAT_OPTIMIZER), false,
              false);
}

/* The step after it: setup allocates the states (in another order, and
 * `extra` bytes more params when not 0, or without the moment when
 * `moment` is false), then fwd's 60 MiB of activations, freed by bwd. */
static void next_step_program(vs_program *p, uint64_t extra, bool moment)
{
  uint32_t op, act;
  prog_init(p, 8);
  op = prog_op(p, C, "setup", 0, NULL, 0);
  if (moment)
    prog_effect(p, op, prog_buffer(p, 30 * MIB, VS_CAT_OPTIMIZER), false,
                false);
  prog_effect(p, op, prog_buffer(p, 30 * MIB, VS_CAT_GRADS), false, false);
  prog_effect(p, op, prog_buffer(p, 30 * MIB + extra, VS_CAT_PARAMS), false,
              false);
  op = prog_op(p, C, "fwd", 100, NULL, 0);
  act = prog_buffer(p, 60 * MIB, VS_CAT_ACTIVATIONS);
  prog_effect(p, op, act, true, false);
  op = prog_op(p, C, "bwd", 100, NULL, 0);
  prog_effect(p, op, act, true, true);
}

/* Runs prog on a caching allocator of 1 GiB, inheriting from `before`'s
 * cache unless NULL; returns vs_engine_run's code. */
static int run_caching(vs_rank *r, const vs_program *prog,
                       const vs_rank *before, vs_error *err)
{
  vs_alloc_config cfg = {UINT64_C(1) << 30, 0, false, 0, 0};
  vs_engine_opts opts = {.check_invariants = true};
  vs_engine_stats st;
  vs_rank_init(r, 0, prog, cfg.capacity_bytes, 0);
  assert_int_equal(vs_rank_use_caching(r, &cfg), 0);
  if (before) {
    assert_int_equal(vs_rank_inherit(r, before), 0);
    /* its peaks start from what the earlier run left, as after
     * reset_peak_memory_stats() */
    for (int p = 0; p < VS_POOL_N; p++) {
      assert_int_equal(r->alloc->stats.peak_allocated_bytes[p],
                       r->alloc->stats.allocated_bytes[p]);
      assert_int_equal(r->alloc->stats.peak_reserved_bytes[p],
                       r->alloc->stats.reserved_bytes[p]);
    }
  }
  vs_error_clear(err);
  return vs_engine_run(r, 1, &opts, &st, err);
}

/* The step after the first takes its states over from the first's cache
 * and keeps its segments: the 60 MiB of activations find only the 30
 * MiB the moment left of their old segment and take a new one (reserved
 * 120 + 60 = 180 MiB), where from an empty cache the states are packed
 * and reserved peaks at 90 + 60 = 150 MiB. Allocated peaks at 150 MiB
 * either way. */
static void test_inherited_cache(void **state)
{
  vs_program first, next;
  vs_rank a, b, fresh;
  vs_error err;
  (void)state;
  first_step_program(&first);
  next_step_program(&next, 0, true);
  assert_int_equal(run_caching(&a, &first, NULL, &err), 0);
  assert_int_equal(a.mem.reserved_bytes, 120 * MIB);
  assert_int_equal(a.mem.allocated_bytes, 90 * MIB);
  assert_int_equal(run_caching(&b, &next, &a, &err), 0);
  /* the first step's allocated peak (params, activations and gradients:
   * 120 MiB) started the step at what it left (90 MiB: run_caching
   * checks), and the step's own peak is 150 */
  assert_int_equal(a.alloc->stats.peak_allocated_bytes[VS_POOL_LARGE],
                   120 * MIB);
  assert_int_equal(b.alloc->stats.peak_allocated_bytes[VS_POOL_LARGE],
                   150 * MIB);
  assert_int_equal(b.mem.peak_allocated_bytes, 150 * MIB);
  assert_int_equal(b.mem.peak_reserved_bytes, 180 * MIB);
  assert_int_equal(b.mem.by_cat[VS_CAT_PARAMS], 30 * MIB);
  assert_int_equal(b.mem.by_cat[VS_CAT_GRADS], 30 * MIB);
  assert_int_equal(b.mem.by_cat[VS_CAT_OPTIMIZER], 30 * MIB);
  assert_int_equal(run_caching(&fresh, &next, NULL, &err), 0);
  assert_int_equal(fresh.mem.peak_allocated_bytes, 150 * MIB);
  assert_int_equal(fresh.mem.peak_reserved_bytes, 150 * MIB);
  vs_rank_fini(&b);
  vs_rank_fini(&fresh);
  vs_program_fini(&next);
  /* a setup asking for a buffer the first step did not leave, or leaving
   * one of them, is a schedule bug */
  next_step_program(&next, 2 * MIB, true);
  assert_int_equal(run_caching(&b, &next, &a, &err), VS_EINPUT);
  tu_assert_message_at(err.msg, "op 0 (setup) alloc", "");
  vs_rank_fini(&b);
  vs_program_fini(&next);
  next_step_program(&next, 0, false);
  assert_int_equal(run_caching(&b, &next, &a, &err), VS_EINPUT);
  tu_assert_message_at(err.msg, "left buffers of its inherited cache", "");
  vs_rank_fini(&b);
  vs_program_fini(&next);
  vs_rank_fini(&a);
  vs_program_fini(&first);
}

/* The pool a buffer comes from is that of the stream it is made on
 * (vs_buffer_pool): a 40 MiB buffer made on FSDP2's copy-in stream by an
 * op of the comm stream, then freed, leaves its block cached in the
 * copy-in stream's pool, where a later 30 MiB buffer of the comm stream
 * cannot take it (reserved 70 MiB) and one made on the copy-in stream
 * again splits it (40 MiB). */
static void test_pool_of_the_stream_made_on(void **state)
{
  for (int again = 0; again < 2; again++) {
    vs_program p;
    vs_rank r;
    vs_error err;
    uint32_t op, gathered, next;
    vs_buffer *what;
    (void)state;
    prog_init(&p, 4);
    op = prog_op(&p, VS_STREAM_COMM, "all_gather", 10, NULL, 0);
    gathered = prog_buffer(&p, 40 * MIB, VS_CAT_TEMP);
    prog_effect(&p, op, gathered, false, false);
    prog_effect(&p, op, gathered, true, true);
    op = prog_op(&p, VS_STREAM_COMM, "reduce_scatter", 10, NULL, 0);
    next = prog_buffer(&p, 30 * MIB, VS_CAT_GRADS);
    prog_effect(&p, op, next, false, false);
    what = &p.buffer_kinds[p.buffers[gathered]];
    what->made_on = VS_MADE_ON_GATHER;
    assert_int_equal(vs_buffer_pool(what, VS_STREAM_COMM), VS_STREAM_N);
    p.buffer_kinds[p.buffers[next]].made_on =
        again ? VS_MADE_ON_GATHER : VS_MADE_ON_OP_STREAM;
    assert_int_equal(run_caching(&r, &p, NULL, &err), 0);
    assert_int_equal(r.mem.peak_allocated_bytes, 40 * MIB);
    assert_int_equal(r.mem.peak_reserved_bytes, (again ? 40 : 70) * MIB);
    vs_rank_fini(&r);
    vs_program_fini(&p);
  }
}

/* ------------------------------------------------------------------------
 * Determinism and many ranks
 * ------------------------------------------------------------------------ */

static uint32_t lcg_next(uint32_t *s)
{
  *s = *s * 1664525u + 1013904223u;
  return *s >> 8;
}

/* A pseudo-random valid program of n ops: random streams and durations
 * (some zero, many equal), up to two deps on earlier ops, each op allocates
 * a buffer at its start or end and frees the buffer of its first dependency
 * (which has ended before it starts) if nobody freed it yet. */
static void random_program(vs_program *p, size_t n, uint32_t seed)
{
  uint32_t rng = seed;
  bool *freed = calloc(n, sizeof *freed);
  uint32_t *buf_of = calloc(n, sizeof *buf_of);
  assert_non_null(freed);
  assert_non_null(buf_of);
  prog_init(p, n);
  for (uint32_t i = 0; i < n; i++) {
    uint32_t deps[2];
    size_t n_deps = 0;
    int stream = lcg_next(&rng) % 3 == 0 ? M : C;
    uint64_t dur = (lcg_next(&rng) % 5) * 10; /* 0..40: many ties */
    uint32_t op;
    if (i > 0)
      for (uint32_t k = lcg_next(&rng) % 3; k > 0; k--)
        deps[n_deps++] = lcg_next(&rng) % i;
    op = prog_op(p, stream, "r", dur, deps, n_deps);
    buf_of[op] = prog_buffer(p, 1 + lcg_next(&rng) % 1000,
                             (int)(lcg_next(&rng) % VS_CAT_FRAMEWORK));
    prog_effect(p, op, buf_of[op], lcg_next(&rng) % 2, false);
    if (n_deps > 0 && !freed[deps[0]]) {
      freed[deps[0]] = true;
      prog_effect(p, op, buf_of[deps[0]], lcg_next(&rng) % 2, true);
    }
  }
  free(freed);
  free(buf_of);
}

/* The same on random programs (exact accounting): the buffers reported
 * live at the peak add up to the peak, whatever was freed before or after
 * it and however often the peak rose. */
static void test_lifetimes_random(void **state)
{
  (void)state;
  for (uint32_t seed = 1; seed <= 20; seed++) {
    vs_program p;
    vs_rank r;
    vs_engine_stats st;
    vs_engine_opts opts = {.check_invariants = true};
    vs_error err;
    uint64_t sum = 0;
    size_t live = 0;
    random_program(&p, 200, seed);
    vs_rank_init(&r, 0, &p, UINT64_MAX / 2, 0);
    assert_int_equal(vs_rank_record_lifetimes(&r), 0);
    vs_error_clear(&err);
    assert_int_equal(vs_engine_run(&r, 1, &opts, &st, &err), 0);
    for (uint32_t b = 0; b < p.n_buffers; b++)
      if (vs_rank_live_at_peak(&r, b)) {
        sum += vs_program_buffer(&p, b)->bytes;
        live++;
      }
    assert_true(live > 0 && live < p.n_buffers);
    assert_int_equal(sum, r.mem.peak_allocated_bytes);
    vs_rank_fini(&r);
    vs_program_fini(&p);
  }
}

static void assert_same_run(const vs_rank *a, const vs_rank *b)
{
  assert_int_equal(a->end_ns, b->end_ns);
  assert_int_equal(a->n_spans, b->n_spans);
  for (size_t i = 0; i < a->n_spans; i++) {
    assert_int_equal(a->spans[i].op, b->spans[i].op);
    assert_int_equal(a->spans[i].start_ns, b->spans[i].start_ns);
    assert_int_equal(a->spans[i].end_ns, b->spans[i].end_ns);
  }
  assert_int_equal(a->n_timeline, b->n_timeline);
  for (size_t i = 0; i < a->n_timeline; i++) {
    assert_int_equal(a->timeline[i].t_ns, b->timeline[i].t_ns);
    assert_int_equal(a->timeline[i].op, b->timeline[i].op);
    assert_int_equal(a->timeline[i].category, b->timeline[i].category);
    assert_int_equal(a->timeline[i].delta_bytes, b->timeline[i].delta_bytes);
    assert_int_equal(a->timeline[i].allocated_bytes,
                     b->timeline[i].allocated_bytes);
  }
  assert_memory_equal(a->mem.by_cat, b->mem.by_cat, sizeof a->mem.by_cat);
  assert_memory_equal(a->mem.at_peak, b->mem.at_peak, sizeof a->mem.at_peak);
  assert_int_equal(a->mem.peak_allocated_bytes, b->mem.peak_allocated_bytes);
  assert_int_equal(a->mem.peak_t_ns, b->mem.peak_t_ns);
  assert_int_equal(a->mem.peak_op, b->mem.peak_op);
}

static void test_deterministic(void **state)
{
  enum { N = 300 };
  vs_program p;
  vs_rank r1, r2;
  vs_engine_stats s1, s2;
  (void)state;
  random_program(&p, N, 7);
  run_one(&r1, &p, &s1);
  run_one(&r2, &p, &s2);
  /* every op ran exactly once, and both runs agree to the nanosecond */
  assert_int_equal(s1.events, N);
  assert_int_equal(r1.n_spans, N);
  assert_int_equal(s1.events, s2.events);
  assert_int_equal(s1.end_ns, s2.end_ns);
  assert_same_run(&r1, &r2);
  /* dependencies held: no op started before any of its deps ended */
  for (uint32_t i = 0; i < N; i++) {
    const vs_pop *op = &p.ops[i];
    for (uint32_t d = op->first_dep; d < vs_op_deps_end(&p, op); d++)
      assert_true(span_of(&r1, i)->start_ns >= span_of(&r1, p.deps[d])->end_ns);
  }
  vs_rank_fini(&r1);
  vs_rank_fini(&r2);
  vs_program_fini(&p);
}

static void test_ranks_share_a_program(void **state)
{
  enum { N = 200, RANKS = 5 };
  vs_program p;
  vs_rank solo, ranks[RANKS];
  vs_engine_stats s_solo, s_all;
  vs_error err;
  (void)state;
  random_program(&p, N, 99);
  run_one(&solo, &p, &s_solo);
  assert_int_equal(run_ranks(ranks, RANKS, &p, UINT64_MAX / 2, 0, &s_all, &err),
                   0);
  /* one completion per op per rank: 200 * 5 */
  assert_int_equal(s_all.events, (uint64_t)N * RANKS);
  /* ranks do not interact: each matches the rank run alone */
  assert_int_equal(s_all.end_ns, s_solo.end_ns);
  for (size_t i = 0; i < RANKS; i++) {
    assert_int_equal(ranks[i].id, i);
    assert_ptr_equal(ranks[i].prog, &p);
    assert_same_run(&ranks[i], &solo);
    vs_rank_fini(&ranks[i]);
  }
  vs_rank_fini(&solo);
  vs_program_fini(&p);
}

/* Independent slots (vs_engine_run): every rank of a shared program but
 * the first takes a copy of the first's run instead of running; the copy
 * equals a full replay (replay_every_slot) rank by rank, counts the same
 * events, and reads the first's timeline and spans (twin_records: one
 * slot's records, not one per rank) without freeing them (the copies
 * finalised first, then rank 0: the sanitizer and valgrind builds see a
 * double free or a leak). A rank
 * that starts differently (a smaller GPU) runs its own slot while the
 * others still copy the first; more than 8 kinds of slot make every rank
 * run. */
static void test_independent_slots_copy_the_first(void **state)
{
  enum { N = 200, RANKS = 4 };
  vs_program p;
  vs_rank copied[RANKS], replayed[RANKS];
  vs_engine_stats s_copy, s_replay;
  vs_engine_opts opts = {.record_timeline = true, .record_spans = true,
                         .check_invariants = true};
  vs_error err;
  (void)state;
  random_program(&p, N, 31);
  vs_error_clear(&err);
  for (size_t i = 0; i < RANKS; i++) {
    vs_rank_init(&copied[i], (uint32_t)i, &p, 1u << 20, 0);
    vs_rank_init(&replayed[i], (uint32_t)i, &p, 1u << 20, 0);
    copied[i].slot = replayed[i].slot = (uint32_t)i; /* one stage */
  }
  assert_int_equal(vs_engine_run(copied, RANKS, &opts, &s_copy, &err), 0);
  assert_int_equal(s_copy.copied_ranks, RANKS - 1);
  opts.replay_every_slot = true;
  assert_int_equal(vs_engine_run(replayed, RANKS, &opts, &s_replay, &err), 0);
  assert_int_equal(s_replay.copied_ranks, 0);
  assert_int_equal(s_copy.events, s_replay.events);
  assert_int_equal(s_copy.events, (uint64_t)N * RANKS);
  assert_int_equal(s_copy.end_ns, s_replay.end_ns);
  assert_false(copied[0].twin_records);
  for (size_t i = 1; i < RANKS; i++) {
    assert_int_equal(copied[i].id, i); /* its own identity */
    assert_true(copied[i].twin_records);
    assert_ptr_equal(copied[i].timeline, copied[0].timeline);
    assert_ptr_equal(copied[i].spans, copied[0].spans);
    assert_same_run(&copied[i], &replayed[i]);
    assert_int_equal(copied[i].mem.oom.happened, replayed[i].mem.oom.happened);
  }
  for (size_t i = RANKS; i-- > 0;) {
    vs_rank_fini(&copied[i]);
    vs_rank_fini(&replayed[i]);
  }
  /* rank 2 on a smaller GPU: it runs, alone out of memory, and ranks 1
   * and 3 copy rank 0; every event is counted */
  opts.replay_every_slot = false;
  for (size_t i = 0; i < RANKS; i++) {
    vs_rank_init(&copied[i], (uint32_t)i, &p, i == 2 ? 1 : 1u << 20, 0);
    copied[i].slot = (uint32_t)i;
  }
  assert_int_equal(vs_engine_run(copied, RANKS, &opts, &s_copy, &err), 0);
  assert_int_equal(s_copy.copied_ranks, 2);
  assert_int_equal(s_copy.events, (uint64_t)N * RANKS);
  for (size_t i = 0; i < RANKS; i++) {
    assert_int_equal(copied[i].mem.oom.happened, i == 2);
    vs_rank_fini(&copied[i]);
  }
  {
    /* nine capacities over ten slots: nothing copied */
    enum { MANY = 10 };
    vs_rank many[MANY];
    for (size_t i = 0; i < MANY; i++) {
      vs_rank_init(&many[i], (uint32_t)i, &p,
                   (1u << 20) + (uint32_t)(i < 9 ? i : 0), 0);
      many[i].slot = (uint32_t)i;
    }
    assert_int_equal(vs_engine_run(many, MANY, &opts, &s_copy, &err), 0);
    assert_int_equal(s_copy.copied_ranks, 0);
    assert_int_equal(s_copy.events, (uint64_t)N * MANY);
    for (size_t i = 0; i < MANY; i++)
      vs_rank_fini(&many[i]);
  }
  vs_program_fini(&p);
}

/* ------------------------------------------------------------------------
 * Shared resources
 *
 * PCIe switches at 25 GB/s (25 bytes/ns), two GPUs each, carry 10 GB
 * copies: alone one takes 1e10 / 25 = 4e8 ns; every expected time below is
 * exact in integer nanoseconds.
 * ------------------------------------------------------------------------ */

enum { ALONE_NS = 400000000 }; /* 10 GB at 25 GB/s */

/* A table with only the PCIe switch: 25 GB/s, latency_ns, two GPUs per
 * switch. */
static void pcie_table(vs_resource_spec specs[VS_RES_N], uint64_t latency_ns)
{
  memset(specs, 0, VS_RES_N * sizeof *specs);
  specs[VS_RES_PCIE_SWITCH] = (vs_resource_spec){25e9, latency_ns, 2};
}

/* prog_op for an op that moves bytes through resource kind after dur_ns. */
static uint32_t prog_res_op(vs_program *p, int stream, const char *name,
                            uint64_t dur_ns, int kind, double bytes,
                            const uint32_t *deps, size_t n_deps)
{
  vs_op_kind k = kind_of(name, dur_ns);
  k.resource = (uint8_t)kind;
  k.bytes = bytes;
  return prog_op_doing(p, stream, &k, deps, n_deps);
}

/* Runs ranks[0..n) (initialised by the caller: ids and programs) laid out
 * per_stage to a stage, on resources specs, recording everything with
 * invariant checks on. */
static int run_res(vs_rank *ranks, size_t n, size_t per_stage,
                   const vs_resource_spec *specs, vs_engine_stats *stats,
                   vs_error *err)
{
  vs_engine_opts opts = {.record_timeline = true, .record_spans = true,
                         .check_invariants = true,
                         .ranks_per_stage = per_stage,
                         .resources = specs, .n_resources = VS_RES_N};
  vs_error_clear(err);
  return vs_engine_run(ranks, n, &opts, stats, err);
}

/* n ranks of GPUs ids[0..n) running prog, one stage, each counting for
 * `users` on its PCIe switch (vs_rank res_users). */
static void run_gpus(vs_rank *ranks, const uint32_t *ids, size_t n,
                     const vs_program *prog, const vs_resource_spec *specs,
                     uint32_t users, vs_engine_stats *stats)
{
  vs_error err;
  for (size_t i = 0; i < n; i++) {
    vs_rank_init(&ranks[i], ids[i], prog, UINT64_MAX / 2, 0);
    ranks[i].slot = (uint32_t)i;
    ranks[i].res_users[VS_RES_PCIE_SWITCH] = users;
  }
  if (run_res(ranks, n, n, specs, stats, &err) != 0)
    fail_msg("engine: %s", err.msg);
}

/* One 10 GB copy over PCIe on the comm stream. */
static void copy_program(vs_program *p)
{
  prog_init(p, 4);
  prog_res_op(p, M, "offload", 0, VS_RES_PCIE_SWITCH, 1e10, NULL, 0);
}

static void test_res_alone(void **state)
{
  vs_program p;
  vs_rank r;
  vs_engine_stats st;
  vs_resource_spec specs[VS_RES_N];
  static const uint32_t gpu0 = 0;
  (void)state;
  copy_program(&p);
  pcie_table(specs, 0);
  run_gpus(&r, &gpu0, 1, &p, specs, 1, &st);
  assert_span(&r, 0, 0, ALONE_NS);
  assert_int_equal(st.end_ns, ALONE_NS);
  assert_int_equal(st.events, 1); /* one completion, however re-timed */
  vs_rank_fini(&r);
  vs_program_fini(&p);
}

/* Two GPUs behind one switch copy 10 GB at the same moment: each gets half
 * the bandwidth, so both take 2 x 4e8 ns - simulated as one rank standing
 * for both (stage mode, symmetric = 2) or as two ranks. */
static void test_res_two_gpus_one_switch(void **state)
{
  vs_program p;
  vs_rank one, two[2];
  vs_engine_stats st;
  vs_resource_spec specs[VS_RES_N];
  static const uint32_t gpus[2] = {0, 1}; /* one switch: 0 / 2 = 1 / 2 */
  (void)state;
  copy_program(&p);
  pcie_table(specs, 0);
  run_gpus(&one, gpus, 1, &p, specs, 2, &st);
  assert_span(&one, 0, 0, 2 * ALONE_NS);
  assert_int_equal(st.end_ns, 2 * ALONE_NS);
  pcie_table(specs, 0);
  run_gpus(two, gpus, 2, &p, specs, 1, &st);
  assert_span(&two[0], 0, 0, 2 * ALONE_NS);
  assert_span(&two[1], 0, 0, 2 * ALONE_NS);
  assert_int_equal(st.end_ns, 2 * ALONE_NS);
  assert_int_equal(st.events, 2);
  vs_rank_fini(&one);
  vs_rank_fini(&two[0]);
  vs_rank_fini(&two[1]);
  vs_program_fini(&p);
}

static void test_res_other_instance_unaffected(void **state)
{
  vs_program p;
  vs_rank r[2];
  vs_engine_stats st;
  vs_resource_spec specs[VS_RES_N];
  static const uint32_t gpus[2] = {1, 2}; /* switches 0 and 1 */
  (void)state;
  copy_program(&p);
  pcie_table(specs, 0);
  run_gpus(r, gpus, 2, &p, specs, 1, &st);
  assert_span(&r[0], 0, 0, ALONE_NS);
  assert_span(&r[1], 0, 0, ALONE_NS);
  vs_rank_fini(&r[0]);
  vs_rank_fini(&r[1]);
  vs_program_fini(&p);
}

/* A copy on the comm stream at 0 and one on the compute stream after a
 * 2e8 ns kernel, on one GPU; the second allocates a buffer at its start
 * and frees it at its end; an op on the send stream waits for the first. */
static void staggered_program(vs_program *p, uint32_t *a, uint32_t *b,
                              uint32_t *k2)
{
  uint32_t k, buf;
  prog_init(p, 8);
  *a = prog_res_op(p, M, "copy_a", 0, VS_RES_PCIE_SWITCH, 1e10, NULL, 0);
  k = prog_op(p, C, "kernel", ALONE_NS / 2, NULL, 0);
  *b = prog_res_op(p, C, "copy_b", 0, VS_RES_PCIE_SWITCH, 1e10, &k, 1);
  buf = prog_buffer(p, 4096, VS_CAT_TEMP);
  prog_effect(p, *b, buf, false, false);
  prog_effect(p, *b, buf, true, true);
  *k2 = prog_op(p, VS_STREAM_SEND, "after_a", 10, a, 1);
}

static void test_res_staggered(void **state)
{
  vs_program p;
  vs_rank r;
  vs_engine_stats st;
  vs_resource_spec specs[VS_RES_N];
  uint32_t a, b, k2;
  static const uint32_t gpu0 = 0;
  (void)state;
  staggered_program(&p, &a, &b, &k2);
  pcie_table(specs, 0);
  run_gpus(&r, &gpu0, 1, &p, specs, 1, &st);
  /* a alone for 2e8 ns moves 5e9 B; shared (12.5 B/ns) its last 5e9 B
   * take 4e8 ns: ends at 6e8. b moves 5e9 B in those 4e8 ns, then its
   * last 5e9 B alone in 2e8 ns: ends at 8e8. */
  assert_span(&r, a, 0, 600000000);
  assert_span(&r, b, 200000000, 800000000);
  /* a fixed-duration op that waits for a starts at a's re-timed end and
   * keeps its 10 ns */
  assert_span(&r, k2, 600000000, 600000010);
  /* b's buffer: allocated at its start, freed at its re-timed end */
  assert_int_equal(r.n_timeline, 2);
  assert_int_equal(r.timeline[0].t_ns, 200000000);
  assert_int_equal(r.timeline[0].delta_bytes, 4096);
  assert_int_equal(r.timeline[1].t_ns, 800000000);
  assert_int_equal(r.timeline[1].op, b);
  assert_int_equal(r.timeline[1].delta_bytes, -4096);
  assert_int_equal(r.mem.allocated_bytes, 0);
  assert_int_equal(st.events, 4);
  assert_int_equal(st.end_ns, 800000000);
  vs_rank_fini(&r);
  vs_program_fini(&p);
}

static void test_res_latency_and_fixed_part(void **state)
{
  vs_program p;
  vs_rank r[2];
  vs_engine_stats st;
  vs_resource_spec specs[VS_RES_N];
  static const uint32_t gpus[2] = {0, 1};
  (void)state;
  prog_init(&p, 4);
  prog_res_op(&p, M, "copy", 1000, VS_RES_PCIE_SWITCH, 1e10, NULL, 0);
  pcie_table(specs, 2000);
  /* 1000 ns of its own + 2000 ns latency (no bandwidth held), then the
   * bytes, both GPUs sharing the switch: 3000 + 8e8 */
  run_gpus(r, gpus, 2, &p, specs, 1, &st);
  assert_span(&r[0], 0, 0, 3000 + 2 * ALONE_NS);
  assert_span(&r[1], 0, 0, 3000 + 2 * ALONE_NS);
  assert_int_equal(st.events, 2); /* the end of a wait is no completion */
  vs_rank_fini(&r[0]);
  vs_rank_fini(&r[1]);
  vs_program_fini(&p);
}

static void test_res_zero_bytes(void **state)
{
  vs_program p;
  vs_rank r;
  vs_engine_stats st;
  vs_resource_spec specs[VS_RES_N];
  static const uint32_t gpu0 = 0;
  (void)state;
  prog_init(&p, 4);
  prog_res_op(&p, C, "empty", 0, VS_RES_PCIE_SWITCH, 0, NULL, 0);
  prog_res_op(&p, C, "tiny", 5, VS_RES_PCIE_SWITCH, 0, NULL, 0);
  pcie_table(specs, 0);
  run_gpus(&r, &gpu0, 1, &p, specs, 1, &st);
  /* nothing to move: only the fixed part */
  assert_span(&r, 0, 0, 0);
  assert_span(&r, 1, 0, 5);
  vs_rank_fini(&r);
  vs_program_fini(&p);
}

static void test_res_missing_is_an_error(void **state)
{
  vs_program p;
  vs_rank r;
  vs_engine_stats st;
  vs_resource_spec specs[VS_RES_N];
  vs_error err;
  (void)state;
  prog_init(&p, 4);
  prog_res_op(&p, C, "to_disk", 0, VS_RES_NVME, 1e9, NULL, 0);
  pcie_table(specs, 0); /* no nvme bandwidth */
  vs_rank_init(&r, 0, &p, UINT64_MAX / 2, 0);
  assert_int_equal(run_res(&r, 1, 1, specs, &st, &err), VS_EINPUT);
  assert_non_null(strstr(err.msg, "op 0 (to_disk)"));
  {
    char want[32];
    snprintf(want, sizeof want, "resource %d (nvme)", VS_RES_NVME);
    assert_non_null(strstr(err.msg, want));
  }
  assert_non_null(strstr(err.msg, "the topology does not describe"));
  vs_rank_fini(&r);
  /* no table at all */
  vs_rank_init(&r, 0, &p, UINT64_MAX / 2, 0);
  assert_int_equal(run_res(&r, 1, 1, NULL, &st, &err), VS_EINPUT);
  vs_rank_fini(&r);
  vs_program_fini(&p);
}

/* Ops without a resource run as before with a table given. */
static void test_res_table_leaves_fixed_ops(void **state)
{
  enum { N = 300 };
  vs_program p;
  vs_rank r1, r2;
  vs_engine_stats s1, s2;
  vs_resource_spec specs[VS_RES_N];
  static const uint32_t gpu0 = 0;
  (void)state;
  random_program(&p, N, 7);
  pcie_table(specs, 100);
  run_one(&r1, &p, &s1);
  run_gpus(&r2, &gpu0, 1, &p, specs, 2, &s2);
  assert_int_equal(s1.events, s2.events);
  assert_int_equal(s1.end_ns, s2.end_ns);
  assert_same_run(&r1, &r2);
  vs_rank_fini(&r1);
  vs_rank_fini(&r2);
  vs_program_fini(&p);
}

static void test_res_deterministic(void **state)
{
  enum { N = 300, RANKS = 4 };
  vs_program p;
  vs_rank a[RANKS], b[RANKS];
  vs_engine_stats sa, sb;
  vs_resource_spec specs[VS_RES_N];
  static const uint32_t gpus[RANKS] = {0, 1, 2, 3}; /* two switches */
  size_t n_res = 0;
  (void)state;
  random_program(&p, N, 11);
  /* comm-stream ops become copies of 1..40 kB (many equal ends) */
  for (uint32_t i = 0; i < N; i++) {
    if (p.ops[i].stream != M)
      continue;
    vs_op_kind k = p.kinds[p.ops[i].kind];
    k.resource = VS_RES_PCIE_SWITCH;
    k.bytes = 1000.0 * (double)(1 + k.dur_ns / 10 + i % 4);
    p.ops[i].kind = prog_kind(&p, &k) & VS_PROGRAM_KINDS_MAX;
    n_res++;
  }
  assert_true(n_res > 50);
  pcie_table(specs, 7);
  run_gpus(a, gpus, RANKS, &p, specs, 1, &sa);
  run_gpus(b, gpus, RANKS, &p, specs, 1, &sb);
  assert_int_equal(sa.events, (uint64_t)N * RANKS);
  assert_int_equal(sa.end_ns, sb.end_ns);
  for (size_t i = 0; i < RANKS; i++) {
    assert_same_run(&a[i], &b[i]);
    /* dependencies held with re-timed ends */
    for (uint32_t k = 0; k < N; k++)
      for (uint32_t d = p.ops[k].first_dep; d < vs_op_deps_end(&p, &p.ops[k]);
           d++)
        assert_true(span_of(&a[i], k)->start_ns >=
                    span_of(&a[i], p.deps[d])->end_ns);
    vs_rank_fini(&a[i]);
    vs_rank_fini(&b[i]);
  }
  vs_program_fini(&p);
}

/* Stage mode and --ranks all agree when peers run the same program: the
 * table built from a layout gives the stage's rank the users its peers
 * would be. pp programs each copy 10 GB at 0; returns the end of the
 * run and checks every rank ends then. */
static uint64_t run_layout(const vs_layout *lay, bool all_ranks,
                           const vs_program *progs)
{
  vs_topology topo;
  vs_resource_spec specs[VS_RES_N];
  vs_engine_stats st;
  vs_error err;
  size_t per = all_ranks ? (size_t)(lay->tp * lay->dp) : 1;
  size_t n = per * (size_t)lay->pp;
  vs_rank *ranks = calloc(n, sizeof *ranks);
  assert_non_null(ranks);
  tu_default_topology(&topo);
  topo.pcie_bandwidth = 25e9;
  topo.pcie_latency = 0;
  topo.gpus_per_pcie_switch = 2;
  vs_resource_table(&topo, specs);
  for (size_t s = 0; s < lay->pp; s++)
    for (size_t j = 0; j < per; j++) {
      /* make_ranks' numbering: stage, then dp, then tp by the strides */
      uint64_t id = s * lay->pp_stride + (j / lay->tp) * lay->dp_stride +
                    j % lay->tp;
      vs_rank *r = &ranks[s * per + j];
      vs_rank_init(r, (uint32_t)id, &progs[s], UINT64_MAX / 2, 0);
      r->slot = (uint32_t)j;
      for (int k = 0; k < VS_RES_N; k++)
        r->res_users[k] = vs_resource_users(&specs[k], lay, s, all_ranks);
    }
  if (run_res(ranks, n, per, specs, &st, &err) != 0)
    fail_msg("engine: %s", err.msg);
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(ranks[i].end_ns, st.end_ns);
    vs_rank_fini(&ranks[i]);
  }
  free(ranks);
  return st.end_ns;
}

static void test_res_stage_mode_matches_all_ranks(void **state)
{
  vs_program progs[2];
  vs_layout *lay = calloc(1, sizeof *lay);
  (void)state;
  assert_non_null(lay);
  copy_program(&progs[0]);
  copy_program(&progs[1]);
  progs[1].stage = 1;
  /* tp 2, dp 2, pp 1: GPUs 0-3, switches {0,1} {2,3}: two on each */
  *lay = (vs_layout){.tp = 2, .dp = 2, .pp = 1, .gpus = 4, .tp_stride = 1,
                     .dp_stride = 2, .pp_stride = 4};
  assert_int_equal(run_layout(lay, false, progs), 2 * ALONE_NS);
  assert_int_equal(run_layout(lay, true, progs), 2 * ALONE_NS);
  /* tp 1, pp 2, dp 2 in order tp-pp-dp: each switch holds one GPU of each
   * stage; stage mode sees it as its two stages' ranks (GPUs 0 and 1) */
  *lay = (vs_layout){.tp = 1, .dp = 2, .pp = 2, .gpus = 4, .tp_stride = 1,
                     .dp_stride = 2, .pp_stride = 1};
  assert_int_equal(run_layout(lay, false, progs), 2 * ALONE_NS);
  assert_int_equal(run_layout(lay, true, progs), 2 * ALONE_NS);
  /* tp 2, dp 4, pp 2 (tp-dp-pp): stages of 8 GPUs, two per switch */
  *lay = (vs_layout){.tp = 2, .dp = 4, .pp = 2, .gpus = 16, .tp_stride = 1,
                     .dp_stride = 2, .pp_stride = 8};
  assert_int_equal(run_layout(lay, false, progs), 2 * ALONE_NS);
  assert_int_equal(run_layout(lay, true, progs), 2 * ALONE_NS);
  free(lay);
  vs_program_fini(&progs[0]);
  vs_program_fini(&progs[1]);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_one_stream_in_order),
      cmocka_unit_test(test_comm_overlaps_compute),
      cmocka_unit_test(test_waits_on_other_stream),
      cmocka_unit_test(test_zero_duration_and_same_time_chain),
      cmocka_unit_test(test_memory_effects_start_and_end),
      cmocka_unit_test(test_timeline_rows),
      cmocka_unit_test(test_lifetimes_at_peak),
      cmocka_unit_test(test_lifetimes_random),
      cmocka_unit_test(test_no_recording_when_not_asked),
      cmocka_unit_test(test_oom_at_exact_op),
      cmocka_unit_test(test_deadlock_is_an_error),
      cmocka_unit_test(test_dep_on_own_stream_later_op),
      cmocka_unit_test(test_free_never_allocated),
      cmocka_unit_test(test_inherited_cache),
      cmocka_unit_test(test_pool_of_the_stream_made_on),
      cmocka_unit_test(test_deterministic),
      cmocka_unit_test(test_ranks_share_a_program),
      cmocka_unit_test(test_independent_slots_copy_the_first),
      cmocka_unit_test(test_res_alone),
      cmocka_unit_test(test_res_two_gpus_one_switch),
      cmocka_unit_test(test_res_other_instance_unaffected),
      cmocka_unit_test(test_res_staggered),
      cmocka_unit_test(test_res_latency_and_fixed_part),
      cmocka_unit_test(test_res_zero_bytes),
      cmocka_unit_test(test_res_missing_is_an_error),
      cmocka_unit_test(test_res_table_leaves_fixed_ops),
      cmocka_unit_test(test_res_deterministic),
      cmocka_unit_test(test_res_stage_mode_matches_all_ranks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

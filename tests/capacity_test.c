/* capacity_test.c - value lists of sweeps, and the bounded simulations plan
 * screens layouts with, against full simulations. */
#include "testutil.h"

#include "capacity.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void parse_ok(const char *text, const char *key, const char *const *want,
                     size_t n)
{
  static vs_vary v;
  vs_error err;
  vs_error_clear(&err);
  if (vs_vary_parse(text, &v, &err))
    fail_msg("%s: %s", text, err.msg);
  assert_string_equal(v.key, key);
  assert_int_equal(v.n, n);
  for (size_t i = 0; i < n; i++)
    assert_string_equal(v.values[i], want[i]);
}

static void parse_bad(const char *text, const char *message)
{
  static vs_vary v;
  vs_error err;
  vs_error_clear(&err);
  assert_int_equal(vs_vary_parse(text, &v, &err), VS_EUSAGE);
  if (!strstr(err.msg, message))
    fail_msg("\"%s\" lacks \"%s\"", err.msg, message);
}

/* The examples: "1..16" is every integer, "1,2,4..64" the powers
 * of two (4 = 2 * 2 continues a doubling); "2,4,6..10" steps by 2 (6 is
 * not 2 * 4); "10,20..100" steps by 10 (one value before a doubling is
 * a step too: a doubling needs two). Words pass through. */
static void test_vary_lists(void **state)
{
  static const char *const r16[] = {"1", "2", "3", "4", "5", "6", "7", "8",
                                    "9", "10", "11", "12", "13", "14", "15", "16"};
  static const char *const pow2[] = {"1", "2", "4", "8", "16", "32", "64"};
  static const char *const even[] = {"2", "4", "6", "8", "10"};
  static const char *const words[] = {"none", "selective", "full"};
  static const char *const gpus[] = {"8", "16", "24", "32", "40"};
  (void)state;
  parse_ok("training.micro_batch=1..16", "training.micro_batch", r16, 16);
  parse_ok("training.micro_batch=1,2,4..64", "training.micro_batch", pow2, 7);
  parse_ok("model.seq_len=2,4,6..10", "model.seq_len", even, 5);
  /* the range's start and one value before it double: a step, as help
   * and README say (a review read "doubling after two that double") */
  parse_ok("model.seq_len=2,4..10", "model.seq_len", even, 5);
  parse_ok("training.checkpointing=none,selective,full",
           "training.checkpointing", words, 3);
  parse_ok("gpus=8,16,24..40", "gpus", gpus, 5);
  {
    static const char *const tens[] = {"10", "20", "30", "40", "50",
                                       "60", "70", "80", "90", "100"};
    parse_ok("runtime.max_split_size_mb=10,20..100",
             "runtime.max_split_size_mb", tens, 10);
  }
  parse_bad("training.micro_batch", "expected section.key=v1,v2");
  parse_bad("micro_batch=1", "must be section.key");
  parse_bad("training.micro_batch=5..1", "not a range a..b of whole numbers");
  /* an exponent is not decimal digits, and the message says so (review:
   * "1..1e9 is not a range of whole numbers" read as wrong) */
  parse_bad("training.micro_batch=1..1e9",
            "'1..1e9' is not a range a..b of whole numbers in decimal digits "
            "(no exponent)");
  parse_bad("training.micro_batch=1,,2", "empty or overlong value");
  /* hunt: a trailing comma ran one value; a space was part of it */
  parse_bad("training.micro_batch=1,", "empty or overlong value");
  parse_bad("training.micro_batch=1, 2", "value ' 2' starts or ends with a "
                                         "space");
  parse_bad("training.micro_batch=1..5000", "more than 1024 values");
}

static void vary_of(const char *text, vs_vary *v)
{
  vs_error err;
  vs_error_clear(&err);
  if (vs_vary_parse(text, v, &err))
    fail_msg("%s: %s", text, err.msg);
}

/* Checks the --vary options of a sweep as a whole (two lists, a and b). */
static int check_two(const char *a, const char *b, vs_error *err)
{
  static vs_vary v[2];
  vary_of(a, &v[0]);
  if (b)
    vary_of(b, &v[1]);
  vs_error_clear(err);
  return vs_vary_check(v, b ? 2 : 1, err);
}

/* Keys are those of workload.ini, topology.ini ("topology.") and gpus,
 * each once; each value must parse for its key on its own. Messages name
 * --vary, never the --set the values become. */
static void test_vary_check(void **state)
{
  static const struct {
    const char *a, *b, *message;
  } bad[] = {
      {"model.hiden=1", NULL, "--vary model.hiden: unknown key 'hiden'"},
      {"topology.gpu.memroy=1GiB", NULL,
       "--vary topology.gpu.memroy: unknown key 'memroy' in [gpu]"},
      {"parallel.zero=0,nan", NULL, "--vary parallel.zero=nan: not a number"},
      {"gpus=8,x", NULL, "--vary gpus=x: a GPU count is a whole number"},
      {"gpus=2000000", NULL, "--vary gpus=2000000: a GPU count"},
      {"training.micro_batch=1", "training.micro_batch=2",
       "--vary training.micro_batch given twice"},
      /* list keys: their own commas would read as --vary's */
      {"parallel.pp_layers=16,16", NULL,
       "--vary parallel.pp_layers: a list-valued key cannot be varied"},
      {"topology.calibration.p2p_piece_bandwidths=1", NULL,
       "--vary topology.calibration.p2p_piece_bandwidths: a list-valued key"},
  };
  vs_error err;
  (void)state;
  assert_int_equal(check_two("training.micro_batch=1,2,4..64",
                             "topology.gpu.memory=40GiB,80GiB", &err), 0);
  assert_int_equal(check_two("gpus=1,8", "parallel.tp=1..3", &err), 0);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    /* the first three: a key or value the files refuse, bad input as
     * the same --set; the rest: --vary's own usage */
    assert_int_equal(check_two(bad[i].a, bad[i].b, &err),
                     i < 3 ? VS_EINPUT : VS_EUSAGE);
    if (!strstr(err.msg, bad[i].message) || strstr(err.msg, "--set"))
      fail_msg("\"%s\" lacks \"%s\"", err.msg, bad[i].message);
  }
}

/* Relabelling replaces "--set " only before the key itself (not a key it
 * is a prefix of), wherever it is mentioned, and is not repeated. */
static void test_relabel(void **state)
{
  char msg[VS_ERROR_MSG_MAX];
  (void)state;
  snprintf(msg, sizeof msg, "--set parallel.tp=3: tp must divide heads; "
                            "--set parallel.tpx=1, --set parallel.tp: x");
  vs_explore_relabel(msg, sizeof msg, "parallel.tp=3", "--vary ");
  assert_string_equal(msg, "--vary parallel.tp=3: tp must divide heads; "
                           "--set parallel.tpx=1, --vary parallel.tp: x");
  vs_explore_relabel(msg, sizeof msg, "parallel.tp=3", "--vary ");
  assert_string_equal(msg, "--vary parallel.tp=3: tp must divide heads; "
                           "--set parallel.tpx=1, --vary parallel.tp: x");
  /* a short buffer keeps a terminated prefix */
  snprintf(msg, sizeof msg, "--set a.b=1: bad");
  vs_explore_relabel(msg, 8, "a.b=1", "--vary ");
  assert_string_equal(msg, "--vary ");
}

/* ex for the workload `ini`, written to path (len bytes: a temporary file
 * the test unlinks), on one thread. */
static void explore_on(vs_explore *ex, const char *ini, char *path,
                       size_t len)
{
  tu_write_temp(ini, ".ini", path, len);
  memset(ex, 0, sizeof *ex);
  ex->workload = path;
  ex->jobs = 1;
}

/* A screening simulation that stops at an out-of-memory in setup has no
 * step: the candidate is not timed, and its step, tokens/s, MFU and cost
 * are 0 (never inf or nan, as dividing by its 0 s end would give). The
 * full simulation of the same job runs past the out-of-memory to the
 * step's end: timed, tokens/s = global_batch * seq_len / step. */
static void test_stopped_screening_has_no_step(void **state)
{
  static const char gpt[] =
      "[model]\narch = gpt\nlayers = 4\nhidden = 512\nheads = 8\n"
      "vocab = 1000\nseq_len = 128\n[training]\nglobal_batch = 4\n";
  char path[128];
  vs_explore ex;
  vs_candidate c;
  (void)state;
  explore_on(&ex, gpt, path, sizeof path);
  for (int full = 0; full < 2; full++) {
    memset(&c, 0, sizeof c);
    /* below the 432 MiB framework + 203 MiB of model states */
    vs_candidate_set(&c, "topology.gpu.memory=600MiB");
    vs_candidate_set(&c, "topology.cost.usd_per_gpu_hour=2");
    ex.max_microbatches = full ? 0 : 1;
    assert_int_equal(vs_explore_one(&ex, &c), 0);
    assert_int_equal(c.status, VS_EVAL_OOM);
    assert_true(strstr(c.reason, "out of memory at setup") != NULL);
    assert_true(isfinite(c.tokens_per_s) && isfinite(c.mfu) &&
                isfinite(c.usd_per_step));
    if (!full) {
      assert_false(c.timed);
      assert_false(c.worst.timed);
      assert_false(c.extrapolated);
      assert_true(c.step_time_s == 0 && c.tokens_per_s == 0 && c.mfu == 0 &&
                  c.usd_per_step == 0);
    } else {
      assert_true(c.timed && c.step_time_s > 0);
      assert_true(fabs(c.tokens_per_s - 4.0 * 128 / c.step_time_s) <
                  1e-9 * c.tokens_per_s);
    }
  }
  unlink(path);
}

/* Explores candidate *full as plan screens it (bounded, into *screened)
 * and in full (into *full); both must fit. */
static void screen_and_replay(vs_explore *ex, vs_candidate *full,
                              vs_candidate *screened)
{
  *screened = *full;
  ex->max_microbatches = 0;
  assert_int_equal(vs_explore_one(ex, full), 0);
  ex->max_microbatches = 1;
  assert_int_equal(vs_explore_one(ex, screened), 0);
  assert_int_equal(full->status, VS_EVAL_FITS);
  assert_int_equal(screened->status, VS_EVAL_FITS);
}

/* screen_and_replay of a candidate on `gpus` GPUs with n_sets sets of
 * the workload ini. */
static void screen_and_replay_on(const char *ini, uint64_t gpus,
                                 const char *const *sets, size_t n_sets,
                                 vs_candidate *full, vs_candidate *screened)
{
  char path[128];
  vs_explore ex;
  explore_on(&ex, ini, path, sizeof path);
  memset(full, 0, sizeof *full);
  full->gpus = gpus;
  for (size_t i = 0; i < n_sets; i++)
    vs_candidate_set(full, "%s", sets[i]);
  screen_and_replay(&ex, full, screened);
  unlink(path);
}

/* plan screens long pipelines with a bounded number of micro-batches and
 * extrapolates the step linearly (each further pipeline round adds the
 * same time, and no memory, once the 1F1B warm-up is over); the full
 * simulation must agree: the same peak with exact accounting, within 1%
 * with the caching allocator (whose block reuse shifts a little with more
 * micro-batches), and the step within 1%. 1, 2 and 4 stages, 64
 * micro-batches each, screened with pp and 2 * pp (2 and 3 at pp 1). */
static void test_bounded_screening_matches_full_simulation(void **state)
{
  static const char gpt[] =
      "[model]\narch = gpt\nlayers = 16\nhidden = 512\nheads = 8\n"
      "vocab = 4096\nseq_len = 512\n[training]\nglobal_batch = 128\n";
  char path[128];
  vs_explore ex;
  vs_candidate full, screened;
  (void)state;
  explore_on(&ex, gpt, path, sizeof path);
  for (int k = 0; k < 6; k++) {
    int pp = 1 << (k / 2);
    bool exact = k % 2 == 0;
    memset(&full, 0, sizeof full);
    full.gpus = 2 * (uint64_t)pp; /* dp 2: 64 micro-batches each */
    vs_candidate_set(&full, "parallel.pp=%d", pp);
    vs_candidate_set(&full, "runtime.allocator=%s", exact ? "exact" : "caching");
    screen_and_replay(&ex, &full, &screened);
    assert_true(screened.extrapolated);
    assert_false(full.extrapolated);
    if (exact)
      assert_int_equal(screened.worst.peak_allocated_bytes,
                       full.worst.peak_allocated_bytes);
    else
      assert_true(fabs((double)screened.worst.peak_used_bytes -
                       (double)full.worst.peak_used_bytes) <
                  0.01 * (double)full.worst.peak_used_bytes);
    assert_true(fabs(screened.step_time_s - full.step_time_s) <
                0.01 * full.step_time_s);
    /* MFU is the job's model FLOPs (all 64 micro-batches, whatever the
     * screening simulated) over its step: MFU x step is the same for both
     * (exactly, up to rounding), so the MFU is within the step's 1% too.
     * Before the fix the screened row counted only the 2*pp simulated
     * micro-batches' FLOPs: 64 / (2*pp) times too low. */
    assert_true(full.mfu > 0.01);
    tu_assert_close(screened.mfu * screened.step_time_s,
                    full.mfu * full.step_time_s, 1e-12);
    tu_assert_close(screened.mfu, full.mfu, 0.01);
  }
}

/* A step's only micro-batch is its first and its last at once: under
 * hf's eager kernels the first backward writes the gradients and the
 * others add to them, and the reductions run under the last, so the
 * step of one micro-batch is no point on the line through longer steps.
 * plan extrapolated from 1 and 2 micro-batches at pp 1: a 4-layer Bert
 * on 16 GPUs (4 micro-batches each) came out 6.4% short of its full
 * simulation (8% for Bert-Large); from 2 and 3 it is the same line. */
static void test_screen_starts_past_the_only_microbatch(void **state)
{
  static const char bert[] =
      "[model]\narch = bert\nlayers = 4\nhidden = 1024\nheads = 16\n"
      "vocab = 30522\nseq_len = 512\n[training]\nframework = hf\n"
      "precision = amp_fp16\nglobal_batch = 64\n";
  vs_candidate full, screened;
  (void)state;
  screen_and_replay_on(bert, 16, NULL, 0, &full, &screened);
  assert_true(screened.extrapolated && screened.timed);
  assert_true(full.step_time_s > 0 && isfinite(full.step_time_s));
  assert_true(fabs(screened.step_time_s - full.step_time_s) <
              0.01 * full.step_time_s);
}

/* Where the reductions fall behind the backward passes (ZeRO-2 over a 1
 * GB/s link, one GPU a node), the compute stream waits for the previous
 * bucket's reduction before going on (recipe reduce_depth), so the
 * gradients waiting for reductions stay bounded instead of piling up with
 * every micro-batch: 26 MiB of bf16 gradients a micro-batch (the model's
 * parameters), at most three micro-batches' (one filling, one reducing,
 * one waited for) beside the resident 13 MiB ZeRO-2 partition, where the
 * pile-up held 818 MiB. Later rounds add no memory, so the bounded
 * screening extrapolates and finds the full simulation's peak and step. */
static void test_slow_reductions_hold_backward_back(void **state)
{
  static const char gpt[] =
      "[model]\narch = gpt\nlayers = 4\nhidden = 512\nheads = 8\n"
      "vocab = 1000\nseq_len = 128\n[training]\nglobal_batch = 64\n"
      "[parallel]\nzero = 2\n";
  static const char *const sets[] = {"topology.node.gpus=1",
                                     "topology.network.inter_bandwidth=1GB/s"};
  vs_candidate full, screened;
  (void)state;
  /* dp 2: 32 micro-batches each */
  screen_and_replay_on(gpt, 2, sets, 2, &full, &screened);
  assert_true(screened.extrapolated);
  assert_true(full.worst.at_peak[VS_CAT_GRADS] < (uint64_t)100 << 20);
  assert_true(fabs((double)screened.worst.peak_allocated_bytes -
                   (double)full.worst.peak_allocated_bytes) <
              0.01 * (double)full.worst.peak_allocated_bytes);
  /* the reductions set the step: 420 ms of them exposed */
  assert_true(full.step_time_s > 0.4 && isfinite(full.step_time_s));
  assert_true(fabs(screened.step_time_s - full.step_time_s) <
              0.01 * full.step_time_s);
}

/* plan screens a pipeline of unequal stages by its steady state too
 * (explore_steady): a 19-layer GPT on 8 stages of 2 and 3 layers
 * (Megatron-LM's split as plan makes it), dp 2 under ZeRO-1, 67
 * micro-batches, is screened with 22 (pp + 12, and 2 more so that the 45
 * left are a multiple of the 3 stages of 3 layers, the period guessed),
 * which prove a period of 2 that 45 is not a multiple of, so it is
 * screened again with 23 (44 left: 22 periods): the proof then tells the
 * step exactly, the full simulation's to the nanosecond. Extrapolated
 * from 8 and 16 micro-batches instead (what plan did before, and does
 * without the second screen), it is not (59 left, no whole number of
 * periods). */
static void test_unequal_stages_screened_by_their_period(void **state)
{
  static const char gpt[] =
      "[model]\narch = gpt\nlayers = 19\nhidden = 512\nheads = 8\n"
      "vocab = 4096\nseq_len = 256\n[training]\nglobal_batch = 536\n"
      "micro_batch = 4\ncheckpointing = full\n[parallel]\npp = 8\n"
      "zero = 1\npp_layers = 2,2,2,3,3,3,2,2\n";
  vs_candidate full, screened;
  (void)state;
  screen_and_replay_on(gpt, 16, NULL, 0, &full, &screened);
  assert_true(screened.extrapolated && screened.timed);
  assert_false(full.extrapolated);
  assert_true(full.step_time_s > 0 && isfinite(full.step_time_s));
  assert_true(screened.step_time_s == full.step_time_s);
  assert_true(screened.tokens_per_s == full.tokens_per_s);
}

/* Runs the candidate of ex on 16 GPUs of `memory` and checks that it ran
 * out of memory (with `where` in its reason) as the bounded simulation of
 * cap = pp = 16 micro-batches does, run here: the same worst rank, peak,
 * categories at the peak and op. */
static void expect_bounded_oom(const vs_explore *ex, const char *memory,
                               const char *where)
{
  vs_candidate c;
  vs_topology topo;
  vs_workload wl;
  vs_sim sim;
  vs_summary want;
  vs_sim_opts opts = {.stop_at_oom = true};
  vs_error err;
  vs_error_clear(&err);
  memset(&c, 0, sizeof c);
  c.gpus = 16;
  vs_candidate_set(&c, "topology.gpu.memory=%s", memory);
  assert_int_equal(vs_explore_one(ex, &c), 0);
  assert_int_equal(c.status, VS_EVAL_OOM);
  assert_false(c.timed);
  if (!strstr(c.reason, where))
    fail_msg("%s: %s (wanted %s)", memory, c.reason, where);
  assert_int_equal(vs_explore_load(ex, c.sets, c.n_sets, 16, &topo, &wl,
                                   &err), 0);
  wl.grad_accum = 16;
  wl.training.global_batch = 16 * wl.training.micro_batch;
  assert_int_equal(vs_sim_run(&sim, &wl, &topo, &opts, &err), 0);
  assert_true(sim.stats.stopped);
  vs_summary_of(&sim, vs_sim_worst_rank(&sim), &want);
  assert_int_equal(c.worst.rank, want.rank);
  assert_int_equal(c.worst.stage, want.stage);
  assert_int_equal(c.worst.peak_allocated_bytes, want.peak_allocated_bytes);
  assert_int_equal(c.worst.peak_reserved_bytes, want.peak_reserved_bytes);
  assert_int_equal(c.worst.peak_used_bytes, want.peak_used_bytes);
  assert_memory_equal(c.worst.at_peak, want.at_peak, sizeof want.at_peak);
  assert_string_equal(c.worst.peak_op, want.peak_op);
  vs_sim_fini(&sim);
}

/* plan screens a long pipeline's setup with one micro-batch first
 * (setup_screened in explore.c): a layout whose model states run out of
 * memory at setup (3 GiB GPUs) gets the outcome the bounded simulation
 * gives; one that runs out in micro-batch 0's forward (3430 MiB: one
 * micro-batch does not stop in the setup), and one that fits (80 GiB),
 * are simulated as before. GPT of 32 layers on pp 16, 64 micro-batches
 * (48 in the bounded path: screened). */
static void test_setup_screen_matches_bounded_simulation(void **state)
{
  static const char gpt[] =
      "[model]\narch = gpt\nlayers = 32\nhidden = 1024\nheads = 16\n"
      "vocab = 32768\nseq_len = 512\n[training]\nglobal_batch = 64\n"
      "[parallel]\npp = 16\n";
  char path[128];
  vs_explore ex;
  vs_candidate c;
  (void)state;
  explore_on(&ex, gpt, path, sizeof path);
  ex.max_microbatches = 1;
  expect_bounded_oom(&ex, "3GiB", "out of memory at setup model_states");
  /* which op of layer 0 runs out depends on how the model states'
   * tensors share segments; expect_bounded_oom checks it is the bounded
   * simulation's */
  expect_bounded_oom(&ex, "3430MiB", "out of memory at forward");
  memset(&c, 0, sizeof c);
  c.gpus = 16;
  assert_int_equal(vs_explore_one(&ex, &c), 0);
  assert_int_equal(c.status, VS_EVAL_FITS);
  assert_true(c.timed && c.extrapolated && c.step_time_s > 0);
  unlink(path);
}

/* Sweeps run candidates on threads; the outcome of each does not depend on
 * how many run at once. */
static void test_parallel_results_match_serial(void **state)
{
  static const char gpt[] =
      "[model]\narch = gpt\nlayers = 4\nhidden = 256\nheads = 4\n"
      "vocab = 1000\nseq_len = 128\n";
  char path[128];
  vs_explore ex;
  vs_candidate one[6], two[6];
  vs_error err;
  (void)state;
  explore_on(&ex, gpt, path, sizeof path);
  memset(one, 0, sizeof one);
  for (int i = 0; i < 6; i++) {
    one[i].gpus = 2;
    vs_candidate_set(&one[i], "training.micro_batch=%d", i + 1);
    vs_candidate_set(&one[i], "parallel.zero=%d", i % 4);
  }
  memcpy(two, one, sizeof one);
  vs_error_clear(&err);
  ex.jobs = 1;
  assert_int_equal(vs_explore_all(&ex, one, 6, &err), 0);
  ex.jobs = 2;
  assert_int_equal(vs_explore_all(&ex, two, 6, &err), 0);
  for (int i = 0; i < 6; i++) {
    assert_int_equal(one[i].status, two[i].status);
    assert_memory_equal(&one[i].worst, &two[i].worst, sizeof one[i].worst);
    assert_true(one[i].step_time_s == two[i].step_time_s);
  }
}

static void split_is(uint64_t layers, uint64_t pp, const uint64_t *want)
{
  uint64_t got[64];
  assert_int_equal(vs_capacity_split(layers, pp, got), 0);
  for (uint64_t i = 0; i < pp; i++)
    if (got[i] != want[i])
      fail_msg("split of %llu layers over %llu stages: stage %llu has %llu, "
               "not %llu", (unsigned long long)layers, (unsigned long long)pp,
               (unsigned long long)i, (unsigned long long)got[i],
               (unsigned long long)want[i]);
}

/* The uneven split: ceil(layers / pp) each, then one layer off the first
 * stage, the last, the second, the second to last, ... until the counts
 * add up. 126 over 16: 8 each is 128, so the first and the last lose one
 * (Llama 3 405B); 10 over 4: 3 each is 12, first and last lose one; 9
 * over 4: 12 - 9 = 3, first, last and second; 80 over 32: 3 each is 96,
 * 16 lose one: stages 0-7 and 24-31. A divisor splits evenly; pp = 0 or
 * over the layers is refused. */
static void test_uneven_split(void **state)
{
  uint64_t l126[16], l80[32], counts[4] = {9, 9, 9, 9};
  static const uint64_t l10[] = {2, 3, 3, 2}, l9[] = {2, 2, 3, 2},
                        l8[] = {2, 2, 2, 2}, l5[] = {1, 1, 1, 1, 1};
  (void)state;
  for (int i = 0; i < 16; i++)
    l126[i] = i == 0 || i == 15 ? 7 : 8;
  for (int i = 0; i < 32; i++)
    l80[i] = i < 8 || i >= 24 ? 2 : 3;
  split_is(126, 16, l126);
  split_is(10, 4, l10);
  split_is(9, 4, l9);
  split_is(8, 4, l8);
  split_is(5, 5, l5);
  split_is(80, 32, l80);
  assert_int_equal(vs_capacity_split(3, 4, counts), VS_EUSAGE);
  assert_int_equal(vs_capacity_split(3, 0, counts), VS_EUSAGE);
  assert_int_equal(counts[0], 9); /* untouched on error */
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_vary_lists),
      cmocka_unit_test(test_uneven_split),
      cmocka_unit_test(test_vary_check),
      cmocka_unit_test(test_relabel),
      cmocka_unit_test(test_stopped_screening_has_no_step),
      cmocka_unit_test(test_bounded_screening_matches_full_simulation),
      cmocka_unit_test(test_screen_starts_past_the_only_microbatch),
      cmocka_unit_test(test_slow_reductions_hold_backward_back),
      cmocka_unit_test(test_unequal_stages_screened_by_their_period),
      cmocka_unit_test(test_setup_screen_matches_bounded_simulation),
      cmocka_unit_test(test_parallel_results_match_serial),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

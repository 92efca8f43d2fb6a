/* capacity_test.c - value lists of sweeps, and the bounded simulations plan
 * screens layouts with, against full simulations. */
#include "testutil.h"

#include "capacity.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

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
 * not 2 * 4). Words pass through. */
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
  parse_ok("training.checkpointing=none,selective,full",
           "training.checkpointing", words, 3);
  parse_ok("gpus=8,16,24..40", "gpus", gpus, 5);
  parse_bad("training.micro_batch", "expected section.key=v1,v2");
  parse_bad("micro_batch=1", "must be section.key");
  parse_bad("training.micro_batch=5..1", "not a range of whole numbers");
  parse_bad("training.micro_batch=1,,2", "empty or overlong value");
  parse_bad("training.micro_batch=1..5000", "more than 1024 values");
}

/* plan screens long pipelines with a bounded number of micro-batches and
 * extrapolates the step linearly (each further pipeline round adds the
 * same time, and no memory, once the 1F1B warm-up is over); the full
 * simulation must agree: the same peak with exact accounting, within 1%
 * with the caching allocator (whose block reuse shifts a little with more
 * micro-batches), and the step within 1%. 1, 2 and 4 stages, 64
 * micro-batches each, screened with pp and 2 * pp. */
static void test_bounded_screening_matches_full_simulation(void **state)
{
  static const char gpt[] =
      "[model]\narch = gpt\nlayers = 16\nhidden = 512\nheads = 8\n"
      "vocab = 4096\nseq_len = 512\n[training]\nglobal_batch = 128\n";
  char path[128];
  vs_explore ex = {0};
  vs_candidate full, screened;
  (void)state;
  tu_write_temp(gpt, ".ini", path, sizeof path);
  ex.workload = path;
  ex.jobs = 1;
  for (int k = 0; k < 6; k++) {
    int pp = 1 << (k / 2);
    bool exact = k % 2 == 0;
    memset(&full, 0, sizeof full);
    full.gpus = 2 * (uint64_t)pp; /* dp 2: 64 micro-batches each */
    vs_candidate_set(&full, "parallel.pp=%d", pp);
    vs_candidate_set(&full, "runtime.allocator=%s", exact ? "exact" : "caching");
    screened = full;
    ex.max_microbatches = 0;
    assert_int_equal(vs_explore_one(&ex, &full), 0);
    ex.max_microbatches = 1;
    assert_int_equal(vs_explore_one(&ex, &screened), 0);
    assert_int_equal(full.status, VS_EVAL_FITS);
    assert_int_equal(screened.status, VS_EVAL_FITS);
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
  }
}

/* Sweeps run candidates on threads; the outcome of each does not depend on
 * how many run at once. */
static void test_parallel_results_match_serial(void **state)
{
  static const char gpt[] =
      "[model]\narch = gpt\nlayers = 4\nhidden = 256\nheads = 4\n"
      "vocab = 1000\nseq_len = 128\n";
  char path[128];
  vs_explore ex = {0};
  vs_candidate one[6], two[6];
  vs_error err;
  (void)state;
  tu_write_temp(gpt, ".ini", path, sizeof path);
  ex.workload = path;
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

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_vary_lists),
      cmocka_unit_test(test_bounded_screening_matches_full_simulation),
      cmocka_unit_test(test_parallel_results_match_serial),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

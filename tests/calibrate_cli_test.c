/* calibrate_cli_test.c - the vsim-calibrate binary end to end: --help,
 * --fit on the fixtures in tests/data/calibrate/ (made by make_fixtures.py
 * from known figures), the INI it writes accepted by vsim and changing its
 * transfer times, and bad raw CSVs refused with the message and exit 1. */
#include "testutil.h"

#include "cost.h"
#include "topology.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <ctype.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define CAL_DATA VSIM_TEST_DATA "/calibrate/"

/* Runs VSIM_CALIBRATE_BIN with args (NULL-terminated) from the source
 * directory, as tu_run_vsim runs vsim. */
static void run_cal(tu_run *r, const char *const *args)
{
  tu_run_program(r, VSIM_CALIBRATE_BIN, args);
}

/* Writes text as a raw CSV into a new temporary file (its name into raw,
 * of raw_len) and names a temporary output that does not exist yet (out,
 * of out_len). */
static void write_raw(const char *text, char *raw, size_t raw_len, char *out,
                      size_t out_len)
{
  tu_write_temp(text, ".csv", raw, raw_len);
  tu_write_temp("", ".ini", out, out_len);
  unlink(out);
}

static void assert_contains(const char *text, const char *want)
{
  if (!strstr(text, want))
    fail_msg("\"%s\" lacks \"%s\"", text, want);
}

static tu_run run; /* large: one static result for every test */

static void test_help(void **state)
{
  static const char *const flags[] = {"--out",
                                      "--raw",
                                      "--fit",
                                      "--base",
                                      "--max-breakpoints",
                                      "--partial",
                                      "--gemm-dtype",
                                      "--device",
                                      "--samples",
                                      "--warmup",
                                      "--max-size",
                                      "--seed",
                                      "--time-limit",
                                      "--verbose",
                                      "--help"};
  static const char *const args[] = {"--help", NULL};
  (void)state;
  run_cal(&run, args);
  assert_int_equal(run.status, 0);
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
    assert_contains(run.out, flags[i]);
  assert_contains(run.out, "kind,bytes,sample,seconds");
  {
    /* -h is --help, and the help says so (it was accepted, named nowhere) */
    static const char *const h[] = {"-h", NULL};
    char *want;
    assert_non_null(want = strdup(run.out));
    assert_contains(want, "\n  -h, --help          this text\n");
    run_cal(&run, h);
    assert_int_equal(run.status, 0);
    assert_string_equal(run.out, want);
    assert_string_equal(run.err, "");
    free(want);
  }
}

static void test_usage_errors(void **state)
{
  static const char *const unknown[] = {"--frobnicate", "1", NULL};
  static const char *const breaks[] = {"--fit", "x.csv", "--max-breakpoints", "3", NULL};
  static const char *const novalue[] = {"--out", NULL};
  static const char *const limit[] = {"--time-limit", "1h", NULL};
  (void)state;
  run_cal(&run, unknown);
  assert_int_equal(run.status, 2);
  assert_contains(run.err, "unknown option '--frobnicate'");
  run_cal(&run, breaks);
  assert_int_equal(run.status, 2);
  assert_contains(run.err, "--max-breakpoints 3: expected a whole number from 0 to 2");
  run_cal(&run, novalue);
  assert_int_equal(run.status, 2);
  assert_contains(run.err, "--out needs a value");
  {
    /* --out onto the raw measurements would destroy them */
    static const char *const onto[] = {"--fit", CAL_DATA "h100-like.csv",
                                       "--out", CAL_DATA "h100-like.csv",
                                       NULL};
    run_cal(&run, onto);
    assert_int_equal(run.status, 2);
    assert_contains(run.err, "names an input or --raw file");
  }
  {
    /* at least 256 MiB: 64, 96, 128, 192 and 256 MiB are the 5 sizes of
     * 64 MiB or more the sweep must have */
    static const char *const small[] = {"--max-size", "128MiB", NULL};
    run_cal(&run, small);
    assert_int_equal(run.status, 2);
    assert_contains(run.err, "--max-size 128MiB: expected a size from 256MiB to 16GiB");
  }
  run_cal(&run, limit); /* whole seconds, at most a day (86400) */
  assert_int_equal(run.status, 2);
  assert_contains(run.err, "--time-limit 1h: expected a whole number from 0 to 86400");
}

static void test_measure_without_cuda(void **state)
{
  static const char *const args[] = {"--out", "/nonexistent/x.ini", NULL};
  (void)state;
  if (VSIM_CALIBRATE_HAS_CUDA)
    skip(); /* would measure on the GPU */
  run_cal(&run, args);
  assert_int_equal(run.status, 1);
  assert_contains(run.err, "built without CUDA");
  assert_contains(run.err, "--fit RAW.csv --out FILE.ini");
}

static void test_bad_csvs(void **state)
{
  static const struct {
    const char *file, *want;
  } cases[] = {
      {"bad-missing-column.csv",
       "tests/data/calibrate/bad-missing-column.csv:1: missing column "
       "'sample'"},
      {"bad-negative-time.csv",
       "tests/data/calibrate/bad-negative-time.csv:3: negative time -2e-6 s "
       "for kind h2d_pinned"},
      {"bad-too-few.csv",
       "tests/data/calibrate/bad-too-few.csv: kind p2p: too few points: 3 "
       "distinct sizes, need at least 4"},
      {"no-such-file.csv", "no-such-file.csv: cannot read raw CSV file"},
      /* one size timed at 1e300 s was fitted with a breakpoint at 6 B
       * and written as pcie_latency 0, exit 0 */
      {"bad-huge-time.csv",
       "tests/data/calibrate/bad-huge-time.csv:6: seconds 1e300 is over "
       "the 1e10 s any sample can take"},
  };
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char path[256], out[128];
    const char *args[] = {"--fit", path, "--out", out, NULL};
    snprintf(path, sizeof path, "tests/data/calibrate/%s", cases[i].file);
    tu_write_temp("", ".ini", out, sizeof out);
    unlink(out);
    run_cal(&run, args);
    assert_int_equal(run.status, 1);
    assert_contains(run.err, cases[i].want);
    assert_int_equal(access(out, F_OK), -1); /* nothing written */
  }
}

/* A raw CSV that holds its samples twice (appended to itself, header
 * aside) is refused with exit 1, naming the first repeated row and where
 * its sample was first, and writes nothing: the fit had taken every
 * sample twice and written a topology. */
static void test_fit_refuses_repeated_samples(void **state)
{
  char raw[128], out[128], text[4096];
  const char *args[] = {"--fit", raw, "--out", out, NULL};
  size_t used =
      (size_t)snprintf(text, sizeof text, "kind,bytes,sample,seconds\n");
  (void)state;
  for (int copy = 0; copy < 2; copy++)
    for (int size = 0; size < 6; size++)
      for (int i = 0; i < 3; i++)
        used += (size_t)snprintf(text + used, sizeof text - used,
                                 "h2d_pinned,%d,%d,%.6g\n", 4096 << size, i,
                                 1e-5 + (4096 << size) / 25e9);
  write_raw(text, raw, sizeof raw, out, sizeof out);
  run_cal(&run, args);
  assert_int_equal(run.status, 1);
  /* 6 sizes x 3 samples after the header: the copy starts on line 20 */
  snprintf(text, sizeof text,
           "%s:20: kind h2d_pinned, bytes 4096, sample 0 again (first on "
           "line 2): each timed sample is one row; remove the repeat (a "
           "file appended to itself?)",
           raw);
  assert_contains(run.err, text);
  assert_int_equal(access(out, F_OK), -1); /* nothing written */
  unlink(raw);
}

/* Each option once; a value never an option; the measuring options refused
 * with --fit, which measures nothing (they were silently ignored, and a
 * second --out silently won, and `--out --verbose` wrote "--verbose"). */
static void test_option_rules(void **state)
{
  static const char *const measuring[][2] = {
      {"--device", "1"}, {"--samples", "5"}, {"--warmup", "1"},
      {"--max-size", "1GiB"}, {"--seed", "2"}, {"--time-limit", "5"}};
  static const char *const swallow[] = {"--fit", "x.csv", "--out", "--verbose", NULL};
  static const char *const twice[] = {"--out", "a.ini", "--fit", "x.csv",
                                      "--out", "b.ini", NULL};
  static const char *const flag_twice[] = {"--verbose", "--verbose", NULL};
  static const char *const fit_verbose[] = {"--fit", "x.csv", "--verbose", NULL};
  static const char *const alone[] = {"--frobnicate", NULL};
  char want[128];
  (void)state;
  run_cal(&run, swallow);
  assert_int_equal(run.status, 2);
  assert_contains(run.err, "vsim-calibrate: --out needs a value (got the "
                           "option '--verbose')");
  run_cal(&run, twice);
  assert_int_equal(run.status, 2);
  assert_contains(run.err, "vsim-calibrate: --out given twice");
  run_cal(&run, flag_twice);
  assert_int_equal(run.status, 2);
  assert_contains(run.err, "--verbose given twice");
  for (size_t i = 0; i < sizeof measuring / sizeof measuring[0]; i++) {
    const char *args[] = {"--fit", "x.csv", measuring[i][0], measuring[i][1], NULL};
    run_cal(&run, args);
    assert_int_equal(run.status, 2);
    snprintf(want, sizeof want, "vsim-calibrate: %s applies to measuring; "
             "with --fit nothing is measured", measuring[i][0]);
    assert_contains(run.err, want);
  }
  /* --verbose is let through with --fit (no progress to report): the run
   * goes on to read x.csv, which does not exist */
  run_cal(&run, fit_verbose);
  assert_int_equal(run.status, 1);
  assert_contains(run.err, "x.csv: cannot read raw CSV file");
  {
    /* --gemm-dtype is --fit's (measuring times bf16) and bf16 or fp16 */
    static const char *const measure_dtype[] = {"--gemm-dtype", "fp16", NULL};
    static const char *const bad_dtype[] = {"--fit", "x.csv", "--gemm-dtype",
                                            "fp8", NULL};
    run_cal(&run, measure_dtype);
    assert_int_equal(run.status, 2);
    assert_contains(run.err, "--gemm-dtype names the dtype of --fit's gemm "
                             "rows; measuring times bf16 GEMMs");
    run_cal(&run, bad_dtype);
    assert_int_equal(run.status, 2);
    assert_contains(run.err, "--gemm-dtype fp8: expected bf16 or fp16");
  }
  /* an unknown option is named as such, not as one missing its value */
  run_cal(&run, alone);
  assert_int_equal(run.status, 2);
  assert_contains(run.err, "unknown option '--frobnicate'");
}

/* What vsim-calibrate prints is its output when --out is not given: one
 * that cannot be written is exit 1 with the reason (it was exit 0, the fits
 * lost); an output path that cannot be written is refused before the fit
 * runs (the fits were printed first, then exit 1), as vsim refuses its
 * own, and an empty input path names its option. */
static void test_outputs_checked_first(void **state)
{
  static const char *const empty_out[] = {"--fit", CAL_DATA "h100-like.csv",
                                          "--out", "", NULL};
  static const char *const dir_out[] = {"--fit", CAL_DATA "h100-like.csv",
                                        "--out", "/tmp", NULL};
  static const char *const no_dir[] = {"--fit", CAL_DATA "h100-like.csv",
                                       "--out", "/nonexistent/o.ini", NULL};
  static const char *const empty_fit[] = {"--fit", "", NULL};
  (void)state;
  run_cal(&run, empty_out);
  assert_int_equal(run.status, 2);
  assert_contains(run.err, "vsim-calibrate: --out needs a file name, got ''");
  assert_string_equal(run.out, "");
  run_cal(&run, dir_out);
  assert_int_equal(run.status, 1);
  assert_contains(run.err, "vsim-calibrate: --out /tmp: is a directory");
  assert_string_equal(run.out, "");
  run_cal(&run, no_dir);
  assert_int_equal(run.status, 1);
  assert_contains(run.err, "--out /nonexistent/o.ini: cannot create: "
                           "directory '/nonexistent'");
  assert_string_equal(run.out, "");
  run_cal(&run, empty_fit);
  assert_int_equal(run.status, 2);
  assert_contains(run.err, "vsim-calibrate: --fit needs a file name, got ''");
  {
    const char *const full[] = {
        "-c", "exec \"$0\" --fit " CAL_DATA "h100-like.csv >/dev/full",
        VSIM_CALIBRATE_BIN, NULL};
    tu_run_program(&run, "/bin/sh", full);
  }
  assert_int_equal(run.status, 1);
  assert_contains(run.err, "vsim-calibrate: writing to standard output "
                           "failed: No space left on device");
}

/* --fit on what is not a raw CSV: exit 1 at once, named (a directory said
 * "read error", /dev/zero grew memory without bound, a FIFO blocked, and
 * a NUL byte cut a field short: "4\0" read as 4). */
static void test_not_a_raw_csv(void **state)
{
  static const char nul[] = "kind,bytes,sample,seconds\np2p,4\0,0,1e-5\n";
  char dir[64], path[128], want[256];
  const char *args[] = {"--fit", path, NULL};
  FILE *f;
  (void)state;
  snprintf(path, sizeof path, "/dev/zero");
  run_cal(&run, args);
  assert_int_equal(run.status, 1);
  assert_contains(run.err, "vsim-calibrate: /dev/zero: not a regular file (a "
                           "device, FIFO or socket), not a raw CSV file");
  snprintf(path, sizeof path, "tests/data/calibrate");
  run_cal(&run, args);
  assert_int_equal(run.status, 1);
  assert_contains(run.err, "vsim-calibrate: tests/data/calibrate: is a directory");
  tu_temp_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/fifo.csv", dir);
  assert_int_equal(mkfifo(path, 0600), 0);
  run_cal(&run, args);
  assert_int_equal(run.status, 1);
  assert_contains(run.err, ": not a regular file");
  unlink(path);
  snprintf(path, sizeof path, "%s/nul.csv", dir);
  assert_non_null(f = fopen(path, "wb"));
  assert_int_equal(fwrite(nul, 1, sizeof nul - 1, f), sizeof nul - 1);
  assert_int_equal(fclose(f), 0);
  run_cal(&run, args);
  assert_int_equal(run.status, 1);
  /* the NUL is the 6th byte of line 2, "p2p,4\0,0,1e-5" */
  snprintf(want, sizeof want, "vsim-calibrate: %s:2: NUL byte (byte 6 of the "
           "line); a raw CSV file is text", path);
  assert_contains(run.err, want);
  tu_remove_dir(dir);
}

/* p2p rows around 5 us + b / 375 GB/s, each size's times scaled by one of
 * 1, 2.5, 0.5, 4, 1.5, 0.3 in turn (so no line follows them), 3 samples
 * each, plus `context` rows of context_bytes when that is not 0. */
static void write_scattered(char *path, size_t len, double scatter,
                            unsigned long long context_bytes)
{
  static const double m[] = {1, 2.5, 0.5, 4, 1.5, 0.3};
  static char text[16384];
  size_t used = (size_t)snprintf(text, sizeof text, "kind,bytes,sample,seconds\n");
  for (int k = 2; k < 30; k++)
    for (int s = 0; s < 3; s++)
      used += (size_t)snprintf(text + used, sizeof text - used, "p2p,%llu,%d,%.17g\n",
                               1ull << k, s, (5e-6 + (double)(1ull << k) / 375e9) *
                                                 (scatter ? m[k % 6] : 1.0));
  for (int s = 0; context_bytes && s < 3; s++)
    used += (size_t)snprintf(text + used, sizeof text - used, "context,%llu,%d,0.25\n",
                             context_bytes, s);
  tu_write_temp(text, ".csv", path, len);
}

/* A poor fit is written, since vsim-calibrate cannot do better, but said:
 * on stderr and in a comment of the file. */
/* A flat curve (cudaMalloc at small sizes) fits well with an r2 near 0:
 * no warning. A transfer curve whose time does not grow with size is
 * refused by --fit (vsim could not time copies with it) and left out, with
 * a warning, by --fit --partial. */
static void test_flat_curves(void **state)
{
  char raw[128], out[128], text[16384];
  size_t used = 0;
  const char *strict[] = {"--fit", raw, "--out", out, NULL};
  const char *partial[] = {"--fit", raw, "--partial", "--out", out, NULL};
  (void)state;
  used += (size_t)snprintf(text, sizeof text, "kind,bytes,sample,seconds\n");
  for (int k = 2; k < 30; k++)
    for (int s = 0; s < 5; s++) {
      used += (size_t)snprintf(text + used, sizeof text - used,
                               "malloc,%llu,%d,%.17g\n", 1ull << k, s,
                               20e-6 * (1 + 0.01 * ((k + s) % 3 - 1)));
      used += (size_t)snprintf(text + used, sizeof text - used,
                               "p2p,%llu,%d,%.17g\n", 1ull << k, s, 7e-6);
    }
  write_raw(text, raw, sizeof raw, out, sizeof out);
  run_cal(&run, strict);
  assert_int_equal(run.status, 1);
  assert_contains(run.err, "kind p2p: the fitted time does not grow with size");
  assert_true(access(out, F_OK) != 0);
  run_cal(&run, partial);
  if (run.status != 0)
    fail_msg("--partial exited %d: %s", run.status, run.err);
  assert_contains(run.err, "kind p2p left out: the fitted time does not grow");
  assert_null(strstr(run.err, "fits poorly"));
  unlink(out);
  unlink(raw);
}

static void test_poor_fit_warns(void **state)
{
  char raw[128], out[128], *ini;
  const char *args[] = {"--fit", raw, "--out", out, NULL};
  (void)state;
  write_scattered(raw, sizeof raw, 1, 0);
  tu_write_temp("", ".ini", out, sizeof out);
  run_cal(&run, args);
  if (run.status != 0)
    fail_msg("vsim-calibrate exited %d: %s", run.status, run.err);
  assert_contains(run.err, "vsim-calibrate: warning: ");
  assert_contains(run.err, ": kind p2p fits poorly (r2 ");
  assert_contains(run.err, "a good fit's errors are under 50%); "
                           "vsim will use this fit anyway");
  assert_non_null(ini = tu_read_file(out));
  assert_contains(ini, "; p2p fits poorly (r2 ");
  free(ini);
  unlink(raw);
  unlink(out);
}

/* A line measured at 20 sizes, 5 samples each, and one size of two
 * samples 8 times apart (a sparse or cut-short run): its median is off
 * the line by 78%, within two of its standard errors, so the fit is not
 * called poor; the warning says to measure that size again, in the file
 * too (review: "fits poorly ... check the samples" of a fit that was
 * right). */
static void test_scattered_size_named_not_blamed(void **state)
{
  char raw[128], out[128], *ini, *text, *p;
  const char *args[] = {"--fit", raw, "--out", out, NULL};
  size_t len = 0;
  (void)state;
  text = malloc(8192);
  assert_non_null(text);
  len += (size_t)sprintf(text, "kind,bytes,sample,seconds\n");
  for (int i = 0; i < 20; i++) {
    double b = floor(4096.0 * pow(1.5, i)); /* 4 KiB to 8.7 MiB */
    for (int s = 0; s < 5; s++)
      len += (size_t)sprintf(text + len, "d2h_pinned,%.0f,%d,%.9e\n", b, s,
                             7e-6 + b / 50e9);
  }
  for (int s = 0; s < 2; s++)
    len += (size_t)sprintf(text + len, "d2h_pinned,999999,%d,%.9e\n", s,
                           (s ? 8.0 : 1.0) * (7e-6 + 999999 / 50e9));
  write_raw(text, raw, sizeof raw, out, sizeof out);
  free(text);
  run_cal(&run, args);
  if (run.status != 0)
    fail_msg("vsim-calibrate exited %d: %s", run.status, run.err);
  assert_contains(run.err, ": kind d2h_pinned: 1 size(s) off the fit by over "
                           "50% have samples too scattered to judge it");
  assert_null(strstr(run.err, "fits poorly"));
  assert_non_null(ini = tu_read_file(out));
  assert_contains(ini, "; d2h_pinned: 1 size(s) too scattered to judge the "
                       "fit");
  assert_non_null(p = strstr(ini, "d2h_pinned_bandwidth = "));
  assert_true(fabs(strtod(p + 23, NULL) / 50.0 - 1.0) < 0.01); /* GB/s */
  free(ini);
  unlink(raw);
  unlink(out);
}

/* A noise-free "flat, then linear" curve (1 us, then 10 GB/s from 10.01
 * MB, between two measured sizes) is fitted with its knee, not refused as
 * flat (review: "its slope, 3.41e+28 B/s, is over 100 TB/s: are the times
 * in seconds?"; fit.c, SCALE_FLOOR). */
static void test_noise_free_knee_fitted(void **state)
{
  char raw[128], out[128], *text;
  const char *args[] = {"--fit", raw, "--out", out, NULL};
  size_t len = 0;
  (void)state;
  text = malloc(16384);
  assert_non_null(text);
  len += (size_t)sprintf(text, "kind,bytes,sample,seconds\n");
  for (int i = 2; i <= 30; i++)
    for (int s = 0; s < 5; s++) {
      double b = (double)(1ull << i), t = -1e-3 + b / 1e10;
      len += (size_t)sprintf(text + len, "p2p,%.0f,%d,%.6e\n", b, s,
                             t > 1e-6 ? t : 1e-6);
    }
  write_raw(text, raw, sizeof raw, out, sizeof out);
  free(text);
  run_cal(&run, args);
  if (run.status != 0)
    fail_msg("vsim-calibrate exited %d: %s", run.status, run.err);
  assert_contains(run.out, "breakpoint at 10010000 bytes");
  assert_contains(run.out, "       10 GB/s");
  unlink(raw);
  unlink(out);
}

/* A measured context not below the GPU's memory (8 PiB = 2^53 bytes, the
 * largest size a raw CSV takes) is not written: every run would be out of
 * memory. The nominal 400 MiB = 419430400 bytes of the built-in
 * h100-sxm-8x (topologies/h100-sxm-8x.ini) stays. */
static void test_context_over_memory_keeps_nominal(void **state)
{
  char raw[128], out[128], *ini;
  const char *args[] = {"--fit", raw, "--out", out, NULL};
  (void)state;
  write_scattered(raw, sizeof raw, 0, 1ull << 53);
  tu_write_temp("", ".ini", out, sizeof out);
  run_cal(&run, args);
  if (run.status != 0)
    fail_msg("vsim-calibrate exited %d: %s", run.status, run.err);
  assert_contains(run.err, "vsim-calibrate: warning: ");
  assert_contains(run.err, ": the CUDA context's measured size, 9007199254740992 "
                           "bytes, is not below [gpu] memory (");
  assert_contains(run.err, "keeping the nominal context_memory (419430400 bytes)");
  assert_null(strstr(run.err, "fits poorly")); /* the p2p line is exact */
  assert_non_null(ini = tu_read_file(out));
  assert_contains(ini, "\ncontext_memory = 400MiB\n");
  free(ini);
  unlink(raw);
  /* nor is a context of 0 bytes one (it was written as measured) */
  {
    char *text, *more;
    write_scattered(raw, sizeof raw, 0, 0);
    assert_non_null(text = tu_read_file(raw));
    assert_non_null(more = malloc(strlen(text) + 64));
    sprintf(more, "%scontext,0,0,0.25\ncontext,0,1,0.25\n", text);
    unlink(raw);
    tu_write_temp(more, ".csv", raw, sizeof raw);
    free(text);
    free(more);
  }
  run_cal(&run, args);
  if (run.status != 0)
    fail_msg("vsim-calibrate exited %d: %s", run.status, run.err);
  assert_contains(run.err, ": the CUDA context's measured size, 0 bytes, is "
                           "no memory at all: a context holds some; keeping "
                           "the nominal context_memory (419430400 bytes)");
  assert_non_null(ini = tu_read_file(out));
  assert_contains(ini, "\ncontext_memory = 400MiB\n");
  assert_null(strstr(ini, "context_memory = 0B"));
  free(ini);
  unlink(raw);
  unlink(out);
}


/* Past a file-size limit (ulimit -f) the INI's write fails and is reported,
 * exit 1, its temporary file removed; SIGXFSZ's default used to end the
 * program and leave the temporary file. The limit, 2048 bytes, is under the
 * INI's ~5 KB and over what vsim-calibrate prints; it is this process's
 * soft limit while the child runs (the child inherits it). */
static void test_file_size_limit(void **state)
{
  char dir[64], out[128];
  const char *args[] = {"--fit", CAL_DATA "h100-like.csv", "--out", out, NULL};
  struct rlimit old, lim;
  (void)state;
  tu_temp_dir(dir, sizeof dir);
  snprintf(out, sizeof out, "%s/x.ini", dir);
  assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
  lim = old;
  lim.rlim_cur = 2048;
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
  run_cal(&run, args);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
  assert_int_equal(run.status, 1); /* -1: killed by SIGXFSZ */
  {
    char want[200];
    snprintf(want, sizeof want, "--out %s: write failed: File too large", out);
    assert_contains(run.err, want);
  }
  assert_int_equal(tu_count_entries(dir), 0);
  tu_remove_dir(dir);
}

/* Runs `vsim run gpt-small.ini --gpus 2 --set parallel.tp=2` plus extra
 * arguments; returns the "step time ..." line in line[256]. */
static void step_line(const char *const *extra, char *line)
{
  const char *args[32] = {"run", "tests/data/gpt-small.ini", "--gpus", "2",
                          "--set", "parallel.tp=2"};
  size_t n = 6;
  const char *p, *e;
  for (size_t i = 0; extra[i]; i++)
    args[n++] = extra[i];
  args[n] = NULL;
  tu_run_vsim(&run, args);
  if (run.status != 0)
    fail_msg("vsim exited %d: %s", run.status, run.err);
  p = strstr(run.out, "step time");
  assert_non_null(p);
  e = strchr(p, '\n');
  snprintf(line, 256, "%.*s", (int)(e ? e - p : (long)strlen(p)), p);
}

/* The compute figure of a step line ("= compute 95.5 us + ..."), in us. */
static double step_compute_us(const char *line)
{
  const char *p = strstr(line, "= compute ");
  assert_non_null(p);
  assert_non_null(strstr(p, " us +")); /* the unit this test's runs print */
  return atof(p + strlen("= compute "));
}

/* Reads the value of `key = ` in the INI text into buf. */
static const char *ini_value(const char *ini, const char *key, char *buf)
{
  char pat[96];
  const char *p, *e;
  snprintf(pat, sizeof pat, "\n%s = ", key);
  p = strstr(ini, pat);
  if (!p)
    fail_msg("INI lacks %s", key);
  p += strlen(pat);
  e = strchr(p, '\n');
  snprintf(buf, 96, "%.*s", (int)(e - p), p);
  return buf;
}

/* A GEMM table made here from known figures (full-wave rate 0.84 of the
 * H100's 989 TFLOP/s on its 132 SMs, tile overhead 96 in k, 4 us a
 * launch; m, n, k of 256 to 8192, three samples a shape within 0.5%),
 * beside a transfer kind: --fit writes compute_efficiency at the best
 * single GEMM measured, compute_efficiency_shape, gemm_k_overhead and
 * kernel_floor, and vsim's GEMM times from the written topology are
 * within 2% of the table for every shape. */
static double gemm_table(vs_gemm g)
{
  return 4e-6 + 2.0 * (double)g.m * (double)g.n * (double)g.k /
                    (989e12 * 0.84 * vs_cost_gemm_share(g, 132, 96.0));
}

static void write_gemm_raw(char *raw, size_t len)
{
  static const uint64_t sizes[] = {256, 512, 1024, 2048, 4096, 8192};
  size_t cap = 300000, used = 0;
  char *text = malloc(cap);
  assert_non_null(text);
  used += (size_t)snprintf(text, cap, "kind,bytes,sample,seconds,m,n,k\n");
  for (int k = 10; k < 30; k++)
    used += (size_t)snprintf(text + used, cap - used,
                             "h2d_pinned,%llu,0,%.17g,,,\n", 1ull << k,
                             2e-6 + (double)(1ull << k) / 25e9);
  for (size_t a = 0; a < 6; a++)
    for (size_t b = 0; b < 6; b++)
      for (size_t c = 0; c < 6; c++)
        for (int r = 0; r < 3; r++) {
          vs_gemm g = {sizes[a], sizes[b], sizes[c], 1};
          used += (size_t)snprintf(
              text + used, cap - used, "gemm,0,%d,%.17g,%llu,%llu,%llu\n", r,
              gemm_table(g) * (1.0 + 0.005 * ((double)((a + 2 * b + c + (size_t)r) % 3) - 1.0)),
              (unsigned long long)g.m, (unsigned long long)g.n,
              (unsigned long long)g.k);
        }
  tu_write_temp(text, ".csv", raw, len);
  free(text);
}

static void test_gemm_table_fitted_and_used(void **state)
{
  static const uint64_t sizes[] = {256, 512, 1024, 2048, 4096, 8192};
  char raw[128], out[128];
  const char *args[] = {"--fit", raw, "--out", out, NULL};
  vs_topology t;
  vs_error err;
  (void)state;
  write_gemm_raw(raw, sizeof raw);
  tu_write_temp("", ".ini", out, sizeof out);
  run_cal(&run, args);
  if (run.status != 0)
    fail_msg("vsim-calibrate exited %d: %s", run.status, run.err);
  assert_contains(run.out, "gemm: 216 shapes");
  vs_error_clear(&err);
  if (vs_topology_load(&t, out, NULL, 0, &err))
    fail_msg("%s", err.msg);
  assert_int_equal(t.compute_efficiency_shape.n, 3);
  tu_assert_close(t.gemm_k_overhead, 96.0, 0.15);
  tu_assert_close(t.kernel_floor, 4e-6, 0.1);
  for (size_t a = 0; a < 6; a++)
    for (size_t b = 0; b < 6; b++)
      for (size_t c = 0; c < 6; c++) {
        vs_gemm g = {sizes[a], sizes[b], sizes[c], 1};
        double f = 2.0 * (double)g.m * (double)g.n * (double)g.k;
        double v = vs_cost_gemm_seconds(&t, VS_PREC_BF16, g, f, 0, NULL) +
                   vs_cost_launch_seconds(&t, 1);
        if (fabs(v / gemm_table(g) - 1.0) >= 0.02)
          fail_msg("%llu x %llu x %llu: %g s against %g s",
                   (unsigned long long)g.m, (unsigned long long)g.n,
                   (unsigned long long)g.k, v, gemm_table(g));
      }
  {
    /* measured are this run's figures: a base that lists its own (the
     * shipped H200 file: name, memory, context, PCIe, ...) keeps none of
     * them in the file written; the h2d_pinned rows' fit gives PCIe */
    const char *based[] = {"--fit", raw, "--out", out, "--base",
                           "topologies/h200-calibrated.ini", NULL};
    char said[512];
    run_cal(&run, based);
    if (run.status != 0)
      fail_msg("vsim-calibrate exited %d: %s", run.status, run.err);
    if (vs_topology_load(&t, out, NULL, 0, &err))
      fail_msg("%s", err.msg);
    vs_topology_measured_text(&t, said, sizeof said);
    assert_string_equal(said, "compute_efficiency, compute_efficiency_shape, "
                              "gemm_k_overhead, kernel_floor; curves "
                              "h2d_pinned (PCIe)");
  }
  unlink(raw);
  unlink(out);
}

/* One shape among 216 good ones timed at 1.5 times the peak (a typo, a
 * unit slip in one shape's rows) is refused naming it, exit 1 and no
 * file: it was fitted into a full-wave rate above the peak (1.26) and a
 * tile overhead at the grid's edge (1024), and written with exit 0. */
static void test_gemm_shape_over_peak_refused(void **state)
{
  char raw[128], out[128];
  const char *args[] = {"--fit", raw, "--out", out, NULL};
  FILE *f;
  (void)state;
  write_gemm_raw(raw, sizeof raw);
  tu_write_temp("", ".ini", out, sizeof out);
  unlink(out);
  f = fopen(raw, "a");
  assert_non_null(f);
  for (int r = 0; r < 3; r++)
    fprintf(f, "gemm,0,%d,%.17g,777,512,8192\n", r,
            2.0 * 777 * 512 * 8192 / (1.5 * 989e12));
  fclose(f);
  run_cal(&run, args);
  assert_int_equal(run.status, 1);
  assert_contains(run.err, "kind gemm: the GEMMs ran at up to 1.5 times the "
                           "base topology's peak_tflops_bf16 (989)");
  assert_contains(run.err, "the times of 777x512x8192 (batch 1), median ");
  assert_true(access(out, F_OK) != 0);
  unlink(raw);
}

/* The V100's GEMM figures (topologies/v100-sxm-32g-8x.ini) are the fit of
 * Baidu DeepBench's fp16 table (calibrate/data/v100-deepbench.csv): the
 * fit on the fp16 peak gives them back; the same rows read as bf16 (the
 * V100's 15.7 TFLOP/s without bf16 tensor cores) are refused, being
 * faster than that peak. */
static void test_deepbench_v100_fit(void **state)
{
  char out[128];
  const char *fp16[] = {"--fit",
                        "calibrate/data/v100-deepbench.csv",
                        "--base",
                        "topologies/v100-sxm-32g-8x.ini",
                        "--gemm-dtype",
                        "fp16",
                        "--out",
                        out,
                        NULL};
  const char *bf16[] = {"--fit", "calibrate/data/v100-deepbench.csv", "--base",
                        "topologies/v100-sxm-32g-8x.ini", NULL};
  vs_topology shipped, fitted;
  vs_error err;
  (void)state;
  tu_write_temp("", ".ini", out, sizeof out);
  run_cal(&run, fp16);
  if (run.status != 0)
    fail_msg("vsim-calibrate exited %d: %s", run.status, run.err);
  assert_contains(run.out, "gemm: 41 shapes, full-wave rate 0.8961 of the "
                           "fp16 peak, tile overhead 146 in k");
  vs_error_clear(&err);
  if (vs_topology_load(&shipped,
                       VSIM_SOURCE_DIR "/topologies/v100-sxm-32g-8x.ini", NULL,
                       0, &err) ||
      vs_topology_load(&fitted, out, NULL, 0, &err))
    fail_msg("%s", err.msg);
  tu_assert_close(fitted.compute_efficiency, shipped.compute_efficiency, 1e-4);
  assert_true(fitted.gemm_k_overhead == shipped.gemm_k_overhead);
  assert_int_equal(fitted.compute_efficiency_shape.n, 3);
  for (size_t i = 0; i < 3; i++)
    assert_int_equal(fitted.compute_efficiency_shape.values[i],
                     shipped.compute_efficiency_shape.values[i]);
  run_cal(&run, bf16);
  assert_int_equal(run.status, 1);
  assert_contains(run.err, "times the base topology's peak_tflops_bf16 "
                           "(15.7): pass --base with this GPU's peak (or "
                           "--gemm-dtype fp16 for fp16 GEMMs)");
  unlink(out);
}

/* gemm rows without their shape, with a bad one, or on a base topology
 * without an SM count are refused with the line and the reason. */
static void test_gemm_rows_refused(void **state)
{
  char raw[128], out[128];
  const char *args[] = {"--fit", raw, "--out", out, NULL};
  const char *l40s[] = {"--fit", raw, "--base", "topologies/l40s-48g-8x.ini",
                        "--out", out, NULL};
  (void)state;
  tu_write_temp("", ".ini", out, sizeof out);
  tu_write_temp("kind,bytes,sample,seconds\ngemm,0,0,1e-5\n", ".csv", raw,
                sizeof raw);
  run_cal(&run, args);
  assert_int_equal(run.status, 1);
  assert_contains(run.err, ":2: a gemm row needs the column 'm'");
  unlink(raw);
  tu_write_temp("kind,bytes,sample,seconds,m,n,k\ngemm,0,0,1e-5,64,0,64\n",
                ".csv", raw, sizeof raw);
  run_cal(&run, args);
  assert_int_equal(run.status, 1);
  assert_contains(run.err, ":2: gemm n '0' is not a positive integer under 2^31");
  unlink(raw);
  tu_write_temp("kind,bytes,sample,seconds,m,n,k\ngemm,,0,0,64,64,64\n",
                ".csv", raw, sizeof raw);
  run_cal(&run, args);
  assert_int_equal(run.status, 1);
  assert_contains(run.err, ":2: a gemm row's time must be positive, not 0 s");
  unlink(raw);
  /* a GEMM too large to time is named by its line, not its index among
   * the gemm rows once the fit runs */
  tu_write_temp("kind,bytes,sample,seconds,m,n,k\n"
                "gemm,0,0,1e-5,64,64,64\n"
                "gemm,0,0,1.0,1073741823,1073741823,1073741823\n",
                ".csv", raw, sizeof raw);
  run_cal(&run, args);
  assert_int_equal(run.status, 1);
  assert_contains(run.err, ":3: a gemm row of 2.48e+27 FLOPs (2 m n k batch) "
                           "is more than the 1e+18 a timed GEMM can be");
  unlink(raw);
  write_gemm_raw(raw, sizeof raw);
  run_cal(&run, l40s);
  assert_int_equal(run.status, 1);
  assert_contains(run.err, "kind gemm: the base topology gives no [gpu] sms");
  {
    /* with --partial the L40S base (no sms, no list keys such as
     * compute_efficiency_shape) still writes a topology vsim loads */
    const char *l40sp[] = {
        "--fit",     raw,     "--base", "topologies/l40s-48g-8x.ini",
        "--partial", "--out", out,      NULL};
    run_cal(&run, l40sp);
    if (run.status != 0)
      fail_msg("--partial on l40s exited %d: %s", run.status, run.err);
    assert_contains(run.out, "wrote ");
  }
  {
    /* an H100's table on the A100's 312 TFLOP/s: over the peak */
    const char *a100[] = {"--fit", raw, "--base",
                          "topologies/a100-sxm-80g-8x.ini", "--out", out,
                          NULL};
    run_cal(&run, a100);
    assert_int_equal(run.status, 1);
    assert_contains(run.err, "times the base topology's peak_tflops_bf16 "
                             "(312): pass --base with this GPU's peak");
    /* --partial leaves the GEMM fit out, keeps the transfer kind */
    const char *partial[] = {"--fit", raw, "--base",
                             "topologies/a100-sxm-80g-8x.ini", "--partial",
                             "--out", out, NULL};
    run_cal(&run, partial);
    if (run.status != 0)
      fail_msg("--partial exited %d: %s", run.status, run.err);
    assert_contains(run.err, "warning: ");
    assert_contains(run.err, "kind gemm left out: the GEMMs ran at ");
  }
  unlink(raw);
  unlink(out);
}

static void test_fit_fixture_and_use_it(void **state)
{
  /* h100-like.csv: p2p 6 us + b / 375 GB/s, d2d_kernel 3 us + 2b / 2900 GB/s,
   * h2d_pinned two regimes (24 GB/s up to 1 MiB, then 52 GB/s), 1% noise and
   * 3% of samples slowed 3-10x (make_fixtures.py). */
  char out[128], ini_path[160], line_nom[256], line_cal[256], line_set[256];
  char bw[96], lat[96], hbm[96], pcie[96], pcie_lat[96];
  char set_bw[160], set_lat[160], set_hbm[160], set_eff[160], set_pcie[160],
      set_pcie_lat[160];
  const char *args[] = {"--fit", CAL_DATA "h100-like.csv", "--out", out, NULL};
  char *ini;
  (void)state;
  tu_write_temp("", ".ini", out, sizeof out);
  run_cal(&run, args);
  if (run.status != 0)
    fail_msg("vsim-calibrate exited %d: %s", run.status, run.err);
  assert_contains(run.out, "wrote ");
  assert_null(strstr(run.err, "warning")); /* every fit is good */
  assert_non_null(ini = tu_read_file(out));
  /* the fit recovered the fixture's figures within 2% (printed as text) */
  assert_true(fabs(atof(ini_value(ini, "p2p_bandwidth", bw)) / 375 - 1) < 0.02);
  assert_true(fabs(atof(ini_value(ini, "p2p_latency", lat)) / 6 - 1) < 0.02);
  assert_true(fabs(atof(ini_value(ini, "d2d_kernel_bandwidth", hbm)) / 2900 - 1) < 0.02);
  assert_true(fabs(atof(ini_value(ini, "h2d_pinned_bandwidth", pcie)) / 52 - 1) < 0.02);
  ini_value(ini, "h2d_pinned_latency", pcie_lat);
  assert_true(fabs(atof(ini_value(ini, "h2d_pinned_breakpoints", set_bw)) /
                   1048576 - 1) < 0.05);
  /* both pieces of the two-regime kind are written for vsim: the fixture's
   * 24 GB/s below 1 MiB and 52 GB/s above (make_fixtures.py) */
  {
    char pieces[128];
    const char *second;
    ini_value(ini, "h2d_pinned_piece_bandwidths", pieces);
    assert_non_null(second = strchr(pieces, ','));
    assert_true(fabs(atof(pieces) / 24 - 1) < 0.02);
    assert_true(fabs(atof(second + 1) / 52 - 1) < 0.02);
  }
  assert_contains(ini, "\ncontext_memory = 500MiB\n");
  /* [node]'s one-line PCIe figures summarise the h2d_pinned curve: large
   * copies' rate (52 GB/s) and small copies' latency (the first piece's
   * 8 us, make_fixtures.py) */
  {
    char node_bw[96], node_lat[96];
    assert_true(fabs(atof(ini_value(ini, "pcie_bandwidth", node_bw)) / 52 - 1) < 0.02);
    assert_true(fabs(atof(ini_value(ini, "pcie_latency", node_lat)) / 8 - 1) < 0.02);
  }
  assert_contains(ini, "; measured (see the header for where and from what)\n"
                       "context_memory");
  free(ini);

  /* vsim accepts it, and a tp=2 run's time changes. The p2p fit has one
   * piece, so the tensor-parallel comm is exactly that of the nominal
   * topology with the fitted p2p figures set by hand; the compute is
   * longer than with the fitted HBM bandwidth set by hand, because the
   * calibrated curve also charges each memory-bound kernel the fitted
   * 3 us intercept (topology_test checks that formula). */
  snprintf(ini_path, sizeof ini_path, "%s", out);
  {
    const char *nom[] = {NULL};
    const char *cal[] = {"--topology", ini_path, NULL};
    const char *set[] = {"--set", set_bw, "--set", set_lat, "--set", set_hbm,
                         "--set", set_eff, "--set", set_pcie, "--set",
                         set_pcie_lat, NULL};
    snprintf(set_bw, sizeof set_bw, "topology.network.intra_bandwidth=%s", bw);
    snprintf(set_lat, sizeof set_lat, "topology.network.intra_latency=%s", lat);
    snprintf(set_hbm, sizeof set_hbm, "topology.gpu.hbm_bandwidth=%s", hbm);
    snprintf(set_eff, sizeof set_eff, "topology.gpu.memory_efficiency=1");
    snprintf(set_pcie, sizeof set_pcie, "topology.node.pcie_bandwidth=%s", pcie);
    snprintf(set_pcie_lat, sizeof set_pcie_lat, "topology.node.pcie_latency=%s",
             pcie_lat);
    step_line(nom, line_nom);
    step_line(cal, line_cal);
    step_line(set, line_set);
  }
  /* nominal: intra_latency 3 us; calibrated p2p: 6 us, so the latency-bound
   * tensor-parallel comm of this small model roughly doubles */
  assert_string_equal(strstr(line_cal, "tensor-parallel comm"),
                      strstr(line_set, "tensor-parallel comm"));
  assert_true(step_compute_us(line_cal) > step_compute_us(line_set));
  if (strcmp(line_cal, line_nom) == 0)
    fail_msg("calibration did not change the step: %s", line_cal);
  print_message("  nominal:    %s\n  calibrated: %s\n", line_nom, line_cal);
  /* A run that needs sizes the calibration did not measure says so: here
   * the d2d_kernel range is cut to 1 MiB, below this model's activations. */
  {
    const char *narrow[] = {"run", "tests/data/gpt-small.ini", "--topology",
                          ini_path, "--set",
                          "topology.calibration.d2d_kernel_max_bytes=1MiB",
                          NULL};
    tu_run_vsim(&run, narrow);
    assert_int_equal(run.status, 0);
    assert_contains(run.out, "note: ");
    assert_contains(run.out, ": [calibration] d2d_kernel was measured from "
                             "4 B to 1.00 MiB; this run needs up to ");
    assert_contains(run.out, "its last piece is extended");
    narrow[4] = NULL; /* the whole measured range: no note */
    tu_run_vsim(&run, narrow);
    assert_int_equal(run.status, 0);
    if (strstr(run.out, "was measured from"))
      fail_msg("note without cause: %s", run.out);
  }
  unlink(out);
}

/* Runs args (--out at args[3]) with --out `out`: refused as a fit vsim
 * refuses, naming out. */
static void refused_into(const char **args, const char *out)
{
  char want[128];
  args[3] = out;
  run_cal(&run, args);
  assert_int_equal(run.status, 1);
  snprintf(want, sizeof want, "%s: not written: the fit gives values vsim "
           "refuses (line ", out);
  assert_contains(run.err, want);
}

/* A fit vsim would refuse is not written: p2p samples 2 s + b / 375 GB/s
 * give a 2 s latency, over [calibration]'s 1 s bound. Exit 1, no file. */
static void test_refused_fit_is_not_written(void **state)
{
  char raw[128], out[128], text[16384];
  size_t used = 0;
  const char *args[] = {"--fit", raw, "--out", out, NULL};
  (void)state;
  used += (size_t)snprintf(text, sizeof text, "kind,bytes,sample,seconds\n");
  for (int k = 2; k < 30; k++)
    for (int s = 0; s < 5; s++)
      used += (size_t)snprintf(text + used, sizeof text - used,
                               "p2p,%llu,%d,%.17g\n", 1ull << k, s,
                               2.0 + (double)(1ull << k) / 375e9);
  write_raw(text, raw, sizeof raw, out, sizeof out);
  run_cal(&run, args);
  assert_int_equal(run.status, 1);
  assert_contains(run.err, "not written: the fit gives values vsim refuses "
                           "(line ");
  assert_contains(run.err, "[calibration] p2p_latency = ");
  assert_contains(run.err, "must be at most 1");
  assert_true(access(out, F_OK) != 0);
  /* an output written through rather than renamed into place (a device,
   * a pipe) is checked first, in a private copy: it was written unchecked */
  refused_into(args, "/dev/null");
  /* and to stdout, nothing but the summary, which then goes to stderr */
  refused_into(args, "/dev/stdout");
  assert_string_equal(run.out, "");
  /* its private copy goes to /tmp where $TMPDIR cannot hold it (the write
   * failed), and a colon in $TMPDIR does not cut the message short */
  {
    char dir[64] = "/tmp/vsim-colon:XXXXXX";
    assert_non_null(mkdtemp(dir));
    setenv("TMPDIR", dir, 1);
    refused_into(args, "/dev/null");
    assert_contains(run.err, ": [calibration] p2p_latency = ");
    { /* "line N", no part of the path: cut at the path's first colon, it
         read "line XXXXXX/check.ini.tmp...:60: ..." */
      const char *line = strstr(run.err, "(line ");
      assert_non_null(line);
      assert_true(isdigit((unsigned char)line[6]));
    }
    setenv("TMPDIR", "/nonexistent/folder", 1);
    args[1] = CAL_DATA "h100-like.csv";
    run_cal(&run, args);
    if (run.status != 0)
      fail_msg("with TMPDIR unusable: exit %d: %s", run.status, run.err);
    unsetenv("TMPDIR");
    rmdir(dir);
  }
  unlink(raw);
}

/* A raw CSV whose path is longer than an INI line (198 characters) is
 * named in the file's comments on lines that fit: its one comment line
 * made vsim-calibrate refuse the file it had written ("line too long"),
 * exit 1, blaming the measurements. */
static void test_long_raw_path_comment_fits(void **state)
{
  char base[128], dir[400], raw[512], out[128], *ini, *text;
  const char *args[] = {"--fit", raw, "--out", out, NULL};
  vs_topology t;
  vs_error err;
  FILE *f;
  (void)state;
  assert_non_null(tu_temp_dir(base, sizeof base));
  snprintf(dir, sizeof dir, "%s/%0200d", base, 0);
  assert_int_equal(mkdir(dir, 0700), 0);
  snprintf(raw, sizeof raw, "%s/h100-like.csv", dir);
  text = tu_read_file(CAL_DATA "h100-like.csv");
  assert_non_null(text);
  f = fopen(raw, "w");
  assert_non_null(f);
  fputs(text, f);
  assert_int_equal(fclose(f), 0);
  free(text);
  tu_write_temp("", ".ini", out, sizeof out);
  run_cal(&run, args);
  if (run.status != 0)
    fail_msg("vsim-calibrate exited %d: %s", run.status, run.err);
  vs_error_clear(&err);
  if (vs_topology_load(&t, out, NULL, 0, &err))
    fail_msg("%s", err.msg);
  ini = tu_read_file(out);
  assert_non_null(ini);
  for (const char *p = ini; *p;) {
    size_t n = strcspn(p, "\n");
    assert_true(n <= 198);
    p += n + (p[n] == '\n');
  }
  assert_non_null(strstr(ini, "; fitted from the samples in\n; "));
  free(ini);
  unlink(raw);
  unlink(out);
  rmdir(dir);
  rmdir(base);
}

/* --partial leaving out every kind it has rows of says so, not that the
 * file held only context rows (a GEMM table of 5 shapes, one short of a
 * fit, was told "only context rows"). */
static void test_partial_leaving_all_out_says_why(void **state)
{
  char raw[128], out[128], text[1024];
  size_t used = 0;
  const char *args[] = {"--fit", raw, "--partial", "--out", out, NULL};
  (void)state;
  used += (size_t)snprintf(text, sizeof text,
                           "kind,bytes,sample,seconds,m,n,k,batch\n");
  for (int i = 0; i < 5; i++)
    used += (size_t)snprintf(text + used, sizeof text - used,
                             "gemm,0,0,%g,%d,4096,4096,1\n", 1e-4 * (i + 1),
                             512 << i);
  write_raw(text, raw, sizeof raw, out, sizeof out);
  run_cal(&run, args);
  assert_int_equal(run.status, 1);
  assert_contains(run.err, "kind gemm left out: GEMM fit: 5 shapes measured");
  assert_contains(run.err, "no samples of a kind that is fitted (each kind "
                           "was left out: the warnings above say why)");
  assert_null(strstr(run.err, "only context rows"));
  unlink(raw);
}

/* --out /dev/stdout: standard output is the topology alone, which vsim
 * loads; the fits' summary goes to stderr (it followed the file, whose
 * reader then refused the summary's first line). */
static void test_out_to_stdout_is_the_file_alone(void **state)
{
  char ini[128];
  const char *args[] = {"--fit", CAL_DATA "h100-like.csv", "--out",
                        "/dev/stdout", NULL};
  vs_topology t;
  vs_error err;
  (void)state;
  run_cal(&run, args);
  if (run.status != 0)
    fail_msg("vsim-calibrate exited %d: %s", run.status, run.err);
  assert_true(strncmp(run.out, "; Calibrated topology", 21) == 0);
  assert_null(strstr(run.out, "wrote "));
  assert_contains(run.err, "wrote /dev/stdout");
  assert_contains(run.err, "max_rel_err");
  tu_write_temp(run.out, ".ini", ini, sizeof ini);
  vs_error_clear(&err);
  if (vs_topology_load(&t, ini, NULL, 0, &err) != 0)
    fail_msg("vsim refuses the file: %s", err.msg);
  unlink(ini);
}

/* --out is optional with --fit: without it the fits are only printed,
 * exit 0; docs/DESIGN.md's command line says so as --help does (it wrote
 * "--fit RAW.csv --out FILE.ini", as if --out were required). */
static void test_fit_without_out_only_prints(void **state)
{
  static const char *const fit[] = {"--fit", CAL_DATA "h100-like.csv", NULL};
  static const char *const help[] = {"--help", NULL};
  static const char form[] = "--fit RAW.csv [--out FILE.ini]";
  char *design;
  (void)state;
  run_cal(&run, fit);
  if (run.status != 0)
    fail_msg("--fit alone exited %d: %s", run.status, run.err);
  assert_contains(run.out, "kind              sizes");
  assert_null(strstr(run.out, "wrote "));
  assert_null(strstr(run.out, "; Calibrated topology"));
  run_cal(&run, help);
  assert_contains(run.out, form);
  assert_non_null(design = tu_read_file(VSIM_SOURCE_DIR "/docs/DESIGN.md"));
  assert_contains(design, form);
  free(design);
}

/* The topology went to standard output (--out named the file stdout
 * writes to, given as out): stdout is the file alone, the fits' summary
 * and "wrote" line are on stderr. */
static void assert_file_alone_on_stdout(const char *out)
{
  char wrote[256];
  if (run.status != 0)
    fail_msg("--out %s: exit %d: %s", out, run.status, run.err);
  assert_true(strncmp(run.out, "; Calibrated topology", 21) == 0);
  assert_null(strstr(run.out, "wrote "));
  assert_null(strstr(run.out, "kind              sizes"));
  snprintf(wrote, sizeof wrote, "wrote %s\n", out);
  assert_contains(run.err, wrote);
  assert_contains(run.err, "kind              sizes");
}

/* The summary leaves stdout exactly when --out is the file stdout writes
 * to (fstat's device and inode): /proc/self/fd/1, and a FIFO stdout also
 * writes to; /dev/null, a device stdout is not, keeps it on stdout (the
 * README said any pipe or device sent it to stderr). */
static void test_summary_on_stderr_only_when_out_is_stdout(void **state)
{
  const char *args[] = {"--fit", CAL_DATA "h100-like.csv", "--out",
                        "/proc/self/fd/1", NULL};
  char dir[128], fifo[160];
  (void)state;
  run_cal(&run, args); /* stdout: the file tu_run_program captures it in */
  assert_file_alone_on_stdout("/proc/self/fd/1");

  args[3] = "/dev/null";
  run_cal(&run, args);
  assert_int_equal(run.status, 0);
  assert_contains(run.out, "kind              sizes");
  assert_contains(run.out, "wrote /dev/null\n");
  assert_string_equal(run.err, "");

  /* cat copies the FIFO to the captured stdout; vsim-calibrate's stdout
   * and --out are both the FIFO */
  tu_temp_dir(dir, sizeof dir);
  snprintf(fifo, sizeof fifo, "%s/topo.ini", dir);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  {
    const char *const sh[] = {"-c",
                              "cat \"$1\" & \"$0\" --fit " CAL_DATA
                              "h100-like.csv --out "
                              "\"$1\" >\"$1\"; s=$?; wait; exit $s",
                              VSIM_CALIBRATE_BIN, fifo, NULL};
    tu_run_program(&run, "/bin/sh", sh);
  }
  assert_file_alone_on_stdout(fifo);
  tu_remove_dir(dir);
}

/* Times equal at every size fit a slope of rounding noise, which as a
 * rate is absurd (3 us flat gave 9.9e15 GB/s of d2d_kernel and 5.0e15
 * GB/s of p2p, and vsim timed HBM traffic 50 times faster): over 100 TB/s
 * it is no rate, and the curve is refused as one whose time does not grow
 * with size. A d2h_pinned curve whose time falls with size is refused as
 * well: vsim times device-to-host copies with it (it wrote 0 GB/s, and
 * vsim's offload runs then failed in the engine). */
static void test_flat_transfers_refused(void **state)
{
  static const struct {
    const char *kind;
    double t0, per_size;
  } flat[] = {{"d2d_kernel", 3e-6, 0}, {"p2p", 3e-6, 0},
              {"d2h_pinned", 1e-5, -1e-7}};
  char raw[128], out[128], text[4096], want[96];
  const char *args[] = {"--fit", raw, "--out", out, NULL};
  (void)state;
  for (size_t i = 0; i < sizeof flat / sizeof flat[0]; i++) {
    size_t used = (size_t)snprintf(text, sizeof text,
                                   "kind,bytes,sample,seconds\n");
    for (int k = 0; k < 6; k++)
      used += (size_t)snprintf(text + used, sizeof text - used,
                               "%s,%d,0,%.17g\n", flat[i].kind, 4 << (2 * k),
                               flat[i].t0 + k * flat[i].per_size);
    write_raw(text, raw, sizeof raw, out, sizeof out);
    run_cal(&run, args);
    assert_int_equal(run.status, 1);
    snprintf(want, sizeof want, "kind %s: the fitted time does not grow",
             flat[i].kind);
    assert_contains(run.err, want);
    assert_true(access(out, F_OK) != 0);
    unlink(raw);
  }
}

/* Times written in microseconds (a PCIe curve of 5 us + bytes / 25 GB/s,
 * times x 1e6): the fitted rate, 25 kB/s, is under vsim's 1 MB/s, and the
 * refusal says so and asks about the unit, rather than that the time does
 * not grow (hunt). */
static void test_times_in_microseconds_named(void **state)
{
  char raw[128], out[128], text[4096];
  const char *args[] = {"--fit", raw, "--out", out, NULL};
  size_t used = (size_t)snprintf(text, sizeof text,
                                 "kind,bytes,sample,seconds\n");
  (void)state;
  for (int k = 0; k < 8; k++) {
    double bytes = (double)(1 << (3 * k + 4));
    used += (size_t)snprintf(text + used, sizeof text - used,
                             "h2d_pinned,%.0f,0,%.17g\n", bytes,
                             (5e-6 + bytes / 25e9) * 1e6);
  }
  write_raw(text, raw, sizeof raw, out, sizeof out);
  run_cal(&run, args);
  assert_int_equal(run.status, 1);
  assert_contains(run.err, "kind h2d_pinned: the fitted rate, 2.5e+04 B/s, is "
                           "under 1 MB/s (are the times in seconds?), so vsim "
                           "cannot time transfers with it");
  assert_true(access(out, F_OK) != 0);
  unlink(raw);
}

/* One kind too short to fit (the p2p rows of bad-too-few.csv next to the
 * other kinds of h100-like.csv): --fit refuses the file; --fit --partial
 * leaves p2p out with a warning and a comment, fits the rest, and vsim
 * reads the result with its nominal NVLink figures. */
static void test_partial_fit_leaves_a_kind_out(void **state)
{
  char raw[128], out[128], *text, *good, *bad, *ini;
  size_t used = 0, cap;
  const char *strict[] = {"--fit", raw, "--out", out, NULL};
  const char *partial[] = {"--fit", raw, "--partial", "--out", out, NULL};
  const char *partial_measure[] = {"--partial", NULL};
  (void)state;
  assert_non_null(good = tu_read_file(CAL_DATA "h100-like.csv"));
  assert_non_null(bad = tu_read_file(CAL_DATA "bad-too-few.csv"));
  cap = strlen(good) + strlen(bad) + 1;
  assert_non_null(text = malloc(cap));
  for (char *line = strtok(good, "\n"); line; line = strtok(NULL, "\n"))
    if (strncmp(line, "p2p,", 4) != 0)
      used += (size_t)snprintf(text + used, cap - used, "%s\n", line);
  for (char *line = strtok(bad, "\n"); line; line = strtok(NULL, "\n"))
    if (strncmp(line, "p2p,", 4) == 0)
      used += (size_t)snprintf(text + used, cap - used, "%s\n", line);
  write_raw(text, raw, sizeof raw, out, sizeof out);
  run_cal(&run, strict);
  assert_int_equal(run.status, 1);
  assert_contains(run.err, "kind p2p: too few points: 3 distinct sizes");
  assert_true(access(out, F_OK) != 0);

  run_cal(&run, partial);
  if (run.status != 0)
    fail_msg("--partial exited %d: %s", run.status, run.err);
  assert_contains(run.err, "warning: ");
  assert_contains(run.err, "kind p2p left out: too few points");
  assert_non_null(ini = tu_read_file(out));
  assert_contains(ini, "; p2p not calibrated: too few points");
  assert_null(strstr(ini, "p2p_bandwidth"));
  assert_contains(ini, "d2d_kernel_bandwidth = ");
  free(ini);
  {
    const char *args[] = {"show", "tests/data/gpt-small.ini", "--topology", out, NULL};
    tu_run_vsim(&run, args);
    if (run.status != 0)
      fail_msg("vsim refused the partial topology: %s", run.err);
  }
  run_cal(&run, partial_measure); /* measuring always leaves such kinds out */
  assert_int_equal(run.status, 2);
  assert_contains(run.err, "--partial goes with --fit");
  free(text);
  free(good);
  free(bad);
  unlink(raw);
  unlink(out);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_help),
      cmocka_unit_test(test_usage_errors),
      cmocka_unit_test(test_measure_without_cuda),
      cmocka_unit_test(test_bad_csvs),
      cmocka_unit_test(test_fit_refuses_repeated_samples),
      cmocka_unit_test(test_option_rules),
      cmocka_unit_test(test_outputs_checked_first),
      cmocka_unit_test(test_not_a_raw_csv),
      cmocka_unit_test(test_poor_fit_warns),
      cmocka_unit_test(test_scattered_size_named_not_blamed),
      cmocka_unit_test(test_noise_free_knee_fitted),
      cmocka_unit_test(test_flat_curves),
      cmocka_unit_test(test_context_over_memory_keeps_nominal),
      cmocka_unit_test(test_file_size_limit),
      cmocka_unit_test(test_fit_fixture_and_use_it),
      cmocka_unit_test(test_gemm_table_fitted_and_used),
      cmocka_unit_test(test_gemm_rows_refused),
      cmocka_unit_test(test_gemm_shape_over_peak_refused),
      cmocka_unit_test(test_deepbench_v100_fit),
      cmocka_unit_test(test_refused_fit_is_not_written),
      cmocka_unit_test(test_flat_transfers_refused),
      cmocka_unit_test(test_times_in_microseconds_named),
      cmocka_unit_test(test_out_to_stdout_is_the_file_alone),
      cmocka_unit_test(test_fit_without_out_only_prints),
      cmocka_unit_test(test_summary_on_stderr_only_when_out_is_stdout),
      cmocka_unit_test(test_partial_leaving_all_out_says_why),
      cmocka_unit_test(test_long_raw_path_comment_fits),
      cmocka_unit_test(test_partial_fit_leaves_a_kind_out),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

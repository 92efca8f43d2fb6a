/* fuzz_calcsv.c - libFuzzer target: a calibration's raw samples CSV through
 * `vsim-calibrate --fit`'s steps: vs_raw_read, then per kind vs_fit_points
 * and vs_fit_run, and the fitted kinds written by vs_cal_out_write (which
 * loads what it wrote with vs_topology_load before keeping it).
 *
 * The gemm rows go through vs_gemm_fit_run on the base topology.
 *
 * Input: the CSV text, read by path from an in-memory file. What is read
 * must also write (vs_raw_write) and read back to the same samples, and a
 * fit must predict a finite time at both ends of its sizes; either failing
 * aborts. Fits are skipped over MAX_ROWS samples, and the breakpoints
 * searched (as --max-breakpoints sets them) fall with the sizes of a kind,
 * where one input would otherwise take seconds. */
#define _DEFAULT_SOURCE /* mkdtemp */
#include "calini.h"
#include "fit.h"
#include "fuzz.h"
#include "gemmfit.h"
#include "rawcsv.h"

#include <gsl/gsl_errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_ROWS 4000
#define MAX_POINTS_2_BREAKS 12   /* two breakpoints: O(sizes^2) fits */
#define MAX_POINTS_1_BREAK 24    /* one: O(sizes) fits */

static fz_file csv_file;
static vs_topology base_topology;  /* nominal, without calibration */
static char out_dir[64];           /* where written files go, then go away */

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void remove_out_dir(void)
{
  rmdir(out_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  vs_error err;
  (void)argc;
  (void)argv;
  gsl_set_error_handler_off(); /* as vsim-calibrate's main */
  fz_file_open(&csv_file, "raw.csv");
  snprintf(out_dir, sizeof out_dir, "/tmp/vsim-fuzz-XXXXXX");
  vs_error_clear(&err);
  if (!mkdtemp(out_dir) ||
      vs_topology_load_nominal(&base_topology, NULL, NULL, 0, &err)) {
    fprintf(stderr, "fuzz_calcsv: cannot start: %s\n",
            err.msg[0] ? err.msg : "mkdtemp failed");
    abort();
  }
  memset(base_topology.cal, 0, sizeof base_topology.cal);
  atexit(remove_out_dir);
  return 0;
}

/* Fails (aborts) unless a and b hold the same samples, seconds to the 10
 * significant digits vs_raw_write keeps. */
static void check_same(const vs_raw *a, const vs_raw *b)
{
  for (int k = 0; k < VS_RAW_N_KINDS; k++) {
    const vs_raw_series *x = &a->kinds[k], *y = &b->kinds[k];
    bool same = x->n == y->n;
    for (size_t i = 0; same && i < x->n; i++)
      same = x->bytes[i] == y->bytes[i] && x->sample[i] == y->sample[i] &&
             fabs(x->seconds[i] - y->seconds[i]) <= 1e-9 * x->seconds[i] &&
             (!x->shape ||
              (y->shape && memcmp(&x->shape[i], &y->shape[i],
                                  sizeof x->shape[i]) == 0));
    if (!same) {
      fprintf(stderr, "fuzz_calcsv: kind %s reads back different from what "
              "vs_raw_write wrote\n", vs_raw_kind_name(k));
      abort();
    }
  }
}

/* vs_raw_write, then vs_raw_read of what it wrote. */
static void round_trip(const vs_raw *raw)
{
  char path[96];
  vs_raw back;
  vs_error err;
  snprintf(path, sizeof path, "%s/raw.csv", out_dir);
  vs_raw_init(&back);
  vs_error_clear(&err);
  if (vs_raw_write(raw, path, &err) || vs_raw_read(&back, path, &err)) {
    fprintf(stderr, "fuzz_calcsv: samples read do not write and read back: "
            "%s\n", err.msg);
    abort();
  }
  check_same(raw, &back);
  vs_raw_fini(&back);
  unlink(path);
}

/* Fits one kind's samples into *fit; false when they do not fit. */
static bool fit_kind(const vs_raw_series *s, vs_fit *fit)
{
  vs_fit_options opt = vs_fit_default_options();
  vs_fit_point *pts = NULL;
  size_t n = 0;
  double lo, hi;
  vs_error err;
  bool ok;

  vs_error_clear(&err);
  ok = vs_fit_points(s->bytes, s->seconds, s->n, opt.sigma_floor, &pts, &n,
                     &err) == 0;
  if (ok) {
    opt.max_breaks =
        n <= MAX_POINTS_2_BREAKS ? 2 : n <= MAX_POINTS_1_BREAK ? 1 : 0;
    ok = vs_fit_run(pts, n, &opt, fit, &err) == 0;
  }
  free(pts);
  if (ok && (vs_fit_predict(fit, fit->min_bytes, &lo, &err) ||
             vs_fit_predict(fit, fit->max_bytes, &hi, &err) || !isfinite(lo) ||
             !isfinite(hi))) {
    fprintf(stderr, "fuzz_calcsv: a fit does not predict a finite time at "
            "its ends: %s\n", err.msg);
    abort();
  }
  return ok;
}

/* Fits every kind and writes those that fit, as `--fit --partial` does. */
static void fit_and_write(const vs_raw *raw)
{
  vs_cal_out *out = calloc(1, sizeof *out);
  char path[96];
  bool any = false;
  vs_error err;

  if (!out)
    abort();
  out->topo = base_topology;
  for (int k = 0; k < VS_CAL_N_KINDS; k++) {
    vs_fit fit;
    if (raw->kinds[k].n > 0 && fit_kind(&raw->kinds[k], &fit))
      any |= vs_cal_out_add(out, k, &fit);
  }
  snprintf(path, sizeof path, "%s/calibrated.ini", out_dir);
  vs_error_clear(&err);
  if (any && vs_cal_out_write(out, path, &err) == 0)
    unlink(path);
  free(out);
}

/* The GEMM fit of the gemm samples on the base topology (an H100):
 * refused or finite, never a crash. */
static void fit_gemm(const vs_raw *raw)
{
  const vs_raw_series *s = &raw->kinds[VS_RAW_GEMM];
  vs_gemm_sample *smp;
  vs_gemm_fit fit;
  vs_error err;
  if (s->n == 0 || !(smp = malloc(s->n * sizeof *smp)))
    return;
  for (size_t i = 0; i < s->n; i++)
    smp[i] = (vs_gemm_sample){s->shape[i], s->seconds[i]};
  vs_error_clear(&err);
  if (vs_gemm_fit_run(smp, s->n, base_topology.peak_tflops_bf16 * 1e12,
                      base_topology.sms, base_topology.gemm_k_overhead, &fit,
                      &err) == 0 &&
      (!isfinite(fit.full_efficiency) || !(fit.full_efficiency > 0) ||
       !isfinite(fit.floor) || !isfinite(fit.rms_rel_error))) {
    fprintf(stderr, "fuzz_calcsv: a GEMM fit is not finite\n");
    abort();
  }
  free(smp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  vs_raw raw;
  vs_error err;
  size_t rows = 0;

  vs_raw_init(&raw);
  vs_error_clear(&err);
  if (vs_raw_read(&raw, fz_file_put(&csv_file, data, size), &err) == 0) {
    for (int k = 0; k < VS_RAW_N_KINDS; k++)
      rows += raw.kinds[k].n;
    round_trip(&raw);
    if (rows <= MAX_ROWS) {
      fit_and_write(&raw);
      fit_gemm(&raw);
    }
  }
  vs_raw_fini(&raw);
  return 0;
}

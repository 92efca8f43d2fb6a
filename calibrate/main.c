/* main.c - vsim-calibrate: measure this machine's transfer and allocation
 * costs (CUDA builds), fit them, and write a topology vsim reads.
 *
 *   vsim-calibrate [--out FILE.ini] [--raw FILE.csv] [options]  measure
 *   vsim-calibrate --fit RAW.csv [--out FILE.ini] [options]     fit only
 *
 * Exit status: 0 done, 1 bad input or a failed measurement, 2 bad usage. */
#include "calini.h"
#include "csvout.h"
#include "fit.h"
#include "gemmfit.h"
#include "measure.h"
#include "rawcsv.h"
#include "topology.h"
#include "units.h"

#include <gsl/gsl_errno.h>

#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* clang-format off */
static const char usage_text[] =
    "usage: vsim-calibrate [--out FILE.ini] [--raw FILE.csv] [options]\n"
    "       vsim-calibrate --fit RAW.csv [--out FILE.ini] [options]\n"
    "\n"
    "Measures this machine's GPU transfer and allocation costs with CUDA,\n"
    "fits t = latency + bytes / bandwidth per kind with GSL, and writes a\n"
    "topology file whose [calibration] section vsim uses over the nominal\n"
    "figures (vsim run W.ini --topology FILE.ini).\n"
    "\n"
    "Kinds: h2d_pinned, d2h_pinned, h2d_pageable, d2h_pageable,\n"
    "d2d_copy_engine, d2d_kernel, p2p (two or more GPUs), malloc, free,\n"
    "host_alloc, and context (CUDA context creation: size and time).\n"
    "gemm rows (one GEMM launch each, bf16 unless --gemm-dtype says, the\n"
    "columns m, n, k and batch giving its shape; measured by a cuBLAS sweep\n"
    "where the toolkit has cuBLAS) fit vsim's GEMM model on --base's peak\n"
    "for that dtype and its SM count: compute_efficiency and its shape,\n"
    "gemm_k_overhead and kernel_floor.\n"
    "\n"
    "Modes:\n"
    "  (no --fit)          measure on the GPU (needs a CUDA build), then fit\n"
    "  --fit RAW.csv       fit samples measured earlier (no GPU needed); RAW.csv\n"
    "                      has the columns kind,bytes,sample,seconds\n"
    "\n"
    "Options:\n"
    "  --out FILE.ini      write the calibrated topology here (atomically);\n"
    "                      without it the fits are only printed\n"
    "  --raw FILE.csv      when measuring, also write every timed sample here\n"
    "                      (kind,bytes,sample,seconds), for --fit later\n"
    "  --base TOPO.ini     nominal values the measurement cannot give (peak\n"
    "                      TFLOP/s, network, price) come from this topology;\n"
    "                      default: vsim's built-in h100-sxm-8x\n"
    "  --max-breakpoints N fit at most N breakpoints per kind, 0-2 (default 2);\n"
    "                      the information criterion picks how many are used\n"
    "  --partial           with --fit: leave out, with a warning, a kind that\n"
    "                      cannot be fitted (too few sizes) instead of failing;\n"
    "                      vsim then uses the nominal figure for it. Measuring\n"
    "                      always does this\n"
    "  --gemm-dtype D      with --fit: the gemm rows timed D GEMMs, bf16\n"
    "                      (default) or fp16, fitted on that peak (a\n"
    "                      published fp16 table, a GPU without bf16)\n"
    "  --device N          CUDA device to measure (default 0); p2p copies go\n"
    "                      to device N+1\n"
    "  --samples N         timed samples per size (default 25, at least 3)\n"
    "  --warmup N          untimed runs per size first (default 3)\n"
    "  --max-size SIZE     largest size of the sweep (default 1GiB, at least\n"
    "                      256MiB, so that at least 5 sizes are 64MiB or more);\n"
    "                      sizes are powers of two from 4 B and their midpoints\n"
    "  --seed N            seed of the shuffled size order (default 1)\n"
    "  --time-limit SECS   start no new size after SECS seconds of measuring\n"
    "                      (default 0: none); what was measured by then is\n"
    "                      still written to --raw and fitted. SIGINT or\n"
    "                      SIGTERM does the same at once (a second one\n"
    "                      aborts); a kind cut short below 4 sizes is left\n"
    "                      out of the topology with a warning\n"
    "  --verbose           measuring progress on stderr (with --fit: none)\n"
    "  -h, --help          this text\n"
    "\n"
    "Each option may be given once. With --fit, the measuring options\n"
    "(--device, --samples, --warmup, --max-size, --seed, --time-limit, --raw)\n"
    "are refused: nothing is measured.\n"
    "\n"
    "If a CUDA call fails while measuring, the samples taken before it are\n"
    "still written to --raw, and no topology is written.\n"
    "\n"
    "Exit status: 0 done, 1 bad input or a failed measurement, 2 bad usage.\n";
/* clang-format on */

/* The dtype of the GEMMs a raw file's gemm rows timed, whose tensor-core
 * peak in the base topology they are fitted on (--gemm-dtype). */
typedef enum { GEMM_BF16, GEMM_FP16, GEMM_N_DTYPES } gemm_dtype;

static const char *const gemm_dtype_names[GEMM_N_DTYPES] = {"bf16", "fp16"};

typedef struct args {
  const char *out;               /* --out */
  const char *raw;               /* --raw */
  const char *fit;               /* --fit */
  const char *base;              /* --base, NULL = built-in */
  int max_breaks;                /* --max-breakpoints */
  bool partial;                  /* --partial */
  gemm_dtype gemm;               /* --gemm-dtype */
  vs_measure_opts m;             /* measuring options */
} args;

/* The options. Each may be given once: a second one would silently
 * override the first. The measuring ones are refused with --fit, which
 * measures nothing, rather than silently ignored. */
enum {
  O_OUT,
  O_RAW,
  O_FIT,
  O_BASE,
  O_BREAKS,
  O_PARTIAL,
  O_GEMM_DTYPE,
  O_DEVICE,
  O_SAMPLES,
  O_WARMUP,
  O_MAX_SIZE,
  O_SEED,
  O_TIME_LIMIT,
  O_VERBOSE,
  N_OPTS
};

/* Whether an option takes the next argument as its value. */
typedef enum { FLAG, VALUED } opt_arg;
/* When an option is used: in both modes, or only when measuring. */
typedef enum { ANY_MODE, MEASURING } opt_mode;

static const struct option {
  const char *name;              /* "--out" */
  opt_arg arg;                   /* VALUED: takes the next argument */
  opt_mode mode;                 /* MEASURING: only used when measuring */
} options[N_OPTS] = {
    [O_OUT] = {"--out", VALUED, ANY_MODE},
    /* refused with --fit by its own rule */
    [O_RAW] = {"--raw", VALUED, ANY_MODE},
    [O_FIT] = {"--fit", VALUED, ANY_MODE},
    [O_BASE] = {"--base", VALUED, ANY_MODE},
    [O_BREAKS] = {"--max-breakpoints", VALUED, ANY_MODE},
    [O_PARTIAL] = {"--partial", FLAG, ANY_MODE},
    /* --fit only: its rule */
    [O_GEMM_DTYPE] = {"--gemm-dtype", VALUED, ANY_MODE},
    [O_DEVICE] = {"--device", VALUED, MEASURING},
    [O_SAMPLES] = {"--samples", VALUED, MEASURING},
    [O_WARMUP] = {"--warmup", VALUED, MEASURING},
    [O_MAX_SIZE] = {"--max-size", VALUED, MEASURING},
    [O_SEED] = {"--seed", VALUED, MEASURING},
    [O_TIME_LIMIT] = {"--time-limit", VALUED, MEASURING},
    /* harmless with --fit (there is no progress to report), and scripts
     * may pass it to both modes */
    [O_VERBOSE] = {"--verbose", FLAG, ANY_MODE},
};

static int usage_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

static int usage_error(const char *fmt, ...)
{
  va_list ap;
  fputs("vsim-calibrate: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputs("\nTry 'vsim-calibrate --help'.\n", stderr);
  return 2;
}

/* Parses a count flag's value into *out within [lo, hi]. */
static int count_arg(const char *flag, const char *text, uint64_t lo,
                     uint64_t hi, uint64_t *out)
{
  const char *why = NULL;
  if (vs_parse_count(text, out, &why) || *out < lo || *out > hi)
    return usage_error("%s %s: expected a whole number from %llu to %llu",
                       flag, text, (unsigned long long)lo,
                       (unsigned long long)hi);
  return 0;
}

/* Whether paths a and b (b may be NULL) name one file: the same inode when
 * both exist (links and other spellings included), else the same text. */
static bool same_file(const char *a, const char *b)
{
  struct stat sa, sb;
  if (!b)
    return false;
  if (stat(a, &sa) == 0 && stat(b, &sb) == 0)
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  return strcmp(a, b) == 0;
}

/* Whether path names the file standard output writes to: the inode fstat
 * gives for STDOUT_FILENO (/dev/stdout, /proc/self/fd/1, or the file, FIFO
 * or device stdout is redirected to); where either cannot be examined,
 * whether path is spelled /dev/stdout. Any other device or FIFO (say
 * /dev/null) is not: stdout stays free for the fits' summary. */
static bool is_stdout(const char *path)
{
  struct stat sp, so;
  if (stat(path, &sp) == 0 && fstat(STDOUT_FILENO, &so) == 0)
    return sp.st_dev == so.st_dev && sp.st_ino == so.st_ino;
  return strcmp(path, "/dev/stdout") == 0;
}

/* Stores option o's value val (NULL for a flag) in a; 0 or 2 (reported). */
static int set_option(args *a, int o, const char *val)
{
  uint64_t v = 0;
  int rc = 0;
  const char *why = NULL, *f = options[o].name;
  switch (o) {
  case O_OUT: a->out = val; break;
  case O_RAW: a->raw = val; break;
  case O_FIT:
  case O_BASE:
    if (*val == '\0')
      return usage_error("%s needs a file name, got ''", f);
    *(o == O_FIT ? &a->fit : &a->base) = val;
    break;
  case O_PARTIAL: a->partial = true; break;
  case O_GEMM_DTYPE:
    if (strcmp(val, "bf16") && strcmp(val, "fp16"))
      return usage_error("%s %s: expected bf16 or fp16", f, val);
    a->gemm = strcmp(val, "fp16") == 0 ? GEMM_FP16 : GEMM_BF16;
    break;
  case O_VERBOSE: a->m.verbose = true; break;
  case O_BREAKS:
    if (!(rc = count_arg(f, val, 0, VS_FIT_MAX_BREAKS, &v)))
      a->max_breaks = (int)v;
    break;
  case O_DEVICE:
    if (!(rc = count_arg(f, val, 0, 1023, &v)))
      a->m.device = (int)v;
    break;
  case O_SAMPLES:
    if (!(rc = count_arg(f, val, 3, 100000, &v)))
      a->m.samples = (unsigned)v;
    break;
  case O_WARMUP:
    if (!(rc = count_arg(f, val, 0, 1000, &v)))
      a->m.warmup = (unsigned)v;
    break;
  case O_TIME_LIMIT:
    if (!(rc = count_arg(f, val, 0, 86400, &v)))
      a->m.time_limit_s = (unsigned)v;
    break;
  case O_SEED:
    if (!(rc = count_arg(f, val, 0, 4294967295u, &v)))
      a->m.seed = (unsigned)v;
    break;
  case O_MAX_SIZE:
    if (vs_parse_size(val, &v, &why) || v < (256ull << 20) || v > (16ull << 30))
      return usage_error("--max-size %s: expected a size from 256MiB to 16GiB", val);
    a->m.max_bytes = v;
    break;
  }
  return rc;
}

/* Whether the output `path` of option (NULL: not given) can be written,
 * checked before anything is measured or fitted: 0, or 1 or 2 (a usage
 * error), reported. */
static int check_path(const char *option, const char *path)
{
  vs_error err;
  vs_error_clear(&err);
  if (!path || vs_csv_check_path(option, path, &err) == 0)
    return 0;
  if (err.code == VS_EUSAGE)
    return usage_error("%s", err.msg);
  fprintf(stderr, "vsim-calibrate: %s\n", err.msg);
  return 1;
}

/* The rules between options, once all are read; 0, 1 (an output that
 * cannot be written) or 2 (reported). */
static int check_options(const args *a, const bool *seen)
{
  int rc;
  for (int o = 0; a->fit && o < N_OPTS; o++) {
    if (seen[o] && options[o].mode == MEASURING)
      return usage_error("%s applies to measuring; with --fit nothing is "
                         "measured", options[o].name);
  }
  if (a->partial && !a->fit)
    return usage_error("%s", "--partial goes with --fit (measuring always "
                             "leaves out a kind it cannot fit, with a warning)");
  if (seen[O_GEMM_DTYPE] && !a->fit)
    return usage_error("%s", "--gemm-dtype names the dtype of --fit's gemm "
                             "rows; measuring times bf16 GEMMs");
  if (a->fit && a->raw)
    return usage_error("%s", "--raw names where measured samples go; with --fit "
                             "there is nothing measured");
  if (a->out && (same_file(a->out, a->fit) || same_file(a->out, a->raw) ||
                 same_file(a->out, a->base)))
    return usage_error("--out %s names an input or --raw file; writing it "
                       "would destroy that file", a->out);
  rc = check_path("--out", a->out);
  return rc ? rc : check_path("--raw", a->raw);
}

static int find_option(const char *name)
{
  for (int o = 0; o < N_OPTS; o++)
    if (strcmp(name, options[o].name) == 0)
      return o;
  return -1;
}

/* Fills a from argv; 0, 2 (usage error, reported) or -1 (--help shown). A
 * value never starts with "--": `--out --verbose` forgot the file name, and
 * taking the next option as one would write a file called "--verbose". */
static int parse_args(int argc, char **argv, args *a)
{
  bool seen[N_OPTS] = {false};
  memset(a, 0, sizeof *a);
  a->max_breaks = VS_FIT_MAX_BREAKS;
  a->m = (vs_measure_opts){.samples = 25, .warmup = 3, .max_bytes = 1ull << 30,
                           .seed = 1};
  for (int i = 1; i < argc; i++) {
    const char *f = argv[i], *val = NULL;
    int o = find_option(f), rc;
    if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0) {
      fputs(usage_text, stdout);
      return -1;
    }
    if (o < 0)
      return strncmp(f, "--", 2) == 0 ? usage_error("unknown option '%s'", f)
                                      : usage_error("unexpected argument '%s'", f);
    if (seen[o])
      return usage_error("%s given twice", f);
    seen[o] = true;
    if (options[o].arg == VALUED &&
        (val = i + 1 < argc ? argv[++i] : NULL) == NULL)
      return usage_error("%s needs a value", f);
    if (val && strncmp(val, "--", 2) == 0)
      return usage_error("%s needs a value (got the option '%s')", f, val);
    if ((rc = set_option(a, o, val)))
      return rc;
  }
  return check_options(a, seen);
}

/* Says on stderr, and in a comment of the file, that kind k's fit is poor
 * (a median it misses by more than two standard errors off by over
 * VS_FIT_POOR): written without a word, it would time vsim's runs as if
 * it were measured well. r2 is not the judge: a flat curve (cudaMalloc at
 * small sizes) fitted perfectly has an r2 near 0. Sizes off by as much
 * whose own samples disagree too much to say so (two scattered samples:
 * a sparse or cut-short run) are named instead, not blamed on the fit. */
static void warn_poor_fit(vs_cal_out *out, const char *source, int k,
                          const vs_fit *fit)
{
  double worst = fit->judged_rel_error;
  if (fit->n_unsure) {
    fprintf(stderr,
            "vsim-calibrate: warning: %s: kind %s: %zu size(s) off "
            "the fit by over %g%% have samples too scattered to judge it "
            "(within two standard errors of their median): measure them "
            "again with more samples\n",
            source, vs_cal_kind_name(k), fit->n_unsure, 100 * VS_FIT_POOR);
    vs_cal_out_comment(out, "%s: %zu size(s) too scattered to judge the fit",
                       vs_cal_kind_name(k), fit->n_unsure);
  }
  if (worst <= VS_FIT_POOR)
    return; /* NaN falls through: it warns too */
  fprintf(stderr,
          "vsim-calibrate: warning: %s: kind %s fits poorly (r2 %.3g, "
          "largest relative error %.3g%% at a size it misses by more than "
          "two standard errors; a good fit's errors are under "
          "%g%%); vsim will use this fit anyway: check the "
          "samples or measure again (without the kind's rows, vsim uses the "
          "nominal figure)\n",
          source, vs_cal_kind_name(k), fit->r2, 100 * worst, 100 * VS_FIT_POOR);
  vs_cal_out_comment(out,
                     "%s fits poorly (r2 %.3g, largest relative error "
                     "%.3g%% where it misses by over two standard errors); "
                     "vsim uses it anyway",
                     vs_cal_kind_name(k), fit->r2, 100 * worst);
}

/* What the topology takes from a GEMM fit, and a comment saying so. */
static void use_gemm_fit(vs_cal_out *out, const vs_gemm_fit *f, gemm_dtype d,
                         FILE *report)
{
  vs_topology *t = &out->topo;
  t->compute_efficiency = f->best_efficiency;
  t->compute_efficiency_shape.n = 3;
  t->compute_efficiency_shape.values[0] = f->best.m;
  t->compute_efficiency_shape.values[1] = f->best.n;
  t->compute_efficiency_shape.values[2] = f->best.k;
  t->gemm_k_overhead = f->k_overhead;
  t->kernel_floor = f->floor;
  vs_cal_out_measured(out, "gpu", "compute_efficiency");
  vs_cal_out_measured(out, "gpu", "compute_efficiency_shape");
  if (!f->k_kept)
    vs_cal_out_measured(out, "gpu", "gemm_k_overhead");
  vs_cal_out_measured(out, "gpu", "kernel_floor");
  char line[320];
  snprintf(line, sizeof line,
           "gemm: %zu shapes, full-wave rate %.4g of the "
           "%s peak, tile overhead %.4g in k%s, %.4g us a launch; fit "
           "within %.3g%% rms (%.3g%% at most)",
           f->shapes, f->full_efficiency, gemm_dtype_names[d], f->k_overhead,
           f->k_kept ? " (the base's: fewer than 3 inner dimensions measured)"
           : f->k_overhead == 0 || f->k_overhead == VS_GEMM_FIT_K0_MAX
               ? " (at the edge of the search: check the sweep)"
               : "",
           f->floor * 1e6, 100 * f->rms_rel_error, 100 * f->max_rel_error);
  vs_cal_out_comment(out, "%s", line);
  fprintf(report, "%s\n", line);
  snprintf(line, sizeof line, "gemm: compute_efficiency %.4g as %s at "
           "%llux%llux%llu (%s)", f->best_efficiency,
           f->best_from_fit ? "fitted" : "measured",
           (unsigned long long)f->best.m, (unsigned long long)f->best.n,
           (unsigned long long)f->best.k,
           f->best_from_fit ? "the model's rate: its time is at most twice "
                              "the floor, too little work to measure one"
                            : "its median time less the floor");
  vs_cal_out_comment(out, "%s", line);
  fprintf(report, "%s\n", line);
}

/* How the samples are fitted. */
typedef struct fit_opts {
  const char *source; /* the raw file, or "measurement" */
  int max_breaks;     /* --max-breakpoints */
  bool lenient;       /* leave out, with a warning, a kind that
                         cannot be fitted (--partial) */
  gemm_dtype gemm;    /* --gemm-dtype */
} fit_opts;

/* The base topology's peak in TFLOP/s for GEMMs of dtype d. */
static double gemm_peak_tflops(const vs_topology *base, gemm_dtype d)
{
  return d == GEMM_FP16 ? base->peak_tflops_fp16 : base->peak_tflops_bf16;
}

/* VS_EINPUT when a shape of the n samples smp ran faster than peak
 * TFLOP/s (its median time under its FLOPs at the peak), which no GEMM
 * can: every shape, a wrong --base or dtype; one, that shape's times. A
 * shape 1.5x over the peak among 126 good ones was fitted into a
 * full-wave rate of 1.26 and K0 1024 and written. */
static int gemm_over_peak(const vs_gemm_sample *smp, size_t n, double peak,
                          gemm_dtype d, vs_error *e)
{
  vs_gemm_sample at;
  double share;
  int rc = vs_gemm_fit_fastest(smp, n, peak * 1e12, &at, &share, e);
  if (rc || !(share > 1.0))
    return rc;
  return vs_error_set(
      e, VS_EINPUT,
      "the GEMMs ran at up to %.3g times the base topology's "
      "peak_tflops_%s (%g): pass --base with this GPU's peak%s; if it is "
      "right, the times of %llux%llux%llu (batch %llu), median %.4g s, are "
      "wrong: no GEMM beats the peak",
      share, gemm_dtype_names[d], peak,
      d == GEMM_BF16 ? " (or --gemm-dtype fp16 for fp16 GEMMs)" : "",
      (unsigned long long)at.shape.m, (unsigned long long)at.shape.n,
      (unsigned long long)at.shape.k, (unsigned long long)at.shape.batch,
      at.seconds);
}

/* Fits the GEMM samples of s, GEMMs of dtype d, into f (e says why not). */
static int run_gemm_fit(const vs_raw_series *s, const vs_topology *base,
                        gemm_dtype d, vs_gemm_fit *f, vs_error *e)
{
  vs_gemm_sample *smp;
  double peak = gemm_peak_tflops(base, d);
  int rc;
  if (base->sms == 0)
    return vs_error_set(e, VS_EINPUT, "the base topology gives no [gpu] sms "
                        "(the SM count the GEMM model needs); pass --base "
                        "with one");
  if (!(smp = malloc(s->n * sizeof *smp)))
    return vs_error_set(e, VS_ENOMEM, "out of memory");
  for (size_t i = 0; i < s->n; i++)
    smp[i] = (vs_gemm_sample){s->shape[i], s->seconds[i]};
  rc = gemm_over_peak(smp, s->n, peak, d, e);
  if (rc == 0)
    rc = vs_gemm_fit_run(smp, s->n, peak * 1e12, base->sms,
                         base->gemm_k_overhead, f, e);
  free(smp);
  if (rc == 0 && !(f->best_efficiency <= 1.0))
    rc = vs_error_set(e, VS_EINPUT,
                      "the GEMMs ran at %.3g times the base "
                      "topology's peak_tflops_%s (%g): pass --base with "
                      "this GPU's peak%s",
                      f->best_efficiency, gemm_dtype_names[d], peak,
                      d == GEMM_BF16 ? " (or --gemm-dtype fp16 for fp16 GEMMs)"
                                     : "");
  return rc;
}

/* The GEMM samples' fit (gemmfit.h) on the base topology's peak for
 * o->gemm and its SM count, into compute_efficiency,
 * compute_efficiency_shape, gemm_k_overhead and kernel_floor; *fitted is
 * set when there were any. */
static int fit_gemm(const vs_raw *raw, const fit_opts *o, vs_cal_out *out,
                    FILE *report, bool *fitted, vs_error *err)
{
  const vs_raw_series *s = &raw->kinds[VS_RAW_GEMM];
  vs_gemm_fit f;
  vs_error e;
  int rc;
  *fitted = false;
  if (s->n == 0 || !s->shape)
    return 0;
  vs_error_clear(&e);
  rc = run_gemm_fit(s, &out->topo, o->gemm, &f, &e);
  if (rc && o->lenient && rc != VS_ENOMEM) {
    fprintf(stderr, "vsim-calibrate: warning: %s: kind gemm left out: %s\n",
            o->source, e.msg);
    vs_cal_out_comment(out, "gemm not calibrated: %s", e.msg);
    return 0;
  }
  if (rc)
    return vs_error_set(err, rc, "%s: kind gemm: %s", o->source, e.msg);
  use_gemm_fit(out, &f, o->gemm, report);
  *fitted = true;
  return 0;
}

/* Whether raw holds rows of a kind that is fitted (not only context). */
static bool raw_fitted_rows(const vs_raw *raw)
{
  for (int k = 0; k < VS_RAW_N_KINDS; k++)
    if (k != VS_RAW_CONTEXT && raw->kinds[k].n > 0)
      return true;
  return false;
}

/* Fits every kind that has samples into out; messages name o->source. A
 * kind that cannot be fitted is an error, or, when o->lenient (measuring,
 * where a kind may be cut short by --time-limit or a signal; --fit
 * --partial), a warning, and the kind is left out of the topology: vsim
 * then uses its nominal figure. */
static int fit_all(const vs_raw *raw, const fit_opts *o, vs_cal_out *out,
                   FILE *report, vs_error *err)
{
  vs_fit_options opt = vs_fit_default_options();
  size_t n_kinds = 0;
  bool gemm;
  int grc = fit_gemm(raw, o, out, report, &gemm, err);
  if (grc)
    return grc;
  n_kinds += gemm;
  opt.max_breaks = o->max_breaks;
  for (int k = 0; k < VS_CAL_N_KINDS; k++) {
    const vs_raw_series *s = &raw->kinds[k];
    vs_fit_point *pts = NULL;
    size_t n = 0;
    vs_fit fit;
    vs_error e;
    int rc;
    if (s->n == 0)
      continue;
    vs_error_clear(&e);
    rc = vs_fit_points(s->bytes, s->seconds, s->n, opt.sigma_floor, &pts, &n, &e);
    if (!rc)
      rc = vs_fit_run(pts, n, &opt, &fit, &e);
    free(pts);
    if (rc && o->lenient && rc != VS_ENOMEM) {
      fprintf(stderr, "vsim-calibrate: warning: %s: kind %s left out: %s\n",
              o->source, vs_cal_kind_name(k), e.msg);
      vs_cal_out_comment(out, "%s not calibrated: %s", vs_cal_kind_name(k), e.msg);
      continue;
    }
    if (rc)
      return vs_error_set(err, rc, "%s: kind %s: %s", o->source,
                          vs_cal_kind_name(k), e.msg);
    if (!vs_cal_out_add(out, k, &fit)) {
      /* a transfer curve vsim cannot time transfers with */
      char why[160];
      vs_cal_out_why_left_out(k, &fit, why, sizeof why);
      if (!o->lenient)
        return vs_error_set(err, VS_EINPUT,
                            "%s: kind %s: %s, so vsim cannot "
                            "time transfers with it (--partial leaves it "
                            "out)",
                            o->source, vs_cal_kind_name(k), why);
      fprintf(stderr, "vsim-calibrate: warning: %s: kind %s left out: %s\n",
              o->source, vs_cal_kind_name(k), why);
      continue;
    }
    warn_poor_fit(out, o->source, k, &fit);
    n_kinds++;
  }
  if (n_kinds == 0)
    return vs_error_set(err, VS_EINPUT,
                        "%s: no samples of a kind that is fitted "
                        "(%s)",
                        o->source,
                        raw_fitted_rows(raw) ? "each kind was left out: the "
                                               "warnings above say why"
                                             : "only context rows");
  return 0;
}

static int cmp_double(const void *pa, const void *pb)
{
  double x = *(const double *)pa, y = *(const double *)pb;
  return (x > y) - (x < y);
}

/* The context rows: the median size goes into [gpu] context_memory and the
 * median creation time into a comment. A size not below the GPU's memory
 * (memory as measured, or the base's) cannot be a context, and written it
 * would make every run out of memory; nor can 0 bytes (a context holds
 * its kernels and stacks): the nominal value is kept. */
static void use_context(const vs_raw *raw, const char *source, vs_cal_out *out)
{
  const vs_raw_series *s = &raw->kinds[VS_RAW_CONTEXT];
  double *v = s->n ? malloc(2 * s->n * sizeof *v) : NULL;
  double t, b;
  if (!v)
    return;
  memcpy(v, s->seconds, s->n * sizeof *v);
  memcpy(v + s->n, s->bytes, s->n * sizeof *v);
  qsort(v, s->n, sizeof *v, cmp_double);
  qsort(v + s->n, s->n, sizeof *v, cmp_double);
  t = v[s->n / 2];
  b = v[s->n + s->n / 2];
  free(v);
  if (!(b > 0) || b >= (double)out->topo.memory_bytes) {
    char why[96];
    if (b > 0)
      snprintf(why, sizeof why, "not below [gpu] memory (%llu bytes)",
               (unsigned long long)out->topo.memory_bytes);
    else
      snprintf(why, sizeof why, "no memory at all: a context holds some");
    fprintf(stderr, "vsim-calibrate: warning: %s: the CUDA context's measured "
            "size, %.0f bytes, is %s; keeping the nominal context_memory "
            "(%llu bytes)\n", source, b, why,
            (unsigned long long)out->topo.context_bytes);
    vs_cal_out_comment(out, "CUDA context: the measured %.0f bytes are %s; "
                       "context_memory is the nominal value", b, why);
    return;
  }
  out->topo.context_bytes = (uint64_t)b;
  vs_cal_out_measured(out, "gpu", "context_memory");
  vs_cal_out_comment(out, "CUDA context: %.0f bytes of device memory, created "
                     "in %.3g ms (medians of %zu)", b, t * 1e3, s->n);
}

/* The nominal PCIe figures vsim falls back on, from the pinned host-to-
 * device fit (the [calibration] curve itself is what vsim times with). */
static void use_pcie(vs_cal_out *out)
{
  const vs_cal_fit *c = &out->topo.cal[VS_CAL_H2D_PINNED];
  if (!out->fitted[VS_CAL_H2D_PINNED] || c->bandwidth <= 0)
    return;
  /* one line's summary: large copies' rate, small copies' latency */
  out->topo.pcie_bandwidth = c->bandwidth;
  out->topo.pcie_latency =
      c->piece_latencies.n ? c->piece_latencies.values[0] : c->latency;
  vs_cal_out_measured(out, "node", "pcie_bandwidth");
  vs_cal_out_measured(out, "node", "pcie_latency");
}

static void print_fits(const vs_cal_out *out, FILE *report)
{
  fprintf(report, "%-16s %6s %5s %5s %12s %12s %9s %10s\n", "kind",
          "sizes", "outl", "brks", "latency_us", "bandwidth", "r2",
          "max_rel_err");
  for (int k = 0; k < VS_CAL_N_KINDS; k++) {
    const vs_cal_fit *c = &out->topo.cal[k];
    const vs_fit *f = &out->fits[k];
    if (!out->fitted[k])
      continue;
    fprintf(report, "%-16s %6zu %5zu %5zu %12.4g %8.5g GB/s %9.6f %10.3g\n",
            vs_cal_kind_name(k), f->n_points, f->n_outliers, f->n_breaks,
            c->latency * 1e6, c->bandwidth / 1e9, c->r2, c->max_rel_error);
    for (size_t j = 0; j < f->n_breaks; j++)
      fprintf(report, "%-16s breakpoint at %.0f bytes\n", "", f->breaks[j]);
  }
}

static void now_text(char *buf, size_t len)
{
  time_t t = time(NULL);
  struct tm tm;
  if (!gmtime_r(&t, &tm) || !strftime(buf, len, "%Y-%m-%d %H:%M UTC", &tm))
    snprintf(buf, len, "unknown date");
}

/* Puts what the device reported over the base's nominal values. */
static void use_info(const vs_measure_info *in, vs_cal_out *out)
{
  vs_topology *t = &out->topo;
  size_t n = 0;
  for (const char *p = in->device; *p && n + 1 < sizeof t->name; p++)
    t->name[n++] = (*p == ' ' || *p == '\t' || *p == ',') ? '-' : *p;
  t->name[n] = '\0';
  if (n)
    vs_cal_out_measured(out, "gpu", "name");
  if (in->total_bytes) {
    t->memory_bytes = in->total_bytes;
    vs_cal_out_measured(out, "gpu", "memory");
  }
  if (in->hbm_peak > 0) {
    t->hbm_bandwidth = in->hbm_peak;
    vs_cal_out_measured(out, "gpu", "hbm_bandwidth");
  }
  if (in->sms > 0) { /* the GEMM model's waves (gemmfit.h) */
    t->sms = (uint64_t)in->sms;
    vs_cal_out_measured(out, "gpu", "sms");
  }
  vs_cal_out_comment(out, "measured on %s (compute capability %d.%d), driver "
                     "%s, CUDA runtime %s", in->device, in->cc_major,
                     in->cc_minor, in->driver, in->runtime);
  vs_cal_out_comment(out, "SM clock %d MHz, memory clock %d MHz, bus %d bits, "
                     "L2 %llu bytes, PCIe gen %d x%d (0 = unknown; NVML %s)",
                     in->sm_clock_mhz, in->mem_clock_mhz, in->bus_width_bits,
                     (unsigned long long)in->l2_bytes, in->pcie_gen,
                     in->pcie_width, in->nvml ? "used" : "not available");
  vs_cal_out_comment(out, "hbm_bandwidth is the theoretical peak from clock and "
                     "bus width; vsim uses the measured d2d_kernel figure");
}

static size_t raw_samples(const vs_raw *raw)
{
  size_t n = 0;
  for (int k = 0; k < VS_RAW_N_KINDS; k++)
    n += raw->kinds[k].n;
  return n;
}

/* The calibrated topology into path (--out), named in a failure's
 * message as the option's. */
static int write_out(const vs_cal_out *out, const char *path, FILE *report,
                     vs_error *err)
{
  vs_error werr;
  vs_error_clear(&werr);
  if (vs_cal_out_write(out, path, &werr))
    return vs_error_set(err, werr.code, "--out %s", werr.msg);
  fprintf(report, "wrote %s\n", path);
  return 0;
}

/* Set by the first SIGINT/SIGTERM: measuring stops between sizes, and what
 * was measured is fitted and written. A second signal ends the program. */
static volatile sig_atomic_t stop_requested;

static void on_stop_signal(int sig)
{
  stop_requested = 1;
  signal(sig, SIG_DFL);
}

static int run(const args *a, vs_error *err)
{
  /* the fits' summary, on stderr when the topology goes to stdout (--out
   * is the file stdout writes to), where it would be mixed into the file */
  FILE *report = a->out && is_stdout(a->out) ? stderr : stdout;
  vs_cal_out *out = calloc(1, sizeof *out);
  vs_raw raw;
  vs_measure_info info;
  char date[64];
  int rc;

  if (!out)
    return vs_error_set(err, VS_ENOMEM, "out of memory");
  vs_raw_init(&raw);
  memset(&info, 0, sizeof info);
  now_text(date, sizeof date);
  rc = vs_topology_load_nominal(&out->topo, a->base, NULL, 0, err);
  if (!rc) {
    /* the base's own measurements are not this run's */
    memset(out->topo.cal, 0, sizeof out->topo.cal);
    out->topo.measured = 0;
    vs_cal_out_comment(out, "Calibrated topology written by vsim-calibrate %s "
                       "on %s", VSIM_VERSION, date);
    vs_cal_out_comment(out, "nominal values from %s unless marked measured",
                       a->base ? a->base : vs_topology_default_name());
  }
  if (!rc && a->fit) {
    vs_cal_out_comment(out, "fitted from the samples in %s", a->fit);
    rc = vs_raw_read(&raw, a->fit, err);
  } else if (!rc) {
    memset(&info, 0, sizeof info);
    rc = vs_measure_run(&a->m, &raw, &info, err);
    if (!rc)
      use_info(&info, out);
    /* samples taken before a failure are still worth keeping */
    if (a->raw && raw_samples(&raw) > 0) {
      vs_error werr;
      vs_error_clear(&werr);
      if (vs_raw_write(&raw, a->raw, &werr) && !rc)
        rc = vs_error_set(err, werr.code, "--raw %s", werr.msg);
      else if (rc && werr.code == VS_OK)
        snprintf(err->msg + strlen(err->msg), sizeof err->msg - strlen(err->msg),
                 "; the %zu samples measured before it are in %s",
                 raw_samples(&raw), a->raw);
    }
  }
  if (!rc)
    rc = fit_all(&raw,
                 &(fit_opts){.source = a->fit ? a->fit : "measurement",
                             .max_breaks = a->max_breaks,
                             .lenient = !a->fit || a->partial,
                             .gemm = a->gemm},
                 out, report, err);
  if (!rc) {
    use_pcie(out);
    use_context(&raw, a->fit ? a->fit : "measurement", out);
    print_fits(out, report);
    if (a->out)
      rc = write_out(out, a->out, report, err);
  }
  vs_raw_fini(&raw);
  free(out);
  return rc;
}

/* What was printed (the fits, the help) is the output when --out is not
 * given: one that could not be written (a full disk, /dev/full, a reader
 * that went away) is an error, never exit 0. */
static int stdout_written(int code)
{
  const char *why = vs_stream_write_error(stdout);
  if (!why)
    return code;
  fprintf(stderr, "vsim-calibrate: writing to standard output failed: %s\n",
          why);
  return 1;
}

int main(int argc, char **argv)
{
  args a;
  vs_error err;
  int rc = parse_args(argc, argv, &a);

  if (rc)
    return rc < 0 ? stdout_written(0) : rc;
  gsl_set_error_handler_off();
  /* as vsim does: a signal removes the temporary output file, and past a
   * file-size limit a write fails and is reported instead of SIGXFSZ
   * ending the program; measuring then takes SIGINT/SIGTERM over */
  vs_csv_cleanup_on_signals();
  vs_error_clear(&err);
  if (!a.fit) {
    a.m.stop = &stop_requested;
    signal(SIGINT, on_stop_signal);
    signal(SIGTERM, on_stop_signal);
  }
  if (run(&a, &err)) {
    fprintf(stderr, "vsim-calibrate: %s\n", err.msg);
    return 1;
  }
  return stdout_written(0);
}

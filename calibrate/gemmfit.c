/* gemmfit.c - the GEMM model's fit (see gemmfit.h). */
#include "gemmfit.h"

#include "cost.h"

#include <gsl/gsl_errno.h>
#include <gsl/gsl_fit.h>

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static double flops_of(vs_gemm g)
{
  return 2.0 * (double)g.m * (double)g.n * (double)g.k * (double)g.batch;
}

static int cmp_sample(const void *pa, const void *pb)
{
  const vs_gemm_sample *a = pa, *b = pb;
  int c = memcmp(&a->shape, &b->shape, sizeof a->shape);
  if (c)
    return c;
  return (a->seconds > b->seconds) - (a->seconds < b->seconds);
}

/* Sorts s by shape and time and writes one median per shape into s's
 * first entries; returns how many. */
static size_t medians(vs_gemm_sample *s, size_t n)
{
  size_t out = 0;
  qsort(s, n, sizeof *s, cmp_sample);
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && memcmp(&s[j].shape, &s[i].shape, sizeof s[i].shape) == 0)
      j++;
    s[out].shape = s[i].shape;
    s[out].seconds = (j - i) % 2 ? s[i + (j - i) / 2].seconds
                                 : 0.5 * (s[i + (j - i) / 2 - 1].seconds +
                                          s[i + (j - i) / 2].seconds);
    out++;
    i = j;
  }
  return out;
}

static int check_samples(const vs_gemm_sample *s, size_t n, double peak,
                         uint64_t sms, vs_error *err)
{
  if (!(peak > 0) || !isfinite(peak) || sms == 0)
    return vs_error_set(err, VS_EINPUT, "GEMM fit: the peak FLOP/s and the SM "
                        "count must be positive");
  for (size_t i = 0; i < n; i++) {
    const vs_gemm *g = &s[i].shape;
    if (!g->m || !g->n || !g->k || !g->batch)
      return vs_error_set(err, VS_EINPUT, "GEMM fit: sample %zu has a zero "
                          "dimension", i + 1);
    if (!(s[i].seconds > 0) || !isfinite(s[i].seconds))
      return vs_error_set(err, VS_EINPUT, "GEMM fit: sample %zu's time is not "
                          "positive and finite", i + 1);
  }
  return 0;
}

/* The weighted least-squares fit of t = floor + x / E at one K0 (x the
 * FLOPs over the peak and the shape's share), relative errors weighted
 * equally; a negative floor is refitted through the origin. Its weighted
 * residual sum, or HUGE_VAL when the rate is not positive. */
static double fit_at(const vs_gemm_sample *m, size_t n, double peak,
                     uint64_t sms, double k0, double *x, double *w,
                     double *t, double *floor_s, double *inv_e)
{
  double c0, c1, c00, c01, c11, chisq;
  for (size_t i = 0; i < n; i++) {
    x[i] = flops_of(m[i].shape) /
           (peak * vs_cost_gemm_share(m[i].shape, sms, k0));
    t[i] = m[i].seconds;
    w[i] = 1.0 / (t[i] * t[i]);
  }
  if (gsl_fit_wlinear(x, 1, w, 1, t, 1, n, &c0, &c1, &c00, &c01, &c11, &chisq))
    return HUGE_VAL;
  if (c0 < 0) {
    c0 = 0;
    if (gsl_fit_wmul(x, 1, w, 1, t, 1, n, &c1, &c11, &chisq))
      return HUGE_VAL;
  }
  if (!(c1 > 0))
    return HUGE_VAL;
  *floor_s = c0;
  *inv_e = c1;
  return chisq;
}

/* The rate sample r (the reference shape's median) measured: its FLOPs
 * over the peak times its time less the fitted floor (as cost.h prices
 * it, so vsim reproduces that time), or over the whole time where the
 * floor is half of it or more (a launch-bound shape, whose remainder
 * would be mostly noise: a rate from it could pass the peak). The model's
 * E x share(best) is not used: where the fit is poor (power or clock
 * drift over a sweep) it can promise a rate the GPU never reached at that
 * shape. */
static double measured_rate(const vs_gemm_sample *r, double peak,
                            double floor_s)
{
  double t = r->seconds > 2.0 * floor_s ? r->seconds - floor_s : r->seconds;
  return flops_of(r->shape) / (peak * t);
}

/* The fit's errors and the reference shape: the measured single GEMM
 * (batch 1) the model fills best, so that no measured shape is capped
 * below the fit; VS_EINPUT when every shape is batched. */
static int summarise(const vs_gemm_sample *m, size_t n, double peak,
                      uint64_t sms, vs_gemm_fit *out)
{
  double sum = 0, best_share = 0;
  size_t best = 0;
  out->max_rel_error = 0;
  for (size_t i = 0; i < n; i++) {
    double f = flops_of(m[i].shape);
    double fit = out->floor +
                 f / (peak * out->full_efficiency *
                      vs_cost_gemm_share(m[i].shape, sms, out->k_overhead));
    double rel = fabs(fit / m[i].seconds - 1.0);
    sum += rel * rel;
    if (rel > out->max_rel_error)
      out->max_rel_error = rel;
    if (m[i].shape.batch == 1 &&
        vs_cost_gemm_share(m[i].shape, sms, out->k_overhead) > best_share) {
      best_share = vs_cost_gemm_share(m[i].shape, sms, out->k_overhead);
      best = i;
    }
  }
  out->rms_rel_error = sqrt(sum / (double)n);
  if (best_share == 0)
    return VS_EINPUT;
  out->best = m[best].shape;
  out->best_efficiency = measured_rate(&m[best], peak, out->floor);
  return 0;
}

/* Distinct inner dimensions among the n medians. */
static size_t distinct_k(const vs_gemm_sample *m, size_t n)
{
  size_t d = 0;
  for (size_t i = 0; i < n; i++) {
    size_t j = 0;
    while (j < i && m[j].shape.k != m[i].shape.k)
      j++;
    d += j == i;
  }
  return d;
}

/* The K0 on the grid whose fit leaves the smallest residual; with fewer
 * than VS_GEMM_FIT_MIN_KS inner dimensions K0 cannot be told from E and
 * stays k0_kept. */
static int search_k0(const vs_gemm_sample *m, size_t n, double peak,
                     uint64_t sms, double k0_kept, vs_gemm_fit *out,
                     vs_error *err)
{
  double *buf = malloc(3 * n * sizeof *buf), best = HUGE_VAL;
  bool search = distinct_k(m, n) >= VS_GEMM_FIT_MIN_KS;
  double lo = search ? 0 : k0_kept, hi = search ? VS_GEMM_FIT_K0_MAX : k0_kept;
  if (!buf)
    return vs_error_set(err, VS_ENOMEM, "GEMM fit: out of memory");
  out->k_kept = !search;
  for (double k0 = lo; k0 <= hi; k0 += 2.0) {
    double fl = 0, inv_e = 0;
    double r = fit_at(m, n, peak, sms, k0, buf, buf + n, buf + 2 * n, &fl,
                      &inv_e);
    if (r < best) {
      best = r;
      out->k_overhead = k0;
      out->floor = fl;
      out->full_efficiency = 1.0 / inv_e;
    }
  }
  free(buf);
  if (best == HUGE_VAL)
    return vs_error_set(err, VS_EINPUT, "GEMM fit: no fit with a positive "
                        "rate");
  return 0;
}

int vs_gemm_fit_run(const vs_gemm_sample *s, size_t n, double peak_flops,
                    uint64_t sms, double k0_kept, vs_gemm_fit *out,
                    vs_error *err)
{
  vs_gemm_sample *m;
  size_t shapes;
  int rc = check_samples(s, n, peak_flops, sms, err);
  if (rc)
    return rc;
  if (!(m = malloc((n ? n : 1) * sizeof *m)))
    return vs_error_set(err, VS_ENOMEM, "GEMM fit: out of memory");
  memcpy(m, s, n * sizeof *m);
  shapes = medians(m, n);
  if (shapes < VS_GEMM_FIT_MIN_SHAPES) {
    free(m);
    return vs_error_set(err, VS_EINPUT, "GEMM fit: %zu shapes measured, at "
                        "least %d needed", shapes, VS_GEMM_FIT_MIN_SHAPES);
  }
  memset(out, 0, sizeof *out);
  rc = search_k0(m, shapes, peak_flops, sms, k0_kept, out, err);
  if (rc == 0) {
    out->shapes = shapes;
    if (summarise(m, shapes, peak_flops, sms, out))
      rc = vs_error_set(err, VS_EINPUT, "GEMM fit: no single GEMM (batch "
                        "1) measured, whose rate compute_efficiency is");
  }
  free(m);
  return rc;
}

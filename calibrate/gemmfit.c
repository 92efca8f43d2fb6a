/* gemmfit.c - the GEMM model's fit (see gemmfit.h). */
#include "gemmfit.h"

#include "cost.h"

#include <gsl/gsl_errno.h>
#include <gsl/gsl_fit.h>

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

double vs_gemm_fit_flops(vs_gemm g)
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

int vs_gemm_fit_fastest(const vs_gemm_sample *s, size_t n, double peak_flops,
                        vs_gemm_sample *fastest, double *share, vs_error *err)
{
  vs_gemm_sample *m = malloc((n ? n : 1) * sizeof *m);
  size_t shapes;
  *share = 0;
  if (!m)
    return vs_error_set(err, VS_ENOMEM, "GEMM fit: out of memory");
  memcpy(m, s, n * sizeof *m);
  shapes = medians(m, n);
  for (size_t i = 0; i < shapes; i++) {
    double r = vs_gemm_fit_flops(m[i].shape) / (peak_flops * m[i].seconds);
    if (i == 0 || r > *share) {
      *share = r;
      *fastest = m[i];
    }
  }
  free(m);
  return 0;
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
    if (vs_gemm_fit_flops(*g) > VS_GEMM_FIT_MAX_FLOPS)
      return vs_error_set(err, VS_EINPUT,
                          "GEMM fit: sample %zu is %.3g "
                          "FLOPs, over the %.0e a timed GEMM can be",
                          i + 1, vs_gemm_fit_flops(*g), VS_GEMM_FIT_MAX_FLOPS);
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
    x[i] = vs_gemm_fit_flops(m[i].shape) /
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

/* The rate at the reference shape r (its median): its FLOPs over the
 * peak times its time less the fitted floor, as cost.h prices it, so
 * that vsim reproduces that time. The model's E x share(r) is not used
 * where r's time is more than twice the floor: where the fit is poor
 * (power or clock drift over a sweep) it can promise a rate the GPU never
 * reached at that shape. A launch-bound r (its time at most twice the
 * floor, so that the rest is mostly noise, and could pass the peak) takes
 * the model's rate, fitted over every shape (*from_fit); its time over
 * the whole time would make vsim price r at the floor plus about that
 * time, up to twice what it measured. */
static double reference_rate(const vs_gemm_sample *r, double peak,
                             uint64_t sms, const vs_gemm_fit *fit,
                             bool *from_fit)
{
  *from_fit = !(r->seconds > 2.0 * fit->floor);
  if (*from_fit)
    return fit->full_efficiency *
           vs_cost_gemm_share(r->shape, sms, fit->k_overhead);
  return vs_gemm_fit_flops(r->shape) / (peak * (r->seconds - fit->floor));
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
    double f = vs_gemm_fit_flops(m[i].shape);
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
  out->best_efficiency =
      reference_rate(&m[best], peak, sms, out, &out->best_from_fit);
  return 0;
}

static int cmp_u64(const void *pa, const void *pb)
{
  uint64_t x = *(const uint64_t *)pa, y = *(const uint64_t *)pb;
  return (x > y) - (x < y);
}

/* How many distinct values the n keys take (sorting them). */
static size_t distinct(uint64_t *keys, size_t n)
{
  size_t d = n > 0;
  qsort(keys, n, sizeof *keys, cmp_u64);
  for (size_t i = 1; i < n; i++)
    d += keys[i] != keys[i - 1];
  return d;
}

/* Whether the n medians tell K0 from E: at least VS_GEMM_FIT_MIN_KS
 * inner dimensions (keys: room for n). */
static bool k0_fits(const vs_gemm_sample *m, size_t n, uint64_t *keys)
{
  for (size_t i = 0; i < n; i++)
    keys[i] = m[i].shape.k;
  return distinct(keys, n) >= VS_GEMM_FIT_MIN_KS;
}

/* Whether the n medians hold two outer shapes (m, n, batch). At one, a
 * GEMM's time is floor + c (k + K0) with c fixed, in which the floor and
 * c K0 are one intercept (a sweep of k at 4096 x 4096 fitted a floor of
 * 1.1 us and K0 80 to a truth of 5 us and 0, within 1e-10). */
static bool outer_shapes_vary(const vs_gemm_sample *m, size_t n)
{
  for (size_t i = 1; i < n; i++)
    if (m[i].shape.m != m[0].shape.m || m[i].shape.n != m[0].shape.n ||
        m[i].shape.batch != m[0].shape.batch)
      return true;
  return false;
}

/* The K0 on the grid whose fit leaves the smallest residual; with fewer
 * than VS_GEMM_FIT_MIN_KS inner dimensions K0 cannot be told from E and
 * stays k0_kept. */
static int search_k0(const vs_gemm_sample *m, size_t n, double peak,
                     uint64_t sms, double k0_kept, vs_gemm_fit *out,
                     vs_error *err)
{
  double *buf = malloc(3 * n * sizeof *buf), best = HUGE_VAL;
  uint64_t *keys = malloc(n * sizeof *keys);
  bool oom = !buf || !keys, search = !oom && k0_fits(m, n, keys);
  double lo = search ? 0 : k0_kept, hi = search ? VS_GEMM_FIT_K0_MAX : k0_kept;
  free(keys);
  if (oom) {
    free(buf);
    return vs_error_set(err, VS_ENOMEM, "GEMM fit: out of memory");
  }
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
  if (shapes < VS_GEMM_FIT_MIN_SHAPES || shapes > VS_GEMM_FIT_MAX_SHAPES) {
    free(m);
    if (shapes > VS_GEMM_FIT_MAX_SHAPES)
      return vs_error_set(err, VS_ELIMIT, "GEMM fit: %zu shapes, over the "
                          "%d a fit takes (a measuring run makes 131): thin "
                          "the sweep or split the file", shapes,
                          VS_GEMM_FIT_MAX_SHAPES);
    return vs_error_set(err, VS_EINPUT, "GEMM fit: %zu shapes measured, at "
                        "least %d needed", shapes, VS_GEMM_FIT_MIN_SHAPES);
  }
  memset(out, 0, sizeof *out);
  if (!outer_shapes_vary(m, shapes)) {
    rc = vs_error_set(err, VS_EINPUT, "GEMM fit: every shape is %llu x %llu "
                      "(batch %llu), at which the launch floor cannot be "
                      "told from the tile overhead K0: measure two m x n "
                      "at least", (unsigned long long)m[0].shape.m,
                      (unsigned long long)m[0].shape.n,
                      (unsigned long long)m[0].shape.batch);
    free(m);
    return rc;
  }
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

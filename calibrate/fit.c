/* fit.c - robust, weighted, piecewise alpha-beta fits (see fit.h).
 *
 * The model with k breakpoints b_1 < b_2 is the continuous hinge
 *   t(x) = a + s0 x + d1 max(0, x - b1) + d2 max(0, x - b2),
 * linear in (a, s0, d1, d2) for fixed breakpoints. Each row of the design
 * is scaled by 1/sigma_i (weighted least squares) and each column by its
 * norm (sizes span nine decades), then a bisquare regression fits it
 * (GSL's, gsl_multifit_robust, with its scale held at 1: robust_fit).
 * Breakpoints are searched over the measured sizes
 * (at most SEARCH_POINTS of them) and refined by golden section on log(b).
 *
 * Model choice: residuals r_i = (median_i - t(x_i)) / sigma_i are measured
 * against one scale s for every candidate, s = max(1, robust sigma of the
 * most flexible model), and scored with the bisquare loss
 *   C = 2 sum rho(r_i / s) + p ln n,  rho(u) = c^2/6 (1 - (1 - (u/c)^2)^3),
 * capped at c^2/6 for |u| > c (c = 4.685), p = 2 + 2k. With small residuals
 * 2 rho(u) ~ u^2, so C is the BIC; an outlier costs every model the same,
 * while a regime a line cannot follow costs the line many times over. */
#include "fit.h"

#include <gsl/gsl_blas.h>
#include <gsl/gsl_errno.h>
#include <gsl/gsl_matrix.h>
#include <gsl/gsl_multifit.h>
#include <gsl/gsl_vector.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TUNE 4.685       /* bisquare tuning constant (95% efficiency) */
#define N_COEF (2 + VS_FIT_MAX_BREAKS)
#define GOLDEN_STEPS 40
/* Sizes the breakpoint search looks at. It tries every pair of them, each
 * with a robust fit over the sizes searched, so its cost grows as n^3: a
 * measurement's 57 sizes take under a second, but 150 took 20 s and 1000
 * over 15 minutes. Past this many, it searches sizes spread evenly in
 * log(size) and fits the breakpoints it finds over all (choose_thinned). */
#define SEARCH_POINTS 64

vs_fit_options vs_fit_default_options(void)
{
  vs_fit_options o = {.max_breaks = VS_FIT_MAX_BREAKS, .sigma_floor = 0.005};
  return o;
}

/* ------------------------------------------------------------------------
 * Per-size points
 * ------------------------------------------------------------------------ */

typedef struct sample {
  double bytes;
  double seconds;
} sample;

static int cmp_sample(const void *pa, const void *pb)
{
  const sample *a = pa, *b = pb;
  if (a->bytes != b->bytes)
    return a->bytes < b->bytes ? -1 : 1;
  return (a->seconds > b->seconds) - (a->seconds < b->seconds);
}

static int cmp_double(const void *pa, const void *pb)
{
  double a = *(const double *)pa, b = *(const double *)pb;
  return (a > b) - (a < b);
}

/* Median of v[0..n-1], which is sorted. */
static double sorted_median(const double *v, size_t n)
{
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Reduces the sorted run s[0..m-1] of one size to a point; dev is scratch. */
static void reduce(const sample *s, size_t m, double floor_rel, double *dev,
                   vs_fit_point *p)
{
  double med, mad;
  for (size_t i = 0; i < m; i++)
    dev[i] = s[i].seconds;
  med = sorted_median(dev, m);
  for (size_t i = 0; i < m; i++)
    dev[i] = fabs(s[i].seconds - med);
  qsort(dev, m, sizeof *dev, cmp_double);
  mad = sorted_median(dev, m);
  p->bytes = s[0].bytes;
  p->median = med;
  p->n_samples = m;
  p->sigma = 1.2533 * 1.4826 * mad / sqrt((double)m);
  if (p->sigma < floor_rel * med)
    p->sigma = floor_rel * med;
  if (p->sigma < 1e-9)
    p->sigma = 1e-9;
  p->outlier = false;
}

int vs_fit_points(const double *bytes, const double *seconds, size_t n,
                  double sigma_floor, vs_fit_point **out, size_t *n_out,
                  vs_error *err)
{
  sample *s;
  double *dev;
  vs_fit_point *pts;
  size_t n_pts = 0;

  if (n == 0)
    return vs_error_set(err, VS_EINPUT, "no samples");
  s = malloc(n * sizeof *s);
  dev = malloc(n * sizeof *dev);
  pts = malloc(n * sizeof *pts);
  if (!s || !dev || !pts) {
    free(s), free(dev), free(pts);
    return vs_error_set(err, VS_ENOMEM, "out of memory reducing %zu samples", n);
  }
  for (size_t i = 0; i < n; i++)
    s[i] = (sample){bytes[i], seconds[i]};
  qsort(s, n, sizeof *s, cmp_sample);
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && s[j].bytes == s[i].bytes)
      j++;
    reduce(s + i, j - i, sigma_floor, dev, &pts[n_pts]);
    if (!(pts[n_pts].median > 0)) {
      double b = s[i].bytes, med = pts[n_pts].median;
      free(s), free(dev), free(pts);
      return vs_error_set(err, VS_EINPUT,
                          "%.0f bytes: median time is %g s; times must be "
                          "positive", b, med);
    }
    n_pts++;
    i = j;
  }
  free(s);
  free(dev);
  *out = pts;
  *n_out = n_pts;
  return 0;
}

/* ------------------------------------------------------------------------
 * One robust fit for fixed breakpoints
 * ------------------------------------------------------------------------ */

/* Workspace shared by every candidate fit of one kind. */
typedef struct fitws {
  const vs_fit_point *pts;       /* the points */
  size_t n;                      /* how many */
  double xscale;                 /* largest size: x / xscale in (0, 1] */
  double yscale;                 /* largest median */
  double scale;                  /* s of the criterion (see top) */
  gsl_multifit_linear_workspace *lw[VS_FIT_MAX_BREAKS + 1]; /* by k */
  gsl_matrix *X[VS_FIT_MAX_BREAKS + 1];  /* n x (2 + k) */
  gsl_vector *y;                 /* scaled medians */
  gsl_vector *c[VS_FIT_MAX_BREAKS + 1];  /* coefficients */
  gsl_vector *c_old; /* the last iteration's (p <= N_COEF) */
  gsl_matrix *cov[VS_FIT_MAX_BREAKS + 1]; /* their covariance */
  gsl_vector *wt;                         /* bisquare weights of the rows */
  double *r;                              /* leverage-adjusted residuals */
  double *lev;    /* 1 / sqrt(1 - leverage) of each row */
  double *sorted; /* scratch for the residuals' median */
} fitws;

/* A fitted candidate, in seconds and bytes. */
typedef struct cand {
  size_t k;                      /* breakpoints */
  double b[VS_FIT_MAX_BREAKS];   /* where */
  double coef[N_COEF];           /* a, s0, d1, d2 (s, s/B) */
  double sigma;                  /* robust sigma of scaled residuals */
  double crit;                   /* the criterion with ws->scale */
  bool ok;                       /* the regression succeeded */
} cand;

static double model(const double *coef, const double *b, size_t k, double x)
{
  double t = coef[0] + coef[1] * x;
  for (size_t j = 0; j < k; j++)
    t += x > b[j] ? coef[2 + j] * (x - b[j]) : 0.0;
  return t;
}

static double rho(double u)
{
  double v;
  if (fabs(u) > TUNE)
    return TUNE * TUNE / 6.0;
  v = 1.0 - (u / TUNE) * (u / TUNE);
  return TUNE * TUNE / 6.0 * (1.0 - v * v * v);
}

/* Scaled residual of point i under candidate c. */
static double resid(const fitws *w, const cand *c, size_t i)
{
  const vs_fit_point *p = &w->pts[i];
  return (p->median - model(c->coef, c->b, c->k, p->bytes)) / p->sigma;
}

static void score(const fitws *w, cand *c)
{
  double sum = 0;
  for (size_t i = 0; i < w->n; i++)
    sum += rho(resid(w, c, i) / w->scale);
  c->crit = 2.0 * sum + (double)(2 + 2 * c->k) * log((double)w->n);
}

/* The residuals' scale cannot be judged below 1: each row is in units of
 * its median's standard error, so a fit through most medians more
 * closely than they were measured (noise-free sizes, or sizes whose
 * scatter is under the 0.5% floor) has residuals of 1, not 0. GSL's
 * bisquare (gsl_multifit_robust) takes the scale from the residuals
 * alone: where over half fit exactly it goes to 0 and every other size
 * is rejected, the flat part of a "flat, then linear" curve winning over
 * its knee (bad-input review). Same as the criterion's (choose). */
#define SCALE_FLOOR 1.0
#define IRLS_MAX_ITER 200

/* GSL's robust scale of the n residuals r (p coefficients): the median
 * of |r| without the p - 1 smallest, / 0.6745 (multirobust.c,
 * robust_madsigma); held at SCALE_FLOOR at least. */
static double mad_sigma(const double *r, size_t n, size_t p, double *sorted)
{
  size_t skip = p - 1, m = n - skip;
  double s;
  for (size_t i = 0; i < n; i++)
    sorted[i] = fabs(r[i]);
  qsort(sorted, n, sizeof *sorted, cmp_double);
  s = sorted_median(sorted + skip, m) / 0.6745;
  return s > SCALE_FLOOR ? s : SCALE_FLOOR;
}

/* Leverage factors 1 / sqrt(1 - h_i) of X's rows, from cov = (X'X)^-1
 * (h capped at 0.9999, as GSL's). */
static void leverages(fitws *w, size_t k)
{
  size_t p = 2 + k;
  for (size_t i = 0; i < w->n; i++) {
    double h = 0;
    for (size_t a = 0; a < p; a++)
      for (size_t b = 0; b < p; b++)
        h += gsl_matrix_get(w->X[k], i, a) * gsl_matrix_get(w->cov[k], a, b) *
             gsl_matrix_get(w->X[k], i, b);
    w->lev[i] = 1.0 / sqrt(1.0 - (h < 0.9999 ? h : 0.9999));
  }
}

/* The residuals y - X c of w->c[k], into w->r. */
static void residuals(fitws *w, size_t k)
{
  gsl_vector_view r = gsl_vector_view_array(w->r, w->n);
  gsl_multifit_linear_residuals(w->X[k], w->y, w->c[k], &r.vector);
}

/* Bisquare weights from the leverage-adjusted residuals of w->c[k],
 * into w->wt; returns their scale. */
static double reweight(fitws *w, size_t k)
{
  double s;
  residuals(w, k);
  for (size_t i = 0; i < w->n; i++)
    w->r[i] *= w->lev[i];
  s = mad_sigma(w->r, w->n, 2 + k, w->sorted);
  for (size_t i = 0; i < w->n; i++) {
    double u = w->r[i] / (TUNE * s);
    gsl_vector_set(w->wt, i, fabs(u) < 1.0 ? (1 - u * u) * (1 - u * u) : 0.0);
  }
  return s;
}

/* GSL's final scale of the fit w->c[k] (multirobust.c): Street, Carroll
 * and Ruppert's (1988) robust sigma, from the MAD of the final residuals
 * (held at SCALE_FLOOR too) and the bisquare's psi and psi' of them,
 * leverage-adjusted; then DuMouchel and O'Brien's (1989) blend with
 * `sigma_ols`, the least-squares start's: max(s_rob, sqrt((s_ols^2 p^2 +
 * s_rob^2 n) / (p^2 + n))). */
static double final_sigma(fitws *w, size_t k, double sigma_ols)
{
  double p = (double)(2 + k), n = (double)w->n, a = 0, b = 0, st, rob;
  residuals(w, k);
  st = TUNE * mad_sigma(w->r, w->n, 2 + k, w->sorted);
  for (size_t i = 0; i < w->n; i++) {
    double u = w->r[i] * w->lev[i] / st, v = 1 - u * u;
    double psi = fabs(u) < 1.0 ? u * v * v : 0.0;
    a += fabs(u) < 1.0 ? v * (1 - 5 * u * u) : 0.0;
    b += psi * psi / (w->lev[i] * w->lev[i]); /* (1 - h) psi^2 */
  }
  a /= n;
  b /= n - p;
  rob = (1 + p / n * (1 - a) / a) * sqrt(b) * st / a;
  return fmax(
      rob, sqrt((sigma_ols * sigma_ols * p * p + rob * rob * n) / (p * p + n)));
}

/* Whether no coefficient of c moved by more than sqrt(eps) of its size
 * from c_old (GSL's test). */
static bool converged(const gsl_vector *c, const gsl_vector *c_old, size_t p)
{
  for (size_t j = 0; j < p; j++) {
    double a = gsl_vector_get(c, j), b = gsl_vector_get(c_old, j);
    double big = fabs(a) > fabs(b) ? fabs(a) : fabs(b);
    if (fabs(a - b) > 1.4901161193847656e-08 * big)
      return false;
  }
  return true;
}

/* The bisquare regression of w->y on w->X[k] into w->c[k], as GSL's
 * (ordinary least squares, then reweighted least squares with
 * leverage-adjusted residuals, to convergence or IRLS_MAX_ITER, past
 * which the last fit stands), but with the scale held at SCALE_FLOOR at
 * least (GSL's floor is 1e-6 of the data's spread); *sigma GSL's final
 * scale (final_sigma). GSL's error code of a failed solve. */
static int robust_fit(fitws *w, size_t k, double *sigma)
{
  size_t p = 2 + k;
  gsl_vector_view c_old = gsl_vector_subvector(w->c_old, 0, p);
  double chisq, sigma_ols;
  int rc;
  gsl_vector_set_all(w->wt, 1.0);
  if ((rc = gsl_multifit_wlinear(w->X[k], w->wt, w->y, w->c[k], w->cov[k],
                                 &chisq, w->lw[k])))
    return rc;
  sigma_ols = sqrt(chisq / (double)(w->n - p)); /* n > p: vs_fit_run */
  leverages(w, k);
  for (int it = 0; it < IRLS_MAX_ITER; it++) {
    reweight(w, k);
    gsl_vector_memcpy(&c_old.vector, w->c[k]);
    if ((rc = gsl_multifit_wlinear(w->X[k], w->wt, w->y, w->c[k], w->cov[k],
                                   &chisq, w->lw[k])))
      return rc;
    if (converged(w->c[k], &c_old.vector, p))
      break;
  }
  *sigma = final_sigma(w, k, sigma_ols);
  return GSL_SUCCESS;
}

/* Fits candidate c (k and b set) by the weighted bisquare regression. */
static void fit_cand(fitws *w, cand *c)
{
  size_t k = c->k, p = 2 + k;
  gsl_matrix *X = w->X[k];
  double norm[N_COEF] = {0};
  int rc;

  for (size_t i = 0; i < w->n; i++) {
    const vs_fit_point *pt = &w->pts[i];
    double inv = w->yscale / pt->sigma; /* rows in units of sigma */
    double x = pt->bytes / w->xscale;
    gsl_matrix_set(X, i, 0, inv);
    gsl_matrix_set(X, i, 1, inv * x);
    for (size_t j = 0; j < k; j++) {
      double h = pt->bytes > c->b[j] ? (pt->bytes - c->b[j]) / w->xscale : 0.0;
      gsl_matrix_set(X, i, 2 + j, inv * h);
    }
    gsl_vector_set(w->y, i, pt->median / pt->sigma);
  }
  for (size_t j = 0; j < p; j++) {
    gsl_vector_view col = gsl_matrix_column(X, j);
    norm[j] = gsl_blas_dnrm2(&col.vector);
    if (norm[j] > 0)
      gsl_vector_scale(&col.vector, 1.0 / norm[j]);
  }
  rc = robust_fit(w, k, &c->sigma);
  c->ok = rc == GSL_SUCCESS;
  if (!c->ok)
    return;
  /* back to seconds and seconds per byte */
  for (size_t j = 0; j < p; j++) {
    double v = norm[j] > 0 ? gsl_vector_get(w->c[k], j) / norm[j] : 0.0;
    c->coef[j] = v * w->yscale / (j == 0 ? 1.0 : w->xscale);
  }
  for (size_t j = p; j < N_COEF; j++)
    c->coef[j] = 0;
}

/* Fits and scores c; false when the regression failed. */
static bool eval(fitws *w, cand *c)
{
  fit_cand(w, c);
  if (c->ok)
    score(w, c);
  return c->ok;
}

/* ------------------------------------------------------------------------
 * Breakpoint search
 * ------------------------------------------------------------------------ */

/* Minimises the criterion over log(b[j]) in [lo, hi] by golden section,
 * starting from *best (already evaluated); keeps the best seen. */
static void refine(fitws *w, cand *best, size_t j, double lo, double hi)
{
  const double g = 0.5 * (sqrt(5.0) - 1.0);
  double a = log(lo), d = log(hi);
  double x1 = d - g * (d - a), x2 = a + g * (d - a);
  cand c1 = *best, c2 = *best;

  c1.b[j] = exp(x1);
  c2.b[j] = exp(x2);
  eval(w, &c1);
  eval(w, &c2);
  for (int it = 0; it < GOLDEN_STEPS; it++) {
    double f1 = c1.ok ? c1.crit : HUGE_VAL, f2 = c2.ok ? c2.crit : HUGE_VAL;
    if (f1 < f2) {
      d = x2;
      c2 = c1;
      x2 = x1;
      x1 = d - g * (d - a);
      c1.b[j] = exp(x1);
      eval(w, &c1);
    } else {
      a = x1;
      c1 = c2;
      x1 = x2;
      x2 = a + g * (d - a);
      c2.b[j] = exp(x2);
      eval(w, &c2);
    }
    if (c1.ok && c1.crit < best->crit)
      *best = c1;
    if (c2.ok && c2.crit < best->crit)
      *best = c2;
  }
}

/* Index of the measured size nearest below-or-at b. */
static size_t knot_index(const fitws *w, double b)
{
  size_t i = 0;
  while (i + 1 < w->n && w->pts[i + 1].bytes <= b)
    i++;
  return i;
}

/* The best candidate with k breakpoints: every pair of measured sizes that
 * leaves VS_FIT_SEGMENT_POINTS sizes per piece, then golden refinement of
 * each breakpoint between its neighbouring sizes. */
static cand search(fitws *w, size_t k)
{
  const size_t m = VS_FIT_SEGMENT_POINTS - 1, n = w->n;
  cand best = {.k = k, .ok = false, .crit = HUGE_VAL};

  if (k == 0) {
    eval(w, &best);
    return best;
  }
  for (size_t i = m; i + m < n; i++) {
    for (size_t j = k == 2 ? i + m : i; j + m < n; j++) {
      cand c = {.k = k};
      c.b[0] = w->pts[i].bytes;
      c.b[1] = w->pts[j].bytes;
      if (eval(w, &c) && (!best.ok || c.crit < best.crit))
        best = c;
      if (k == 1)
        break;
    }
  }
  if (!best.ok)
    return best;
  for (size_t j = 0; j < k; j++) {
    size_t i = knot_index(w, best.b[j]);
    double lo = w->pts[i > 0 ? i - 1 : 0].bytes;
    double hi = w->pts[i + 1 < n ? i + 1 : i].bytes;
    if (j > 0 && lo <= best.b[j - 1])
      lo = best.b[j - 1] * 1.0001;
    if (j + 1 < k && hi >= best.b[j + 1])
      hi = best.b[j + 1] * 0.9999;
    if (hi > lo)
      refine(w, &best, j, lo, hi);
  }
  return best;
}

/* ------------------------------------------------------------------------
 * Driver
 * ------------------------------------------------------------------------ */

static void ws_free(fitws *w)
{
  for (size_t k = 0; k <= VS_FIT_MAX_BREAKS; k++) {
    if (w->lw[k])
      gsl_multifit_linear_free(w->lw[k]);
    gsl_matrix_free(w->X[k]);
    gsl_vector_free(w->c[k]);
    gsl_matrix_free(w->cov[k]);
  }
  gsl_vector_free(w->y);
  gsl_vector_free(w->c_old);
  gsl_vector_free(w->wt);
  free(w->r);
  free(w->lev);
  free(w->sorted);
}

static int ws_alloc(fitws *w, size_t max_k)
{
  w->y = gsl_vector_alloc(w->n);
  w->wt = gsl_vector_alloc(w->n);
  w->c_old = gsl_vector_alloc(N_COEF);
  w->r = malloc(w->n * sizeof *w->r);
  w->lev = malloc(w->n * sizeof *w->lev);
  w->sorted = malloc(w->n * sizeof *w->sorted);
  if (!w->y || !w->wt || !w->c_old || !w->r || !w->lev || !w->sorted)
    return -1;
  for (size_t k = 0; k <= max_k; k++) {
    size_t p = 2 + k;
    w->lw[k] = gsl_multifit_linear_alloc(w->n, p);
    w->X[k] = gsl_matrix_alloc(w->n, p);
    w->c[k] = gsl_vector_alloc(p);
    w->cov[k] = gsl_matrix_alloc(p, p);
    if (!w->lw[k] || !w->X[k] || !w->c[k] || !w->cov[k])
      return -1;
  }
  return 0;
}

/* Fills fit from the chosen candidate and marks outliers in pts. */
static void describe(const fitws *w, const cand *c, vs_fit_point *pts,
                     vs_fit *fit)
{
  double sw = 0, swy = 0, ss_res = 0, ss_tot = 0, ybar;

  memset(fit, 0, sizeof *fit);
  fit->n_points = w->n;
  fit->n_breaks = c->k;
  fit->min_bytes = pts[0].bytes;
  fit->max_bytes = pts[w->n - 1].bytes;
  fit->criterion = c->crit;
  for (size_t j = 0; j < c->k; j++)
    fit->breaks[j] = c->b[j];
  for (size_t s = 0; s <= c->k; s++) {
    vs_fit_segment *g = &fit->segs[s];
    g->lo_bytes = s == 0 ? fit->min_bytes : c->b[s - 1];
    g->hi_bytes = s == c->k ? fit->max_bytes : c->b[s];
    g->seconds_per_byte = c->coef[1];
    g->latency = c->coef[0];
    for (size_t j = 0; j < s; j++) {
      g->seconds_per_byte += c->coef[2 + j];
      g->latency -= c->coef[2 + j] * c->b[j];
    }
  }
  for (size_t i = 0; i < w->n; i++) {
    double r = resid(w, c, i);
    pts[i].outlier = fabs(r / w->scale) > TUNE;
    if (pts[i].outlier) {
      fit->n_outliers++;
      continue;
    }
    double wt = 1.0 / (pts[i].sigma * pts[i].sigma);
    double rel = fabs(model(c->coef, c->b, c->k, pts[i].bytes) / pts[i].median - 1.0);
    bool judged = fabs(r) > 2.0; /* r: the miss in standard errors */
    sw += wt;
    swy += wt * pts[i].median;
    ss_res += r * r;
    if (rel > fit->max_rel_error)
      fit->max_rel_error = rel;
    if (judged && rel > fit->judged_rel_error)
      fit->judged_rel_error = rel;
    fit->n_unsure += !judged && rel > VS_FIT_POOR;
  }
  ybar = sw > 0 ? swy / sw : 0;
  for (size_t i = 0; i < w->n; i++) {
    if (!pts[i].outlier) {
      double d = (pts[i].median - ybar) / pts[i].sigma;
      ss_tot += d * d;
    }
  }
  fit->r2 = ss_tot > 0 ? 1.0 - ss_res / ss_tot : 1.0;
}

/* The best candidate of each k in best[0..max_k] (ok false where the
 * regression failed) and the one the criterion picks, or NULL. The scale of
 * the criterion comes from the most flexible model that fits. */
static const cand *choose(fitws *w, size_t max_k, cand *best)
{
  const cand *pick = NULL;
  for (size_t k = max_k + 1; k-- > 0;) {
    best[k] = search(w, k);
    if (best[k].ok) {
      w->scale = best[k].sigma > 1.0 ? best[k].sigma : 1.0;
      break;
    }
  }
  for (size_t k = 0; k <= max_k; k++) {
    best[k] = search(w, k);
    if (best[k].ok && (!pick || best[k].crit < pick->crit))
      pick = &best[k];
  }
  return pick;
}

/* Picks m of the n sizes of pts (n > m > 1) into sub, spread evenly in
 * log(1 + bytes): the first and the last, never one twice (where sizes
 * crowd, neighbours are taken). O(n). */
static void thin(const vs_fit_point *pts, size_t n, vs_fit_point *sub,
                 size_t m)
{
  double lo = log1p(pts[0].bytes), hi = log1p(pts[n - 1].bytes);
  size_t i = 0;
  for (size_t t = 0; t < m; t++) {
    double want = lo + (hi - lo) * (double)t / (double)(m - 1);
    size_t last = n - (m - t); /* leaves a size for each later pick */
    while (i < last && log1p(pts[i].bytes) < want)
      i++;
    sub[t] = pts[t + 1 == m ? n - 1 : i++];
  }
}

/* choose() over many sizes: the breakpoints of each k are searched over
 * SEARCH_POINTS of them (ws->pts), then fitted once over all sizes (w),
 * where the scale and the pick are made as choose() makes them. */
static const cand *choose_thinned(fitws *w, fitws *ws, size_t max_k,
                                  cand *best)
{
  const cand *pick = NULL;
  choose(ws, max_k, best);
  for (size_t k = 0; k <= max_k; k++)
    if (best[k].ok)
      fit_cand(w, &best[k]);
  for (size_t k = max_k + 1; k-- > 0;) {
    if (best[k].ok) {
      w->scale = best[k].sigma > 1.0 ? best[k].sigma : 1.0;
      break;
    }
  }
  for (size_t k = 0; k <= max_k; k++) {
    if (!best[k].ok)
      continue;
    score(w, &best[k]);
    if (!pick || best[k].crit < pick->crit)
      pick = &best[k];
  }
  return pick;
}

int vs_fit_run(vs_fit_point *pts, size_t n, const vs_fit_options *opt,
               vs_fit *fit, vs_error *err)
{
  fitws w = {.pts = pts, .n = n, .scale = 1.0}, ws = {.scale = 1.0};
  vs_fit_point sub[SEARCH_POINTS];
  cand best[VS_FIT_MAX_BREAKS + 1];
  const cand *pick;
  size_t max_k = opt->max_breaks < 0 ? 0 : (size_t)opt->max_breaks;
  int rc = 0;

  if (n < VS_FIT_MIN_POINTS)
    return vs_error_set(err, VS_EINPUT,
                        "too few points: %zu distinct sizes, need at least %d",
                        n, VS_FIT_MIN_POINTS);
  if (n > VS_FIT_MAX_POINTS)
    return vs_error_set(err, VS_ELIMIT,
                        "%zu distinct sizes, over the %d a fit takes (a "
                        "measuring run makes 57 per kind by default): thin the "
                        "sizes or split the file",
                        n, VS_FIT_MAX_POINTS);
  if (max_k > VS_FIT_MAX_BREAKS)
    max_k = VS_FIT_MAX_BREAKS;
  /* each of k + 1 pieces needs its sizes, the pieces share the breakpoints */
  while (max_k > 0 && n < (max_k + 1) * (VS_FIT_SEGMENT_POINTS - 1) + 2)
    max_k--;
  w.xscale = pts[n - 1].bytes > 0 ? pts[n - 1].bytes : 1.0;
  for (size_t i = 0; i < n; i++)
    w.yscale = pts[i].median > w.yscale ? pts[i].median : w.yscale;
  if (n > SEARCH_POINTS) {
    thin(pts, n, sub, SEARCH_POINTS);
    ws = (fitws){.pts = sub, .n = SEARCH_POINTS, .scale = 1.0,
                 .xscale = w.xscale, .yscale = w.yscale};
  }
  if (ws_alloc(&w, max_k) || (ws.n && ws_alloc(&ws, max_k))) {
    ws_free(&w);
    ws_free(&ws);
    return vs_error_set(err, VS_ENOMEM, "out of memory fitting %zu points", n);
  }
  pick = ws.n ? choose_thinned(&w, &ws, max_k, best) : choose(&w, max_k, best);
  if (!pick)
    rc = vs_error_set(err, VS_EINPUT, "the regression failed on %zu points", n);
  else
    describe(&w, pick, pts, fit);
  ws_free(&w);
  ws_free(&ws);
  return rc;
}

int vs_fit_predict(const vs_fit *fit, double bytes, double *seconds,
                   vs_error *err)
{
  size_t s = 0;
  if (!(bytes >= fit->min_bytes && bytes <= fit->max_bytes))
    return vs_error_set(err, VS_EINPUT,
                        "%.0f bytes is outside the measured sizes %.0f-%.0f; "
                        "the fit is not extrapolated",
                        bytes, fit->min_bytes, fit->max_bytes);
  while (s < fit->n_breaks && bytes > fit->breaks[s])
    s++;
  *seconds = fit->segs[s].latency + bytes * fit->segs[s].seconds_per_byte;
  return 0;
}

const vs_fit_segment *vs_fit_last(const vs_fit *fit)
{
  return &fit->segs[fit->n_breaks];
}

/* fit.h - alpha-beta fits of measured times: t = latency + bytes / bandwidth.
 *
 * Samples of one kind are reduced to one point per size (the median and the
 * standard error of the median, from the median absolute deviation), then
 * fitted by a bisquare robust regression weighted by 1/sigma^2 (so a size
 * whose whole median is off is ignored, and noisy sizes count less). When
 * one line does not describe the data, a continuous piecewise line with one
 * or two breakpoints is chosen by a robust Bayesian information criterion.
 * A vs_fit holds the model and its quality; predictions outside the
 * measured sizes are refused, never extrapolated silently. */
#ifndef VS_FIT_H
#define VS_FIT_H

#include "error.h"

#include <stdbool.h>
#include <stddef.h>

#define VS_FIT_MAX_BREAKS 2
#define VS_FIT_MIN_POINTS 4      /* distinct sizes a kind needs */
#define VS_FIT_SEGMENT_POINTS 3  /* sizes each piecewise segment needs */
/* Distinct sizes a fit takes at most: a measuring run makes 57 per
 * kind (powers of two from 4 B to 1 GiB and their midpoints), and fitting
 * 100,000 takes about a second; 8 million took ten minutes. */
#define VS_FIT_MAX_POINTS 100000

/* One measured size, reduced from its samples. */
typedef struct vs_fit_point {
  double bytes;                  /* the transfer or allocation size */
  double median;                 /* median of the samples, seconds */
  double sigma;                  /* standard error of the median, seconds */
  size_t n_samples;              /* samples behind the median */
  bool outlier;                  /* set by vs_fit_run: ignored by the fit */
} vs_fit_point;

/* One straight piece of the fitted model, over [lo_bytes, hi_bytes]. */
typedef struct vs_fit_segment {
  double lo_bytes;               /* first size of the piece */
  double hi_bytes;               /* last size of the piece */
  double latency;                /* intercept, seconds (may be < 0) */
  double seconds_per_byte;       /* slope; 1 / bandwidth */
} vs_fit_segment;

/* A fit is poor where a median it misses by more than two standard
 * errors is off by over this (vsim-calibrate warns). */
#define VS_FIT_POOR 0.5

typedef struct vs_fit {
  size_t n_points;               /* sizes fitted */
  size_t n_outliers;             /* sizes the robust fit ignored */
  size_t n_breaks;               /* 0, 1 or 2 */
  double breaks[VS_FIT_MAX_BREAKS]; /* breakpoints in bytes, ascending */
  vs_fit_segment segs[VS_FIT_MAX_BREAKS + 1]; /* n_breaks + 1 pieces */
  double min_bytes;              /* smallest measured size */
  double max_bytes;              /* largest measured size */
  double r2;                     /* weighted R^2 over the inliers */
  double max_rel_error;          /* largest |fit/median - 1| over inliers */
  double judged_rel_error;       /* the same over the inliers the fit
                                    misses by more than two standard
                                    errors of their median: a miss within
                                    them (a size of two scattered samples)
                                    cannot show the fit poor */
  size_t n_unsure;               /* inliers off by over VS_FIT_POOR but
                                    within two standard errors: their
                                    samples disagree too much to judge */
  double criterion;              /* the robust BIC of the chosen model */
} vs_fit;

typedef struct vs_fit_options {
  int max_breaks;                /* 0..VS_FIT_MAX_BREAKS */
  double sigma_floor;            /* smallest relative sigma of a median */
} vs_fit_options;

/* The defaults: up to two breakpoints, sigma at least 0.5% of the median. */
vs_fit_options vs_fit_default_options(void);

/* Reduces n samples (bytes[i], seconds[i]) to points sorted by size, one per
 * distinct size, in *out (malloc'd, caller frees) of *n_out. Sigma is
 * 1.2533 * 1.4826 * MAD / sqrt(m), at least sigma_floor * median and 1 ns.
 * VS_EINPUT when a median is not positive; VS_ENOMEM. O(n log n). */
int vs_fit_points(const double *bytes, const double *seconds, size_t n,
                  double sigma_floor, vs_fit_point **out, size_t *n_out,
                  vs_error *err);

/* Fits n points (sorted by size, as vs_fit_points leaves them) and marks
 * the outliers in pts. GSL's aborting error handler must be off (main does
 * gsl_set_error_handler_off once). VS_EINPUT with the reason when there are fewer than
 * VS_FIT_MIN_POINTS sizes or the regression fails, VS_ELIMIT over
 * VS_FIT_MAX_POINTS sizes (before any work); fit is then unchanged.
 * Cost: the breakpoint search makes O(m^2) robust fits of m x 4, m the
 * smaller of n and 64 (under 1 s); over 64 sizes, the 64 searched are
 * spread evenly in log(size), and the breakpoints found are then fitted
 * once per k over all n (a million sizes: ~15 s). */
int vs_fit_run(vs_fit_point *pts, size_t n, const vs_fit_options *opt,
               vs_fit *fit, vs_error *err);

/* The fitted time for bytes in *seconds. VS_EINPUT when bytes lies outside
 * [min_bytes, max_bytes]: the model is not extrapolated. */
int vs_fit_predict(const vs_fit *fit, double bytes, double *seconds,
                   vs_error *err);

/* The piece that describes the largest sizes (what big transfers see). */
const vs_fit_segment *vs_fit_last(const vs_fit *fit);

#endif

/* gemmfit.h - fits sim/cost's GEMM model to measured GEMM times.
 *
 * The model (cost.h): a GEMM of shape g doing F FLOPs takes
 *   t = floor + F / (peak x E x vs_cost_gemm_share(g, sms, K0))
 * with E the GPU's full-wave rate (a share of the peak), K0 the tile's
 * fixed work in units of k and floor the kernel's cost beyond its work.
 * vs_gemm_fit finds E, K0 and floor from one median time per shape: for
 * each K0 on a grid the model is linear in (floor, 1 / E), fitted by GSL's
 * weighted least squares on relative errors; the K0 with the smallest
 * weighted residual wins (with fewer than three inner dimensions K0 is not
 * identifiable and the caller's is kept). What the topology takes:
 * compute_efficiency_shape = best (the measured single GEMM the model
 * fills best); compute_efficiency = the rate best measured, its FLOPs
 * over the peak times its median time less the floor (the anchor cost.h
 * scales every other shape from, so a measurement: where the fit is poor
 * the model's E x share(best) can promise a rate never reached there);
 * gemm_k_overhead = K0, kernel_floor = floor. */
#ifndef VS_GEMMFIT_H
#define VS_GEMMFIT_H

#include "error.h"
#include "model.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One timed GEMM. */
typedef struct vs_gemm_sample {
  vs_gemm shape;                 /* m, n, k, batch */
  double seconds;                /* one launch's time */
} vs_gemm_sample;

typedef struct vs_gemm_fit {
  double full_efficiency;        /* E */
  double k_overhead;             /* K0 */
  double floor;                  /* seconds, >= 0 */
  vs_gemm best;                  /* the measured single GEMM (batch 1)
                                    the model fills best */
  double best_efficiency;        /* the rate at best: compute_efficiency */
  bool best_from_fit;            /* best is launch-bound (its time at most
                                    twice the floor): best_efficiency is
                                    the model's rate there, not its time
                                    less the floor */
  double rms_rel_error;          /* of the fitted times against the medians */
  double max_rel_error;
  size_t shapes;                 /* distinct shapes fitted */
  bool k_kept;                   /* too few inner dimensions to fit K0:
                                    k_overhead is the one passed in */
} vs_gemm_fit;

#define VS_GEMM_FIT_MIN_SHAPES 6
#define VS_GEMM_FIT_K0_MAX 1024.0 /* the grid: 0, 2, ..., 1024 */
#define VS_GEMM_FIT_MIN_KS 3      /* inner dimensions K0 needs */
/* Distinct shapes a fit takes at most: a measuring run makes 131; each
 * shape is fitted at 513 values of K0 (a few seconds for 100,000). */
#define VS_GEMM_FIT_MAX_SHAPES 100000
/* The FLOPs of one timed GEMM at most: a second of 1000 PFLOP/s, ten
 * times any GPU's peak (topology.c), and far inside the 64-bit tile
 * counts vs_cost_gemm_share makes of its dimensions. */
#define VS_GEMM_FIT_MAX_FLOPS 1e18

/* The FLOPs of GEMM g: 2 m n k a batch entry. */
double vs_gemm_fit_flops(vs_gemm g);

/* Fits n samples (any order; several per shape are reduced to their
 * median) on a GPU of peak_flops with sms SMs. VS_EINPUT naming the
 * reason: fewer than VS_GEMM_FIT_MIN_SHAPES shapes, none of batch 1 or
 * one outer shape (m, n, batch) alone, a shape with a zero dimension or
 * over VS_GEMM_FIT_MAX_FLOPS, a time that
 * is not positive and finite, a peak or SM count that is not positive,
 * or no fit with a positive rate; VS_ELIMIT over VS_GEMM_FIT_MAX_SHAPES
 * shapes; VS_ENOMEM. */
int vs_gemm_fit_run(const vs_gemm_sample *s, size_t n, double peak_flops,
                    uint64_t sms, double k0_kept, vs_gemm_fit *out,
                    vs_error *err);

/* The shape of the n samples (n > 0, each time positive) whose median
 * time gives the highest rate, into *fastest (its shape and median time),
 * and that rate as a share of peak_flops into *share: over 1, that shape
 * beat the peak, which no GEMM can (a wrong peak, or that shape's times
 * wrong). VS_ENOMEM. O(n log n). */
int vs_gemm_fit_fastest(const vs_gemm_sample *s, size_t n, double peak_flops,
                        vs_gemm_sample *fastest, double *share, vs_error *err);

#endif

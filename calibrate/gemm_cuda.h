/* gemm_cuda.h - the GEMM sweep of vsim-calibrate's measuring run (built
 * when CMake finds cuBLAS beside CUDA): bf16 GEMMs with fp32 accumulation
 * (cublasGemmStridedBatchedEx, cuBLAS opened with dlopen: without it the
 * sweep is skipped with a warning) over the shapes transformer layers run, m,
 * n, k of 512 to 8192 and attention's batched products, appended to raw
 * as gemm samples (rawcsv.h) for gemmfit.h. */
#ifndef VS_GEMM_CUDA_H
#define VS_GEMM_CUDA_H

#include "error.h"
#include "measure.h"
#include "rawcsv.h"

#include <stdbool.h>

/* What holds the stream while a timing's launches are queued (a spin
 * kernel, released by release): hold returns 0 when it holds. */
typedef struct vs_gemm_hold {
  int (*hold)(void *ctx);
  void (*release)(void *ctx);
  void *ctx;
} vs_gemm_hold;

/* Times every shape on the current device: one untimed launch (cuBLAS
 * loads kernels lazily), o->warmup untimed timings,
 * then o->samples timings, each of K back-to-back launches between two
 * events on `stream` (K so that a timing lasts about a millisecond),
 * seconds per launch. Stops between shapes once now_s() passes deadline
 * (0: none) or *o->stop is set, setting *cut_short. VS_EIO naming the
 * CUDA or cuBLAS call that failed; VS_ENOMEM. */
int vs_gemm_sweep(const vs_measure_opts *o, void *stream,
                  const vs_gemm_hold *hold, double deadline,
                  double (*now_s)(void), vs_raw *raw, bool *cut_short,
                  vs_error *err);

#endif

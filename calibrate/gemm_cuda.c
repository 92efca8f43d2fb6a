/* gemm_cuda.c - the GEMM sweep (see gemm_cuda.h). Operands are filled
 * with a constant nonzero bf16 (0x3C3C, about 0.0115) rather than left
 * zero; row-major C[m x n] = A[m x k] B[k x n] is cuBLAS's column-major
 * C^T = B^T A^T, the same work. */
#include "gemm_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <math.h>
#include <stdio.h>

#define SIDE_MAX 8192u               /* the largest m, n, k */
#define TIMING_S 1e-3                /* what one timing's K launches last */
#define K_MAX 1000u

/* The sweep: every m, n, k of 512 to 8192 (dense layers, single GEMMs),
 * then attention's batched QK^T and PV at head dimension 64 and 128. */
static const unsigned sides[] = {512, 1024, 2048, 4096, SIDE_MAX};
#define N_SIDES (sizeof sides / sizeof sides[0])
static const vs_gemm batched[] = {
    {2048, 2048, 128, 32}, {2048, 128, 2048, 32}, {2048, 2048, 64, 32},
    {2048, 64, 2048, 32},  {4096, 4096, 128, 16}, {4096, 128, 4096, 16}};
#define N_BATCHED (sizeof batched / sizeof batched[0])

typedef struct sweep {
  const vs_measure_opts *o;
  cudaStream_t stream;
  cublasHandle_t h;
  cudaEvent_t start, stop;
  void *a, *b, *c;               /* operands, sized for the largest shape
                                    (operand_elems), bf16 */
  vs_error *err;
} sweep;

static int cuda_error(sweep *s, const char *what, cudaError_t e)
{
  return vs_error_set(s->err, VS_EIO, "GEMM sweep: %s: %s", what,
                      cudaGetErrorString(e));
}

static int cublas_error(sweep *s, const char *what, cublasStatus_t st)
{
  return vs_error_set(s->err, VS_EIO, "GEMM sweep: %s: cuBLAS status %d",
                      what, (int)st);
}

static vs_gemm shape_at(size_t i)
{
  if (i < N_SIDES * N_SIDES * N_SIDES)
    return (vs_gemm){sides[i / (N_SIDES * N_SIDES)],
                     sides[i / N_SIDES % N_SIDES], sides[i % N_SIDES], 1};
  return batched[i - N_SIDES * N_SIDES * N_SIDES];
}

/* One launch of g. */
static cublasStatus_t launch(sweep *s, vs_gemm g)
{
  const float alpha = 1.0f, beta = 0.0f;
  return cublasGemmStridedBatchedEx(
      s->h, CUBLAS_OP_N, CUBLAS_OP_N, (int)g.n, (int)g.m, (int)g.k, &alpha,
      s->b, CUDA_R_16BF, (int)g.n, (long long)(g.k * g.n), s->a, CUDA_R_16BF,
      (int)g.k, (long long)(g.m * g.k), &beta, s->c, CUDA_R_16BF, (int)g.n,
      (long long)(g.m * g.n), (int)g.batch, CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT);
}

/* Seconds per launch of g over k back-to-back launches. */
static int timed(sweep *s, vs_gemm g, unsigned k, double *secs)
{
  cudaError_t e;
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  float ms = 0;
  if ((e = cudaEventRecord(s->start, s->stream)) != cudaSuccess)
    return cuda_error(s, "cudaEventRecord", e);
  for (unsigned i = 0; i < k && st == CUBLAS_STATUS_SUCCESS; i++)
    st = launch(s, g);
  if (st != CUBLAS_STATUS_SUCCESS)
    return cublas_error(s, "cublasGemmStridedBatchedEx", st);
  if ((e = cudaEventRecord(s->stop, s->stream)) != cudaSuccess ||
      (e = cudaEventSynchronize(s->stop)) != cudaSuccess ||
      (e = cudaEventElapsedTime(&ms, s->start, s->stop)) != cudaSuccess)
    return cuda_error(s, "timing a GEMM", e);
  *secs = (double)ms * 1e-3 / (double)k;
  return 0;
}

/* Warm-up, then the samples of g. */
static int measure(sweep *s, vs_raw *raw, vs_gemm g)
{
  double est = 2.0 * (double)g.m * (double)g.n * (double)g.k *
               (double)g.batch / 500e12, secs = 0;
  unsigned k = (unsigned)ceil(TIMING_S / est);
  int rc;
  if (k < 1)
    k = 1;
  if (k > K_MAX)
    k = K_MAX;
  for (unsigned i = 0; i < s->o->warmup + s->o->samples; i++) {
    if ((rc = timed(s, g, k, &secs)))
      return rc;
    if (i >= s->o->warmup &&
        (rc = vs_raw_add_gemm(raw, g, i - s->o->warmup, secs, s->err)))
      return rc;
  }
  return 0;
}

/* The elements each operand needs for the largest shape of the sweep
 * (A m x k, B k x n, C m x n, each times batch). */
static void operand_elems(size_t *a, size_t *b, size_t *c)
{
  *a = *b = *c = 0;
  for (size_t i = 0; i < N_SIDES * N_SIDES * N_SIDES + N_BATCHED; i++) {
    vs_gemm g = shape_at(i);
    size_t x = (size_t)(g.m * g.k * g.batch), y = (size_t)(g.k * g.n * g.batch),
           z = (size_t)(g.m * g.n * g.batch);
    *a = x > *a ? x : *a;
    *b = y > *b ? y : *b;
    *c = z > *c ? z : *c;
  }
}

static int open_sweep(sweep *s, void *stream)
{
  size_t na, nb, nc;
  cudaError_t e;
  cublasStatus_t st;
  s->stream = (cudaStream_t)stream;
  if ((st = cublasCreate(&s->h)) != CUBLAS_STATUS_SUCCESS)
    return cublas_error(s, "cublasCreate", st);
  if ((st = cublasSetStream(s->h, s->stream)) != CUBLAS_STATUS_SUCCESS)
    return cublas_error(s, "cublasSetStream", st);
  if ((e = cudaEventCreate(&s->start)) != cudaSuccess ||
      (e = cudaEventCreate(&s->stop)) != cudaSuccess)
    return cuda_error(s, "cudaEventCreate", e);
  operand_elems(&na, &nb, &nc);
  if ((e = cudaMalloc(&s->a, 2 * na)) != cudaSuccess ||
      (e = cudaMalloc(&s->b, 2 * nb)) != cudaSuccess ||
      (e = cudaMalloc(&s->c, 2 * nc)) != cudaSuccess)
    return cuda_error(s, "cudaMalloc (the operands, 1.1 GiB)", e);
  if ((e = cudaMemset(s->a, 0x3C, 2 * na)) != cudaSuccess ||
      (e = cudaMemset(s->b, 0x3C, 2 * nb)) != cudaSuccess)
    return cuda_error(s, "cudaMemset", e);
  return 0;
}

static void close_sweep(sweep *s)
{
  cudaFree(s->a);
  cudaFree(s->b);
  cudaFree(s->c);
  if (s->start)
    cudaEventDestroy(s->start);
  if (s->stop)
    cudaEventDestroy(s->stop);
  if (s->h)
    cublasDestroy(s->h);
}

int vs_gemm_sweep(const vs_measure_opts *o, void *stream, double deadline,
                  double (*now_s)(void), vs_raw *raw, bool *cut_short,
                  vs_error *err)
{
  sweep s = {.o = o, .err = err};
  size_t n = N_SIDES * N_SIDES * N_SIDES + N_BATCHED, i = 0;
  int rc = open_sweep(&s, stream);
  for (; rc == 0 && i < n; i++) {
    if ((o->stop && *o->stop) || (deadline > 0 && now_s() > deadline)) {
      fprintf(stderr, "vsim-calibrate: warning: GEMM sweep stopped after %zu "
              "of %zu shapes (--time-limit or a signal)\n", i, n);
      *cut_short = true;
      break;
    }
    rc = measure(&s, raw, shape_at(i));
  }
  if (rc == 0 && o->verbose)
    fprintf(stderr, "vsim-calibrate: gemm, %zu shapes\n", i);
  close_sweep(&s);
  return rc;
}

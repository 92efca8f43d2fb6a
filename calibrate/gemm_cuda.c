/* gemm_cuda.c - the GEMM sweep (see gemm_cuda.h). Operands hold random
 * bf16 in [-1, 1); row-major C[m x n] = A[m x k] B[k x n] is cuBLAS's
 * column-major C^T = B^T A^T, the same work (only the NN layout is timed;
 * layers also run TN and NT, usually at the same rate on Hopper). */
#include "gemm_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* cuBLAS, opened with dlopen (as NVML is): the binary needs only the
 * driver to run, and without cuBLAS the sweep is skipped with a warning. */
typedef struct cublas_api {
  void *lib;
  /* the header's own declarations give the types (no link needed) */
  __typeof__(&cublasCreate_v2) create;
  __typeof__(&cublasDestroy_v2) destroy;
  __typeof__(&cublasSetStream_v2) set_stream;
  __typeof__(&cublasGemmStridedBatchedEx) gemm;
} cublas_api;

typedef struct sweep {
  const vs_measure_opts *o;
  const vs_gemm_hold *hold;
  cublas_api api;
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

/* Copies symbol name of lib into *fn; false when it is missing. */
static bool sym(void *lib, const char *name, void *fn, size_t fn_size)
{
  void *p = dlsym(lib, name);
  if (p)
    memcpy(fn, &p, fn_size);
  return p != NULL;
}

/* Opens the first cuBLAS the loader finds; false without one. */
static bool open_cublas(cublas_api *a)
{
  static const char *const names[] = {"libcublas.so", "libcublas.so.13",
                                      "libcublas.so.12", "libcublas.so.11"};
  for (size_t i = 0; !a->lib && i < sizeof names / sizeof names[0]; i++)
    a->lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  if (!a->lib)
    return false;
  if (sym(a->lib, "cublasCreate_v2", &a->create, sizeof a->create) &&
      sym(a->lib, "cublasDestroy_v2", &a->destroy, sizeof a->destroy) &&
      sym(a->lib, "cublasSetStream_v2", &a->set_stream,
          sizeof a->set_stream) &&
      sym(a->lib, "cublasGemmStridedBatchedEx", &a->gemm, sizeof a->gemm))
    return true;
  dlclose(a->lib);
  a->lib = NULL;
  return false;
}

/* One launch of g. */
static cublasStatus_t launch(sweep *s, vs_gemm g)
{
  const float alpha = 1.0f, beta = 0.0f;
  return s->api.gemm(
      s->h, CUBLAS_OP_N, CUBLAS_OP_N, (int)g.n, (int)g.m, (int)g.k, &alpha,
      s->b, CUDA_R_16BF, (int)g.n, (long long)(g.k * g.n), s->a, CUDA_R_16BF,
      (int)g.k, (long long)(g.m * g.k), &beta, s->c, CUDA_R_16BF, (int)g.n,
      (long long)(g.m * g.n), (int)g.batch, CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT);
}

/* Seconds per launch of g over k back-to-back launches, queued behind
 * the caller's hold (a spin kernel) so that the host's launch rate does
 * not set the time of small GEMMs; the hold is released on every path. */
static int timed(sweep *s, vs_gemm g, unsigned k, double *secs)
{
  cudaError_t e = cudaSuccess;
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  float ms = 0;
  bool held = s->hold && s->hold->hold(s->hold->ctx) == 0;
  e = cudaEventRecord(s->start, s->stream);
  for (unsigned i = 0; e == cudaSuccess && i < k &&
                       st == CUBLAS_STATUS_SUCCESS; i++)
    st = launch(s, g);
  if (e == cudaSuccess && st == CUBLAS_STATUS_SUCCESS)
    e = cudaEventRecord(s->stop, s->stream);
  if (held)
    s->hold->release(s->hold->ctx);
  if (st != CUBLAS_STATUS_SUCCESS)
    return cublas_error(s, "cublasGemmStridedBatchedEx", st);
  if (e != cudaSuccess || (e = cudaEventSynchronize(s->stop)) != cudaSuccess ||
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
  cublasStatus_t st;
  cudaError_t e;
  if (k < 1)
    k = 1;
  if (k > K_MAX)
    k = K_MAX;
  /* one launch outside any hold first: cuBLAS loads its kernels lazily,
   * which may wait for the device (and so for a spin) */
  if ((st = launch(s, g)) != CUBLAS_STATUS_SUCCESS)
    return cublas_error(s, "cublasGemmStridedBatchedEx", st);
  if ((e = cudaStreamSynchronize(s->stream)) != cudaSuccess)
    return cuda_error(s, "cudaStreamSynchronize", e);
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

/* Fills n bf16 elements at dev with values in [-1, 1) (xorshift on the
 * host, copied in blocks): data like a layer's, not a constant that would
 * let the tensor cores draw less power and clock higher. */
static int fill_random(sweep *s, void *dev, size_t n)
{
  enum { BLOCK = 1 << 22 };
  uint16_t *h = malloc(BLOCK * sizeof *h);
  uint32_t x = 2463534242u;
  cudaError_t e = cudaSuccess;
  if (!h)
    return vs_error_set(s->err, VS_ENOMEM, "GEMM sweep: out of memory");
  for (size_t i = 0; i < BLOCK; i++) {
    float f;
    uint32_t bits;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    f = (float)(x >> 8) / 8388608.0f - 1.0f; /* [-1, 1) */
    memcpy(&bits, &f, sizeof bits);
    h[i] = (uint16_t)(bits >> 16); /* bf16: the float's top half */
  }
  for (size_t done = 0; e == cudaSuccess && done < n; done += BLOCK) {
    size_t part = n - done < BLOCK ? n - done : BLOCK;
    e = cudaMemcpy((uint16_t *)dev + done, h, part * sizeof *h,
                   cudaMemcpyHostToDevice);
  }
  free(h);
  return e == cudaSuccess ? 0 : cuda_error(s, "cudaMemcpy (operands)", e);
}

static int open_sweep(sweep *s, void *stream)
{
  size_t na, nb, nc;
  cudaError_t e;
  cublasStatus_t st;
  int rc;
  s->stream = (cudaStream_t)stream;
  if ((st = s->api.create(&s->h)) != CUBLAS_STATUS_SUCCESS)
    return cublas_error(s, "cublasCreate", st);
  if ((st = s->api.set_stream(s->h, s->stream)) != CUBLAS_STATUS_SUCCESS)
    return cublas_error(s, "cublasSetStream", st);
  if ((e = cudaEventCreate(&s->start)) != cudaSuccess ||
      (e = cudaEventCreate(&s->stop)) != cudaSuccess)
    return cuda_error(s, "cudaEventCreate", e);
  operand_elems(&na, &nb, &nc);
  if ((e = cudaMalloc(&s->a, 2 * na)) != cudaSuccess ||
      (e = cudaMalloc(&s->b, 2 * nb)) != cudaSuccess ||
      (e = cudaMalloc(&s->c, 2 * nc)) != cudaSuccess)
    return cuda_error(s, "cudaMalloc (the operands, 1.1 GiB)", e);
  if ((rc = fill_random(s, s->a, na)) || (rc = fill_random(s, s->b, nb)))
    return rc;
  if ((e = cudaDeviceSynchronize()) != cudaSuccess)
    return cuda_error(s, "cudaDeviceSynchronize", e);
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
    s->api.destroy(s->h);
  if (s->api.lib)
    dlclose(s->api.lib);
}

int vs_gemm_sweep(const vs_measure_opts *o, void *stream,
                  const vs_gemm_hold *hold, double deadline,
                  double (*now_s)(void), vs_raw *raw, bool *cut_short,
                  vs_error *err)
{
  sweep s = {.o = o, .hold = hold, .err = err};
  size_t n = N_SIDES * N_SIDES * N_SIDES + N_BATCHED, i = 0;
  int rc;
  if (!open_cublas(&s.api)) {
    fprintf(stderr, "vsim-calibrate: warning: no cuBLAS library could be "
            "loaded (libcublas.so); GEMMs not measured\n");
    return 0;
  }
  rc = open_sweep(&s, stream);
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

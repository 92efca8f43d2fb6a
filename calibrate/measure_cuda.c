/* measure_cuda.c - the CUDA measurements of vs_measure_run (measure.h).
 *
 * Byte convention: every sample's bytes is the size of one copy or one
 * allocation. A device-to-device copy of N bytes reads N and writes N; the
 * fit reports its bandwidth as 2N / t (calini.h), as STREAM copy does.
 *
 * Device-timed kinds (pinned H2D/D2H, D2D copy engine, D2D SM kernel, P2P):
 * a spin kernel holds the stream, events are recorded around K back-to-back
 * copies queued behind it, the host then releases the spin; one sample is
 * elapsed / K. Pageable copies and the allocation calls are timed with the
 * host's monotonic clock. Below 4x L2 the device copies rotate through a
 * slab of at least 4x L2 so that no copy finds its data in the cache.
 * Sizes are visited in a shuffled order (seeded), each after warm-up. */
#include "measure.h"

#include "kernels.h"

#include <cuda_runtime_api.h>
#ifdef VSIM_HAVE_NVML
#include <nvml.h>
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SIZES 128
#define HOST_ALLOC_MAX (256ull << 20) /* pinning more takes seconds a call */

/* Everything one measurement holds, released by teardown(). */
typedef struct bench {
  const vs_measure_opts *o;      /* options */
  vs_raw *raw;                   /* where samples go */
  vs_error *err;                 /* first error */
  int dev, peer;                 /* devices; peer < 0 without p2p */
  cudaStream_t stream;           /* the timed stream */
  cudaEvent_t start, stop;       /* events around the K copies */
  int *flag_host;                /* mapped pinned flag the spin waits on */
  volatile int *flag_dev;        /* its device address */
  unsigned long long spin_cycles;/* spin time-out */
  void *dsrc, *ddst;             /* device slabs, slab_bytes each */
  void *pdst;                    /* slab on the peer */
  size_t slab_bytes;             /* max(max_bytes, 4 x L2) */
  void *hpinned, *hpageable;     /* host buffers of max_bytes */
  size_t rot;                    /* rotation counter through the slabs */
  int blocks;                    /* SM copy kernel blocks */
  uint64_t l2;                   /* L2 bytes */
  uint64_t sizes[MAX_SIZES];     /* the sweep */
  size_t n_sizes;
  unsigned rng;                  /* xorshift state of the shuffle */
} bench;

static int cuda_fail(bench *b, const char *what, cudaError_t e)
{
  return vs_error_set(b->err, VS_EIO, "%s failed: %s (%s)", what,
                      cudaGetErrorString(e), cudaGetErrorName(e));
}

#define CK(b, call)                                                         \
  do {                                                                      \
    cudaError_t e_ = (call);                                                \
    if (e_ != cudaSuccess)                                                  \
      return cuda_fail((b), #call, e_);                                     \
  } while (0)

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static unsigned next_rand(bench *b)
{
  b->rng ^= b->rng << 13;
  b->rng ^= b->rng >> 17;
  b->rng ^= b->rng << 5;
  return b->rng;
}

/* The sweep: 2^p and 3 * 2^(p-1) from 4 B up to max, shuffled. */
static void make_sizes(bench *b, uint64_t max)
{
  b->n_sizes = 0;
  for (int p = 2; p < 63 && (1ull << p) <= max && b->n_sizes + 2 < MAX_SIZES; p++) {
    b->sizes[b->n_sizes++] = 1ull << p;
    if ((3ull << (p - 1)) <= max)
      b->sizes[b->n_sizes++] = 3ull << (p - 1);
  }
  for (size_t i = b->n_sizes; i > 1; i--) {
    size_t j = next_rand(b) % i;
    uint64_t t = b->sizes[i - 1];
    b->sizes[i - 1] = b->sizes[j];
    b->sizes[j] = t;
  }
}

/* Copies queued back to back per sample: enough to dwarf event resolution. */
static unsigned copies_for(uint64_t bytes)
{
  return bytes <= (1u << 20) ? 32 : bytes <= (64u << 20) ? 8 : 2;
}

/* The slab offset of the next copy of `bytes`: rotates below 4 x L2. */
static size_t next_offset(bench *b, uint64_t bytes)
{
  size_t stride = (size_t)((bytes + 255) & ~255ull);
  size_t slots = stride ? b->slab_bytes / stride : 1;
  if (bytes >= 4 * b->l2 || slots <= 1)
    return 0;
  return (b->rot++ % slots) * stride;
}

/* ------------------------------------------------------------------------
 * Device-timed copies
 * ------------------------------------------------------------------------ */

/* Queues one copy of `bytes` of kind on the stream. */
static cudaError_t queue_copy(bench *b, int kind, uint64_t bytes)
{
  size_t off = next_offset(b, bytes);
  char *src = (char *)b->dsrc + off, *dst = (char *)b->ddst + off;
  switch (kind) {
  case VS_CAL_H2D_PINNED:
    return cudaMemcpyAsync(b->ddst, b->hpinned, bytes, cudaMemcpyHostToDevice, b->stream);
  case VS_CAL_D2H_PINNED:
    return cudaMemcpyAsync(b->hpinned, b->dsrc, bytes, cudaMemcpyDeviceToHost, b->stream);
  case VS_CAL_D2D_COPY_ENGINE:
    return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, b->stream);
  case VS_CAL_D2D_KERNEL:
    return (cudaError_t)vs_kernel_copy(dst, src, bytes, b->blocks, b->stream);
  case VS_CAL_P2P:
    return cudaMemcpyPeerAsync((char *)b->pdst + off, b->peer, src, b->dev,
                               bytes, b->stream);
  default:
    return cudaErrorInvalidValue;
  }
}

/* One device-timed sample: seconds per copy in *secs. */
static int device_sample(bench *b, int kind, uint64_t bytes, double *secs)
{
  unsigned k = copies_for(bytes);
  float ms = 0;
  *(volatile int *)b->flag_host = 0;
  __sync_synchronize();
  CK(b, (cudaError_t)vs_kernel_spin(b->flag_dev, b->spin_cycles, b->stream));
  CK(b, cudaEventRecord(b->start, b->stream));
  for (unsigned i = 0; i < k; i++)
    CK(b, queue_copy(b, kind, bytes));
  CK(b, cudaEventRecord(b->stop, b->stream));
  __sync_synchronize();
  *(volatile int *)b->flag_host = 1;
  CK(b, cudaEventSynchronize(b->stop));
  CK(b, cudaEventElapsedTime(&ms, b->start, b->stop));
  *secs = 1e-3 * (double)ms / k;
  return 0;
}

/* ------------------------------------------------------------------------
 * Host-timed operations
 * ------------------------------------------------------------------------ */

static int pageable_sample(bench *b, int kind, uint64_t bytes, double *secs)
{
  unsigned k = copies_for(bytes);
  double t0 = now_s();
  for (unsigned i = 0; i < k; i++) {
    if (kind == VS_CAL_H2D_PAGEABLE)
      CK(b, cudaMemcpy(b->ddst, b->hpageable, bytes, cudaMemcpyHostToDevice));
    else
      CK(b, cudaMemcpy(b->hpageable, b->dsrc, bytes, cudaMemcpyDeviceToHost));
  }
  CK(b, cudaDeviceSynchronize());
  *secs = (now_s() - t0) / k;
  return 0;
}

/* One malloc/free or cudaMallocHost sample; both times for malloc. */
static int alloc_sample(bench *b, int kind, uint64_t bytes, double *secs,
                        double *free_secs)
{
  void *p = NULL;
  double t0 = now_s(), t1, t2;
  if (kind == VS_CAL_HOST_ALLOC) {
    CK(b, cudaMallocHost(&p, bytes));
    t1 = now_s();
    CK(b, cudaFreeHost(p));
    *secs = t1 - t0;
    return 0;
  }
  CK(b, cudaMalloc(&p, bytes));
  t1 = now_s();
  CK(b, cudaFree(p));
  t2 = now_s();
  *secs = t1 - t0;
  *free_secs = t2 - t1;
  return 0;
}

/* ------------------------------------------------------------------------
 * The sweep
 * ------------------------------------------------------------------------ */

/* Measures kind at every size: warm-up, then samples. */
static int sweep(bench *b, int kind)
{
  uint64_t max = b->o->max_bytes;
  if (kind == VS_CAL_HOST_ALLOC && max > HOST_ALLOC_MAX)
    max = HOST_ALLOC_MAX;
  make_sizes(b, max);
  if (b->o->verbose)
    fprintf(stderr, "vsim-calibrate: %s, %zu sizes\n", vs_cal_kind_name(kind),
            b->n_sizes);
  for (size_t s = 0; s < b->n_sizes; s++) {
    uint64_t bytes = b->sizes[s];
    for (unsigned i = 0; i < b->o->warmup + b->o->samples; i++) {
      double secs = 0, free_secs = 0;
      int rc;
      switch (kind) {
      case VS_CAL_H2D_PAGEABLE:
      case VS_CAL_D2H_PAGEABLE:
        rc = pageable_sample(b, kind, bytes, &secs);
        break;
      case VS_CAL_MALLOC:
      case VS_CAL_HOST_ALLOC:
        rc = alloc_sample(b, kind, bytes, &secs, &free_secs);
        break;
      default:
        rc = device_sample(b, kind, bytes, &secs);
      }
      if (rc)
        return rc;
      if (i < b->o->warmup)
        continue;
      if ((rc = vs_raw_add(b->raw, kind, bytes, i - b->o->warmup, secs, b->err)))
        return rc;
      if (kind == VS_CAL_MALLOC &&
          (rc = vs_raw_add(b->raw, VS_CAL_FREE, bytes, i - b->o->warmup,
                           free_secs, b->err)))
        return rc;
    }
  }
  return 0;
}

/* ------------------------------------------------------------------------
 * Device facts, context cost, set-up
 * ------------------------------------------------------------------------ */

static void version_text(int v, char *buf, size_t len)
{
  snprintf(buf, len, "%d.%d", v / 1000, (v % 1000) / 10);
}

static int describe(bench *b, vs_measure_info *in)
{
  struct cudaDeviceProp p;
  int v = 0, khz = 0;
  CK(b, cudaGetDeviceCount(&in->n_gpus));
  CK(b, cudaGetDeviceProperties(&p, b->dev));
  snprintf(in->device, sizeof in->device, "%s", p.name);
  in->cc_major = p.major;
  in->cc_minor = p.minor;
  in->total_bytes = p.totalGlobalMem;
  in->l2_bytes = (uint64_t)p.l2CacheSize;
  b->blocks = 4 * p.multiProcessorCount;
  if (cudaDriverGetVersion(&v) == cudaSuccess)
    version_text(v, in->driver, sizeof in->driver);
  if (cudaRuntimeGetVersion(&v) == cudaSuccess)
    version_text(v, in->runtime, sizeof in->runtime);
  if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, b->dev) == cudaSuccess)
    in->sm_clock_mhz = khz / 1000;
  if (cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, b->dev) == cudaSuccess)
    in->mem_clock_mhz = khz / 1000;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrGlobalMemoryBusWidth, b->dev) == cudaSuccess)
    in->bus_width_bits = v;
  /* double data rate: two transfers per memory clock */
  in->hbm_peak = 2.0 * in->mem_clock_mhz * 1e6 * in->bus_width_bits / 8.0;
  b->spin_cycles = (unsigned long long)(in->sm_clock_mhz > 0 ? in->sm_clock_mhz : 2000) *
                   1000000ull * 2; /* about 2 s */
#ifdef VSIM_HAVE_NVML
  {
    char bus[64];
    nvmlDevice_t h;
    unsigned u;
    if (nvmlInit_v2() == NVML_SUCCESS) {
      if (cudaDeviceGetPCIBusId(bus, sizeof bus, b->dev) == cudaSuccess &&
          nvmlDeviceGetHandleByPciBusId_v2(bus, &h) == NVML_SUCCESS) {
        in->nvml = true;
        if (nvmlDeviceGetCurrPcieLinkGeneration(h, &u) == NVML_SUCCESS)
          in->pcie_gen = (int)u;
        if (nvmlDeviceGetCurrPcieLinkWidth(h, &u) == NVML_SUCCESS)
          in->pcie_width = (int)u;
        if (nvmlDeviceGetMaxClockInfo(h, NVML_CLOCK_SM, &u) == NVML_SUCCESS)
          in->sm_clock_mhz = (int)u;
        nvmlSystemGetDriverVersion(in->driver, sizeof in->driver);
      }
      nvmlShutdown();
    }
  }
#endif
  return 0;
}

/* Context creation: reset, then time the first runtime call that creates
 * the primary context; its size is the device memory it takes (NVML: used
 * before and after; else total - free right after, which also counts other
 * processes). Runs before anything else is allocated. */
static int context_cost(bench *b, unsigned samples)
{
  for (unsigned i = 0; i < samples; i++) {
    size_t free_b = 0, total_b = 0;
    uint64_t size;
    double t0, t1;
    CK(b, cudaDeviceReset());
    t0 = now_s();
    CK(b, cudaFree(0));
    t1 = now_s();
    CK(b, cudaMemGetInfo(&free_b, &total_b));
    size = total_b - free_b;
    if (vs_raw_add(b->raw, VS_RAW_CONTEXT, size, i, t1 - t0, b->err))
      return b->err->code;
  }
  return 0;
}

static int setup(bench *b)
{
  size_t max = (size_t)b->o->max_bytes;
  int n = 0, can = 0;
  CK(b, cudaSetDevice(b->dev));
  b->slab_bytes = max > 4 * b->l2 ? max : (size_t)(4 * b->l2 + 4096);
  CK(b, cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking));
  CK(b, cudaEventCreate(&b->start));
  CK(b, cudaEventCreate(&b->stop));
  CK(b, cudaHostAlloc((void **)&b->flag_host, sizeof(int), cudaHostAllocMapped));
  CK(b, cudaHostGetDevicePointer((void **)&b->flag_dev, b->flag_host, 0));
  CK(b, cudaMalloc(&b->dsrc, b->slab_bytes));
  CK(b, cudaMalloc(&b->ddst, b->slab_bytes));
  CK(b, cudaMemset(b->dsrc, 1, b->slab_bytes));
  CK(b, cudaMemset(b->ddst, 0, b->slab_bytes));
  CK(b, cudaMallocHost(&b->hpinned, max));
  memset(b->hpinned, 1, max);
  if (!(b->hpageable = malloc(max)))
    return vs_error_set(b->err, VS_ENOMEM, "cannot allocate %zu pageable bytes", max);
  memset(b->hpageable, 1, max); /* touch every page before timing */
  b->peer = -1;
  CK(b, cudaGetDeviceCount(&n));
  if (b->dev + 1 < n) {
    CK(b, cudaDeviceCanAccessPeer(&can, b->dev, b->dev + 1));
    if (can) {
      b->peer = b->dev + 1;
      CK(b, cudaSetDevice(b->peer));
      CK(b, cudaMalloc(&b->pdst, b->slab_bytes));
      CK(b, cudaSetDevice(b->dev));
      CK(b, cudaDeviceEnablePeerAccess(b->peer, 0));
    }
  }
  return 0;
}

static void teardown(bench *b)
{
  if (b->pdst) {
    cudaSetDevice(b->peer);
    cudaFree(b->pdst);
    cudaSetDevice(b->dev);
  }
  cudaFree(b->dsrc);
  cudaFree(b->ddst);
  cudaFreeHost(b->hpinned);
  cudaFreeHost(b->flag_host);
  free(b->hpageable);
  if (b->start)
    cudaEventDestroy(b->start);
  if (b->stop)
    cudaEventDestroy(b->stop);
  if (b->stream)
    cudaStreamDestroy(b->stream);
}

bool vs_measure_available(void)
{
  return true;
}

int vs_measure_run(const vs_measure_opts *opts, vs_raw *raw,
                   vs_measure_info *info, vs_error *err)
{
  static const int kinds[] = {VS_CAL_H2D_PINNED, VS_CAL_D2H_PINNED,
      VS_CAL_H2D_PAGEABLE, VS_CAL_D2H_PAGEABLE, VS_CAL_D2D_COPY_ENGINE,
      VS_CAL_D2D_KERNEL, VS_CAL_P2P, VS_CAL_MALLOC, VS_CAL_HOST_ALLOC};
  bench b;
  int rc, n = 0;

  memset(&b, 0, sizeof b);
  b.o = opts;
  b.raw = raw;
  b.err = err;
  b.dev = opts->device;
  b.rng = opts->seed * 2654435761u + 1u;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0)
    return vs_error_set(err, VS_EIO, "no CUDA device is visible (cudaGetDeviceCount)");
  if (b.dev >= n)
    return vs_error_set(err, VS_EIO, "--device %d: only %d CUDA device(s)", b.dev, n);
  if ((rc = cudaSetDevice(b.dev)) != cudaSuccess)
    return cuda_fail(&b, "cudaSetDevice", (cudaError_t)rc);
  if ((rc = context_cost(&b, 5)) || (rc = describe(&b, info)))
    return rc;
  b.l2 = info->l2_bytes;
  rc = setup(&b);
  for (size_t i = 0; !rc && i < sizeof kinds / sizeof kinds[0]; i++) {
    if (kinds[i] == VS_CAL_P2P && b.peer < 0) {
      if (opts->verbose)
        fprintf(stderr, "vsim-calibrate: p2p skipped (no peer device)\n");
      continue;
    }
    rc = sweep(&b, kinds[i]);
  }
  teardown(&b);
  return rc;
}

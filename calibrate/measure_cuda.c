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
 * Sizes are visited in a shuffled order (seeded), each after warm-up.
 *
 * The spin protocol: the host zeroes the mapped flag, launches the spin,
 * queues the events and copies, then sets the flag on every path (also when
 * queueing fails), before it waits on anything; so the wait cannot be
 * behind a spin nobody will release. A spin that times out (the flag not
 * seen) still leaves a valid sample, since the events follow it; the sample
 * is taken again, and after SPIN_MAX_LATE time-outs the spin is dropped.
 * NVML is opened with dlopen when the driver has it, never linked; the
 * context's size is NVML's used memory after creation minus before. */
#include "measure.h"

#include "kernels.h"
#if VSIM_HAVE_CUBLAS
#include "gemm_cuda.h"
#endif

#include <cuda_runtime_api.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SIZES 128
#define HOST_ALLOC_MAX (256ull << 20) /* pinning more takes seconds a call */
#define SPIN_TIMEOUT_NS 1000000000ull /* 1 s; queueing K copies takes us */
#define SPIN_MAX_LATE 3               /* time-outs before the spin is dropped */

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
  int *spin_late;                /* device int: the last spin timed out */
  bool spin;                     /* samples are held behind the spin */
  unsigned n_late;               /* spins that timed out so far */
  void *dsrc, *ddst;             /* device slabs, slab_bytes each */
  void *pdst;                    /* slab on the peer */
  size_t slab_bytes;             /* max(max_bytes, 4 x L2) */
  void *hpinned, *hpageable;     /* host buffers of max_bytes */
  size_t rot;                    /* rotation counter through the slabs */
  int n_sms;                     /* multiprocessors */
  int blocks;                    /* SM copy kernel blocks: all resident */
  uint64_t l2;                   /* L2 bytes */
  uint64_t sizes[MAX_SIZES];     /* the sweep */
  size_t n_sizes;                /* sizes in the sweep */
  unsigned rng;                  /* xorshift state of the shuffle, never 0 */
  double deadline;               /* now_s() past which no size starts; 0 none */
  bool out_of_time;              /* the deadline passed */
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

/* Copies queued back to back per device-timed sample: enough to dwarf
 * the events' resolution (about 0.5 us). */
static unsigned copies_for(uint64_t bytes)
{
  return bytes <= (1u << 20) ? 32 : bytes <= (64u << 20) ? 8 : 2;
}

/* Copies per host-timed (pageable) sample: the host clock resolves
 * nanoseconds, so only small copies need averaging; large ones once. */
static unsigned host_copies_for(uint64_t bytes)
{
  return bytes <= (1u << 20) ? 32 : bytes <= (16u << 20) ? 4 : 1;
}

static void warn(const char *what)
{
  fprintf(stderr, "vsim-calibrate: warning: %s\n", what);
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

/* Queues the start event, k copies and the stop event; on failure *what
 * names the call. */
static cudaError_t queue_timed(bench *b, int kind, uint64_t bytes, unsigned k,
                               const char **what)
{
  cudaError_t e;
  *what = "cudaEventRecord(start)";
  if ((e = cudaEventRecord(b->start, b->stream)) != cudaSuccess)
    return e;
  *what = "queueing a timed copy";
  for (unsigned i = 0; i < k; i++)
    if ((e = queue_copy(b, kind, bytes)) != cudaSuccess)
      return e;
  *what = "cudaEventRecord(stop)";
  return cudaEventRecord(b->stop, b->stream);
}

/* One device-timed sample: seconds per copy in *secs. The events follow
 * the spin on the stream, so the spin's time is not in the sample. */
static int device_sample(bench *b, int kind, uint64_t bytes, double *secs)
{
  unsigned k = copies_for(bytes);
  const char *what = "";
  cudaError_t e;
  float ms = 0;
  int late = 0;
  if (b->spin) {
    *(volatile int *)b->flag_host = 0;
    __sync_synchronize();
    CK(b, (cudaError_t)vs_kernel_spin(b->flag_dev, SPIN_TIMEOUT_NS,
                                      b->spin_late, b->stream));
  }
  e = queue_timed(b, kind, bytes, k, &what);
  if (b->spin) { /* released on every path, before any wait */
    __sync_synchronize();
    *(volatile int *)b->flag_host = 1;
  }
  if (e != cudaSuccess) {
    char msg[128];
    snprintf(msg, sizeof msg, "%s (%s, %llu bytes)", what,
             vs_cal_kind_name(kind), (unsigned long long)bytes);
    return cuda_fail(b, msg, e);
  }
  CK(b, cudaEventSynchronize(b->stop));
  CK(b, cudaEventElapsedTime(&ms, b->start, b->stop));
  if (b->spin)
    CK(b, cudaMemcpy(&late, b->spin_late, sizeof late, cudaMemcpyDeviceToHost));
  if (late) {
    if (++b->n_late >= SPIN_MAX_LATE) {
      b->spin = false;
      warn("the spin kernel timed out repeatedly (it does not see the mapped "
           "flag); timing copies without it, so small copies include the gaps "
           "between launches");
    }
    return device_sample(b, kind, bytes, secs); /* at most SPIN_MAX_LATE deep */
  }
  *secs = 1e-3 * (double)ms / k;
  return 0;
}

/* ------------------------------------------------------------------------
 * Host-timed operations
 * ------------------------------------------------------------------------ */

static int pageable_sample(bench *b, int kind, uint64_t bytes, double *secs)
{
  unsigned k = host_copies_for(bytes);
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

/* One run of kind at bytes: its time in *secs (cudaFree's in *free_secs). */
static int sample(bench *b, int kind, uint64_t bytes, double *secs,
                  double *free_secs)
{
  switch (kind) {
  case VS_CAL_H2D_PAGEABLE:
  case VS_CAL_D2H_PAGEABLE:
    return pageable_sample(b, kind, bytes, secs);
  case VS_CAL_MALLOC:
  case VS_CAL_HOST_ALLOC:
    return alloc_sample(b, kind, bytes, secs, free_secs);
  default:
    return device_sample(b, kind, bytes, secs);
  }
}

/* True once the --time-limit deadline has passed; says so the first time. */
static bool out_of_time(bench *b, int kind, size_t done)
{
  bool stop = b->o->stop && *b->o->stop;
  if (b->out_of_time || stop || (b->deadline > 0 && now_s() > b->deadline)) {
    if (!b->out_of_time && stop)
      fprintf(stderr, "vsim-calibrate: warning: stopped by a signal in %s after "
              "%zu of %zu sizes; the sizes and kinds left are not measured\n",
              vs_cal_kind_name(kind), done, b->n_sizes);
    else if (!b->out_of_time)
      fprintf(stderr, "vsim-calibrate: warning: --time-limit %u s reached in "
              "%s after %zu of %zu sizes; the sizes and kinds left are not "
              "measured\n", b->o->time_limit_s, vs_cal_kind_name(kind), done,
              b->n_sizes);
    b->out_of_time = true;
  }
  return b->out_of_time;
}

/* Measures kind at every size: warm-up, then samples. Stops between sizes
 * once the deadline has passed. */
static int sweep(bench *b, int kind)
{
  uint64_t max = b->o->max_bytes;
  double t0 = now_s();
  if (kind == VS_CAL_HOST_ALLOC && max > HOST_ALLOC_MAX)
    max = HOST_ALLOC_MAX;
  make_sizes(b, max);
  if (b->o->verbose)
    fprintf(stderr, "vsim-calibrate: %s, %zu sizes\n", vs_cal_kind_name(kind),
            b->n_sizes);
  for (size_t s = 0; s < b->n_sizes && !out_of_time(b, kind, s); s++) {
    uint64_t bytes = b->sizes[s];
    for (unsigned i = 0; i < b->o->warmup + b->o->samples; i++) {
      double secs = 0, free_secs = 0;
      int rc = sample(b, kind, bytes, &secs, &free_secs);
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
  if (b->o->verbose)
    fprintf(stderr, "vsim-calibrate: %s took %.1f s\n", vs_cal_kind_name(kind),
            now_s() - t0);
  return 0;
}

/* ------------------------------------------------------------------------
 * Device facts, context cost, set-up
 * ------------------------------------------------------------------------ */

static void version_text(int v, char *buf, size_t len)
{
  snprintf(buf, len, "%d.%d", v / 1000, (v % 1000) / 10);
}

/* NVML as nvml.h declares it (a stable C ABI): every call returns 0 on
 * success; a device is an opaque handle; clock type 1 is the SM clock. */
typedef struct nvml_device_st *nvml_device;
typedef int (*nvml_call)(void);
typedef int (*nvml_by_bus)(const char *, nvml_device *);
typedef int (*nvml_by_index)(unsigned, nvml_device *);
typedef int (*nvml_uint)(nvml_device, unsigned *);
typedef int (*nvml_count)(unsigned *);
typedef int (*nvml_clock)(nvml_device, int, unsigned *);
typedef int (*nvml_text)(char *, unsigned);
typedef struct nvml_memory_st { /* nvmlMemory_t */
  unsigned long long total, free, used;
} nvml_memory;
typedef int (*nvml_meminfo)(nvml_device, nvml_memory *);
#define NVML_CLOCK_SM_ 1
#define NVML_TEXT_MAX 80 /* NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE */

/* The driver's NVML, opened once for the whole run; lib is NULL when the
 * library or the device cannot be found. */
typedef struct nvml {
  void *lib;            /* dlopen handle */
  nvml_device h;        /* the measured device */
  nvml_call fini;       /* nvmlShutdown */
  nvml_meminfo meminfo; /* nvmlDeviceGetMemoryInfo, or NULL */
} nvml;

/* dlsym into a function pointer of fn_size bytes; false when missing. */
static bool nvml_sym(void *lib, const char *name, void *fn, size_t fn_size)
{
  void *p = dlsym(lib, name);
  if (p)
    memcpy(fn, &p, fn_size);
  return p != NULL;
}

#define NVML_SYM(lib, name, fn) nvml_sym((lib), (name), &(fn), sizeof(fn))

/* The NVML facts of the device on handle h: PCIe link (the best the GPU
 * and slot support: the current link idles at a lower generation), SM
 * clock, driver version. */
static void nvml_facts(void *lib, nvml_device h, vs_measure_info *in)
{
  nvml_uint gen = NULL, width = NULL;
  nvml_clock max_clock = NULL;
  nvml_text driver = NULL;
  char text[NVML_TEXT_MAX];
  unsigned u;
  in->nvml = true;
  if (NVML_SYM(lib, "nvmlDeviceGetMaxPcieLinkGeneration", gen) && gen(h, &u) == 0)
    in->pcie_gen = (int)u;
  if (NVML_SYM(lib, "nvmlDeviceGetMaxPcieLinkWidth", width) && width(h, &u) == 0)
    in->pcie_width = (int)u;
  if (NVML_SYM(lib, "nvmlDeviceGetMaxClockInfo", max_clock) &&
      max_clock(h, NVML_CLOCK_SM_, &u) == 0)
    in->sm_clock_mhz = (int)u;
  if (NVML_SYM(lib, "nvmlSystemGetDriverVersion", driver) &&
      driver(text, sizeof text) == 0) {
    text[sizeof text - 1] = '\0';
    snprintf(in->driver, sizeof in->driver, "%s", text);
  }
}

/* Opens the driver's libnvidia-ml when it is there and finds the device
 * by PCI bus id, or as index 0 when NVML and CUDA both see one GPU; leaves
 * nv->lib NULL otherwise (silently: NVML is optional). */
static void nvml_open(bench *b, int n_gpus, nvml *nv)
{
  nvml_call init = NULL;
  nvml_by_bus by_bus = NULL;
  nvml_by_index by_index = NULL;
  nvml_count count = NULL;
  char bus[64];
  unsigned n = 0;
  bool found;
  memset(nv, 0, sizeof *nv);
  if (!(nv->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL)))
    return;
  if (!NVML_SYM(nv->lib, "nvmlInit_v2", init) ||
      !NVML_SYM(nv->lib, "nvmlShutdown", nv->fini) || init() != 0) {
    dlclose(nv->lib);
    nv->lib = NULL;
    return;
  }
  found = cudaDeviceGetPCIBusId(bus, sizeof bus, b->dev) == cudaSuccess &&
          NVML_SYM(nv->lib, "nvmlDeviceGetHandleByPciBusId_v2", by_bus) &&
          by_bus(bus, &nv->h) == 0;
  if (!found && n_gpus == 1 &&
      NVML_SYM(nv->lib, "nvmlDeviceGetCount_v2", count) && count(&n) == 0 &&
      n == 1 && NVML_SYM(nv->lib, "nvmlDeviceGetHandleByIndex_v2", by_index))
    found = by_index(0, &nv->h) == 0;
  (void)cudaGetLastError();
  if (!found) {
    nv->fini();
    dlclose(nv->lib);
    nv->lib = NULL;
    return;
  }
  if (!NVML_SYM(nv->lib, "nvmlDeviceGetMemoryInfo", nv->meminfo))
    nv->meminfo = NULL;
}

static void nvml_close(nvml *nv)
{
  if (!nv->lib)
    return;
  nv->fini();
  dlclose(nv->lib);
  nv->lib = NULL;
}

/* Device memory in use as NVML reports it (every process, no context
 * needed); false without NVML. */
static bool nvml_used(const nvml *nv, uint64_t *used)
{
  nvml_memory m;
  if (!nv->lib || !nv->meminfo || nv->meminfo(nv->h, &m) != 0)
    return false;
  *used = m.used;
  return true;
}

static int describe(bench *b, const nvml *nv, vs_measure_info *in)
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
  b->n_sms = p.multiProcessorCount;
  in->sms = p.multiProcessorCount;
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
  if (nv->lib)
    nvml_facts(nv->lib, nv->h, in);
  (void)cudaGetLastError(); /* an attribute that failed above is not fatal */
  return 0;
}

/* Context creation: reset, then time the first runtime call that creates
 * the primary context. Its size is the device memory it takes: NVML's used
 * memory after minus before (free memory before and after, which needs no
 * context to read); without NVML, total - free right after (which also
 * counts other processes). Runs before anything else is allocated. */
static int context_cost(bench *b, const nvml *nv, unsigned samples)
{
  for (unsigned i = 0; i < samples; i++) {
    size_t free_b = 0, total_b = 0;
    uint64_t size, before = 0, after = 0;
    bool by_nvml;
    double t0, t1;
    CK(b, cudaDeviceReset());
    by_nvml = nvml_used(nv, &before);
    t0 = now_s();
    CK(b, cudaFree(0));
    t1 = now_s();
    CK(b, cudaMemGetInfo(&free_b, &total_b));
    /* a delta of 0 means NVML has not seen the context yet: not a size */
    by_nvml = by_nvml && nvml_used(nv, &after) && after > before;
    size = by_nvml ? after - before : total_b - free_b;
    if (vs_raw_add(b->raw, VS_RAW_CONTEXT, size, i, t1 - t0, b->err))
      return b->err->code;
  }
  return 0;
}

/* The mapped flag the spin polls; false (time without the spin, with a
 * warning) where pinned host memory cannot be mapped for the device. */
static bool setup_flag(bench *b)
{
  void *dev = NULL;
  cudaError_t e = cudaHostAlloc((void **)&b->flag_host, sizeof(int),
                                cudaHostAllocMapped);
  if (e != cudaSuccess)
    b->flag_host = NULL; /* teardown frees only what was allocated */
  else
    e = cudaHostGetDevicePointer(&dev, b->flag_host, 0);
  if (e != cudaSuccess) {
    fprintf(stderr, "vsim-calibrate: warning: no mapped pinned flag (%s); "
            "timing copies without the spin kernel\n", cudaGetErrorString(e));
    (void)cudaGetLastError();
    return false;
  }
  b->flag_dev = dev;
  *(volatile int *)b->flag_host = 1;
  return true;
}

static int setup(bench *b)
{
  size_t max = (size_t)b->o->max_bytes;
  int n = 0, can = 0, per_sm = 0;
  CK(b, cudaSetDevice(b->dev));
  CK(b, (cudaError_t)vs_kernel_preload(&per_sm));
  b->blocks = (per_sm > 0 ? per_sm : 1) * b->n_sms;
  b->slab_bytes = max > 4 * b->l2 ? max : (size_t)(4 * b->l2 + 4096);
  CK(b, cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking));
  CK(b, cudaEventCreate(&b->start));
  CK(b, cudaEventCreate(&b->stop));
  CK(b, cudaMalloc((void **)&b->spin_late, sizeof(int)));
  b->spin = setup_flag(b);
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
  CK(b, cudaDeviceSynchronize()); /* the memsets are done before timing */
  return 0;
}

/* Releases what setup() took, whatever it reached; a spin still waiting
 * (after an error) is released first. */
static void teardown(bench *b)
{
  if (b->flag_host)
    *(volatile int *)b->flag_host = 1;
  if (b->stream)
    cudaStreamSynchronize(b->stream);
  if (b->pdst) {
    cudaSetDevice(b->peer);
    cudaFree(b->pdst);
    cudaSetDevice(b->dev);
  }
  cudaFree(b->dsrc);
  cudaFree(b->ddst);
  cudaFree(b->spin_late);
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

#if VSIM_HAVE_CUBLAS
/* The GEMM sweep's hold: the spin kernel, as device_sample queues copies
 * behind it. */
static int gemm_hold(void *ctx)
{
  bench *b = ctx;
  *(volatile int *)b->flag_host = 0;
  __sync_synchronize();
  return vs_kernel_spin(b->flag_dev, SPIN_TIMEOUT_NS, b->spin_late, b->stream);
}

static void gemm_release(void *ctx)
{
  bench *b = ctx;
  __sync_synchronize();
  *(volatile int *)b->flag_host = 1;
}
#endif

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
  nvml nv;
  int rc, n = 0;

  memset(&b, 0, sizeof b);
  b.o = opts;
  b.raw = raw;
  b.err = err;
  b.dev = opts->device;
  b.rng = opts->seed * 2654435761u + 1u;
  if (b.rng == 0) /* xorshift stays at 0 */
    b.rng = 1;
  if (opts->time_limit_s)
    b.deadline = now_s() + opts->time_limit_s;
  if ((rc = cudaGetDeviceCount(&n)) != cudaSuccess)
    return cuda_fail(&b, "cudaGetDeviceCount (is a GPU and a driver new enough "
                     "for this CUDA runtime there?)", (cudaError_t)rc);
  if (n == 0)
    return vs_error_set(err, VS_EIO, "no CUDA device is visible (cudaGetDeviceCount)");
  if (b.dev >= n)
    return vs_error_set(err, VS_EIO, "--device %d: only %d CUDA device(s)", b.dev, n);
  if ((rc = cudaSetDevice(b.dev)) != cudaSuccess)
    return cuda_fail(&b, "cudaSetDevice", (cudaError_t)rc);
  nvml_open(&b, n, &nv);
  if ((rc = context_cost(&b, &nv, 5)) || (rc = describe(&b, &nv, info))) {
    nvml_close(&nv);
    return rc;
  }
  nvml_close(&nv);
  b.l2 = info->l2_bytes;
  rc = setup(&b);
  for (size_t i = 0; !rc && !b.out_of_time && i < sizeof kinds / sizeof kinds[0]; i++) {
    if (kinds[i] == VS_CAL_P2P && b.peer < 0) {
      if (opts->verbose)
        fprintf(stderr, "vsim-calibrate: p2p skipped (no peer device)\n");
      continue;
    }
    rc = sweep(&b, kinds[i]);
  }
#if VSIM_HAVE_CUBLAS
  if (!rc && !b.out_of_time) {
    vs_gemm_hold hold = {gemm_hold, gemm_release, &b};
    rc = vs_gemm_sweep(opts, b.stream, b.spin ? &hold : NULL, b.deadline,
                       now_s, raw, &b.out_of_time, err);
  }
#endif
  teardown(&b);
  info->cut_short = b.out_of_time;
  return rc;
}

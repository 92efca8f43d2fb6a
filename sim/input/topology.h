/* topology.h - the hardware a job runs on: one GPU model, the node it sits in,
 * the links between GPUs and nodes, and its price.
 *
 * Values are stored in base units (bytes, bytes/s, seconds) after parsing,
 * except the peak_tflops_* fields, which stay in TFLOP/s as written;
 * vs_origins remembers where each came from for error messages. Loading
 * checks every key's type and bounds and that required keys are present. A
 * topology is built once and read-only afterwards. */
#ifndef VS_TOPOLOGY_H
#define VS_TOPOLOGY_H

#include "config.h"
#include "error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The slowest rate a topology may state (1 MB/s): any real link is far
 * faster, and slower ones would overflow integer nanoseconds. Calibrated
 * rates are 0 ("no size dependence") or at least this. */
#define VS_MIN_RATE 1e6

/* The fastest rate a topology may state (100 TB/s): over 10 times the
 * fastest real link or memory (topology.c), so that a slipped unit, or a
 * fitted slope of rounding noise, is refused rather than simulated.
 * Calibrated rates too. */
#define VS_MAX_RATE 1e14

/* The kinds vsim-calibrate measures and fits (name, enum). Each kind has the
 * [calibration] keys <name>_bandwidth, _latency, _r2, _max_rel_error,
 * _points, _min_bytes, _max_bytes, _breakpoints, _piece_bandwidths and
 * _piece_latencies. */
#define VS_CAL_KINDS(X)                                                    \
  X(VS_CAL_H2D_PINNED, "h2d_pinned")                                       \
  X(VS_CAL_D2H_PINNED, "d2h_pinned")                                       \
  X(VS_CAL_H2D_PAGEABLE, "h2d_pageable")                                   \
  X(VS_CAL_D2H_PAGEABLE, "d2h_pageable")                                   \
  X(VS_CAL_D2D_COPY_ENGINE, "d2d_copy_engine")                             \
  X(VS_CAL_D2D_KERNEL, "d2d_kernel")                                       \
  X(VS_CAL_P2P, "p2p")                                                     \
  X(VS_CAL_MALLOC, "malloc")                                               \
  X(VS_CAL_FREE, "free")                                                   \
  X(VS_CAL_HOST_ALLOC, "host_alloc")

enum {
#define VS_CAL_ENUM(id, name) id,
  VS_CAL_KINDS(VS_CAL_ENUM)
#undef VS_CAL_ENUM
  VS_CAL_N_KINDS
};

/* One kind's fitted alpha-beta model t = latency + bytes / bandwidth, as
 * vsim-calibrate wrote it; all zero when the kind was not calibrated. A
 * piecewise fit has breakpoints (in bytes per copy) and one bandwidth and
 * latency per piece, smallest sizes first; bandwidth and latency are then
 * those of the last piece (the regime training transfers live in).
 * Bandwidths of the d2d kinds count read + write (2 x bytes copied). */
typedef struct vs_cal_fit {
  double bandwidth;              /* bytes/s; 0 = not size-dependent */
  double latency;                /* seconds */
  double r2;                     /* coefficient of determination */
  double max_rel_error;          /* largest |fit - median| / median */
  uint64_t points;               /* distinct sizes fitted */
  uint64_t min_bytes;            /* smallest measured size */
  uint64_t max_bytes;            /* largest measured size */
  vs_count_list breakpoints;     /* sizes where the regime changes */
  vs_real_list piece_bandwidths; /* bytes/s per piece (n = breaks + 1) */
  vs_real_list piece_latencies;  /* seconds per piece */
} vs_cal_fit;

/* The sizes at which a run evaluated one calibrated curve, to tell the user
 * when it went outside the measured range (used = false: never). */
typedef struct vs_cal_range {
  double lo, hi;                 /* bytes per copy */
  bool used;
} vs_cal_range;

typedef struct vs_cal_seen {
  vs_cal_range kinds[VS_CAL_N_KINDS];
} vs_cal_seen;

/* Bytes a sample of kind moves per byte copied: 2 for the device-to-device
 * kinds (read + write, as STREAM copy and hbm_bandwidth count), else 1. */
double vs_cal_bytes_factor(int kind);

/* Seconds the calibrated curve of kind gives for `bytes` (in the
 * convention of its bandwidth: read + write for d2d kinds): the piece whose
 * size range holds bytes / vs_cal_bytes_factor(kind), latency + bytes /
 * bandwidth. Records the size in seen (when not NULL). Outside the
 * measured range the nearest piece is extended; vs_cal_warn_range says so. */
double vs_cal_seconds(const vs_cal_fit *fit, int kind, double bytes,
                      vs_cal_seen *seen);

/* Widens seen's range of kind by bytes (bytes per copy). */
void vs_cal_seen_add(vs_cal_seen *seen, int kind, double bytes);

/* Merges b into a. */
void vs_cal_seen_merge(vs_cal_seen *a, const vs_cal_seen *b);

struct vs_topology;

/* Writes one line per curve that seen used outside the sizes topo's
 * calibration measured ("<prefix>p2p was measured from 4 B to 1 GiB; this
 * run needs up to 2 GiB: the last piece is extended"); returns how many. */
int vs_cal_warn_range(FILE *out, const char *prefix, const struct vs_topology *topo,
                      const vs_cal_seen *seen);

/* The name of a VS_CAL_* kind ("h2d_pinned"), or NULL when out of range. */
const char *vs_cal_kind_name(int kind);

/* The VS_CAL_* kind called name, or -1. */
int vs_cal_kind_find(const char *name);

/* The figures a calibrated fit gives in place of nominal ones
 * (vs_topology fit_parts): a transfer rate and a latency. */
enum { VS_FIT_RATE = 1, VS_FIT_LATENCY = 2 };

/* The cuBLAS workspaces a training GPU holds: PyTorch allocates one per
 * cuBLAS handle and stream (aten/src/ATen/cuda/CublasHandlePool.cpp,
 * setWorkspaceForHandle), handles are per thread, and training runs its
 * matmuls on two, the forward's and autograd's device thread's (measured
 * on an H200, tests/data/groundtruth/h200.csv: 64 MiB more allocated
 * after the first step than the model states, two 32 MiB workspaces). */
#define VS_BLAS_WORKSPACES 2

typedef struct vs_topology {
  /* [gpu] */
  char name[VS_NAME_MAX];        /* "H100-SXM-80GB" */
  uint64_t memory_bytes;         /* capacity the CUDA runtime reports */
  double hbm_bandwidth;          /* bytes/s */
  double peak_tflops_bf16;       /* dense tensor-core TFLOP/s */
  double peak_tflops_fp16;       /* dense tensor-core TFLOP/s */
  double peak_tflops_fp32;       /* TFLOP/s */
  double peak_tflops_fp8;        /* TFLOP/s; 0 when the GPU has no FP8 */
  bool fp8_transposes;           /* FP8 GEMMs need a column-wise (transposed)
                                    copy of each operand beside the row-wise
                                    one (Hopper, Ada; not Blackwell) */
  uint64_t context_bytes;        /* CUDA context outside the allocator */
  uint64_t cublas_workspace_bytes; /* cuBLAS workspace per handle
                                     (VS_BLAS_WORKSPACES of them) */
  uint64_t nccl_bytes;           /* NCCL buffers per communicator */
  double compute_efficiency;     /* achieved fraction of peak for GEMMs:
                                    the best shape's (a matmul finder's) */
  vs_count_list compute_efficiency_shape; /* m, n, k of the GEMM that
                                    measured it (n = 0: not given; then it
                                    is the full-wave rate itself) */
  uint64_t sms;                  /* streaming multiprocessors (0: unknown,
                                    no wave quantization) */
  double gemm_k_overhead;        /* a GEMM tile's fixed work in units of
                                    its inner dimension k */
  double kernel_floor;           /* seconds each CUDA kernel costs beyond
                                    its work (launch and tail) */
  vs_count_list flash_seq_lens;  /* sequence lengths (ascending) of the
                                    FlashAttention rates below; none: flash
                                    attention at compute_efficiency */
  vs_real_list flash_tflops_d64; /* its forward + backward TFLOP/s at head
                                    dim 64 (FLOPs as FlashAttention counts
                                    them), not causal, at those lengths */
  vs_real_list flash_tflops_d128; /* ... at head dim 128 */
  vs_real_list flash_tflops_causal_d64;  /* ... causal, head dim 64 */
  vs_real_list flash_tflops_causal_d128; /* ... causal, head dim 128 */
  double memory_efficiency;      /* achieved fraction of hbm_bandwidth */
  /* [node] */
  uint64_t gpus_per_node;        /* GPUs in one node */
  uint64_t host_memory_bytes;    /* host DRAM per node */
  double pcie_bandwidth;         /* bytes/s per GPU, one direction */
  double pcie_latency;           /* seconds */
  uint64_t gpus_per_pcie_switch; /* GPUs sharing one host link */
  double nvme_bandwidth;         /* bytes/s per node */
  uint64_t nvme_capacity_bytes;  /* bytes per node */
  double host_memory_bandwidth;  /* bytes/s the node's host memory moves
                                    for copies to and from its GPUs and
                                    NVMe, all together; 0: not a limit */
  double cpu_optimizer_rate;     /* parameters per second the node's CPUs
                                    step with Adam (offload), all GPUs of
                                    the node together */
  double pageable_h2d_bandwidth; /* bytes/s of one copy from pageable host
                                    memory to a GPU, which the driver
                                    stages through pinned buffers with the
                                    host CPU (vs_topology_pageable_rate) */
  double pageable_d2h_bandwidth; /* the same, GPU to pageable memory */
  /* [network] */
  double intra_bandwidth;        /* NVLink bytes/s per GPU, one direction */
  double intra_latency;          /* seconds */
  double inter_bandwidth;        /* NIC bytes/s per GPU, one direction */
  double inter_latency;          /* seconds */
  vs_count_list intra_busbw_sizes; /* message sizes (bytes, ascending) of
                                    the measured bus bandwidths below; none:
                                    collectives inside a node are timed
                                    from intra_bandwidth and intra_latency */
  vs_real_list intra_busbw;      /* nccl-tests bus bandwidth (bytes/s) of
                                    all-gather and reduce-scatter inside a
                                    node at those sizes */
  vs_real_list intra_allreduce_busbw; /* ... of all-reduce (none: as
                                    intra_busbw) */
  /* [cost] */
  double usd_per_gpu_hour;       /* 0 when unknown */
  /* [calibration] */
  uint32_t measured;             /* the figures vsim-calibrate measured on
                                    this machine: bit i is
                                    vs_topology_measurable's name i; once
                                    loaded, those in effect (not --set,
                                    not replaced by a fit) */
  vs_cal_fit cal[VS_CAL_N_KINDS]; /* measured fits, by VS_CAL_* kind */
  /* derived by vs_topology_load: the calibrated curves time transfers in
   * place of the nominal figures (false when a nominal key was --set) */
  uint8_t fit_parts[VS_CAL_N_KINDS]; /* the nominal figures kind k's fit
                                    replaced (apply_calibration): its rate
                                    (VS_FIT_RATE), latency (VS_FIT_LATENCY)
                                    or both; 0: its fit is not in use */
  bool hbm_curve;                /* d2d_kernel times memory-bound ops */
  bool nvlink_curve;             /* p2p times transfers inside a node */
  double pcie_d2h_bandwidth;     /* device-to-host bytes/s per GPU:
                                    pcie_bandwidth, or the d2h_pinned fit */
  vs_origins origins;            /* where every value came from */
} vs_topology;

/* The key table of topology.ini (for --set and README). */
const vs_keytab *vs_topology_keys(void);

/* Name and text of the compiled-in default (topologies/h100-sxm-8x.ini). */
const char *vs_topology_default_name(void);
const char *vs_topology_default_text(void);

/* Loads path (or the built-in default when path is NULL) into topo, applies
 * the n_sets overrides "sec.key=value" (the leading "topology." already
 * stripped) and validates. VS_EIO / VS_EINPUT with file:line:key on error.
 * Calibrated values then replace nominal ones, unless the nominal key was
 * itself given with --set: d2d_kernel sets hbm_bandwidth (and
 * memory_efficiency = 1, the measured figure being achieved bandwidth),
 * p2p sets intra_bandwidth and intra_latency, h2d_pinned sets
 * pcie_bandwidth and pcie_latency. The d2d_kernel and p2p curves, every
 * piece, then time memory-bound ops and NVLink transfers (hbm_curve,
 * nvlink_curve). A piecewise kind must give n + 1 piece values for n
 * breakpoints, ascending, the last equal to its bandwidth and latency. */
int vs_topology_load(vs_topology *topo, const char *path,
                     const char *const *sets, size_t n_sets, vs_error *err);

/* As vs_topology_load, but the [calibration] values are only loaded, not
 * applied over the nominal ones (vsim-calibrate reads a base this way). */
int vs_topology_load_nominal(vs_topology *topo, const char *path,
                             const char *const *sets, size_t n_sets,
                             vs_error *err);

/* Which figures a finished topology keeps: the file's and defaults
 * alone, or with its [calibration] applied. */
typedef enum { VS_TOPO_NOMINAL, VS_TOPO_CALIBRATED } vs_topo_figures;

/* The two halves of vs_topology_load, for callers that load one file once
 * and apply many sets of overrides to copies of it: defaults and the file
 * (path NULL: the built-in), nothing checked; then the overrides, checks
 * and, with VS_TOPO_CALIBRATED, the calibration. */
int vs_topology_load_base(vs_topology *topo, const char *path, vs_error *err);
int vs_topology_finish(vs_topology *topo, const char *const *sets,
                       size_t n_sets, vs_topo_figures figures, vs_error *err);

/* True when kind's bandwidth was given in [calibration]. */
bool vs_topology_calibrated(const vs_topology *topo, int kind);

/* The keys outside [calibration] that vsim-calibrate measures
 * ("compute_efficiency", ...; no other section has these names),
 * NULL-terminated: the names `[calibration] measured` takes. */
extern const char *const vs_topology_measurable[];

/* Marks section.name measured in topo->measured; false when it is none of
 * vs_topology_measurable. */
bool vs_topology_mark_measured(vs_topology *topo, const char *section,
                               const char *name);

/* Whether section.name is marked measured (topo->measured). */
bool vs_topology_is_measured(const vs_topology *topo, const char *section,
                             const char *name);

/* What of a loaded topo's figures were measured and are in effect, as a
 * line of text into buf (of len): the keys, then the fits that replaced
 * nominal figures, e.g. "kernel_floor, pcie_latency; curves d2d_kernel
 * (HBM), p2p (NVLink)"; "" when nothing is. */
void vs_topology_measured_text(const vs_topology *topo, char *buf, size_t len);

/* The fits in effect whose curve a key given with --set made or changed
 * (not measurements, so not in vs_topology_measured_text), e.g. "p2p
 * (NVLink)"; "" when none. */
void vs_topology_given_curves_text(const vs_topology *topo, char *buf,
                                   size_t len);

/* True for the kinds whose curves vsim times transfers with: d2d_kernel
 * (memory-bound kernels), p2p (NVLink), h2d_pinned and d2h_pinned (PCIe,
 * each way), h2d_pageable and d2h_pageable (copies from and to pageable
 * host memory). */
bool vs_cal_times_transfers(int kind);

/* The most bytes/s one copy of `bytes` between a GPU and pageable host
 * memory moves at, in the direction of kind (VS_CAL_H2D_PAGEABLE or
 * VS_CAL_D2H_PAGEABLE): the calibrated curve of kind at that size, whose
 * size goes to seen (may be NULL), or else [node] pageable_h2d_bandwidth
 * or pageable_d2h_bandwidth. It shares its PCIe link besides. */
double vs_topology_pageable_rate(const vs_topology *topo, int kind,
                                 double bytes, vs_cal_seen *seen);

/* True for those of them that vsim times size by size, each with its own
 * piece (d2d_kernel, p2p); the PCIe kinds give one rate and a small-copy
 * latency to the link the copies share. */
bool vs_cal_by_piece(int kind);

/* The latency of a curve's smallest sizes: its first piece's, which is a
 * time (a later piece's intercept may be negative). */
double vs_cal_small_latency(const vs_cal_fit *fit);

/* Applies one "section.key=value" override; used by vs_topology_load. */
int vs_topology_set(vs_topology *topo, const char *assignment, vs_error *err);

#endif

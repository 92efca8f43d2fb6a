/* topology.c - topology.ini's key table, defaults and validation, and the
 * [calibration] section vsim-calibrate writes: its fits replace the nominal
 * link and memory figures once a file is loaded. */
#include "topology.h"

#include "units.h"

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define K(sec, key, ty, field, ...)                                         \
  {.section = sec, .name = key, .type = ty,                                  \
   .offset = offsetof(vs_topology, field), __VA_ARGS__}

/* Bounds that keep every simulated time inside what integer nanoseconds
 * hold, far outside any real hardware: 1 MB/s, 1 GFLOP/s, 1 s per hop. */
#define MIN_RATE VS_MIN_RATE
#define MIN_TFLOPS 1e-3
#define MAX_LATENCY 1.0
/* Figures no real hardware reaches, so that a slip of units (80 TiB of
 * HBM, 989,000 TFLOP/s) is refused rather than simulated: over 10 times
 * the largest of each today. GPU memory: 288 GB (AMD Instinct MI355X and
 * NVIDIA B300 datasheets); peak: 9 PFLOP/s dense FP4 (NVIDIA B200
 * datasheet); HBM: 8 TB/s (B200); NVLink 5: 1.8 TB/s per GPU; host memory:
 * 48 TB in one system image (HPE Superdome Flex datasheet). */
#define MAX_GPU_BYTES (4.0 * 1099511627776.0)      /* 4 TiB */
#define MAX_TFLOPS 1e5                             /* 100 PFLOP/s */
#define MAX_RATE VS_MAX_RATE                        /* 100 TB/s */
#define MAX_HOST_BYTES (1024.0 * 1099511627776.0)  /* 1 PiB */
/* Parameters per second the host CPUs of one node step with Adam when the
 * optimizer is offloaded: DeepSpeedCPUAdam stepped 10B parameters in
 * 2.57 s on a DGX-2's two Xeon Platinum 8168 (Ren et al. 2021,
 * ZeRO-Offload, arXiv 2101.06840, Table 4: an optimizer microbenchmark,
 * not an end-to-end figure): 3.9e9. Set it for your host's CPUs. */
#define CPU_OPTIMIZER_RATE 3.9e9
#define CPU_OPTIMIZER_RATE_DOC "3.9e9 (ZeRO-Offload's CPU Adam on 2 x Xeon 8168)"
/* One copy between a GPU and pageable host memory: cudaMemcpyAsync stages
 * it through the driver's pinned buffers, copying with the host CPU, so
 * it runs at the host's rate, not the link's. The defaults are the last
 * pieces of vsim-calibrate's h2d_pageable and d2h_pageable fits on the
 * H200 host of calibrate/data/h200.csv (topologies/h200-calibrated.ini:
 * copies of 44 MiB and 1.2 MiB to 1 GiB; a microbenchmark, a property of
 * the host's CPUs and memory rather than the GPU's). Set them for your
 * host, or calibrate it. */
#define PAGEABLE_H2D_RATE 7.44e9
#define PAGEABLE_D2H_RATE 15.07e9
#define PAGEABLE_H2D_DOC "7.44GB/s (an H200 host, vsim-calibrate)"
#define PAGEABLE_D2H_DOC "15.07GB/s (an H200 host, vsim-calibrate)"

#define NOT_CAL .default_doc = "not calibrated"
/* The ten [calibration] keys of one kind (see vs_cal_fit). */
#define CAL(id, kind)                                                       \
  K("calibration", kind "_bandwidth", VS_KEY_RATE, cal[id].bandwidth, .lo = 0, .hi = MAX_RATE, NOT_CAL), \
  K("calibration", kind "_latency", VS_KEY_LATENCY, cal[id].latency, .lo = -MAX_LATENCY, .hi = MAX_LATENCY, NOT_CAL), \
  K("calibration", kind "_r2", VS_KEY_REAL, cal[id].r2, .lo = -1e300, .hi = 1, NOT_CAL), \
  K("calibration", kind "_max_rel_error", VS_KEY_REAL, cal[id].max_rel_error, .lo = 0, NOT_CAL), \
  K("calibration", kind "_points", VS_KEY_COUNT, cal[id].points, .lo = 0, NOT_CAL), \
  K("calibration", kind "_min_bytes", VS_KEY_SIZE, cal[id].min_bytes, .lo = 0, NOT_CAL), \
  K("calibration", kind "_max_bytes", VS_KEY_SIZE, cal[id].max_bytes, .lo = 0, NOT_CAL), \
  K("calibration", kind "_breakpoints", VS_KEY_LIST, cal[id].breakpoints, .positive = true, NOT_CAL), \
  K("calibration", kind "_piece_bandwidths", VS_KEY_RATES, cal[id].piece_bandwidths, .lo = 0, .hi = MAX_RATE, NOT_CAL), \
  K("calibration", kind "_piece_latencies", VS_KEY_LATENCIES, cal[id].piece_latencies, .lo = -MAX_LATENCY, .hi = MAX_LATENCY, NOT_CAL),

const char *const vs_topology_measurable[] = {
    "name", "memory", "hbm_bandwidth", "sms", "context_memory",
    "compute_efficiency", "compute_efficiency_shape", "gemm_k_overhead",
    "kernel_floor", "pcie_bandwidth", "pcie_latency", NULL};

static const vs_key topology_keys[] = {
    K("gpu", "name", VS_KEY_NAME, name, .required = true,
      .default_doc = "required"),
    K("gpu", "memory", VS_KEY_SIZE, memory_bytes, .positive = true,
      .hi = MAX_GPU_BYTES, .required = true, .default_doc = "required"),
    K("gpu", "hbm_bandwidth", VS_KEY_RATE, hbm_bandwidth, .positive = true,
      .lo = MIN_RATE, .hi = MAX_RATE, .required = true,
      .default_doc = "required"),
    K("gpu", "peak_tflops_bf16", VS_KEY_REAL, peak_tflops_bf16,
      .positive = true, .lo = MIN_TFLOPS, .hi = MAX_TFLOPS, .required = true,
      .default_doc = "required"),
    K("gpu", "peak_tflops_fp16", VS_KEY_REAL, peak_tflops_fp16,
      .positive = true, .lo = MIN_TFLOPS, .hi = MAX_TFLOPS, .required = true,
      .default_doc = "required"),
    K("gpu", "peak_tflops_fp32", VS_KEY_REAL, peak_tflops_fp32,
      .positive = true, .lo = MIN_TFLOPS, .hi = MAX_TFLOPS, .required = true,
      .default_doc = "required"),
    K("gpu", "peak_tflops_fp8", VS_KEY_REAL, peak_tflops_fp8, .lo = 0,
      .hi = MAX_TFLOPS, .default_doc = "0 (no FP8)"),
    K("gpu", "fp8_transposes", VS_KEY_BOOL, fp8_transposes,
      .default_doc = "true (Hopper, Ada)"),
    K("gpu", "context_memory", VS_KEY_SIZE, context_bytes, .hi = MAX_GPU_BYTES,
      .default_doc = "400MiB"),
    K("gpu", "cublas_workspace", VS_KEY_SIZE, cublas_workspace_bytes,
      .hi = MAX_GPU_BYTES, .default_doc = "32MiB"),
    K("gpu", "nccl_memory", VS_KEY_SIZE, nccl_bytes, .hi = MAX_GPU_BYTES,
      .default_doc = "512MiB"),
    K("gpu", "compute_efficiency", VS_KEY_REAL, compute_efficiency, .lo = 0.01,
      .hi = 1, .default_doc = "0.7"),
    K("gpu", "compute_efficiency_shape", VS_KEY_LIST, compute_efficiency_shape,
      .positive = true, .hi = 1e9,
      .default_doc = "not given (compute_efficiency is the full-wave rate)"),
    K("gpu", "sms", VS_KEY_COUNT, sms, .hi = 100000,
      .default_doc = "0 (unknown: no wave quantization)"),
    K("gpu", "gemm_k_overhead", VS_KEY_REAL, gemm_k_overhead, .lo = 0,
      .hi = 1e6,
      .default_doc = "128 (fitted to XLA's measured H100 matmul table)"),
    K("gpu", "kernel_floor", VS_KEY_LATENCY, kernel_floor, .hi = 1e-3,
      .default_doc = "0 (not modelled)"),
    K("gpu", "flash_seq_lens", VS_KEY_LIST, flash_seq_lens, .positive = true,
      .hi = 1e9, .default_doc = "none (flash attention at compute_efficiency)"),
    K("gpu", "flash_tflops_d64", VS_KEY_REALS, flash_tflops_d64, .lo = 0.001,
      .hi = MAX_TFLOPS, .default_doc = "none"),
    K("gpu", "flash_tflops_d128", VS_KEY_REALS, flash_tflops_d128, .lo = 0.001,
      .hi = MAX_TFLOPS, .default_doc = "none"),
    K("gpu", "flash_tflops_causal_d64", VS_KEY_REALS, flash_tflops_causal_d64,
      .lo = 0.001, .hi = MAX_TFLOPS, .default_doc = "none"),
    K("gpu", "flash_tflops_causal_d128", VS_KEY_REALS, flash_tflops_causal_d128,
      .lo = 0.001, .hi = MAX_TFLOPS, .default_doc = "none"),
    K("gpu", "memory_efficiency", VS_KEY_REAL, memory_efficiency, .lo = 0.01,
      .hi = 1, .default_doc = "0.8"),
    K("node", "gpus", VS_KEY_COUNT, gpus_per_node, .positive = true,
      .required = true, .default_doc = "required"),
    K("node", "host_memory", VS_KEY_SIZE, host_memory_bytes, .positive = true,
      .hi = MAX_HOST_BYTES, .default_doc = "1TiB"),
    K("node", "pcie_bandwidth", VS_KEY_RATE, pcie_bandwidth, .lo = MIN_RATE,
      .hi = MAX_RATE, .default_doc = "25GB/s"),
    K("node", "pcie_latency", VS_KEY_LATENCY, pcie_latency, .hi = MAX_LATENCY,
      .default_doc = "2us"),
    K("node", "gpus_per_pcie_switch", VS_KEY_COUNT, gpus_per_pcie_switch,
      .positive = true, .default_doc = "2"),
    K("node", "nvme_bandwidth", VS_KEY_RATE, nvme_bandwidth, .lo = MIN_RATE,
      .hi = MAX_RATE, .default_doc = "10GB/s"),
    K("node", "nvme_capacity", VS_KEY_SIZE, nvme_capacity_bytes,
      .default_doc = "0 (none)"),
    K("node", "host_memory_bandwidth", VS_KEY_RATE, host_memory_bandwidth,
      .lo = 0, .hi = MAX_RATE, .default_doc = "0 (not a limit)"),
    K("node", "cpu_optimizer_rate", VS_KEY_REAL, cpu_optimizer_rate, .lo = 1e6,
      .hi = 1e13, .default_doc = CPU_OPTIMIZER_RATE_DOC),
    K("node", "pageable_h2d_bandwidth", VS_KEY_RATE, pageable_h2d_bandwidth,
      .lo = MIN_RATE, .hi = MAX_RATE, .default_doc = PAGEABLE_H2D_DOC),
    K("node", "pageable_d2h_bandwidth", VS_KEY_RATE, pageable_d2h_bandwidth,
      .lo = MIN_RATE, .hi = MAX_RATE, .default_doc = PAGEABLE_D2H_DOC),
    K("network", "intra_bandwidth", VS_KEY_RATE, intra_bandwidth,
      .lo = MIN_RATE, .hi = MAX_RATE, .required = true,
      .default_doc = "required"),
    K("network", "intra_latency", VS_KEY_LATENCY, intra_latency,
      .hi = MAX_LATENCY, .default_doc = "3us"),
    K("network", "inter_bandwidth", VS_KEY_RATE, inter_bandwidth,
      .lo = MIN_RATE, .hi = MAX_RATE, .required = true,
      .default_doc = "required"),
    K("network", "inter_latency", VS_KEY_LATENCY, inter_latency,
      .hi = MAX_LATENCY, .default_doc = "5us"),
    K("network", "intra_busbw_sizes", VS_KEY_LIST, intra_busbw_sizes,
      .positive = true, .hi = 1e15,
      .default_doc = "none (intra_bandwidth and intra_latency)"),
    K("network", "intra_busbw", VS_KEY_RATES, intra_busbw, .lo = MIN_RATE,
      .hi = MAX_RATE, .default_doc = "none"),
    K("network", "intra_allreduce_busbw", VS_KEY_RATES, intra_allreduce_busbw,
      .lo = MIN_RATE, .hi = MAX_RATE, .default_doc = "intra_busbw"),
    K("cost", "usd_per_gpu_hour", VS_KEY_REAL, usd_per_gpu_hour, .lo = 0,
      .hi = 1e4, .default_doc = "0 (unknown)"),
    K("calibration", "measured", VS_KEY_FLAGS, measured,
      .choices = vs_topology_measurable,
      .default_doc = "none (nominal figures)"),
    VS_CAL_KINDS(CAL)};
#undef CAL
#undef K

static const vs_keytab topology_tab = {
    topology_keys, sizeof topology_keys / sizeof topology_keys[0], "topology",
    NULL, NULL};

const vs_keytab *vs_topology_keys(void) { return &topology_tab; }

/* Defaults for the optional keys: generic figures, documented in README.md. */
static void set_defaults(vs_topology *t)
{
  memset(t, 0, sizeof *t);
  t->context_bytes = 400ull << 20;
  /* Transformer Engine keeps row- and column-wise FP8 copies of GEMM
   * operands on Hopper and Ada, one on Blackwell (TE docs,
   * low_precision_training/performance_considerations.rst) */
  t->fp8_transposes = true;
  t->cublas_workspace_bytes = 32ull << 20;
  t->nccl_bytes = 512ull << 20;
  t->compute_efficiency = 0.7;
  /* a tile runs at k / (k + 128) of its rate: fitted with cost.c's tile
   * rates to XLA's measured H100 matmul table (matmul_interpolator_data.h,
   * sm_90) */
  t->gemm_k_overhead = 128;
  t->memory_efficiency = 0.8;
  t->host_memory_bytes = 1ull << 40;
  t->pcie_bandwidth = 25e9;
  t->pcie_latency = 2e-6;
  t->gpus_per_pcie_switch = 2;
  t->nvme_bandwidth = 10e9;
  t->cpu_optimizer_rate = CPU_OPTIMIZER_RATE;
  t->pageable_h2d_bandwidth = PAGEABLE_H2D_RATE;
  t->pageable_d2h_bandwidth = PAGEABLE_D2H_RATE;
  t->intra_latency = 3e-6;
  t->inter_latency = 5e-6;
}

const char *vs_cal_kind_name(int kind)
{
  static const char *const names[] = {
#define VS_CAL_NAME(id, name) name,
      VS_CAL_KINDS(VS_CAL_NAME)
#undef VS_CAL_NAME
  };
  return kind >= 0 && kind < VS_CAL_N_KINDS ? names[kind] : NULL;
}

int vs_cal_kind_find(const char *name)
{
  for (int k = 0; k < VS_CAL_N_KINDS; k++) {
    if (strcmp(vs_cal_kind_name(k), name) == 0)
      return k;
  }
  return -1;
}

bool vs_topology_calibrated(const vs_topology *topo, int kind)
{
  char key[64];
  const char *name = vs_cal_kind_name(kind);
  if (!name)
    return false;
  snprintf(key, sizeof key, "%s_bandwidth", name);
  return vs_conf_is_set(&topology_tab, &topo->origins, "calibration", key);
}

bool vs_cal_times_transfers(int kind)
{
  return kind == VS_CAL_D2D_KERNEL || kind == VS_CAL_P2P ||
         kind == VS_CAL_H2D_PINNED || kind == VS_CAL_D2H_PINNED ||
         kind == VS_CAL_H2D_PAGEABLE || kind == VS_CAL_D2H_PAGEABLE;
}

double vs_topology_pageable_rate(const vs_topology *topo, int kind,
                                 double bytes, vs_cal_seen *seen)
{
  double nominal = kind == VS_CAL_H2D_PAGEABLE ? topo->pageable_h2d_bandwidth
                                               : topo->pageable_d2h_bandwidth;
  double seconds;
  if (!(topo->fit_parts[kind] & VS_FIT_RATE) || !(bytes > 0))
    return nominal;
  seconds = vs_cal_seconds(&topo->cal[kind], kind, bytes, seen);
  /* a piece's line may start below 0 (h200-calibrated.ini's last
   * h2d_pageable piece): its own rate where its time is not above 0 */
  return seconds > 0 ? bytes / seconds : nominal;
}

bool vs_cal_by_piece(int kind)
{
  return kind == VS_CAL_D2D_KERNEL || kind == VS_CAL_P2P;
}

double vs_cal_small_latency(const vs_cal_fit *fit)
{
  return fit->piece_latencies.n ? fit->piece_latencies.values[0] : fit->latency;
}

/* True when key k of the table was given with --set (origin line 0). */
static bool key_set_by_flag(const vs_topology *t, size_t k)
{
  return t->origins.keys[k].set && t->origins.keys[k].line == 0;
}

/* True when section.name was given with --set. */
static bool set_by_flag(const vs_topology *t, const char *section,
                        const char *name)
{
  int i = vs_conf_find(&topology_tab, section, name);
  return i >= 0 && key_set_by_flag(t, (size_t)i);
}

/* The index of section.name among vs_topology_measurable (names no
 * other section has), or -1. */
static int measurable_index(const char *section, const char *name)
{
  if (vs_conf_find(&topology_tab, section, name) < 0)
    return -1;
  for (int i = 0; vs_topology_measurable[i]; i++)
    if (strcmp(vs_topology_measurable[i], name) == 0)
      return i;
  return -1;
}

/* Whether calibrated kind's fit takes the place of section.name's nominal
 * figure, its `part` (VS_FIT_RATE or VS_FIT_LATENCY), where that key was
 * not given with --set; if so, the fit is in use for that part and the
 * key's own value, measured or not, is not. */
static bool fit_replaces(vs_topology *t, int kind, int part,
                         const char *section, const char *name)
{
  int i = measurable_index(section, name);
  if (set_by_flag(t, section, name))
    return false;
  t->fit_parts[kind] |= (uint8_t)part;
  if (i >= 0)
    t->measured &= ~(1u << i);
  return true;
}

/* Replaces nominal figures by calibrated ones (see vs_topology_load). */
static void apply_calibration(vs_topology *t)
{
  if (vs_topology_calibrated(t, VS_CAL_D2D_KERNEL)) {
    bool bw = fit_replaces(t, VS_CAL_D2D_KERNEL, VS_FIT_RATE, "gpu",
                           "hbm_bandwidth");
    bool eff = set_by_flag(t, "gpu", "memory_efficiency");
    if (bw)
      t->hbm_bandwidth = t->cal[VS_CAL_D2D_KERNEL].bandwidth;
    if (bw && !eff) /* the curve's rate is achieved, not a peak */
      t->memory_efficiency = 1.0;
    t->hbm_curve = bw && !eff;
  }
  if (vs_topology_calibrated(t, VS_CAL_P2P)) {
    bool bw = fit_replaces(t, VS_CAL_P2P, VS_FIT_RATE, "network",
                           "intra_bandwidth");
    bool lat = fit_replaces(t, VS_CAL_P2P, VS_FIT_LATENCY, "network",
                            "intra_latency");
    if (bw)
      t->intra_bandwidth = t->cal[VS_CAL_P2P].bandwidth;
    if (lat)
      t->intra_latency = vs_cal_small_latency(&t->cal[VS_CAL_P2P]);
    t->nvlink_curve = bw && lat;
  }
  if (vs_topology_calibrated(t, VS_CAL_H2D_PINNED)) {
    if (fit_replaces(t, VS_CAL_H2D_PINNED, VS_FIT_RATE, "node",
                     "pcie_bandwidth"))
      t->pcie_bandwidth = t->cal[VS_CAL_H2D_PINNED].bandwidth;
    if (fit_replaces(t, VS_CAL_H2D_PINNED, VS_FIT_LATENCY, "node",
                     "pcie_latency"))
      t->pcie_latency = vs_cal_small_latency(&t->cal[VS_CAL_H2D_PINNED]);
  }
  if (vs_topology_calibrated(t, VS_CAL_H2D_PAGEABLE) &&
      fit_replaces(t, VS_CAL_H2D_PAGEABLE, VS_FIT_RATE, "node",
                   "pageable_h2d_bandwidth"))
    t->pageable_h2d_bandwidth = t->cal[VS_CAL_H2D_PAGEABLE].bandwidth;
  if (vs_topology_calibrated(t, VS_CAL_D2H_PAGEABLE) &&
      fit_replaces(t, VS_CAL_D2H_PAGEABLE, VS_FIT_RATE, "node",
                   "pageable_d2h_bandwidth"))
    t->pageable_d2h_bandwidth = t->cal[VS_CAL_D2H_PAGEABLE].bandwidth;
  t->pcie_d2h_bandwidth = t->pcie_bandwidth;
  if (vs_topology_calibrated(t, VS_CAL_D2H_PINNED) &&
      !set_by_flag(t, "node", "pcie_bandwidth")) {
    t->pcie_d2h_bandwidth = t->cal[VS_CAL_D2H_PINNED].bandwidth;
    t->fit_parts[VS_CAL_D2H_PINNED] |= VS_FIT_RATE;
  }
}

/* A measured key given with --set is the user's figure, not a
 * measurement. */
static void drop_overridden_measurements(vs_topology *t)
{
  for (size_t k = 0; t->measured && k < topology_tab.n_keys; k++) {
    const vs_key *key = &topology_tab.keys[k];
    int i;
    if (key_set_by_flag(t, k) &&
        (i = measurable_index(key->section, key->name)) >= 0)
      t->measured &= ~(1u << i);
  }
}

/* NVLink figures the user set (--set), or measured (a p2p calibration),
 * time collectives inside a node in place of the topology file's
 * bus-bandwidth curve, unless the curve itself was set. */
static void prefer_set_links(vs_topology *t)
{
  if ((set_by_flag(t, "network", "intra_bandwidth") ||
       set_by_flag(t, "network", "intra_latency") || t->nvlink_curve) &&
      !set_by_flag(t, "network", "intra_busbw_sizes"))
    t->intra_busbw_sizes.n = t->intra_busbw.n = t->intra_allreduce_busbw.n = 0;
}

bool vs_topology_mark_measured(vs_topology *topo, const char *section,
                               const char *name)
{
  int i = measurable_index(section, name);
  if (i >= 0)
    topo->measured |= 1u << i;
  return i >= 0;
}

bool vs_topology_is_measured(const vs_topology *topo, const char *section,
                             const char *name)
{
  int i = measurable_index(section, name);
  return i >= 0 && (topo->measured >> i & 1u);
}

/* The name of fit `kind`, with the figures it gives in this topology
 * (fit_parts): "p2p (NVLink)", or "p2p (NVLink latency)" where --set gave
 * the rate, "d2d_kernel (HBM bandwidth)" where memory_efficiency was given
 * (hbm_curve off); NULL for a kind vsim does not read. */
static const char *fit_label(const vs_topology *t, int kind)
{
  static const char *const labels[VS_CAL_N_KINDS][3] = {
      [VS_CAL_D2D_KERNEL] = {"d2d_kernel (HBM)", "d2d_kernel (HBM bandwidth)"},
      [VS_CAL_P2P] = {"p2p (NVLink)", "p2p (NVLink bandwidth)",
                      "p2p (NVLink latency)"},
      [VS_CAL_H2D_PINNED] = {"h2d_pinned (PCIe)", "h2d_pinned (PCIe bandwidth)",
                             "h2d_pinned (PCIe latency)"},
      [VS_CAL_D2H_PINNED] = {"d2h_pinned (PCIe)"},
      [VS_CAL_H2D_PAGEABLE] = {"h2d_pageable (pageable copies)"},
      [VS_CAL_D2H_PAGEABLE] = {"d2h_pageable (pageable copies)"}};
  int parts = t->fit_parts[kind];
  const char *one = labels[kind][parts == VS_FIT_RATE      ? 1
                                 : parts == VS_FIT_LATENCY ? 2
                                                           : 0];
  /* d2d_kernel gives one figure, its rate; the curve times memory-bound
   * ops unless memory_efficiency was given (then its rate at that) */
  if (kind == VS_CAL_D2D_KERNEL)
    one = labels[kind][t->hbm_curve ? 0 : 1];
  return one ? one : labels[kind][0]; /* a kind that gives one figure */
}

/* True when a key that shapes fit `kind`'s curve ([calibration]
 * <kind>_bandwidth, _latency, _breakpoints, _piece_bandwidths or
 * _piece_latencies; not its record of the fit, r2 and the like) was given
 * with --set: the curve is then the user's, not a measurement. */
static bool curve_set_by_flag(const vs_topology *t, int kind)
{
  static const char *const shape[] = {"bandwidth", "latency", "breakpoints",
                                      "piece_bandwidths", "piece_latencies"};
  const char *name = vs_cal_kind_name(kind);
  char key[64];
  for (size_t i = 0; name && i < sizeof shape / sizeof shape[0]; i++) {
    snprintf(key, sizeof key, "%s_%s", name, shape[i]);
    if (set_by_flag(t, "calibration", key))
      return true;
  }
  return false;
}

/* Where a calibrated curve's figures came from. */
typedef enum { CURVE_MEASURED, CURVE_GIVEN_WITH_SET } curve_source;

/* The labels of the fits in effect (fit_parts) whose curve came from
 * `source`, ", "-separated into fits[len]; their count. */
static size_t curve_labels(const vs_topology *t, curve_source source,
                           char *fits, size_t len)
{
  bool by_flag = source == CURVE_GIVEN_WITH_SET;
  size_t used = 0, n = 0;
  fits[0] = '\0';
  for (int k = 0; k < VS_CAL_N_KINDS; k++) {
    const char *label = fit_label(t, k);
    if (t->fit_parts[k] && label && curve_set_by_flag(t, k) == by_flag &&
        vs_conf_append_item(fits, len, &used, n ? ", " : "", label,
                            strlen(label)))
      n++;
  }
  return n;
}

void vs_topology_measured_text(const vs_topology *topo, char *buf, size_t len)
{
  char keys[320] = "", fits[160];
  size_t n_keys = 0,
         n_fits = curve_labels(topo, CURVE_MEASURED, fits, sizeof fits);
  /* ", "-separated; each list has room for all its items */
  for (int i = 0; vs_topology_measurable[i]; i++)
    if (topo->measured >> i & 1u)
      vs_conf_append_item(keys, sizeof keys, &n_keys, n_keys ? ", " : "",
                          vs_topology_measurable[i],
                          strlen(vs_topology_measurable[i]));
  if (len > 0)
    snprintf(buf, len, "%s%s%s%s", keys, n_keys && n_fits ? "; " : "",
             n_fits ? "curves " : "", fits);
}

void vs_topology_given_curves_text(const vs_topology *topo, char *buf,
                                   size_t len)
{
  if (len > 0)
    curve_labels(topo, CURVE_GIVEN_WITH_SET, buf, len);
}

/* VS_EINPUT for section.key: where it was given, then the reason (fmt). */
static int key_error(const vs_topology *t, vs_error *err, const char *section,
                     const char *key, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static int key_error(const vs_topology *t, vs_error *err, const char *section,
                     const char *key, const char *fmt, ...)
{
  char where[640], why[320];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  return vs_error_set(err, VS_EINPUT, "%s: %s",
                      vs_conf_where(&topology_tab, &t->origins, section, key,
                                    where, sizeof where),
                      why);
}

/* Whether [calibration] <name><suffix> was given. */
static bool range_given(const vs_topology *t, const char *name,
                        const char *suffix)
{
  char key[64];
  snprintf(key, sizeof key, "%s%s", name, suffix);
  return vs_conf_is_set(&topology_tab, &t->origins, "calibration", key);
}

/* The curve's shape, once its lists are consistent: the time at the start
 * of every piece is not negative (the first piece's latency is a time; a
 * later piece's is the intercept of its line, which may be below 0 as
 * long as the line is above 0 where the piece starts), breakpoints lie in
 * the measured range, and a curve vsim times transfers with grows with
 * size in its last piece. */
static int check_curve_shape(const vs_topology *t, int kind, vs_error *err)
{
  const vs_cal_fit *f = &t->cal[kind];
  const char *name = vs_cal_kind_name(kind);
  size_t pieces = f->piece_bandwidths.n ? f->piece_bandwidths.n : 1;
  char key[64];

  for (size_t j = 0; j < pieces; j++) {
    double bw = f->piece_bandwidths.n ? f->piece_bandwidths.values[j] : f->bandwidth;
    double lat = f->piece_latencies.n ? f->piece_latencies.values[j] : f->latency;
    double start = j ? (double)f->breakpoints.values[j - 1] : 0.0;
    double t0 = lat + (bw > 0 ? start * vs_cal_bytes_factor(kind) / bw : 0.0);
    /* 1 ns of slack: the rate read back from text is the fit's to the
     * last bit only, and vs_cal_seconds clamps at 0 anyway */
    if (t0 < -1e-9) {
      snprintf(key, sizeof key, "%s_%s", name,
               f->piece_latencies.n ? "piece_latencies" : "latency");
      return key_error(t, err, "calibration", key,
                       "piece %zu starts at %.0f bytes with a time of %.6g "
                       "us; a time cannot be negative",
                       j + 1, start, t0 * 1e6);
    }
  }
  if (f->breakpoints.n > 0 && !(range_given(t, name, "_min_bytes") &&
                                 range_given(t, name, "_max_bytes"))) {
    snprintf(key, sizeof key, "%s_breakpoints", name);
    return key_error(t, err, "calibration", key,
                     "needs %s_min_bytes and %s_max_bytes: the sizes "
                     "measured, which breakpoints lie in (and outside which "
                     "vsim says that it extends a piece)", name, name);
  }
  for (size_t j = 0; j < f->breakpoints.n; j++) {
    uint64_t b = f->breakpoints.values[j];
    if (b < f->min_bytes || b > f->max_bytes) {
      snprintf(key, sizeof key, "%s_breakpoints", name);
      return key_error(t, err, "calibration", key,
                       "breakpoint %llu is outside the measured sizes "
                       "(%s_min_bytes %llu to %s_max_bytes %llu)",
                       (unsigned long long)b, name,
                       (unsigned long long)f->min_bytes, name,
                       (unsigned long long)f->max_bytes);
    }
  }
  if (vs_cal_times_transfers(kind) && vs_topology_calibrated(t, kind) &&
      !(f->bandwidth > 0)) {
    snprintf(key, sizeof key, "%s_bandwidth", name);
    return key_error(t, err, "calibration", key,
                     "vsim times transfers with this curve, so its last "
                     "piece needs a rate above 0 (0, no size dependence, "
                     "fits only the allocation kinds)");
  }
  return 0;
}

/* [gpu] peak_tflops_fp8: 0 (no FP8 tensor cores) or a real peak, at
 * least the 1 GFLOP/s every other peak needs. */
static int check_fp8_peak(const vs_topology *t, vs_error *err)
{
  if (t->peak_tflops_fp8 == 0 || t->peak_tflops_fp8 >= MIN_TFLOPS)
    return 0;
  return key_error(t, err, "gpu", "peak_tflops_fp8",
                   "must be 0 (no FP8 tensor cores) or at least 0.001");
}

/* [gpu] memory above what the libraries take on every GPU before any
 * tensor (the CUDA context and the cuBLAS workspaces, vs_layout's
 * framework memory): a smaller one could never hold a step. */
static int check_gpu_memory(const vs_topology *t, vs_error *err)
{
  const char *const libs[] = {"context_memory", "cublas_workspace"};
  const uint64_t takes[] = {t->context_bytes,
                            VS_BLAS_WORKSPACES * t->cublas_workspace_bytes};
  uint64_t libraries = takes[0] + takes[1];
  bool memory_given;
  char b[16], m[16];
  if (t->memory_bytes > libraries)
    return 0;
  /* a library's size given by --set is to blame where it alone takes the
   * whole memory, unless memory was given by --set too */
  memory_given =
      vs_conf_set_by_option(&topology_tab, &t->origins, "gpu", "memory");
  for (int i = 0; i < 2 && !memory_given; i++)
    if (vs_conf_set_by_option(&topology_tab, &t->origins, "gpu", libs[i]) &&
        takes[i] >= t->memory_bytes)
      return key_error(t, err, "gpu", libs[i],
                       "context_memory and two cublas_workspace would take "
                       "%s on every GPU before any tensor, all of [gpu] "
                       "memory's %s or more",
                       vs_format_bytes(libraries, b, sizeof b),
                       vs_format_bytes(t->memory_bytes, m, sizeof m));
  return key_error(t, err, "gpu", "memory",
                   "must be more than the %s that context_memory and two "
                   "cublas_workspace take on every GPU before any tensor",
                   vs_format_bytes(libraries, b, sizeof b));
}

/* [node] host_memory_bandwidth: 0 (not a limit) or a real rate. */
static int check_host_memory_bandwidth(const vs_topology *t, vs_error *err)
{
  if (t->host_memory_bandwidth == 0 || t->host_memory_bandwidth >= MIN_RATE)
    return 0;
  return key_error(t, err, "node", "host_memory_bandwidth",
                   "must be 0 (host memory is not a limit) or at least 1 MB/s");
}

/* A measured curve: its points (key xs_key) ascending, and each table of
 * values given (keys ys_keys) one value per point, none above `most` (0:
 * no bound; `most_key` names it); `required` tables must be given
 * whenever points are, and points without any table would go unread.
 * Errors name the key and say `per` (what one value is for). */
typedef struct curve_keys {
  const char *section, *xs_key, *per;
  const vs_count_list *xs;
  const vs_real_list *ys[4];
  const char *ys_keys[4];
  size_t n_ys, required;
  double most;
  const char *most_key;
} curve_keys;

static int check_curve(const vs_topology *t, const curve_keys *c,
                       vs_error *err)
{
  size_t given = 0;
  for (size_t i = 1; i < c->xs->n; i++)
    if (c->xs->values[i] <= c->xs->values[i - 1])
      return key_error(t, err, c->section, c->xs_key, "must be ascending");
  for (size_t i = 0; i < c->n_ys; i++)
    if ((c->ys[i]->n || i < c->required) && c->ys[i]->n != c->xs->n)
      return key_error(t, err, c->section, c->ys_keys[i], "needs one %s of %s",
                       c->per, c->xs_key);
  for (size_t i = 0; i < c->n_ys; i++)
    given += c->ys[i]->n > 0;
  if (c->xs->n > 0 && given == 0)
    return key_error(t, err, c->section, c->xs_key,
                     "has no effect without a list of one %s (%s, ...)",
                     c->per, c->ys_keys[0]);
  for (size_t i = 0; c->most > 0 && i < c->n_ys; i++)
    for (size_t j = 0; j < c->ys[i]->n; j++)
      if (c->ys[i]->values[j] > c->most)
        return key_error(t, err, c->section, c->ys_keys[i],
                         "its %g is above the GPU's %s (%g): a measured rate "
                         "cannot exceed the peak; lower the rate or raise "
                         "the peak",
                         c->ys[i]->values[j], c->most_key, c->most);
  return 0;
}

/* The bus-bandwidth curves (intra_busbw needed whenever sizes are) and
 * the FlashAttention rates, which its 16-bit kernels reach at most at the
 * 16-bit tensor-core peak. */
static int check_curves(const vs_topology *t, vs_error *err)
{
  bool fp16 = t->peak_tflops_fp16 >= t->peak_tflops_bf16;
  const curve_keys busbw = {
      "network", "intra_busbw_sizes", "bus bandwidth per size",
      &t->intra_busbw_sizes,
      {&t->intra_busbw, &t->intra_allreduce_busbw},
      {"intra_busbw", "intra_allreduce_busbw"}, 2, 1, 0, NULL};
  const curve_keys flash = {
      "gpu", "flash_seq_lens", "rate per length", &t->flash_seq_lens,
      {&t->flash_tflops_d64, &t->flash_tflops_d128,
       &t->flash_tflops_causal_d64, &t->flash_tflops_causal_d128},
      {"flash_tflops_d64", "flash_tflops_d128", "flash_tflops_causal_d64",
       "flash_tflops_causal_d128"},
      4, 0, fp16 ? t->peak_tflops_fp16 : t->peak_tflops_bf16,
      fp16 ? "peak_tflops_fp16" : "peak_tflops_bf16"};
  int rc = check_curve(t, &busbw, err);
  return rc ? rc : check_curve(t, &flash, err);
}

static int check_efficiency_shape(const vs_topology *t, vs_error *err)
{
  size_t n = t->compute_efficiency_shape.n;
  if (n == 0 || n == 3)
    return 0;
  return key_error(t, err, "gpu", "compute_efficiency_shape",
                   "expected the m, n, k of one GEMM (3 counts), got %zu", n);
}

/* A kind is calibrated by its bandwidth (vs_topology_calibrated): the
 * other keys of its group set without it would go unread. One pass over
 * the keys set (a plan finishes a topology for every layout). */
static int check_kinds_have_bandwidth(const vs_topology *t, vs_error *err)
{
  for (size_t i = 0; i < topology_tab.n_keys; i++) {
    const char *key = topology_tab.keys[i].name;
    if (!t->origins.keys[i].set ||
        strcmp(topology_tab.keys[i].section, "calibration") != 0)
      continue;
    for (int kind = 0; kind < VS_CAL_N_KINDS; kind++) {
      const char *name = vs_cal_kind_name(kind);
      size_t len = strlen(name);
      if (strncmp(key, name, len) == 0 && key[len] == '_' &&
          strcmp(key + len, "_bandwidth") != 0 &&
          !vs_topology_calibrated(t, kind))
        return key_error(t, err, "calibration", key,
                         "has no effect without %s_bandwidth, which "
                         "calibrates the kind (%s)",
                         name,
                         vs_cal_times_transfers(kind)
                             ? "a rate above 0: vsim times transfers with it"
                             : "0 B/s: a time that does not grow with size");
    }
  }
  return 0;
}

/* The last piece of list `key` of fit `name` is not its <name>_<what>:
 * both sides named where they were given (either may be the one to
 * change, a --set the one that broke a file's curve). */
static int last_piece_error(const vs_topology *t, vs_error *err,
                            const char *key, const char *name, const char *what)
{
  char other[64], where[400];
  snprintf(other, sizeof other, "%s_%s", name, what);
  vs_conf_where(&topology_tab, &t->origins, "calibration", other, where,
                sizeof where);
  return key_error(t, err, "calibration", key,
                   "the last piece must equal %s (%s)", other, where);
}

/* Checks one kind's calibration: rates 0 or real, a range that is a
 * range, ascending breakpoints and one piece more than breakpoints. */
static int check_calibration(const vs_topology *t, int kind, vs_error *err)
{
  const vs_cal_fit *f = &t->cal[kind];
  const char *name = vs_cal_kind_name(kind);
  size_t breaks = f->breakpoints.n;
  char key[64];

  /* 0 means "time does not grow with size"; anything else is a real rate */
  for (size_t i = 0; i <= f->piece_bandwidths.n; i++) {
    double bw = i < f->piece_bandwidths.n ? f->piece_bandwidths.values[i]
                                          : f->bandwidth;
    if (bw > 0 && bw < MIN_RATE) {
      snprintf(key, sizeof key, "%s_%s", name,
               i < f->piece_bandwidths.n ? "piece_bandwidths" : "bandwidth");
      return key_error(t, err, "calibration", key,
                       "a rate must be 0 (no size dependence) or at least "
                       "1 MB/s");
    }
  }
  if (f->min_bytes > f->max_bytes) { /* max_bytes 0 with min_bytes set too */
    snprintf(key, sizeof key, "%s_min_bytes", name);
    return key_error(t, err, "calibration", key, "above %s_max_bytes", name);
  }
  for (size_t i = 1; i < breaks; i++) {
    if (f->breakpoints.values[i] <= f->breakpoints.values[i - 1]) {
      snprintf(key, sizeof key, "%s_breakpoints", name);
      return key_error(t, err, "calibration", key, "breakpoints must ascend");
    }
  }
  for (int which = 0; which < 2; which++) {
    const vs_real_list *l = which ? &f->piece_latencies : &f->piece_bandwidths;
    double last = which ? f->latency : f->bandwidth;
    snprintf(key, sizeof key, "%s_piece_%s", name,
             which ? "latencies" : "bandwidths");
    if (l->n == 0 && breaks == 0)
      continue;
    if (l->n != breaks + 1)
      return key_error(t, err, "calibration", key,
                       "%zu breakpoint(s) make %zu pieces, but %zu value(s) "
                       "are given",
                       breaks, breaks + 1, l->n);
    if (fabs(l->values[l->n - 1] - last) > 1e-9 * fabs(last))
      return last_piece_error(t, err, key, name,
                              which ? "latency" : "bandwidth");
  }
  return check_curve_shape(t, kind, err);
}

double vs_cal_bytes_factor(int kind)
{
  return kind == VS_CAL_D2D_COPY_ENGINE || kind == VS_CAL_D2D_KERNEL ? 2.0
                                                                     : 1.0;
}

double vs_cal_seconds(const vs_cal_fit *fit, int kind, double bytes,
                      vs_cal_seen *seen)
{
  double copy = bytes / vs_cal_bytes_factor(kind);
  double bandwidth = fit->bandwidth, latency = fit->latency;
  size_t piece = 0;

  if (seen)
    vs_cal_seen_add(seen, kind, copy);
  while (piece < fit->breakpoints.n &&
         copy >= (double)fit->breakpoints.values[piece])
    piece++;
  if (piece < fit->piece_bandwidths.n) {
    bandwidth = fit->piece_bandwidths.values[piece];
    latency = fit->piece_latencies.values[piece];
  }
  /* the shape check keeps every piece at or above 0 where it starts */
  return fmax(0.0, latency + (bandwidth > 0 ? bytes / bandwidth : 0.0));
}

void vs_cal_seen_add(vs_cal_seen *seen, int kind, double bytes)
{
  vs_cal_range *r = &seen->kinds[kind];
  if (!r->used) {
    r->lo = r->hi = bytes;
    r->used = true;
  } else if (bytes < r->lo) {
    r->lo = bytes;
  } else if (bytes > r->hi) {
    r->hi = bytes;
  }
}

void vs_cal_seen_merge(vs_cal_seen *a, const vs_cal_seen *b)
{
  for (int k = 0; k < VS_CAL_N_KINDS; k++) {
    if (b->kinds[k].used) {
      vs_cal_seen_add(a, k, b->kinds[k].lo);
      vs_cal_seen_add(a, k, b->kinds[k].hi);
    }
  }
}

int vs_cal_warn_range(FILE *out, const char *prefix, const vs_topology *topo,
                      const vs_cal_seen *seen)
{
  int lines = 0;
  for (int k = 0; k < VS_CAL_N_KINDS; k++) {
    const vs_cal_range *r = &seen->kinds[k];
    const vs_cal_fit *f = &topo->cal[k];
    char lo[32], hi[32], need[32];
    vs_format_bytes(f->min_bytes, lo, sizeof lo);
    vs_format_bytes(f->max_bytes, hi, sizeof hi);
    for (int above = 0; r->used && above < 2; above++) {
      double size = above ? r->hi : r->lo;
      if (above ? f->max_bytes == 0 || size <= (double)f->max_bytes
                : size >= (double)f->min_bytes)
        continue;
      vs_format_bytes((uint64_t)size, need, sizeof need);
      fprintf(out, "%s%s: [calibration] %s was measured from %s to %s; this "
                   "run needs %s %s: its %s piece is extended\n",
              prefix, topo->origins.file, vs_cal_kind_name(k), lo, hi,
              above ? "up to" : "down to", need, above ? "last" : "first");
      lines++;
    }
  }
  return lines;
}

int vs_topology_set(vs_topology *topo, const char *assignment, vs_error *err)
{
  return vs_conf_assign(&topology_tab, topo, &topo->origins, assignment, "topology.", err);
}

/* Every key [calibration] measured names is given (in the file or with
 * --set): a figure vsim would otherwise take from its defaults is no
 * measurement. */
static int check_measured_given(const vs_topology *t, vs_error *err)
{
  for (size_t k = 0; t->measured && k < topology_tab.n_keys; k++) {
    const vs_key *key = &topology_tab.keys[k];
    int i = measurable_index(key->section, key->name);
    if (i >= 0 && (t->measured >> i & 1u) && !t->origins.keys[k].set)
      return key_error(t, err, "calibration", "measured",
                       "names %s, but the file gives no [%s] %s: a measured "
                       "figure is one the file states (remove the name or "
                       "give the value)",
                       key->name, key->section, key->name);
  }
  return 0;
}

int vs_topology_load(vs_topology *topo, const char *path,
                     const char *const *sets, size_t n_sets, vs_error *err)
{
  int rc = vs_topology_load_base(topo, path, err);
  return rc ? rc
            : vs_topology_finish(topo, sets, n_sets, VS_TOPO_CALIBRATED, err);
}

int vs_topology_load_nominal(vs_topology *topo, const char *path,
                             const char *const *sets, size_t n_sets,
                             vs_error *err)
{
  int rc = vs_topology_load_base(topo, path, err);
  return rc ? rc : vs_topology_finish(topo, sets, n_sets, VS_TOPO_NOMINAL, err);
}

int vs_topology_load_base(vs_topology *topo, const char *path, vs_error *err)
{
  set_defaults(topo);
  if (path)
    return vs_conf_load_file(&topology_tab, topo, &topo->origins, path, err);
  return vs_conf_load_string(&topology_tab, topo, &topo->origins,
                             vs_topology_default_name(),
                             vs_topology_default_text(), err);
}

int vs_topology_finish(vs_topology *topo, const char *const *sets,
                       size_t n_sets, vs_topo_figures figures, vs_error *err)
{
  int rc = 0;
  for (size_t i = 0; i < n_sets; i++) {
    if ((rc = vs_topology_set(topo, sets[i], err)))
      return rc;
  }
  if ((rc = vs_conf_check_required(&topology_tab, &topo->origins, err)))
    return rc;
  rc = check_kinds_have_bandwidth(topo, err);
  for (int kind = 0; rc == 0 && kind < VS_CAL_N_KINDS; kind++)
    rc = check_calibration(topo, kind, err);
  if (rc == 0)
    rc = check_fp8_peak(topo, err);
  if (rc == 0)
    rc = check_host_memory_bandwidth(topo, err);
  if (rc == 0)
    rc = check_gpu_memory(topo, err);
  if (rc == 0)
    rc = check_efficiency_shape(topo, err);
  if (rc == 0)
    rc = check_curves(topo, err);
  if (rc == 0)
    rc = check_measured_given(topo, err);
  topo->pcie_d2h_bandwidth = topo->pcie_bandwidth;
  drop_overridden_measurements(topo);
  if (rc == 0 && figures == VS_TOPO_CALIBRATED)
    apply_calibration(topo);
  if (rc == 0)
    prefer_set_links(topo);
  return rc;
}

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

#include <stdint.h>

typedef struct vs_topology {
  /* [gpu] */
  char name[VS_NAME_MAX];        /* "H100-SXM-80GB" */
  uint64_t memory_bytes;         /* capacity the CUDA runtime reports */
  double hbm_bandwidth;          /* bytes/s */
  double peak_tflops_bf16;       /* dense tensor-core TFLOP/s */
  double peak_tflops_fp16;       /* dense tensor-core TFLOP/s */
  double peak_tflops_fp32;       /* TFLOP/s */
  double peak_tflops_fp8;        /* TFLOP/s; 0 when the GPU has no FP8 */
  uint64_t context_bytes;        /* CUDA context outside the allocator */
  uint64_t cublas_workspace_bytes; /* cuBLAS workspace per handle */
  uint64_t nccl_bytes;           /* NCCL buffers per communicator */
  double compute_efficiency;     /* achieved fraction of peak for GEMMs */
  double memory_efficiency;      /* achieved fraction of hbm_bandwidth */
  /* [node] */
  uint64_t gpus_per_node;        /* GPUs in one node */
  uint64_t host_memory_bytes;    /* host DRAM per node */
  double pcie_bandwidth;         /* bytes/s per GPU, one direction */
  double pcie_latency;           /* seconds */
  uint64_t gpus_per_pcie_switch; /* GPUs sharing one host link */
  double nvme_bandwidth;         /* bytes/s per node */
  uint64_t nvme_capacity_bytes;  /* bytes per node */
  /* [network] */
  double intra_bandwidth;        /* NVLink bytes/s per GPU, one direction */
  double intra_latency;          /* seconds */
  double inter_bandwidth;        /* NIC bytes/s per GPU, one direction */
  double inter_latency;          /* seconds */
  /* [cost] */
  double usd_per_gpu_hour;       /* 0 when unknown */
  vs_origins origins;            /* where every value came from */
} vs_topology;

/* The key table of topology.ini (for --set and README). */
const vs_keytab *vs_topology_keys(void);

/* Name and text of the compiled-in default (topologies/h100-sxm-8x.ini). */
const char *vs_topology_default_name(void);
const char *vs_topology_default_text(void);

/* Loads path (or the built-in default when path is NULL) into topo, applies
 * the n_sets overrides "sec.key=value" (the leading "topology." already
 * stripped) and validates. VS_EIO / VS_EINPUT with file:line:key on error. */
int vs_topology_load(vs_topology *topo, const char *path,
                     const char *const *sets, size_t n_sets, vs_error *err);

/* Applies one "section.key=value" override; used by vs_topology_load. */
int vs_topology_set(vs_topology *topo, const char *assignment, vs_error *err);

#endif

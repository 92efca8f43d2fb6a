/* measure.h - the CUDA measurement program behind vsim-calibrate.
 *
 * vs_measure_run times every kind of rawcsv.h over a size sweep (powers of
 * two from 4 B to max_bytes and their midpoints, in shuffled order, after
 * warm-up) and appends one sample per timed run. Pinned and device copies
 * are timed on the device with events around K back-to-back copies held
 * behind a spin kernel (nvbandwidth's method), pageable copies and the
 * allocation calls on the host clock. Built from measure_cuda.c and
 * kernels.cu when CMake finds CUDA, from measure_none.c otherwise. */
#ifndef VS_MEASURE_H
#define VS_MEASURE_H

#include "error.h"
#include "rawcsv.h"

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct vs_measure_opts {
  int device;                    /* CUDA device index (p2p: to device + 1) */
  unsigned samples;              /* timed samples per size */
  unsigned warmup;               /* untimed runs per size before them */
  uint64_t max_bytes;            /* largest size of the sweep */
  unsigned seed;                 /* seed of the size shuffle */
  unsigned time_limit_s;         /* no size starts after this; 0 = none */
  bool verbose;                  /* progress on stderr */
  const volatile sig_atomic_t *stop; /* when set and nonzero, no size
                                        starts (a signal); may be NULL */
} vs_measure_opts;

/* What the runtime (and NVML when present) says about the device. */
typedef struct vs_measure_info {
  char device[256];              /* "NVIDIA H200" */
  char driver[80];               /* NVML's "580.159.04", else CUDA's "13.0" */
  char runtime[32];              /* CUDA runtime version */
  int cc_major, cc_minor;        /* compute capability */
  int sm_clock_mhz;              /* SM clock, 0 when unknown */
  int mem_clock_mhz;             /* memory clock, 0 when unknown */
  int bus_width_bits;            /* memory bus width, 0 when unknown */
  int pcie_gen, pcie_width;      /* best PCIe link of GPU and slot (NVML),
                                    0 when unknown */
  int n_gpus;                    /* CUDA devices visible */
  uint64_t total_bytes;          /* device memory the runtime reports */
  uint64_t l2_bytes;             /* L2 cache size */
  int sms;                       /* streaming multiprocessors */
  double hbm_peak;               /* bytes/s from clock and bus width, or 0 */
  bool nvml;                     /* NVML answered */
  bool cut_short;                /* --time-limit or *stop ended the sweep */
} vs_measure_info;

/* True when this build can measure (it was built with CUDA). */
bool vs_measure_available(void);

/* Measures on opts->device into raw and info. VS_EIO naming the CUDA call
 * and its error string when one fails; VS_EUSAGE when built without CUDA.
 * Once opts->time_limit_s has passed, or *opts->stop is set, no further
 * size is started and the samples so far are returned with 0 (a warning
 * on stderr says so; info->cut_short is set). On an error, raw keeps the
 * samples taken before it. */
int vs_measure_run(const vs_measure_opts *opts, vs_raw *raw,
                   vs_measure_info *info, vs_error *err);

#endif

/* summary.h - one rank's summary.csv row: its memory by category at the
 * moment of its allocated peak, its peaks, capacity, verdict and step time
 * (docs/DESIGN.md, CSV exports). `vsim run --csv` writes one per simulated
 * rank; sweep and plan write the worst rank's after their own columns. */
#ifndef VS_SUMMARY_H
#define VS_SUMMARY_H

#include "csvout.h"
#include "memory.h"
#include "simulate.h"

#include <stdbool.h>
#include <stdint.h>

/* The summary.csv columns of one rank (DESIGN.md). */
typedef struct vs_summary {
  uint32_t rank;
  int stage, dp_rank, tp_rank;
  uint64_t at_peak[VS_CAT_N];     /* categories at the allocated peak */
  uint64_t fragmentation_bytes;   /* reserved - allocated then */
  uint64_t model_states_bytes;    /* its stage's resident model states */
  uint64_t peak_allocated_bytes;
  uint64_t peak_reserved_bytes;
  uint64_t peak_used_bytes;       /* reserved + framework, at most */
  uint64_t capacity_bytes;
  bool fits;
  double peak_time_s;
  char peak_op[32];
  double step_time_s;
  bool timed;                     /* step_time_s is the rank's whole step;
                                     false when the simulation stopped at
                                     an out-of-memory (screening) */
} vs_summary;

/* Fills sum from rank of a finished simulation. */
void vs_summary_of(const vs_sim *sim, const vs_rank *rank, vs_summary *sum);

/* summary.csv's header and one row; step_time_s is empty when the
 * summary is not timed. */
void vs_summary_csv_header(vs_csv *csv);
void vs_summary_csv_row(vs_csv *csv, const vs_summary *sum);
/* The same number of empty fields (a candidate that was not simulated). */
void vs_summary_csv_empty(vs_csv *csv);

#endif

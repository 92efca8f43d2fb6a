/* capacity_int.h - what fit, sweep (capacity.c) and plan (plan.c) share:
 * resolving the job as given, and the columns their CSV files end with.
 * Private to app/. */
#ifndef VS_CAPACITY_INT_H
#define VS_CAPACITY_INT_H

#include "csvout.h"
#include "explore.h"

#include <stdint.h>
#include <stdio.h>

/* Resolves the job as given (base sets, on gpus GPUs as --gpus, 0 for the
 * workload's), for what the searches keep fixed. Prints the error and
 * returns the exit status on failure. */
int vs_cap_resolve_base(const vs_explore *ex, uint64_t gpus, vs_workload *wl,
                        vs_topology *topo, FILE *errs);

/* "fits", "tight", "oom" or "invalid". */
const char *vs_cap_status_name(int status);

/* The columns every sweep.csv and plan.csv row ends with: status, reason,
 * tokens_per_s, mfu, usd_per_step (header, then a candidate's cells). */
void vs_cap_tail_header(vs_csv *c);
void vs_cap_tail_columns(vs_csv *c, const vs_candidate *cand);

/* A figure derived from a candidate's step time, or an empty cell when the
 * candidate has no step: a CSV cell is a number or empty, never inf or
 * nan. */
void vs_cap_derived_cell(vs_csv *c, const vs_candidate *cand, double value);

/* A price derived from a candidate's step (vs_cap_derived_cell), or an
 * empty cell when its topology has no price ([cost] usd_per_gpu_hour =
 * 0, unknown: its usd_per_step is 0), never $0. */
void vs_cap_price_cell(vs_csv *c, const vs_candidate *cand, double value);

/* The worst rank's summary.csv columns, or empty cells for an invalid
 * candidate. */
void vs_cap_summary_or_empty(vs_csv *c, const vs_candidate *cand);

#endif

/* report.h - what a user reads: the terminal summary of a simulation, the
 * resolved configuration (`vsim show`), the CSV exports and a Chrome trace.
 * Reports only read a finished vs_sim; they never change it. */
#ifndef VS_REPORT_H
#define VS_REPORT_H

#include "error.h"
#include "simulate.h"

#include <stdio.h>

/* Per-rank breakdown at peak, step time, throughput and a verdict. */
void vs_report_summary(FILE *out, const vs_sim *sim);

/* Per simulated GPU, in the spirit of torch.cuda.memory_summary():
 * allocated and reserved per pool (current and peak), segments, blocks,
 * largest free block, cudaMalloc/cudaFree calls, retries and OOMs. */
void vs_report_memory_summary(FILE *out, const vs_sim *sim);

/* Resolved configuration, parameter counts and model-state bytes. */
void vs_report_show(FILE *out, const vs_workload *wl, const vs_topology *topo,
                    const vs_model *m, const vs_layout *lay);

/* summary.csv, timeline.csv and ops.csv in dir (created if missing), each
 * written atomically. timeline and ops need a simulation run with record. */
int vs_report_write_csv(const vs_sim *sim, const char *dir, vs_error *err);

/* The ranks a trace shows, by global rank id; none: every simulated one. */
typedef struct vs_trace_ranks {
  const uint32_t *ids;
  size_t n;
} vs_trace_ranks;

/* Chrome trace-event JSON (chrome://tracing, Perfetto): one process per
 * rank of sel (NULL: all), named after its place; one thread per stream,
 * named after it; one complete event per op; and memory as counter
 * tracks, one per category and one for reserved bytes. Atomic. */
int vs_report_write_trace(const vs_sim *sim, const char *path,
                          const vs_trace_ranks *sel, vs_error *err);

/* Every key of workload.ini and topology.ini as Markdown tables (key, type
 * and allowed values, default): the tables of README.md. */
void vs_report_keys(FILE *out);

/* An SVG chart of the worst rank's memory over the step: stacked
 * categories (allocated), the device's use (reserved + framework) and the
 * capacity. Needs a simulation run with record. Atomic. */
int vs_report_write_svg(const vs_sim *sim, const char *path, vs_error *err);

/* "cross_entropy (head, micro-batch 0)" for an op of prog. */
char *vs_report_op_label(const vs_sim *sim, const vs_program *prog,
                         uint32_t op, char *buf, size_t len);

#endif

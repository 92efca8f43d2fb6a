/* report.h - what a user reads: the terminal summary of a simulation, the
 * resolved configuration (`vsim show`), the CSV exports and a Chrome trace.
 * Reports only read a finished vs_sim; they never change it. */
#ifndef VS_REPORT_H
#define VS_REPORT_H

#include "csvout.h"
#include "error.h"
#include "simulate.h"

#include <stdio.h>

/* The lines of the summary that other reports repeat word for word. */
typedef enum vs_report_line_kind {
  VS_LINE_PEAK,       /* "peak of rank R at OP, t = T s" */
  VS_LINE_STEP,       /* "step time T = compute C + ... " */
  VS_LINE_BOUND,      /* "compute C by what bounds it: arithmetic A (a%),
                         HBM traffic M (m%), kernel launches L (l%)[,
                         collectives re-run by recompute R (r%)]" */
  VS_LINE_THROUGHPUT, /* "throughput N tokens/s, MFU M%[, $ per ...]" */
  VS_LINE_VERDICT,    /* "verdict: FITS on ..." or "... DOES NOT FIT ..." */
  VS_LINE_HELD,       /* "largest activations and temporaries at the
                         peak: B category of op (where, n tensors); ...":
                         the largest of the worst rank's
                         vs_sim_peak_groups; empty when the run did not
                         note its tensors */
  VS_LINE_MANAGED,    /* "paged optimizer states: up to B a GPU in CUDA
                         managed memory, beside the figures above (...)";
                         empty without them */
} vs_report_line_kind;

/* Writes line `kind` of sim's summary, without its newline, into buf
 * (truncated to len); returns buf. */
char *vs_report_line(const vs_sim *sim, vs_report_line_kind kind, char *buf,
                     size_t len);

/* One part of the step time as the summary splits it. */
typedef struct vs_step_part {
  const char *name;   /* "compute", "tensor-parallel comm", ... */
  double seconds;
} vs_step_part;

#define VS_STEP_PARTS_MAX 9

/* The parts sim's step time adds up from (simulate.h), in the summary's
 * order, into parts: compute, tensor-parallel comm, pipeline bubble, the
 * wait for the busiest stage where there is one, exposed data-parallel
 * comm, expert- and context-parallel comm when there is some, exposed
 * offload copies and the CPU optimizer step with offload. Returns their
 * count (at most VS_STEP_PARTS_MAX). */
size_t vs_report_step_parts(const vs_sim *sim, vs_step_part *parts);

/* The summary's first lines: workload, hardware, model, layout, training,
 * then an empty line. */
void vs_report_header(FILE *out, const vs_sim *sim);

/* Rank r's out-of-memory as the summary reports it (r's oom happened). */
void vs_report_oom_line(FILE *out, const vs_sim *sim, const vs_rank *r);

/* Host and NVMe memory of each tracked node at its peak, by category, as
 * the summary prints it (an empty line, a title, the table, a note on
 * the nodes not tracked); nothing without offload. */
void vs_report_node_table(FILE *out, const vs_sim *sim);

/* The first allocation each node's host or NVMe could not hold, one line
 * each, as the summary reports them. */
void vs_report_node_oom_lines(FILE *out, const vs_sim *sim);

/* The summary's notes before its verdict, one line each ("note: ..."):
 * a calibrated curve used outside the sizes it was measured at, shared
 * links approximated where stages share nodes unevenly; nothing else. */
void vs_report_notes(FILE *out, const vs_sim *sim);

/* The chart colour of category c ("#4e79a7"), and the category stacked
 * k-th from the bottom (framework first) in the SVG and HTML charts. */
const char *vs_report_category_color(int c);
int vs_report_stack_order(int k);

/* Per-rank breakdown at peak, step time, throughput and a verdict. */
void vs_report_summary(FILE *out, const vs_sim *sim);

/* Per simulated GPU, in the spirit of torch.cuda.memory_summary():
 * allocated and reserved per pool (current and peak), segments, blocks,
 * largest free block, cudaMalloc/cudaFree calls, retries and OOMs. */
void vs_report_memory_summary(FILE *out, const vs_sim *sim);

/* Resolved configuration, parameter counts, model-state bytes and how
 * they reach the allocator (r): a workload file that loads back, every
 * line within vs_conf_line_max (a comment too long is cut short with
 * "..."). VS_EINPUT, with nothing written, when a key's value cannot fit
 * on a line (a pp_layers of 100 stages that has no runs to write as VxN);
 * VS_ENOMEM. */
int vs_report_show(FILE *out, const vs_workload *wl, const vs_topology *topo,
                   const vs_model *m, const vs_recipe *r,
                   const vs_layout *lay, vs_error *err);

/* The files of `--csv DIR`, in the order they are written: summary.csv,
 * timeline.csv, ops.csv, host.csv (one row per tracked node and place it
 * uses, host or NVMe), host_timeline.csv (one row per change of a node's
 * host or NVMe memory; these two only the header without offload) and
 * op_bounds.csv (ops.csv's rows, each op's run split by what bounds
 * it). */
#define VS_REPORT_CSV_FILES 6
extern const char *const vs_report_csv_names[VS_REPORT_CSV_FILES];

/* A run's output files (--csv's, --trace, --svg, --html): each writer
 * below fills temporary files and adds them here, and
 * vs_report_files_commit puts them all in place together, so that a run
 * that fails to write any of them replaces none (what was there stays);
 * vs_report_files_abort drops them. */
typedef struct vs_report_files {
  vs_csv files[VS_REPORT_CSV_FILES + 3];
  size_t n;
} vs_report_files;

int vs_report_files_commit(vs_report_files *out, vs_error *err);
void vs_report_files_abort(vs_report_files *out);

/* The next file of out, opened at path (a temporary file until the
 * commit); NULL (err set) when out is full or the file cannot be made. */
vs_csv *vs_report_files_open(vs_report_files *out, const char *path,
                             vs_error *err);

/* The vs_report_csv_names files in dir (created if missing), added to
 * out. timeline, ops and op_bounds need a simulation run with record. */
int vs_report_write_csv(const vs_sim *sim, const char *dir,
                        vs_report_files *out, vs_error *err);

/* The ranks a trace shows, by global rank id; none: every simulated one. */
typedef struct vs_trace_ranks {
  const uint32_t *ids;
  size_t n;
} vs_trace_ranks;

/* Chrome trace-event JSON (chrome://tracing, Perfetto): one process per
 * rank of sel (NULL: all), named after its place; one thread per stream,
 * named after it; one complete event per op; and memory as counter
 * tracks, one per category, one for reserved bytes and, for a rank with
 * a paged optimizer, one (`managed`) for its CUDA managed memory. Added
 * to out. */
int vs_report_write_trace(const vs_sim *sim, const char *path,
                          const vs_trace_ranks *sel, vs_report_files *out,
                          vs_error *err);

/* Every key of workload.ini and topology.ini as Markdown tables (key, type
 * and allowed values, default): the tables of README.md. */
void vs_report_keys(FILE *out);

/* An SVG chart of the worst rank's memory over the step: stacked
 * categories (allocated), the device's use (reserved + framework) and the
 * capacity. Needs a simulation run with record. Added to out. */
int vs_report_write_svg(const vs_sim *sim, const char *path,
                        vs_report_files *out, vs_error *err);

/* One moment of a chart of rank r's memory: the highest allocation in its
 * slice of the step, and the most the device used in the slice. */
typedef struct vs_report_moment {
  uint64_t t_ns;               /* when */
  uint32_t op;                 /* the op whose memory event it follows */
  uint64_t by_cat[VS_CAT_N];   /* bytes per category, framework included */
  uint64_t allocated;          /* their allocator part */
  uint64_t used;               /* the slice's most reserved + framework
                                  (reserved can peak at another moment
                                  than allocated) */
  bool set;                    /* a memory event fell in the slice */
} vs_report_moment;

/* Splits r's step into n equal slices and gives each (out[0..n), zeroed
 * by the caller) the moment of its highest allocation and the slice's
 * most used; a slice without a memory event stays unset. Needs a
 * simulation run with record. O(events x categories). */
void vs_report_moments(const vs_rank *r, size_t n, vs_report_moment *out);

/* A self-contained HTML page (inline CSS and script, nothing fetched):
 * the summary's header, verdict and peak line; the worst rank's memory over
 * the step stacked by category on a canvas (at most 2,000 moments, each
 * the highest allocation of its time slice, with its op), zoomed with the
 * mouse wheel or a dragged range, hovered for op, layer, micro-batch and
 * bytes; the per-rank table at peak; the step-time split. Text from the
 * inputs is HTML-escaped. Needs a simulation run with record. Added to
 * out. */
int vs_report_write_html(const vs_sim *sim, const char *path,
                         vs_report_files *out, vs_error *err);

/* Writes text as XML or HTML character data or attribute value (< > & "
 * and ' escaped): a path or GPU name with markup characters in it stays
 * text in the SVG and the HTML page instead of breaking (or becoming)
 * markup; a control character or a byte that is not UTF-8 becomes U+FFFD,
 * so the SVG stays well-formed XML. */
void vs_report_xml_text(vs_csv *f, const char *text);

/* When out-of-memory o happened, as words to follow "out of memory": " in
 * the first step" where the first training step ran out (vs_oom
 * earlier_run), else "". */
const char *vs_report_oom_when(const vs_oom *o);

/* "cross_entropy (head, micro-batch 0)" for an op of prog. */
char *vs_report_op_label(const vs_sim *sim, const vs_program *prog,
                         uint32_t op, char *buf, size_t len);

#endif

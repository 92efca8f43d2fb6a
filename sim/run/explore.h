/* explore.h - many simulations of one job: each candidate is the workload
 * and topology files plus "--set" overrides (and a GPU count), simulated in
 * full or, for planning, with a bounded number of micro-batches; candidates
 * run in parallel on worker threads. The building block of fit, sweep and
 * plan. Nothing here is global: every evaluation owns its inputs and
 * simulation, so any number may run at once. */
#ifndef VS_EXPLORE_H
#define VS_EXPLORE_H

#include "csvout.h"
#include "simulate.h"
#include "summary.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* plan's candidates set up to 24 keys: tp, pp, dp, cp, cp_comm, ep, etp,
 * zero, max_live_parameters, max_reuse_distance, sequence_parallel,
 * schedule, virtual_stages, pp_layers, checkpointing, checkpoint_layers,
 * checkpoint_every, micro_batch, the two offloads, offload_pin_memory,
 * p2p, p2p_scatter_gather and overlap_grad_reduce (p2p only without a
 * pipeline, pp_layers only with one: 23 at most at once; and a sweep's
 * --set and --vary keys up to this many) */
#define VS_EXPLORE_MAX_SETS 24
#define VS_EXPLORE_SET_MAX 160 /* room for plan's uneven split of up to 64
                                  stages of at most two-digit counts */

/* FITS: it fits with [runtime] reserve free; TIGHT: it fits, but with
 * less free than that (fit and plan do not count it as fitting). */
typedef enum {
  VS_EVAL_FITS, VS_EVAL_OOM, VS_EVAL_INVALID, VS_EVAL_TIGHT
} vs_eval_status;

/* One candidate and, once evaluated, its outcome. */
typedef struct vs_candidate {
  char sets[VS_EXPLORE_MAX_SETS][VS_EXPLORE_SET_MAX]; /* "sec.key=value",
                                  "topology.sec.key=value" */
  size_t n_sets;
  uint64_t gpus;                  /* 0 = from the workload */
  /* outcome */
  int status;                     /* vs_eval_status */
  char reason[VS_ERROR_MSG_MAX];  /* why invalid, or where it ran out */
  vs_summary worst;               /* the rank with the highest peak */
  uint64_t total_gpus;            /* resolved tp * cp * pp * dp */
  uint64_t dp;                    /* resolved data-parallel size */
  bool timed;                     /* the step below was simulated to its
                                     end; false when screening stopped at
                                     an out-of-memory: the step and what
                                     follows from it are unknown (0) */
  double step_time_s;             /* the job's step */
  double tokens_per_s;
  double mfu;
  double usd_per_step;            /* 0 when the topology has no price */
  double need_ratio;              /* how far from fitting: the largest
                                     peak over capacity of the worst
                                     rank's GPU and of every node's host
                                     memory and NVMe that ran out */
  uint64_t paged_out_bytes;       /* the most of a rank's paged optimizer
                                     states that move to host memory and
                                     back each step (vs_rank_paged_out_
                                     bytes) */
  bool extrapolated;              /* from a bounded simulation: its memory
                                     that of the micro-batches simulated,
                                     its step time extrapolated or proven
                                     (engine/steady.h) */
} vs_candidate;

/* Worker threads one search runs at most (--jobs). */
#define VS_EXPLORE_JOBS_MAX 256u

/* What all candidates share. */
typedef struct vs_explore {
  const char *workload;           /* WORKLOAD.ini */
  const char *topology;           /* FILE.ini or NULL for the built-in */
  const char *const *sets;        /* base --set overrides (workload and
                                     topology.*), applied before each
                                     candidate's own */
  size_t n_sets;
  uint64_t max_microbatches;      /* 0: simulate every micro-batch; else
                                     simulate at most this many (and one
                                     more) and extrapolate the step time
                                     linearly (planning) */
  unsigned jobs;                  /* worker threads (1 to
                                     VS_EXPLORE_JOBS_MAX) */
  bool progress;                  /* a progress line on stderr */
  const char *what;               /* "sweep", "plan", "fit": for the
                                     progress line */
  vs_budget budget;               /* a simulation over it is invalid, with
                                     its estimate as the reason */
  /* the two files parsed once, before any override (vs_explore_all fills
   * them for its candidates); NULL: vs_explore_load parses the files */
  const vs_topology *topology_base;
  const vs_workload *workload_base;
} vs_explore;

/* Adds "sec.key=value" to c; VS_EUSAGE if it does not fit. */
int vs_candidate_set(vs_candidate *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* True when key ("sec.key" or "topology.sec.key") holds a comma-separated
 * list (pp_layers, calibration pieces): --vary cannot list its values, as
 * its own values are separated by commas. */
bool vs_explore_is_list_key(const char *key);

/* Applies one override as the user typed it: "topology.sec.key=value" to
 * the topology (vs_topology_set), "sec.key=value" to the workload
 * (vs_workload_set). */
int vs_explore_set(vs_topology *topo, vs_workload *wl, const char *assignment,
                   vs_error *err);

/* In msg (of size len, at most VS_ERROR_MSG_MAX), replaces the "--set "
 * before each mention of the key of assignment ("sec.key" or
 * "topology.sec.key", followed by '=', ':' or the end) by `as`: the
 * configuration code names every override "--set", where a sweep's came
 * from "--vary". */
void vs_explore_relabel(char *msg, size_t len, const char *assignment,
                        const char *as);

/* The parse stage of vs_explore_load: both files read and ex's base
 * overrides applied, nothing resolved or checked across keys. Its errors
 * are the ones no candidate's own overrides can fix. */
int vs_explore_parse(const vs_explore *ex, vs_topology *topo, vs_workload *wl,
                     vs_error *err);

/* Loads ex's topology and workload with ex's base overrides, then the
 * n_extra of `extra`, each "topology.sec.key=value" going to the topology
 * and the rest to the workload; gpus as vs_workload_load. */
int vs_explore_load(const vs_explore *ex, const char (*extra)[VS_EXPLORE_SET_MAX],
                    size_t n_extra, uint64_t gpus, vs_topology *topo,
                    vs_workload *wl, vs_error *err);

/* Evaluates one candidate (fills its outcome). A bad combination is an
 * outcome (VS_EVAL_INVALID), not an error; only host failures return an
 * error code. */
int vs_explore_one(const vs_explore *ex, vs_candidate *c);

/* Evaluates n candidates on ex->jobs threads. Deterministic: results do not
 * depend on the number of threads. */
int vs_explore_all(const vs_explore *ex, vs_candidate *cands, size_t n,
                   vs_error *err);

#endif

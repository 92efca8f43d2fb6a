/* simulate.h - one simulation from resolved inputs to per-rank results:
 * model builder -> layout -> one program per stage -> engine.
 *
 * vs_sim owns everything it builds; two vs_sim values share nothing, so
 * simulations may run in parallel threads. */
#ifndef VS_SIMULATE_H
#define VS_SIMULATE_H

#include "engine.h"
#include "error.h"
#include "layout.h"
#include "model.h"
#include "recipe.h"
#include "schedule.h"
#include "topology.h"
#include "workload.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* GPUs that --ranks all simulates at most: each holds its own allocator
 * and timeline (16,384 took 0.5 GB and a minute). */
#define VS_MAX_SIMULATED_RANKS 65536

/* The most kinds of node (by how many GPUs of each stage they hold) stage
 * mode tracks one of each (vs_sim_node_like): a job's nodes repeat a few
 * make-ups (one per stage, and the partly filled or shared ones). */
#define VS_NODE_MAKEUPS_MAX 64

/* The work of one simulation, estimated before anything is built. */
typedef struct vs_work {
  double events;        /* op completions the engine runs: every simulated
                           rank's, or one pipeline slot's where the others
                           get copies of its run (vs_engine_run) */
  double rank_events;   /* op completions of one step over every
                           simulated rank (what the records hold) */
  double steps;         /* training steps simulated: 2 where the step
                           vsim reports runs after the first (vs_recipe
                           first_step_states), else 1; events count
                           both */
  double host_bytes;    /* programs, plus the ranks' records when recorded */
  double csv_bytes;     /* --csv's timeline.csv and ops.csv (when recorded) */
  double trace_bytes;   /* --trace's JSON of every simulated rank (when
                           recorded) */
  double ranks;         /* ranks simulated */
  uint64_t gpus;        /* the job's GPUs (its layout), numbered 0..gpus-1 */
} vs_work;

/* Limits a simulation refuses to pass (VS_ELIMIT, the estimate in the
 * message) before building anything; 0 = no limit. */
typedef struct vs_budget {
  double max_events;
  double max_host_bytes;
} vs_budget;

typedef struct vs_sim_opts {
  bool all_ranks;         /* simulate every GPU, not one per stage */
  bool record;            /* keep timelines and op spans (for CSV/trace) */
  bool check_invariants;  /* vs_mem_check after every memory event */
  bool stop_at_oom;       /* end at the first out-of-memory (screening) */
  /* called on the built model before anything reads it (may be NULL): a
   * way to add block kinds or freeze tensors without a workload key */
  int (*edit_model)(vs_model *m, void *ctx, vs_error *err);
  void *edit_ctx;         /* handed to edit_model */
  vs_budget budget;       /* refused above it; zeros: unlimited */
  bool peak_tensors;      /* note which tensors each rank holds at its peak
                             (vs_sim_peak_groups; one rank per stage only,
                             not with all_ranks): 8 bytes a tensor a rank */
  uint64_t steady_to;     /* more micro-batches than wl's: watch each run
                             for its steady state (engine/steady.h) and,
                             where every run proves it, tell the step of
                             steady_to micro-batches (vs_sim
                             steady_proven); 0: not */
  bool first_unit_only;   /* the programs' setup and first unit alone
                             (vs_job first_unit_only): a screen of the
                             setup, whose run tells only whether it
                             stopped there (vs_sim_stopped_in_setup) */
} vs_sim_opts;

typedef struct vs_sim {
  const vs_workload *wl;  /* inputs (not owned) */
  const vs_topology *topo;
  vs_model model;         /* built from wl */
  vs_recipe recipe;       /* every decision, resolved from wl and model */
  vs_layout layout;       /* built from wl, topo, model, recipe */
  bool per_rank_load;     /* every GPU simulated under a skewed router
                             (vs_workload_skew_applies): the one of each
                             expert group holding the hottest expert (its
                             ep rank 0) runs model's programs, the others
                             model_rest's */
  vs_model model_rest;    /* with per_rank_load: the model of the ranks
                             holding only other experts (VS_LOAD_REST) */
  vs_recipe recipe_rest;  /* its recipe */
  vs_program *programs;   /* one per pipeline stage; with per_rank_load
                             model_rest's follow, pp more */
  size_t n_programs;
  bool first_stopped_in_setup; /* its first step, screening
                             (stop_at_oom), stopped in every rank's setup
                             (vs_sim_stopped_in_setup) */
  vs_rank *ranks;         /* simulated ranks */
  size_t n_ranks;
  bool all_ranks;         /* every GPU simulated (vs_sim_opts.all_ranks),
                             not one per stage */
  vs_engine_stats stats;  /* events, end time */
  double step_time_s;     /* slowest rank's step */
  double compute_s;       /* compute-stream kernels (no tp, ep, cp or dp
                             collectives) */
  double bound_s[VS_BOUND_SPLIT_N]; /* compute_s split by what bounds each op
                             (vs_bound; the same rank's program) */
  double tp_comm_s;       /* tensor-parallel collectives on the compute stream */
  double ep_comm_s;       /* expert-parallel all-to-alls on it */
  double cp_comm_s;       /* context-parallel key/value exchanges on it */
  double bubble_s;        /* compute stream idle waiting on the pipeline
                             to fill and drain: its whole wait on the
                             pipeline less imbalance_s */
  double imbalance_s;     /* the rest of that wait, for busier stages: the
                             longest step of a rank of its pipeline (its
                             slot) less its waits on the pipeline, beyond
                             this rank's (at most the whole wait) */
  int busiest_stage;      /* that rank's stage (the slowest rank's where
                             none holds the pipeline up longer) */
  double exposed_comm_s;  /* rest of the step: waiting on data-parallel
                             collectives, and the tail after the last kernel
                             (step = compute + tp comm + ep comm + cp comm
                             + bubble + imbalance + exposed comm + offload
                             copies + cpu optimizer) */
  double offload_copy_s;  /* exposed offload copies and NVMe swaps: the
                             compute stream waiting on a fetch, and the
                             tail's stretches that end with one (a fetch
                             that an all-gather follows, dp > 1, counts as
                             data-parallel comm: the gather ends last) */
  double cpu_optimizer_s; /* the tail's stretches that end with the host
                             CPU's optimizer step */
  bool offloads;          /* anything moves between GPU, host and NVMe */
  double tokens_per_s;    /* the step's tokens / step time: its micro-
                             batches (grad_accum, or the steady_to step
                             told) x micro_batch x dp x seq_len */
  double model_flops;     /* model FLOPs per step, all GPUs */
  double mfu;             /* model_flops / (step * gpus * peak) */
  bool fits;              /* every simulated rank fits, and every node's
                             host and NVMe memory */
  uint64_t reserve_bytes; /* [runtime] reserve of the GPU's capacity */
  bool tight;             /* it fits, but some rank's peak leaves less
                             than reserve_bytes free */
  vs_node_mem *nodes;     /* nodes whose host or NVMe memory the job uses
                             (none without offload): in stage mode those of
                             the simulated ranks, else every node */
  size_t n_nodes;
  vs_node_share *shares;  /* the ranks' shares of them, rank by rank */
  uint32_t *node_like;    /* [layout.nodes] in stage mode, the tracked
                             node (index into nodes) of each node's
                             make-up: the same GPUs of each stage (NULL:
                             every node tracked, or too many make-ups) */
  bool nodes_uneven;      /* stage mode with nodes (or PCIe switches)
                             whose GPUs' stages do not repeat from one to
                             the next: per-node memory and sharing are
                             then approximate (--ranks all is exact) */
  struct vs_program_pool *pool; /* programs borrowed from here (not owned) */
  bool steady_proven;     /* opts steady_to: every run reached a proven
                             steady state, and the ranks' times and waits,
                             stats, step time, its split, model FLOPs,
                             MFU and tokens/s are those of the step of
                             steady_to micro-batches (exactly what its
                             whole simulation gives; bound_s up to
                             rounding). Memory is: under exact accounting
                             the allocated peak and its time too; under
                             the caching allocator (whose blocks are not
                             proven) the simulated micro-batches' own. An
                             op a rank's peak names is its part in the
                             simulated programs */
  unsigned steady_runs, steady_proofs; /* runs watched, proofs found */
  uint32_t steady_period; /* a simulation of one run (no first step)
                             that proved its steady state, but whose
                             micro-batches beyond the simulated are no
                             whole number of its periods, so nothing was
                             told: that period (in micro-batches), for a
                             caller to simulate a step whose extra
                             micro-batches it divides; 0 otherwise (a
                             first step and its step would need both
                             periods to divide them) */
  uint64_t steady_extra;  /* micro-batches told beyond the simulated */
  uint32_t steady_mb;     /* a simulated micro-batch whose units repeat */
  struct vs_steady *steady; /* the last run's watcher, until told */
  uint64_t steady_events_before; /* the events the runs before it add */
} vs_sim;

/* Programs kept between simulations by one thread (see
 * vs_schedule_rebuild); owned by the caller, freed by vs_program_pool_fini. */
typedef struct vs_program_pool {
  vs_program *programs;
  size_t n;
} vs_program_pool;

void vs_program_pool_fini(vs_program_pool *pool);

/* Whether work w is within budget b (what vs_sim_run refuses past). */
bool vs_budget_allows(const vs_budget *b, const vs_work *w);

/* The work vs_sim_run would do for wl on topo with opts, estimated from
 * above from the model, the layout and the schedule's shape (nothing is
 * built but the model and layout, which are freed). Errors as vs_sim_run's
 * for an invalid job. */
int vs_sim_estimate(const vs_workload *wl, const vs_topology *topo,
                    const vs_sim_opts *opts, vs_work *work, vs_error *err);

/* Whether screening simulation sim (stop_at_oom) stopped before anything
 * but each rank's setup (its program's op 0: the model states, allocated
 * at time 0) had started: every rank ran out of memory there or did not
 * start. With the first step: whether the first step did (the step after
 * it then runs alone from an empty cache and stops there too), or no
 * first step of the job can complete (rank 0 would hold more than its GPU
 * at its end) and the step alone stopped in rank 0's setup, rank 0 the
 * worst. Either way the outcome is that of the job with any number of
 * micro-batches. */
bool vs_sim_stopped_in_setup(const vs_sim *sim);

/* Whether sim runs its job's first step before the step it reports
 * (PyTorch's own loop and optimizers, which make their states at the
 * first step: recipe first_step_states). */
bool vs_sim_runs_first_step(const vs_sim *sim);

/* Runs the whole simulation. wl and topo must outlive sim. On error sim is
 * left finalised (nothing to free). */
int vs_sim_run(vs_sim *sim, const vs_workload *wl, const vs_topology *topo,
               const vs_sim_opts *opts, vs_error *err);

/* vs_sim_run building its programs into pool's (grown as needed) instead
 * of fresh ones; pool must outlive sim and serve one simulation at a time. */
int vs_sim_run_pooled(vs_sim *sim, const vs_workload *wl,
                      const vs_topology *topo, const vs_sim_opts *opts,
                      vs_program_pool *pool, vs_error *err);

void vs_sim_fini(vs_sim *sim);

/* Whether rank's memory fits its GPU (peak reserved + framework <= capacity
 * and no allocation failed). */
bool vs_rank_fits(const vs_rank *rank);

/* Bytes of rank's paged optimizer states (CUDA managed memory) that do
 * not fit beside its peak: the driver evicts them to host memory while
 * the step's activations need the room, and bitsandbytes prefetches them
 * back before the optimizer step (Optimizer8bit.step:
 * page_mng.prefetch_all, cudaMemPrefetchAsync), each step; 0 where they
 * fit or there are none. Not timed. */
uint64_t vs_rank_paged_out_bytes(const vs_rank *rank);

/* The simulated rank whose paged optimizer states move out the most
 * (vs_rank_paged_out_bytes; the first on ties), NULL where none does. */
const vs_rank *vs_sim_most_paged_out(const vs_sim *sim);

/* The simulated rank that finishes last (first on ties): its step time is
 * the job's, and the breakdown above is its own. */
const vs_rank *vs_sim_slowest_rank(const vs_sim *sim);

/* The model FLOPs of a step of `microbatches` micro-batches a pipeline
 * of sim's job (micro_batch sequences each, over the workload's dp
 * replicas, whose cp ranks share each sequence), and its tokens a second
 * and model FLOPs utilization when it takes step_s seconds: those two 0
 * when it takes none. */
typedef struct vs_rates {
  double model_flops;
  double tokens_per_s;
  double mfu;
} vs_rates;

vs_rates vs_sim_rates(const vs_sim *sim, uint64_t microbatches, double step_s);

/* The node whose host memory peaks highest (first on ties); NULL without
 * nodes. */
const vs_node_mem *vs_sim_worst_node(const vs_sim *sim);

/* The tracked node (in sim->nodes) whose host and NVMe memory stands for
 * the job's node `node` (0 to layout.nodes - 1): the node itself where it
 * is tracked; in stage mode, otherwise, the first node of the same
 * make-up (as many GPUs of each stage: the same figures, every GPU of a
 * stage running alike), or, past VS_NODE_MAKEUPS_MAX make-ups, the
 * tracked node of the stage of its first GPU. Stage mode's figures are
 * those of --ranks all where the stages' times are (nodes_uneven false);
 * else approximate through the times of the copies. NULL without tracked
 * nodes. */
const vs_node_mem *vs_sim_node_like(const vs_sim *sim, uint64_t node);

/* The simulated rank whose peak use is highest (first on ties). */
const vs_rank *vs_sim_worst_rank(const vs_sim *sim);

/* The tensors a rank held on its GPU when its allocated memory first
 * peaked, grouped by the op that allocated them and their category. */
typedef struct vs_peak_group {
  char op[VS_OP_NAME_MAX];  /* the allocating op's name ("cross_entropy") */
  int category;             /* vs_category */
  int phase;                /* the allocating ops' vs_phase (the first's) */
  bool checkpoint;          /* full-recompute checkpoints (layer inputs) */
  uint32_t layers;          /* distinct layers among the ops (-1 and the
                               head count as layers) */
  uint64_t bytes;           /* requested bytes (before allocator rounding) */
  uint64_t tensors;         /* how many */
  int32_t first_layer, last_layer;           /* the ops' layers (-1 step or
                                                embedding, layers = head) */
  int32_t first_microbatch, last_microbatch; /* -1: once a step */
} vs_peak_group;

/* r's groups at its peak, largest first (then by op and category), into a
 * new array *groups of *n (the caller frees it); none (NULL, 0) when r did
 * not note its tensors (vs_sim_opts.peak_tensors). VS_ENOMEM. O(effects of
 * its program x groups). */
int vs_sim_peak_groups(const vs_rank *r, vs_peak_group **groups, size_t *n);

#endif

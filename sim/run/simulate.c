/* simulate.c - glue from inputs to results (see simulate.h). */
#include "simulate.h"

#include "period.h"
#include "steady.h"

#include "cost.h"
#include "grow.h"
#include "units.h"

#include <stdio.h>

#include <stdlib.h>
#include <string.h>

bool vs_rank_fits(const vs_rank *rank)
{
  return vs_mem_fits(&rank->mem);
}

uint64_t vs_rank_paged_out_bytes(const vs_rank *rank)
{
  uint64_t paged = rank->managed.peak_allocated_bytes;
  uint64_t need = rank->mem.peak_used_bytes + paged;
  if (need <= rank->mem.capacity_bytes)
    return 0;
  return need - rank->mem.capacity_bytes < paged
             ? need - rank->mem.capacity_bytes
             : paged;
}

const vs_rank *vs_sim_most_paged_out(const vs_sim *sim)
{
  const vs_rank *most = NULL;
  uint64_t out = 0;
  for (size_t i = 0; i < sim->n_ranks; i++) {
    uint64_t b = vs_rank_paged_out_bytes(&sim->ranks[i]);
    if (b > out) {
      out = b;
      most = &sim->ranks[i];
    }
  }
  return most;
}

const vs_rank *vs_sim_worst_rank(const vs_sim *sim)
{
  const vs_rank *worst = &sim->ranks[0];
  for (size_t i = 1; i < sim->n_ranks; i++)
    if (sim->ranks[i].mem.peak_used_bytes > worst->mem.peak_used_bytes)
      worst = &sim->ranks[i];
  return worst;
}

const vs_rank *vs_sim_slowest_rank(const vs_sim *sim)
{
  const vs_rank *slow = &sim->ranks[0];
  for (size_t i = 1; i < sim->n_ranks; i++)
    if (sim->ranks[i].end_ns > slow->end_ns)
      slow = &sim->ranks[i];
  return slow;
}

const vs_node_mem *vs_sim_worst_node(const vs_sim *sim)
{
  const vs_node_mem *worst = sim->n_nodes ? &sim->nodes[0] : NULL;
  for (size_t i = 1; i < sim->n_nodes; i++)
    if (sim->nodes[i].mem[VS_PLACE_HOST].peak_allocated_bytes >
        worst->mem[VS_PLACE_HOST].peak_allocated_bytes)
      worst = &sim->nodes[i];
  return worst;
}

/* ------------------------------------------------------------------------
 * Nodes: host and NVMe memory
 * ------------------------------------------------------------------------ */

/* Whether any stage keeps bytes off its GPUs, for a while
 * (activations) or for the step. */
static bool uses_nodes(const vs_recipe *r, const vs_layout *lay)
{
  if (r->offload.activations)
    return true;
  for (uint64_t s = 0; s < lay->pp; s++)
    if (vs_placed_total(&lay->stages[s].host) ||
        vs_placed_total(&lay->stages[s].nvme))
      return true;
  return false;
}

const vs_node_mem *vs_sim_node_like(const vs_sim *sim, uint64_t node)
{
  const vs_layout *lay = &sim->layout;
  uint64_t gpn = sim->topo->gpus_per_node, stage, rep;
  const vs_node_mem *like = NULL;
  if (sim->n_nodes == 0)
    return NULL;
  if (node < sim->n_nodes && sim->nodes[node].node == node)
    return &sim->nodes[node]; /* every node tracked (--ranks all), in order */
  if (sim->node_like && node < lay->nodes)
    return &sim->nodes[sim->node_like[node]];
  stage = vs_layout_stage_of_gpu(lay, node * gpn);
  rep = stage * lay->pp_stride / gpn; /* the node of the stage's rank */
  for (size_t i = 0; i < sim->n_nodes; i++) {
    if (sim->nodes[i].node == node)
      return &sim->nodes[i];
    if (sim->nodes[i].node == rep)
      like = &sim->nodes[i];
  }
  return like ? like : &sim->nodes[0];
}

/* The GPUs of stage s (global numbers) on each tracked node: index[node]
 * is the node's place in sim->nodes or -1; weights[i] counts them. */
static void stage_weights(const vs_sim *sim, uint64_t s, const int32_t *index,
                          uint32_t *weights)
{
  const vs_layout *lay = &sim->layout;
  uint64_t gpn = sim->topo->gpus_per_node;
  for (uint64_t d = 0; d < lay->dp; d++)
    for (uint64_t t = 0; t < lay->tp; t++) {
      uint64_t gpu = s * lay->pp_stride + d * lay->dp_stride + t;
      int32_t i = index[gpu / gpn];
      if (i >= 0)
        weights[i]++;
    }
}

/* Whether stage mode's one rank per stage may misrepresent a group of
 * gpi GPUs that share a resource (GPU g is in group g / gpi): a stage
 * with a different number of GPUs in two of the groups it uses, a group
 * holding GPUs of two stages (which is exact only where every group of
 * those stages is alike: not told apart, a choice of cost), or groups
 * holding different numbers of the job's GPUs. O(gpus). */
static bool uneven_over(const vs_sim *sim, uint64_t gpi)
{
  const vs_layout *lay = &sim->layout;
  uint64_t groups = vs_div_ceil(lay->gpus, gpi), total_first = 0;
  uint32_t *count = calloc((size_t)groups, sizeof *count);
  uint32_t *stage_of = malloc((size_t)groups * sizeof *stage_of);
  bool uneven = false;
  if (!count || !stage_of) {
    free(count);
    free(stage_of);
    return true; /* cannot tell: say so rather than claim exactness */
  }
  for (uint64_t n = 0; n < groups; n++)
    stage_of[n] = UINT32_MAX;
  for (uint64_t s = 0; s < lay->pp && !uneven; s++) {
    uint64_t first = UINT64_MAX;
    memset(count, 0, (size_t)groups * sizeof *count);
    for (uint64_t d = 0; d < lay->dp; d++)
      for (uint64_t t = 0; t < lay->tp; t++) {
        uint64_t n = (s * lay->pp_stride + d * lay->dp_stride + t) / gpi;
        count[n]++;
        if (stage_of[n] == UINT32_MAX)
          stage_of[n] = (uint32_t)s;
        uneven |= stage_of[n] != (uint32_t)s;
      }
    for (uint64_t n = 0; n < groups && !uneven; n++)
      if (count[n]) {
        first = first == UINT64_MAX ? count[n] : first;
        uneven = count[n] != first;
      }
  }
  for (uint64_t n = 0; n < groups && !uneven; n++) {
    uint64_t held = lay->gpus - n * gpi < gpi ? lay->gpus - n * gpi : gpi;
    total_first = n == 0 ? held : total_first;
    uneven = held != total_first;
  }
  free(count);
  free(stage_of);
  return uneven;
}

/* Whether stage mode may be approximate for what GPUs share off the GPU:
 * nodes (CPU, host memory, NVMe) or PCIe switches filled unevenly or by
 * GPUs of two stages (vs_resource_users: each rank counts for its
 * stage's GPUs on its own instance, a stage's GPUs elsewhere are taken
 * to see the same). */
static bool stages_uneven(const vs_sim *sim)
{
  uint64_t switch_gpus = sim->topo->gpus_per_pcie_switch;
  return uneven_over(sim, sim->topo->gpus_per_node) ||
         uneven_over(sim, switch_gpus ? switch_gpus : 1);
}

/* Each rank's shares: in stage mode its stage's GPUs on each tracked node
 * (every peer does what it does, at the same time), else 1 on its own. */
static int share_nodes(vs_sim *sim, const int32_t *index, bool all_ranks)
{
  uint32_t *w = calloc(sim->n_nodes, sizeof *w);
  size_t n = 0;
  sim->shares = calloc(sim->n_ranks * (all_ranks ? 1 : sim->n_nodes),
                       sizeof *sim->shares);
  if (!w || !sim->shares) {
    free(w);
    return VS_ENOMEM;
  }
  for (size_t r = 0; r < sim->n_ranks; r++) {
    vs_rank *rk = &sim->ranks[r];
    rk->shares = &sim->shares[n];
    if (all_ranks) {
      sim->shares[n++] = (vs_node_share){
          (uint32_t)index[rk->id / sim->topo->gpus_per_node], 1};
      rk->n_shares = 1;
      continue;
    }
    memset(w, 0, sim->n_nodes * sizeof *w);
    stage_weights(sim, (uint64_t)rk->stage, index, w);
    for (size_t i = 0; i < sim->n_nodes; i++)
      if (w[i])
        sim->shares[n++] = (vs_node_share){(uint32_t)i, w[i]};
    rk->n_shares = (uint32_t)(&sim->shares[n] - rk->shares);
  }
  free(w);
  return 0;
}

/* Tracks node (index[node], its place in sim->nodes) unless it is. */
static void track_node(vs_sim *sim, uint64_t node, int32_t *index)
{
  if (index[node] >= 0)
    return;
  index[node] = (int32_t)sim->n_nodes;
  vs_node_mem_init(&sim->nodes[sim->n_nodes++], (uint32_t)node,
                   sim->topo->host_memory_bytes,
                   sim->topo->nvme_capacity_bytes);
}

/* In stage mode: tracks the first node of each make-up (how many GPUs of
 * each stage it holds) and fills sim->node_like, so that every node's
 * host memory is simulated; false (nothing done) past
 * VS_NODE_MAKEUPS_MAX make-ups or out of host memory. O(gpus + nodes x
 * make-ups x pp). */
static bool track_makeups(vs_sim *sim, int32_t *index)
{
  const vs_layout *lay = &sim->layout;
  uint64_t gpn = sim->topo->gpus_per_node, pp = lay->pp, n_kinds = 0;
  uint32_t *count = calloc((size_t)(lay->nodes * pp), sizeof *count);
  uint64_t first[VS_NODE_MAKEUPS_MAX]; /* each make-up's first node */
  bool ok;
  sim->node_like = NULL;
  ok = count &&
       (sim->node_like = malloc((size_t)lay->nodes * sizeof *sim->node_like));
  for (uint64_t s = 0; ok && s < pp; s++)
    for (uint64_t d = 0; d < lay->dp; d++)
      for (uint64_t t = 0; t < lay->tp; t++)
        count[(s * lay->pp_stride + d * lay->dp_stride + t) / gpn * pp + s]++;
  for (uint64_t n = 0; ok && n < lay->nodes; n++) {
    uint64_t k = 0;
    while (k < n_kinds && memcmp(&count[first[k] * pp], &count[n * pp],
                                 (size_t)pp * sizeof *count))
      k++;
    if (k == n_kinds && (ok = n_kinds < VS_NODE_MAKEUPS_MAX))
      first[n_kinds++] = n;
    sim->node_like[n] = (uint32_t)k; /* the k-th tracked, in node order */
  }
  for (uint64_t k = 0; ok && k < n_kinds; k++)
    track_node(sim, first[k], index);
  free(count);
  if (!ok) {
    free(sim->node_like);
    sim->node_like = NULL;
  }
  return ok;
}

/* The nodes whose host and NVMe memory the job uses, and the ranks'
 * shares of them; none when nothing lives off the GPUs. Every node is
 * tracked with --ranks all; in stage mode one of each make-up (or, past
 * VS_NODE_MAKEUPS_MAX of them, the simulated ranks' own). */
static int make_nodes(vs_sim *sim, const vs_sim_opts *opts, vs_error *err)
{
  const vs_layout *lay = &sim->layout;
  uint64_t gpn = sim->topo->gpus_per_node;
  int32_t *index;
  int rc;
  if (!uses_nodes(&sim->recipe, lay))
    return 0;
  index = malloc((size_t)lay->nodes * sizeof *index);
  sim->nodes = calloc((size_t)lay->nodes, sizeof *sim->nodes);
  if (!index || !sim->nodes) {
    free(index);
    return vs_error_set(err, VS_ENOMEM, "out of host memory for the nodes");
  }
  for (uint64_t i = 0; i < lay->nodes; i++)
    index[i] = -1;
  if (opts->all_ranks || !track_makeups(sim, index))
    for (size_t r = 0; r < sim->n_ranks; r++)
      track_node(sim, sim->ranks[r].id / gpn, index);
  rc = share_nodes(sim, index, opts->all_ranks);
  sim->nodes_uneven = !opts->all_ranks && stages_uneven(sim);
  free(index);
  return rc ? vs_error_set(err, rc, "out of host memory for the nodes") : 0;
}

/* Whether the rank in `slot` of its stage holds the hottest expert of its
 * expert group: the group's ep rank 0 (the expert grid puts etp ranks
 * innermost, then ep: vs_layout's place_expert_groups). */
static bool holds_hottest(const vs_layout *lay, uint64_t slot)
{
  return (slot / lay->group_size[VS_GROUP_ETP]) %
             lay->group_size[VS_GROUP_EP] ==
         0;
}

/* The ranks sim simulates: one per stage, or every GPU (tp x dp a
 * stage, the cp ranks counted in dp). */
static uint64_t ranks_per_stage(const vs_sim *sim, const vs_sim_opts *opts)
{
  return opts->all_ranks ? sim->layout.tp * sim->layout.dp : 1;
}

/* VS_EUSAGE when --ranks all asks for more ranks than vsim simulates. */
static int check_rank_count(const vs_sim *sim, const vs_sim_opts *opts,
                            vs_error *err)
{
  uint64_t n = ranks_per_stage(sim, opts) * sim->layout.pp;
  if (n <= VS_MAX_SIMULATED_RANKS)
    return 0;
  return vs_error_set(err, VS_EUSAGE,
                      "--ranks all: %llu GPUs are more than vsim simulates "
                      "one by one (%d); the default, one GPU per pipeline "
                      "stage, gives the same memory and time",
                      (unsigned long long)n, VS_MAX_SIMULATED_RANKS);
}

/* The global rank of the j-th GPU of stage `stage` (tp innermost, then cp
 * and dp), in Megatron order tp-dp-pp (the default) or tp-pp-dp; below
 * VS_MAX_GPUS (workload.h), so that it fits 32 bits. */
_Static_assert(VS_MAX_GPUS <= UINT32_MAX, "a rank id is 32 bits");

static uint32_t rank_id(const vs_layout *lay, uint64_t stage, uint64_t j)
{
  return (uint32_t)(stage * lay->pp_stride + (j / lay->tp) * lay->dp_stride +
                    j % lay->tp);
}

/* Creates the simulated ranks (check_rank_count passed): one per stage
 * (dp_rank = tp_rank = 0), or every GPU in Megatron order (tp innermost,
 * then cp, dp, pp). */
static int make_ranks(vs_sim *sim, const vs_sim_opts *opts, vs_step step,
                      const vs_resource_spec *resources, vs_error *err)
{
  const vs_layout *lay = &sim->layout;
  uint64_t per_stage = ranks_per_stage(sim, opts);
  size_t n = (size_t)(per_stage * lay->pp);

  sim->ranks = calloc(n, sizeof *sim->ranks);
  if (!sim->ranks)
    return vs_error_set(err, VS_ENOMEM, "out of host memory for %zu ranks", n);
  sim->n_ranks = n;
  for (uint64_t stage = 0; stage < lay->pp; stage++) {
    for (uint64_t j = 0; j < per_stage; j++) {
      vs_rank *r = &sim->ranks[stage * per_stage + j];
      uint64_t prog = stage + (sim->per_rank_load && !holds_hottest(lay, j)
                                   ? lay->pp
                                   : 0);
      vs_rank_init(r, rank_id(lay, stage, j), &sim->programs[prog],
                   sim->topo->memory_bytes, lay->stages[stage].framework_bytes);
      r->step = step;
      if (sim->wl->runtime.allocator == VS_ALLOC_CACHING) {
        const vs_runtime_conf *rt = &sim->wl->runtime;
        vs_alloc_config cfg = {
            sim->topo->memory_bytes, lay->stages[stage].framework_bytes,
            rt->expandable_segments, rt->max_split_size_mb << 20,
            (uint32_t)rt->roundup_power2_divisions};
        if (vs_rank_use_caching(r, &cfg))
          return vs_error_set(err, VS_ENOMEM,
                              "out of host memory for the allocator of rank %u",
                              r->id);
      }
      /* the notes serve one report line: a program too large for their
         numbers goes without it */
      if (opts->peak_tensors && !opts->all_ranks &&
          vs_rank_record_lifetimes(r) == VS_ENOMEM)
        return vs_error_set(err, VS_ENOMEM,
                            "out of host memory noting the tensors of rank "
                            "%u",
                            r->id);
      r->slot = (uint32_t)j;
      r->tp_rank = (int)(j % lay->tp);
      /* the dp x cp group: cp consecutive ranks (vs_layout's groups) */
      r->cp_rank = (int)(j / lay->tp % lay->cp);
      r->dp_rank = (int)(j / lay->tp / lay->cp);
      for (int k = 0; k < VS_RES_N; k++)
        r->res_users[k] =
            vs_resource_users(&resources[k], lay, stage, opts->all_ranks);
    }
  }
  return 0;
}

/* Takes the exposed offload time out of rest_ns (what the step spent
 * beyond its kernels and bubble), never more than there is. */
static void split_offload(vs_sim *sim, const vs_rank *slow, uint64_t *rest_ns)
{
  uint64_t copy = slow->wait_offload_ns + slow->tail_copy_ns;
  uint64_t cpu = slow->tail_cpu_ns;
  if (copy > *rest_ns)
    copy = *rest_ns;
  *rest_ns -= copy;
  if (cpu > *rest_ns)
    cpu = *rest_ns;
  *rest_ns -= cpu;
  sim->offload_copy_s = (double)copy * 1e-9;
  sim->cpu_optimizer_s = (double)cpu * 1e-9;
  sim->offloads = sim->recipe.offload.cpu_step ||
                  sim->recipe.offload.fetch_params ||
                  sim->recipe.offload.activations;
}

/* The compute stream's time by what it does (integer ns). */
typedef struct compute_sums {
  uint64_t busy, compute, tp, ep, cp, dp;
} compute_sums;

/* Adds `times` runs of op (of p) to x when it is on the compute stream. */
static void add_compute_op(const vs_program *p, const vs_pop *op,
                           uint64_t times, compute_sums *x)
{
  uint64_t dur_ns = vs_op_kind_of(p, op)->dur_ns * times;
  if (op->stream != VS_STREAM_COMPUTE)
    return;
  x->busy += dur_ns;
  if (op->phase == VS_PHASE_TP_COMM)
    x->tp += dur_ns;
  else if (op->phase == VS_PHASE_EP_COMM)
    x->ep += dur_ns;
  else if (op->phase == VS_PHASE_CP_COMM)
    x->cp += dur_ns;
  else if (op->phase == VS_PHASE_DP_COMM)
    x->dp += dur_ns; /* reductions on the compute stream: all exposed */
  else
    x->compute += dur_ns;
}

/* The compute stream of p, with sim->steady_extra more rounds of its
 * repeating micro-batch's units (and their bound split) when told. */
static compute_sums compute_of(vs_sim *sim, const vs_program *p)
{
  compute_sums x = {0};
  memcpy(sim->bound_s, p->bound_seconds, sizeof sim->bound_s);
  for (size_t i = 0; i < p->n_stream_ops[VS_STREAM_COMPUTE]; i++)
    add_compute_op(p, &p->ops[p->stream_ops[VS_STREAM_COMPUTE][i]], 1, &x);
  for (size_t u = 0; sim->steady_extra && u < p->n_units; u++) {
    const vs_unit_mark *k = &p->units[u];
    if (k->mb != sim->steady_mb)
      continue;
    for (uint32_t o = k->first_op; o < k[1].first_op; o++)
      add_compute_op(p, &p->ops[o], sim->steady_extra, &x);
    for (int b = 0; b < VS_BOUND_SPLIT_N; b++)
      sim->bound_s[b] += (double)sim->steady_extra *
                         (k[1].bound_seconds[b] - k->bound_seconds[b]);
  }
  return x;
}

/* A rank's step less its waits on the pipeline: its compute stream's
 * work and every other wait (collectives, offload copies) and its tail. */
static uint64_t own_time(const vs_rank *r)
{
  /* the waits lie within a whole step; a run stopped at an out-of-memory
   * may have counted one past its last end */
  return r->end_ns > r->wait_p2p_ns ? r->end_ns - r->wait_p2p_ns : 0;
}

/* How much of slow's wait on the pipeline is for busier stages: the
 * longest own_time of a rank of its pipeline (its slot: the ranks it
 * sends to and receives from) beyond slow's, at most the whole wait;
 * sim->busiest_stage is that rank's stage. The rest is the pipeline
 * filling and draining (and its sends' own time on the wire). */
static uint64_t imbalance_of(vs_sim *sim, const vs_rank *slow)
{
  uint64_t own = own_time(slow), most = own;
  sim->busiest_stage = slow->stage;
  for (size_t i = 0; i < sim->n_ranks; i++) {
    uint64_t t = own_time(&sim->ranks[i]);
    if (sim->ranks[i].slot == slow->slot && t > most) {
      most = t;
      sim->busiest_stage = sim->ranks[i].stage;
    }
  }
  return most - own < slow->wait_p2p_ns ? most - own : slow->wait_p2p_ns;
}

vs_rates vs_sim_rates(const vs_sim *sim, uint64_t microbatches, double step_s)
{
  const vs_workload *wl = sim->wl;
  vs_rates r = {0, 0, 0};
  r.model_flops = vs_cost_model_flops(&sim->model, &sim->recipe, sim->layout.tp,
                                      sim->layout.dp, microbatches);
  if (!(step_s > 0))
    return r;
  /* the data-parallel replicas: layout.dp counts the cp ranks too, which
   * share each sequence */
  r.tokens_per_s = (double)(microbatches * wl->training.micro_batch *
                            wl->parallel.dp * wl->model.seq_len) /
                   step_s;
  r.mfu = vs_cost_mfu(
      r.model_flops, step_s, sim->layout.gpus,
      vs_cost_peak_flops(sim->topo, wl->training.precision, VS_FLOPS_MATMUL));
  return r;
}

static void summarise(vs_sim *sim)
{
  const vs_workload *wl = sim->wl;
  const vs_rank *slow = vs_sim_slowest_rank(sim);
  compute_sums x = compute_of(sim, slow->prog);
  uint64_t busy_ns = x.busy, compute_ns = x.compute, tp_ns = x.tp;
  uint64_t ep_ns = x.ep, cp_ns = x.cp, dp_ns = x.dp;
  uint64_t mbs = sim->layout.grad_accum + sim->steady_extra;
  uint64_t rest_ns, imbalance_ns;
  vs_rates rates;

  sim->step_time_s = (double)slow->end_ns * 1e-9;
  /* integer nanoseconds, so the parts add up to the step exactly */
  rest_ns = slow->end_ns > busy_ns + slow->wait_p2p_ns
                ? slow->end_ns - busy_ns - slow->wait_p2p_ns
                : 0;
  split_offload(sim, slow, &rest_ns);
  imbalance_ns = imbalance_of(sim, slow);
  sim->compute_s = (double)compute_ns * 1e-9;
  sim->tp_comm_s = (double)tp_ns * 1e-9;
  sim->ep_comm_s = (double)ep_ns * 1e-9;
  sim->cp_comm_s = (double)cp_ns * 1e-9;
  sim->bubble_s = (double)(slow->wait_p2p_ns - imbalance_ns) * 1e-9;
  sim->imbalance_s = (double)imbalance_ns * 1e-9;
  sim->exposed_comm_s = (double)(rest_ns + dp_ns) * 1e-9;
  /* the step told: mbs micro-batches */
  rates = vs_sim_rates(sim, mbs, sim->step_time_s);
  sim->model_flops = rates.model_flops;
  sim->tokens_per_s = rates.tokens_per_s;
  sim->mfu = rates.mfu;
  sim->fits = true;
  for (size_t i = 0; i < sim->n_ranks; i++)
    sim->fits = sim->fits && vs_rank_fits(&sim->ranks[i]);
  for (size_t i = 0; i < sim->n_nodes; i++)
    sim->fits = sim->fits && vs_node_mem_fits(&sim->nodes[i]);
  sim->reserve_bytes = vs_margin_bytes(&wl->runtime.reserve,
                                       sim->topo->memory_bytes);
  sim->tight = false;
  for (size_t i = 0; i < sim->n_ranks && sim->fits; i++)
    sim->tight = sim->tight || sim->ranks[i].mem.peak_used_bytes +
                                       sim->reserve_bytes >
                                   sim->ranks[i].mem.capacity_bytes;
}

int vs_sim_run(vs_sim *sim, const vs_workload *wl, const vs_topology *topo,
               const vs_sim_opts *opts, vs_error *err)
{
  return vs_sim_run_pooled(sim, wl, topo, opts, NULL, err);
}

void vs_program_pool_fini(vs_program_pool *pool)
{
  for (size_t s = 0; s < pool->n; s++)
    vs_program_fini(&pool->programs[s]);
  free(pool->programs);
  pool->programs = NULL;
  pool->n = 0;
}

/* Points sim->programs at n programs: pool's (grown, old ones kept for
 * their arrays) or fresh ones. */
static int take_programs(vs_sim *sim, size_t n, vs_program_pool *pool,
                         vs_error *err)
{
  if (pool && pool->n < n) {
    vs_program *more = realloc(pool->programs, n * sizeof *more);
    if (!more)
      return vs_error_set(err, VS_ENOMEM, "out of host memory for programs");
    memset(more + pool->n, 0, (n - pool->n) * sizeof *more);
    pool->programs = more;
    pool->n = n;
  }
  sim->programs = pool ? pool->programs : calloc(n, sizeof *sim->programs);
  if (!sim->programs)
    return vs_error_set(err, VS_ENOMEM, "out of host memory for programs");
  sim->pool = pool;
  sim->n_programs = n;
  return 0;
}

/* A model of the ranks of expert load `load` (edited by opts->edit_model
 * when given) and its recipe. */
static int build_model(vs_sim *sim, const vs_sim_opts *opts,
                       vs_expert_load load, vs_model *m, vs_recipe *r,
                       vs_error *err)
{
  int rc;
  if ((rc = vs_model_build_loaded(sim->wl, load, m, err)) ||
      (opts->edit_model && (rc = opts->edit_model(m, opts->edit_ctx, err))))
    return rc;
  return vs_recipe_build(sim->wl, m, r, err);
}

/* The model, its recipe and the layout; with every GPU simulated under a
 * skewed router, the model and recipe of the ranks holding only other
 * experts too (the layout, their states, is the same). */
static int build_plan(vs_sim *sim, const vs_sim_opts *opts, vs_error *err)
{
  int rc;
  if ((rc = build_model(sim, opts, VS_LOAD_HOTTEST, &sim->model,
                        &sim->recipe, err)) ||
      (rc = vs_layout_build(sim->wl, sim->topo, &sim->model, &sim->recipe,
                            &sim->layout, err)) ||
      (rc = check_rank_count(sim, opts, err)))
    return rc;
  sim->per_rank_load =
      opts->all_ranks &&
      vs_workload_skew_applies(&sim->wl->model, sim->wl->parallel.ep);
  if (!sim->per_rank_load)
    return 0;
  return build_model(sim, opts, VS_LOAD_REST, &sim->model_rest,
                     &sim->recipe_rest, err);
}

/* The sets of stage programs sim runs: model's, and with per_rank_load
 * model_rest's (as many ops and kinds). */
static size_t program_sets(const vs_sim *sim)
{
  return sim->per_rank_load ? 2 : 1;
}

bool vs_sim_runs_first_step(const vs_sim *sim)
{
  return sim->recipe.first_step_states;
}

/* ------------------------------------------------------------------------
 * The work estimate and the budget
 * ------------------------------------------------------------------------ */

/* Memory events per op, from above (the schedule's reservation). */
#define EFFECTS_PER_OP ((double)VS_SCHEDULE_EFFECTS_PER_OP)
/* Printed bytes of a timeline.csv row (time %.9f ~12, rank ~3, op name
 * ~14, category ~8, delta ~10, allocated and reserved ~11 each, commas
 * and newline 7), of an ops.csv row (rank ~3, stream ~7, op name ~14,
 * layer and micro-batch ~2 each, start and end ~12 each, flops ~12 and
 * bytes ~10 in %.9g, commas and newline 9) and of a trace event (108
 * fixed characters of report.c's format, op name ~14, phase ~3, bound
 * ~10, rank, stream, layer, micro-batch and the two times ~22), from
 * report.c's formats. */
#define TIMELINE_ROW_BYTES 76.0
#define OPS_ROW_BYTES 83.0
/* An op_bounds.csv row: an ops.csv row's first seven cells (~61 bytes
 * with their commas), the bound's name ~10, its six parts (two in %.9f
 * ~11 each, four zeros written 0), the phase ~8, commas and newline 9
 * (the shipped workloads' rows: 98 to 108 bytes on average). */
#define OP_BOUNDS_ROW_BYTES 113.0
#define TRACE_EVENT_BYTES 156.0
/* A trace's memory counter sample: 60 fixed characters, a category name
 * ~8, the time ~12 and the bytes ~10. */
#define TRACE_COUNTER_BYTES 90.0

/* Whether the engine will run one pipeline slot and give the others
 * copies of its run (vs_engine_run's independent slots): every rank
 * simulated, none sharing a node's memory or a resource (offload is what
 * places bytes there and moves them through both), no stop at the first
 * out-of-memory. */
static bool slots_copied(const vs_sim *sim, const vs_sim_opts *opts)
{
  return opts->all_ranks && !opts->stop_at_oom && !sim->per_rank_load &&
         sim->layout.tp * sim->layout.dp > 1 &&
         !uses_nodes(&sim->recipe, &sim->layout);
}

/* sim's work from its model and layout (built by build_plan). */
static void estimate_work(const vs_sim *sim, const vs_sim_opts *opts,
                          vs_work *w)
{
  const vs_layout *lay = &sim->layout;
  double per_stage = (double)ranks_per_stage(sim, opts);
  double ops = 0, kinds = 0, ranks = per_stage * (double)lay->pp;
  double steps = vs_sim_runs_first_step(sim) ? 2 : 1; /* program runs */
  /* a buffer has an allocation and a free among its ops' effects */
  double buffers = 0.5 * EFFECTS_PER_OP;
  for (uint64_t s = 0; s < lay->pp; s++) {
    vs_job job = {.wl = sim->wl, .topo = sim->topo, .model = &sim->model,
                  .recipe = &sim->recipe, .layout = lay};
    ops += vs_schedule_estimate_ops(&job, (int)s);
    kinds += vs_schedule_estimate_kinds(&job, (int)s);
  }
  w->rank_events = ops * per_stage;
  w->events = steps * (slots_copied(sim, opts) ? ops : w->rank_events);
  w->ranks = ranks;
  w->gpus = lay->gpus;
  w->steps = steps;
  /* the programs and their op kinds (one set serves every step), the
   * ranks, each rank's block of every buffer (caching allocator) and the
   * peak's note of each buffer; with the first step its ranks too, alive
   * together */
  w->host_bytes = (double)program_sets(sim) *
                      (ops * (double)vs_schedule_bytes_per_op() +
                       kinds * (double)vs_schedule_bytes_per_kind()) +
                  steps * (ranks * (double)sizeof(vs_rank) +
                           w->rank_events * buffers * sizeof(uint32_t)) +
                  (opts->peak_tensors && !opts->all_ranks
                       ? ops * buffers * sizeof(uint32_t)
                       : 0);
  w->csv_bytes = 0;
  w->trace_bytes = 0;
  if (opts->record) {
    /* the records of the ranks that run: copies share their twin's */
    w->host_bytes +=
        (slots_copied(sim, opts) ? ops : w->rank_events) *
        (EFFECTS_PER_OP * sizeof(vs_mem_event) + sizeof(vs_op_span));
    w->csv_bytes = w->rank_events * (EFFECTS_PER_OP * TIMELINE_ROW_BYTES +
                                     OPS_ROW_BYTES + OP_BOUNDS_ROW_BYTES);
    w->trace_bytes = w->rank_events * (TRACE_EVENT_BYTES +
                                       EFFECTS_PER_OP * TRACE_COUNTER_BYTES);
  }
}

bool vs_budget_allows(const vs_budget *b, const vs_work *w)
{
  return (b->max_events <= 0 || w->events <= b->max_events) &&
         (b->max_host_bytes <= 0 || w->host_bytes <= b->max_host_bytes);
}

/* VS_ELIMIT, with the estimate, when w is over opts' budget. */
static int check_budget(const vs_sim *sim, const vs_sim_opts *opts,
                        const vs_work *w, vs_error *err)
{
  const vs_budget *b = &opts->budget;
  char need[16], limit[16];
  if (vs_budget_allows(b, w))
    return 0;
  vs_format_bytes((uint64_t)w->host_bytes, need, sizeof need);
  if (b->max_host_bytes > 0)
    vs_format_bytes((uint64_t)b->max_host_bytes, limit, sizeof limit);
  else
    snprintf(limit, sizeof limit, "no limit");
  return vs_error_set(
      err, VS_ELIMIT,
      "%s: this simulation is estimated at %.3g events and %s of host memory, "
      "over the limits (--max-events %.3g, --max-memory %s): raise them to run "
      "it anyway, or simulate less (fewer layers or micro-batches%s)",
      sim->wl->origins.file, w->events, need, b->max_events, limit,
      opts->all_ranks ? "; --ranks stage gives the same memory and time" : "");
}

int vs_sim_estimate(const vs_workload *wl, const vs_topology *topo,
                    const vs_sim_opts *opts, vs_work *work, vs_error *err)
{
  vs_sim sim;
  int rc;
  memset(&sim, 0, sizeof sim);
  sim.wl = wl;
  sim.topo = topo;
  if ((rc = build_plan(&sim, opts, err)) == 0)
    estimate_work(&sim, opts, work);
  vs_sim_fini(&sim);
  return rc;
}

/* A step that its shared transfers (decided while the engine ran) made
 * absurd is refused as the builder refuses one of fixed op times. */
static int check_step(const vs_sim *sim, vs_error *err)
{
  if ((double)sim->stats.end_ns * 1e-9 <= VS_MAX_STEP_SECONDS)
    return 0;
  return vs_error_set(err, VS_EINPUT,
                      "%s with %s: the step would take over %.0f days, its "
                      "transfers moving at the topology's [node] figures: "
                      "check pcie_bandwidth, nvme_bandwidth, "
                      "host_memory_bandwidth and cpu_optimizer_rate against "
                      "the workload's size",
                      sim->wl->origins.file, sim->topo->origins.file,
                      VS_MAX_STEP_SECONDS / 86400);
}

/* [runtime] reserve leaves room on the GPU: one of at least the whole
 * memory would make every run TIGHT and nothing fit in fit and plan. */
static int check_reserve(const vs_workload *wl, const vs_topology *topo,
                         vs_error *err)
{
  char where[400], cap[16];
  if (vs_margin_bytes(&wl->runtime.reserve, topo->memory_bytes) <
      topo->memory_bytes)
    return 0;
  vs_conf_where(vs_workload_keys(), &wl->origins, "runtime", "reserve", where,
                sizeof where);
  return vs_error_set(err, VS_EINPUT,
                      "%s: keeps at least the GPU's whole %s ([gpu] memory) "
                      "free; reserve less than that",
                      where, vs_format_bytes(topo->memory_bytes, cap, sizeof cap));
}

/* Builds sim's programs, one per stage (and with per_rank_load one more
 * per stage for model_rest), linked across their stages: for every step
 * when sim runs the first step before the one it reports, else for the
 * only one; with opts' first_unit_only, their setup and first unit. */
static int build_programs(vs_sim *sim, const vs_sim_opts *opts,
                          vs_error *err)
{
  size_t pp = (size_t)sim->layout.pp;
  int rc = 0;
  for (size_t s = 0; s < sim->n_programs && !rc; s++) {
    bool rest = s >= pp;
    vs_job job = {.wl = sim->wl, .topo = sim->topo,
                  .model = rest ? &sim->model_rest : &sim->model,
                  .recipe = rest ? &sim->recipe_rest : &sim->recipe,
                  .layout = &sim->layout, .step = VS_STEP_ONLY,
                  .every_step = vs_sim_runs_first_step(sim),
                  .first_unit_only = opts->first_unit_only};
    rc = vs_schedule_rebuild(&job, (int)(s % pp), &sim->programs[s], err);
  }
  for (size_t first = 0; first < sim->n_programs && !rc; first += pp)
    rc = vs_schedule_link(sim->programs + first, pp, err);
  return rc;
}

/* Frees sim's ranks and nodes (not its programs). */
static void drop_ranks(vs_sim *sim)
{
  for (size_t i = 0; i < sim->n_ranks; i++)
    vs_rank_fini(&sim->ranks[i]);
  free(sim->ranks);
  for (size_t i = 0; i < sim->n_nodes; i++)
    vs_node_mem_fini(&sim->nodes[i]);
  free(sim->nodes);
  free(sim->shares);
  free(sim->node_like);
  sim->ranks = NULL;
  sim->nodes = NULL;
  sim->shares = NULL;
  sim->node_like = NULL;
  sim->n_ranks = 0;
  sim->n_nodes = 0;
}

/* ------------------------------------------------------------------------
 * A proven steady state (opts steady_to)
 * ------------------------------------------------------------------------ */

static bool ran_out(const vs_sim *sim);

/* Frees sim's watcher, if any. */
static void drop_steady(vs_sim *sim)
{
  if (sim->steady)
    vs_steady_fini(sim->steady);
  free(sim->steady);
  sim->steady = NULL;
}

/* Whether n rounds of growth g added to *count stay in 64 bits (then
 * added; *count unchanged otherwise). */
static bool grow_count(uint64_t *count, uint64_t n, uint64_t g)
{
  uint64_t add, sum;
  if (__builtin_mul_overflow(n, g, &add) ||
      __builtin_add_overflow(*count, add, &sum))
    return false;
  *count = sum;
  return true;
}

/* A watcher for the run of sim's ranks about to start under eo (what the
 * run before adds kept), or NULL when opts asks for none or the run
 * cannot be watched (it records, or vs_steady_applies says no: counted
 * then as a run without a proof, so that nothing is told). */
static vs_steady *watch_run(vs_sim *sim, const vs_sim_opts *opts,
                            const vs_engine_opts *eo)
{
  if (opts->steady_to <= sim->layout.grad_accum)
    return NULL;
  if (eo->record_timeline || eo->record_spans || eo->ranks_per_stage != 1 ||
      !vs_steady_applies(sim->ranks, sim->n_ranks) ||
      (!sim->steady && !(sim->steady = calloc(1, sizeof *sim->steady)))) {
    sim->steady_runs++; /* a run that proves nothing: nothing is told */
    return NULL;
  }
  if (sim->steady_runs++) {
    uint64_t extra = opts->steady_to - sim->layout.grad_accum;
    const vs_steady *st = sim->steady;
    if (!st->proven || extra % st->period ||
        !grow_count(&sim->steady_events_before, extra / st->period,
                    st->period_events))
      sim->steady_proofs = 0; /* the earlier run tells nothing */
    vs_steady_fini(sim->steady);
  }
  vs_steady_init(sim->steady, sim->ranks, sim->n_ranks, eo->nodes,
                 eo->n_nodes);
  return sim->steady;
}

/* t, a time of the proven run, in the longer step: after the proof's
 * later snapshot, `shift` later. */
static uint64_t told(uint64_t t, const vs_steady *st, uint64_t shift)
{
  return t > st->proven_at_ns ? t + shift : t;
}

/* Whether every count tell_longer_step grows stays in 64 bits. */
static bool longer_step_fits(const vs_sim *sim, uint64_t n, uint64_t shift,
                             uint64_t events)
{
  const vs_steady *st = sim->steady;
  uint64_t x = sim->stats.events;
  if (!grow_count(&x, 1, events) || sim->stats.end_ns > UINT64_MAX - shift)
    return false;
  for (size_t i = 0; i < sim->n_ranks; i++) {
    const vs_rank *r = &sim->ranks[i];
    const vs_steady_counts *g = &st->growth[i];
    uint64_t a = r->wait_p2p_ns, b = r->wait_comm_ns, c = r->wait_offload_ns;
    if (r->end_ns > UINT64_MAX - shift || !grow_count(&a, n, g->wait_p2p_ns) ||
        !grow_count(&b, n, g->wait_comm_ns) ||
        !grow_count(&c, n, g->wait_offload_ns))
      return false;
  }
  return true;
}

/* Makes sim's ranks and stats those of the step with sim->steady_extra
 * more micro-batches: the last run's proof (sim->steady) repeated for
 * them, and the events the runs before add. A rank's allocated peak
 * moves with the rest only under exact accounting, and only when it rose
 * after the proof (the caching allocator's blocks are not proven: its
 * peak stays the simulated micro-batches'). False, and nothing told,
 * when they are not a whole number of its periods or a count would pass
 * 64 bits. */
static bool tell_longer_step(vs_sim *sim)
{
  const vs_steady *st = sim->steady;
  uint64_t n = sim->steady_extra / st->period, shift = 0;
  uint64_t events = sim->steady_events_before;
  if (sim->steady_extra % st->period || !grow_count(&shift, n, st->period_ns) ||
      !grow_count(&events, n, st->period_events) ||
      !longer_step_fits(sim, n, shift, events))
    return false;
  grow_count(&sim->stats.events, 1, events);
  sim->stats.end_ns = told(sim->stats.end_ns, st, shift);
  for (size_t i = 0; i < sim->n_ranks; i++) {
    vs_rank *r = &sim->ranks[i];
    const vs_steady_counts *g = &st->growth[i];
    grow_count(&r->wait_p2p_ns, n, g->wait_p2p_ns);
    grow_count(&r->wait_comm_ns, n, g->wait_comm_ns);
    grow_count(&r->wait_offload_ns, n, g->wait_offload_ns);
    r->end_ns = told(r->end_ns, st, shift);
    r->tail_mark_ns = told(r->tail_mark_ns, st, shift);
    if (!r->alloc &&
        r->mem.peak_allocated_bytes > st->at_proof[i].peak_allocated_bytes)
      r->mem.peak_t_ns += shift;
  }
  return true;
}

/* After every run: tells the longer step when each run proved its steady
 * state (sim->steady_proven). */
static void tell_steady(vs_sim *sim, const vs_sim_opts *opts)
{
  sim->steady_proven = false;
  sim->steady_period = 0;
  if (sim->steady_runs && sim->steady_proofs == sim->steady_runs &&
      !ran_out(sim)) {
    sim->steady_extra = opts->steady_to - sim->layout.grad_accum;
    sim->steady_mb = sim->steady->lo;
    sim->steady_proven = tell_longer_step(sim);
    if (!sim->steady_proven && sim->steady_runs == 1 &&
        sim->steady_extra % sim->steady->period)
      sim->steady_period = sim->steady->period;
  }
  if (!sim->steady_proven)
    sim->steady_extra = 0;
  drop_steady(sim);
}

/* Makes sim's ranks running `step` (each given the cache its rank in
 * `before` left, when not NULL: vs_rank_inherit) and their nodes, and
 * runs them with eo. A run opts asks to prove its steady state is watched
 * (watch_run) and counted as proven when it is. */
static int run_ranks(vs_sim *sim, const vs_sim_opts *opts, vs_step step,
                     const vs_rank *before, vs_engine_opts *eo,
                     vs_error *err)
{
  vs_steady *st;
  int rc;
  if ((rc = make_ranks(sim, opts, step, eo->resources, err)))
    return rc;
  for (size_t i = 0; before && i < sim->n_ranks; i++)
    if (vs_rank_inherit(&sim->ranks[i], &before[i]))
      return vs_error_set(err, VS_ENOMEM,
                          "out of host memory for the first step's cache");
  if ((rc = make_nodes(sim, opts, err)))
    return rc;
  eo->ranks_per_stage = sim->n_ranks / sim->layout.pp;
  eo->nodes = sim->nodes;
  eo->n_nodes = sim->n_nodes;
  eo->steady = st = watch_run(sim, opts, eo);
  rc = vs_engine_run(sim->ranks, sim->n_ranks, eo, &sim->stats, err);
  eo->steady = NULL;
  if (st && !rc && st->proven && !sim->stats.stopped && !ran_out(sim))
    sim->steady_proofs++;
  return rc;
}

/* Whether a run of ranks[0..n) that `stopped` (stop_at_oom) did so at
 * time 0, before anything but each rank's setup (its program's op 0, the
 * model states) had started and before even that had ended: the state
 * of the run is then what the starts at time 0 made, which are the same
 * whatever follows the first unit (vs_job first_unit_only). */
static bool ranks_stopped_in_setup(const vs_rank *ranks, size_t n,
                                   bool stopped)
{
  if (!stopped)
    return false;
  for (size_t i = 0; i < n; i++) {
    const vs_rank *r = &ranks[i];
    for (int s = 0; s < VS_STREAM_N; s++)
      if (r->next[s] != (s == VS_STREAM_COMPUTE ? 1u : 0u) ||
          r->done[s] != 0)
        return false;
    if (r->prog->ops[0].phase != VS_PHASE_SETUP)
      return false;
  }
  return true;
}

/* The bytes that rank r's first step, whatever its micro-batches, holds
 * at its end if it completes: the step after it takes every allocation
 * of its setup (op 0) over from the blocks the first step left
 * (vs_rank_inherit), each a block of at least its bytes. Saturates. */
static uint64_t first_step_holds(const vs_rank *r)
{
  const vs_program *p = r->prog;
  const vs_pop *op = &p->ops[0];
  uint64_t sum = 0;
  if (op->phase != VS_PHASE_SETUP)
    return 0;
  for (uint32_t i = op->first_effect, end = vs_op_effects_end(p, op); i < end;
       i++) {
    const vs_effect *e = &p->effects[i];
    const vs_buffer *buf = vs_program_buffer(p, e->buffer);
    if (e->is_free || buf->place != VS_PLACE_GPU ||
        !vs_effect_applies(e, VS_STEP_AFTER_FIRST))
      continue;
    if (__builtin_add_overflow(sum, buf->bytes, &sum))
      return UINT64_MAX;
  }
  return sum;
}

/* Whether no first step of r's job can complete on its GPU: what it would
 * hold at its end (first_step_holds) is more than the allocator may
 * reserve, so every first step, of any micro-batches, runs out. */
static bool first_step_overflows(const vs_rank *r)
{
  const vs_alloc_config *cfg = &r->alloc->cfg;
  uint64_t room = cfg->capacity_bytes > cfg->outside_bytes
                      ? cfg->capacity_bytes - cfg->outside_bytes
                      : 0;
  return first_step_holds(r) > room;
}

/* After a first step that ran out, whether the step alone stopped in
 * rank 0's setup in a way no other first step changes: every first step
 * runs out (first_step_overflows), so the step always runs alone from
 * the same setup; rank 0 ran out there itself (the first out-of-memory
 * a report names) and is the worst rank, the two things of the run that
 * the first step's out-of-memory, kept for ranks without their own,
 * could otherwise change. */
static bool step_alone_stopped_in_setup(const vs_sim *sim)
{
  const vs_rank *r0 = sim->n_ranks > 0 ? &sim->ranks[0] : NULL;
  return r0 && r0->step == VS_STEP_ONLY && r0->alloc &&
         r0->mem.oom.happened && !r0->mem.oom.earlier_run &&
         ranks_stopped_in_setup(sim->ranks, sim->n_ranks,
                                sim->stats.stopped) &&
         vs_sim_worst_rank(sim) == r0 && first_step_overflows(r0);
}

bool vs_sim_stopped_in_setup(const vs_sim *sim)
{
  if (vs_sim_runs_first_step(sim))
    return sim->first_stopped_in_setup || step_alone_stopped_in_setup(sim);
  return ranks_stopped_in_setup(sim->ranks, sim->n_ranks, sim->stats.stopped);
}

/* Whether a rank of the run ran out of memory. */
static bool ran_out(const vs_sim *sim)
{
  for (size_t i = 0; i < sim->n_ranks; i++)
    if (sim->ranks[i].mem.oom.happened)
      return true;
  return sim->stats.stopped;
}

/* After sim ran the first step (vs_sim_runs_first_step): runs the step it
 * reports in the cache each rank's first step left. When the first step
 * ran out of memory its cache is no start for another: the step runs
 * alone from an empty cache (VS_STEP_ONLY, what vsim runs without a
 * first step: what the job needs), and keeps the first step's
 * out-of-memory where it has none of its own (the job fails in its
 * first step). A first step of the first unit alone (first_unit_only)
 * that did not run out made no gradients for the step after it to take
 * over: the run ends there, having told only that it did not stop in the
 * first step's setup, unless rank 0's first step of any micro-batches
 * runs out (first_step_overflows): the step then runs alone, as after a
 * whole first step, so that vs_sim_stopped_in_setup can tell whether it
 * stopped in rank 0's setup (step_alone_stopped_in_setup, which rests on
 * nothing the first step's own out-of-memory decides). One that ran out
 * is followed by the step alone, as a whole one that ran out is. */
static int run_after_first(vs_sim *sim, const vs_sim_opts *opts,
                           vs_engine_opts *eo, vs_error *err)
{
  vs_rank *first = sim->ranks;
  size_t n = sim->n_ranks;
  vs_engine_stats first_stats = sim->stats;
  bool out = ran_out(sim);
  bool alone = out || (opts->first_unit_only && n > 0 && first->alloc &&
                       first_step_overflows(first));
  int rc;
  sim->first_stopped_in_setup =
      ranks_stopped_in_setup(first, n, first_stats.stopped);
  if (!alone && opts->first_unit_only)
    return 0;
  sim->ranks = NULL;
  sim->n_ranks = 0;
  drop_ranks(sim); /* the nodes; the ranks are `first` */
  rc = alone ? run_ranks(sim, opts, VS_STEP_ONLY, NULL, eo, err)
             : run_ranks(sim, opts, VS_STEP_AFTER_FIRST, first, eo, err);
  for (size_t i = 0; !rc && out && i < n; i++)
    if (!sim->ranks[i].mem.oom.happened) {
      sim->ranks[i].mem.oom = first[i].mem.oom;
      sim->ranks[i].mem.oom.earlier_run = first[i].mem.oom.happened;
    }
  sim->stats.events += first_stats.events;
  sim->stats.stopped = sim->stats.stopped || first_stats.stopped;
  for (size_t i = 0; i < n; i++)
    vs_rank_fini(&first[i]);
  free(first);
  return rc;
}

int vs_sim_run_pooled(vs_sim *sim, const vs_workload *wl,
                      const vs_topology *topo, const vs_sim_opts *opts,
                      vs_program_pool *pool, vs_error *err)
{
  vs_resource_spec resources[VS_RES_N]; /* filled once the layout is known */
  vs_engine_opts eo = {.record_timeline = opts->record,
                       .record_spans = opts->record,
                       .check_invariants = opts->check_invariants,
                       .stop_at_oom = opts->stop_at_oom,
                       .resources = resources,
                       .n_resources = VS_RES_N};
  size_t n_programs = 0;
  int rc;

  memset(sim, 0, sizeof *sim);
  sim->wl = wl;
  sim->topo = topo;
  sim->all_ranks = opts->all_ranks;
  if ((rc = check_reserve(wl, topo, err)) == 0 &&
      (rc = build_plan(sim, opts, err)) == 0) {
    vs_work w;
    estimate_work(sim, opts, &w);
    rc = check_budget(sim, opts, &w, err);
    n_programs = (size_t)sim->layout.pp * program_sets(sim);
  }
  if (rc || (rc = take_programs(sim, n_programs, pool, err)) ||
      (rc = build_programs(sim, opts, err))) {
    vs_sim_fini(sim);
    return rc;
  }
  vs_resource_table(topo, resources);
  if (vs_sim_runs_first_step(sim)) {
    vs_engine_opts first = eo;
    first.record_timeline = first.record_spans = false;
    if ((rc = run_ranks(sim, opts, VS_STEP_FIRST, NULL, &first, err)) == 0)
      rc = run_after_first(sim, opts, &eo, err);
  } else {
    rc = run_ranks(sim, opts, VS_STEP_ONLY, NULL, &eo, err);
  }
  if (rc || (rc = check_step(sim, err))) {
    vs_sim_fini(sim);
    return rc;
  }
  tell_steady(sim, opts);
  summarise(sim);
  return 0;
}

void vs_sim_fini(vs_sim *sim)
{
  drop_steady(sim);
  drop_ranks(sim);
  if (!sim->pool) {
    for (size_t s = 0; s < sim->n_programs; s++)
      vs_program_fini(&sim->programs[s]);
    free(sim->programs);
  }
  vs_recipe_fini(&sim->recipe);
  vs_model_fini(&sim->model);
  vs_recipe_fini(&sim->recipe_rest);
  vs_model_fini(&sim->model_rest);
  sim->pool = NULL;
  sim->programs = NULL;
  sim->n_programs = 0;
}

/* The groups being collected: g[0..n), and for each a bitmap of the
 * layers its ops ran in (bits for layers -1 up to the program's highest,
 * `words` words each). */
typedef struct group_set {
  vs_peak_group *g;
  uint64_t *seen;
  size_t n, cap, cap_seen, words;
} group_set;

/* The group of gs for buffer b allocated by op o, appended when new;
 * NULL when out of host memory. */
static vs_peak_group *peak_group(group_set *gs, const vs_program *p,
                                 const vs_pop *o, const vs_buffer *b)
{
  const char *name = vs_op_name(p, o);
  vs_peak_group *g;
  for (size_t i = gs->n; i-- > 0;)
    if (gs->g[i].category == b->category &&
        gs->g[i].checkpoint == b->checkpoint &&
        strcmp(gs->g[i].op, name) == 0)
      return &gs->g[i];
  if (!vs_grow((void **)&gs->g, &gs->cap, gs->n + 1, sizeof *gs->g) ||
      !vs_grow((void **)&gs->seen, &gs->cap_seen, (gs->n + 1) * gs->words,
               sizeof *gs->seen))
    return NULL;
  memset(&gs->seen[gs->n * gs->words], 0, gs->words * sizeof *gs->seen);
  g = &gs->g[gs->n++];
  memset(g, 0, sizeof *g);
  snprintf(g->op, sizeof g->op, "%s", name);
  g->category = b->category;
  g->checkpoint = b->checkpoint;
  g->phase = o->phase;
  g->first_layer = g->last_layer = vs_op_layer(p, o);
  g->first_microbatch = g->last_microbatch = o->microbatch;
  return g;
}

static void peak_group_add(group_set *gs, vs_peak_group *g,
                           const vs_program *p, const vs_pop *o,
                           uint64_t bytes)
{
  uint64_t *seen = &gs->seen[(size_t)(g - gs->g) * gs->words];
  int32_t layer = vs_op_layer(p, o);
  uint32_t bit = (uint32_t)(layer + 1); /* layer -1 is bit 0 */
  g->bytes += bytes;
  g->tensors++;
  if (!(seen[bit / 64] >> (bit % 64) & 1)) {
    seen[bit / 64] |= 1ull << (bit % 64);
    g->layers++;
  }
  if (layer < g->first_layer)
    g->first_layer = layer;
  if (layer > g->last_layer)
    g->last_layer = layer;
  if (o->microbatch < g->first_microbatch)
    g->first_microbatch = o->microbatch;
  if (o->microbatch > g->last_microbatch)
    g->last_microbatch = o->microbatch;
}

static int by_bytes_desc(const void *x, const void *y)
{
  const vs_peak_group *a = x, *b = y;
  if (a->bytes != b->bytes)
    return a->bytes > b->bytes ? -1 : 1;
  if (strcmp(a->op, b->op))
    return strcmp(a->op, b->op);
  return a->category != b->category ? a->category - b->category
                                    : a->checkpoint - b->checkpoint;
}

int vs_sim_peak_groups(const vs_rank *r, vs_peak_group **groups, size_t *n)
{
  const vs_program *p = r->prog;
  group_set gs = {0};
  int32_t top = -1; /* the program's highest layer */
  *groups = NULL;
  *n = 0;
  if (!r->lifetimes)
    return 0;
  for (size_t k = 0; k < p->n_kinds; k++)
    if (p->kinds[k].layer > top)
      top = p->kinds[k].layer;
  gs.words = (size_t)(top + 2 + 63) / 64;
  for (size_t i = 0; i < p->n_ops; i++) {
    const vs_pop *o = &p->ops[i];
    for (uint32_t k = o->first_effect, end = vs_op_effects_end(p, o); k < end;
         k++) {
      const vs_effect *e = &p->effects[k];
      const vs_buffer *b = vs_program_buffer(p, e->buffer);
      vs_peak_group *into;
      if (e->is_free || b->place != VS_PLACE_GPU ||
          !vs_effect_applies(e, r->step) ||
          !vs_rank_live_at_peak(r, e->buffer))
        continue;
      if (!(into = peak_group(&gs, p, o, b))) {
        free(gs.g);
        free(gs.seen);
        return VS_ENOMEM;
      }
      peak_group_add(&gs, into, p, o, b->bytes);
    }
  }
  free(gs.seen);
  if (gs.n)
    qsort(gs.g, gs.n, sizeof *gs.g, by_bytes_desc);
  *groups = gs.g;
  *n = gs.n;
  return 0;
}

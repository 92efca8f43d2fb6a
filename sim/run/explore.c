/* explore.c - evaluating candidates, alone or in parallel (see explore.h). */
#include "explore.h"

#include "cost.h"
#include "report.h"
#include "steady.h"
#include "units.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * One candidate
 * ------------------------------------------------------------------------ */

int vs_candidate_set(vs_candidate *c, const char *fmt, ...)
{
  va_list ap;
  int n;
  if (c->n_sets == VS_EXPLORE_MAX_SETS)
    return VS_EUSAGE;
  va_start(ap, fmt);
  n = vsnprintf(c->sets[c->n_sets], VS_EXPLORE_SET_MAX, fmt, ap);
  va_end(ap);
  if (n < 0 || n >= VS_EXPLORE_SET_MAX)
    return VS_EUSAGE;
  c->n_sets++;
  return 0;
}

static void invalid(vs_candidate *c, const char *why)
{
  c->status = VS_EVAL_INVALID;
  snprintf(c->reason, sizeof c->reason, "%s", why);
}

#define TOPOLOGY_PREFIX "topology."
#define TOPOLOGY_PREFIX_LEN (sizeof TOPOLOGY_PREFIX - 1)

static bool is_topology_set(const char *s)
{
  return strncmp(s, TOPOLOGY_PREFIX, TOPOLOGY_PREFIX_LEN) == 0;
}

void vs_explore_relabel(char *msg, size_t len, const char *assignment,
                        const char *as)
{
  static const char set[] = "--set ";
  char out[VS_ERROR_MSG_MAX];
  size_t key = strcspn(assignment, "="), n_as = strlen(as), used = 0;
  size_t cap = len < sizeof out ? len : sizeof out;
  const char *p;

  if (cap == 0)
    return;
  for (p = msg; *p && used + 1 < cap;) {
    const char *name = p + sizeof set - 1;
    if (strncmp(p, set, sizeof set - 1) == 0 &&
        strncmp(name, assignment, key) == 0 &&
        (name[key] == '=' || name[key] == ':' || name[key] == '\0')) {
      if (used + n_as + 1 > cap)
        break;
      memcpy(out + used, as, n_as);
      used += n_as;
      p = name;
    } else {
      out[used++] = *p++;
    }
  }
  out[used] = '\0';
  memcpy(msg, out, used + 1);
}

int vs_explore_set(vs_topology *topo, vs_workload *wl, const char *assignment,
                   vs_error *err)
{
  if (is_topology_set(assignment))
    return vs_topology_set(topo, assignment + TOPOLOGY_PREFIX_LEN, err);
  return vs_workload_set(wl, assignment, err);
}

bool vs_explore_is_list_key(const char *key)
{
  const vs_keytab *tab = vs_workload_keys();
  char section[64];
  const char *dot;
  int i;
  if (is_topology_set(key)) {
    tab = vs_topology_keys();
    key += TOPOLOGY_PREFIX_LEN;
  }
  dot = strchr(key, '.');
  if (!dot || (size_t)(dot - key) >= sizeof section)
    return false;
  memcpy(section, key, (size_t)(dot - key));
  section[dot - key] = '\0';
  i = vs_conf_find(tab, section, dot + 1);
  if (i < 0)
    return false;
  return tab->keys[i].type == VS_KEY_LIST || tab->keys[i].type == VS_KEY_RATES ||
         tab->keys[i].type == VS_KEY_LATENCIES ||
         tab->keys[i].type == VS_KEY_REALS ||
         tab->keys[i].type == VS_KEY_FLAGS;
}

/* The i-th of ex's base overrides followed by the n_extra of extra. */
static const char *nth_set(const vs_explore *ex,
                           const char (*extra)[VS_EXPLORE_SET_MAX], size_t i)
{
  return i < ex->n_sets ? ex->sets[i] : extra[i - ex->n_sets];
}

/* Where an override goes. */
typedef enum { SETS_TO_WORKLOAD, SETS_TO_TOPOLOGY } set_target;

/* Applies, in order, the overrides that go to `target`. */
static int apply_sets(const vs_explore *ex,
                      const char (*extra)[VS_EXPLORE_SET_MAX], size_t n_extra,
                      set_target target, vs_topology *topo, vs_workload *wl,
                      vs_error *err)
{
  bool topology = target == SETS_TO_TOPOLOGY;
  for (size_t i = 0; i < ex->n_sets + n_extra; i++) {
    const char *s = nth_set(ex, extra, i);
    int rc;
    if (is_topology_set(s) == topology &&
        (rc = vs_explore_set(topo, wl, s, err)))
      return rc;
  }
  return 0;
}

/* How far load goes: the parse stage alone, or on to resolved files. */
typedef enum { LOAD_PARSED, LOAD_RESOLVED } load_stage;

/* vs_explore_load, or only its parse stage (LOAD_PARSED). The order of
 * the checks (topology, then workload) decides which error a user sees
 * first. */
static int load(const vs_explore *ex, const char (*extra)[VS_EXPLORE_SET_MAX],
                size_t n_extra, uint64_t gpus, load_stage stage,
                vs_topology *topo, vs_workload *wl, vs_error *err)
{
  bool resolve = stage == LOAD_RESOLVED;
  bool parsed = ex->topology_base && ex->workload_base;
  int rc = 0;

  if (parsed)
    *topo = *ex->topology_base;
  else
    rc = vs_topology_load_base(topo, ex->topology, err);
  if (rc == 0)
    rc = apply_sets(ex, extra, n_extra, SETS_TO_TOPOLOGY, topo, wl, err);
  if (rc == 0 && resolve)
    rc = vs_topology_finish(topo, NULL, 0, VS_TOPO_CALIBRATED, err);
  if (rc == 0 && parsed)
    *wl = *ex->workload_base;
  else if (rc == 0)
    rc = vs_workload_load_base(wl, ex->workload, err);
  if (rc == 0)
    rc = apply_sets(ex, extra, n_extra, SETS_TO_WORKLOAD, topo, wl, err);
  if (rc == 0 && resolve)
    rc = vs_workload_finish(wl, NULL, 0, gpus, err);
  return rc;
}

int vs_explore_load(const vs_explore *ex,
                    const char (*extra)[VS_EXPLORE_SET_MAX], size_t n_extra,
                    uint64_t gpus, vs_topology *topo, vs_workload *wl,
                    vs_error *err)
{
  return load(ex, extra, n_extra, gpus, LOAD_RESOLVED, topo, wl, err);
}

int vs_explore_parse(const vs_explore *ex, vs_topology *topo, vs_workload *wl,
                     vs_error *err)
{
  return load(ex, NULL, 0, 0, LOAD_PARSED, topo, wl, err);
}

/* Simulates wl with its micro-batches per step replaced by m (global
 * batch adjusted to match), one rank per stage, with opts (its budget
 * ex's). */
static int simulate_as(vs_sim *sim, const vs_explore *ex,
                       const vs_workload *wl, const vs_topology *topo,
                       uint64_t m, vs_sim_opts opts, vs_program_pool *pool,
                       vs_error *err)
{
  vs_workload *copy = malloc(sizeof *copy);
  int rc;
  opts.budget = ex->budget;
  if (!copy)
    return vs_error_set(err, VS_ENOMEM, "out of host memory");
  *copy = *wl;
  copy->grad_accum = m;
  copy->training.global_batch = m * wl->training.micro_batch * wl->parallel.dp;
  rc = vs_sim_run_pooled(sim, copy, topo, &opts, pool, err);
  /* the simulation keeps pointers to its inputs; it is finished here, and
   * only its results (not the inputs) are read after this point */
  sim->wl = wl;
  free(copy);
  return rc;
}


/* The first node whose host memory or NVMe ran out, as a reason ("node 0
 * needs ... of host memory ([node] host_memory); out of it at ..."). */
static void node_oom_reason(vs_candidate *c, const vs_sim *sim)
{
  for (size_t i = 0; i < sim->n_nodes; i++)
    for (int p = VS_PLACE_HOST; p < VS_PLACE_N; p++) {
      const vs_node_mem *n = &sim->nodes[i];
      const vs_mem *m = &n->mem[p];
      char label[160] = "?", req[16], need[VS_BYTES_PAIR_LEN],
           cap[VS_BYTES_PAIR_LEN];
      if (!m->oom.happened)
        continue;
      for (size_t k = 0; k < sim->n_ranks; k++)
        if (sim->ranks[k].id == n->oom_rank[p])
          vs_report_op_label(sim, sim->ranks[k].prog, m->oom.op, label,
                             sizeof label);
      vs_format_bytes_pair(m->peak_allocated_bytes, m->capacity_bytes, need,
                           cap, sizeof need);
      snprintf(c->reason, sizeof c->reason,
               "node %u needs %s of %s (%s); out of %s at %s allocating %s "
               "of %s",
               n->node, need, cap,
               p == VS_PLACE_HOST ? "[node] host_memory"
                                  : "[node] nvme_capacity",
               p == VS_PLACE_HOST ? "host memory" : "NVMe", label,
               vs_format_bytes(m->oom.requested_bytes, req, sizeof req),
               vs_place_category_name(p, m->oom.category));
      return;
    }
}

/* The first out-of-memory of a simulation that does not fit, as a reason
 * ("rank 0 (stage 0) needs ... out of memory at ..."). */
static void oom_reason(vs_candidate *c, const vs_sim *sim)
{
  for (size_t i = 0; i < sim->n_ranks && !sim->fits; i++) {
    const vs_rank *r = &sim->ranks[i];
    char label[160], req[16], need[VS_BYTES_PAIR_LEN], cap[VS_BYTES_PAIR_LEN];
    if (!r->mem.oom.happened)
      continue;
    vs_report_op_label(sim, r->prog, r->mem.oom.op, label, sizeof label);
    vs_format_bytes_pair(r->mem.peak_used_bytes, r->mem.capacity_bytes, need,
                         cap, sizeof need);
    vs_format_bytes(r->mem.oom.requested_bytes, req, sizeof req);
    if (r->mem.oom.earlier_run) /* the figures are the step's, run alone */
      snprintf(c->reason, sizeof c->reason,
               "rank %u (stage %d) runs out of memory in the first step at "
               "%s allocating %s of %s; run alone, the step after it peaks "
               "at %s of %s",
               r->id, r->stage, label, req,
               vs_category_name(r->mem.oom.category), need, cap);
    else
      snprintf(c->reason, sizeof c->reason,
               "rank %u (stage %d) needs %s of %s; out of memory at %s "
               "allocating %s of %s",
               r->id, r->stage, need, cap, label, req,
               vs_category_name(r->mem.oom.category));
    return;
  }
  node_oom_reason(c, sim);
}

/* A simulation that fits with less than the reserve free, as a reason
 * ("rank 0 (stage 0) peaks at ..., less than [runtime] reserve's ..."). */
static void tight_reason(vs_candidate *c, const vs_sim *sim)
{
  const vs_rank *worst = vs_sim_worst_rank(sim);
  char used[VS_BYTES_PAIR_LEN], cap[VS_BYTES_PAIR_LEN], keep[16];
  vs_format_bytes_pair(worst->mem.peak_used_bytes, worst->mem.capacity_bytes,
                       used, cap, sizeof used);
  snprintf(c->reason, sizeof c->reason,
           "rank %u (stage %d) peaks at %s of %s, less than [runtime] "
           "reserve's %s free",
           worst->id, worst->stage, used, cap,
           vs_format_bytes(sim->reserve_bytes, keep, sizeof keep));
}

/* c->need_ratio from its worst rank (c->worst) and sim's nodes. */
static void need_ratio(vs_candidate *c, const vs_sim *sim)
{
  c->need_ratio = c->worst.capacity_bytes ? (double)c->worst.peak_used_bytes /
                                                (double)c->worst.capacity_bytes
                                          : 0;
  for (size_t i = 0; i < sim->n_nodes; i++)
    for (int p = VS_PLACE_HOST; p < VS_PLACE_N; p++) {
      const vs_mem *m = &sim->nodes[i].mem[p];
      double r = m->capacity_bytes ? (double)m->peak_allocated_bytes /
                                         (double)m->capacity_bytes
                                   : 0;
      if (m->oom.happened && r > c->need_ratio)
        c->need_ratio = r;
    }
}

/* Records sim's outcome with the job's step `step` (sim may have run fewer
 * micro-batches than wl: its step extrapolated). timed is false when a
 * screening simulation stopped at an out-of-memory: its end is not a step
 * (0 when it stopped in setup), so the step and everything divided by it
 * stay unknown rather than becoming inf or nan. */
static void record_outcome(vs_candidate *c, const vs_sim *sim,
                           const vs_workload *wl, const vs_topology *topo,
                           double step, bool timed)
{
  const vs_rank *worst = vs_sim_worst_rank(sim), *paging;
  vs_rates rates;
  timed = timed && step > 0;
  vs_summary_of(sim, worst, &c->worst);
  c->worst.timed = timed;
  c->worst.step_time_s = timed ? step : 0;
  c->status = !sim->fits ? VS_EVAL_OOM : sim->tight ? VS_EVAL_TIGHT
                                                    : VS_EVAL_FITS;
  c->total_gpus = wl->gpus;
  c->dp = wl->parallel.dp;
  c->timed = timed;
  c->step_time_s = timed ? step : 0;
  /* the job's (all wl->grad_accum micro-batches, not the fewer that sim
   * ran before its step was extrapolated) */
  rates = vs_sim_rates(sim, wl->grad_accum, timed ? step : 0);
  c->tokens_per_s = rates.tokens_per_s;
  c->mfu = rates.mfu;
  c->usd_per_step =
      timed ? vs_cost_usd(topo->usd_per_gpu_hour, wl->gpus, step) : 0;
  need_ratio(c, sim);
  paging = vs_sim_most_paged_out(sim);
  c->paged_out_bytes = paging ? vs_rank_paged_out_bytes(paging) : 0;
  c->reason[0] = '\0';
  oom_reason(c, sim);
  if (c->status == VS_EVAL_TIGHT)
    tight_reason(c, sim);
}

/* record_outcome of a screen that stopped at an out-of-memory: no step. */
static void record_untimed(vs_candidate *c, const vs_sim *sim,
                           const vs_workload *wl, const vs_topology *topo)
{
  record_outcome(c, sim, wl, topo, 0, false);
}

/* A simulation of candidate c that failed with rc: c is invalid, with
 * err's message; the code passes on only when it is the host's
 * (VS_ENOMEM), not the candidate's. */
static int simulation_failed(vs_candidate *c, int rc, const vs_error *err)
{
  invalid(c, err->msg);
  return rc == VS_ENOMEM ? rc : 0;
}

/* Simulates every one of wl's micro-batches (screening: stopping at the
 * first out-of-memory, when `screening`) and records the outcome. */
static int explore_whole(const vs_explore *ex, vs_candidate *c,
                         const vs_workload *wl, const vs_topology *topo,
                         bool screening, vs_program_pool *pool)
{
  vs_sim a;
  vs_error err;
  int rc;
  vs_error_clear(&err);
  if ((rc = simulate_as(&a, ex, wl, topo, wl->grad_accum,
                        (vs_sim_opts){.stop_at_oom = screening}, pool, &err)))
    return simulation_failed(c, rc, &err);
  record_outcome(c, &a, wl, topo, a.step_time_s, !a.stats.stopped);
  vs_sim_fini(&a);
  return 0;
}

/* The fewest micro-batches an extrapolation starts from: a step's only
 * micro-batch is both its first, whose backward writes the gradients,
 * and its last, whose backward the reductions run under, so the step of
 * one is no point on the line through longer steps (under hf's eager
 * kernels every backward but the first adds the gradients to those
 * before, and the shorter first one hides less of the reductions: plan
 * had Bert-Large's 4 micro-batches on 16 GPUs 8% short of vsim run).
 * From 2 on each further micro-batch is a middle one, whatever pp. */
#define EXTRAPOLATE_FROM 2u

/* Past the pipeline's warm-up every further round of pp micro-batches
 * adds the same time and no memory: the step of wl's micro-batches is
 * extrapolated from cap and cap + pp (screening simulations). */
static int explore_extrapolated(const vs_explore *ex, vs_candidate *c,
                                const vs_workload *wl,
                                const vs_topology *topo, uint64_t cap,
                                vs_program_pool *pool)
{
  uint64_t m = wl->grad_accum, step_mbs = wl->parallel.pp;
  const vs_sim_opts screening = {.stop_at_oom = true};
  vs_sim a, b;
  vs_error err;
  double step_a;
  bool stopped_a;
  int rc;
  vs_error_clear(&err);
  if ((rc = simulate_as(&a, ex, wl, topo, cap, screening, pool, &err)))
    return simulation_failed(c, rc, &err);
  step_a = a.step_time_s;
  stopped_a = a.stats.stopped;
  if (stopped_a && wl->parallel.virtual_stages == 1) {
    /* cap micro-batches already run out of memory, and under 1F1B cap +
     * pp micro-batches repeat them before adding rounds that need no
     * more: the job does not fit, and b could only say so again.
     * (Interleaved warm-up runs every forward of cap first, so there b's
     * first out-of-memory can be a different op.) */
    record_untimed(c, &a, wl, topo);
    vs_sim_fini(&a);
    return 0;
  }
  vs_sim_fini(&a); /* b reuses its programs */
  if ((rc = simulate_as(&b, ex, wl, topo, cap + step_mbs, screening, pool,
                        &err)))
    return simulation_failed(c, rc, &err);
  record_outcome(c, &b, wl, topo,
                 step_a + (double)(m - cap) / (double)step_mbs *
                              (b.step_time_s - step_a),
                 !stopped_a && !b.stats.stopped);
  c->extrapolated = c->timed; /* nothing was, without a step */
  vs_sim_fini(&b);
  return 0;
}

/* Rounds of 1F1B past stage 0's warm-up that the steady-state proof
 * simulates: snapshots at the start of each (engine/steady.h) need two
 * whose micro-batches repeat, a period apart and away from the step's
 * last two. Stages of equal layers prove a period of 1 to 3 within 8;
 * the 530B search's uneven splits over 16 and 32 stages prove their 9
 * at stage 0's ninth or tenth steady round, within 12 (tests/bench/
 * mtnlg-530b-search.ini). */
#define STEADY_ROUNDS 8
#define STEADY_ROUNDS_UNEVEN 12

/* Extra micro-batches of a step over stages of equal layers are padded to
 * a multiple of 12, which every period they prove (1 to 3 in the 530B
 * search) divides; another is screened again (explore_steady). */
#define STEADY_EVEN_MULTIPLE 12

/* How many of wl's pp stages hold the most layers (pp: all alike). */
static uint64_t heaviest_stages(const vs_workload *wl)
{
  uint64_t pp = wl->parallel.pp, most = 0, n = 0;
  for (uint64_t g = 0; g < pp; g++) {
    uint64_t size = vs_workload_chunk_size(wl, pp, g);
    if (size > most)
      most = size, n = 0;
    n += size == most;
  }
  return n;
}

/* The period the step's micro-batches beyond the simulated are made a
 * multiple of (steady_mbs), from the `heaviest` of its pp stages (those
 * with the most layers), as the proof can only add whole periods:
 * STEADY_EVEN_MULTIPLE for stages of equal layers; for unequal ones the
 * number of stages with the most layers, the period the 530B search's
 * splits settle into (9 stages of 7 layers over 16, 9 of 4 over 32; a
 * 22-layer GPT's 6 of 3 over 8 does too, tests/simulate_test.c), though
 * not every split (19 layers over 8 stages, 3 of 3, prove 2 or 3): a
 * guess for the micro-batches to simulate, where another period proven
 * is screened again (explore_steady), so that what is told never rests
 * on it. 0 above VS_STEADY_PERIOD_MAX: no screen, a choice of cost (the
 * 530B's 41 stages of 2 over 64 repeat only every 123 micro-batches at
 * tp 8, and every screen of them would be lost; a split of more such
 * stages that would prove a short period is extrapolated instead). */
static uint64_t steady_period_guess(uint64_t heaviest, uint64_t pp)
{
  if (heaviest == pp)
    return STEADY_EVEN_MULTIPLE;
  return heaviest <= VS_STEADY_PERIOD_MAX ? heaviest : 0;
}

/* m, or up to period - 1 more: the fewest from m on whose step wl's is
 * longer than by a multiple of period (m when wl's is no longer). */
static uint64_t padded_mbs(const vs_workload *wl, uint64_t m, uint64_t period)
{
  return wl->grad_accum > m ? m + (wl->grad_accum - m) % period : m;
}

/* Whether a steady screen of m micro-batches is worth trying for wl: a
 * 1F1B pipeline (the order steady.h watches), a step longer than m, and
 * m fewer than the `alternative` the bounded path simulates without a
 * proof (the whole step, or explore_extrapolated's cap + (cap + pp)). A
 * second screen is judged alone: the first's micro-batches are spent
 * whichever follows. */
static bool steady_pays(const vs_workload *wl, uint64_t m,
                        uint64_t alternative)
{
  return wl->parallel.schedule == VS_SCHED_1F1B &&
         wl->parallel.virtual_stages == 1 && m && wl->grad_accum > m &&
         m < alternative;
}

/* What the setup screen (setup_screened) found. */
typedef struct setup_screen {
  bool done;        /* it decided the outcome, and recorded it */
  bool ran;         /* it simulated; first_step says */
  bool first_step;  /* the job simulates its first step
                       (vs_sim_runs_first_step) */
} setup_screen;

/* The micro-batches explore_steady first screens wl's step with, after
 * the setup screen, on a bounded path of `alternative` micro-batches: pp
 * + its rounds, padded to its period guess; 0 for no screen: where there
 * is no guess, where it does not pay (steady_pays), and for stages of
 * unequal layers in a job that the setup screen did not find free of a
 * first step. One that simulates its first step runs all of it before
 * the step, and where the step's setup then runs out of memory (most of
 * the 530B search's ZeRO-0 layouts of 16 and 32 stages), the pp + 12 or
 * more micro-batches of the steady screen's first step cost more than
 * the pp of the extrapolation's first (callgrind: 2.0 and 1.26 times the
 * instructions), more than the proof saves where it fits. */
static uint64_t steady_mbs(const vs_workload *wl, const setup_screen *screen,
                           uint64_t alternative)
{
  uint64_t pp = wl->parallel.pp, heaviest = heaviest_stages(wl), m;
  uint64_t period = steady_period_guess(heaviest, pp);
  bool even = heaviest == pp;
  if (!period || (!even && (!screen->ran || screen->first_step)))
    return 0;
  m = padded_mbs(wl, pp + (even ? STEADY_ROUNDS : STEADY_ROUNDS_UNEVEN),
                 period);
  return steady_pays(wl, m, alternative) ? m : 0;
}

/* One steady screen of wl's step with m micro-batches into s. */
static int steady_screen(const vs_explore *ex, vs_sim *s,
                         const vs_workload *wl, const vs_topology *topo,
                         uint64_t m, vs_program_pool *pool, vs_error *err)
{
  return simulate_as(s, ex, wl, topo, m,
                     (vs_sim_opts){.stop_at_oom = true,
                                   .steady_to = wl->grad_accum},
                     pool, err);
}

/* Screens wl's step with m (steady_mbs) micro-batches, watching for its
 * steady state (engine/steady.h); a period proven that the step's extra
 * micro-batches are no multiple of is screened again with up to period
 * - 1 more micro-batches, which makes them one, where that screen costs
 * less than the `alternative` (steady_pays; a job with a first step
 * reports no such period). When proven,
 * the step time is the whole step's, exactly, and the memory that of the
 * micro-batches simulated: every stage's whole warm-up, steady rounds
 * and the cool-down (the caching allocator's blocks are not part of the
 * proof), so the outcome is recorded as extrapolated (plan confirms it
 * with every micro-batch) and *done. Out of memory first, which more
 * micro-batches under 1F1B only repeat (as explore_extrapolated says),
 * it is recorded too. Otherwise the caller extrapolates. */
static int explore_steady(const vs_explore *ex, vs_candidate *c,
                          const vs_workload *wl, const vs_topology *topo,
                          uint64_t m, uint64_t alternative,
                          vs_program_pool *pool, bool *done)
{
  uint64_t again;
  vs_sim s;
  vs_error err;
  int rc;
  *done = false;
  vs_error_clear(&err);
  if ((rc = steady_screen(ex, &s, wl, topo, m, pool, &err)))
    return simulation_failed(c, rc, &err);
  again = s.steady_period ? padded_mbs(wl, m, s.steady_period) : 0;
  if (again && steady_pays(wl, again, alternative)) {
    vs_sim_fini(&s); /* the next reuses its programs */
    if ((rc = steady_screen(ex, &s, wl, topo, again, pool, &err)))
      return simulation_failed(c, rc, &err);
  }
  if ((*done = s.stats.stopped || s.steady_proven)) {
    record_outcome(c, &s, wl, topo, s.step_time_s, !s.stats.stopped);
    c->extrapolated = c->timed; /* its memory, not its time */
  }
  vs_sim_fini(&s);
  return 0;
}

/* The bounded path's micro-batches from which the setup screen runs. The
 * screen builds only the setup and first units, but its own model, layout
 * and programs, so it repays itself only before paths longer than a
 * micro-batch or two (callgrind, plan --jobs 1: from 4 rather than 32,
 * Llama-2-7B's search on 8 GPUs, where no layout runs out in its setup,
 * takes 2.7% more instructions and the 530B search on 16 GPUs 52% fewer;
 * from 1, +8.0% and -61%). Outcomes are the same either way. */
#define SETUP_SCREEN_FROM 4

/* A screening simulation of the setup and each stage's first unit
 * (micro-batch 0's forward; 1F1B, not interleaved), built alone
 * (vs_sim_opts first_unit_only): when it runs out of memory in the setup
 * alone, so does the bounded one, with the same state: at time 0 every
 * rank starts only the ops without dependencies, which are the setup's
 * and the first unit's (an op of a later unit that opens its stream
 * waits for another: vs_job first_unit_only), and the first unit is the
 * same whatever the micro-batches, so the ops that ran are the same
 * setup ops with the same bytes (with the first step: its setup, and
 * then the step's run alone from an empty cache, vs_sim_stopped_in_setup).
 * Records that outcome (screen->done) and spares building the bounded
 * simulation's programs (`bounded_mbs` micro-batches in all); out of
 * memory at setup is most of a large search's layouts. */
static int setup_screened(const vs_explore *ex, vs_candidate *c,
                          const vs_workload *wl, const vs_topology *topo,
                          uint64_t bounded_mbs, vs_program_pool *pool,
                          setup_screen *screen)
{
  vs_sim a;
  vs_error err;
  int rc;
  *screen = (setup_screen){0};
  vs_error_clear(&err);
  if (wl->parallel.virtual_stages > 1 || bounded_mbs < SETUP_SCREEN_FROM)
    return 0;
  if ((rc = simulate_as(&a, ex, wl, topo, 1,
                        (vs_sim_opts){.stop_at_oom = true,
                                      .first_unit_only = true},
                        pool, &err)))
    return rc == VS_ENOMEM ? rc : 0; /* the bounded one will say */
  screen->ran = true;
  screen->first_step = vs_sim_runs_first_step(&a);
  if ((screen->done = vs_sim_stopped_in_setup(&a)))
    record_untimed(c, &a, wl, topo);
  vs_sim_fini(&a);
  return 0;
}

/* vs_explore_one with the programs of its simulations built in pool: a
 * bounded search (ex->max_microbatches, not GPipe) first screens the setup
 * (setup_screened), then proves a 1F1B pipeline's steady state where that
 * pays (steady_mbs, explore_steady), else extrapolates a step longer
 * than cap + pp micro-batches (cap in whole pipeline rounds, as
 * interleaving needs); everything else is simulated whole. */
static int explore_one(const vs_explore *ex, vs_candidate *c,
                       vs_program_pool *pool)
{
  vs_topology *topo = malloc(sizeof *topo);
  vs_workload *wl = malloc(sizeof *wl);
  vs_error err;
  uint64_t cap, step_mbs, bounded_mbs, steady = 0;
  bool bounded, whole, done = false;
  setup_screen screen = {0};
  int rc = 0;

  vs_error_clear(&err);
  if (!topo || !wl) {
    free(topo);
    free(wl);
    return VS_ENOMEM;
  }
  if ((rc = vs_explore_load(ex, c->sets, c->n_sets, c->gpus, topo, wl,
                            &err))) {
    rc = simulation_failed(c, rc, &err);
  } else {
    step_mbs = wl->parallel.pp;
    cap = ex->max_microbatches;
    bounded = cap && wl->parallel.schedule != VS_SCHED_GPIPE;
    if (bounded)
      cap = vs_div_ceil(cap > EXTRAPOLATE_FROM ? cap : EXTRAPOLATE_FROM,
                        step_mbs) *
            step_mbs;
    whole = !bounded || wl->grad_accum <= cap + step_mbs;
    bounded_mbs = whole ? wl->grad_accum : 2 * cap + step_mbs;
    rc = bounded ? setup_screened(ex, c, wl, topo, bounded_mbs, pool, &screen)
                 : 0;
    done = screen.done;
    if (!rc && !done && bounded)
      steady = steady_mbs(wl, &screen, bounded_mbs);
    if (steady)
      rc = explore_steady(ex, c, wl, topo, steady, bounded_mbs, pool, &done);
    if (!rc && !done)
      rc = whole ? explore_whole(ex, c, wl, topo, bounded, pool)
                 : explore_extrapolated(ex, c, wl, topo, cap, pool);
  }
  free(topo);
  free(wl);
  return rc;
}

int vs_explore_one(const vs_explore *ex, vs_candidate *c)
{
  vs_program_pool pool = {NULL, 0};
  int rc = explore_one(ex, c, &pool);
  vs_program_pool_fini(&pool);
  return rc;
}

/* ------------------------------------------------------------------------
 * Many candidates on worker threads
 * ------------------------------------------------------------------------ */

typedef struct pool {
  const vs_explore *ex;
  vs_candidate *cands;
  size_t n;
  size_t next;          /* next candidate to take */
  size_t done;          /* candidates finished */
  int rc;               /* first host failure */
  pthread_mutex_t lock;
} pool;

static void progress(pool *p)
{
  char bar[41];
  size_t filled;
  if (!p->ex->progress)
    return;
  filled = p->n ? p->done * (sizeof bar - 1) / p->n : sizeof bar - 1;
  memset(bar, '#', filled);
  memset(bar + filled, '.', sizeof bar - 1 - filled);
  bar[sizeof bar - 1] = '\0';
  fprintf(stderr, "\r%s [%s] %zu/%zu simulated (%3.0f%%)", p->ex->what, bar,
          p->done, p->n, 100.0 * (double)p->done / (double)(p->n ? p->n : 1));
  if (p->done == p->n)
    fputc('\n', stderr);
  fflush(stderr);
}

static void *worker(void *arg)
{
  pool *p = arg;
  vs_program_pool programs = {NULL, 0}; /* this thread's, reused */
  for (;;) {
    size_t i;
    int rc;
    pthread_mutex_lock(&p->lock);
    i = p->rc ? p->n : p->next++;
    pthread_mutex_unlock(&p->lock);
    if (i >= p->n) {
      vs_program_pool_fini(&programs);
      return NULL;
    }
    rc = explore_one(p->ex, &p->cands[i], &programs);
    pthread_mutex_lock(&p->lock);
    p->done++;
    if (rc && !p->rc)
      p->rc = rc;
    if (p->done % 16 == 0 || p->done == p->n)
      progress(p);
    pthread_mutex_unlock(&p->lock);
  }
}

int vs_explore_all(const vs_explore *ex, vs_candidate *cands, size_t n,
                   vs_error *err)
{
  vs_explore parsed = *ex;
  pool p = {&parsed, cands, n, 0, 0, 0, PTHREAD_MUTEX_INITIALIZER};
  unsigned jobs = ex->jobs ? ex->jobs : 1;
  pthread_t threads[VS_EXPLORE_JOBS_MAX];
  unsigned started = 0;
  vs_topology *topo = NULL;
  vs_workload *wl = NULL;
  vs_error ignored;

  /* Parse the two files once; every candidate copies them. When either
   * does not parse, candidates parse it themselves and carry the error. */
  if (!ex->topology_base || !ex->workload_base) {
    topo = malloc(sizeof *topo);
    wl = malloc(sizeof *wl);
    if (topo && wl && vs_topology_load_base(topo, ex->topology, &ignored) == 0 &&
        vs_workload_load_base(wl, ex->workload, &ignored) == 0) {
      parsed.topology_base = topo;
      parsed.workload_base = wl;
    }
  }

  if (jobs > VS_EXPLORE_JOBS_MAX)
    jobs = VS_EXPLORE_JOBS_MAX;
  for (unsigned t = 1; t < jobs; t++) {
    if (pthread_create(&threads[started], NULL, worker, &p) != 0)
      break;
    started++;
  }
  worker(&p); /* this thread works too */
  for (unsigned t = 0; t < started; t++)
    pthread_join(threads[t], NULL);
  pthread_mutex_destroy(&p.lock);
  free(topo);
  free(wl);
  if (p.rc)
    return vs_error_set(err, p.rc, "out of host memory while simulating");
  return 0;
}
